"""The passes, in pipeline order. Each lives in its own module with its docs and cases.

Importing this package is cheap: the pass ids and their one-line summaries are a table
here, so the command line can validate ``--select``/``--ignore`` and list the rules
without importing libcst. ``PASSES``, ``get_pass`` and the base classes are loaded on
first use (module ``__getattr__``); a test checks the table against the classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ndif_opt.passes.base import Case, Context, Pass, RawFinding

# (id, summary) in pipeline order; the summary is the first line of the pass class's
# docstring without the "id: " prefix. Keep in step with `_load` below.
PASS_TABLE: tuple[tuple[str, str], ...] = (
    ("migrate-api", "rewrite code written for the pre-0.5 nnsight API (and transformers < 5)."),
    ("session-hoisting", "one remote request for a loop (or run) of remote traces."),
    ("accumulator-relocation", "create containers filled in a remote block inside it."),
    ("reduction-pushdown", "download the reduced value, not the tensor it came from."),
    ("detach-cpu", "`.detach().cpu()` before saving a tensor in a remote block."),
    ("invoke-batching", "the iterations of a loop of traces as invokes of one trace."),
    ("trace-fusion", "one trace for a loop that only reads activations of the same input."),
    ("skip-insertion", "compute the layers before a patched layer once, then `.skip()` them."),
    ("session-chunking", "keep every request under NDIF's one-hour limit."),
)
PASS_IDS: tuple[str, ...] = tuple(pass_id for pass_id, _ in PASS_TABLE)
_LAZY = ("PASSES", "Case", "Context", "Pass", "RawFinding")


def _load() -> dict:
    from ndif_opt.passes.accumulator_relocation import AccumulatorRelocation
    from ndif_opt.passes.base import Case, Context, Pass, RawFinding
    from ndif_opt.passes.detach_cpu import DetachCpu
    from ndif_opt.passes.invoke_batching import InvokeBatching
    from ndif_opt.passes.migrate_api import MigrateApi
    from ndif_opt.passes.reduction_pushdown import ReductionPushdown
    from ndif_opt.passes.session_chunking import SessionChunking
    from ndif_opt.passes.session_hoisting import SessionHoisting
    from ndif_opt.passes.skip_insertion import SkipInsertion
    from ndif_opt.passes.trace_fusion import TraceFusion

    # The fixed order of the pipeline. migrate-api is opt-in (`--migrate`): it brings
    # pre-0.5 code to the current API before anything else looks at it.
    passes: tuple[type[Pass], ...] = (
        MigrateApi,
        SessionHoisting,
        AccumulatorRelocation,
        ReductionPushdown,
        DetachCpu,
        InvokeBatching,
        TraceFusion,
        SkipInsertion,
        SessionChunking,  # last: it sizes each chunk by the work the other passes leave
    )
    return {"PASSES": passes, "Case": Case, "Context": Context, "Pass": Pass, "RawFinding": RawFinding}


def __getattr__(name: str):
    if name in _LAZY:
        loaded = _load()
        globals().update(loaded)
        return loaded[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_pass(pass_id: str) -> type[Pass]:
    passes = globals().get("PASSES") or __getattr__("PASSES")
    for cls in passes:
        if cls.id == pass_id:
            return cls
    raise KeyError(pass_id)


__all__ = ["PASSES", "PASS_IDS", "PASS_TABLE", "Case", "Context", "Pass", "RawFinding", "get_pass"]

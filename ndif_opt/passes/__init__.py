"""The passes, in pipeline order. Each lives in its own module (or package) with its docs and cases.

``PASS_MODULES`` is the one list of the passes: their order in the pipeline, the CLI's ids
(a pass's id is its module's name, ``migrate_api`` -> ``migrate-api``), the docs. Importing
this package is cheap: the command line validates ``--select``/``--ignore`` from
``PASS_IDS`` without importing libcst. ``PASSES`` (the classes, which declare everything
else the pipeline needs: ``Pass.opt_in``, ``Pass.runs_first_once``...) and the base
classes are loaded on first use (module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ndif_opt.passes.base import Case, Context, Pass, RawFinding

PASS_MODULES: tuple[str, ...] = (
    # a check, in every mode: runs once, on the code as written (pre-0.5 code too)
    "nnsight_05_failures",
    # opt-in (`--migrate`): brings pre-0.5 code to the current API before anything else looks at it
    "migrate_api",
    "session_hoisting",
    "accumulator_relocation",
    "reduction_pushdown",
    "detach_cpu",
    "invoke_batching",
    "trace_fusion",
    "skip_insertion",
    "session_chunking",  # last: it sizes each chunk by the work the other passes leave
)
PASS_IDS: tuple[str, ...] = tuple(module.replace("_", "-") for module in PASS_MODULES)
_LAZY = ("PASSES", "Case", "Context", "Pass", "RawFinding")


def _load() -> dict:
    from ndif_opt.passes.base import Case, Context, Pass, RawFinding

    passes = tuple(_pass_of(importlib.import_module(f"{__name__}.{module}"), Pass) for module in PASS_MODULES)
    return {"PASSES": passes, "Case": Case, "Context": Context, "Pass": Pass, "RawFinding": RawFinding}


def _pass_of(module, base: type) -> type:
    """The one Pass class a pass module defines."""
    found = [value for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, base) and value.__module__ == module.__name__]
    if len(found) != 1:
        raise ImportError(f"{module.__name__} must define one Pass class, not {len(found)}")
    return found[0]


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


__all__ = ["PASSES", "PASS_IDS", "PASS_MODULES", "Case", "Context", "Pass", "RawFinding", "get_pass"]

"""The passes, in pipeline order. Each lives in its own module with its docs and cases."""

from __future__ import annotations

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
PASSES: tuple[type[Pass], ...] = (
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
PASS_IDS: tuple[str, ...] = tuple(p.id for p in PASSES)


def get_pass(pass_id: str) -> type[Pass]:
    for cls in PASSES:
        if cls.id == pass_id:
            return cls
    raise KeyError(pass_id)


__all__ = ["PASSES", "PASS_IDS", "Case", "Context", "Pass", "RawFinding", "get_pass"]

"""The passes, in pipeline order. Each lives in its own module with its docs and cases."""

from __future__ import annotations

from ndif_opt.passes.accumulator_relocation import AccumulatorRelocation
from ndif_opt.passes.base import Case, Context, Pass, RawFinding
from ndif_opt.passes.detach_cpu import DetachCpu
from ndif_opt.passes.reduction_pushdown import ReductionPushdown
from ndif_opt.passes.session_hoisting import SessionHoisting

# The fixed order of the pipeline; later issues add reduction-pushdown, detach-cpu,
# invoke-batching, trace-fusion and skip-insertion in their places.
PASSES: tuple[type[Pass], ...] = (
    SessionHoisting,
    AccumulatorRelocation,
    ReductionPushdown,
    DetachCpu,
)
PASS_IDS: tuple[str, ...] = tuple(p.id for p in PASSES)


def get_pass(pass_id: str) -> type[Pass]:
    for cls in PASSES:
        if cls.id == pass_id:
            return cls
    raise KeyError(pass_id)


__all__ = ["PASSES", "PASS_IDS", "Case", "Context", "Pass", "RawFinding", "get_pass"]

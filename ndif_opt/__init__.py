"""ndif-opt: an optimizing source-to-source transpiler for nnsight scripts run on NDIF.

The library API is one pure function, :func:`optimize`: source text in, a
:class:`Result` (rewritten code, findings with ranges, per-pass costs, edits) out.
No I/O, no printing, deterministic — it is what the CLI and the editor server call.
"""

from ndif_opt.api import optimize
from ndif_opt.types import Cost, Edit, Finding, PassCost, Position, Range, Result, Safety, Status
from ndif_opt.version import VERSION


def load_ipython_extension(ipython):
    """``%load_ext ndif_opt``: see :mod:`ndif_opt.frontends.jupyter` (imported only here)."""
    from ndif_opt.frontends.jupyter import load_ipython_extension as load

    return load(ipython)


def unload_ipython_extension(ipython):
    from ndif_opt.frontends.jupyter import unload_ipython_extension as unload

    unload(ipython)


__all__ = [
    "optimize",
    "Cost",
    "Edit",
    "Finding",
    "PassCost",
    "Position",
    "Range",
    "Result",
    "Safety",
    "Status",
]
__version__ = VERSION

"""nnsight-05-failures: `remote=` on a block inside a session that runs on NDIF."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.reports import block_label
from ndif_opt.syntax.rewrite import without_remote
from ndif_opt.wording import tense


def inner_remote_flags(facts: Facts, context: Context) -> set[int]:
    """Report each block with a `remote=` of its own inside a session that may run on NDIF;
    the ids of the calls whose `remote=` is dropped (the session decides where it runs)."""
    dropped: set[int] = set()
    for block in facts.blocks:
        session = block.outermost
        flag = block.remote
        if block.parent is None or session.remote.state is Remote.NO or flag.expr is None or flag.state is Remote.NO:
            continue
        where = f"`remote={flag.code}` on {block_label(block)} inside `{session.model}.session(...)`"
        why = ("the session already runs on NDIF, and the inner call would open a second request from inside "
               "the server, which NDIF refuses")
        if not context.allows(flag.expr, f"{where}: {why}"):
            continue
        if _same_place(block, session) and not flag.via_kwargs:
            dropped.add(id(block.call))
            context.applied(flag.expr, f"{tense('dropped', 'would drop')} {where}: {why}")
        else:
            reason = ("`remote=` comes through `**kwargs`" if flag.via_kwargs else
                      f"`{flag.code}` may differ from the session's `{session.remote.code}`")
            context.skipped(flag.expr, f"{where}: {why}", f"{reason}: drop it by hand (the session decides where "
                            "it runs)")
    return dropped


def _same_place(block: Block, session: Block) -> bool:
    """Does the block ask to run where its session runs (then its flag only repeats it)?"""
    return session.remote.state is Remote.YES or block.remote.code == session.remote.code


class FlagsDropped(cst.CSTTransformer):
    """The calls of :func:`inner_remote_flags` without their `remote=`."""

    def __init__(self, calls: set[int]) -> None:
        super().__init__()
        self.calls = calls

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        return without_remote(updated_node) if id(original_node) in self.calls else updated_node

"""What nnsight-05-failures' checks share: a failure reported, a block's label, a trace's invokes,
the hooks of a module (`.output`, `.input`)."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, opens_invoke
from ndif_opt.cost.module_values import INPUT, OUTPUT
from ndif_opt.passes.base import Context, RawFinding
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.types import Safety, Status


def report_failure(context: Context, node: cst.CSTNode, message: str, reason: str,
                   uses: tuple[cst.CSTNode, ...] = ()) -> None:
    """A failure the check reports (unless a suppression comment covers it)."""
    if context.allows(node, message):
        context.findings.append(RawFinding(node, message, Status.SKIPPED, Safety.SAFE, reason, uses=uses))


def block_label(block: Block) -> str:
    return f"`{block.model}.{block.method}(...)`"


def invokes_of(block: Block) -> list[cst.With]:
    tracer = block.tracer_name
    return [node for node in find_nodes(block.node.body, lambda n: opens_invoke(n, tracer))
            if isinstance(node, cst.With)]


MODULE_HOOKS = {"output": OUTPUT, "input": INPUT, "inputs": INPUT}

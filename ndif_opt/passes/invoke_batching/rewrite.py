"""invoke-batching's rewrite: the loop of traces as invokes of one trace."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.passes.common.sweeps import Sweep, index_of, with_leading
from ndif_opt.passes.invoke_batching.iterations import iteration_split
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import DropElementSaves, reindentable


def _rebinds(stmt: cst.BaseStatement, names: set[str], facts: Facts) -> bool:
    """Does ``stmt`` assign one of ``names`` alone (`x = ...`), anywhere inside?"""
    for node in index_of(stmt).nodes:
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Name) and target.value in names:
                return True
    return False


def batched_loop(sweep: Sweep, names: list[str], chunk: int | None, unsaved: set[str], facts: Facts):
    loop, trace = sweep.loop, sweep.block.node
    tracer = names[0]

    split = iteration_split(sweep, facts)

    def build(_stmts):
        drop = DropElementSaves(set(), rebinds=unsaved)

        def moved(stmts):
            # `drop` only changes `x = ....save()` for the unsaved names: skip the others
            return [reindentable(s.visit(drop) if _rebinds(s, unsaved, facts) else s) for s in stmts]

        inner = list(sweep.inner)
        if split.rest_of_pre:
            inner[0] = with_leading(inner[0], trace.leading_lines)
        body = moved(split.rest_of_pre + inner + sweep.post)
        # the inputs go to the invoke, a generation's keywords to the one generate
        inputs = [a for a in sweep.block.call.args if a.keyword is None]
        if len(inputs) < len(sweep.block.call.args):  # (else as written, comments kept)
            inputs[-1] = inputs[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        call = cst.Call(
            func=cst.Attribute(value=cst.Name(tracer), attr=cst.Name("invoke")),
            args=inputs,
        )
        item = trace.items[0].with_changes(item=call, asname=None)
        invoke = trace.with_changes(
            items=[item],
            leading_lines=[] if split.rest_of_pre else trace.leading_lines,
            body=trace.body.with_changes(body=body, footer=list(trace.body.footer)),
        )
        # the statements the input depends on run first, in the loop (_Split)
        loop_body = moved(split.ahead) + [invoke]
        changes = dict(leading_lines=[], body=loop.body.with_changes(body=loop_body))
        if chunk is not None:
            items, start = names[1], names[2]
            changes["iter"] = cst.parse_expression(f"{items}[{start} : {start} + {chunk}]")
        inner_loop = loop.with_changes(**changes)
        keywords = ", ".join(
            code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            for a in sweep.block.call.args
            if a.keyword is not None
        )
        method = sweep.block.method
        outer = cst.parse_statement(f"with {sweep.model}.{method}({keywords}) as {tracer}:\n    pass\n")
        outer = outer.with_changes(body=outer.body.with_changes(body=[inner_loop]))
        if chunk is None:
            return [outer.with_changes(leading_lines=loop.leading_lines)]
        items, start = names[1], names[2]
        listing = cst.parse_statement(
            f"{items} = list({code_of(loop.iter)})  # the inputs, listed once: one trace takes {chunk} at a time\n")
        chunks = cst.parse_statement(f"for {start} in range(0, len({items}), {chunk}):\n    pass\n")
        chunks = chunks.with_changes(body=chunks.body.with_changes(body=[outer]))
        return [listing.with_changes(leading_lines=loop.leading_lines), chunks]

    return build

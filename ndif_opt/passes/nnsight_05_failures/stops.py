"""nnsight-05-failures: `tracer.stop()` in a trace's own code when the trace has invokes.

In nnsight 0.5+ the code of a trace body outside its invokes runs before the invokes (the
model runs them when the body is done). A `tracer.stop()` there stops the trace before any
invoke has run: the block raises `EarlyStopException` (measured on nnsight 0.8.1 on tiny
GPT-2 and Llama models: after the invokes, between two of them and before the first).
Inside an invoke it stops the model once that invoke's reads are served, as intended.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, opens_invoke
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.reports import block_label, invokes_of, report_failure
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children

STOPPED = "EarlyStopException"


def report_stop_outside_invokes(block: Block, context: Context) -> None:
    """Each `tracer.stop()` of ``block``'s tracer in its body but in none of its invokes,
    when the block has invokes."""
    tracer = block.tracer_name
    if block.method == "session" or tracer is None or not invokes_of(block):
        return
    for call in _stops_outside_invokes(block.node.body, tracer):
        report_failure(
            context, call,
            f"`{code_of(call)}` is in the code of {block_label(block)} outside its invokes: nnsight 0.5+ runs that "
            f"code before the invokes, so it stops the trace before any of them runs: {STOPPED}",
            "move it into the last invoke, after the reads it waits for",
        )


def _stops_outside_invokes(node: cst.CSTNode, tracer: str) -> list[cst.Call]:
    found: list[cst.Call] = []
    for child in children(node):
        if opens_invoke(child, tracer) or type(child) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        if (type(child) is cst.Call and type(child.func) is cst.Attribute and child.func.attr.value == "stop"
                and not child.args and dotted_name(child.func.value) == tracer):
            found.append(child)
        found.extend(_stops_outside_invokes(child, tracer))
    return found

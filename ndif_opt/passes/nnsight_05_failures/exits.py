"""nnsight-05-failures: `return` or `yield` in a traced body, and a body that starts with `try:`."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.reports import block_label, invokes_of, report_failure
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children


#: the errors nnsight 0.8.1 gives (measured on tiny GPT-2 and Llama models, locally and
#: through the emulated NDIF, where they come back as a RemoteError with the same text)
TRY_ERROR = ("ValueError: A traced `with` block cannot start with `try:`; nnsight intercepts the body "
             "at its first line")


def report_returns(block: Block, context: Context) -> None:
    if block.parent is not None:
        return  # its body is part of the outermost block's: reported there
    for node, kind in _own_exits(block.node.body):
        message = (f"`{kind}` in the body of {block_label(block)}: nnsight 0.5+ runs the body as code of its own, where "
                   f"it is SyntaxError: '{kind}' outside function")
        reason = ("move it after the block (save what it returns)" if kind == "return" else
                  "collect the values in a saved list and yield them after the block")
        report_failure(context, node, message, reason)


def _own_exits(node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, str]]:
    """`return` statements and `yield` expressions of the body itself (not of functions,
    lambdas or classes defined in it), in the order of the code."""
    for child in children(node):
        kind = type(child)
        if kind is cst.Return:
            yield child, "return"
        elif kind is cst.Yield:
            yield child, "yield"
        if kind not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            yield from _own_exits(child)


def traced_bodies(facts: Facts) -> Iterator[tuple[cst.With, str]]:
    """Every `with` whose body nnsight captures: the blocks, and the invokes in them."""
    for block in facts.blocks:
        yield block.node, block_label(block)
        if block.method != "session":
            for invoke in invokes_of(block):
                yield invoke, f"`{code_of(invoke.items[0].item.func)}(...)`"


def report_leading_try(node: cst.With, label: str, context: Context) -> None:
    body = node.body
    if type(body) is not cst.IndentedBlock or not body.body:
        return
    first = body.body[0]
    if type(first) in (cst.Try, cst.TryStar):
        report_failure(context, first, f"the body of {label} starts with `try:`: nnsight 0.5+ refuses it with {TRY_ERROR}",
                "put any statement above the `try`, or move the `try` outside the block")

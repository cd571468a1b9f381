"""nnsight-05-failures: code after a loop over every generation step, which never runs.

`with tracer.all():`, and `tracer.iter[...]` over a slice with no end (`[:]`, `[k:]`) as a
`with` or a `for` header, step through generation until it ends; nnsight 0.5+ runs the body's code in order and only moves past
such a loop when the model is done, so the statements after it in the same body never run
(measured on nnsight 0.8.1, each of `with tracer.all():`, `with tracer.iter[:]:`,
`with tracer.iter[1:]:`, `for step in tracer.iter[:]:` and `for step in tracer.iter[1:]:`: a
name they bind is unbound after the block, `NameError`; `tracer.iter[0:N]` and
`tracer.iter[k]` move on).
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.generation_steps import tracer_steps
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.reports import report_failure
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.positions import code_of


def report_code_after_every_step(body: cst.With, label: str, tracers: set[str], context: Context) -> None:
    """Statements after an unbounded step loop of one of ``tracers`` in ``body``'s own
    suite: the first of them is reported (what follows it does not run either)."""
    if type(body.body) is not cst.IndentedBlock:
        return
    statements = list(body.body.body)
    for index, stmt in enumerate(statements[:-1]):
        loop = _every_step(stmt, tracers)
        if loop is None:
            continue
        after = statements[index + 1]
        report_failure(
            context, after,
            f"`{_first_line(after)}` comes after `{loop}` in {label}, which steps through generation until it "
            "ends: nnsight 0.5+ never runs the code after such a loop in the same body (what it binds stays "
            "unbound: NameError)",
            "move it above the loop, bound the loop (`tracer.iter[0:N]` for the N steps you need), or read "
            "`tracer.result` after the block",
        )
        return


def _every_step(stmt: cst.BaseStatement, tracers: set[str]) -> str | None:
    """`with tracer.all()`, `with tracer.iter[a:]` or `for ... in tracer.iter[a:]` (a slice
    with no end: every step from ``a`` on): its header, else None."""
    if type(stmt) is cst.With and len(stmt.items) == 1:
        item = stmt.items[0].item
        if (type(item) is cst.Call and type(item.func) is cst.Attribute and item.func.attr.value == "all"
                and not item.args and dotted_name(item.func.value) in tracers):
            return f"with {code_of(item)}"
        if _unbounded(tracer_steps(item, tracers)):
            return f"with {code_of(item)}"
    if type(stmt) is cst.For and _unbounded(tracer_steps(stmt.iter, tracers)):
        return f"for {code_of(stmt.target)} in {code_of(stmt.iter)}"
    return None


def _unbounded(index: cst.BaseSlice | None) -> bool:
    """A slice of `tracer.iter` with no end: the steps it runs at go on until generation ends."""
    return type(index) is cst.Slice and index.upper is None


def _first_line(stmt: cst.BaseStatement) -> str:
    line = code_of(stmt).strip().splitlines()[0]
    return line[:60] + ("…" if len(line) > 60 else "")

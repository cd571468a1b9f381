"""nnsight-05-failures: reads out of the model's order reported, and moved into it where
whole lines can move."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import EFFECT_FREE_BUILTINS, collect, may_change
from ndif_opt.analysis.vocabulary import MUTATING_METHODS
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.order import OUT_OF_ORDER, Scope, out_of_order_findings
from ndif_opt.passes.nnsight_05_failures.reports import report_failure
from ndif_opt.syntax.expressions import root_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.wording import tense


def report_out_of_order(scope: Scope, facts: Facts, context: Context, may_fix: bool) -> tuple | None:
    """Report the first read of ``scope`` out of the model's order. With ``may_fix``, when
    moving whole statements up puts every read in order (see :func:`_in_model_order`), that
    is the fix: the scope's statements in their new order are returned, reported applied."""
    found = out_of_order_findings(scope.statements, scope.block, facts)
    if not found:
        return None
    first, others = found[0], found[1:]
    late, early = code_of(first.late.node), code_of(first.early.node)
    when = "" if first.certain else " (when both run)"
    more = f" (and {len(others)} more read{'s' if len(others) != 1 else ''} like it in this forward pass)" \
        if others else ""
    if first.next_iteration:
        reading = f"`{late}` of the loop's next iteration is read after `{early}` of this one"
    else:
        reading = f"`{late}` is read after `{early}`"
    message = (f"{reading} in one forward pass, but the model computes it first{when}{more}: "
               f"nnsight 0.5+ raises {OUT_OF_ORDER.format(where=first.where)}")
    ordered = _in_model_order(scope, facts) if may_fix else None
    if ordered is None or not context.allows(first.late.node, message):
        report_failure(context, first.late.node, message,
                       "read the modules in the order the model runs them (or in another invoke or trace)",
                       uses=(first.early.node,))
        return None
    context.applied(first.late.node, f"{tense('moved', 'would move')} the statements that read the modules into "
                    f"the order the model runs them (the model's order is what nnsight 0.4 served): {message}",
                    uses=(first.early.node,))
    return ordered


class StatementsMoved(cst.CSTTransformer):
    """The bodies of :func:`report_out_of_order`'s fixes with their statements moved."""

    def __init__(self, moves: dict[int, tuple[cst.BaseStatement, ...]], on_path: set[int]) -> None:
        super().__init__()
        self.moves = moves
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path and id(node) not in self.moves

    def on_leave(self, original_node, updated_node):
        moved = self.moves.get(id(original_node))
        return updated_node if moved is None else updated_node.with_changes(body=moved)


def _in_model_order(scope: Scope, facts: Facts) -> tuple[cst.BaseStatement, ...] | None:
    """The scope's statements with each one that reads a module too late moved up before
    the statement it must precede, when every statement it moves past is independent of
    it (see :func:`_independent`) and, in the end, no read is out of order; else None.

    Within one forward pass nnsight 0.4 ran the reads and writes in the model's order,
    whatever the order of the code; 0.5+ runs the code in its order. Statements that only
    compute with the model's values and share no name give the same values in either
    order, so the moved code is what the code meant."""
    statements = list(scope.statements)
    roots = {scope.block.model, "torch", "nnsight"} | set(collect(scope.body).binds)
    for _ in range(len(statements)):
        found = out_of_order_findings(statements, scope.block, facts)
        if not found:
            return tuple(statements)
        first = found[0]
        if first.early.frames or first.late.frames or first.next_iteration:
            return None  # a read in a loop or a branch: moving statements does not order it
        early, late = first.early.top, first.late.top
        if early is None or late is None or early >= late:
            return None  # one statement reads both
        moved = statements[late]
        if not all(_independent(moved, statements[k], roots) for k in range(early, late)):
            return None
        statements.insert(early, statements.pop(late))
    return None


def _independent(a: cst.BaseStatement, b: cst.BaseStatement, roots: set[str]) -> bool:
    """May ``a`` and ``b`` run in either order with the same effects? Both are lines that
    only compute with the model's values (:func:`_values_only`), and neither reads or
    changes a name the other binds or changes."""
    if not (_values_only(a, roots) and _values_only(b, roots)):
        return False
    use_a, use_b = collect(a), collect(b)
    written_a = set(use_a.binds) | set(may_change(a))
    written_b = set(use_b.binds) | set(may_change(b))
    return not (written_a & (set(use_b.reads) | written_b) or written_b & set(use_a.reads))


def _values_only(stmt: cst.BaseStatement, roots: set[str]) -> bool:
    """A line of assignments and expressions whose calls are methods of the model's
    values or of the scope's names (`.save()`, `.norm()`), of `torch` or `nnsight`, or
    builtins that change nothing: no print, no helper, no write to a module or object."""
    if type(stmt) is not cst.SimpleStatementLine:
        return False
    for small in stmt.body:
        if type(small) not in (cst.Assign, cst.AnnAssign, cst.Expr):
            return False
        targets = [t.target for t in small.targets] if type(small) is cst.Assign else \
            [small.target] if type(small) is cst.AnnAssign else []
        if any(type(t) is not cst.Name for t in targets):
            return False  # a write to a module or into an object
    for call in find_nodes(stmt, lambda n: type(n) is cst.Call):
        func = call.func
        if type(func) is cst.Name:
            if func.value not in EFFECT_FREE_BUILTINS:
                return False
        elif type(func) is cst.Attribute:
            if func.attr.value in MUTATING_METHODS or func.attr.value.endswith("_"):
                return False
            if root_name(func.value) not in roots:
                return False  # a method of some other object of the script (`logger.info`)
        else:
            return False
    return True

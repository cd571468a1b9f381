"""Definitions in the way of a session: imports, and functions defined in a region's loops.

A definition binds an object that can never come back from NDIF (a module, a function
the script defines: :mod:`ndif_opt.analysis.wire`). Inside a region that becomes one
session it would run on the server, and the name would be missing on your machine
afterwards, or would have to be sent back, which fails (`cannot pickle 'module'
object`). So session-hoisting first moves such statements out of the region, before
it, where they run once on your machine; the session reads the names as it reads any
other (modules by reference, your functions by value), and they stay bound afterwards.

A definition moves when that changes nothing the script does
(:func:`ndif_opt.analysis.wire.hoistable_definition`): it stands where it runs whenever
the region's loop body runs (not under an `if`, a `try` or a `with`), nothing it reads
is bound in the region, nothing else in the region binds its names, and the region
reads none of its names before it. (A function of the module's own code reads module
names when it is called: those the session binds are handed to it as arguments, or the
session is refused, by session-hoisting's check of the functions a session calls.)
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.names import collect, collect_all, exposed_reads
from ndif_opt.analysis.wire import hoistable_definition, is_definition
from ndif_opt.syntax.rewrite import opens_a_cell

_LOOPS = (cst.For, cst.While)


def definitions_in_the_way(statements: list[cst.BaseStatement], module_code: bool = False) -> list[cst.BaseStatement]:
    """The definitions of ``statements`` (at their top level, or in the bodies of their
    loops) that can run once before them instead, in the order of the code.
    ``module_code``: the statements are the module's own (not a function's or a class's):
    a function defined at their top level is one of the module's, whose calls in the
    session are checked for the module names they read (see
    :func:`ndif_opt.analysis.wire.hoistable_definition`)."""
    candidates = list(_unconditional_definitions(statements))
    if not candidates:
        return []
    exposed = set(exposed_reads(statements))
    top_level = {id(s) for s in statements}

    moving = list(candidates)
    while True:
        staying = {id(s) for s in candidates if not any(s is m for m in moving)}
        ids = {id(s) for s in moving}
        bound_by_rest = set(collect_all(statements, skip=tuple(moving)).binds)
        # the names the definitions that stay bind are bound in the region too
        bound_by_rest |= {n for s in candidates if id(s) in staying for n in collect(s).binds}
        kept = [
            s for s in moving
            if hoistable_definition(s, bound_by_rest, checked_at_calls=module_code and id(s) in top_level)
            and not (set(collect(s).binds) & (bound_by_rest | exposed))
            and _bound_once(s, moving)
        ]
        if len(kept) == len(moving):
            return [s for s in candidates if id(s) in ids]
        moving = kept


def _bound_once(stmt: cst.BaseStatement, moving: list[cst.BaseStatement]) -> bool:
    """No other moving definition binds a name ``stmt`` binds (the order between them
    would change which object the name ends with)."""
    names = set(collect(stmt).binds)
    return not any(other is not stmt and names & set(collect(other).binds) for other in moving)


def _unconditional_definitions(statements):
    """The definitions that may move before ``statements``: none from a `# %%` cell
    marker on (moved before the first statement, a definition would leave its cell for an
    earlier one — and the first statement's own marker stands above where it would go)."""
    for stmt in statements:
        if opens_a_cell(stmt):
            return
        if is_definition(stmt):
            yield stmt
        elif isinstance(stmt, _LOOPS) and isinstance(stmt.body, cst.IndentedBlock):
            yield from _unconditional_definitions(stmt.body.body)


def without_statements(statements: list[cst.BaseStatement], removed) -> list[cst.BaseStatement]:
    """``statements`` with the statements ``removed`` (by identity) taken out of them and
    of the loop bodies they hold (a body left empty gets `pass`)."""
    ids = {id(s) for s in removed}
    remover = _Remove(ids)
    kept = []
    for stmt in statements:
        if id(stmt) in ids:
            continue
        kept.append(stmt.visit(remover) if isinstance(stmt, _LOOPS) else stmt)
    return kept


class _Remove(cst.CSTTransformer):
    def __init__(self, ids: set[int]) -> None:
        self.ids = ids

    def on_leave(self, original, updated):
        if id(original) in self.ids:
            return cst.RemovalSentinel.REMOVE
        if isinstance(updated, cst.IndentedBlock) and not updated.body:
            return updated.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated

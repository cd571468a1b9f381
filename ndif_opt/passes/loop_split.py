"""Loop splitting for session-hoisting: keep client effects on the client, in order.

A loop whose body first runs remote traces (and code the server may run) and then
does something only the client can do (print, write a file, plot) becomes

    with model.session(remote=...):
        _ndif_carry = list().save()
        for TARGET in ITER:
            <remote part>
            _ndif_carry.append((v1, v2))      # what the client part reads
    for TARGET, (v1, v2) in zip(ITER, _ndif_carry):
        <client part>

This is equivalent when the client part never feeds the remote part (no name or object
it changes is read by the remote part), ITER can be iterated twice with the same
items, and neither part leaves the loop early.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis import Facts, qualify
from ndif_opt.effects import PROGRESS_BARS
from ndif_opt.names import collect, collect_all
from ndif_opt.regions import find_accumulator, reads_after
from ndif_opt.rewrite import (
    DropElementSaves,
    StripRemote,
    SuitePlan,
    code_of,
    saved_container,
    session_statement,
)
from ndif_opt.walk import walk

CARRY = "_ndif_carry"
PURE_ITER_CALLS = frozenset({"range", "enumerate", "zip", "reversed", "sorted", "list", "tuple", "len"})


def plan_split(hoisting, region, facts: Facts, context, plan: SuitePlan) -> bool:
    loop = region.statements[0]
    reason = _split_refusal(loop, region, facts, context)
    if isinstance(reason, str):
        return False
    prefix, suffix, carried, accumulators = reason
    _rewrite(loop, region, prefix, suffix, carried, accumulators, facts, plan)
    if carried:
        context.introduced.add(CARRY)
    skip = tuple(b.node.body for s in prefix for b in facts.blocks_within(s) if b.parent is None)
    context.unreturned |= set(collect_all(prefix, skip=skip).binds) - set(carried) - set(collect(loop.target).binds)
    names = ", ".join(f"`{n}`" for n in carried) or "nothing"
    context.applied(
        loop,
        f"split this loop: its remote part runs in one session and the part that must run on "
        f"your machine runs afterwards in a second loop, in the same order (carrying {names})",
    )
    return True


def _split_refusal(loop, region, facts: Facts, context):
    """A string when the loop cannot be split, else the pieces of the split."""
    if not isinstance(loop, cst.For) or loop.orelse is not None:
        return "not a plain for loop"
    if not isinstance(loop.body, cst.IndentedBlock):
        return "one-line loop"
    body = list(loop.body.body)
    with_blocks = [i for i, s in enumerate(body) if facts.blocks_within(s)]
    if not with_blocks:
        return "no remote block"
    cut = with_blocks[-1] + 1
    prefix, suffix = body[:cut], body[cut:]
    if not suffix:
        return "nothing after the remote part"
    outer = [b for s in prefix for b in facts.blocks_within(s) if b.parent is None]
    skip = tuple(b.node.body for b in outer)
    for stmt in prefix:
        if context.server.problems(stmt, skip=skip):
            return "the remote part has client code"
    if context.server.problems(loop.target) or context.server.problems(_unwrap_progress(loop.iter, facts)):
        return "the loop header has client code"
    if not _reiterable(loop.iter, facts):
        return "the loop's iterable may not give the same items twice"
    pre = collect_all(prefix)
    post = collect_all(suffix)
    if _leaves_early(prefix) or _leaves_early(suffix) or pre.control or post.control:
        return "leaves the loop early"
    iter_reads = set(collect(loop.iter).reads)
    written_later = set(post.binds) | set(post.mutates)
    if written_later & (set(pre.reads) | set(pre.mutates) | iter_reads):
        return "the client part feeds the remote part"
    if (set(pre.binds) | set(pre.mutates)) & iter_reads:
        return "the remote part changes what the loop iterates over"
    targets = set(collect(loop.target).binds)
    saved = set().union(*(b.saved_names for b in outer))
    available = (set(collect_all(prefix, skip=skip).binds) | saved) - targets
    carried = sorted(n for n in available if n in post.reads)
    # anything else the remote part computes must not be needed after the loop
    later = reads_after(facts, region.suite, region.end)
    lost = [n for n in collect_all(prefix, skip=skip).binds if n in later and n not in carried and n not in targets]
    if lost:
        return f"`{lost[0]}` is read after the loop"
    accumulators = []
    for name in pre.mutates:
        if name in pre.binds or name in facts.models:
            continue
        if name in post.reads or name in post.mutates:
            return f"`{name}` is used by both parts"
        acc, why = find_accumulator(facts, name, region.suite, region.start)
        if acc is None:
            return why
        accumulators.append(acc)
    if CARRY in pre.reads or CARRY in post.reads or CARRY in later:
        return "name clash"
    return prefix, suffix, carried, accumulators


def _leaves_early(stmts) -> bool:
    class Finder(cst.CSTVisitor):
        found = False

        def visit_Break(self, node) -> None:
            self.found = True

        def visit_Continue(self, node) -> None:
            self.found = True

        def visit_For(self, node) -> bool:
            return False  # a nested loop's break/continue stays inside it

        def visit_While(self, node) -> bool:
            return False

        def visit_FunctionDef(self, node) -> bool:
            return False

    finder = Finder()
    for stmt in stmts:
        walk(stmt, finder)
    return finder.found


def _reiterable(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> bool:
    if depth > 5:
        return False
    if isinstance(expr, (cst.List, cst.Tuple)):
        return True
    if isinstance(expr, (cst.ListComp, cst.DictComp, cst.SetComp)):
        return True
    if isinstance(expr, cst.Name):
        value = facts.constant(expr.value)
        return value is not None and _reiterable(value, facts, depth + 1)
    if isinstance(expr, cst.Call):
        path = qualify(expr.func, facts.imports)
        if path in PROGRESS_BARS or (isinstance(expr.func, cst.Name) and expr.func.value in PURE_ITER_CALLS):
            if isinstance(expr.func, cst.Name) and expr.func.value == "range":
                return True
            args = [a.value for a in expr.args if a.keyword is None and not a.star]
            return bool(args) and all(_reiterable(a, facts, depth + 1) for a in args)
    return False


def _unwrap_progress(expr: cst.BaseExpression, facts: Facts) -> cst.BaseExpression:
    """`enumerate(tqdm(xs, desc=...))` → `enumerate(xs)`: the bar stays on the client."""
    if not isinstance(expr, cst.Call):
        return expr
    if qualify(expr.func, facts.imports) in PROGRESS_BARS:
        args = [a for a in expr.args if a.keyword is None and not a.star]
        return _unwrap_progress(args[0].value, facts) if args else expr
    return expr.with_changes(
        args=[a.with_changes(value=_unwrap_progress(a.value, facts)) for a in expr.args]
    )


def _rewrite(loop: cst.For, region, prefix, suffix, carried, accumulators, facts, plan: SuitePlan) -> None:
    strip = StripRemote([b.node for s in prefix for b in facts.blocks_within(s) if b.parent is None])
    drop = DropElementSaves({a.name for a in accumulators})

    def build(_updated):
        original = loop  # identity-based transforms need the original nodes
        # the carry brings the carried values home; saving them too would download twice
        unsave_carried = DropElementSaves(set(), rebinds=set(carried))
        server_body = [
            s.visit(strip).visit(drop).visit(unsave_carried) for s in original.body.body[: len(prefix)]
        ]
        if carried:
            value = carried[0] if len(carried) == 1 else "(" + ", ".join(carried) + ")"
            server_body.append(cst.parse_statement(f"{CARRY}.append({value})\n"))
        server_loop = original.with_changes(
            iter=_unwrap_progress(original.iter, facts),
            body=original.body.with_changes(body=server_body),
            leading_lines=[],
        )
        created = [saved_container(a.name, a.kind, a.stmt) for a in accumulators]
        if carried:
            created.append(cst.parse_statement(f"{CARRY} = list().save()\n"))
        session = session_statement(
            region.model, region.flag, created + [server_loop], original.leading_lines
        )
        client_body = list(original.body.body[len(prefix) :])
        if carried:
            target = code_of(original.target)
            if isinstance(original.target, cst.Tuple) and not original.target.lpar:
                target = f"({target})"
            values = carried[0] if len(carried) == 1 else "(" + ", ".join(carried) + ")"
            header = f"for {target}, {values} in zip({code_of(original.iter)}, {CARRY}):\n    pass\n"
        else:
            header = f"for {code_of(original.target)} in {code_of(original.iter)}:\n    pass\n"
        client_loop = cst.parse_statement(header)
        client_loop = client_loop.with_changes(body=original.body.with_changes(body=client_body))
        return [session, client_loop]

    plan.replace(region.suite, region.start, region.end, build)
    for acc in accumulators:
        plan.remove(region.suite, acc.index)

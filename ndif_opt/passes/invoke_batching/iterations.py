"""invoke-batching: iterations must not feed each other, and what a batch leaves live after it."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import collect, collect_all, exposed_reads
from ndif_opt.analysis.regions import reads_after, results_kept
from ndif_opt.passes.common.sweeps import (
    Sweep,
    in_place_changes,
    index_of,
    input_statements,
    module_accesses,
    moved_ahead,
    moved_names,
)
from ndif_opt.syntax.expressions import root_name
from ndif_opt.syntax.positions import code_of


# How a loop may fill a container made before it.
FILLING_METHODS = frozenset({"append", "extend", "update", "add", "insert"})


def live_after(sweep: Sweep, facts: Facts, names: set[str]) -> set[str]:
    """Which of ``names`` the code after the loop may read before binding them again.

    Follows every way execution can continue after the loop — the rest of its suite,
    then of each enclosing statement; around an enclosing loop also back to the start
    of its body — and flags a name read before it is bound again on that path. Inside
    a function, any later read counts, as in :func:`reads_after`."""
    later = reads_after(facts, sweep.info.suite, sweep.info.index + 1)
    candidates = {n for n in names if n in later}
    if not candidates:
        return set()
    for func in facts.functions.values():
        if set(collect(func.body).reads) & candidates:
            return candidates
    paths = _continuations(sweep.info, facts)
    if paths is None:
        return candidates
    # the script's results are read when it ends, after every path
    flagged: set[str] = candidates & results_kept(facts, sweep.info.suite, sweep.info.index + 1)
    for path in paths:
        flagged |= candidates & exposed_reads(path).keys()
    return flagged


def _continuations(info, facts: Facts):
    """The statement sequences that may run after ``info``'s statement (None inside
    a function or class)."""
    rest = list(info.suite.body[info.index + 1 :])
    if not info.ancestors:
        return [rest]
    owner = info.ancestors[-1]
    if isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
        return None
    outer = _continuations(facts.stmt(owner), facts)
    if outer is None:
        return None
    paths = [rest + path for path in outer]
    if isinstance(owner, (cst.For, cst.While)) and info.suite is owner.body:
        # the next iteration of the enclosing loop, up to this statement again
        paths.append(rest + list(owner.body.body[: info.index]))
    return paths


def is_skip_insertion(call: cst.Call) -> bool:
    return any(code_of(a.value).startswith("_ndif_cache") for a in call.args)


def saved_names_in(stmts) -> set[str]:
    from ndif_opt.analysis.facts import is_saved_expr

    found = set()
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and is_saved_expr(small.value):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            found.add(target.target.value)
    return found


# -- iterations must not feed each other ----------------------------------------------


def carried_problem(sweep: Sweep, facts: Facts) -> str:
    bound = moved_names(sweep, facts).binds
    for name in exposed_reads(sweep.moved):
        if name in bound and name not in sweep.targets:
            return (
                f"`{name}` is read before the iteration sets it: an earlier "
                "iteration's value would be used"
            )
    return ""


class _Split:
    """An iteration as batched: the statements before the trace that its arguments
    depend on run before ``with tracer.invoke(...)`` (``ahead``), in their order; the
    rest of the iteration runs inside it (``invoked``)."""

    def __init__(self, sweep: Sweep, facts: Facts) -> None:
        chosen = set(input_statements(sweep))
        args = [a.value for a in sweep.block.call.args]
        if len(chosen) < len(sweep.pre) and moved_ahead(sweep.pre + args, sweep.inner + sweep.post,
                                                         facts=facts) is None:
            # the code before the trace needs nothing the invokes do: it stays before
            # them, in loop order (a progress record, a counter), as the loop wrote it
            chosen = set(range(len(sweep.pre)))
        self.ahead = [s for i, s in enumerate(sweep.pre) if i in chosen]
        self.rest_of_pre = [s for i, s in enumerate(sweep.pre) if i not in chosen]
        self.invoked = self.rest_of_pre + sweep.inner + sweep.post


def iteration_split(sweep: Sweep, facts: Facts) -> _Split:
    return facts.once(_split, sweep)


def _split(facts: Facts, sweep: Sweep) -> _Split:
    return _Split(sweep, facts)


def input_problem(sweep: Sweep, facts: Facts) -> str:
    """The invokes' inputs are all evaluated while the trace's body runs the loop, before
    any invoke body runs (measured on nnsight 0.8.1: code of the loop before an invoke
    runs then, in loop order, and each invoke sees its own iteration's values). So the
    input, and the statements it depends on, must not need what the invoke bodies do."""
    split = iteration_split(sweep, facts)
    args = [a.value for a in sweep.block.call.args]
    conflict = moved_ahead(split.ahead + args, split.invoked, facts=facts)
    if conflict is None:
        return ""
    name = conflict.name
    if conflict.how == "changes":
        return (
            f"computing the trace's input changes `{name}`, which the rest of the iteration "
            "reads: batched, every iteration's input is computed before any invoke runs"
        )
    what = "sets" if conflict.how == "bound" else "changes"
    return (
        f"the trace's input depends on `{name}`, which the iteration {what} after its trace: "
        "batched, every iteration's input is computed before any invoke runs"
    )


def shared_objects(sweep: Sweep, facts: Facts) -> str:
    """Objects made before the loop may only be filled (append, item assignment) inside
    the invokes. (The statements run before the invoke, in loop order, may use them:
    :func:`input_problem` checks that the invokes do not.)"""
    moved = iteration_split(sweep, facts).invoked
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    shared = [n for n in collect_all(moved).mutates if n not in bound and not facts.is_model_like(n)]
    found = [n for stmt in moved for n in index_of(stmt).nodes]
    # the receivers of filling calls and item assignments: `acts.append(...)`, `top[p] = ...`
    allowed: set[int] = set()
    for node in found:
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in FILLING_METHODS:
                if isinstance(func.value, cst.Name):
                    allowed.add(id(func.value))
        elif isinstance(node, cst.AssignTarget):
            target = node.target
            if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                allowed.add(id(target.value))
    uses = [node for node in found if isinstance(node, cst.Name)]
    for name in shared:
        for node in uses:
            if node.value == name and id(node) not in allowed:
                return (
                    f"it reads or changes `{name}`, which earlier iterations fill: batched, "
                    "the iterations would not see each other's changes in order"
                )
    for change in in_place_changes(moved):
        if change.kind == "method" and root_name(change.target) not in bound:
            return f"it changes `{code_of(change.target)}` in place, which every iteration shares"
        if change.kind == "gradient":
            return f"it calls `.{change.method}()`"
    return ""


def fill_order(sweep: Sweep, facts: Facts) -> str:
    """Containers must be filled after the iteration's last module read, and that read
    must be the same module in every iteration: invokes waiting at one module are
    served in loop order."""
    moved = iteration_split(sweep, facts).invoked
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    shared = {n for n in collect_all(moved).mutates if n not in bound and not facts.is_model_like(n)}
    if not shared:
        return ""
    last_read = -1
    last_access = None
    for position, stmt in enumerate(moved):
        found = module_accesses([stmt], facts).found
        if found:
            last_read, last_access = position, found[-1]
    for position, stmt in enumerate(moved):
        filled = shared & set(collect(stmt).mutates)
        if filled and position < last_read:
            name = sorted(filled)[0]
            return (
                f"it fills `{name}` before its last module read: batched, the invokes would "
                "fill it in the model's order, not the loop's"
            )
    if last_access is not None:
        varying = set(collect(last_access.node).reads) & bound
        if varying:
            return (
                f"it fills `{sorted(shared)[0]}` after reading `{last_access.code}`, which "
                "changes with the loop: batched, the invokes would fill it in the model's "
                "order, not the loop's"
            )
    return ""

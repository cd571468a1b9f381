"""session-hoisting's rewrite: the statements and transforms that build the session."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.regions import Accumulator
from ndif_opt.analysis.remote_functions import (
    CallWithRemoteOff,
    RemoteHelper,
    rewritten_helper,
    with_keyword_arguments,
    with_keyword_parameters,
)
from ndif_opt.passes.base import Context
from ndif_opt.passes.session_hoisting.definitions import without_statements
from ndif_opt.passes.session_hoisting.messages import first_line, kind_label
from ndif_opt.passes.session_hoisting.region import Region, names_root
from ndif_opt.passes.session_hoisting.split_items import unwrap_progress
from ndif_opt.syntax.rewrite import (
    DropElementSaves,
    StripRemote,
    SuitePlan,
    comments_carried,
    method_call,
    saved_container,
)
from ndif_opt.syntax.walk import paths_to
from ndif_opt.types import Safety
from ndif_opt.wording import tense


_EDITED_KINDS = frozenset({cst.With, cst.Call, cst.Assign, cst.For})  # what MoveEdits may edit


class MoveEdits(cst.CSTTransformer):
    """The edits of moved code in one walk: `remote=` off the region's blocks and
    `remote=False` into helper calls (by identity: a second walk would see new nodes),
    then `.save()` off the elements of relocated containers and, with unsafe fixes,
    progress bars off loops. The edits touch node kinds of their own, each looking only
    at its node's children, so one walk gives what the walks one after the other gave.

    The walk enters only the subtrees that hold a node to edit, and rebuilds only the
    nodes above an edit (:func:`transform`): most of the moved code has nothing to change."""

    def __init__(self, stmt, strip: StripRemote, calls: CallWithRemoteOff, drop: DropElementSaves, unwrap,
                 passed: dict[int, tuple[str, ...]]) -> None:
        self.strip = strip
        self.calls = calls
        self.passed = passed  # calls that hand module names over as arguments
        self.drop = drop
        self.unwrap = unwrap
        self.on_path = paths_to(stmt, self._may_edit, kinds=_EDITED_KINDS)

    def _may_edit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind is cst.With:
            return id(node) in self.strip.targets
        if kind is cst.Call:
            # DropElementSaves edits `acc.append(...)`-like calls on a relocated `acc`
            return id(node) in self.calls.calls or id(node) in self.passed or names_root(node.func, self.drop.names)
        if kind is cst.Assign:
            # ... and `acc[k] = ...` (and `x = ...` for the names it rebinds)
            return any(names_root(t.target, self.drop.names | self.drop.rebinds) for t in node.targets)
        return kind is cst.For and self.unwrap is not None

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        return self.strip.leave_With(original, updated)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        updated = self.calls.leave_Call(original, updated)
        if id(original) in self.passed:
            updated = with_keyword_arguments(updated, self.passed[id(original)])
        return self.drop.leave_Call(original, updated)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        return self.drop.leave_Assign(original, updated)

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated if self.unwrap is None else self.unwrap.leave_For(original, updated)


def made_in_session(acc: Accumulator, nnsight_name: str, left_on_server: bool) -> cst.SimpleStatementLine:
    """The statement that gives the session the container ``acc`` created above it:
    made there and saved, or taken along and saved; when nothing after the session
    reads it, made there as written."""
    if acc.kind == "carried":
        return _taken_along(acc, nnsight_name)
    if left_on_server:
        return acc.stmt.with_changes(leading_lines=comments_carried(acc.stmt))
    return saved_container(acc.name, acc.kind, acc.stmt)


def _taken_along(acc: Accumulator, nnsight_name: str) -> cst.SimpleStatementLine:
    """`name = nnsight.save(name)`: the client's container goes to the session, is
    filled there and comes back."""
    return cst.parse_statement(f"{acc.name} = {nnsight_name}.save({acc.name})\n")


def saving(stmt: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    small = stmt.body[0]
    return stmt.with_changes(body=[small.with_changes(value=method_call(small.value, "save"))])


def as_the_session_calls(helper: RemoteHelper | None, func: cst.FunctionDef, passed: tuple[str, ...]) -> cst.FunctionDef:
    """The function as the session calls it: with its flag parameter (a remote helper)
    and the module names the session hands it."""
    func = rewritten_helper(helper) if helper is not None else func
    return with_keyword_parameters(func, passed) if passed else func


RELEASE_COMMENT = "# nothing after the session reads it: let go here, not downloaded"


def release_statement(names: list[str]) -> cst.SimpleStatementLine:
    """`a = b = None  # ...`: the session's last line, which keeps what same-file functions
    saved and returned from being downloaded (a saved value the session's names still
    hold at its end comes back); nothing after the session reads those names."""
    comment = RELEASE_COMMENT if len(names) == 1 else RELEASE_COMMENT.replace("reads it", "reads them")
    return cst.parse_statement(" = ".join([*names, "None"]) + f"  {comment}\n")


UNBIND_COMMENT = "# bound only in its traces, unsaved: yours keep their values"


def unbind_statement(names: list[str]) -> cst.SimpleStatementLine:
    """`h = None; del h  # ...`: the session's last line, for names only its traces bind
    without saving them, which the code after it reads (see plan.names_unbound): a
    session sends back each name whose value's id is in its saved set, and a saved value
    freed earlier can leave its id to one of them. (Bound first: a trace that never ran
    leaves nothing to delete.)"""
    return cst.parse_statement(f"{' = '.join([*names, 'None'])}; del {', '.join(names)}  {UNBIND_COMMENT}\n")


def move_definitions(region: Region, definitions: list[cst.BaseStatement], context: Context,
                     plan: SuitePlan) -> None:
    """Plan the definitions' move before the region (see :mod:`.definitions`)."""

    def build(_updated):
        # each statement keeps the blank lines and comments above it
        return [*definitions, *without_statements(region.statements, definitions)]

    plan.replace(region.suite, region.start, region.end, build)
    code = ", ".join(f"`{first_line(d)}`" for d in definitions)
    context.applied(
        definitions[0],
        f"{code} {tense('now ' + ('run' if len(definitions) > 1 else 'runs'), 'would run')} once on your machine, "
        f"before {kind_label(region)}: "
        "inside a session it would run on the server, and what it binds could not come back "
        "(a module or a function of the script cannot be sent from NDIF)",
        Safety.SAFE,
    )


def returned_statement(region: Region, function: cst.FunctionDef | None) -> cst.SimpleStatementLine | None:
    """The region's last statement when it is `return <value>` in the body of ``function``
    itself (not in a branch of it), and that `return` is all that keeps the region out of a
    session (every problem of its code is the `return`'s): a session can compute the value,
    not return from the function."""
    last = region.statements[-1]
    if function is None or region.suite is not function.body or type(last) is not cst.SimpleStatementLine \
            or len(last.body) != 1:
        return None
    returned = last.body[0]
    if type(returned) is not cst.Return or returned.value is None:
        return None
    if not region.unsafe or any(problem.node is not returned for problem in region.unsafe):
        return None
    return last


def bind_returned_value(region: Region, statement: cst.SimpleStatementLine, name: str, context: Context,
                        plan: SuitePlan) -> None:
    """Plan `return <value>` as `name = <value>` then `return name`: the same value returned,
    and the line that computes it one a session can hold (the pipeline's next round)."""
    returned = statement.body[0]
    bound = statement.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(name))], returned.value)])
    index = region.end - 1
    plan.replace(region.suite, index, index + 1,
                 lambda _updated: [bound, cst.SimpleStatementLine([cst.Return(cst.Name(name))])])
    context.applied(
        returned,
        f"the value this `return` gives {tense('is now', 'would be')} computed into `{name}` first, then "
        "returned, so that one session can compute it (a `return` cannot stand inside a session)",
        Safety.SAFE,
    )


class UnwrapProgress(cst.CSTTransformer):
    """`for x in tqdm(xs, ...)` → `for x in xs` (the bar cannot run on the server)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated.with_changes(iter=unwrap_progress(updated.iter, self.facts))

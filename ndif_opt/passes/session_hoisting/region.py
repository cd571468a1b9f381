"""session-hoisting's regions: runs of statements that could become one session, and what
decides a statement's part in one."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from ndif_opt.analysis.effects import Problem
from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.analysis.regions import requests_in
from ndif_opt.analysis.remote_functions import RemoteHelper, called_helper
from ndif_opt.analysis.retries import PortableRetry
from ndif_opt.analysis.scopes import scope_index
from ndif_opt.cost_model import RegionRequests
from ndif_opt.passes.base import Context
from ndif_opt.passes.session_hoisting.split_items import Split, splittable
from ndif_opt.syntax.expressions import root_name
from ndif_opt.syntax.positions import statement_code
from ndif_opt.syntax.walk import find_nodes

UNSAFE_KINDS = frozenset({"print", "progress"})


@dataclass
class Region:
    """A run of statements ``suite.body[start:end]`` that could become one session."""

    suite: cst.CSTNode
    start: int
    end: int
    model: str
    flag: cst.BaseExpression | None
    blocks: list[Block]
    unsafe: list[Problem] = field(default_factory=list)
    helper_calls: list[tuple[cst.Call, RemoteHelper]] = field(default_factory=list)  # moved along
    saved_here: dict[int, str] = field(default_factory=dict)  # id(stmt) -> name given `.save()`
    requests: int | None = None  # remote requests one run sends (unknown loops as two), once counted
    counted: RegionRequests | None = None  # its requests as the cost table counts them, once asked
    split: Split | None = None  # the client/server split, when code must stay on the client
    split_refusal: str = ""  # why the code that must stay on the client could not be split off
    remote_statements: list[cst.BaseStatement] = field(default_factory=list)  # those that do remote work
    retry: PortableRetry | None = None  # the retry the session stands under, if its work had one
    client_roots: frozenset[str] = frozenset()  # objects it changes that stay on your machine (replayed)
    # module names the session computes that functions it calls read: handed over as
    # arguments (function -> names; id of each call -> names)
    passed_functions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    passed_calls: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # the region is a notebook's module code: the kernel keeps its names after the last
    # cell, where a cell added later may read them, so a name the session binds comes
    # back even when no cell reads it (in a script the file's reads are all there are)
    kernel_keeps_names: bool = False
    released: list[str] = field(default_factory=list)  # names let go at the session's end (see names_released)
    unbound: list[str] = field(default_factory=list)  # names unbound at the session's end (see names_unbound)
    # what methods it calls store on `self` that no code reads after it: not brought back
    left_attributes: list[str] = field(default_factory=list)
    # containers the session takes over that nothing after it reads: made in the
    # session, filled there and not downloaded (see containers_left_on_server)
    left_on_server: frozenset[str] = frozenset()
    # the containers the session makes or takes in and saves (see liveness), once planned
    accumulators: list = field(default_factory=list)
    # a `try` outside the region that handles its failures (see failure_handled_outside):
    # the session falls back on the code as written, so partial results stay as they were
    handled_by: str = ""

    @property
    def statements(self) -> list[cst.BaseStatement]:
        return list(self.suite.body[self.start : self.end])

    @property
    def moved(self) -> list[cst.BaseStatement]:
        """The statements the session runs (the server part, when the region is split)."""
        return self.split.server if self.split is not None else self.statements


class Role(Enum):
    """How one statement of a suite relates to remote work."""

    REMOTE = "remote"  # runs remote work: goes into the session
    NEUTRAL = "neutral"  # no remote work; may go into the session between remote statements
    BARRIER = "barrier"  # cannot go into a session: a run of remote work ends before it


@dataclass
class Kind:
    """How one statement of a suite relates to remote work."""

    role: Role
    model: str = ""
    flag_code: str = ""
    flag: cst.BaseExpression | None = None
    blocks: list[Block] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    why: str = ""
    helper_calls: list[tuple[cst.Call, RemoteHelper]] = field(default_factory=list)
    # a loop whose own remote work stops it: (what it sends to, why no session takes it),
    # for the one finding a loop left as it is gets (see _name_the_stopped_loops)
    stops: tuple[str, str] | None = None
    # a barrier that sends requests itself (a session, a call of a helper no session can
    # take): a member of the run of remote work it keeps apart (see _name_separated_runs)
    sends: bool = False


def module_code(region: Region, facts: Facts) -> bool:
    """Is the region a run of the module's own statements (its body, where a `def` makes
    one of ``facts.functions``, whose calls the session checks)?"""
    return region.suite is facts.module


def nested_in_planned_sessions(region: Region, facts: Facts, claimed: set[int], helpers: frozenset[str]) -> str:
    """Why the region cannot get a session of its own next to the sessions planned in this
    run (the statements ``claimed``), else "": it calls (through same-file functions) a
    function holding one of them, or one of them calls the function holding it. Either
    way one session would run inside the other, whose `remote=True` is written out —
    unless that function is one of the ``helpers``: called from a session, a helper takes
    the flag (`remote=False`), and so does a session opened in it."""
    if not claimed:
        return ""
    planned = {id(f): f.name.value for stmt_id in claimed for f in _enclosing_functions(facts, stmt_id)
               if f.name.value not in helpers}
    for func in _functions_called(region.statements, facts):
        if id(func) in planned:
            return (f"not hoisted: `{planned[id(func)]}`, which it calls, gets a session of its own here; run "
                    "ndif-opt again once that is applied to bundle the calls too")
    holders = {id(f) for f in _enclosing_functions(facts, id(region.statements[0])) if f.name.value not in helpers}
    if holders:
        claimed_statements = [facts.statements[i].node for i in claimed if i in facts.statements]
        for func in _functions_called(claimed_statements, facts):
            if id(func) in holders:
                return (f"not hoisted: a session planned here calls `{func.name.value}`, which holds it; its "
                        "requests join that session once it is applied")
    return ""


def _enclosing_functions(facts: Facts, stmt_id: int) -> list[cst.FunctionDef]:
    info = facts.statements.get(stmt_id)
    return [n for n in info.ancestors if isinstance(n, cst.FunctionDef)] if info is not None else []


def _functions_called(statements, facts: Facts) -> list[cst.FunctionDef]:
    """The module-level functions of the file the statements call by name, and those
    they call, transitively."""
    found: dict[int, cst.FunctionDef] = {}
    todo = list(statements)
    while todo:
        for call in find_nodes(todo.pop(), lambda n: type(n) is cst.Call):
            func = _same_file_function(call, facts)
            if func is not None and id(func) not in found:
                found[id(func)] = func
                todo.append(func.body)
    return list(found.values())


def _same_file_function(call: cst.Call, facts: Facts) -> cst.FunctionDef | None:
    """The module-level function of the file a call runs, by its name (`run(...)`)."""
    return facts.functions.get(call.func.value) if type(call.func) is cst.Name else None


def names_root(expr: cst.BaseExpression, names) -> bool:
    """Is ``expr`` rooted at one of ``names`` (`acc`, `acc.x`, `acc[k]`)?"""
    if not names:
        return False
    if isinstance(expr, cst.Attribute):
        expr = expr.value
    return root_name(expr) in names


def may_call(stmt: cst.CSTNode, helpers: dict[str, RemoteHelper]) -> bool:
    """Does ``stmt`` call a function by one of the names in ``helpers`` anywhere? Cheaper
    than :func:`helper_calls`' walk, which finds nothing when this is False."""
    if not helpers:
        return False

    def named_call(node: cst.CSTNode) -> bool:
        return type(node) is cst.Call and called_helper(node, helpers) is not None

    return bool(find_nodes(stmt, named_call))


def outer_blocks(facts: Facts, stmt: cst.CSTNode) -> list[Block]:
    """The outermost nnsight blocks inside ``stmt`` (itself included), in the order of
    ``facts.blocks``."""
    return list(_outer_blocks_by_statement(facts).get(id(stmt), ()))


def _outer_blocks_by_statement(facts: Facts) -> dict[int, list[Block]]:
    """id(statement) -> its outermost nnsight blocks (:func:`outer_blocks`), indexed
    once per version of the tree (read-only: callers copy what they keep)."""
    return facts.once(_index_outer_blocks)


def _index_outer_blocks(facts: Facts) -> dict[int, list[Block]]:
    # a `def` or `class` runs none of its body's blocks where it stands: its calls do
    # (they are the helper calls a statement makes), so an `if` holding a def and a call
    # of it is a statement that calls a helper, not one that mixes both
    index: dict[int, list[Block]] = {}
    for block in facts.blocks:
        if block.parent is None:
            for node in (block.node, *reversed(block.stmt.ancestors)):
                index.setdefault(id(node), []).append(block)
                if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                    break
    return index


def fewer_than_two_requests(suite, facts: Facts) -> bool:
    """Do the suite's remote blocks send fewer than two requests in all? A region's
    requests are those of its statements' outermost blocks, each statement counted on
    its own (:func:`requests_in`), so then no region of the suite sends two. A statement
    with a session or a local trace is a barrier (:meth:`SessionHoisting._kind`): its
    blocks are in no region, but a remote session is one request of a run that barriers
    may keep in several sessions (its finding names them)."""
    total = 0
    by_statement = _outer_blocks_by_statement(facts)  # (looked up once: asked of every statement)
    for stmt in suite.body:
        outer = by_statement.get(id(stmt))
        if outer and not any(b.method == "session" or b.remote.state is Remote.NO for b in outer):
            total += requests_in(outer, [stmt], facts)
        elif outer and any(b.method == "session" and b.remote.state is not Remote.NO for b in outer):
            total += 1
        if total >= 2:
            return False
        elif outer and isinstance(stmt, (cst.For, cst.While)) and any(b.remote.state is not Remote.NO for b in outer):
            return False  # a loop of sessions, or of local and remote traces: its finding says why it stays
    return True


def suites_outermost_first(facts: Facts):
    seen: dict[int, tuple[int, cst.CSTNode]] = {}
    for info in facts.statements.values():
        if id(info.suite) not in seen:
            seen[id(info.suite)] = (len(info.ancestors), info.suite)
    return [suite for _, suite in sorted(seen.values(), key=lambda item: item[0])]


def inside_planned(facts: Facts, suite, claimed: set[int]) -> bool:
    """Is the suite inside a statement already planned, or inside an nnsight block?"""
    body = suite.body
    if not body or facts.in_session_fallback(suite):
        return True
    info = facts.stmt(body[0])
    for ancestor in info.ancestors:
        if id(ancestor) in claimed:
            return True
        if isinstance(ancestor, cst.With) and facts.block_of(ancestor) is not None:
            return True
    return False


def window_edges_in(suite, facts: Facts, edges: frozenset[int]) -> set[int]:
    """Indices of the module's statements that begin a window (see RunContext.window_edges):
    a run stops before them. Empty unless the whole file of several windows is optimized
    at once."""
    if not edges or suite is not facts.module:
        return set()
    found: set[int] = set()
    line = sum(1 for _ in facts.module.header)
    for index, stmt in enumerate(suite.body):
        first_code = line + len(stmt.leading_lines)
        if any(line <= edge <= first_code for edge in edges):
            found.add(index)
        line += statement_code(stmt, facts.module).count("\n")  # (cached per statement)
    return found


def any_blocking(problems: list[Problem], context: Context) -> bool:
    return any(not is_unsafe_only(p) for p in problems)


def is_unsafe_only(problem: Problem) -> bool:
    return problem.kind in UNSAFE_KINDS


def deferrable_only(problem: Problem) -> bool:
    """Code with this problem may be replayed on the client after the session (a `try`
    around remote work: split, the split says when it cannot be)."""
    return splittable(problem)


def iteration_problems(stmt, facts: Facts) -> list[Problem]:
    """A `for ... else` or `while ... else` can't be reasoned about simply."""
    if isinstance(stmt, (cst.For, cst.While)) and stmt.orelse is not None:
        return [Problem("control", "has an `else:` clause", stmt)]
    return []


def failure_handled_outside(region: Region, facts: Facts) -> str:
    """Where a `try` outside the region may handle a failure of its code, said as a
    phrase (a `try` around it, or around a call of the function that holds it, or of a
    function that calls that one...), or "". After a handled failure the script goes on
    with what the iterations before it did; a session that failed would have done none."""
    parents = scope_index(facts).parents
    todo: list[tuple[cst.CSTNode, str]] = [(region.statements[0], "a `try` around it")]
    seen: set[str] = set()
    while todo:
        node, where = todo.pop()
        child, parent = node, parents.get(id(node))
        while parent is not None:
            if type(parent) is cst.Try and child is parent.body and parent.handlers:
                return where  # (a `try` with only `finally:` handles no failure: it lets it go on)
            if type(parent) is cst.FunctionDef:
                name = parent.name.value
                if name not in seen:
                    seen.add(name)
                    todo += [(call, f"a `try` around a call of `{name}`") for call in _calls_of(name, facts)]
                break
            if type(parent) in (cst.Lambda, cst.ClassDef):
                break
            child, parent = parent, parents.get(id(parent))
    return ""


def _calls_of(name: str, facts: Facts) -> list[cst.Call]:
    """The calls of a function named ``name``: `name(...)`, `obj.name(...)` (a method)."""
    return find_nodes(facts.module, lambda n: type(n) is cst.Call and (
        (type(n.func) is cst.Name and n.func.value == name)
        or (type(n.func) is cst.Attribute and n.func.attr.value == name)))

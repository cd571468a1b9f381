"""The client/server split of a region that session-hoisting moves into one session.

A region's statements are of three kinds:

- *server* statements: remote blocks and code NDIF may run (torch ops, arithmetic,
  `.item()`, list and dict updates, same-file helpers that obey the same rules);
- *client* statements: code without remote work that must run on your machine
  (`print`, tqdm, file writes, `json`, plotting, decoding with a module NDIF does not
  allow), and that feeds nothing the server part reads;
- *mixed* `for` loops: loops whose body holds both, split recursively.

The session runs the server statements in their order. Each client statement leaves a
*record* of the values it reads where it stood (a row appended to a saved list), and
after the session a *replay* runs the client statements in their order over those
records: a loop becomes a loop over its rows, a nested loop a loop over the rows its
iteration recorded. stdout and files come out identical; only their timing changes.

    with model.session(remote=...):
        _ndif_rows = list().save()
        for layer in range(n):
            with model.trace(prompt): ...
            diff = metric(logits)
            _ndif_rows.append((layer, diff))
    for layer, diff in _ndif_rows:
        print(layer, diff)

A split is refused, with the reason, when a record could not hold the value the client
statement would have seen: the value is changed in place later (a list still growing,
a tensor written into), or the client part computes something the server part reads.
"""

from __future__ import annotations

import ast
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

import libcst as cst

from ndif_opt.analysis.effects import PROGRESS_BARS
from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import (
    NameUse,
    all_params,
    collect,
    definite_binds,
    describing_name,
    exposed_reads,
    fresh_name,
    target_names,
)
from ndif_opt.analysis.regions import bound_before
from ndif_opt.analysis.vocabulary import CONTAINER_MUTATORS
from ndif_opt.analysis.wire import wire_problem
from ndif_opt.passes.common.guards import guard_of, jump_out_of
from ndif_opt.passes.common.records import RECORD_PREFIX, Keys, LogKeys, Reader, Recorded, Shape, plain_loads, shape
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import opening
from ndif_opt.syntax.walk import children, content_children, find_nodes, walk

# Problems a client statement may have and still be replayed after the session.
DEFERRABLE_KINDS = frozenset({"print", "effect", "progress", "module", "forbidden", "client-object", "request"})
# Problems a client statement may have and still run before the session: it computes on
# your machine (a module NDIF does not allow, an object only you have) and acts on nothing.
PREPARABLE_KINDS = frozenset({"module", "client-object"})


# the node classes compared with `is` (libcst's node classes are final; isinstance against
# them is an ABC check, and _jumps looks at every node of every statement a split classifies)
_JUMP_KINDS = frozenset({cst.Break, cst.Continue})
_OWN_JUMPS_KINDS = frozenset({cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda})


def _jumps(node: cst.CSTNode) -> bool:
    """Does ``node`` hold a `break` or `continue` of the loop around it?"""
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind in _JUMP_KINDS:
            return True
        if kind not in _OWN_JUMPS_KINDS:  # (a loop's or a function's jumps are its own)
            stack.extend(content_children(current))
    return False


def _is_jump(stmt: cst.CSTNode) -> bool:
    """`break` or `continue` alone on its line."""
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], (cst.Break, cst.Continue)))


def _branches(items: list["_Item"]) -> bool:
    """Does a loop body need each local statement to record itself (a branch or a jump
    decides which of them run)?"""
    return any(item.role is Part.IF or (item.role is Part.SERVER and _jumps(item.stmt)) for item in items)


def splittable(problem) -> bool:
    """May a region with this problem be split? Code that must stay on the client is
    replayed; so is a `try` without remote work (its failures are the client's own); a
    `try` around remote work is split by :meth:`_Splitter.split_try`, which says why
    when it cannot be."""
    return problem.kind in DEFERRABLE_KINDS or isinstance(problem.node, cst.Try)


@dataclass
class Split:
    """The session's statements and the replay after it."""

    server: list[cst.BaseStatement]
    replay: list[cst.BaseStatement]
    deferred: int  # client statements moved after the session
    carried: list[str] = field(default_factory=list)  # names the replay brings back at the end
    record_names: set[str] = field(default_factory=set)  # names of the record lists
    unsaved: set[str] = field(default_factory=set)  # saved names the records bring home instead
    dropped_bars: int = 0  # progress bars dropped (an unsafe fix) instead of replayed
    # a `try` around remote work was split: its handler runs in the replay, and the
    # session needs the code as written to fall back on (a failure in one session
    # would otherwise end every iteration's work, where each was handled on its own)
    fallback: bool = False
    # client code the session's remote work reads and that needs nothing remote: it runs
    # before the session, and the session takes its values in order
    prelude: list[cst.BaseStatement] = field(default_factory=list)
    prepared: int = 0  # statements moved into the prelude
    # section headers above replayed statements that go with the section's remote work:
    # id of a server statement -> the comment lines to put above it
    comments: dict[int, list[cst.EmptyLine]] = field(default_factory=dict)
    # a name the run's record holds whole -> the lines that record it and bind it back
    named_records: dict[str, list[cst.BaseStatement]] = field(default_factory=dict)
    log: cst.BaseStatement | None = None  # the line that makes the run's record, if any
    log_entries: set[int] = field(default_factory=set)  # ids of the lines that fill it

    def drop_records(self, names: set[str]) -> None:
        """Leave out the records of ``names``, which the session saves anyway: each holds
        the same object as the name from where it is recorded to the end (a name recorded
        whole is bound nowhere after that), and the replay reads the name itself. A run's
        record left empty goes too."""
        dropped = {id(stmt) for name in names & self.named_records.keys() for stmt in self.named_records.pop(name)}
        if not dropped:
            return
        self.log_entries -= dropped
        if self.log is not None and not self.log_entries:
            dropped.add(id(self.log))
            self.record_names.discard(self.log.body[0].targets[0].target.value)
            self.log = None
        self.server = _without(self.server, dropped)
        self.replay = _without(self.replay, dropped)


def _without(stmts: list[cst.BaseStatement], dropped: set[int]) -> list[cst.BaseStatement]:
    """``stmts`` but the dropped ones, whose comments and blank lines pass to the next."""
    kept: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for stmt in stmts:
        if id(stmt) in dropped:
            carried += stmt.leading_lines
            continue
        if carried:
            stmt = stmt.with_changes(leading_lines=[*carried, *stmt.leading_lines])
            carried = []
        kept.append(stmt)
    return kept


class Refused(Exception):
    """Why the region cannot be split, in words a researcher can act on."""


class Part(Enum):
    """Where a statement of a split scope runs."""

    SERVER = "server"  # in the session
    CLIENT = "client"  # on your machine, replayed after the session over what it recorded
    MIXED = "mixed"  # a loop with both: its header and server statements in the session
    IF = "if"  # a branch inside a loop with both
    PRE = "pre"  # on your machine, before the session (its inputs: tokenizing, reading files)


@dataclass
class _Item:
    """One statement of a scope, classified."""

    stmt: cst.BaseStatement
    role: Part
    records: list[Recorded] = field(default_factory=list)  # client: the session's values it reads
    replayed: cst.BaseStatement | None = None  # client: the statement as the replay runs it
    rows: str = ""  # mixed: the name of its record list
    rows_read: str = ""  # mixed: how the replay reaches that list (default: ``rows``)
    rows_key: str = ""  # mixed: its key in the record of the loop around it
    row: str = ""  # mixed: the replay's name for one record, when it is not unpacked
    body: list["_Item"] = field(default_factory=list)  # mixed: its body's items
    unsaved: set[str] = field(default_factory=set)  # mixed: names its rows bring home instead of a save
    reduced: set[str] = field(default_factory=set)  # client: names it reads only parts of, recorded
    events: bool = False  # mixed: its body branches or jumps, so each local statement records itself
    it_name: str = ""  # mixed with events: the list of one iteration's records
    items_name: str = ""  # ... and the replay's iterator over it
    orelse: list["_Item"] = field(default_factory=list)  # if: its `else`/`elif` items
    depth: int = 0  # how many of the region's `for` loops are around it
    branch: bool = False  # inside an `if` or a `try` of the region: it may not run
    after_jump: bool = False  # an earlier statement of its loop body may end the iteration
    session_iter: cst.BaseExpression | None = None  # mixed: what the session's loop goes over
    why: str = ""  # client: why it must run on your machine, when that is its own code's doing


class _Splitter:
    def __init__(self, facts: Facts, server_check, remote_work, taken: set[str], drop_bars: bool = False) -> None:
        self.in_loop = False
        self.drop_bars = drop_bars
        self.dropped_bars = 0
        self.facts = facts
        self.server_check = server_check
        self.remote_work = remote_work  # stmt -> (has remote work, block bodies to skip)
        self.taken = set(taken)
        self.record_names: set[str] = set()
        self.deferred = 0
        self.taken_functions = set(facts.functions)  # a same-file `len` is not the builtin
        self.client_names: set[str] = set()  # names the client part has bound or changed so far
        self.binder: dict[str, _Item] = {}  # a client name -> the client statement that bound it last
        self.handled_failures = 0  # `try` statements split around their remote work
        self.readable: set[str] = set()  # names a recorded part may read (see split_region)
        self.jumped: list[bool] = []  # per loop being classified, outermost first: has its body met a jump yet?
        self.branch_depth = 0
        self.pre: list[_Item] = []  # client statements moved before the session, in the order found
        # names whose objects stay on your machine (`self`, a parameter the caller sees):
        # what stores into them is replayed; `(name, ".attr")` paths the replay changes
        self.client_roots: frozenset[str] = frozenset()
        self.anchor: cst.CSTNode | None = None  # the region's first statement
        self.statements: list[cst.BaseStatement] = []  # the region's statements
        self.client_paths: set[tuple[str, str]] = set()

    # -- classification ------------------------------------------------------------
    def classify(self, stmts) -> list[_Item]:
        items: list[_Item] = []
        for stmt in stmts:
            parts = self._split_call_statement(stmt)
            if parts is None and self.client_roots:
                parts = self._split_store(stmt)
            if parts is None and isinstance(stmt, cst.Try) and self.remote_work(stmt)[0]:
                parts = [_Item(stmt, Part.SERVER)] if self._handled_in_session(stmt) else self.split_try(stmt)
            if parts is None:
                parts = [self._classify(stmt)]
            for item in parts:
                item.depth = len(self.jumped)
                item.branch = self.branch_depth > 0
                item.after_jump = bool(self.jumped) and self.jumped[-1]
                items.append(self._settle(item))
            if self.jumped and _jumps(stmt):
                self.jumped[-1] = True
        _check_early_ends(items)
        return items

    @contextmanager
    def _in_branch(self):
        """Classify code that may not run (an `if` body, a `try` body)."""
        self.branch_depth += 1
        try:
            yield
        finally:
            self.branch_depth -= 1

    def _settle(self, item: _Item) -> _Item:
        """Code without remote work that reads what the client computed runs on the
        client too, after it (the data decides the split, not the kind of statement)."""
        if self.client_roots:
            item = self._settle_roots(item)
        stmt = item.stmt
        if item.role is Part.SERVER and self.client_names:
            # (what it reads before binding it itself: `for n in ...` reads no earlier `n`)
            used = self.client_names & (set(exposed_reads([stmt])) | set(collect(stmt).mutates))
            if used and self.remote_work(stmt)[0]:
                for name in sorted(used):
                    if not self._prepare(name):
                        raise Refused(
                            f"`{name}` is computed by code that must run on your machine and is also used "
                            "by the remote part"
                        )
            elif used:
                item = self._replayed(item)
        elif item.role in (Part.MIXED, Part.IF) and self.client_names:
            header = item.stmt.iter if item.role is Part.MIXED else item.stmt.test
            used = self.client_names & set(collect(header).reads)
            if used:
                raise Refused(
                    f"`{sorted(used)[0]}` is computed by code that must run on your machine and decides how the "
                    "remote part runs"
                )
        if item.role is Part.CLIENT:
            use = collect(stmt)
            # (a store into an object that stays here is followed by its path)
            self.client_names |= set(use.binds) | (set(use.mutates) - self.client_roots)
            self.binder.update((name, item) for name in use.binds)
        elif item.role is Part.SERVER:
            bound = set(collect(stmt).binds)
            self.client_names -= bound
            for name in bound:
                self.binder.pop(name, None)
        return item

    def _settle_roots(self, item: _Item) -> _Item:
        """A statement that changes an object that stays on your machine, or reads what
        the replay changed in it, is replayed too; with remote work it cannot be."""
        stmt = item.stmt
        if item.role is Part.CLIENT:
            self.client_paths |= _root_paths_changed(stmt, self.client_roots)
            return item
        if item.role is not Part.SERVER:
            return item
        changed = _root_paths_changed(stmt, self.client_roots)
        read = self._paths_read(stmt)
        clash = {path for path in read if _overlaps(path, self.client_paths)}
        if not changed and not clash:
            return item
        if self.remote_work(stmt)[0]:
            root = sorted(changed or clash)[0][0]
            raise Refused(
                f"`{_first_line(stmt)}` changes or reads `{root}`, which stays on your machine, in the same "
                "statement as remote work"
            )
        self.client_paths |= changed
        return self._replayed(item)

    def _replayed(self, item: _Item) -> _Item:
        """The server line ``item``, replayed on the client instead."""
        self.deferred += 1
        return replace(item, role=Part.CLIENT)

    def _paths_read(self, stmt: cst.CSTNode) -> set[tuple[str, str]]:
        """What the statement reads of the objects that stay here, with what the methods
        of `self` it calls read of it (a method the class does not show: all of it)."""
        found = _root_paths_read(stmt, self.client_roots)
        for root, attr in list(found):
            if root == "self" and attr != "*":
                found |= self._method_reads(attr[1:], set())
        return found

    def _method_reads(self, name: str, seen: set[str]) -> set[tuple[str, str]]:
        if name in seen:
            return set()
        seen.add(name)
        method = self.methods.get(name)
        if method is None:
            return set()  # an attribute, not a method of the class (read itself, above)
        params = all_params(method.params)
        if not params or params[0].name.value != "self":
            return {("self", "*")}
        found = _root_paths_read(method.body, frozenset({"self"}))
        for _root_name, attr in list(found):
            if attr != "*":
                found |= self._method_reads(attr[1:], seen)
        return found

    @cached_property
    def methods(self) -> dict[str, cst.FunctionDef]:
        """The methods of the class whose method holds the region."""
        ancestors = self.facts.stmt(self.anchor).ancestors if self.anchor is not None else ()
        for node in reversed(ancestors):
            if isinstance(node, cst.ClassDef):
                return {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
        return {}

    def _changes_a_root(self, call: cst.Call) -> bool:
        """Does ``call`` change an object that stays on your machine (`self.records.append(x)`,
        `self` staying here)? Then only the replay may make it."""
        func = call.func
        return (
            bool(self.client_roots)
            and isinstance(func, cst.Attribute)
            and func.attr.value in CONTAINER_MUTATORS
            and _path(func.value)[0] in self.client_roots
            and not self.remote_work(func.value)[0]
        )

    def _split_store(self, stmt) -> list[_Item] | None:
        """`self.cache[p] = self.run(p)`, `self` staying on your machine: the session
        computes the value (`run_value = self.run(p)`), the replay stores it."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return None
        assign = stmt.body[0]
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            return None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Subscript, cst.Attribute)) or _root(target) not in self.client_roots:
            return None
        if not self.remote_work(assign.value)[0] or self.remote_work(target)[0]:
            return None
        if self.server_check.problems(assign.value):
            return None
        attributes = [token for token in _path(target) if token.startswith(".")]
        name = self.fresh_plain(f"{attributes[-1][1:] if attributes else _root(target)}_value")
        value = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], assign.value)])
        store = stmt.with_changes(body=[assign.with_changes(value=cst.Name(name))], leading_lines=[])
        self.deferred += 1
        return [_Item(value.with_changes(leading_lines=stmt.leading_lines), Part.SERVER), _Item(store, Part.CLIENT)]

    def _fed(self, problems) -> bool:
        """Are the problems of remote work only values it reads that the region computed
        on your machine (`prompt = json.dumps(...)`), each of which can be prepared
        before the session? It only reads them whole: a value, not an object it uses."""
        names = []
        for problem in problems:
            if problem.kind != "client-object" or type(problem.node) is not cst.Name:
                return False
            names.append(problem.node.value)
        return all(name in self.binder and self._prepare(name) for name in names)

    def _prepare(self, name: str) -> bool:
        """Move the client statement that computed ``name``, and those it reads from,
        before the session, if each can run there: nothing but computing (or reading a
        file) on your machine, nothing remote among its inputs, one loop deep at most, and
        run in every iteration up to it. All of them, or none."""
        closure: list[_Item] = []
        if not self._preparable(name, closure, set()):
            return False
        for producer in closure:
            producer.role = Part.PRE
            self.deferred -= 1
            self.pre.append(producer)
            self.client_names -= set(collect(producer.stmt).binds)
        return True

    def _preparable(self, name: str, closure: list[_Item], seen: set[int]) -> bool:
        producer = self.binder.get(name)
        if producer is None:
            return False
        if producer.role is Part.PRE or id(producer) in seen:
            return True
        stmt = producer.stmt
        if producer.role is not Part.CLIENT or producer.depth > 1 or producer.branch or producer.after_jump:
            return False
        if not _simple_or_reading(stmt):
            return False
        problems = self.server_check.problems(stmt)
        if any(p.kind not in PREPARABLE_KINDS and not _reads_a_file(p.node) for p in problems):
            return False
        use = collect(stmt)
        if set(use.mutates) - set(use.binds):
            return False  # it changes something of yours: its order with the rest matters
        seen.add(id(producer))
        closure.append(producer)
        return all(
            self._preparable(read, closure, seen) for read in exposed_reads([stmt]) if read in self.client_names
        )

    def _handled_in_session(self, stmt: cst.Try) -> bool:
        """A `try` around remote work whose code (body, handlers, `else`, `finally`) may all
        run on the server: it runs in the session as written, and each failure is handled
        there, item by item (measured on nnsight 0.8: a trace that raises inside a session's
        `try` is caught there, and the session goes on). What a handler sees of the error
        is the error itself, as in the run on your machine the script means."""
        _remote, skip = self.remote_work(stmt)
        return not [p for p in self.server_check.problems(stmt, skip=skip) if p.node is not stmt]

    def split_try(self, stmt: cst.Try) -> list[_Item]:
        """`try: <remote work> <local work> except: <handler>`: the remote work runs in
        the session; the local work and the handler are replayed as a `try` of their
        own. The session falls back on the code as written when it fails, so a remote
        failure is still handled per iteration."""
        if stmt.orelse is not None or stmt.finalbody is not None:
            raise Refused("a `try` around remote work has an `else:` or `finally:` clause")
        if not isinstance(stmt.body, cst.IndentedBlock):
            raise Refused("a one-line `try` around remote work")
        for handler in stmt.handlers:
            if self.remote_work(handler)[0]:
                raise Refused("an `except` handler sends remote requests of its own")
        body = list(stmt.body.body)
        last = max(i for i, s in enumerate(body) if self.remote_work(s)[0])
        with self._in_branch():
            head = self.classify(body[: last + 1])
        local = [item for item in head if item.role is not Part.SERVER]
        if local:
            what = ("holds code that must run on your machine, inside a `try`, before remote work"
                    if local[0].role is not Part.CLIENT else "runs inside a `try` before remote work")
            raise Refused(
                f"`{_first_line(local[0].stmt)}` {what}: if it failed, that work would not have run, and "
                "a session cannot tell"
            )
        tail = body[last + 1 :]
        self.handled_failures += 1
        if not tail:
            return head  # the remote work cannot fail on the client: its handler never runs here
        if any(_jumps(s) for s in tail):
            # `break`/`continue` after the remote work (a retry that stops on success): the
            # session's loop must take it too, or it would run every attempt
            if not _is_jump(tail[-1]) or any(_jumps(s) for s in tail[:-1]):
                raise Refused(
                    f"`{_first_line(next(s for s in tail if _jumps(s)))}` ends the loop's iteration inside a "
                    "`try`, after code that must run on your machine: the session could not tell whether it ran"
                )
            jump = [_Item(tail[-1].deep_clone(), Part.SERVER)]
        else:
            jump = []
        replayed = stmt.with_changes(body=stmt.body.with_changes(body=opening(tail)))
        self.deferred += 1
        return [*head, _Item(replayed, Part.CLIENT), *jump]

    def _split_call_statement(self, stmt) -> list[_Item] | None:
        """`print(x, helper(p))` where `helper` sends a request: the session computes the
        argument (`helper_result = helper(p)`), the replay prints it. Arguments are
        evaluated in order in either case; those left in place have no remote work."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return None
        expr = stmt.body[0]
        if not (isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call)):
            return None
        call = expr.value
        remote, _skip = self.remote_work(stmt)
        if not remote or not (self.server_check.problems(stmt) or self._changes_a_root(call)):
            return None
        server: list[_Item] = []
        args = []
        for arg in call.args:
            if arg.star or not self.remote_work(arg.value)[0]:
                args.append(arg)
                continue
            if self.server_check.problems(arg.value):
                return None
            callee = arg.value.func if isinstance(arg.value, cst.Call) else None
            # named after the function (`probe_result`), or the method (`self.probe(p)`)
            named = callee.value if isinstance(callee, cst.Name) else \
                callee.attr.value if isinstance(callee, cst.Attribute) else ""
            base = f"{named}_result" if named else "remote_result"
            name = self.fresh_plain(base)
            assign = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], arg.value)])
            server.append(_Item(assign, Part.SERVER))
            args.append(arg.with_changes(value=cst.Name(name)))
        if not server or any(self.remote_work(a.value)[0] for a in args):
            return None
        client = stmt.with_changes(body=[expr.with_changes(value=call.with_changes(args=args))])
        self.deferred += 1
        return [*server, _Item(client, Part.CLIENT)]

    def _classify(self, stmt) -> _Item:
        remote, skip = self.remote_work(stmt)
        problems = self.server_check.problems(stmt, skip=skip)
        if self.in_loop and isinstance(stmt, cst.If) and _jumps(stmt):
            # it may end the iteration early: the replay must take the same branch
            return self._mixed_if(stmt)
        # a loop that stores into an object staying here is split even with nothing else local
        keeps = bool(self.client_roots) and remote and isinstance(stmt, (cst.For, cst.If)) and bool(
            _root_paths_changed(stmt, self.client_roots)
        )
        if not problems and not keeps:
            return _Item(stmt, Part.SERVER)
        # (a `try` around remote work is split where the loop's body is classified)
        control = [p for p in problems if not splittable(p)]
        if control:
            raise Refused(f"the code {control[0].message}")
        if not remote:
            self.deferred += 1
            # (a call or print of its own says more than a name some other local code binds)
            own = sorted(problems, key=lambda problem: problem.kind == "client-object")
            return _Item(stmt, Part.CLIENT, why=own[0].message if own else "")
        if problems and self._fed(problems):
            return _Item(stmt, Part.SERVER)
        if isinstance(stmt, cst.If) and self.in_loop:
            return self._mixed_if(stmt)
        if not (isinstance(stmt, cst.For) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock)):
            raise Refused(
                f"the code {problems[0].message}, in the same statement as remote work "
                "(only a `for` loop's body can be split into a remote and a local part)"
            )
        header = self.server_check.problems(stmt.target) + self.server_check.problems(
            unwrap_progress(stmt.iter, self.facts)
        )
        if header:
            raise Refused(f"the loop's header {header[0].message}")
        outer, self.in_loop = self.in_loop, True
        self.client_names -= set(target_names(stmt.target))  # the server's loop binds them
        self.jumped.append(False)
        try:
            item = _Item(stmt, Part.MIXED, body=self.classify(stmt.body.body))
        finally:
            self.in_loop = outer
            self.jumped.pop()
        item.events = _branches(item.body)
        if self.drop_bars and all(child.role is Part.SERVER for child in item.body):
            # only its progress bar must stay here: with unsafe fixes the bar is dropped
            # (the session's loop runs without it) instead of replayed over finished work
            self.dropped_bars += 1
            return _Item(stmt, Part.SERVER)
        return item

    def _mixed_if(self, stmt: cst.If) -> _Item:
        """An `if` whose branches hold remote work or end the iteration, and code that
        must stay here: the session records the branch it took, the replay takes it too."""
        if self.server_check.problems(stmt.test):
            raise Refused(f"the test of an `if` around remote work {self.server_check.problems(stmt.test)[0].message}")
        if not isinstance(stmt.body, cst.IndentedBlock):
            raise Refused("a one-line `if` around remote work")
        with self._in_branch():
            item = _Item(stmt, Part.IF, body=self.classify(stmt.body.body))
            other = stmt.orelse
            if isinstance(other, cst.If):
                item.orelse = [self._classify(other)]
            elif isinstance(other, cst.Else):
                if not isinstance(other.body, cst.IndentedBlock):
                    raise Refused("a one-line `else` around remote work")
                item.orelse = self.classify(other.body.body)
        return item

    # -- names -------------------------------------------------------------------
    def uses(self, items, role_filter: Part) -> NameUse:
        """Names used by the items' parts of one role (mixed loops: their header and
        server statements count as server)."""
        total = NameUse()
        for item in items:
            if item.role is Part.IF:
                if role_filter is Part.SERVER:
                    total.merge(collect(item.stmt.test))
                total.merge(self.uses(item.body + item.orelse, role_filter))
            elif item.role is Part.MIXED:
                if role_filter is Part.SERVER:
                    total.merge(NameUse(binds={n: item.stmt.target for n in target_names(item.stmt.target)}))
                    total.merge(collect(item.stmt.iter))
                total.merge(self.uses(item.body, role_filter))
            elif item.role == role_filter:
                total.merge(collect(item.stmt))
        return total

    def fresh_plain(self, base: str) -> str:
        """``base`` itself, or ``base_2``... when the file uses it."""
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        self.record_names.add(name)
        return name

    def fresh(self, base: str) -> str:
        return self.fresh_plain(f"{RECORD_PREFIX}{base}")


def split_region(statements, facts: Facts, server_check, remote_work, taken: set[str],
                 carry: list[str] = (), later: set[str] = frozenset(), is_model=lambda name: False,
                 drop_bars: bool = False, client_roots: frozenset[str] = frozenset()) -> Split:
    """Split ``statements``; ``carry``: names read after the region that the server part
    computes and nothing else brings back (the replay ends by binding them to their
    values at the end of the session)."""
    splitter = _Splitter(facts, server_check, remote_work, taken, drop_bars)
    splitter.statements = list(statements)
    splitter.client_roots = frozenset(client_roots)
    splitter.anchor = statements[0] if statements else None
    splitter.later = set(later) | set(carry)
    items = splitter.classify(statements)
    if splitter.client_paths:
        _check_kept_paths(items, splitter)
    prelude = _prelude(items, splitter, facts) if splitter.pre else []
    server = splitter.uses(items, Part.SERVER)
    client = splitter.uses(items, Part.CLIENT)
    server_exposed = exposed_reads([item.stmt for item in items if item.role is not Part.CLIENT])
    _check_independence(server, client, server_exposed, splitter.later, splitter.client_roots,
                        origin=lambda name: _origin(items, name))
    # a model is changed in place only by interventions inside traces: not a value to record
    defined = {n for n in set(server.binds) | set(server.mutates) if not is_model(n)}
    splitter.containers, splitter.changed_paths = _shallow_containers(items, splitter, facts)
    # names a recorded part may read besides its own value: the session's, or ones the region
    # leaves alone (a module constant); never one the client statements bind
    splitter.readable = (defined | (set(server_exposed) - set(server.binds))) - set(client.binds)
    _plan_records(items, defined, {n for n in server.mutates if n in defined}, splitter)
    _drop_unread(items, splitter)
    carry = [n for n in carry if n not in client.binds]
    log = splitter.fresh("log") if _needs_log(items) or carry else ""
    record = Split([], [], 0)
    server_stmts, replay = _build(items, log, splitter, facts, carry, record)
    unsaved = set().union(*(i.unsaved for i in _mixed(items)))
    return replace(record, server=server_stmts, replay=replay, deferred=splitter.deferred, carried=carry,
                   record_names=splitter.record_names, unsaved=unsaved, dropped_bars=splitter.dropped_bars,
                   fallback=splitter.handled_failures > 0, prelude=prelude, prepared=len(splitter.pre))


def _check_kept_paths(items: list[_Item], splitter: _Splitter) -> None:
    """No part of the session may read what the replay changes in an object that stays
    on your machine: in a loop, a later iteration would have seen the change."""
    for item in items:
        if item.role is Part.SERVER:
            parts = [item.stmt]
        elif item.role is Part.MIXED:
            parts = [item.stmt.iter]
            _check_kept_paths(item.body, splitter)
        elif item.role is Part.IF:
            parts = [item.stmt.test]
            _check_kept_paths(item.body + item.orelse, splitter)
        else:
            continue
        for part in parts:
            for root, attr in splitter._paths_read(part):
                if _overlaps((root, attr), splitter.client_paths):
                    what = root if attr == "*" else root + attr
                    raise Refused(
                        f"the remote part reads `{what}`, which code that must run on your machine changes as the "
                        "loop goes on"
                    )


def _simple_or_reading(stmt: cst.CSTNode) -> bool:
    """A line, or `with open(path) as f:` around lines (a file read in one place)."""
    if type(stmt) is cst.SimpleStatementLine:
        return True
    return (
        type(stmt) is cst.With
        and all(_reads_a_file(item.item) for item in stmt.items)
        and isinstance(stmt.body, cst.IndentedBlock)
        and all(type(inner) is cst.SimpleStatementLine for inner in stmt.body.body)
    )


READ_MODES = frozenset({"r", "rb", "rt", "br", "tr"})


def _reads_a_file(node: cst.CSTNode) -> bool:
    """Is ``node`` `open(path)` in a mode that only reads?"""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "open"):
        return False
    mode = None
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if len(positional) >= 2:
        mode = positional[1].value
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "mode":
            mode = arg.value
    if mode is None:
        return True
    return isinstance(mode, cst.SimpleString) and mode.evaluated_value in READ_MODES


def _root_paths_changed(stmt: cst.CSTNode, roots: frozenset[str]) -> set[tuple[str, str]]:
    """The `(root, ".attr")` paths of ``roots`` the statement changes (`self.cache[k] = v`,
    `self.seen.append(x)`, `self.n += 1`); `(root, "*")` when it changes the root itself
    (`results[k] = v`, `results.append(x)`)."""
    paths: list[tuple[str, ...]] = []
    for node in find_nodes(stmt, lambda n: isinstance(n, (cst.AssignTarget, cst.AugAssign))):
        if isinstance(node.target, (cst.Attribute, cst.Subscript)):  # (a name bound anew changes no object)
            paths.append(_path(node.target))
    for node in find_nodes(stmt, lambda n: isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)):
        if node.func.attr.value in CONTAINER_MUTATORS:
            # it changes what it is called on: the path of that, and something in it
            paths.append((*_path(node.func.value), ANY))
    found: set[tuple[str, str]] = set()
    for path in paths:
        if len(path) > 1 and path[0] in roots:
            found.add((path[0], path[1] if path[1].startswith(".") else "*"))
    return found


def _root_paths_read(stmt: cst.CSTNode, roots: frozenset[str]) -> set[tuple[str, str]]:
    """The `(root, ".attr")` paths of ``roots`` the statement reads; `(root, "*")` when it
    reads the root whole (passes `self` on)."""
    found: set[tuple[str, str]] = set()
    under_attribute = set()
    for node in find_nodes(stmt, lambda n: isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name)):
        if node.value.value in roots:
            found.add((node.value.value, "." + node.attr.value))
            under_attribute.add(id(node.value))
    for node in find_nodes(stmt, lambda n: isinstance(n, cst.Name) and n.value in roots):
        if id(node) not in under_attribute:
            found.add((node.value, "*"))
    return found


def _overlaps(path: tuple[str, str], paths: set[tuple[str, str]]) -> bool:
    """Does ``path`` reach what one of ``paths`` is (the same attribute, or the root whole)?"""
    return any(p[0] == path[0] and (p[1] == path[1] or "*" in (p[1], path[1])) for p in paths)


def _prelude(items: list[_Item], splitter: _Splitter, facts: Facts) -> list[cst.BaseStatement]:
    """The code that runs before the session: the region's prepared statements, and for
    a loop with prepared statements a loop over the same items that runs them and
    keeps their values (`_ndif_inputs`), which the session's loop takes in turn
    (`next(_ndif_feed)`) where each statement stood."""
    needed = _check_prelude(items, splitter)
    prelude: list[cst.BaseStatement] = []
    kept: list[_Item] = []
    for item in items:
        if item.role is Part.PRE:
            prelude.append(item.stmt)
        elif item.role is Part.MIXED and any(child.role is Part.PRE for child in item.body):
            before, feed = _loop_prelude(item, needed, splitter, facts)
            prelude += before
            kept += [feed, item]
        else:
            kept.append(item)
    items[:] = kept
    return prelude


def _loop_prelude(item: _Item, needed: set[str], splitter: _Splitter, facts: Facts):
    loop: cst.For = item.stmt
    listed, inputs, feed = splitter.fresh("items"), splitter.fresh("inputs"), splitter.fresh("feed")
    body: list[cst.BaseStatement] = []
    children: list[_Item] = []
    for child in item.body:
        if child.role is not Part.PRE:
            children.append(child)
            continue
        body.append(child.stmt.with_changes(leading_lines=[]))
        fed = [n for n in collect(child.stmt).binds if n in needed]
        if fed:
            body.append(cst.parse_statement(f"{inputs}.append({_tuple_code(fed)})\n"))
            taken = cst.parse_statement(f"{_target_code(fed)} = next({feed})\n")
            children.append(_Item(taken, Part.SERVER, depth=child.depth))
    item.body = children
    item.session_iter = cst.Name(listed)
    # the items are listed once: the prelude and the session go over the same ones
    iterable = code_of(unwrap_progress(loop.iter, facts))
    before = [
        _statement(f"{listed} = list({iterable})", "# the loop's items, listed once: both loops go over them"),
        _statement(f"{inputs} = []", "# what the session needs from your machine, in the order it needs it"),
        cst.For(target=loop.target, iter=cst.Name(listed), body=cst.IndentedBlock(body=body)),
    ]
    return before, _Item(_statement(f"{feed} = iter({inputs})", "# taken in turn where each was computed"), Part.SERVER)


def _check_prelude(items: list[_Item], splitter: _Splitter) -> set[str]:
    """Refuse the split unless each prepared statement computes before the session what
    it computed where it stood: nothing else in the region binds or changes what it
    reads, and nothing else uses the modules and objects of yours it calls (a random
    generator drawn from in another order). The names others read of what it binds."""
    parts = [_unprepared_uses(item, splitter) for item in items]
    everything = NameUse()
    for part in parts:
        everything.merge(part)
    needed = set(everything.reads) | splitter.later
    changed = set(everything.binds) | set(everything.mutates)
    earlier = NameUse()  # what the items before the current one use
    for item, part in zip(items, parts):
        if item.role is Part.PRE:
            _check_prepared(item, set(), set(earlier.binds) | set(earlier.mutates), set(earlier.reads), splitter)
        elif item.role is Part.MIXED and any(child.role is Part.PRE for child in item.body):
            iterable = set(collect(unwrap_progress(item.stmt.iter, splitter.facts)).reads)
            moved = iterable & (set(earlier.binds) | set(earlier.mutates))
            if moved:
                raise Refused(
                    f"the loop goes over `{sorted(moved)[0]}`, which the remote part computes, and code that must "
                    "run on your machine before it needs each item"
                )
            known = set(target_names(item.stmt.target))
            for child in item.body:
                if child.role is Part.PRE:
                    _check_prepared(child, known, changed, set(), splitter)
                    known |= set(collect(child.stmt).binds)
        earlier.merge(part)
    if any(find_nodes(item.stmt, _reads_a_file) for item in splitter.pre):
        writes = _writes_files(items, splitter)
        if writes is not None:
            raise Refused(
                f"a file is read before the session, where it was read in the loop, and `{_first_line(writes)}` "
                "acts on files on your machine in the same loop"
            )
    for item in splitter.pre:
        used = _yours(item, splitter) & set(everything.reads)
        if used:
            raise Refused(
                f"`{sorted(used)[0]}` is used on your machine both by code the remote part needs first and by code "
                "after it; run in another order, it could give other values"
            )
    return needed


def _writes_files(items: list[_Item], splitter: _Splitter) -> cst.CSTNode | None:
    """The first statement of the region, other than the prepared ones, that acts on
    files (writes one, sleeps...), or None."""
    for item in items:
        if item.role in (Part.MIXED, Part.IF):
            found = _writes_files(item.body + item.orelse, splitter)
            if found is not None:
                return found
        elif item.role is Part.CLIENT:
            problems = splitter.server_check.problems(item.stmt)
            if any(p.kind == "effect" or p.kind == "forbidden" for p in problems):
                return item.stmt
    return None


def _check_prepared(item: _Item, known: set[str], changed: set[str], read_before: set[str], splitter) -> None:
    reads = set(exposed_reads([item.stmt])) - known
    moved = {name for name in reads & changed if not _only_intervened_on(name, splitter)}
    if moved:
        raise Refused(
            f"`{_first_line(item.stmt)}` must run on your machine, the remote part needs what it computes, and it "
            f"reads `{sorted(moved)[0]}`, which changes in the remote part"
        )
    early = set(collect(item.stmt).binds) & read_before
    if early:
        raise Refused(f"`{sorted(early)[0]}` is read before the line that must run on your machine first binds it")


def _only_intervened_on(name: str, splitter: _Splitter) -> bool:
    """Is ``name`` a model that the region changes only inside its nnsight blocks
    (`model.layers[0].output[:] = 0`)? Such a write is an intervention on one forward
    pass, not a change of the object the client reads (`model.config.n_embd`)."""
    facts = splitter.facts
    if name not in facts.models:
        return False
    bodies = tuple(block.node.body for block in facts.blocks)
    return not any(name in collect(stmt, skip=bodies).mutates for stmt in splitter.statements)


def _yours(item: _Item, splitter: _Splitter) -> set[str]:
    """The modules and objects only your machine has that the statement uses."""
    reads = set(collect(item.stmt).reads)
    return {n for n in reads if n in splitter.facts.imports or splitter.server_check.is_client_object(n)}


def _unprepared_uses(item: _Item, splitter: _Splitter) -> NameUse:
    """Names used by the item's parts that are not prepared: its server and client parts."""
    found = splitter.uses([item], Part.SERVER)
    found.merge(splitter.uses([item], Part.CLIENT))
    return found


def _first_line(stmt: cst.CSTNode) -> str:
    """The statement's first line of code (not a comment above it)."""
    lines = [line.strip() for line in code_of(stmt).strip().splitlines()]
    return next((line for line in lines if line and not line.startswith("#")), lines[0] if lines else "")


def _check_early_ends(items: list[_Item]) -> None:
    """A replayed `try` whose handler leaves the iteration (`continue`, `break`,
    `return`) would have skipped the remote work after it; the session runs that work
    whatever the replay does."""
    for index, item in enumerate(items):
        if item.role is Part.CLIENT and isinstance(item.stmt, cst.Try) \
                and jump_out_of(item.stmt, raises=False) is not None:
            # (a jump the session mirrors is no work: see split_try)
            if any(later.role is not Part.CLIENT and not _is_jump(later.stmt) for later in items[index + 1 :]):
                raise Refused(
                    f"`{_first_line(item.stmt)}` may end the iteration early, before remote work that "
                    "follows it; a session runs that work either way"
                )


def _mixed(items: list[_Item]):
    for item in items:
        if item.role is Part.MIXED:
            yield item
            yield from _mixed(item.body)


def _shallow_containers(items: list[_Item], splitter: "_Splitter", facts: Facts) -> tuple[set[str], set]:
    """Plain lists and dicts the server part changes in place, and the access paths
    it changes (`results['kl']` for `results['kl'].append(v)`): an element of a plain
    container under none of those paths is a snapshot once recorded."""
    mutations = _Mutations()
    for item in _server_statements(items):
        walk(item.stmt, mutations)
    mutated = splitter.uses(items, Part.SERVER).mutates
    aliased = {e.value for e in mutations.stored if isinstance(e, cst.Name) and e.value in mutated}
    containers = set()
    for name in mutated:
        bindings = [v for _stmt, v in facts.bindings.get(name, ())]
        if bindings and all(_plain_container(v, facts) for v in bindings) and name not in aliased:
            containers.add(name)
    return containers, mutations.paths


def _plain_container(value: cst.BaseExpression, facts: Facts) -> bool:
    if isinstance(value, (cst.List, cst.Dict, cst.ListComp, cst.DictComp)):
        return True
    if isinstance(value, cst.Call):
        path = qualify(value.func, facts.imports) or ""
        return path in ("list", "dict", "collections.defaultdict", "collections.OrderedDict")
    return False


class _Mutations(cst.CSTVisitor):
    """The access paths the code changes in place (`x` for `x.append(v)` and `x[k] = v`,
    `x[k]` too for `x[k] += v`, which may change the element itself), and the values
    it stores into containers."""

    def __init__(self) -> None:
        self.paths: set[tuple[str, ...]] = set()
        self.stored: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in CONTAINER_MUTATORS:
            self.paths.add(_path(func.value))
            self.stored.extend(a.value for a in node.args)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, (cst.Subscript, cst.Attribute)):
            self.paths.add(_path(node.target.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        self.stored.append(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        target = node.target
        self.paths.add(_path(target))
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self.paths.add(_path(target.value))


ANY = "*"  # a key not known statically: it may be any key
BELOW = "**"  # a change somewhere below this point of the path


def _path(expr: cst.BaseExpression) -> tuple[str, ...]:
    """An access path as tokens: `x["k"][i].a` → ("x", "['k']", "*", ".a"); a constant key
    spelled one way, any other key ANY, and a call or anything else BELOW."""
    chain = list(reversed(_chain(expr)))
    root = chain[0]
    tokens: list[str] = [root.value if isinstance(root, cst.Name) else BELOW]
    for link in chain[1:]:
        if isinstance(link, cst.Attribute):
            tokens.append("." + link.attr.value)
        elif isinstance(link, cst.Subscript):
            tokens.append(_key(link))
        else:
            tokens.append(BELOW)
            break
    return tuple(tokens)


def _key(link: cst.Subscript) -> str:
    code = code_of(link.slice[0].slice) if len(link.slice) == 1 else ""
    try:
        return repr([ast.literal_eval(code.strip())]) if code else ANY
    except (ValueError, SyntaxError):
        return ANY


def _changed_under(path: tuple[str, ...], changed: set[tuple[str, ...]]) -> bool:
    """Is the object at ``path`` (or anything inside it) changed by one of ``changed``?
    A change of a container that holds it (`x.append`, `x[k] = v`) leaves it alone."""
    for other in changed:
        if len(other) < len(path) and BELOW not in other:
            continue
        if all(a == b or ANY in (a, b) or BELOW in (a, b) for a, b in zip(other, path)):
            return True
    return False


def _root(expr: cst.BaseExpression) -> str:
    chain = _chain(expr)
    return chain[-1].value if isinstance(chain[-1], cst.Name) else ""


def _server_statements(items: list[_Item]):
    for item in items:
        if item.role is Part.SERVER:
            yield item
        elif item.role is Part.MIXED:
            yield from _server_statements(item.body)


def _client_items(items: list[_Item]):
    for item in items:
        if item.role is Part.CLIENT:
            yield item
        yield from _client_items(item.body)
        yield from _client_items(item.orelse)


def _origin(items: list[_Item], name: str) -> str:
    """Where the local code that computes or changes ``name`` comes from: the local
    statement furthest up its chain of reads whose own code must run on your machine
    (`: it comes from `x = capped(logits)`, whose code calls `capped`, ...`), or nothing."""
    local = list(_client_items(items))
    wanted, seen, furthest = [name], set(), None
    while wanted:  # breadth first: the last statement found with a reason is the furthest up
        current = wanted.pop(0)
        if current in seen:
            continue
        seen.add(current)
        for item in local:
            use = collect(item.stmt)
            if current in use.binds or current in use.mutates:
                furthest = item if item.why else furthest
                wanted += [read for read in use.reads if read not in seen]
    return f": it comes from `{_first_line(furthest.stmt)}`, whose code {furthest.why}" if furthest else ""


def _check_independence(server: NameUse, client: NameUse, server_exposed, later: set[str],
                        kept: frozenset[str] = frozenset(), origin=lambda name: "") -> None:
    """The replay runs after the session: nothing the client part computes or changes
    may be read or changed by the server part. A name both parts bind is fine when the
    server part always binds it before reading it and nothing after the region reads it.
    ``origin(name)``: where the local code behind a refused name comes from, said after it."""
    for name in client.binds:
        if name in server.mutates or name in server_exposed or (
            name in later and (name in server.binds or name in server.reads)
        ):
            raise Refused(
                f"`{name}` is computed by code that must run on your machine and is also used by the remote "
                f"part{origin(name)}"
            )
    for name in client.mutates:
        if name in kept:
            continue  # an object that stays here: its paths were checked as the code was split
        if name in set(server.reads) | set(server.mutates):
            raise Refused(
                f"`{name}` is changed by code that must run on your machine and is also used by the remote "
                f"part{origin(name)}"
            )


def _plan_records(items: list[_Item], defined: set[str], mutated: set[str], splitter: _Splitter,
                  loop: _Item | None = None) -> None:
    """Decide what each client item records and check that a record taken where the
    row is appended still holds what the statement would have read. In a loop with
    ``events`` each client item records itself where it stands."""
    events = loop is not None and loop.events
    last = max((i for i, item in enumerate(items) if item.role is not Part.SERVER), default=-1)
    for index, item in enumerate(items):
        if item.role is Part.SERVER:
            continue
        if item.role is Part.IF:
            _plan_records(item.body, defined, mutated, splitter, loop)
            _plan_records(item.orelse, defined, mutated, splitter, loop)
            continue
        if item.role is Part.MIXED:
            item.rows, item.row = splitter.fresh("rows"), splitter.fresh("row")
            if item.events:
                item.it_name, item.items_name = splitter.fresh("it"), splitter.fresh("items")
            _plan_records(item.body, defined, mutated, splitter, item)
            continue
        # what the statement reads before binding it itself (a `for i in ...` of its own
        # reads no earlier `i`)
        exposed = exposed_reads([item.stmt])
        names = [n for n in exposed if n in defined]
        # the row is appended right after the statement (region level) or after the
        # iteration's last client statement (in a loop): nothing in between may change it
        between = items[index + 1 : last + 1] if loop is not None and not events else []
        later_use = splitter.uses(between, Part.SERVER)
        server_after = splitter.uses(items[index + 1 :], Part.SERVER)
        changed_after = server_after.mutates if loop is None else {}
        changing = {n for n in names if _still_changing(n, index, items, loop, mutated, changed_after)}
        # what a recorded part may read besides its own value: names that hold the same value
        # where the record is taken as where the line stands, and that the session can read
        steady = (set(exposed) - changing) & splitter.readable
        # reads in `f"{x=}"` print their own text: they are read under their own names
        documenting = _documenting(item.stmt)
        for name in names:
            if name in later_use.binds or name in later_use.mutates:
                raise Refused(
                    f"`{name}` changes between the line that must run on your machine and the end of the "
                    "iteration, so a record of it taken for that line would be wrong"
                )
            still_changing = name in changing
            reduced = None if still_changing else _reduced_reads(item.stmt, name, splitter, steady)
            if reduced and not any(id(node) in documenting for node, _code in reduced):
                # the line reads only parts of it (`logits.shape`, `x[0].argmax()`): the
                # session records those parts, where the line stood, not the whole value
                item.reduced.add(name)
                item.records += [Recorded(code, (node,), describing_name(node)) for node, code in reduced]
                continue
            problem = wire_problem(name, splitter.statements, splitter.facts)
            if problem:
                raise Refused(f"{problem}, and `{_first_line(item.stmt)}` must run on your machine and reads it")
            if not still_changing and name in server_after.binds:
                # the remote part binds the name again later: the replay reads the record
                # in place or under a name of its own, so the name ends with the value it had
                # at the end
                loads = plain_loads(item.stmt, name)
                if loads is None:
                    raise Refused(
                        f"`{name}` is read and bound again by a line that must run on your machine, while the "
                        "remote part binds it once more after that line"
                    )
                _check_not_documenting(loads, documenting, name)
                item.records.append(Recorded(name, tuple(loads), name, var_hint=f"{name}_then"))
                continue
            if not still_changing:
                loads = plain_loads(item.stmt, name)
                item.records.append(Recorded(name, tuple(loads or ()), name, name=name))
                continue
            # the object keeps changing: record what the line reads of it, a snapshot
            for node, code in _snapshots(item.stmt, name, splitter):
                _check_not_documenting([node], documenting, name)
                item.records.append(Recorded(code, (node,), describing_name(node)))
        _mark_unread(item.records)


def _documenting(stmt: cst.CSTNode) -> set[int]:
    """The nodes inside self-documenting f-string expressions (`f"{x.shape=}"` prints the
    text `x.shape=` too): the replay must read them under the same text."""
    found: set[int] = set()
    for part in find_nodes(stmt, lambda n: type(n) is cst.FormattedStringExpression and n.equal is not None):
        found |= {id(node) for node in find_nodes(part.expression, lambda n: True)}
    return found


def _check_not_documenting(nodes, documenting: set[int], name: str) -> None:
    if any(id(node) in documenting for node in nodes):
        raise Refused(
            f"`{name}` is read in a self-documenting f-string (`{{...=}}`) by a line that must run on your "
            "machine, and the value it reads there is not the one the name holds at the end"
        )


def _mark_unread(records: list[Recorded]) -> None:
    """Mark the names a statement reads only inside recorded parts of other values (`n` in
    `tokens[0][-n:]`): they need no record of their own (see :func:`_drop_unread`)."""
    inside: set[int] = set()
    for record in records:
        if not record.name:
            for node in record.nodes:
                inside |= {id(name) for name in find_nodes(node, lambda n: type(n) is cst.Name)}
    for record in records:
        if record.name and record.nodes and all(id(node) in inside for node in record.nodes):
            record.unread = True


def _drop_unread(items: list[_Item], splitter: _Splitter) -> None:
    """Drop the records of names no replayed line reads whole, unless the replay binds the
    name elsewhere: a binding left out there would leave it with an older value."""
    clients = list(_clients(items))
    bound = {r.name for item in clients for r in item.records if r.name and not r.unread}
    bound |= set(splitter.uses(items, Part.CLIENT).binds)
    for item in clients:
        item.records = [r for r in item.records if not (r.unread and r.name not in bound)]


def _clients(items: list[_Item]):
    for item in items:
        if item.role is Part.CLIENT:
            yield item
        elif item.role in (Part.MIXED, Part.IF):
            yield from _clients(item.body + item.orelse)


def _still_changing(name: str, index: int, items: list[_Item], loop: _Item | None, mutated: set[str],
                    changed_after) -> bool:
    """May ``name`` hold another value when the record of item ``index`` is taken than when the
    line reads it?"""
    if loop is None:  # recorded where it stands: only later changes matter
        return name in changed_after
    # recorded at the iteration's end: later iterations may change it too
    return name in mutated and not _fresh_in_iteration(name, items[:index], loop)


# Methods whose result is a new object, a snapshot of what they are called on.
SNAPSHOT_METHODS = frozenset({"tolist", "item", "clone", "copy"})
# Builtins whose result is a new object or an immutable value made from their arguments.
SNAPSHOT_FUNCTIONS = frozenset(
    {"len", "sum", "min", "max", "sorted", "list", "tuple", "dict", "set", "frozenset", "str", "repr",
     "round", "abs", "any", "all"}
)


def _snapshots(stmt: cst.BaseStatement, name: str, splitter: "_Splitter") -> list[tuple[cst.CSTNode, str]]:
    """The parts of ``name`` that ``stmt`` reads, each as a value that later changes
    to ``name`` leave alone: `x[k].tolist()`, `x.item()`; or `x[k]` of a plain list or
    dict that is only ever grown or assigned by key. Refused when there is none."""
    found: list[cst.CSTNode] = []
    _find_snapshots(stmt, name, splitter, found)
    return [(node, code_of(node)) for node in found]


def _find_snapshots(node: cst.CSTNode, name: str, splitter: "_Splitter", found: list) -> None:
    if (
        _is_snapshot_builtin(node, splitter.taken_functions)
        and name in collect(node).reads
        and not splitter.server_check.problems(node)
    ):
        found.append(node)  # `len(x)`, `sorted(x["k"])`: a new value, whatever `x` becomes
        return
    chain = _chain(node) if isinstance(node, cst.BaseExpression) else []
    if chain and isinstance(chain[-1], cst.Name) and chain[-1].value == name:
        found.append(_snapshot_of(chain, name, splitter))
        return
    for child in children(node):
        _find_snapshots(child, name, splitter, found)


def _reduced_reads(stmt: cst.BaseStatement, name: str, splitter: "_Splitter",
                   steady: set[str]) -> list[tuple[cst.CSTNode, str]] | None:
    """The parts of ``name`` that ``stmt`` reads, when it reads nothing of it but those
    parts and each is computed by code the server may run from ``name`` and names in
    ``steady`` (the same value where the record is taken as where the line stands, readable
    by the session): the outermost attribute, index and method chains (`logits.shape`,
    `x[0, -1].argmax()`, `probs[0, top].item()` with `top` computed in the session)."""
    found: list[cst.CSTNode] = []
    _outermost_chains(stmt, name, found, splitter.taken_functions)
    if not found or len(found) != len(_loads_of(stmt, name)):
        return None  # `name` is also read whole somewhere
    for node in found:
        if any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value.endswith("_")
               for n in _chain(node)):
            return None  # an in-place method changes it: not a read
        if guard_of(stmt, node) is not None:
            return None  # the line computes it only sometimes: recorded, it would run every time
        # (a builtin of `name` alone reads nothing else)
        others = () if _builtin_of(node, name, splitter.taken_functions) else set(collect(node).reads) - {name}
        if any(other not in steady for other in others) or splitter.server_check.problems(node):
            return None
    return [(node, code_of(node)) for node in found]


def _outermost_chains(node: cst.CSTNode, name: str, found: list, taken: set[str]) -> None:
    chain = _chain(node) if isinstance(node, cst.BaseExpression) else []
    if len(chain) > 1 and isinstance(chain[-1], cst.Name) and chain[-1].value == name:
        found.append(node)
        return
    if _builtin_of(node, name, taken):
        found.append(node)  # `len(x)`, `max(x)`: a new value made of `x` alone
        return
    if isinstance(node, cst.Attribute):
        _outermost_chains(node.value, name, found, taken)  # (its attribute name is not a read)
        return
    for child in children(node):
        _outermost_chains(child, name, found, taken)


def _builtin_of(node: cst.CSTNode, name: str, taken: set[str]) -> bool:
    """Is ``node`` a call of a builtin that makes a new value of ``name`` alone
    (`len(x)`), the builtin not shadowed by a same-file function?"""
    return (
        _is_snapshot_builtin(node, taken) and len(node.args) == 1 and not node.args[0].star
        and node.args[0].keyword is None and isinstance(node.args[0].value, cst.Name)
        and node.args[0].value.value == name
    )


def _is_snapshot_builtin(node: cst.CSTNode, taken: set[str]) -> bool:
    """Is ``node`` a call of a builtin whose result is a new value (`len(...)`), not of a
    same-file function of that name?"""
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in SNAPSHOT_FUNCTIONS
        and node.func.value not in taken
    )


def _chain(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`x[k].tolist()` → [the call, `x[k]`, `x`]: an access chain, outermost first."""
    chain = [expr]
    while True:
        if isinstance(expr, (cst.Subscript, cst.Attribute)):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        else:
            return chain
        chain.append(expr)


def _snapshot_of(chain: list[cst.BaseExpression], name: str, splitter: "_Splitter") -> cst.BaseExpression:
    """The part of a chain read from a changing object that a record can hold: the
    chain up to a call that copies (`.tolist()`, `.item()`), or the first element of a
    plain container under which nothing is changed (`results['kl'][-1]` when only
    `results['kl']` grows)."""
    inner_first = list(reversed(chain))
    for link in inner_first[1:]:
        if isinstance(link, cst.Call) and link.func.attr.value in SNAPSHOT_METHODS:
            return link
    if name in splitter.containers:
        for link in inner_first[1:]:
            if not isinstance(link, cst.Subscript):
                break
            if not _changed_under(_path(link), splitter.changed_paths):
                return link
    raise Refused(
        f"`{name}` is read by code that must run on your machine while the remote part still changes it in "
        "place; a record of it would hold its final state, not the one that line sees"
    )


def _loads_of(stmt: cst.BaseStatement, name: str) -> list[cst.Name]:
    """The `Name` nodes of ``stmt`` that read ``name``; refused when ``stmt`` binds it too
    (a target, or a comprehension's variable: a read there may be of another value)."""
    loads = plain_loads(stmt, name)
    if loads is None or name in collect(stmt).binds:
        raise Refused(
            f"`{name}` is read and bound again by a line that must run on your machine, while the remote part "
            "binds it once more after that line"
        )
    return loads


def _fresh_in_iteration(name: str, before: list[_Item], loop: _Item | None) -> bool:
    """Is ``name`` bound anew in each iteration before it is read (a new object each time)?"""
    if loop is None:
        return False
    if name in target_names(loop.stmt.target):
        return True
    return any(item.role is Part.SERVER and name in collect(item.stmt).binds for item in before)


# What each generated helper name holds, said where it is made.
ROWS_COMMENT = "# one record per iteration, replayed after the session"
INNER_ROWS_COMMENT = "# one record per iteration of the loop below"
LOG_COMMENT = "# the values the replay after the session reads, by name"
UNBOUND_COMMENT = "# not bound on every path: left unbound, as the loop would leave it"
EVENTS_COMMENT = "# this iteration's records, and which way its branches went, in order"
TAKEN_COMMENT = "# taken in the order the session recorded them"


def _statement(code: str, comment: str = "") -> cst.BaseStatement:
    return cst.parse_statement(f"{code}  {comment}\n" if comment else f"{code}\n")


def _needs_log(items: list[_Item]) -> bool:
    return any(item.role is Part.CLIENT and item.records for item in items)


def _build(items: list[_Item], log: str, splitter: _Splitter, facts: Facts, carry: list[str], record: Split):
    """The session's statements and the replay's; ``record`` gets the section headers
    that move onto server statements and what the run's record holds."""
    comments = record.comments
    server: list[cst.BaseStatement] = []
    replay: list[cst.BaseStatement] = []
    reserved = {v.name for item in items if item.role is Part.CLIENT for v in item.records if v.name}
    keys = LogKeys(reserved | set(carry))
    headers = _section_headers(items)
    moved_to = {target: items[source].stmt.leading_lines for source, target in headers.items()}
    for index, item in enumerate(items):
        header = _header_lines(moved_to.get(index, ()))
        if item.role is Part.SERVER:
            server.append(item.stmt)
            if header:
                comments[id(item.stmt)] = header
        elif item.role is Part.CLIENT:
            entries = keys.place(item.records)
            plain = {value.key: value.name for value in item.records if value.name}
            for key, code in entries:
                entry = cst.parse_statement(f'{log}["{key}"] = {code}\n')
                server.append(entry)
                record.log_entries.add(id(entry))
                if key in plain:
                    record.named_records.setdefault(plain[key], []).append(entry)
            reader = Reader(Shape("", log, var=log), splitter.fresh_plain)
            replayed = reader.read(item.stmt, item.records)
            if index == 0:  # (its comments stand above the session, where the region starts)
                replayed = _without_comments(replayed)
            elif index in headers:  # a section's header goes with the section's remote work
                replayed = replayed.with_changes(leading_lines=_after_header(replayed.leading_lines))
            lines = _bound_first([*reader.bindings, replayed])
            placed = {id(binding): line for binding, line in zip(reader.bindings, lines)}
            for name, binding in reader.named:
                record.named_records.setdefault(name, []).append(placed[id(binding)])
            replay += lines
        elif _silent(item, facts):
            server.append(_server_loop(item, facts))
        else:
            loop, client_loop = _split_loop(item, facts, splitter)
            # (the loop's comments and blank lines go above its record list, made just before it)
            rows = _statement(f"{item.rows} = list().save()", ROWS_COMMENT)
            server.append(rows.with_changes(leading_lines=[*header, *loop.leading_lines]) if header else
                          rows.with_changes(leading_lines=loop.leading_lines))
            server.append(loop.with_changes(leading_lines=[]))
            replay.append(client_loop)
    bound = set().union(*(definite_binds(stmt) for stmt in server)) if carry else set()
    start = facts.statements.get(id(splitter.anchor)) if splitter.anchor is not None else None
    for name in carry:  # the values the code after the region reads, as the session ends
        key, new = keys.carried(name)
        # bound on some paths only (and not before the region): unbound, it stays unbound
        sometimes = name not in bound and not bound_before(facts, start, name)
        if new:
            entry = cst.parse_statement(
                f'try:\n    {log}["{key}"] = {name}\nexcept NameError:  {UNBOUND_COMMENT}\n    pass\n'
                if sometimes else f'{log}["{key}"] = {name}\n')
            server.append(entry)
            record.log_entries.add(id(entry))
        replay.append(cst.parse_statement(
            f'if "{key}" in {log}:\n    {name} = {log}["{key}"]\n' if sometimes and new
            else f'{name} = {log}["{key}"]\n'))
    if log:
        record.log = _statement(f"{log} = dict().save()", LOG_COMMENT)
        server.insert(0, record.log)
    return server, replay


def _section_headers(items: list[_Item]) -> dict[int, int]:
    """Where section headers move: a comment block above a replayed statement, set off
    from it by a blank line, heads the code up to the next comment (`# ── RUN 3: restore
    one position ──` above a print and the sweep that follows). The replay is only the
    section's local part: the header goes with the section's first remote statement.
    Item index -> the index of the item it moves to."""
    moves: dict[int, int] = {}
    for index, item in enumerate(items):
        if index == 0 or item.role is not Part.CLIENT or not _header_lines(item.stmt.leading_lines):
            continue
        for later in range(index + 1, len(items)):
            if any(line.comment is not None for line in items[later].stmt.leading_lines):
                break  # the next section
            if items[later].role in (Part.SERVER, Part.MIXED):
                moves[index] = later
                break
    return moves


def _header_lines(lines) -> list[cst.EmptyLine]:
    """The lines of a section header among a statement's leading lines: up to the last
    comment, when a blank line sets it off from the statement; else none."""
    comments = [i for i, line in enumerate(lines) if line.comment is not None]
    if not comments or comments[-1] == len(lines) - 1:
        return []
    return list(lines[: comments[-1] + 1])


def _after_header(lines) -> list[cst.EmptyLine]:
    return list(lines[len(_header_lines(lines)):])


def _without_comments(stmt: cst.BaseStatement) -> cst.BaseStatement:
    blank = [line for line in stmt.leading_lines if line.comment is None]
    return stmt.with_changes(leading_lines=blank) if len(blank) != len(stmt.leading_lines) else stmt


def _bound_first(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The replayed statement after the lines that bind its names, its blank lines and
    comments above them all."""
    if len(stmts) < 2 or not stmts[-1].leading_lines:
        return stmts
    last = stmts[-1]
    return [stmts[0].with_changes(leading_lines=last.leading_lines), *stmts[1:-1], last.with_changes(leading_lines=[])]


def _silent(item: _Item, facts: Facts) -> bool:
    """A split loop with nothing to replay: a `try` split around its remote work left
    only server statements, and no progress bar shows the iterations."""
    return (
        item.role is Part.MIXED
        and _progress_call(item.stmt.iter, facts) is None
        and all(child.role is Part.SERVER or _silent(child, facts) for child in item.body)
    )


def _server_loop(item: _Item, facts: Facts) -> cst.For:
    """The server half of a silent loop: its body's server statements, in order."""
    body = [child.stmt if child.role is Part.SERVER else _server_loop(child, facts) for child in item.body]
    loop = item.stmt.with_changes(body=item.stmt.body.with_changes(body=body))
    return loop.with_changes(iter=item.session_iter) if item.session_iter is not None else loop


def _loop_record(item: _Item, facts: Facts, splitter: _Splitter) -> tuple[Shape, Reader]:
    """One iteration's record: every value the iteration's replayed statements read (one
    key for each distinct expression: the record is taken once, at the iteration's last
    replayed statement) and the records of its inner loops; how the replay reads it."""
    clients = [child for child in item.body if child.role is Part.CLIENT]
    keys = Keys({value.name for child in clients for value in child.records if value.name})
    inner = [child for child in item.body if child.role is Part.MIXED and not _silent(child, facts)]
    for child in item.body:
        if child.role is Part.CLIENT:
            for value in child.records:
                keys.place(value)
        elif child in inner:
            child.rows_key = keys.place(Recorded(child.rows, (), "rows", name=child.rows))
    record = shape(keys, item.row, splitter.fresh_plain)
    for child in inner:  # an inner loop's records, read through this one's
        child.rows_read = f'{record.var}["{child.rows_key}"]' if record.var else record.names[child.rows_key]
    # a value the row carries home needs no `.save()` of its own (it would download twice)
    later = splitter.later
    item.unsaved = {keys.codes[key] for key in keys.plain if keys.codes[key] not in later}
    # ... and one whose parts the rows carry home, when nothing reads it whole
    whole = set(keys.codes.values())
    item.unsaved |= {n for child in item.body for n in child.reduced if n not in later and n not in whole}
    return record, Reader(record, splitter.fresh_plain)


def _split_loop(item: _Item, facts: Facts, splitter: _Splitter):
    """The server loop (records a row per iteration) and the client loop over the rows."""
    if item.events:
        return _split_loop_events(item, facts, splitter)
    loop: cst.For = item.stmt
    record, reader = _loop_record(item, facts, splitter)
    # a loop whose only local part is its progress bar records one empty row an iteration
    last = max((i for i, child in enumerate(item.body) if child.role is not Part.SERVER), default=len(item.body) - 1)
    server_body: list[cst.BaseStatement] = []
    client_body: list[cst.BaseStatement] = []
    for index, child in enumerate(item.body):
        if child.role is Part.SERVER:
            server_body.append(child.stmt)
        elif child.role is Part.CLIENT:
            child.replayed = reader.read(child.stmt, child.records)
            client_body.append(child.replayed)
        elif _silent(child, facts):
            server_body.append(_server_loop(child, facts))
        else:
            server_body.append(_statement(f"{child.rows} = list()", INNER_ROWS_COMMENT))
            inner, inner_client = _split_loop(child, facts, splitter)
            server_body.append(inner)
            client_body.append(inner_client)
        if index == last:
            server_body.append(cst.parse_statement(f"{item.rows}.append({record.value})\n"))
    # the loop's comments say what it does: they stay with its work, in the session
    server_loop = loop.with_changes(
        iter=item.session_iter or unwrap_progress(loop.iter, facts),
        body=loop.body.with_changes(body=opening(server_body)),
    )
    rows = item.rows_read or item.rows
    header = cst.parse_statement(f"for {record.target} in {_replayed_iter(loop.iter, rows, facts)}:\n    pass\n")
    body = opening([*reader.bindings, *client_body]) or [cst.SimpleStatementLine([cst.Pass()])]
    client_loop = _without_comments(header.with_changes(body=loop.body.with_changes(body=body),
                                                        leading_lines=loop.leading_lines))
    return server_loop, client_loop


def _split_loop_events(item: _Item, facts: Facts, splitter: _Splitter):
    """A loop whose body branches or jumps: each iteration records a list, each local
    statement appends its values to it where it stands, each branch the way it went;
    the replay walks the same branches and jumps, taking the records in turn."""
    loop: cst.For = item.stmt
    it, items = item.it_name, item.items_name
    server_body = [
        _statement(f"{it} = list()", EVENTS_COMMENT),
        cst.parse_statement(f"{item.rows}.append({it})\n"),
    ]
    events = _Events(it, items, item.row, facts, splitter)
    body, client_body = events.parts(item.body)
    server_loop = loop.with_changes(
        iter=item.session_iter or unwrap_progress(loop.iter, facts),
        body=loop.body.with_changes(body=opening(server_body + body)),
    )
    rows = item.rows_read or item.rows
    header = cst.parse_statement(f"for {it} in {_replayed_iter(loop.iter, rows, facts)}:\n    pass\n")
    client_loop = _without_comments(header.with_changes(
        body=loop.body.with_changes(body=[_statement(f"{items} = iter({it})", TAKEN_COMMENT), *client_body]),
        leading_lines=loop.leading_lines,
    ))
    return server_loop, client_loop


@dataclass
class _Events:
    """The parts of a loop body whose statements record themselves where they stand."""

    it: str  # the iteration's list of records
    items: str  # the replay's iterator over it
    row: str  # the replay's name for a record that is a dict
    facts: Facts
    splitter: _Splitter

    def parts(self, children: list[_Item]):
        server: list[cst.BaseStatement] = []
        client: list[cst.BaseStatement] = []
        for child in children:
            if child.role is Part.SERVER:
                server.append(child.stmt)
                if _jumps(child.stmt):  # a bare `break`/`continue`: the replay jumps too
                    client.append(child.stmt)
            elif child.role is Part.CLIENT:
                keys = Keys({value.name for value in child.records if value.name})
                for value in child.records:
                    keys.place(value)
                record = shape(keys, self.row, self.splitter.fresh_plain)
                reader = Reader(record, self.splitter.fresh_plain)
                child.replayed = reader.read(child.stmt, child.records)
                server.append(cst.parse_statement(f"{self.it}.append({record.value})\n"))
                taken = f"{record.target} = next({self.items})" if keys.codes else f"next({self.items})"
                client += [cst.parse_statement(taken + "\n"), *reader.bindings, child.replayed]
            elif child.role is Part.MIXED and _silent(child, self.facts):
                server.append(_server_loop(child, self.facts))
            elif child.role is Part.MIXED:
                server.append(_statement(f"{child.rows} = list()", INNER_ROWS_COMMENT))
                server.append(cst.parse_statement(f"{self.it}.append({child.rows})\n"))
                inner, inner_client = _split_loop(child, self.facts, self.splitter)
                server.append(inner)
                client.append(cst.parse_statement(f"{child.rows} = next({self.items})\n"))
                client.append(inner_client)
            else:  # a branch: record which way it went
                server_if, client_if = self.branch(child.stmt, child)
                server.append(server_if)
                client.append(client_if)
        return server, client

    def branch(self, stmt: cst.If, item: _Item):
        took = cst.parse_statement(f"{self.it}.append(True)\n")
        body, client_body = self.parts(item.body)
        other = stmt.orelse
        if isinstance(other, cst.If):
            inner_server, inner_client = self.branch(other, item.orelse[0])
            server_else, client_else = [inner_server], [inner_client]
        else:
            server_else, client_else = self.parts(item.orelse)
        server_else = [cst.parse_statement(f"{self.it}.append(False)\n"), *server_else]
        pass_ = cst.SimpleStatementLine([cst.Pass()])
        server_if = stmt.with_changes(
            body=stmt.body.with_changes(body=[took, *body]),
            orelse=cst.Else(body=cst.IndentedBlock(body=server_else)),
        )
        client_if = stmt.with_changes(
            test=cst.parse_expression(f"next({self.items})"),
            body=stmt.body.with_changes(body=client_body or [pass_]),
            orelse=cst.Else(body=cst.IndentedBlock(body=client_else)) if client_else else None,
            leading_lines=[],
        )
        return server_if, client_if

def _tuple_code(names: list[str]) -> str:
    if not names:
        return ""
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _target_code(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names)


def _replayed_iter(expr: cst.BaseExpression, rows: str, facts: Facts) -> str:
    """The rows, behind the same progress bar as the original loop, if it had one."""
    bar = _progress_call(expr, facts)
    if bar is None:
        return rows
    args = list(bar.args)
    first = next(i for i, a in enumerate(args) if a.keyword is None and not a.star)
    args[first] = args[first].with_changes(value=cst.Name(rows))
    return code_of(bar.with_changes(args=args))


def _progress_call(expr: cst.BaseExpression, facts: Facts) -> cst.Call | None:
    """The progress bar the loop's iterable goes through: `tqdm(xs)`,
    `enumerate(tqdm(xs, desc=...))`."""
    if not isinstance(expr, cst.Call):
        return None
    if qualify(expr.func, facts.imports) in PROGRESS_BARS:
        return expr if any(a.keyword is None and not a.star for a in expr.args) else None
    for arg in expr.args:
        found = _progress_call(arg.value, facts)
        if found is not None:
            return found
    return None


def unwrap_progress(expr: cst.BaseExpression, facts: Facts) -> cst.BaseExpression:
    """`enumerate(tqdm(xs, desc=...))` → `enumerate(xs)`: the bar stays on the client."""
    if not isinstance(expr, cst.Call):
        return expr
    if qualify(expr.func, facts.imports) in PROGRESS_BARS:
        args = [a for a in expr.args if a.keyword is None and not a.star]
        return unwrap_progress(args[0].value, facts) if args else expr
    if _progress_call(expr, facts) is None:
        return expr
    return expr.with_changes(args=[a.with_changes(value=unwrap_progress(a.value, facts)) for a in expr.args])


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier in ``node`` (fresh names must avoid them all)."""
    names = _Names()
    walk(node, names)
    return names.found


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)

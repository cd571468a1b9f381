"""The split's parts: each statement of a region as server, client or mixed (``Splitter``), and
the ``Split`` a region ends in (see split.py)."""

from __future__ import annotations

import ast
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

import libcst as cst

from ndif_opt.analysis.classes import changed_through_methods, class_methods, classes_made
from ndif_opt.analysis.effects import PROGRESS_BARS, changed_models
from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import NameUse, all_params, collect, exposed_reads, fresh_name, target_names
from ndif_opt.analysis.regions import jumps_of_loop, leaves_its_iteration
from ndif_opt.analysis.retries import retried_until_success
from ndif_opt.analysis.vocabulary import CONTAINER_MUTATORS
from ndif_opt.passes.common.guards import jump_out_of
from ndif_opt.passes.common.records import RECORD_PREFIX, Recorded
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import opening
from ndif_opt.syntax.walk import find_nodes, walk


# Problems a client statement may have and still be replayed after the session.
DEFERRABLE_KINDS = frozenset(
    {"print", "effect", "progress", "module", "forbidden", "client-object", "request", "clock"})
# Problems a client statement may have and still run before the session: it computes on
# your machine (a module NDIF does not allow, an object only you have) and acts on nothing.
PREPARABLE_KINDS = frozenset({"module", "client-object"})


#: Why a value of your machine the remote part reads was not computed before the session.
EARLY_STOP_NOTE = (" (such a value is computed before the session only for a loop that runs to its end; this one may "
                   "stop early, and computing it for every item could advance an iterator or a random generator "
                   "beyond where the loop stops)")


def is_jump(stmt: cst.CSTNode) -> bool:
    """`break` or `continue` alone on its line."""
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], (cst.Break, cst.Continue)))


def _branches(items: list["Item"]) -> bool:
    """Does a loop body need each local statement to record itself (a branch or a jump
    decides which of them run)?"""
    return any(item.role is Part.IF or (item.role is Part.SERVER and leaves_its_iteration(item.stmt)) for item in items)


def splittable(problem) -> bool:
    """May a region with this problem be split? Code that must stay on the client is
    replayed; so is a `try` without remote work (its failures are the client's own); a
    `try` around remote work is split by :meth:`Splitter.split_try`, which says why
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
    # names the replay binds only in the iterations that reach the line binding them (a loop
    # that branches or jumps): it may end holding an earlier value than the code as written
    partial: set[str] = field(default_factory=set)

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
class Item:
    """One statement of a scope, classified."""

    stmt: cst.BaseStatement
    role: Part
    records: list[Recorded] = field(default_factory=list)  # client: the session's values it reads
    replayed: cst.BaseStatement | None = None  # client: the statement as the replay runs it
    rows: str = ""  # mixed: the name of its record list
    rows_read: str = ""  # mixed: how the replay reaches that list (default: ``rows``)
    rows_key: str = ""  # mixed: its key in the record of the loop around it
    row: str = ""  # mixed: the replay's name for one record, when it is not unpacked
    body: list["Item"] = field(default_factory=list)  # mixed: its body's items
    unsaved: set[str] = field(default_factory=set)  # mixed: names its rows bring home instead of a save
    reduced: set[str] = field(default_factory=set)  # client: names it reads only parts of, recorded
    events: bool = False  # mixed: its body branches or jumps, so each local statement records itself
    it_name: str = ""  # mixed with events: the list of one iteration's records
    items_name: str = ""  # ... and the replay's iterator over it
    orelse: list["Item"] = field(default_factory=list)  # if: its `else`/`elif` items
    depth: int = 0  # how many of the region's `for` loops are around it
    branch: bool = False  # inside an `if` or a `try` of the region: it may not run
    after_jump: bool = False  # an earlier statement of its loop body may end the iteration
    session_iter: cst.BaseExpression | None = None  # mixed: what the session's loop goes over
    why: str = ""  # client: why it must run on your machine, when that is its own code's doing
    # client: the client statements that bound, when it ran, the names it reads first
    # (`x = f(x)` reads the `x` of the statement before it, not its own)
    sources: dict[str, "Item"] = field(default_factory=dict)


class Splitter:
    def __init__(self, facts: Facts, server_check, remote_work, taken: set[str], drop_bars: bool = False) -> None:
        self.in_loop = False
        self.drop_bars = drop_bars
        self.dropped_bars = 0
        self.facts = facts
        self.server_check = server_check
        self.remote_work = remote_work  # stmt -> (has remote work, block bodies to skip)
        self.taken = set(taken)
        self.record_names: set[str] = set()
        self.partial: set[str] = set()  # see Split.partial
        self.deferred = 0
        self.taken_functions = set(facts.functions)  # a same-file `len` is not the builtin
        self.client_names: set[str] = set()  # names the client part has bound or changed so far
        self.binder: dict[str, Item] = {}  # a client name -> the client statement that bound it last
        self.handled_failures = 0  # `try` statements split around their remote work
        self.readable: set[str] = set()  # names a recorded part may read (see split_region)
        self.jumped: list[bool] = []  # per loop being classified, outermost first: has its body met a jump yet?
        self.branch_depth = 0
        self.pre: list[Item] = []  # client statements moved before the session, in the order found
        # names whose objects stay on your machine (`self`, a parameter the caller sees):
        # what stores into them is replayed; `(name, ".attr")` paths the replay changes
        self.client_roots: frozenset[str] = frozenset()
        self.anchor: cst.CSTNode | None = None  # the region's first statement
        self.statements: list[cst.BaseStatement] = []  # the region's statements
        self.client_paths: set[tuple[str, str]] = set()

    # -- classification ------------------------------------------------------------
    def classify(self, stmts) -> list[Item]:
        items: list[Item] = []
        for stmt in stmts:
            parts = self._split_call_statement(stmt)
            if parts is None and self.client_roots:
                parts = self._split_store(stmt)
            if parts is None and isinstance(stmt, cst.Try) and self.remote_work(stmt)[0]:
                parts = [Item(stmt, Part.SERVER)] if self._handled_in_session(stmt) else self.split_try(stmt)
            if parts is None:
                parts = [self._classify(stmt)]
            for item in parts:
                if item.role is Part.SERVER and self.in_loop and not is_jump(item.stmt) \
                        and len(jumps_of_loop(item.stmt)) > 1:
                    # (the replay takes the way the session went: one kind of jump a statement)
                    raise Refused(f"`{first_code_line(item.stmt)}` may end the loop's iteration both by `break` "
                                  "and by `continue`: the session could record only whether it jumped")
                item.depth = len(self.jumped)
                item.branch = self.branch_depth > 0
                item.after_jump = bool(self.jumped) and self.jumped[-1]
                items.append(self._settle(item))
            if self.jumped and leaves_its_iteration(stmt):
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

    def _settle(self, item: Item) -> Item:
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
                            "by the remote part" + (EARLY_STOP_NOTE if self.may_stop_early else "")
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
            # (a store into an object that stays here is followed by its path; a model it
            # changes, `model.clear_edits()`, is changed for the remote part after it too)
            self.client_names |= set(use.binds) | (set(use.mutates) - self.client_roots) \
                | changed_models(stmt, self.facts)
            item.sources = {name: self.binder[name] for name in exposed_reads([stmt]) if name in self.binder}
            self.binder.update((name, item) for name in use.binds)
        elif item.role is Part.SERVER:
            bound = set(collect(stmt).binds)
            self.client_names -= bound
            for name in bound:
                self.binder.pop(name, None)
        return item

    def _settle_roots(self, item: Item) -> Item:
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
        clash = {path for path in read if overlaps(path, self.client_paths)}
        if not changed and not clash:
            return item
        if self.remote_work(stmt)[0]:
            root = sorted(changed or clash)[0][0]
            raise Refused(
                f"`{first_code_line(stmt)}` changes or reads `{root}`, which stays on your machine, in the same "
                "statement as remote work"
            )
        self.client_paths |= changed
        return self._replayed(item)

    def _replayed(self, item: Item) -> Item:
        """The server line ``item``, replayed on the client instead."""
        self.deferred += 1
        return replace(item, role=Part.CLIENT)

    def _paths_read(self, stmt: cst.CSTNode) -> set[tuple[str, str]]:
        """What the statement reads of the objects that stay here, with what the methods
        of `self` it calls read of it (a method the class does not show: all of it), and
        what the script's functions it calls read (all of it: `next_word()` reading `context`)."""
        found = _root_paths_read(stmt, self.client_roots)
        found |= {(root, "*") for root in self.facts.read_by_calls(stmt) & self.client_roots}
        for root, attr in list(found):
            if attr == "*":
                continue
            if root == "self":
                found |= self._method_reads(attr[1:], set(), self.methods)
            else:  # `chat.reply()` reads what `reply` reads of `self` (a class of the file's)
                for cls in classes_made(self.facts, root):
                    reads = self._method_reads(attr[1:], set(), class_methods(self.facts)[cls])
                    found |= {(root, read) for _self, read in reads}
        return found

    def _method_reads(self, name: str, seen: set[str], methods: dict[str, cst.FunctionDef]) -> set[tuple[str, str]]:
        if name in seen:
            return set()
        seen.add(name)
        method = methods.get(name)
        if method is None:
            return set()  # an attribute, not a method of the class (read itself, above)
        params = all_params(method.params)
        if not params or params[0].name.value != "self":
            return {("self", "*")}
        found = _root_paths_read(method.body, frozenset({"self"}))
        for _root_name, attr in list(found):
            if attr != "*":
                found |= self._method_reads(attr[1:], seen, methods)
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
            and path_of(func.value)[0] in self.client_roots
            and not self.remote_work(func.value)[0]
        )

    def _split_store(self, stmt) -> list[Item] | None:
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
        attributes = [token for token in path_of(target) if token.startswith(".")]
        name = self.fresh_plain(f"{attributes[-1][1:] if attributes else _root(target)}_value")
        value = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], assign.value)])
        store = stmt.with_changes(body=[assign.with_changes(value=cst.Name(name))], leading_lines=[])
        self.deferred += 1
        return [Item(value.with_changes(leading_lines=stmt.leading_lines), Part.SERVER), Item(store, Part.CLIENT)]

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
        run in every iteration up to it, of a loop that runs to its end. All of them, or none."""
        closure: list[Item] = []
        if self.may_stop_early or not self._preparable(name, closure, set()):
            return False
        for producer in closure:
            producer.role = Part.PRE
            self.deferred -= 1
            self.pre.append(producer)
            self.client_names -= set(collect(producer.stmt).binds)
        return True

    @cached_property
    def may_stop_early(self) -> bool:
        """May a loop of the region stop before its last item (`break`, `return`, `raise`)?
        Then the values prepared before the session for every item would be computed for
        items the loop never reaches: an iterator advanced too far (`next(it)`), a random
        generator drawn from too often, an error the loop never met."""
        return any(find_nodes(stmt, lambda n: type(n) in (cst.Break, cst.Return, cst.Raise))
                   for stmt in self.statements if type(stmt) in (cst.For, cst.While))

    def _preparable(self, name: str, closure: list[Item], seen: set[int], producer: Item | None = None) -> bool:
        """Can the statement that bound ``name`` last (or ``producer``) run before the
        session, with those it reads from?"""
        producer = self.binder.get(name) if producer is None else producer
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
        if any(p.kind not in PREPARABLE_KINDS and not reads_a_file(p.node) for p in problems):
            return False
        use = collect(stmt)
        if set(use.mutates) - set(use.binds):
            return False  # it changes something of yours: its order with the rest matters
        seen.add(id(producer))
        closure.append(producer)
        # what it reads: as bound when it ran (`x = f(x)` reads the `x` before it), and
        # as bound last (in a loop, a later statement's value comes round again)
        return all(
            self._preparable(read, closure, seen) for read in exposed_reads([stmt]) if read in self.client_names
        ) and all(self._preparable(read, closure, seen, source) for read, source in producer.sources.items())

    def _handled_in_session(self, stmt: cst.Try) -> bool:
        """A `try` around remote work whose code (body, handlers, `else`, `finally`) may all
        run on the server: it runs in the session as written, and each failure is handled
        there, item by item (measured on nnsight 0.8: a trace that raises inside a session's
        `try` is caught there, and the session goes on). What a handler sees of the error
        is the error itself, as in the run on your machine the script means."""
        _remote, skip = self.remote_work(stmt)
        return not [p for p in self.server_check.problems(stmt, skip=skip) if p.node is not stmt]

    def split_try(self, stmt: cst.Try) -> list[Item]:
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
                f"`{first_code_line(local[0].stmt)}` {what}: if it failed, that work would not have run, and "
                "a session cannot tell"
            )
        tail = body[last + 1 :]
        self.handled_failures += 1
        if not tail:
            return head  # the remote work cannot fail on the client: its handler never runs here
        if any(leaves_its_iteration(s) for s in tail):
            # `break`/`continue` after the remote work (a retry that stops on success): the
            # session's loop must take it too, or it would run every attempt
            if not is_jump(tail[-1]) or any(leaves_its_iteration(s) for s in tail[:-1]):
                raise Refused(
                    f"`{first_code_line(next(s for s in tail if leaves_its_iteration(s)))}` ends the loop's iteration inside a "
                    "`try`, after code that must run on your machine: the session could not tell whether it ran"
                )
            jump = [Item(tail[-1].deep_clone(), Part.SERVER)]
        else:
            jump = []
        replayed = stmt.with_changes(body=stmt.body.with_changes(body=opening(tail)))
        self.deferred += 1
        return [*head, Item(replayed, Part.CLIENT), *jump]

    def _split_call_statement(self, stmt) -> list[Item] | None:
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
        server: list[Item] = []
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
            server.append(Item(assign, Part.SERVER))
            args.append(arg.with_changes(value=cst.Name(name)))
        if not server or any(self.remote_work(a.value)[0] for a in args):
            return None
        client = stmt.with_changes(body=[expr.with_changes(value=call.with_changes(args=args))])
        self.deferred += 1
        return [*server, Item(client, Part.CLIENT)]

    def _classify(self, stmt) -> Item:
        remote, skip = self.remote_work(stmt)
        problems = self.server_check.problems(stmt, skip=skip)
        if self.in_loop and isinstance(stmt, cst.If) and leaves_its_iteration(stmt):
            # it may end the iteration early: the replay must take the same branch
            return self._mixed_if(stmt)
        # a loop that stores into an object staying here is split even with nothing else local
        keeps = bool(self.client_roots) and remote and isinstance(stmt, (cst.For, cst.If)) and bool(
            _root_paths_changed(stmt, self.client_roots)
        )
        if not problems and not keeps:
            return Item(stmt, Part.SERVER)
        # (a `try` around remote work is split where the loop's body is classified)
        control = [p for p in problems if not splittable(p)]
        if control:
            raise Refused(f"the code {control[0].message}")
        if not remote:
            self.deferred += 1
            # (a call or print of its own says more than a name some other local code binds)
            own = sorted(problems, key=lambda problem: problem.kind == "client-object")
            return Item(stmt, Part.CLIENT, why=own[0].message if own else "")
        if problems and self._fed(problems):
            return Item(stmt, Part.SERVER)
        if isinstance(stmt, cst.If) and self.in_loop:
            return self._mixed_if(stmt)
        if isinstance(stmt, cst.While) and retried_until_success(stmt):
            raise Refused(
                f"`while {code_of(stmt.test)}:` tries its request again until one succeeds; ndif-opt puts a retry "
                "around a session only when it counts its attempts as `for attempt in range(N):` (a `try` that ends "
                "in `break`, handlers that only report, wait and re-raise): write the retry that way to have the "
                "loop hoisted"
            )
        if not (isinstance(stmt, cst.For) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock)):
            raise Refused(
                f"the code {problems[0].message}. That code and remote work are both in {_statement_words(stmt)}, "
                "and ndif-opt splits only the body of a `for` loop without `else:` into a part for the server and a "
                "part for your machine"
            )
        iterable = unwrap_progress(stmt.iter, self.facts)
        header = self.server_check.problems(stmt.target) + self.server_check.problems(iterable) + \
            self.server_check.walking(iterable)
        if header:
            raise Refused(f"the loop's header {header[0].message}")
        outer, self.in_loop = self.in_loop, True
        self.client_names -= set(target_names(stmt.target))  # the server's loop binds them
        self.jumped.append(False)
        try:
            item = Item(stmt, Part.MIXED, body=self.classify(stmt.body.body))
        finally:
            self.in_loop = outer
            self.jumped.pop()
        item.events = _branches(item.body)
        if self.drop_bars and all(child.role is Part.SERVER for child in item.body):
            # only its progress bar must stay here: with unsafe fixes the bar is dropped
            # (the session's loop runs without it) instead of replayed over finished work
            self.dropped_bars += 1
            return Item(stmt, Part.SERVER)
        return item

    def _mixed_if(self, stmt: cst.If) -> Item:
        """An `if` whose branches hold remote work or end the iteration, and code that
        must stay here: the session records the branch it took, the replay takes it too."""
        if self.server_check.problems(stmt.test):
            raise Refused(f"the test of an `if` around remote work {self.server_check.problems(stmt.test)[0].message}")
        if not isinstance(stmt.body, cst.IndentedBlock):
            raise Refused("a one-line `if` around remote work")
        with self._in_branch():
            item = Item(stmt, Part.IF, body=self.classify(stmt.body.body))
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
                if role_filter is Part.SERVER:
                    # what the script's functions it calls read (`next_word()` reading `context`)
                    total.merge(NameUse(reads=dict.fromkeys(self.facts.read_by_calls(item.stmt), item.stmt)))
                if role_filter is Part.CLIENT:
                    # what the script's functions it calls change, the objects whose methods
                    # it calls may change (`s.bump()`), and the other names of what it
                    # changes (`alias.append(...)` changes `prompts` too)
                    changed = self.facts.changed_by_calls(item.stmt) | changed_through_methods(self.facts, item.stmt)
                    total.merge(NameUse(mutates=dict.fromkeys(changed, item.stmt)))
        return total

    def fresh_plain(self, base: str) -> str:
        """``base`` itself, or ``base_2``... when the file uses it."""
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        self.record_names.add(name)
        return name

    def fresh(self, base: str) -> str:
        return self.fresh_plain(f"{RECORD_PREFIX}{base}")


def _simple_or_reading(stmt: cst.CSTNode) -> bool:
    """A line, or `with open(path) as f:` around lines (a file read in one place)."""
    if type(stmt) is cst.SimpleStatementLine:
        return True
    return (
        type(stmt) is cst.With
        and all(reads_a_file(item.item) for item in stmt.items)
        and isinstance(stmt.body, cst.IndentedBlock)
        and all(type(inner) is cst.SimpleStatementLine for inner in stmt.body.body)
    )


READ_MODES = frozenset({"r", "rb", "rt", "br", "tr"})


# Methods of a path (pathlib) that only read the file system.
PATH_READS = frozenset({"read_text", "read_bytes", "exists", "is_file", "is_dir", "stat", "iterdir", "glob", "rglob"})


def reads_a_file(node: cst.CSTNode) -> bool:
    """Is ``node`` `open(path)` in a mode that only reads, or a path's read (`path.read_text()`)?"""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in PATH_READS:
        return True
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
            paths.append(path_of(node.target))
    for node in find_nodes(stmt, lambda n: isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)):
        if node.func.attr.value in CONTAINER_MUTATORS:
            # it changes what it is called on: the path of that, and something in it
            paths.append((*path_of(node.func.value), ANY))
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


def overlaps(path: tuple[str, str], paths: set[tuple[str, str]]) -> bool:
    """Does ``path`` reach what one of ``paths`` is (the same attribute, or the root whole)?"""
    return any(p[0] == path[0] and (p[1] == path[1] or "*" in (p[1], path[1])) for p in paths)


def first_code_line(stmt: cst.CSTNode) -> str:
    """The statement's first line of code (not a comment above it)."""
    lines = [line.strip() for line in code_of(stmt).strip().splitlines()]
    return next((line for line in lines if line and not line.startswith("#")), lines[0] if lines else "")


def _check_early_ends(items: list[Item]) -> None:
    """A replayed `try` whose handler leaves the iteration (`continue`, `break`,
    `return`) would have skipped the remote work after it; the session runs that work
    whatever the replay does."""
    for index, item in enumerate(items):
        if item.role is Part.CLIENT and isinstance(item.stmt, cst.Try) \
                and jump_out_of(item.stmt, raises=False) is not None:
            # (a jump the session mirrors is no work: see split_try)
            if any(later.role is not Part.CLIENT and not is_jump(later.stmt) for later in items[index + 1 :]):
                raise Refused(
                    f"`{first_code_line(item.stmt)}` may end the iteration early, before remote work that "
                    "follows it; a session runs that work either way"
                )


ANY = "*"  # a key not known statically: it may be any key
BELOW = "**"  # a change somewhere below this point of the path


def path_of(expr: cst.BaseExpression) -> tuple[str, ...]:
    """An access path as tokens: `x["k"][i].a` → ("x", "['k']", "*", ".a"); a constant key
    spelled one way, any other key ANY, and a call or anything else BELOW."""
    chain = list(reversed(attribute_chain(expr)))
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


def changed_under(path: tuple[str, ...], changed: set[tuple[str, ...]]) -> bool:
    """Is the object at ``path`` (or anything inside it) changed by one of ``changed``?
    A change of a container that holds it (`x.append`, `x[k] = v`) leaves it alone."""
    for other in changed:
        if len(other) < len(path) and BELOW not in other:
            continue
        if all(a == b or ANY in (a, b) or BELOW in (a, b) for a, b in zip(other, path)):
            return True
    return False


def _root(expr: cst.BaseExpression) -> str:
    chain = attribute_chain(expr)
    return chain[-1].value if isinstance(chain[-1], cst.Name) else ""


def attribute_chain(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
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


def progress_call(expr: cst.BaseExpression, facts: Facts) -> cst.Call | None:
    """The progress bar the loop's iterable goes through: `tqdm(xs)`,
    `enumerate(tqdm(xs, desc=...))`."""
    if not isinstance(expr, cst.Call):
        return None
    if qualify(expr.func, facts.imports) in PROGRESS_BARS:
        return expr if any(a.keyword is None and not a.star for a in expr.args) else None
    for arg in expr.args:
        found = progress_call(arg.value, facts)
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
    if progress_call(expr, facts) is None:
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


def _statement_words(stmt: cst.BaseStatement) -> str:
    """`a `for` loop with an `else:` clause`, `a `try` statement`: what a refusal calls the
    statement that holds code of both parts."""
    if isinstance(stmt, (cst.For, cst.While)) and stmt.orelse is not None:
        return f"a `{'for' if isinstance(stmt, cst.For) else 'while'}` loop with an `else:` clause"
    keyword = {cst.If: "if", cst.With: "with", cst.Try: "try", cst.TryStar: "try", cst.While: "while",
               cst.For: "for", cst.Match: "match"}.get(type(stmt))
    return f"a `{keyword}` statement" if keyword else "a statement"

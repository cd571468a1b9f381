"""session-hoisting: one remote request for a loop (or run) of remote traces.

## What it does
Wraps a loop whose body runs remote traces or generates of one model — or a run of
remote blocks of one model — in a single ``with model.session(remote=...)`` and removes
``remote=`` from the blocks inside. Client-scope lists and dicts that the moved code
fills are created inside the session as saved containers, or sent into it and saved
there. Code that must stay on your machine (``print``, files, ``tqdm``, ``json``,
logging) is split off: it records the values it reads where it stood, and a replay
after the session runs it in the same order with the same values (branches and early
exits included). Code that must run on your machine but needs nothing remote, and whose
values the remote work reads (a steering vector built with numpy and json, a prompt
formatted by a library NDIF lacks or read from a file), runs before the session instead,
in the same order, and the session takes its values in turn. An object the session cannot take (``self``,
a dict the caller passed in) stays on your machine: the session computes the values,
the replay stores or appends them (``self.records.append(self.probe(p))``). Values the
script reads after the loop come back; what the methods it calls store on ``self`` comes back too, unless only methods the session runs
read it (the class has no bases or decorators, and neither ``self`` nor an instance is
handed to other code): then it stays on the server.

## Why is this bad?
Every remote trace is a network round trip plus a wait in NDIF's queue. A loop of 32
remote traces pays that 32 times; the model's own compute is usually the smaller part.
Inside a session the whole loop is one request.

## Example
```python
for layer in range(32):
    with model.trace(prompt, remote=True):
        hidden = model.model.layers[layer].output.save()
```

## Use instead
```python
with model.session(remote=True):
    for layer in range(32):
        with model.trace(prompt):
            hidden = model.model.layers[layer].output.save()
```

## Fix safety
Safe when applied: the pass only moves code that NDIF can run, replays what must run
on your machine in its order over recorded values, and brings back every value the
rest of the script reads (in a notebook, also every module name the session binds: the
kernel keeps them for cells to come). What a same-file function saved and returned, that
nothing after the session reads, is let go at its end (`logits = None`), not downloaded. A same-file function the session calls that reads
a module name the session computes gets it as an argument (`def f(x, *, vec)`), when
every call of it in the file is one the session makes after binding the name. It is not applied (and says why) when the code that must stay
on your machine feeds the remote part, when a record could not hold what a line would
have seen, when the moved code declares ``global`` or calls a helper that cannot run in
a session. A loop whose own remote work no session can take — traces of two models (a
session runs one), two remote flags, a session in each iteration, a trace on your machine
among remote ones — is left with one finding that names it and what to change. A retry
around a request goes around the whole session, and gives up after its last attempt as
the original did (``if _ndif_attempt == MAX_ATTEMPTS - 1: raise``: the last attempt of
``range(stop)`` computed again where the session failed, so ``stop`` must be a constant,
or a name or attribute the loop leaves alone; otherwise the retry, and the loop, are left
as they are). A ``try`` that
handles each request's failure on its own also guards the session: should the session
fail, the code runs as written (``except Exception:`` around the session), so a failing
request is still handled per iteration; the ``try`` is refused when code inside it runs
before the remote work, or its handler ends the iteration before remote work that
follows. With ``--unsafe-fixes`` a ``tqdm`` bar alone is
dropped instead of replayed, and a ``print`` the split cannot replay becomes a server
log line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from ndif_opt.analysis.effects import Problem
from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.analysis.names import (
    NameUse,
    collect,
    collect_all,
    definite_binds,
    free_reads,
    fresh_name,
    returned_name,
    target_names,
)
from ndif_opt.analysis.regions import (
    Accumulator,
    carried_container,
    empty_container_binding,
    find_accumulator,
    intermediates,
    reads_after,
    requests_in,
    self_attributes_read_after,
)
from ndif_opt.analysis.remote_functions import (
    CallWithRemoteOff,
    RemoteHelper,
    call_multiplicity,
    called_helper,
    helper_calls,
    remote_helpers,
    rewritten_helper,
    with_keyword_arguments,
    with_keyword_parameters,
)
from ndif_opt.analysis.opaque import blocks_through_names, callback_loops, code_strings
from ndif_opt.analysis.retries import PortableRetry, code_changing, portable_retry, retry_guard
from ndif_opt.analysis.wire import wire_problem
from ndif_opt.cost_model import RegionRequests, explain
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.passes.common.definitions import definitions_in_the_way, without_statements
from ndif_opt.passes.common.client_split import Refused, Split, names_in, split_region, splittable, unwrap_progress
from ndif_opt.syntax.expressions import is_save_call, root_name
from ndif_opt.syntax.rewrite import (
    DropElementSaves,
    StripRemote,
    SuitePlan,
    code_of,
    comments_carried,
    method_call,
    saved_container,
    session_statement,
    with_fallback,
    with_module_import,
)
from ndif_opt.syntax.walk import find_nodes, paths_to, transform
from ndif_opt.types import Safety, Status
from ndif_opt.wording import claim_text, counted_with_loops, symbols, tense

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
    released: list[str] = field(default_factory=list)  # names let go at the session's end (see _released)
    # what methods it calls store on `self` that no code reads after it: not brought back
    left_attributes: list[str] = field(default_factory=list)
    # containers the session takes over that nothing after it reads: made in the
    # session, filled there and not downloaded (see _left_on_server)
    left_on_server: frozenset[str] = frozenset()

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


class SessionHoisting(Pass):
    __doc__ = __doc__
    explains = True
    # has a run of this pass (one instance per module's optimization) rewritten the tree?
    # Until then every session in it is the user's or another pass's (in a loop over an
    # `_ndif_` name): a user's loop of them gets a finding; after, a session may be one it
    # wrote around a loop's inner loop, and the reason the loop was refused in the round
    # before still stands (the pipeline keeps it)
    wrote = False
    fix_safety = ("safe; dropping a `tqdm` bar (instead of replaying it) or moving a `print` to the server "
                  "log is unsafe")

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        claimed: set[int] = set()
        mark = len(context.findings)
        self.helpers = remote_helpers(facts, context.server)
        self.rewritten_helpers: dict[str, RemoteHelper] = {}
        self.passed_functions: dict[str, tuple[str, ...]] = {}  # function -> module names it now takes
        self.needs_nnsight_import = False
        # loops their own remote work keeps from a session (two models, say): id -> (loop, why)
        self.stopped: dict[int, tuple[cst.CSTNode, tuple[str, str]]] = {}
        for suite in _suites_outermost_first(facts):
            if _inside(facts, suite, claimed):
                continue
            for region in self._regions(suite, facts, context):
                self._plan_or_parts(region, facts, context, plan, claimed)
        self._name_the_stopped_loops(facts, context, mark)
        _drop_nested_repeats(context.findings, mark)
        _name_the_unseen(facts, context)
        for name in dict.fromkeys([*self.rewritten_helpers, *self.passed_functions]):
            helper = self.rewritten_helpers.get(name)
            passed = self.passed_functions.get(name, ())
            if helper is not None and (helper.flag_param is not None and not helper.context_decorators):
                helper = None  # called as it is: it takes the flag already
            if helper is None and not passed:
                continue
            func = helper.func if helper is not None else facts.functions[name]
            info = facts.stmt(func)
            plan.replace(info.suite, info.index, info.index + 1,
                         lambda _s, h=helper, f=func, p=passed: [_as_the_session_calls(h, f, p)])
        if not plan:
            return module
        self.wrote = True
        module = plan.apply(module, facts)
        return with_module_import(module, "nnsight") if self.needs_nnsight_import else module

    def _plan_or_parts(self, region: Region, facts: Facts, context: Context, plan: SuitePlan, claimed: set[int]) -> bool:
        """Plan the region, or else the largest parts of it that can move: the runs
        between code that must stay on the client, or its two halves (split at a remote
        statement), each tried the same way. The whole region's finding stands when no
        part moves."""
        mark = len(context.findings)
        why = _nested_in_planned_sessions(region, facts, claimed, frozenset(self.helpers))
        if why:
            # one session cannot hold another's hard-coded one
            context.skipped(region.statements[0], _not_hoisted(region, facts, self._counted(region, facts, context)),
                            why, through=region.statements[-1])
            return False
        if self._plan(region, facts, context, plan):
            claimed.update(id(s) for s in region.statements)
            return True
        span = (region.start, region.end)
        parts = []
        if any(_deferrable_only(p) for p in region.unsafe):
            parts = self._regions(region.suite, facts, context, wide=False, span=span)
        if not parts or [(p.start, p.end) for p in parts] == [span]:
            parts = self._halves(region, facts, context)
        if not parts:
            return False
        whole = context.findings[mark:]
        del context.findings[mark:]
        moved = [self._plan_or_parts(part, facts, context, plan, claimed) for part in parts]
        if not any(moved):
            del context.findings[mark:]
            context.findings.extend(whole)
        return any(moved)

    def _halves(self, region: Region, facts: Facts, context: Context) -> list[Region]:
        remote = [i for i in range(region.start, region.end) if region.suite.body[i] in region.remote_statements]
        if len(remote) < 2:
            return []
        middle = remote[len(remote) // 2]
        halves = []
        for span in ((region.start, middle), (middle, region.end)):
            halves += self._regions(region.suite, facts, context, span=span)
        return [h for h in halves if (h.start, h.end) != (region.start, region.end)]

    def _requests(self, region: Region, facts: Facts) -> int:
        """The remote requests one run of the region sends, a loop of unknown length as
        two ("many"): is a session worth it? (Counted once.)"""
        from ndif_opt.analysis.regions import UNKNOWN_TRIPS

        if region.requests is None:
            calls = call_multiplicity(region.statements, self.helpers, facts, UNKNOWN_TRIPS) if region.helper_calls else 0
            region.requests = requests_in(region.blocks, region.statements, facts, UNKNOWN_TRIPS) + calls
        return region.requests

    def _worth_a_session(self, region: Region, facts: Facts, context: Context) -> bool:
        """Does one run of the region send two requests or more — by its blocks, and as
        the cost table counts them (where the walk takes one branch of an `if`, the
        other's requests do not run)? A loop of unknown length counts as two ("many")."""
        from ndif_opt.analysis.regions import UNKNOWN_TRIPS

        if self._requests(region, facts) < 2:
            return False
        return self._counted(region, facts, context).per_run(UNKNOWN_TRIPS) >= 2

    def _hoisted_caller(self, region: Region, facts: Facts) -> str:
        """The function holding the region, when a session this pass opened around its
        calls already counts its requests ("" otherwise: the region's own claim stands)."""
        function = facts.stmt(region.statements[0]).function
        name = function.name.value if function is not None else ""
        return name if name in self.rewritten_helpers else ""

    def _counted(self, region: Region, facts: Facts, context: Context) -> RegionRequests:
        """What the region's messages quote: its requests as the cost table counts them
        (the cost model's walk of this version of the tree: a retry counted once, a loop
        of unknown length as N) — over the script's run, and the runs one session each
        would send. Where the walk never reached the region (code after a `return`,
        calls nested too deep), one run by its blocks, and no claim on the table."""
        if region.counted is None:
            found = explain(facts, context.options).region(region.statements)
            if found is None:
                found = RegionRequests(self._requests(region, facts), 1, uncalled="")
            region.counted = found
        return region.counted

    def _name_the_stopped_loops(self, facts: Facts, context: Context, mark: int) -> None:
        """One finding for each loop that sends two requests or more and that its own
        remote work keeps from one session (its traces are of two models, take two remote
        flags, open sessions of their own...): the outermost of nested ones only (what
        stops the inner loop stops the outer one). It is the loop's one refusal: this
        run's refusals of runs and loops inside it go (what stops the loop stops them
        from becoming its session; once it is changed, they are found again)."""
        from ndif_opt.analysis.regions import UNKNOWN_TRIPS

        for loop, (what, why) in self.stopped.values():
            if any(id(node) in self.stopped for node in facts.stmt(loop).ancestors):
                continue
            requests = explain(facts, context.options).region([loop])
            if requests is None or requests.per_run(UNKNOWN_TRIPS) < 2:
                continue
            names, meaning = symbols(requests.sent, requests.runs)
            sent = counted_with_loops(requests.sent, "separate remote request", names)[0]
            message = f"this loop sends {sent}{what}{_per_call(requests)}" + (f" ({meaning})" if meaning else "")
            refused = {id(f.node): f for f in context.findings[mark:] if f.status is Status.SKIPPED}
            inside = {id(refused[id(n)]) for n in find_nodes(loop, lambda n, r=refused: id(n) in r) if n is not loop}
            context.findings[mark:] = [f for f in context.findings[mark:] if id(f) not in inside]
            context.skipped(loop, message, why)

    # -- finding regions ---------------------------------------------------------------
    def _regions(self, suite, facts: Facts, context: Context, wide: bool = True,
                 span: tuple[int, int] | None = None) -> list[Region]:
        """Runs of statements that could become one session. ``wide``: code that must
        stay on your machine joins a run (the split replays it after the session);
        otherwise it ends the run. ``span``: only the statements in that range."""
        # code without remote work matters only next to remote statements: look at it
        # only there, unless skipping a question could change later answers
        lazy = not context.server.asking_order_matters
        if lazy and not self.helpers and _fewer_than_two_requests(suite, facts):
            return []  # no region of it could send two: none is worth a session
        edges = _window_edges(suite, facts, context.options.window_edges)
        kinds: list[Kind | None] = [
            self._kind(stmt, facts, context, lazy, wide)
            if span is None or span[0] <= index < span[1]
            else Kind(Role.BARRIER, why="outside the region")
            for index, stmt in enumerate(suite.body)
        ]
        regions: list[Region] = []
        run: list[int] = []

        def close() -> None:
            while run and kinds[run[-1]].role is not Role.REMOTE:
                run.pop()
            if run:
                first = kinds[run[0]]
                blocks = [b for i in run for b in kinds[i].blocks]
                region = Region(suite, run[0], run[-1] + 1, first.model, first.flag, blocks)
                region.remote_statements = [suite.body[i] for i in run if kinds[i].role is Role.REMOTE]
                region.unsafe = [p for i in run for p in kinds[i].problems]
                region.helper_calls = [c for i in run for c in kinds[i].helper_calls]
                regions.append(region)
            run.clear()

        for index, kind in enumerate(kinds):
            if index in edges:
                close()  # a window begins here: no run crosses into it
            if kind is None:  # code without remote work
                if not run:
                    continue  # before a run opens, neither a barrier nor neutral code matters
                kind = kinds[index] = self._plain_kind(suite.body[index], context, wide)
            if kind.role is Role.BARRIER:
                if kind.stops:
                    self.stopped.setdefault(id(suite.body[index]), (suite.body[index], kind.stops))
                close()
            elif kind.role is Role.REMOTE and _blocking(kind.problems, context) and not (
                wide and all(_deferrable_only(p) for p in kind.problems)
            ):
                close()  # it may still be split on its own, but moves with nothing else
                run.append(index)
                close()
            elif kind.role is Role.REMOTE:
                if run and kinds[run[0]].role is Role.REMOTE:
                    head = kinds[run[0]]
                    if (head.model, head.flag_code) != (kind.model, kind.flag_code):
                        close()
                run.append(index)
            elif run:  # neutral code between remote blocks may move along
                run.append(index)
        close()
        return [r for r in regions if self._worth_a_session(r, facts, context)]

    def _kind(self, stmt, facts: Facts, context: Context, lazy: bool = False, wide: bool = True) -> Kind | None:
        """How the statement relates to remote work; with ``lazy``, None for code
        without any (see :meth:`_plain_kind`)."""
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            # between remote statements it moves along: before the session opens, it moves
            # out of the region's way (common/definitions.py), or the region is refused
            return Kind(Role.NEUTRAL)
        outer = _outer_blocks(facts, stmt)
        calls = helper_calls(stmt, self.helpers) if _may_call(stmt, self.helpers) else []
        if calls and outer:
            return Kind(Role.BARRIER, why="mixes remote blocks and calls of functions that run them")
        if calls:
            return self._helper_kind(stmt, calls, facts, context)
        if not outer:
            return None if lazy else self._plain_kind(stmt, context, wide)
        first = outer[0]
        loop = isinstance(stmt, (cst.For, cst.While))
        sessions = [b for b in outer if b.method == "session"]
        if sessions:
            # (a loop of sessions ndif-opt wrote, chunks or a retry, names its own `_ndif_` variable)
            users = loop and not self.wrote and not any(
                name.startswith("_ndif_") for name in target_names(stmt.target) if isinstance(stmt, cst.For))
            return Kind(Role.BARRIER, why="already a session", stops=users and _stopped_by_a_session(sessions[0]))
        local = [b for b in outer if b.remote.state is Remote.NO]
        if local:
            return Kind(Role.BARRIER, why="runs a local trace",
                        stops=loop and _stopped_by_a_local_trace(local[0], outer))
        passed = [b for b in outer if b.remote.via_kwargs]
        if passed:
            return Kind(Role.BARRIER, why="passes `remote=` inside `**kwargs`, which cannot move to a session",
                        stops=loop and _stopped_by_kwargs(passed[0]))
        flag_codes = {b.remote.code for b in outer}
        models = {b.model for b in outer}
        if len(flag_codes) != 1 or len(models) != 1:
            sends = [(b.model, b.remote.code or "False", _first_line(b.node)) for b in outer]
            return Kind(Role.BARRIER, why="mixes models or remote flags", stops=loop and _stopped_by_mixing(sends))
        problems = context.server.problems(stmt, skip=tuple(b.node.body for b in outer))
        problems += _iteration_problems(stmt, facts)
        return Kind(
            Role.REMOTE,
            model=first.model,
            flag_code=first.remote.code,
            flag=first.remote.expr,
            blocks=outer,
            problems=problems,
        )

    def _plain_kind(self, stmt, context: Context, wide: bool = True) -> Kind:
        """Code without remote work moves along; code that must run on the client joins
        a wide run (it is replayed after the session) and ends a narrow one."""
        problems = context.server.problems(stmt)
        if wide and problems and all(_deferrable_only(p) for p in problems):
            return Kind(Role.NEUTRAL, problems=problems)
        if _blocking(problems, context):
            return Kind(Role.BARRIER, why=problems[0].message)
        return Kind(Role.NEUTRAL, problems=[p for p in problems if p.kind in UNSAFE_KINDS])

    def _helper_kind(self, stmt, calls, facts: Facts, context: Context) -> Kind:
        """A statement whose remote work happens in same-file functions it calls."""
        flags, models = set(), set()
        sends = []  # (model, flag, the call's code) of each call
        for call, helper in calls:
            if helper.problems:
                if isinstance(stmt, (cst.For, cst.While)):
                    context.skipped(
                        stmt,
                        f"this loop calls `{helper.name}`, which sends a remote request each time; "
                        f"one `{helper.model}.session(remote=...)` would send one",
                        f"not hoisted: {helper.problems[0]}",
                    )
                return Kind(Role.BARRIER, why=helper.problems[0])
            flag = helper.call_flag(call)
            if flag is None:
                why = f"the remote flag `{helper.name}` runs with is computed inside it or not known here"
                if isinstance(stmt, (cst.For, cst.While)):
                    context.skipped(
                        stmt,
                        f"this loop calls `{helper.name}`, which sends a remote request each time; "
                        f"one `{helper.model}.session(remote=...)` would send one",
                        f"not hoisted: {why}, so a session around the calls cannot take the same flag",
                    )
                return Kind(Role.BARRIER, why=why)
            flags.add(flag)
            model = helper.call_model(call)
            if model is None:
                return Kind(Role.BARRIER, why=f"the model `{helper.name}` traces is not a plain name at this call")
            models.add(model)
            sends.append((model, flag, code_of(call)))
        if len(flags) != 1 or len(models) != 1:
            loop = isinstance(stmt, (cst.For, cst.While))
            return Kind(Role.BARRIER, why="calls functions with different models or remote flags",
                        stops=loop and _stopped_by_mixing(sends))
        flag_code = flags.pop()
        if flag_code == "False":
            return Kind(Role.BARRIER, why="runs its traces locally")
        problems = context.server.problems(stmt) + _iteration_problems(stmt, facts)
        return Kind(
            Role.REMOTE,
            model=models.pop(),
            flag_code=flag_code,
            flag=cst.parse_expression(flag_code),
            blocks=[],
            problems=problems,
            helper_calls=calls,
        )

    # -- checking and planning ---------------------------------------------------------
    def _plan(self, region: Region, facts: Facts, context: Context, plan: SuitePlan) -> bool:
        anchor = region.statements[0]
        if not context.allows(anchor, _not_hoisted(region, facts, self._counted(region, facts, context))):
            return False
        region.kernel_keeps_names = context.options.notebook and not facts.stmt(anchor).ancestors
        changing = _header_rebound(region)
        if changing:
            context.skipped(anchor, _not_hoisted(region, facts, self._counted(region, facts, context)), changing,
                            through=region.statements[-1])
            return False
        definitions = [] if context.rewrites_refused else definitions_in_the_way(
            region.statements, module_code=_module_code(region, facts))
        if definitions:
            # out of the way first: the region becomes a session in the pipeline's next round
            _move_definitions(region, definitions, context, plan)
            return True
        refusal = ""
        if region.unsafe and all(_deferrable_only(p) for p in region.unsafe):
            # code that must stay on your machine: split it off and replay it afterwards
            refusal = self._split(region, facts, context)
            if not refusal:
                return self._plan_checked(region, facts, context, plan)
        blocking = [p for p in region.unsafe if not _is_unsafe_only(p)]
        if blocking:
            context.skipped(anchor, _not_hoisted(region, facts, self._counted(region, facts, context)),
                            refusal or _plain(blocking[0]), through=region.statements[-1])
            return False
        return self._plan_checked(region, facts, context, plan)

    def _split(self, region: Region, facts: Facts, context: Context, carry=()) -> str:
        """Split the region into its session and a replay on the client; the reason
        when it cannot be."""
        taken = self._taken(facts)

        def remote_work(stmt):
            outer = _outer_blocks(facts, stmt)
            remote = bool(outer) or bool(_may_call(stmt, self.helpers) and helper_calls(stmt, self.helpers))
            return remote, tuple(b.node.body for b in outer)

        try:
            later = set(reads_after(facts, region.suite, region.end))
            region.split = split_region(
                region.statements, facts, context.server, remote_work, taken, list(carry), later,
                is_model=facts.is_model_like, drop_bars=context.options.unsafe_fixes,
                client_roots=region.client_roots,
            )
        except Refused as refused:
            region.split = None
            return str(refused)
        return ""

    def _retry(self, region: Region, facts: Facts) -> PortableRetry | str | None:
        """The retry that guarded the region's requests, rewritten to go around the
        session (a failure then retries the whole session); the reason it cannot be."""
        module_names = facts.once("session-hoisting:module-binds", lambda: set(collect(facts.module).binds))
        attempt = fresh_name("_ndif_attempt", self._taken(facts))
        # what may change while the session runs: the retry gives up on its last attempt,
        # computed again after the session failed
        functions = facts.once("session-hoisting:all-functions",
                               lambda: find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef))
        changing = code_changing(region.statements, functions)
        for call, helper in region.helper_calls:
            wrapper = helper.wrapper_of(call)
            if wrapper is not None:
                passed = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
                return portable_retry(wrapper.guard, wrapper.func, passed, module_names, attempt, changing)
            if helper.retry is not None:
                passed = {}
                for name in helper.positions():
                    value = helper.argument(call, name)
                    if value is not None:
                        passed[name] = value
                return portable_retry(helper.retry, helper.func, passed, module_names, attempt, changing)
        bound_inside = set(collect_all(region.statements).binds)
        for stmt in region.statements:
            for loop in find_nodes(stmt, lambda n: type(n) is cst.For):
                guard = retry_guard(loop, facts)
                if guard is not None:
                    return portable_retry(guard, None, {}, module_names - bound_inside, attempt, changing)
        return None

    def _taken(self, facts: Facts) -> set[str]:
        return facts.once("session-hoisting:names", lambda: names_in(facts.module))

    def _plan_checked(self, region: Region, facts: Facts, context: Context, plan: SuitePlan) -> bool:
        """Plan a region whose code may all move (its client part, if any, split off)."""
        anchor = region.statements[0]
        reason, accumulators, lost = _liveness(region, facts)
        stuck = _unmovable(region, facts) if reason else []
        if stuck:
            # objects the session cannot take (`self`, a parameter): what changes them is
            # replayed on your machine, over the values the session computes for it
            before = region.split
            region.client_roots = frozenset(stuck)
            refusal = self._split(region, facts, context, carry=region.split.carried if region.split else ())
            if refusal:
                region.split, region.client_roots = before, frozenset()
                reason = f"{reason}; {refusal}"
            else:
                reason, accumulators, lost = _liveness(region, facts)
        # what the methods it calls store on `self` comes back to your `self` after it,
        # unless no code can read it after the session (then it stays there)
        attrs = sorted({a for call, h in region.helper_calls if h.bound for a in h.self_stores})
        stores = [f"self.{a}" for a in attrs]
        moved = frozenset(h.func.name.value for _, h in region.helper_calls if h.bound)
        # (in a notebook the kernel keeps the objects: a cell to come may read any attribute)
        why = {} if context.options.notebook or not attrs else \
            self_attributes_read_after(facts, region.statements, attrs, moved)
        left = [f"self.{a}" for a in attrs if why.get(a) == ""]
        region.left_attributes = left
        if stores and not reason:
            lost = [*lost, *(s for s in stores if s not in left)]
        if lost and not reason:
            # values the moved code computes and the script reads afterwards: the
            # replay brings them back
            reason = self._split(region, facts, context, carry=lost)
            if not reason and stores:
                kept = [s for s in stores if s not in left]
                reason = _replay_reads(region.split, kept, every_line=False) or \
                    _replay_reads(region.split, left, every_line=True)
            if not reason:
                reason, accumulators, lost = _liveness(region, facts)
                if lost:
                    reason = _lost_reason(lost[0])
        if not reason and region.helper_calls:
            reason = _helper_argument_problem(region, facts)
        if not reason:
            reason = _globals_the_session_would_hide(region, facts)
        if not reason:
            retry = self._retry(region, facts)
            if isinstance(retry, str):
                reason = retry
            else:
                region.retry = retry
        if reason:
            context.skipped(anchor, _not_hoisted(region, facts, self._counted(region, facts, context)), reason,
                            through=region.statements[-1])
            return False
        unsafe = [p for p in region.unsafe if _is_unsafe_only(p)]
        if region.split is not None:  # what must stay on the client is replayed, bars only dropped
            unsafe = [p for p in unsafe if p.kind == "progress"] if region.split.dropped_bars else []
        if unsafe and not context.options.unsafe_fixes:
            context.needs_unsafe(anchor, _not_hoisted(region, facts, self._counted(region, facts, context)),
                                 _unsafe_reason(unsafe[0]), through=region.statements[-1])
            return False
        if context.rewrites_refused:  # (pre-0.5 code: it would be hoisted, but not here)
            context.skipped(anchor, _not_hoisted(region, facts, self._counted(region, facts, context)),
                            context.rewrites_refused, through=region.statements[-1])
            return False
        # what the code after the session may read, asked of both once at most
        needed = functools.cache(lambda: _needed_after(region, facts))
        region.released = _released(region, accumulators, needed)
        region.left_on_server = _left_on_server(region, accumulators, needed)
        self._rewrite(region, accumulators, facts, plan, context)
        let_go = _unreturned(region, facts, accumulators) | region.left_on_server
        if region.retry is not None:
            context.introduced.add(region.retry.attempt)  # the retry loop's own counter
        if region.split is not None:
            context.introduced |= region.split.record_names
            # a value whose parts the records bring home stays on the server itself
            let_go |= region.split.unsaved - set(collect_all(region.split.replay).binds)
        context.unreturned |= let_go
        safety = Safety.UNSAFE if unsafe else Safety.SAFE
        counted = self._counted(region, facts, context)
        caller = self._hoisted_caller(region, facts)
        message = _hoisted_message(region, facts, accumulators, counted, caller) + _unsafe_note(unsafe)
        context.applied(anchor, message + _let_go_note(region, facts, let_go), safety,
                        evidence=f"{region.model}.session(", requests=None if caller else request_claim(counted))
        return True

    def _rewrite(self, region: Region, accumulators, facts, plan: SuitePlan, context) -> None:
        if region.split is not None:
            # what the session saves comes back by itself: the replay reads it, no record
            region.split.drop_records(_saved(region) | set(region.saved_here.values()))
        names = {a.name for a in accumulators}
        strip = StripRemote([b.node for b in region.blocks])
        calls_off = CallWithRemoteOff(region.helper_calls)
        for _call, helper in region.helper_calls:
            self.rewritten_helpers[helper.name] = helper
        self.passed_functions.update(region.passed_functions)
        drop = DropElementSaves(names, rebinds=region.split.unsaved if region.split is not None else frozenset())
        unwrap = _UnwrapProgress(facts) if context.options.unsafe_fixes else None

        originals = region.moved
        first_leading = region.statements[0].leading_lines

        inside = {id(a.stmt): a for a in accumulators if region.start <= a.index < region.end}
        before = [a for a in accumulators if id(a.stmt) not in inside]

        def build(_updated):
            # the region's own statements: nothing inside a claimed region is edited
            # elsewhere, and identity-based transforms need the original nodes
            moved = []
            headers = region.split.comments if region.split is not None else {}
            for stmt in originals:
                header = headers.get(id(stmt), [])
                if id(stmt) in inside:
                    acc = inside[id(stmt)]
                    lines = [*header, *stmt.leading_lines]
                    moved.append(saved_container(acc.name, acc.kind, stmt).with_changes(leading_lines=lines))
                    continue
                if id(stmt) in region.saved_here:
                    stmt = _saving(stmt)
                moved.append(transform(stmt, _MoveEdits(stmt, strip, calls_off, drop, unwrap, region.passed_calls)))
                if header:  # a section's header, from the replayed line above its remote work
                    moved[-1] = moved[-1].with_changes(leading_lines=[*header, *moved[-1].leading_lines])
            leading = first_leading
            for index, stmt in enumerate(moved):
                if stmt.leading_lines is leading or (index == 0 and stmt.leading_lines):
                    # (most have none: no node rebuilt for nothing)
                    moved[index] = stmt.with_changes(leading_lines=[])
                    break
            created = [_made_in_session(a, nnsight_name, a.name in region.left_on_server) for a in before]
            split = region.split
            fallback = split is not None and split.fallback
            prelude = list(split.prelude) if split is not None else []
            if prelude:
                prelude[0] = prelude[0].with_changes(leading_lines=leading)
                leading = ()
            released = [_release(region.released)] if region.released else []
            session = session_statement(region.model, region.flag, created + moved + released,
                                        () if fallback else leading)
            if region.retry is not None:
                session = region.retry.around(session)
            if fallback:
                # the code as written, should the session fail: the containers it fills
                # are made again where it starts (fresh nodes: a node is in one place)
                as_written = [a.stmt for a in before if a.kind != "carried"] + region.statements
                as_written = [s.deep_clone() for s in as_written]
                as_written[0] = as_written[0].with_changes(leading_lines=[])
                return [*prelude, with_fallback(session, as_written, split.replay, leading)]
            return [*prelude, session, *(split.replay if split is not None else ())]

        nnsight_module = next((local for local, path in facts.imports.items() if path == "nnsight"), "")
        nnsight_name = nnsight_module or "nnsight"
        if not nnsight_module and any(a.kind == "carried" for a in before):
            self.needs_nnsight_import = True
        plan.replace(region.suite, region.start, region.end, build)
        for acc in before:
            if acc.kind != "carried":
                plan.remove(region.suite, acc.index)


_EDITED_KINDS = frozenset({cst.With, cst.Call, cst.Assign, cst.For})  # what _MoveEdits may edit


class _MoveEdits(cst.CSTTransformer):
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
            return id(node) in self.calls.calls or id(node) in self.passed or _names_root(node.func, self.drop.names)
        if kind is cst.Assign:
            # ... and `acc[k] = ...` (and `x = ...` for the names it rebinds)
            return any(_names_root(t.target, self.drop.names | self.drop.rebinds) for t in node.targets)
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


def _module_code(region: Region, facts: Facts) -> bool:
    """Is the region a run of the module's own statements (its body, where a `def` makes
    one of ``facts.functions``, whose calls the session checks)?"""
    return region.suite is facts.module


def _nested_in_planned_sessions(region: Region, facts: Facts, claimed: set[int], helpers: frozenset[str]) -> str:
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


def _drop_nested_repeats(findings: list, mark: int) -> None:
    """One finding per construct left as it is: a loop refused inside a loop (or run)
    refused for the same reason says nothing its enclosing finding does not — the
    reason that stops the outer one stops it too — so only the outermost stays."""
    refused = [f for f in findings[mark:] if f.status is Status.SKIPPED and f.reason]
    if len(refused) < 2:
        return
    nested: set[int] = set()
    for outer in refused:
        same = {id(f.node): f for f in refused if f is not outer and f.reason == outer.reason}
        if same:
            nested.update(id(same[id(n)]) for n in find_nodes(outer.node, lambda n: id(n) in same))
    findings[mark:] = [f for f in findings[mark:] if id(f) not in nested]


def _names_root(expr: cst.BaseExpression, names) -> bool:
    """Is ``expr`` rooted at one of ``names`` (`acc`, `acc.x`, `acc[k]`)?"""
    if not names:
        return False
    if isinstance(expr, cst.Attribute):
        expr = expr.value
    return root_name(expr) in names


def _may_call(stmt: cst.CSTNode, helpers: dict[str, RemoteHelper]) -> bool:
    """Does ``stmt`` call a function by one of the names in ``helpers`` anywhere? Cheaper
    than :func:`helper_calls`' walk, which finds nothing when this is False."""
    if not helpers:
        return False

    def named_call(node: cst.CSTNode) -> bool:
        return type(node) is cst.Call and called_helper(node, helpers) is not None

    return bool(find_nodes(stmt, named_call))


def _outer_blocks(facts: Facts, stmt: cst.CSTNode) -> list[Block]:
    """The outermost nnsight blocks inside ``stmt`` (itself included), in the order of
    ``facts.blocks``."""
    return list(_outer_blocks_by_statement(facts).get(id(stmt), ()))


def _outer_blocks_by_statement(facts: Facts) -> dict[int, list[Block]]:
    """id(statement) -> its outermost nnsight blocks (:func:`_outer_blocks`), indexed
    once per version of the tree (read-only: callers copy what they keep)."""
    return facts.once("session-hoisting:outer blocks", lambda: _index_outer_blocks(facts))


def _index_outer_blocks(facts: Facts) -> dict[int, list[Block]]:
    index: dict[int, list[Block]] = {}
    for block in facts.blocks:
        if block.parent is None:
            for node in (block.node, *block.stmt.ancestors):
                index.setdefault(id(node), []).append(block)
    return index


def _fewer_than_two_requests(suite, facts: Facts) -> bool:
    """Do the suite's remote blocks send fewer than two requests in all? A region's
    requests are those of its statements' outermost blocks, each statement counted on
    its own (:func:`requests_in`), so then no region of the suite sends two. A statement
    with a session or a local trace is a barrier (:meth:`SessionHoisting._kind`): its
    blocks are in no region."""
    total = 0
    by_statement = _outer_blocks_by_statement(facts)  # (looked up once: asked of every statement)
    for stmt in suite.body:
        outer = by_statement.get(id(stmt))
        if outer and not any(b.method == "session" or b.remote.state is Remote.NO for b in outer):
            total += requests_in(outer, [stmt], facts)
            if total >= 2:
                return False
        elif outer and isinstance(stmt, (cst.For, cst.While)) and any(b.remote.state is not Remote.NO for b in outer):
            return False  # a loop of sessions, or of local and remote traces: its finding says why it stays
    return True


def _suites_outermost_first(facts: Facts):
    seen: dict[int, tuple[int, cst.CSTNode]] = {}
    for info in facts.statements.values():
        if id(info.suite) not in seen:
            seen[id(info.suite)] = (len(info.ancestors), info.suite)
    return [suite for _, suite in sorted(seen.values(), key=lambda item: item[0])]


def _inside(facts: Facts, suite, claimed: set[int]) -> bool:
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


def _window_edges(suite, facts: Facts, edges: frozenset[int]) -> set[int]:
    """Indices of the module's statements that begin a window (see Options.window_edges):
    a run stops before them. Empty unless the whole file is optimized at once for a
    comparison with the windowed run."""
    if not edges or suite is not facts.module:
        return set()
    found: set[int] = set()
    line = sum(1 for _ in facts.module.header)
    for index, stmt in enumerate(suite.body):
        first_code = line + len(stmt.leading_lines)
        if any(line <= edge <= first_code for edge in edges):
            found.add(index)
        line += code_of(stmt).count("\n")  # (cached per statement)
    return found


def _blocking(problems: list[Problem], context: Context) -> bool:
    return any(not _is_unsafe_only(p) for p in problems)


def _is_unsafe_only(problem: Problem) -> bool:
    return problem.kind in UNSAFE_KINDS


def _deferrable_only(problem: Problem) -> bool:
    """Code with this problem may be replayed on the client after the session (a `try`
    around remote work: split, the split says when it cannot be)."""
    return splittable(problem)


def _iteration_problems(stmt, facts: Facts) -> list[Problem]:
    """A `for ... else` or `while ... else` can't be reasoned about simply."""
    if isinstance(stmt, (cst.For, cst.While)) and stmt.orelse is not None:
        return [Problem("control", "has an `else:` clause", stmt)]
    return []


def _made_in_session(acc: Accumulator, nnsight_name: str, left_on_server: bool) -> cst.SimpleStatementLine:
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


def _liveness(region: Region, facts: Facts) -> tuple[str, list[Accumulator], list[str]]:
    """Why the rest of the script would miss something, or "" and the accumulators
    the session must take over; and the names read afterwards that would stay on the
    server (the reason is about the first of them)."""
    stmts = region.moved
    everything = collect_all(stmts)
    later = reads_after(facts, region.suite, region.end)
    saved = _saved(region)
    lost: list[str] = []
    # the names bound outside the blocks are among those bound anywhere: the walk that
    # leaves the blocks out is needed only when one of those is read later
    if any(n in later and n not in saved for n in everything.binds):
        outside_blocks = collect_all(stmts, skip=tuple(b.node.body for b in region.blocks))
        lost = [n for n in outside_blocks.binds if n in later and n not in saved]
    for name in lost:  # what comes back must be able to: data, not a module or a file
        problem = wire_problem(name, stmts, facts)
        if problem:
            return f"{problem}, and the code after it needs it", [], []
    accumulators: list[Accumulator] = []
    for name in _client_mutations(region, facts, everything):
        acc, why = _container_for(region, facts, name)
        if acc is None:
            return f"it changes `{name}`, which lives on your machine: {why}", [], []
        accumulators.append(acc)
    in_place = []
    for name in list(lost):
        acc = _accumulator_inside(region, name)
        if acc is not None:
            in_place.append(acc)
            lost.remove(name)
    region.saved_here = _results_to_save(region, facts, set(lost), {a.name for a in in_place})
    carried = region.split.carried if region.split is not None else []
    lost = [n for n in lost if n not in region.saved_here.values() and n not in carried]
    if lost:
        return "", [], lost
    return "", accumulators + in_place, []


def _unmovable(region: Region, facts: Facts) -> list[str]:
    """The names the region changes in place that no container of the session can stand
    for (an object of `self`, a parameter): they must stay on your machine."""
    names = _client_mutations(region, facts, collect_all(region.moved))
    return [name for name in names if _container_for(region, facts, name)[0] is None]


def _container_for(region: Region, facts: Facts, name: str) -> tuple[Accumulator | None, str]:
    """The container the session takes over for ``name``, which the region fills: one
    created above it, or any new container, which can travel to the session and back;
    else None and why not."""
    acc, why = find_accumulator(facts, name, region.suite, region.start)
    if acc is None:
        acc, why = carried_container(facts, name, region.suite, region.end)
    return acc, why


def _lost_reason(name: str) -> str:
    return (
        f"`{name}` is computed inside the loop and read afterwards, and cannot be brought back "
        "from the session"
    )


def _client_mutations(region: Region, facts: Facts, everything: NameUse) -> list[str]:
    """Names the region changes in place (in helper calls too) without binding them, and
    that are not models, in the order the code first changes them: that order picks the
    refusal given and the order of the containers created. ``everything``: the names of
    the region's statements."""
    mutated = dict.fromkeys(everything.mutates)
    for call, helper in region.helper_calls:
        for param in helper.mutated_params:
            value = helper.argument(call, param)
            if isinstance(value, cst.Name):
                mutated.setdefault(value.value)
    return [name for name in mutated if name not in everything.binds and not facts.is_model_like(name)
            and facts.changes_a_module(name, everything.mutates.get(name))]


def _saved(region: Region) -> set[str]:
    """Names the region's blocks bind to saved values."""
    return set().union(*(b.saved_names for b in region.blocks)) if region.blocks else set()


def _results_to_save(
    region: Region, facts: Facts, lost: set[str], relocated: set[str]
) -> dict[int, str]:
    """Top-level `name = value` statements of the region whose value must come back:
    read later, or, in a notebook, a module-level result the kernel keeps for cells to
    come. They get `.save()`."""
    module_level = region.kernel_keeps_names
    found: dict[int, str] = {}
    for stmt in region.moved:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        target = small.targets[0].target
        if not isinstance(target, cst.Name) or is_save_call(small.value):
            continue
        name = target.value
        if name in relocated or not (name in lost or module_level):
            continue
        if region.split is not None and name in region.split.record_names and name not in lost:
            continue  # the split's own bookkeeping (a feed of the prelude's values), not a result
        if sum(1 for other in region.moved if name in collect(other).binds) != 1:
            continue  # bound again elsewhere in the region: which value comes back is unclear
        found[id(stmt)] = name
    return found


def _saving(stmt: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    small = stmt.body[0]
    return stmt.with_changes(body=[small.with_changes(value=method_call(small.value, "save"))])


def _as_the_session_calls(helper: RemoteHelper | None, func: cst.FunctionDef, passed: tuple[str, ...]) -> cst.FunctionDef:
    """The function as the session calls it: with its flag parameter (a remote helper)
    and the module names the session hands it."""
    func = rewritten_helper(helper) if helper is not None else func
    return with_keyword_parameters(func, passed) if passed else func


def _globals_the_session_would_hide(region: Region, facts: Facts) -> str:
    """A same-file function called in the session reads the module's names: one the
    moved code binds is a name of the session's own scope there, which the function's
    copy on NDIF cannot see (NameError, or an old value). A function the session calls
    itself gets such names as arguments (`def f(x, *, vec)`, `f(x, vec=vec)`) when
    every call of it is one the session makes after binding them (see
    :func:`_passable`); otherwise the session would hide them, and the region stays."""
    moved = region.moved
    bound = set(collect_all(moved).binds)
    region.passed_calls, region.passed_functions = {}, {}
    if not bound:
        return ""
    direct = _calls_by_function(moved, facts)
    callers = {name: "" for name in direct}  # function -> the function of the session that calls it
    queue = list(direct)
    while queue:  # what the functions the session calls call in turn run there too
        name = queue.pop()
        for read in collect(facts.functions[name].body).reads:
            if read in facts.functions and read not in callers:
                callers[read] = callers[name] or name
                queue.append(read)
    for name, via in callers.items():
        hidden = _module_names_read(facts.functions[name], bound)
        if not hidden:
            continue
        why = _passable(name, hidden, region, direct.get(name, []), facts) if not via else (
            f"it is called by `{via}`, not by the session itself")
        if why:
            read = hidden[0]
            return (
                f"`{name}` reads `{read}`, which the session would compute: inside the session the "
                f"function's copy cannot see it, and it cannot be handed over as an argument ({why}); "
                f"compute `{read}` before the loop, or pass it as an argument"
            )
        region.passed_functions[name] = hidden
        for call in direct[name]:
            region.passed_calls[id(call)] = hidden
    return ""


def _calls_by_function(stmts: list[cst.BaseStatement], facts: Facts) -> dict[str, list[cst.Call]]:
    """The calls of same-file functions by plain name in ``stmts``, by function."""
    found: dict[str, list[cst.Call]] = {}
    for stmt in stmts:
        for call in find_nodes(stmt, lambda n: type(n) is cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value in facts.functions:
                found.setdefault(call.func.value, []).append(call)
    return found


def _module_names_read(func: cst.FunctionDef, names: set[str]) -> tuple[str, ...]:
    """Which of ``names`` the function reads as module names (not its own)."""
    return tuple(sorted(free_reads(func) & names))


def _passable(name: str, hidden: tuple[str, ...], region: Region, calls: list[cst.Call], facts: Facts) -> str:
    """Why the session cannot hand ``hidden`` to function ``name`` as arguments ("" if
    it can). It can when the region is module code (its names are the module's, which
    the function reads), the function is a plain one no decorator wraps, nothing declares
    the names `global` (the function reads each when it runs: an argument read at the
    call must be the same value), every use of the function in the file is a direct call
    the session makes, and each such call comes after the session has bound the names
    (the argument is read where the function might never have read it)."""
    func = facts.functions[name]
    where = facts.stmt(region.statements[0])
    if where.function is not None or any(isinstance(node, cst.ClassDef) for node in where.ancestors):
        return "the session would run inside a function or class, whose names the function does not read"
    helper = next((h for _, h in region.helper_calls if h.name == name), None)
    if func.decorators and (helper is None or len(helper.context_decorators) != len(func.decorators)):
        return f"`{name}` is decorated"
    if any(n.value in hidden for g in find_nodes(facts.module, lambda n: type(n) is cst.Global) for n in (x.name for x in g.names)):
        return "it is declared `global` somewhere, so it may change while the function runs"
    split = region.split
    if split is not None and split.fallback:
        return "the code as written runs again should the session fail"
    elsewhere = [*split.replay, *split.prelude] if split is not None else []
    if _calls_by_function(elsewhere, facts).get(name):
        return f"`{name}` is also called on your machine"
    made = {id(c.func) for c in calls}
    uses = find_nodes(facts.module, lambda n: type(n) is cst.Name and n.value == name and n is not func.name)
    if len(uses) != len(made) or any(id(n) not in made for n in uses):
        return f"`{name}` is used elsewhere in the file, where it would miss the argument"
    if any(_nested_call(stmt, made) for stmt in region.moved):
        return f"`{name}` is called inside a nested function"
    earlier: set[str] = set()
    first = {id(c) for c in calls}
    for stmt in region.moved:
        if any(id(c) in first for c in find_nodes(stmt, lambda n: type(n) is cst.Call)) and not set(hidden) <= earlier:
            missing = next(n for n in hidden if n not in earlier)
            return f"it is called before the session has surely bound `{missing}`"
        earlier |= definite_binds(stmt)
    return ""


def _nested_call(stmt: cst.CSTNode, funcs: set[int]) -> bool:
    """Is one of the calls (by the id of their `func`) inside a `def`, `lambda` or class
    within ``stmt``?"""
    for scope in find_nodes(stmt, lambda n: isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef))):
        if find_nodes(scope, lambda n: id(n) in funcs):
            return True
    return False


def _helper_argument_problem(region: Region, facts: Facts) -> str:
    """A helper that fills a parameter must be handed a container the session owns."""
    for call, helper in region.helper_calls:
        for param in helper.mutated_params:
            value = helper.argument(call, param)
            if value is not None and not isinstance(value, cst.Name):
                return f"`{helper.name}` changes its argument `{param}`, which is not a plain name here"
    return ""


RELEASE_COMMENT = "# nothing after the session reads it: let go here, not downloaded"


def _release(names: list[str]) -> cst.SimpleStatementLine:
    """`a = b = None  # ...`: the session's last line, which keeps what same-file functions
    saved and returned from being downloaded (a saved value the session's names still
    hold at its end comes back); nothing after the session reads those names."""
    comment = RELEASE_COMMENT if len(names) == 1 else RELEASE_COMMENT.replace("reads it", "reads them")
    return cst.parse_statement(" = ".join([*names, "None"]) + f"  {comment}\n")



def _needed_after(region: Region, facts: Facts) -> frozenset[str]:
    """The names the code after the session may read: the script's reads after the
    region, and what the replay reads and brings back."""
    needed = set(reads_after(facts, region.suite, region.end))
    if region.split is not None:
        needed |= set(region.split.carried) | set(collect_all(region.split.replay).reads)
    return frozenset(needed)


def _released(region: Region, accumulators, needed: Callable[[], frozenset[str]]) -> list[str]:
    """Names the session binds to what a same-file function returns of what its trace
    saved — a value the session would download with the names it ends with — and that
    nothing after the session reads. They are bound to
    None at the session's end. Not in a notebook's module code: the kernel keeps names
    for cells to come."""
    if region.kernel_keeps_names:
        return []
    # the calls of functions that return what their trace saved
    calls = {id(call) for call, helper in region.helper_calls if _returns_a_save(helper)}
    if not calls:
        return []
    kept = needed() | set(region.saved_here.values()) | {a.name for a in accumulators}
    if region.split is not None:
        kept |= region.split.record_names
    found: list[str] = []
    for stmt in region.moved:
        for assign in find_nodes(stmt, lambda n: type(n) is cst.Assign and id(n.value) in calls):
            if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
                continue
            name = assign.targets[0].target.value
            if name not in kept and name not in found:
                found.append(name)
    return found


def _returns_a_save(helper: RemoteHelper) -> bool:
    """Does the function return a name its trace binds to a saved value?"""
    returned = returned_name(helper.func)
    return returned is not None and any(returned in block.saved_names for block in helper.blocks)


def _left_on_server(region: Region, accumulators, needed: Callable[[], frozenset[str]]) -> frozenset[str]:
    """The containers created above the region that it fills and that nothing after the
    session reads: the session makes them and does not download them. In a notebook's
    module code every one comes back (the kernel keeps names for cells to come)."""
    if region.kernel_keeps_names:
        return frozenset()
    # (one the client made and the session takes along is the client's object: it stays
    # as it was on your machine, which is what a later pass would see and "fix")
    candidates = [a.name for a in accumulators if a.kind != "carried" and not region.start <= a.index < region.end]
    if not candidates:
        return frozenset()
    return frozenset(name for name in candidates if name not in needed())


def _unreturned(region: Region, facts: Facts, accumulators) -> set[str]:
    """Client names the moved code bound that stay on the server (none is read later)."""
    kept = _saved(region) | {a.name for a in accumulators if a.name not in region.left_on_server}
    kept |= set(region.saved_here.values())
    if region.split is not None:
        kept |= set(region.split.carried) | region.split.record_names
        # what the client part reads comes back in the records
        kept |= set(collect_all(region.split.replay).reads)
    unkept = [n for n in collect_all(region.moved).binds if n not in kept]
    block_bodies = tuple(b.node.body for b in region.blocks)
    # a name bound somewhere in the region but in none of its blocks is bound outside
    # them: the walk that leaves the blocks out is needed only for a name they bind too
    in_blocks = collect_all(block_bodies).binds
    if not any(n in in_blocks for n in unkept):
        return set(unkept)
    bound = collect_all(region.moved, skip=block_bodies).binds
    return {n for n in unkept if n in bound}


def _accumulator_inside(region: Region, name: str) -> Accumulator | None:
    """An empty list/dict created by a top-level statement of the region itself: it
    becomes a saved container in place."""
    found = None
    for offset, stmt in enumerate(region.statements):
        if name not in collect(stmt).binds:
            continue
        kind = empty_container_binding(stmt, name)
        if kind is None or found is not None:
            return None
        found = Accumulator(name, kind, stmt, region.start + offset)
    return found


def _name_the_unseen(facts: Facts, context: Context) -> None:
    """A finding for each construct whose requests no reading of the file can see
    (analysis/opaque.py): a loop calling a callback handed the model, nnsight code in a
    string, a block opened through a name."""
    for found in callback_loops(facts):
        context.skipped(
            found.loop,
            f"this loop calls `{found.callback}`, a function `{found.function}` takes as a parameter, with the "
            "model: each call may send remote requests",
            f"not hoisted: which requests `{found.callback}` sends is decided by the caller of "
            f"`{found.function}` (a callback), so ndif-opt cannot count or bundle them; open one "
            "`model.session(remote=...)` around the loop yourself, or call a function of this file",
        )
    for found in blocks_through_names(facts):
        context.skipped(
            found.stmt,
            f"`with {found.name}:` opens `{_first_line(found.call)}` through the name `{found.name}`: "
            "the requests it sends are not counted, bundled or checked",
            "not optimized: ndif-opt reads the nnsight blocks written in a `with` statement; write "
            f"`with {_first_line(found.call)}:` there (an `if` around two `with` statements keeps a choice)",
        )
    for stmt, line in code_strings(facts):
        context.skipped(
            stmt,
            f"nnsight code written as a string (`{line}`): the requests it sends are not in this file's code",
            "not optimized: ndif-opt reads the code, not the code it writes; a session it could count and "
            "bundle must be written as code",
        )


def _stopped_by_mixing(sends: list[tuple[str, str, str]]) -> tuple[str, str]:
    """Why a loop whose traces (or calls of functions that trace) are of two models, or
    take two remote flags, is not one session: (what it sends to, the reason); ``sends``
    holds each one's (model, remote flag, code)."""
    models = list(dict.fromkeys(model for model, _flag, _code in sends))
    if len(models) > 1:
        named = ", ".join(f"`{m}`" for m in models)
        first = [next(code for model, _flag, code in sends if model == m) for m in models]
        each = " and ".join(f"`{m}` (`{code}`)" for m, code in zip(models, first))
        why = (f"not hoisted: a session runs one model, and this loop sends requests to {each}; where one "
               "model's part does not need the other's results, give each model a loop of its own: each "
               "loop then becomes one session")
        return f" to {len(models)} models ({named})", why
    flags = list(dict.fromkeys(flag for _model, flag, _code in sends))
    first = [next(code for _model, flag, code in sends if flag == f) for f in flags]
    each = " and ".join(f"`remote={f}` (`{code}`)" for f, code in zip(flags, first))
    why = f"not hoisted: a session takes one remote flag, and this loop's requests take {each}; pass the same " \
        "flag to each"
    return f" to `{models[0]}` with {len(flags)} remote flags", why


def _stopped_by_a_session(block: Block) -> tuple[str, str]:
    why = f"not hoisted: `{_first_line(block.node)}` is a session already, and a session cannot open " \
        "inside another; open it once, around the loop, to send one request"
    return f" to `{block.model}`, opening a session in each iteration", why


def _stopped_by_a_local_trace(block: Block, blocks: list[Block]) -> tuple[str, str]:
    remote = next((b for b in blocks if b.remote.state is not Remote.NO), block)
    why = f"not hoisted: `{_first_line(block.node)}` runs on your machine (it has no `remote=`), and in a " \
        "session it would run on NDIF"
    return f" to `{remote.model}`", why


def _stopped_by_kwargs(block: Block) -> tuple[str, str]:
    why = f"not hoisted: `{_first_line(block.node)}` passes `remote=` inside `**kwargs`, which a session " \
        "cannot take from it; write `remote=...` as a keyword argument"
    return f" to `{block.model}`", why


def _move_definitions(region: Region, definitions: list[cst.BaseStatement], context: Context,
                      plan: SuitePlan) -> None:
    """Plan the definitions' move before the region (see :mod:`.common.definitions`)."""

    def build(_updated):
        # each statement keeps the blank lines and comments above it
        return [*definitions, *without_statements(region.statements, definitions)]

    plan.replace(region.suite, region.start, region.end, build)
    code = ", ".join(f"`{_first_line(d)}`" for d in definitions)
    context.applied(
        definitions[0],
        f"{code} {tense('now ' + ('run' if len(definitions) > 1 else 'runs'), 'would run')} once on your machine, "
        f"before {_kind_label(region)}: "
        "inside a session it would run on the server, and what it binds could not come back "
        "(a module or a function of the script cannot be sent from NDIF)",
        Safety.SAFE,
    )


def _first_line(stmt: cst.BaseStatement) -> str:
    """The statement's first line of code (not a comment above it), without its colon."""
    lines = [line.strip() for line in code_of(stmt).strip().splitlines()]
    return next((line for line in lines if line and not line.startswith("#")), lines[0] if lines else "").rstrip(":")


def _kind_label(region: Region) -> str:
    first = region.statements[0]
    if len(region.statements) == 1 and isinstance(first, cst.For):
        return "this loop"
    if len(region.statements) == 1 and isinstance(first, cst.While):
        return "this while loop"
    return "this run of remote work"


def _header_rebound(region: Region) -> str:
    """Why one session opened before the region cannot stand for its traces: a name its
    `model.session(remote=flag)` reads is assigned inside the region, so the traces may
    run on another model, or with another flag, than the one the session was opened with."""
    bound = set(collect_all(region.statements).binds)
    stores = {code_of(t.target) for stmt in region.statements
              for t in find_nodes(stmt, lambda n: isinstance(n, cst.AssignTarget))
              if isinstance(t.target, cst.Attribute)}
    if region.model in stores or region.model.split(".")[0] in bound:
        return (f"`{region.model}` is assigned inside it, so its requests may go to different models, "
                "and a session runs one model that must exist before it opens")
    flag_reads = set(collect(region.flag).reads) if region.flag is not None else set()
    rebound = sorted(flag_reads & bound)
    if rebound:
        return (f"`{rebound[0]}` is assigned inside it and decides `remote=`, so its requests may not all "
                "run remotely; one session takes one flag, read before it opens")
    return ""


def _not_hoisted(region: Region, facts: Facts, requests: RegionRequests) -> str:
    names, meaning = symbols(requests.sent, requests.runs)
    sent = counted_with_loops(requests.sent, "separate remote request", names)[0]
    sessions = "one" if requests.runs == 1 else counted_with_loops(requests.runs, "session", names)[0]
    return (
        f"{_kind_label(region)} sends {sent} to `{region.model}`{_per_call(requests)}; "
        f"one `{region.model}.session(remote=...)` around it would send {sessions}"
        + (f" ({meaning})" if meaning else "")
    )


def request_claim(requests: RegionRequests) -> tuple | None:
    """(before, after) of a region made one session per run, for its finding: a claim on
    the cost table, unless the table leaves the region out (no code calls it)."""
    return None if requests.uncalled is not None else (requests.sent, requests.runs)


def _per_call(requests: RegionRequests) -> str:
    if requests.uncalled:
        return f" each time `{requests.uncalled}` runs (no code here calls it: not in the cost table)"
    if requests.uncalled == "":
        return " each time it runs"
    return ""


def _hoisted_message(region: Region, facts: Facts, accumulators, requests: RegionRequests, caller: str = "") -> str:
    if caller:  # its calls run in a session already: that session's finding counts them
        text = (f"{tense('wrapped', 'would wrap')} {_kind_label(region)} in one session, for a call of `{caller}` "
                f"outside a session (the session that {tense('now calls', 'would call')} `{caller}` counts its "
                "requests)")
    else:
        change, meaning = claim_text(requests.sent, requests.runs, "request")
        text = f"{tense('wrapped', 'would wrap')} {_kind_label(region)} in one session: {change}{_per_call(requests)}"
        if meaning:
            text += f" ({meaning})"
    if region.helper_calls:
        names = sorted({h.name for _, h in region.helper_calls})
        text += "; " + ", ".join(f"`{n}`" for n in names) + f" {tense('now called', 'would be called')} with " \
            "remote=False inside it"
        return text + _passed_note(region) + _left_note(region) + _split_note(region.split) + _retry_note(region.retry)
    flag = region.blocks[0].remote
    if flag.state is Remote.MAYBE:
        text += f" (remote-ness unknown: {flag.reason}; the session takes the same flag, so this holds either way)"
    elif flag.expr is not None and not (isinstance(flag.expr, cst.Name) and flag.expr.value == "True"):
        text += f" ({flag.reason})"
    saved = [a.name for a in accumulators if a.name not in region.left_on_server]
    if saved:
        text += "; " + ", ".join(f"`{n}`" for n in saved) + f" {tense('now created', 'would be created')} in " \
            "the session and saved"
    kept = [a.name for a in accumulators if a.name in region.left_on_server]
    if kept:
        text += "; " + ", ".join(f"`{n}`" for n in kept) + f" {tense('now created', 'would be created')} in " \
            "the session and left there (nothing after it reads it: not downloaded)"
    return text + _passed_note(region) + _split_note(region.split) + _retry_note(region.retry)


def _let_go_note(region: Region, facts: Facts, let_go: set[str]) -> str:
    """`; not brought back: `prompt`, `logits` (...)`: the script's intermediates the
    session keeps (a function's locals go without a word, as they always do)."""
    if facts.stmt(region.statements[0]).function is not None:
        return ""
    names = sorted(let_go & intermediates(facts))
    if not names:
        return ""
    return (f"; {tense('not brought back', 'would not be brought back')}: " + ", ".join(f"`{n}`" for n in names)
            + " (loop temporaries and saved values that only the session reads; nothing after it reads them)")


def _left_note(region: Region) -> str:
    """`; `self.cache` stays in the session (...)`."""
    if not region.left_attributes:
        return ""
    names = ", ".join(f"`{n}`" for n in region.left_attributes)
    return (f"; {names}, which the methods set, {tense('stays', 'would stay')} on the server: no code can read "
            "it after the session (not downloaded)")


def _passed_note(region: Region) -> str:
    """`; `steered` now takes `vec` as an argument (...)`."""
    notes = [
        f"`{name}` {tense('now takes', 'would take')} " + ", ".join(f"`{n}`" for n in names)
        for name, names in sorted(region.passed_functions.items())
    ]
    if not notes:
        return ""
    return "; " + ", ".join(notes) + (
        " as an argument (the session computes it, and the copy of a function a session carries cannot see "
        "the session's names)"
    )


def _retry_note(retry: PortableRetry | None) -> str:
    if retry is None:
        return ""
    return (
        f"; the retry (`{retry.guard.header}`) {tense('now wraps', 'would wrap')} the whole session: a failed "
        f"attempt {tense('runs', 'would run')} the session again from the start (a run without failures "
        f"{tense('is', 'would be')} unchanged)"
    )


def _split_note(split: Split | None) -> str:
    if split is None:
        return ""
    text = ""
    if split.deferred:
        what = "(prints, files, progress bars)"
        lines = f"statement that must run on your machine {what} {tense('now runs', 'would run')}"
        if split.deferred != 1:
            lines = f"statements that must run on your machine {what} {tense('now run', 'would run')}"
        text += f"; {split.deferred} {lines} after it, in the same order, over values the session " \
            f"{tense('records', 'would record')}"
    if split.prepared:
        lines = f"statement that computes on your machine what the remote part reads {tense('now runs', 'would run')}"
        if split.prepared != 1:
            lines = f"statements that compute on your machine what the remote part reads " \
                f"{tense('now run', 'would run')}"
        text += f"; {split.prepared} {lines} before it, in the same order, and the session " \
            f"{tense('takes', 'would take')} the values in turn"
    if split.carried:
        names = ", ".join(f"`{n}`" for n in split.carried)
        text += f"; {names} {tense('brought', 'would be brought')} back from the session for the code after it"
    if split.fallback:
        text += (
            f"; its `try` {tense('now also guards', 'would also guard')} the session: should the session fail, "
            f"the code {tense('runs', 'would run')} as written, each failure handled on its own (a run without "
            f"failures {tense('is', 'would be')} unchanged)"
        )
    return text


def _plain(problem: Problem) -> str:
    if problem.kind in ("control", "request"):  # its message says why already
        return f"not hoisted: the code {problem.message}"
    return f"not hoisted: the code {problem.message}, which must run on your machine"


def _unsafe_reason(problem: Problem) -> str:
    if problem.kind == "print":
        return "the loop prints: inside a session `print` becomes a server log line (use --unsafe-fixes to accept)"
    return "the loop shows a progress bar, which a session would drop (use --unsafe-fixes to accept)"


def _unsafe_note(unsafe: list[Problem]) -> str:
    """What an applied unsafe fix gives up, said where it is applied (`--unsafe-fixes`)."""
    kinds = {p.kind for p in unsafe}
    notes = []
    if "print" in kinds:
        notes.append(f"its `print` output {tense('now goes', 'would go')} to the server's log, not your screen")
    if "progress" in kinds:
        notes.append(f"its progress bar {tense('is', 'would be')} dropped")
    return "".join(f"; {note}" for note in notes)


class _UnwrapProgress(cst.CSTTransformer):
    """`for x in tqdm(xs, ...)` → `for x in xs` (the bar cannot run on the server)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated.with_changes(iter=unwrap_progress(updated.iter, self.facts))


# a value the session computes at module level and only the session reads (`shift`)
_PATCHED_TOP = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("the cat sat on the", remote=True):
    clean = model.transformer.h[1].output.save()
shift = clean[0, -1] - clean[0, 0]
with model.trace("one two three", remote=True):
    model.transformer.h[1].output[0, -1] += shift
    top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
"""

SessionHoisting.cases = (
    Case(
        name="a loop that calls a callback handed the model is named, not guessed",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def sweep(llm, prompts, measure):
    scores = []
    for prompt in prompts:
        scores.append(measure(llm, prompt))
    return scores


def top(llm, prompt):
    with llm.trace(prompt, remote=True):
        token = llm.lm_head.output[0, -1].argmax().item().save()
    return token


print(sweep(model, ["a b", "c d"], top))
""",
        reason="which requests `measure` sends is decided by the caller of `sweep` (a callback)",
    ),
    Case(
        name="nnsight code written as a string is named, not guessed",
        before="""\
import importlib.util
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CODE = (
    "def run(model, prompt):\\n"
    "    with model.trace(prompt, remote=True):\\n"
    "        return model.lm_head.output.save()\\n"
)
with open("generated.py", "w") as f:
    f.write(CODE)
spec = importlib.util.spec_from_file_location("generated", "generated.py")
""",
        reason="ndif-opt reads the code, not the code it writes",
    ),
    Case(
        name="a block opened through a name is named, not guessed",
        before="""\
from contextlib import nullcontext

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def last_hidden(prompts, remote=True, open_context=True):
    context = model.trace(prompts, remote=remote) if open_context else nullcontext()
    with context:
        hidden = model.transformer.h[-1].output[:, -1].save()
    return hidden


for batch in (["a b", "c d"], ["e f"]):
    print(last_hidden(batch).shape)
""",
        reason="ndif-opt reads the nnsight blocks written in a `with` statement",
    ),
    Case(
        name="loop over layers",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
# one hidden state per layer
hidden = []
for layer in range(32):
    with model.trace(prompt, remote=True):
        hidden.append(model.model.layers[layer].output[:, -1].save())
print(len(hidden))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    # one hidden state per layer
    hidden = list().save()
    for layer in range(32):
        with model.trace(prompt):
            hidden.append(model.model.layers[layer].output[:, -1])
print(len(hidden))
""",
    ),
    Case(
        name="remote flag in a variable is kept",
        before="""\
from nnsight import LanguageModel

REMOTE = True
model = LanguageModel("openai-community/gpt2")
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=REMOTE):
        out = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

REMOTE = True
model = LanguageModel("openai-community/gpt2")
with model.session(remote=REMOTE):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            out = model.lm_head.output.save()
""",
    ),
    Case(
        name="remote flag as a parameter of a helper function",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def collect(prompts, remote=False):
    outs = []
    for prompt in prompts:
        with model.trace(prompt, remote=remote):
            outs.append(model.lm_head.output[0, -1].argmax().save())
    return outs


tops = collect(["a b", "c d"], remote=True)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def collect(prompts, remote=False):
    with model.session(remote=remote):
        outs = list().save()
        for prompt in prompts:
            with model.trace(prompt):
                outs.append(model.lm_head.output[0, -1].argmax())
    return outs


tops = collect(["a b", "c d"], remote=True)
""",
    ),
    Case(
        name="trace inside a helper function called from a loop",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


tops = []
for prompt in ["a b", "c d"]:
    tops.append(top_token(prompt))
print(tops)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt, remote=True):
    with model.trace(prompt, remote=remote):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


with model.session(remote=True):
    tops = list().save()
    for prompt in ["a b", "c d"]:
        tops.append(top_token(prompt, remote=False))
print(tops)
""",
    ),
    Case(
        name="helper that writes a file is not moved",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def run(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    with open("log.txt", "a") as f:
        f.write(prompt)
    return logits


for prompt in ["a b", "c d"]:
    run(prompt)
""",
        reason="calls `open`",
    ),
    Case(
        name="remote flag inside **kwargs",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
KW = {"remote": True}
for prompt in ["a b", "c d"]:
    with model.trace(prompt, **KW):
        out = model.lm_head.output.save()
""",
        reason="passes `remote=` inside `**kwargs`, which a session cannot take from it",
    ),
    Case(
        name="a loop over two models: a session runs one",
        before="""\
from nnsight import LanguageModel

small = LanguageModel("openai-community/gpt2")
big = LanguageModel("meta-llama/Llama-3.1-8B")
agree = []
for prompt in ["The weather today is", "My favourite food is"]:
    with small.trace(prompt, remote=True):
        a = small.lm_head.output[0, -1].argmax().save()
    with big.trace(prompt, remote=True):
        b = big.lm_head.output[0, -1].argmax().save()
    agree.append(small.tokenizer.decode(a) == big.tokenizer.decode(b))
""",
        reason="a session runs one model, and this loop sends requests to `small`",
    ),
    Case(
        name="consecutive remote traces merge",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("clean", remote=True):
    clean = model.transformer.h[3].output.save()
with model.trace("corrupt", remote=True):
    model.transformer.h[3].output[:] = clean
    patched = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("clean"):
        clean = model.transformer.h[3].output.save()
    with model.trace("corrupt"):
        model.transformer.h[3].output[:] = clean
        patched = model.lm_head.output.save()
""",
    ),
    Case(
        name="client values between the traces come back saved, parenthesized",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("clean", remote=True):
    clean = model.transformer.h[3].output.save()
scale = 3
rows = 0, -1
with model.trace("corrupt", remote=True):
    model.transformer.h[3].output[:, -1] = clean[:, -1] * scale
    patched = model.lm_head.output[:, rows[1]].save()
print(patched.shape, scale, rows)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("clean"):
        clean = model.transformer.h[3].output.save()
    scale = (3).save()
    rows = (0, -1).save()
    with model.trace("corrupt"):
        model.transformer.h[3].output[:, -1] = clean[:, -1] * scale
        patched = model.lm_head.output[:, rows[1]].save()
print(patched.shape, scale, rows)
""",
    ),
    Case(
        name="client effects after the traces: the loop is split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    for prompt in ["a", "b"]:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        f.write(str(out.shape))
        f.flush()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output
            _ndif_rows.append(out.shape)
    for out_shape in _ndif_rows:
        f.write(str(out_shape))
        f.flush()
""",
    ),
    Case(
        name="client effect between traces",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    for prompt in ["a", "b"]:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        f.write(str(out.shape))
        with model.trace(prompt, remote=True):
            out2 = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output
            _ndif_rows.append(out.shape)
            with model.trace(prompt):
                out2 = model.lm_head.output.save()
    for out_shape in _ndif_rows:
        f.write(str(out_shape))
""",
    ),
    Case(
        name="client value read after the loop",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    with model.trace(prompt, remote=True):
        out = model.lm_head.output.save()
    total = out.sum()
print(total)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            out = model.lm_head.output.save()
        total = out.sum()
    _ndif_log["total"] = total
total = _ndif_log["total"]
print(total)
""",
    ),
    Case(
        name="what methods store on self that only the session's methods read stays on the server",
        before="""\
import torch
from nnsight import LanguageModel


class Patching:
    def __init__(self, model, clean, corrupt):
        self.model = model
        self.clean, self.corrupt = clean, corrupt

    def run_clean(self):
        with self.model.trace(self.clean, remote=True):
            hidden = torch.stack([self.model.transformer.h[i].output for i in range(12)]).save()
        self.clean_hidden = hidden

    def patch(self, layer):
        with self.model.trace(self.corrupt, remote=True):
            self.model.transformer.h[layer].output[0, -1] = self.clean_hidden[layer, 0, -1]
            top = self.model.lm_head.output[0, -1].argmax().item().save()
        return top

    def sweep(self):
        self.run_clean()
        tops = []
        for layer in range(12):
            tops.append(self.patch(layer))
        return tops


experiment = Patching(LanguageModel("openai-community/gpt2"), "The cat sat on the", "One two three four")
print(experiment.sweep())
""",
        after="""\
import torch
from nnsight import LanguageModel


class Patching:
    def __init__(self, model, clean, corrupt):
        self.model = model
        self.clean, self.corrupt = clean, corrupt

    def run_clean(self, remote=True):
        with self.model.trace(self.clean, remote=remote):
            hidden = torch.stack([self.model.transformer.h[i].output for i in range(12)]).save()
        self.clean_hidden = hidden

    def patch(self, layer, remote=True):
        with self.model.trace(self.corrupt, remote=remote):
            self.model.transformer.h[layer].output[0, -1] = self.clean_hidden[layer, 0, -1]
            top = self.model.lm_head.output[0, -1].argmax().item().save()
        return top

    def sweep(self):
        with self.model.session(remote=True):
            self.run_clean(remote=False)
            tops = list().save()
            for layer in range(12):
                tops.append(self.patch(layer, remote=False))
        return tops


experiment = Patching(LanguageModel("openai-community/gpt2"), "The cat sat on the", "One two three four")
print(experiment.sweep())
""",
    ),
    Case(
        name="a line replayed on your machine reads what a method stores on self in the session",
        before="""\
from nnsight import LanguageModel


class Probe:
    def __init__(self, model):
        self.model = model

    def run(self, prompt):
        with self.model.trace(prompt, remote=True):
            self.last = self.model.lm_head.output.save()

    def sweep(self, prompts):
        for prompt in prompts:
            self.run(prompt)
            print(self.last.shape)
""",
        reason="reads `self.last`, which the session sets on its own copy of `self`",
    ),
    Case(
        name="a helper computes its remote flag inside: no session can take it at the call",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"remote": True}


def top(prompt):
    remote = CONFIG["remote"]
    with model.trace(prompt, remote=remote):
        t = model.lm_head.output.save()
    return t


for p in ["a", "b"]:
    print(top(p))
""",
        reason="the remote flag `top` runs with is computed inside it",
    ),
    Case(
        name="a failure handled per request: the session falls back on the loop as written",
        before="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
    except Exception:
        time.sleep(1)
""",
        after="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
try:
    with model.session(remote=True):
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output.save()
except Exception:  # the session failed: run the code as written, each failure handled on its own
    for prompt in ["a", "b"]:
        try:
            with model.trace(prompt, remote=True):
                out = model.lm_head.output.save()
        except Exception:
            time.sleep(1)
""",
    ),
    Case(
        name="an error record per request: the `try` runs in the session, each failure handled there",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
records = []
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output.save()
        word = model.tokenizer.decode(logits[0, -1].argmax())
        record = {"prompt": prompt, "word": word}
    except Exception as err:
        record = {"prompt": prompt, "error": str(err)}
    records.append(record)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    records = list().save()
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    for prompt in ["a", "b"]:
        try:
            with model.trace(prompt):
                logits = model.lm_head.output.save()
            word = model.tokenizer.decode(logits[0, -1].argmax())
            record = {"prompt": prompt, "word": word}
        except Exception as err:
            record = {"prompt": prompt, "error": str(err)}
        records.append(record)
    try:
        _ndif_log["word"] = word
    except NameError:  # not bound on every path: left unbound, as the loop would leave it
        pass
    _ndif_log["record"] = record
if "word" in _ndif_log:
    word = _ndif_log["word"]
record = _ndif_log["record"]
""",
    ),
    Case(
        name="inputs computed on your machine run before the session, which takes them in turn",
        before="""\
import json
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for name in ["a", "b"]:
    scale = json.loads(json.dumps(len(name)))
    with model.trace(name, remote=True):
        model.transformer.h[0].output[:] *= scale
        out = model.lm_head.output.save()
""",
        after="""\
import json
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
_ndif_items = list(["a", "b"])  # the loop's items, listed once: both loops go over them
_ndif_inputs = []  # what the session needs from your machine, in the order it needs it
for name in _ndif_items:
    scale = json.loads(json.dumps(len(name)))
    _ndif_inputs.append(scale)
with model.session(remote=True):
    _ndif_feed = iter(_ndif_inputs)  # taken in turn where each was computed
    for name in _ndif_items:
        scale = next(_ndif_feed)
        with model.trace(name):
            model.transformer.h[0].output[:] *= scale
            out = model.lm_head.output.save()
""",
    ),
    Case(
        name="results stored into a dict the caller passes in: the replay stores them",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def probe(prompt):
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


def sweep(prompts, results):
    for p in prompts:
        results[p] = probe(p)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def probe(prompt, remote=True):
    with model.trace(prompt, remote=remote):
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


def sweep(prompts, results):
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for p in prompts:
            results_value = probe(p, remote=False)
            _ndif_rows.append((p, results_value))
    for p, results_value in _ndif_rows:
        results[p] = results_value
""",
    ),
    Case(
        name="results appended to a list on `self`: the session computes them, the replay appends",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


class Sweep:
    def __init__(self):
        self.records = []

    def probe(self, prompt):
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top

    def run(self, prompts):
        for p in prompts:
            self.records.append(self.probe(p))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


class Sweep:
    def __init__(self):
        self.records = []

    def probe(self, prompt, remote=True):
        with model.trace(prompt, remote=remote):
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top

    def run(self, prompts):
        with model.session(remote=True):
            _ndif_rows = list().save()  # one record per iteration, replayed after the session
            for p in prompts:
                probe_result = self.probe(p, remote=False)
                _ndif_rows.append(probe_result)
        for probe_result in _ndif_rows:
            self.records.append(probe_result)
""",
    ),
    Case(
        name="an input computed on your machine from a remote result stays a request per iteration",
        before="""\
import json
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "a"
for step in range(3):
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().item().save()
    prompt = json.dumps([prompt, top])
""",
        reason="`prompt` is computed by code that must run on your machine and is also used by the remote part",
    ),
    Case(
        name="a `try` whose local code runs before its remote work",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        print("sending", prompt)
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
    except Exception:
        print("failed")
""",
        reason="`print(\"sending\", prompt)` runs inside a `try` before remote work",
    ),
    Case(
        name="a handler that skips the rest of the iteration, before remote work",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        print(out.shape)
    except Exception:
        continue
    with model.trace(prompt, remote=True):
        more = model.lm_head.output.save()
""",
        reason="may end the iteration early, before remote work that follows it",
    ),
    Case(
        name="a function reading a name the session computes takes it as an argument",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top(prompt, alpha):
    with model.trace(prompt, remote=True):
        model.transformer.h[6].output[0, -1] += alpha * vec
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


with model.trace("I love it", remote=True):
    vec = model.transformer.h[6].output[0, -1].save()
tops = [steered_top("The movie was", alpha) for alpha in (1.0, 2.0, 4.0)]
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top(prompt, alpha, remote=True, *, vec):
    with model.trace(prompt, remote=remote):
        model.transformer.h[6].output[0, -1] += alpha * vec
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


with model.session(remote=True):
    with model.trace("I love it"):
        vec = model.transformer.h[6].output[0, -1].save()
    tops = [steered_top("The movie was", alpha, remote=False, vec=vec) for alpha in (1.0, 2.0, 4.0)].save()
""",
    ),
    Case(
        name="a function the session's functions call reads a name the session computes",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def push(alpha):
    return alpha * vec


def steered_top(prompt, alpha):
    with model.trace(prompt, remote=True):
        model.transformer.h[6].output[0, -1] += push(alpha)
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


for alpha in (1.0, 2.0):
    with model.trace("I love it", remote=True):
        vec = model.transformer.h[6].output[0, -1].save()
    print(steered_top("The movie was", alpha))
""",
        reason="it is called by `steered_top`, not by the session itself",
    ),
    Case(
        name="a module-level name the session computes comes back: it is a result of the script",
        before=_PATCHED_TOP,
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("the cat sat on the"):
        clean = model.transformer.h[1].output.save()
    shift = (clean[0, -1] - clean[0, 0]).save()
    with model.trace("one two three"):
        model.transformer.h[1].output[0, -1] += shift
        top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
""",
    ),
    Case(
        name="a notebook's kernel keeps the module names the session binds",
        notebook=True,
        before=_PATCHED_TOP,
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("the cat sat on the"):
        clean = model.transformer.h[1].output.save()
    shift = (clean[0, -1] - clean[0, 0]).save()
    with model.trace("one two three"):
        model.transformer.h[1].output[0, -1] += shift
        top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
""",
    ),
    Case(
        name="what a function saved and returned is let go when nothing after reads it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def lens(prompt, layer):
    with model.trace(prompt, remote=True):
        logits = model.lm_head(model.transformer.ln_f(model.transformer.h[layer].output)).save()
    return logits


best = []
for layer in range(12):
    logits = lens("The Eiffel Tower is in", layer)
    best.append(logits[0, -1].argmax().item())
print(best)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def lens(prompt, layer, remote=True):
    with model.trace(prompt, remote=remote):
        logits = model.lm_head(model.transformer.ln_f(model.transformer.h[layer].output)).save()
    return logits


with model.session(remote=True):
    best = list().save()
    for layer in range(12):
        logits = lens("The Eiffel Tower is in", layer, remote=False)
        best.append(logits[0, -1].argmax().item())
    logits = None  # nothing after the session reads it: let go here, not downloaded
print(best)
""",
    ),
    Case(
        name="retry loop: the same retry goes around the session",
        before="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(3):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except Exception as err:
            print(f"{prompt}: attempt {attempt} failed: {err}")
            time.sleep(2 ** attempt)
print(len(outs))
""",
        after="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for _ndif_attempt in range(3):  # the requests' retry, now around the whole session
    try:
        with model.session(remote=True):
            outs = list().save()
            for prompt in ["a", "b"]:
                for attempt in range(3):
                    try:
                        with model.trace(prompt):
                            outs.append(model.lm_head.output)
                        break
                    except Exception as err:
                        print(f"{prompt}: attempt {attempt} failed: {err}")
                        time.sleep(2 ** attempt)
        break
    except Exception as err:
        print(f"attempt {_ndif_attempt} of the session failed: {err!r}")
        time.sleep(2 ** _ndif_attempt)
        if _ndif_attempt == 2:
            raise
print(len(outs))
""",
    ),
    Case(
        name="retry counted by a name: it gives up after its last attempt, computed again",
        before="""\
import time
from nnsight import LanguageModel

MAX_ATTEMPTS = 3
model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(MAX_ATTEMPTS):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except ConnectionError:
            time.sleep(2 ** attempt)
print(len(outs))
""",
        after="""\
import time
from nnsight import LanguageModel

MAX_ATTEMPTS = 3
model = LanguageModel("openai-community/gpt2")
for _ndif_attempt in range(MAX_ATTEMPTS):  # the requests' retry, now around the whole session
    try:
        with model.session(remote=True):
            outs = list().save()
            for prompt in ["a", "b"]:
                for attempt in range(MAX_ATTEMPTS):
                    try:
                        with model.trace(prompt):
                            outs.append(model.lm_head.output)
                        break
                    except ConnectionError:
                        time.sleep(2 ** attempt)
        break
    except ConnectionError:
        time.sleep(2 ** _ndif_attempt)
        if _ndif_attempt == MAX_ATTEMPTS - 1:
            raise
print(len(outs))
""",
    ),
    Case(
        name="retry whose last attempt cannot be computed again: left as it is",
        before="""\
import time
from nnsight import LanguageModel

DELAYS = [1, 2, 4]
model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(len(DELAYS)):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except ConnectionError:
            time.sleep(DELAYS[attempt])
print(len(outs))
""",
        reason="around the session it would never give up",
    ),
    Case(
        name="local traces stay local",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    with model.trace(prompt):
        out = model.lm_head.output.save()
""",
    ),
    Case(
        name="progress bar: replayed over the rows after the session",
        before="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in tqdm(["a", "b"]):
    with model.trace(prompt, remote=True):
        outs.append(model.lm_head.output.save())
print(len(outs))
""",
        after="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    outs = list().save()
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            outs.append(model.lm_head.output)
        _ndif_rows.append(None)
for _ndif_row in tqdm(_ndif_rows):
    pass
print(len(outs))
""",
    ),
    Case(
        name="progress bar dropped with --unsafe-fixes",
        unsafe_fixes=True,
        before="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in tqdm(["a", "b"]):
    with model.trace(prompt, remote=True):
        outs.append(model.lm_head.output.save())
print(len(outs))
""",
        after="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    outs = list().save()
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            outs.append(model.lm_head.output)
print(len(outs))
""",
    ),
    Case(
        name="nnterp: a loop of StandardizedTransformer traces that prints per prompt",
        before="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
prompts = ["The Eiffel Tower is in", "The capital of Japan is"]
for prompt in prompts:
    with model.trace(prompt, remote=True):
        resid = model.layers_output[20][:, -1].save()
        probs = model.next_token_probs.save()
    print(prompt, resid.norm().item(), probs[0].argmax().item())
""",
        after="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
prompts = ["The Eiffel Tower is in", "The capital of Japan is"]
with model.session(remote=True):
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in prompts:
        with model.trace(prompt):
            resid = model.layers_output[20][:, -1]
            probs = model.next_token_probs
        _ndif_rows.append({
            "prompt": prompt,
            "resid_norm": resid.norm().item(),
            "probs_argmax": probs[0].argmax().item(),
        })
for _ndif_row in _ndif_rows:
    prompt = _ndif_row["prompt"]
    print(prompt, _ndif_row["resid_norm"], _ndif_row["probs_argmax"])
""",
    ),
    Case(
        name="a library function that sends its own request runs on your machine, after the session",
        before="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=True):
        probs = model.next_token_probs[0].save()
    acts = collect_token_activations_batched(model, [prompt], batch_size=1, layers=[3], remote=True)
""",
        after="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            probs = model.next_token_probs[0].save()
        _ndif_rows.append(prompt)
for prompt in _ndif_rows:
    acts = collect_token_activations_batched(model, [prompt], batch_size=1, layers=[3], remote=True)
""",
    ),
    Case(
        name="a library function that sends its own request, whose result the session needs",
        before="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import get_token_activations

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
for prompt in ["a b", "c d"]:
    acts = get_token_activations(model, [prompt], layers=[3], remote=True)
    with model.trace(prompt, remote=True):
        model.layers_output[3][:, -1] += acts[0]
        probs = model.next_token_probs[0].save()
""",
        reason="`acts` is computed by code that must run on your machine and is also used by the remote part",
    ),
    Case(
        name="a list only the session reads is made there and not downloaded (a function's local)",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top():
    states = []
    for prompt in ["a b", "c d"]:
        with model.trace(prompt, remote=True):
            states.append(model.transformer.h[6].output[0, -1].save())
    mean = torch.stack(states).mean(dim=0)
    with model.trace("e f", remote=True):
        model.transformer.h[6].output[0, -1] += mean
        top = model.lm_head.output[0, -1].argmax().save()
    return top
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top():
    with model.session(remote=True):
        states = []
        for prompt in ["a b", "c d"]:
            with model.trace(prompt):
                states.append(model.transformer.h[6].output[0, -1])
        mean = torch.stack(states).mean(dim=0)
        with model.trace("e f"):
            model.transformer.h[6].output[0, -1] += mean
            top = model.lm_head.output[0, -1].argmax().save()
    return top
""",
    ),
    Case(
        name="a module-level list the session fills comes back: it is a result of the script",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
states = []
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=True):
        states.append(model.transformer.h[6].output[0, -1].save())
mean = torch.stack(states).mean(dim=0)
with model.trace("e f", remote=True):
    model.transformer.h[6].output[0, -1] += mean
    top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    states = list().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            states.append(model.transformer.h[6].output[0, -1])
    mean = torch.stack(states).mean(dim=0).save()
    with model.trace("e f"):
        model.transformer.h[6].output[0, -1] += mean
        top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
    ),
)


def _replay_reads(split: Split, stores: list[str], every_line: bool = False) -> str:
    """Why the replay cannot run: a line of it reads an attribute of `self` that the
    session sets, which your `self` gets back only at the replay's end (or, for one
    that stays on the server, never)."""
    if not stores:
        return ""
    # (the last line brings the attributes that come back)
    for stmt in split.replay if every_line else split.replay[:-1]:
        for node in find_nodes(stmt, lambda n: type(n) is cst.Attribute):
            if code_of(node) in stores:
                return (
                    f"a line that must run on your machine reads `{code_of(node)}`, which the session sets "
                    "on its own copy of `self`"
                )
    return ""




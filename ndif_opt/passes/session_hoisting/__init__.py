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
nothing after the session reads, is let go at its end (`logits = None`), not downloaded.
A name only its traces bind, to an object nothing saves, that the code after reads keeps
your machine's value: the session ends by unbinding it (`h = None; del h`), since nnsight
sends back every name whose value's id it saved, and a saved value freed earlier can leave
its id to it. A same-file function the session calls that reads
a module name the session computes gets it as an argument (`def f(x, *, vec)`), when
every call of it in the file is one the session makes after binding the name. It is not applied (and says why) when the code that must stay
on your machine feeds the remote part, when a record could not hold what a line would
have seen, when the moved code walks an iterator of your machine (`it = iter(xs)`, `pairs =
zip(xs, ys)`: the server would advance a copy of it, and yours would stay where it was),
when the moved code declares ``global`` or calls a helper that cannot run in
a session (a loop or a comprehension of such calls gets one finding that names it), or when a
container the session would make is also filled by a remote block no session takes (a
container is fixed in every block that fills it or in none: fixed in part, a script that
fails on an empty container would go on with part of it). A loop whose own remote work no session can take — traces of two models (a
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

import dataclasses

import functools

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote, module_import_name
from ndif_opt.analysis.names import COMPREHENSIONS, collect, collect_all, fresh_name, local_to, target_names
from ndif_opt.analysis.regions import client_objects_filled, reads_after, requests_in, self_attributes_read_after
from ndif_opt.analysis.remote_functions import (
    CallWithRemoteOff,
    RemoteHelper,
    call_multiplicity,
    helper_calls,
    remote_helpers,
)
from ndif_opt.analysis.retries import PortableRetry, code_changing, portable_retry, retry_guard
from ndif_opt.cost_model import RegionRequests, explain
from ndif_opt.passes.base import Context, Pass
from ndif_opt.passes.session_hoisting.cases import CASES
from ndif_opt.passes.session_hoisting.definitions import definitions_in_the_way
from ndif_opt.passes.session_hoisting.messages import (
    clock_note,
    drop_nested_repeats,
    first_line,
    header_rebound,
    hoisted_message,
    let_go_note,
    name_the_unseen,
    not_hoisted,
    per_call,
    problem_words,
    request_claim,
    stopped_by_a_local_trace,
    stopped_by_a_session,
    stopped_by_kwargs,
    stopped_by_mixing,
    unsafe_note,
    unsafe_reason,
)
from ndif_opt.passes.session_hoisting.plan import (
    containers_left_on_server,
    globals_the_session_would_hide,
    helper_argument_problem,
    objects_helpers_fill,
    names_passed_between_invokes,
    liveness,
    lost_reason,
    names_released,
    names_unbound,
    needed_after,
    replay_reads,
    saved_in_region,
    unmovable,
    unreturned_names,
)
from ndif_opt.passes.session_hoisting.region import (
    Kind,
    Region,
    Role,
    UNSAFE_KINDS,
    any_blocking,
    deferrable_only,
    failure_handled_outside,
    fewer_than_two_requests,
    inside_planned,
    is_unsafe_only,
    iteration_problems,
    may_call,
    module_code,
    nested_in_planned_sessions,
    outer_blocks,
    suites_outermost_first,
    window_edges_in,
)
from ndif_opt.passes.session_hoisting.rewrite import (
    MoveEdits,
    UnwrapProgress,
    as_the_session_calls,
    bind_returned_value,
    made_in_session,
    move_definitions,
    release_statement,
    returned_statement,
    unbind_statement,
    saving,
)
from ndif_opt.passes.session_hoisting.split import split_region
from ndif_opt.passes.session_hoisting.split_items import Refused, names_in
from ndif_opt.syntax.rewrite import (
    DropElementSaves,
    StripRemote,
    SuitePlan,
    code_of,
    saved_container,
    session_statement,
    with_fallback,
    with_module_import,
)
from ndif_opt.syntax.walk import find_nodes, transform
from ndif_opt.types import Safety, Status
from ndif_opt.wording import counted_with_loops, symbols


_NOTHING = RegionRequests(0, 1, uncalled="")


def _parts_made(finding, sessions: int, at: cst.CSTNode):
    """A region's refusal once parts of it became sessions, placed at ``at``, where they
    part: the parts' findings count their requests; this one says what keeps them apart."""
    made = "one session of a part of it" if sessions == 1 else f"{sessions} sessions of its parts"
    return dataclasses.replace(finding, node=at, message=f"{finding.message}; ndif-opt made {made}")


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
    cases = CASES

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        mark = len(context.findings)
        self.helpers = remote_helpers(facts, context.server)
        # containers a session would make while a remote block no session takes fills them
        # too: name -> that block (the sessions that would make them are not planned)
        self.partly_filled: dict[str, Block] = {}
        names = (set(context.unreturned), set(context.introduced))
        while True:
            plan, claimed = SuitePlan(), set()
            self.rewritten_helpers: dict[str, RemoteHelper] = {}
            self.passed_functions: dict[str, tuple[str, ...]] = {}  # function -> module names it now takes
            self.needs_nnsight_import = False
            # loops their own remote work keeps from a session (two models, say): id -> (loop, why)
            self.stopped: dict[int, tuple[cst.CSTNode, tuple[str, str]]] = {}
            self.planned: list[Region] = []  # the regions this run makes sessions of
            # runs of remote work no one region holds: (suite, kinds, member indexes)
            self.separated: list[tuple] = []
            self.parts_apart: list = []  # refusals of regions whose parts became sessions
            for suite in suites_outermost_first(facts):
                if inside_planned(facts, suite, claimed):
                    continue
                for region in self._regions(suite, facts, context):
                    if self._in_a_replaced_function(region, facts):
                        continue
                    self._plan_or_parts(region, facts, context, plan, claimed)
            partly = self._partly_filled(facts)
            if not partly:
                break
            # plan again, without the sessions that would fix a container only in part
            self.partly_filled.update(partly)
            del context.findings[mark:]
            context.unreturned.clear()
            context.unreturned.update(names[0])
            context.introduced.clear()
            context.introduced.update(names[1])
        self._drop_plans_in_replaced_functions(facts, context, plan, mark)
        self._drop_refusals_a_session_answers(facts, context, mark)
        context.findings.extend(self.parts_apart)
        self._name_separated_runs(facts, context, mark)
        self._name_the_stopped_loops(facts, context, mark)
        drop_nested_repeats(context.findings, mark)
        name_the_unseen(facts, context, self.helpers, self.planned)
        for name in dict.fromkeys([*self.rewritten_helpers, *self.passed_functions]):
            helper = self._helper_to_rewrite(name)
            passed = self.passed_functions.get(name, ())
            if helper is None and not passed:
                continue
            func = helper.func if helper is not None else facts.functions[name]
            info = facts.stmt(func)
            plan.replace(info.suite, info.index, info.index + 1,
                         lambda _s, h=helper, f=func, p=passed: [as_the_session_calls(h, f, p)])
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
        why = nested_in_planned_sessions(region, facts, claimed, frozenset(self.helpers))
        if why:
            # one session cannot hold another's hard-coded one
            context.skipped(region.statements[0], not_hoisted(region, facts, self._counted(region, facts, context)),
                            why, through=region.statements[-1])
            return False
        if self._plan(region, facts, context, plan):
            claimed.update(id(s) for s in region.statements)
            self.planned.append(region)
            return True
        span = (region.start, region.end)
        parts = []
        if any(deferrable_only(p) for p in region.unsafe):
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
        else:  # what kept the whole from one session still stands: said where the parts part,
            # at the first statement no part took (the parts' own findings start at theirs)
            taken = {id(stmt) for part, went in zip(parts, moved) if went for stmt in part.statements}
            between = next((stmt for stmt in region.statements if id(stmt) not in taken), None)
            if between is not None:  # (given after the refusals a session answers are dropped)
                self.parts_apart.extend(_parts_made(finding, sum(moved), between) for finding in whole
                                        if finding.status is Status.SKIPPED and finding.node is region.statements[0])
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

    def _partly_filled(self, facts: Facts) -> dict[str, Block]:
        """The containers a planned session makes (or takes in and saves) that a remote
        block outside every planned session fills too, name -> that block: on NDIF that
        block fills the server's copy, so the session would bring the container back
        with its own values and without that block's — a script that fails visibly on
        an empty container (or shows it empty) would go on with part of it. Fixed in
        every block that fills it, or in none (accumulator-relocation's rule too)."""
        made = [(acc.name, region) for region in self.planned for acc in region.accumulators]
        if not made:
            return {}
        inside = {id(stmt) for region in self.planned for stmt in region.statements}
        found: dict[str, Block] = {}
        for block in facts.blocks:
            if block.parent is not None or block.remote.state is Remote.NO:
                continue
            if id(block.node) in inside or any(id(node) in inside for node in block.stmt.ancestors):
                continue
            filled = client_objects_filled(block, facts)
            for name, region in made:
                function = facts.stmt(region.statements[0]).function
                if name in filled and name not in self.partly_filled and name not in found and \
                        local_to(name, function) is local_to(name, block.stmt.function):
                    found[name] = block
        return found

    def _drop_plans_in_replaced_functions(self, facts: Facts, context: Context, plan: SuitePlan, mark: int) -> None:
        """A function this run rewrites whole from its original (a flag parameter added for
        a session that calls it, its calls' module names passed) keeps none of the plans
        made inside it: a region planned there before the session that calls it was (the
        suites are met in no order of calls) goes, with its finding, as
        :meth:`_in_a_replaced_function` keeps out those met after. The next round finds it
        again in the rewritten function, where the calling session counts its requests."""
        replaced = [f for name in dict.fromkeys([*self.rewritten_helpers, *self.passed_functions])
                    if (f := self._replaced_function(name, facts)) is not None]
        if not replaced:
            return
        inside = {id(n) for func in replaced for n in find_nodes(func.body, lambda n: True)}
        for suite_id in [i for i in plan.edits if i in inside]:
            del plan.edits[suite_id]
        context.findings[mark:] = [f for f in context.findings[mark:]
                                   if not (f.status is Status.APPLIED and id(f.node) in inside)]

    def _drop_refusals_a_session_answers(self, facts: Facts, context: Context, mark: int) -> None:
        """A run of statements that runs once (no loop among them) refused as a whole, whose
        remote work all lies in one region this run makes a session of (the loop inside an
        `if __name__ == "__main__":`), sends one request once that is applied: its refusal
        says nothing left to do, and goes. (A loop keeps its: it would open the session in
        each iteration.)"""
        if not self.planned:
            return
        refused = [f for f in context.findings[mark:] if f.status is Status.SKIPPED and f.reason]
        if not refused:
            return
        planned = [{id(n) for stmt in region.statements for n in find_nodes(stmt, lambda n: True)}
                   for region in self.planned]
        answered = set()
        for finding in refused:
            info = facts.statements.get(id(finding.node))
            if info is None:
                continue
            end = info.suite.body.index(finding.through) + 1 if finding.through in info.suite.body else info.index + 1
            statements = list(info.suite.body[info.index:end])
            if any(find_nodes(stmt, lambda n: type(n) in (cst.For, cst.While)) and
                   not self._loops_inside_planned(stmt, planned) for stmt in statements):
                continue
            work = [id(b.node) for b in facts.blocks if b.parent is None and b.remote.state is not Remote.NO
                    and any(b.node is stmt or stmt in b.stmt.ancestors for stmt in statements)]
            work += [id(call) for stmt in statements for call, _ in helper_calls(stmt, self.helpers)]
            if work and any(all(w in nodes for w in work) for nodes in planned):
                answered.add(id(finding))
        context.findings[mark:] = [f for f in context.findings[mark:] if id(f) not in answered]

    @staticmethod
    def _loops_inside_planned(stmt: cst.CSTNode, planned: list[set[int]]) -> bool:
        """Is every loop in ``stmt`` inside a region this run plans (then it runs in that
        session, whatever its iterations)?"""
        return all(any(id(loop) in nodes for nodes in planned)
                   for loop in find_nodes(stmt, lambda n: type(n) in (cst.For, cst.While)))

    def _replaced_function(self, name: str, facts: Facts) -> cst.FunctionDef | None:
        """The function the run rewrites whole for ``name``, if it does."""
        helper = self._helper_to_rewrite(name)
        if helper is None and name not in self.passed_functions:
            return None
        return helper.func if helper is not None else facts.functions.get(name)

    def _in_a_replaced_function(self, region: Region, facts: Facts) -> bool:
        """Is the region in a function whose calls a session of this run already takes, and
        which the run rewrites whole from its original (a flag parameter added, its calls'
        module names passed)? A plan inside it would be lost with its body, and its finding
        would claim a session that is not written: the session that calls it counts it."""
        function = facts.stmt(region.statements[0]).function
        if function is None:
            return False
        name = function.name.value
        replaced = self._helper_to_rewrite(name) is not None or name in self.passed_functions
        return replaced and function is facts.functions.get(name)

    def _helper_to_rewrite(self, name: str) -> RemoteHelper | None:
        """The helper a session of this run calls that must be rewritten for it (it takes no
        flag, or has grad-mode decorators); None when it is called as it is."""
        helper = self.rewritten_helpers.get(name)
        if helper is not None and helper.flag_param is not None and not helper.context_decorators:
            return None  # called as it is: it takes the flag already
        return helper

    def _hoisted_caller(self, region: Region, facts: Facts, context: Context) -> str:
        """The function holding the region, when a session this pass opened around its
        calls already counts its requests ("" otherwise: the region's own claim stands)."""
        function = facts.stmt(region.statements[0]).function
        name = function.name.value if function is not None else ""
        if not name or name in self.rewritten_helpers:
            return name
        # the walk met it only inside requests (its every call is made with remote=False in
        # a session, one an earlier round opened): that session counts its requests
        found = explain(facts, context.options)
        inside_only = found.region(region.statements) is None and found.runs_of(region.statements[0]) is not None
        return name if inside_only else ""

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
            message = f"this loop sends {sent}{what}{per_call(requests)}" + (f" ({meaning})" if meaning else "")
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
        if lazy and not self.helpers and fewer_than_two_requests(suite, facts):
            return []  # no region of it could send two: none is worth a session
        edges = window_edges_in(suite, facts, context.run.window_edges)
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
            elif kind.role is Role.REMOTE and any_blocking(kind.problems, context) and not (
                wide and all(deferrable_only(p) for p in kind.problems)
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
        if span is None and wide:
            self._note_separated_run(suite, kinds, regions)
        return [r for r in regions if self._worth_a_session(r, facts, context)]

    def _note_separated_run(self, suite, kinds: list[Kind | None], regions: list[Region]) -> None:
        """Remember the suite's statements with remote work when no one region holds them
        all: barriers keep them apart (see :meth:`_name_separated_runs`)."""
        members = [i for i, kind in enumerate(kinds)
                   if kind is not None and (kind.role is Role.REMOTE or kind.sends)]
        # (one statement is a run when it calls helpers no session can take more than once:
        # `a, b = f(x), f(y)` sends two requests, and no region holds it; one call, `main()`,
        # is explained where its requests are, in the function)
        alone = (len(members) == 1 and kinds[members[0]].role is Role.BARRIER
                 and len(helper_calls(suite.body[members[0]], self.helpers)) > 1)
        if not (len(members) > 1 or alone) or any(r.start <= members[0] and members[-1] < r.end for r in regions):
            return
        self.separated.append((suite, kinds, members))

    def _name_separated_runs(self, facts: Facts, context: Context, mark: int) -> None:
        """One finding for each run of statements with remote work in one suite that no
        session holds whole and that still sends two requests or more: the first barrier
        that keeps two of its statements apart, named (the pass made sessions of its
        parts, or of none). A run with a finding of its own on one of its statements
        keeps that one."""
        from ndif_opt.analysis.regions import UNKNOWN_TRIPS

        if self.planned or not self.separated:
            return  # what its sessions leave is counted in the round after they are written
        told = {id(f.node) for f in context.findings[mark:] if f.status is not Status.APPLIED}
        told |= set(self.stopped)  # loops that get a finding of their own
        found = explain(facts, context.options)
        for suite, kinds, members in self.separated:
            statements = [suite.body[i] for i in members]
            if inside_planned(facts, suite, set()) or any(
                    find_nodes(stmt, lambda n: id(n) in told) for stmt in statements):
                continue  # (a finding on one of its statements, or inside one, says it)
            # (a member the walk sees send nothing, a helper that returns before its trace,
            # say, keeps nothing apart)
            sending = [i for i in members if (found.region([suite.body[i]]) or _NOTHING).per_run(UNKNOWN_TRIPS) > 0]
            if not sending or (len(sending) == 1 and kinds[sending[0]].role is not Role.BARRIER):
                continue
            heads = [kinds[i] for i in sending]
            model = next((k.model for k in heads if k.model), "")  # ("": no one model, or several)
            region = Region(suite, sending[0], sending[-1] + 1, model, None, [b for k in heads for b in k.blocks])
            requests = self._counted(region, facts, context)
            if requests.per_run(UNKNOWN_TRIPS) < 2:
                continue
            statements = [suite.body[i] for i in sending]
            why = self._what_keeps_apart(suite, kinds, sending, context)
            if not why:
                continue
            context.skipped(statements[0], not_hoisted(region, facts, requests), why, through=statements[-1])

    def _what_keeps_apart(self, suite, kinds: list[Kind | None], members: list[int], context: Context) -> str:
        """Why the first two neighbouring members that no region holds together stand
        apart: a member's own barrier, a statement between them that must stay on your
        machine, or a member's problem that keeps it alone ("" when only sessions do)."""
        for first, second in zip(members, members[1:] or members):
            for index in (first, second, *range(first + 1, second)):
                kind = kinds[index]
                if kind is None:
                    kind = kinds[index] = self._plain_kind(suite.body[index], context)
                if kind.role is Role.BARRIER and kind.why and kind.why != "already a session":
                    return kind.why if kind.why.startswith("not ") else f"not hoisted: {kind.why}"
                if kind.role is Role.REMOTE and any_blocking(kind.problems, context):
                    return f"not hoisted: {kind.problems[0].message}"
        return ""

    def _kind(self, stmt, facts: Facts, context: Context, lazy: bool = False, wide: bool = True) -> Kind | None:
        """How the statement relates to remote work; with ``lazy``, None for code
        without any (see :meth:`_plain_kind`)."""
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            # between remote statements it moves along: before the session opens, it moves
            # out of the region's way (definitions.py), or the region is refused
            return Kind(Role.NEUTRAL)
        outer = outer_blocks(facts, stmt)
        calls = helper_calls(stmt, self.helpers) if may_call(stmt, self.helpers) else []
        if calls and outer:
            return Kind(Role.BARRIER, why="mixes remote blocks and calls of functions that run them", sends=True)
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
            return Kind(Role.BARRIER, why="already a session", stops=users and stopped_by_a_session(sessions[0]),
                        model=sessions[0].model, sends=True)
        local = [b for b in outer if b.remote.state is Remote.NO]
        if local:
            return Kind(Role.BARRIER, why="runs a local trace",
                        stops=loop and stopped_by_a_local_trace(local[0], outer))
        passed = [b for b in outer if b.remote.via_kwargs]
        if passed:
            return Kind(Role.BARRIER, why="passes `remote=` inside `**kwargs`, which cannot move to a session",
                        stops=loop and stopped_by_kwargs(passed[0]), model=first.model, sends=True)
        flag_codes = {b.remote.code for b in outer}
        models = {b.model for b in outer}
        if len(flag_codes) != 1 or len(models) != 1:
            sends = [(b.model, b.remote.code or "False", first_line(b.node)) for b in outer]
            return Kind(Role.BARRIER, why="mixes models or remote flags", stops=loop and stopped_by_mixing(sends),
                        sends=True)
        problems = context.server.problems(stmt, skip=tuple(b.node.body for b in outer))
        problems += iteration_problems(stmt, facts)
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
        if wide and problems and all(deferrable_only(p) for p in problems):
            return Kind(Role.NEUTRAL, problems=problems)
        if any_blocking(problems, context):
            return Kind(Role.BARRIER, why=problems[0].message)
        return Kind(Role.NEUTRAL, problems=[p for p in problems if p.kind in UNSAFE_KINDS])

    def _helper_kind(self, stmt, calls, facts: Facts, context: Context) -> Kind:
        """A statement whose remote work happens in same-file functions it calls."""
        flags, models = set(), set()
        sends = []  # (model, flag, the call's code) of each call
        for call, helper in calls:
            construct = repeating_construct(stmt, call)
            if helper.problems:
                if construct is not None:
                    node, word = construct
                    context.skipped(
                        node,
                        f"this {word} calls `{helper.spelled(call)}`, which sends a remote request each time; "
                        f"one `{helper.at_call(helper.model, call)}.session(remote=...)` would send one",
                        f"not hoisted: {helper.problems[0]}",
                    )
                return Kind(Role.BARRIER, why=helper.problems[0], sends=True,
                            model=helper.call_model(call) or "")
            flag = helper.call_flag(call)
            if flag is None:
                why = f"the remote flag `{helper.spelled(call)}` runs with is computed inside it or not known here"
                if construct is not None:
                    node, word = construct
                    context.skipped(
                        node,
                        f"this {word} calls `{helper.spelled(call)}`, which sends a remote request each time; "
                        f"one `{helper.at_call(helper.model, call)}.session(remote=...)` would send one",
                        f"not hoisted: {why}, so a session around the calls cannot take the same flag",
                    )
                return Kind(Role.BARRIER, why=why, sends=True, model=helper.call_model(call) or "")
            flags.add(flag)
            model = helper.call_model(call)
            if model is None:
                return Kind(Role.BARRIER, why=f"the model `{helper.spelled(call)}` traces is not a plain name at this call")
            models.add(model)
            sends.append((model, flag, code_of(call)))
        if len(flags) != 1 or len(models) != 1:
            loop = isinstance(stmt, (cst.For, cst.While))
            return Kind(Role.BARRIER, why="calls functions with different models or remote flags",
                        stops=loop and stopped_by_mixing(sends), sends=True)
        flag_code = flags.pop()
        if flag_code == "False":
            return Kind(Role.BARRIER, why="runs its traces locally")
        problems = context.server.problems(stmt) + iteration_problems(stmt, facts)
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
        if not context.allows(anchor, not_hoisted(region, facts, self._counted(region, facts, context))):
            return False
        region.kernel_keeps_names = context.options.notebook and not facts.stmt(anchor).ancestors
        changing = header_rebound(region)
        if changing:
            context.skipped(anchor, not_hoisted(region, facts, self._counted(region, facts, context)), changing,
                            through=region.statements[-1])
            return False
        definitions = [] if context.rewrites_refused else definitions_in_the_way(
            region.statements, module_code=module_code(region, facts))
        if definitions:
            # out of the way first: the region becomes a session in the pipeline's next round
            move_definitions(region, definitions, context, plan)
            return True
        refusal = ""
        if region.unsafe and all(deferrable_only(p) for p in region.unsafe):
            # code that must stay on your machine: split it off and replay it afterwards
            refusal = self._split(region, facts, context)
            if not refusal:
                return self._plan_checked(region, facts, context, plan)
            region.split_refusal = refusal
        blocking = [p for p in region.unsafe if not is_unsafe_only(p)]
        returned = returned_statement(region, facts.stmt(anchor).function)
        if returned is not None and not context.rewrites_refused:
            # the value first: the region becomes a session in the pipeline's next round
            name = fresh_name("result", self._taken(facts) | context.run.reserved_names)
            bind_returned_value(region, returned, name, context, plan)
            return True
        if blocking:
            context.skipped(anchor, not_hoisted(region, facts, self._counted(region, facts, context)),
                            refusal or problem_words(blocking[0]), through=region.statements[-1])
            return False
        return self._plan_checked(region, facts, context, plan)

    def _split(self, region: Region, facts: Facts, context: Context, carry=()) -> str:
        """Split the region into its session and a replay on the client; the reason
        when it cannot be."""
        taken = self._taken(facts)

        def remote_work(stmt):
            outer = outer_blocks(facts, stmt)
            remote = bool(outer) or bool(may_call(stmt, self.helpers) and helper_calls(stmt, self.helpers))
            return remote, tuple(b.node.body for b in outer)

        try:
            later = set(reads_after(facts, region.suite, region.end))
            if region.kernel_keeps_names:  # a notebook's kernel keeps every module name for cells to come
                later |= set(collect_all(region.statements).binds)
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
        module_names = facts.once(_module_binds)
        attempt = fresh_name("_ndif_attempt", self._taken(facts))
        # what may change while the session runs: the retry gives up on its last attempt,
        # computed again after the session failed
        functions = facts.once(_all_functions)
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
        return facts.once(_names)

    def _plan_checked(self, region: Region, facts: Facts, context: Context, plan: SuitePlan) -> bool:
        """Plan a region whose code may all move (its client part, if any, split off)."""
        anchor = region.statements[0]
        reason, accumulators, lost = liveness(region, facts)
        stuck = unmovable(region, facts) if reason else []
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
                reason, accumulators, lost = liveness(region, facts)
        # what the methods it calls store on `self` comes back to your `self` after it,
        # unless no code can read it after the session (then it stays there)
        # (calls on an instance: helper_argument_problem refuses a store on it)
        on_self = [(call, h) for call, h in region.helper_calls if h.bound and h.receiver(call) is None]
        attrs = sorted({a for _, h in on_self for a in h.self_stores})
        stores = [f"self.{a}" for a in attrs]
        moved = frozenset(h.func.name.value for _, h in on_self)
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
                reason = replay_reads(region.split, kept, every_line=False) or \
                    replay_reads(region.split, left, every_line=True)
            if not reason:
                reason, accumulators, lost = liveness(region, facts)
                if lost:
                    reason = lost_reason(lost[0])
        region.accumulators = accumulators
        partly = next((name for name in (a.name for a in accumulators) if name in self.partly_filled), None)
        if not reason and partly is not None:
            other = first_line(self.partly_filled[partly].node)
            reason = (f"`{partly}` is also filled inside `{other}`, a remote block no session takes (on NDIF it "
                      f"fills the server's copy): made in this session, `{partly}` would come back holding what the "
                      "session fills and not what that block fills, where the script as written leaves it empty on "
                      "your machine; put that block in the same loop or run (in a notebook, the same cell) to fix "
                      "both")
        if not reason and region.helper_calls:
            reason = helper_argument_problem(region, facts) or objects_helpers_fill(region, facts)
        if not reason:
            reason = globals_the_session_would_hide(region, facts) or names_passed_between_invokes(region, facts)
        if not reason:
            retry = self._retry(region, facts)
            if isinstance(retry, str):
                reason = retry
            else:
                region.retry = retry
        if not reason:
            region.handled_by = failure_handled_outside(region, facts)
            own_try = region.split is not None and region.split.fallback
            if region.handled_by and region.retry is not None:
                reason = (f"{region.handled_by} handles a failure of its code: a session would fall back on the "
                          "code as written should it fail, which its retry would not go around")
            elif (region.handled_by or own_try) and region.split is not None and region.split.prelude:
                # (the code as written takes its values again: `next(it)` twice, a generator drawn twice)
                reason = (f"{region.handled_by or 'its `try`'} handles a failure of its code: a session would fall "
                          "back on the code as written should it fail, which would compute again what the "
                          "session took from your machine before it")
        if reason:
            context.skipped(anchor, not_hoisted(region, facts, self._counted(region, facts, context)), reason,
                            through=region.statements[-1])
            return False
        unsafe = [p for p in region.unsafe if is_unsafe_only(p)]
        if region.split is not None:  # what must stay on the client is replayed, bars only dropped
            unsafe = [p for p in unsafe if p.kind == "progress"] if region.split.dropped_bars else []
        if unsafe and not context.options.unsafe_fixes:
            context.needs_unsafe(anchor, not_hoisted(region, facts, self._counted(region, facts, context)),
                                 unsafe_reason(unsafe[0], region.split_refusal), through=region.statements[-1])
            return False
        if context.rewrites_refused:  # (pre-0.5 code: it would be hoisted, but not here)
            context.skipped(anchor, not_hoisted(region, facts, self._counted(region, facts, context)),
                            context.rewrites_refused, through=region.statements[-1])
            return False
        # what the code after the session may read, asked of both once at most
        needed = functools.cache(lambda: needed_after(region, facts))
        region.released = names_released(region, accumulators, needed)
        region.unbound = names_unbound(region, accumulators, needed)
        region.left_on_server = containers_left_on_server(region, accumulators, needed)
        self._rewrite(region, accumulators, facts, plan, context)
        let_go = unreturned_names(region, facts, accumulators) | region.left_on_server
        if region.retry is not None:
            context.introduced.add(region.retry.attempt)  # the retry loop's own counter
        if region.split is not None:
            context.introduced |= region.split.record_names
            # a value whose parts the records bring home stays on the server itself
            let_go |= region.split.unsaved - set(collect_all(region.split.replay).binds)
        context.unreturned |= let_go
        safety = Safety.UNSAFE if unsafe else Safety.SAFE
        counted = self._counted(region, facts, context)
        caller = self._hoisted_caller(region, facts, context)
        message = hoisted_message(region, facts, accumulators, counted, caller) + unsafe_note(unsafe) + \
            clock_note(region, facts)
        context.applied(anchor, message + let_go_note(region, facts, let_go), safety,
                        evidence=f"{region.model}.session(", requests=None if caller else request_claim(counted))
        return True

    def _rewrite(self, region: Region, accumulators, facts, plan: SuitePlan, context) -> None:
        if region.split is not None:
            # what the session saves comes back by itself: the replay reads it, no record
            region.split.drop_records(saved_in_region(region) | set(region.saved_here.values()))
        names = {a.name for a in accumulators}
        strip = StripRemote([b.node for b in region.blocks])
        calls_off = CallWithRemoteOff(region.helper_calls)
        for _call, helper in region.helper_calls:
            self.rewritten_helpers[helper.name] = helper
        self.passed_functions.update(region.passed_functions)
        drop = DropElementSaves(names, rebinds=region.split.unsaved if region.split is not None else frozenset())
        unwrap = UnwrapProgress(facts) if context.options.unsafe_fixes else None

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
                    stmt = saving(stmt)
                moved.append(transform(stmt, MoveEdits(stmt, strip, calls_off, drop, unwrap, region.passed_calls)))
                if header:  # a section's header, from the replayed line above its remote work
                    moved[-1] = moved[-1].with_changes(leading_lines=[*header, *moved[-1].leading_lines])
            leading = first_leading
            for index, stmt in enumerate(moved):
                if stmt.leading_lines is leading or (index == 0 and stmt.leading_lines):
                    # (most have none: no node rebuilt for nothing)
                    moved[index] = stmt.with_changes(leading_lines=[])
                    break
            created = [made_in_session(a, nnsight_name, a.name in region.left_on_server) for a in before]
            split = region.split
            # the code as written, should the session fail: a `try` of the region, or one
            # around it, handles each failure where the script means it to
            fallback = (split is not None and split.fallback) or bool(region.handled_by)
            prelude = list(split.prelude) if split is not None else []
            if prelude:
                prelude[0] = prelude[0].with_changes(leading_lines=leading)
                leading = ()
            released = [release_statement(region.released)] if region.released else []
            released += [unbind_statement(region.unbound)] if region.unbound else []
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
                replay = split.replay if split is not None else ()
                return [*prelude, with_fallback(session, as_written, replay, leading)]
            return [*prelude, session, *(split.replay if split is not None else ())]

        nnsight_module = module_import_name(facts, "nnsight")
        nnsight_name = nnsight_module or "nnsight"
        if not nnsight_module and any(a.kind == "carried" for a in before):
            self.needs_nnsight_import = True
        plan.replace(region.suite, region.start, region.end, build)
        for acc in before:
            if acc.kind != "carried":
                plan.remove(region.suite, acc.index)


def repeating_construct(stmt: cst.BaseStatement, call: cst.Call) -> tuple[cst.CSTNode, str] | None:
    """What repeats ``call`` in ``stmt``, to name it in a refusal: the loop ``stmt`` is
    (`for`, `while`), or else the outermost comprehension in ``stmt`` that holds the call
    (`[f(x) for x in xs]`, `sum(f(x) for x in xs)`); None when the statement makes the call
    once. A loop or a comprehension of calls the pass refuses is left with this finding."""
    if isinstance(stmt, (cst.For, cst.While)):
        return stmt, "loop"
    for comprehension in find_nodes(stmt, lambda n: isinstance(n, COMPREHENSIONS)):
        if find_nodes(comprehension, lambda n: n is call):
            return comprehension, "comprehension"
    return None


def _module_binds(facts: Facts) -> set[str]:
    """The names the module binds anywhere (once per version of the tree; shared)."""
    return set(collect(facts.module).binds)


def _all_functions(facts: Facts) -> list[cst.FunctionDef]:
    """Every function of the module, nested ones too (once per version of the tree; shared)."""
    return find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef)


def _names(facts: Facts) -> set[str]:
    """Every name the module uses (once per version of the tree; shared)."""
    return names_in(facts.module)

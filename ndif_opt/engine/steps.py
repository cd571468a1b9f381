"""The steps the pipeline's loop runs around each pass's turn (engine/rounds.py), as a table.

``STEPS`` declares them in order; a run makes one of each (``Step(run, earlier)``: its own
state, for one run of one module) and calls, at each point of a turn, the steps that have
something to do there, in the table's order (the points: engine/rounds.py). A step that is
not in the table does not happen: there is no other place where the pipeline checks,
migrates, suppresses, lowers or counts.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import ClassVar

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.legacy_api import PRE_05, PRE_05_MESSAGE, legacy_summary
from ndif_opt.analysis.regions import client_objects_filled_remotely
from ndif_opt.analysis.releases import NNSIGHT_06, unbound_on_server
from ndif_opt.cost_model import assumptions, explain
from ndif_opt.engine.finding_edits import LineOrigins
from ndif_opt.engine.release_lowering import lower_for_06
from ndif_opt.engine.rounds import Outcome, Run, Turn, Version, analyze_version, internal_error, locate
from ndif_opt.engine.suppression import Suppressions
from ndif_opt.passes import Context, Pass
from ndif_opt.syntax.rewrite import imports_module, without_unused_import
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.types import Cost, Count, Finding, PassCost, Range, Status, default_names, grows, loops_in
from ndif_opt.wording import count_text


class Step:
    """One thing the pipeline does around every pass's turn, with its own state. Each method
    is a point of the turn (engine/rounds.py); a step defines those it acts at."""

    name: ClassVar[str]

    def __init__(self, run: Run, earlier: Step | None) -> None:
        """``earlier``: this step of the run before, when the run is done again. (A step
        keeps no reference to the run: that would be a cycle for the collector to free.)"""

    def answer(self, turn: Turn) -> list[Finding] | None:
        """The pass's findings of this round without running it, or None: it runs."""
        return None

    def prepare(self, turn: Turn) -> None:
        """Before the pass runs: what its context (``turn.context``) holds from this step."""

    def failed(self, turn: Turn, failure: Finding) -> None:
        """The pass raised: ``failure`` is its finding, the code stays as it was."""

    def amend(self, turn: Turn) -> None:
        """After the pass ran: its version (``turn.module``) and findings (``turn.located``)
        changed before the run takes them."""

    def taken(self, turn: Turn) -> None:
        """After the run took the turn: ``turn.reported``, ``turn.changed``, the new version."""

    def again(self, run: Run) -> bool:
        """Once the rounds are over: must the whole run be done again?"""
        return False

    def finish(self, run: Run, outcome: Outcome) -> None:
        """Once the rounds are over: this step's part of the result."""


class Checks(Step):
    """A check (``Pass.checks_as_written``) runs once, on the code as written: its findings
    stand for the whole run, whatever later passes rewrite."""

    name = "checks"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.checked: dict[str, list[Finding]] = {}

    def answer(self, turn: Turn) -> list[Finding] | None:
        if turn.pass_.checks_as_written:
            return self.checked.get(turn.pass_.id)
        return None

    def failed(self, turn: Turn, failure: Finding) -> None:
        if turn.pass_.checks_as_written:
            self.checked[turn.pass_.id] = [failure]

    def taken(self, turn: Turn) -> None:
        if turn.pass_.checks_as_written:
            self.checked[turn.pass_.id] = turn.reported


class Migration(Step):
    """Pre-0.5 nnsight code: migration (``Pass.runs_first_once``) runs first and once; no
    other pass rewrites code for the pre-0.5 API (one that explains says, once, what it
    would do); a migration left unfinished says so; and when the migrated script still
    fills client containers inside remote blocks, the whole run is done again with the
    migration refusing to leave them so."""

    name = "migration"

    def __init__(self, run: Run, earlier: Migration | None) -> None:
        super().__init__(run, earlier)
        self.migrated: list[Finding] | None = None  # its unapplied findings, once it has run
        self.explained: dict[str, list[Finding]] = {}  # on pre-0.5 code: what a pass would do
        # client containers an earlier run's migration left filled on the server
        self.left_on_server: dict[str, str] = earlier.left_after if earlier is not None else {}
        self.left_after: dict[str, str] = {}  # those this run leaves (see again)

    def answer(self, turn: Turn) -> list[Finding] | None:
        pass_ = turn.pass_
        if not pass_.checks_as_written and not pass_.runs_first_once and turn.version.api == PRE_05:
            # their rewrites are nnsight 0.5+ code: they would break it; one that explains
            # says, once, what it would do (no construct left without a word)
            if not pass_.explains:
                return []
            if pass_.id not in self.explained:
                self.explained[pass_.id] = _explained(pass_, turn.version, turn.run, self.migrated is not None)
            return self.explained[pass_.id]
        if migrating(pass_) and self.migrated is not None:
            # migration runs once, on the code as written: on its own output it would
            # take `h.output[0]` (a batch row) for a pre-0.5 tuple again
            return self.migrated
        return None

    def prepare(self, turn: Turn) -> None:
        turn.context.left_on_server = self.left_on_server

    def taken(self, turn: Turn) -> None:
        if migrating(turn.pass_):
            self.migrated = turn.reported

    def again(self, run: Run) -> bool:
        """After the rounds: the client containers the migrated script still fills inside
        remote blocks (nnsight < 0.5 filled them; on NDIF they would stay empty), each with
        the reason accumulator-relocation gave for leaving it ("" if none)."""
        if self.migrated is None or run.version.api == PRE_05 or self.left_on_server:
            return False
        names = {name for name, _ in client_objects_filled_remotely(run.version.facts)}
        refusals = [f for f in run.last_round if f.pass_id == "accumulator-relocation" and f.reason]
        self.left_after = {name: next((f.reason for f in refusals if f.message.startswith(f"`{name}`")), "")
                           for name in sorted(names)}
        return bool(self.left_after)

    def finish(self, run: Run, outcome: Outcome) -> None:
        if self.migrated is not None and run.version.api == PRE_05 and \
                any(not (p.runs_first_once or p.checks_as_written) for p in run.passes):
            migration = next(p for p in run.passes if p.runs_first_once)
            outcome.findings.append(_partial_migration(migration.id, run.version.facts, self.migrated))


def migrating(pass_: Pass) -> bool:
    """Is this run of the pass the migration (which runs once, and changes the API)?"""
    return pass_.runs_first_once and not pass_.report_only


def _explained(pass_: Pass, version: Version, run: Run, migration_tried: bool) -> list[Finding]:
    """What ``pass_`` would do to pre-0.5 code, as findings not fixed: its rewrites are
    nnsight 0.5+ code, which the script's API would not run. Nothing is rewritten."""
    why = ("the migration to nnsight 0.5+ could not be done (the findings of migrate-api say why), and "
           "this rewrite is nnsight 0.5+ code" if migration_tried else
           f"{PRE_05_MESSAGE} ({legacy_summary(version.facts)}), and this rewrite is nnsight 0.5+ code: "
           "run with --migrate to migrate the script first")
    context = Context(run.options, version.server, rewrites_refused=why, run=run.context)
    try:
        pass_.run(version.module, version.facts, context)
        located = locate(context.findings, version, run.source, pass_.id)
    except RecursionError:
        raise
    except Exception:  # noqa: BLE001 - an explanation that fails explains nothing
        return []
    return [f for f in located if f.status is not Status.APPLIED]


def _partial_migration(pass_id: str, facts: Facts, not_migrated: list[Finding]) -> Finding:
    """Migration is all or nothing: a script it could not finish is left as it was, and
    the other passes (whose rewrites are nnsight 0.5+ code) did not run on it."""
    where = not_migrated[0].range if not_migrated else Range.of(0, 0, 0, 0)
    return Finding(
        pass_id,
        f"migration not done: the script uses the pre-0.5 nnsight API ({legacy_summary(facts)}) and "
        f"{len(not_migrated) or 'some'} of its uses cannot be migrated safely, so ndif-opt left the whole "
        "script as it was and no other pass ran",
        where,
        Status.SKIPPED,
        reason="a half-migrated script runs on no nnsight release; rewrite by hand what the findings "
               "\"not migrated\" name, then run ndif-opt again",
    )


class Stable(Step):
    """A pass that left a version of the tree unchanged would do so again: its findings are
    kept (a pass that only reports, on pre-0.5 idioms, looks at the code as written: once)."""

    name = "stable"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.stable: dict[str, tuple[cst.Module, list[Finding]]] = {}

    def answer(self, turn: Turn) -> list[Finding] | None:
        seen = self.stable.get(turn.pass_.id)
        if seen is not None and (seen[0] is turn.version.module or turn.pass_.report_only):
            return seen[1]
        return None

    def taken(self, turn: Turn) -> None:
        if not turn.changed:
            self.stable[turn.pass_.id] = (turn.version.module, turn.reported)


class Names(Step):
    """The names the rewrites leave: those the original left on the client that a rewrite
    no longer brings back, those a rewrite added; a finding that speaks of a name an
    earlier pass added says so."""

    name = "names"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.unreturned: set[str] = set()
        self.introduced: set[str] = set()
        self.added_by: dict[str, str] = {}  # a name a pass added -> that pass

    def amend(self, turn: Turn) -> None:
        if self.added_by and turn.located:
            turn.located = [naming_added(f, self.added_by) for f in turn.located]

    def taken(self, turn: Turn) -> None:
        context = turn.context
        if context.unreturned:
            self.unreturned |= context.unreturned
        if context.introduced:
            self.introduced |= context.introduced
            self.added_by.update(dict.fromkeys(context.introduced - self.added_by.keys(), turn.pass_.id))

    def finish(self, run: Run, outcome: Outcome) -> None:
        outcome.unreturned = tuple(sorted(self.unreturned - self.introduced))
        outcome.introduced = tuple(sorted(self.introduced))


def naming_added(finding: Finding, added_by: dict[str, str]) -> Finding:
    """A finding that speaks of a name an earlier pass added (`_ndif_rows`) says so: the
    user did not write it and would look for it in vain in the script as written."""
    text = finding.reason
    if not text or "`" not in text:
        return finding
    for name, pass_id in added_by.items():
        text = text.replace(f"`{name}`", f"`{name}` (which {pass_id} added)")
    return finding if text == finding.reason else dataclasses.replace(finding, reason=text)


class Suppression(Step):
    """`# ndif-opt: ignore` comments: a pass asks ``context.allows``; the rewrite of a pass
    that did not, applied where a comment covers it, is dropped whole."""

    name = "suppression"

    def __init__(self, run: Run, earlier: Suppression | None) -> None:
        super().__init__(run, earlier)
        self.source = run.source
        self.suppressions = earlier.suppressions if earlier is not None else Suppressions.from_source(run.source)
        self.suppressing = bool(self.suppressions)  # asked once per pass run: the answer never changes

    def prepare(self, turn: Turn) -> None:
        if self.suppressing:
            turn.context.suppressed = _suppression_check(self.suppressions, turn.version, self.source,
                                                         turn.pass_.id)

    def amend(self, turn: Turn) -> None:
        if not self.suppressing:
            return
        turn.located, keep = _enforce_suppressions(self.suppressions, turn.located)
        if not keep:
            turn.module, turn.context.unreturned, turn.context.introduced = turn.version.module, set(), set()


def _suppression_check(suppressions: Suppressions, version: Version, original: str, pass_id: str):
    """A node -> bool check of `# ndif-opt: ignore` comments (the version's positions and
    line map are computed on first use, and once)."""

    def check(node: cst.CSTNode) -> bool:
        where = version.place(node, original)
        return where is not None and suppressions.covers(pass_id, where.start.line, where.end.line)

    return check


def _enforce_suppressions(suppressions: Suppressions, located: list[Finding]) -> tuple[list[Finding], bool]:
    """Safety net for passes that do not ask ``context.allows``: if a rewrite they
    applied is covered by a suppression, the whole rewrite of that pass is dropped."""
    marked = [suppressions.mark(f) if f.status is Status.APPLIED else f for f in located]
    if not any(m.status is Status.SUPPRESSED and f.status is Status.APPLIED for f, m in zip(located, marked)):
        return marked, True
    reason = "another rewrite of this pass in this file is suppressed"
    return [dataclasses.replace(m.declined(reason), evidence=None, requests=None)
            if m.status is Status.APPLIED else m for m in marked], False


class UnusedImport(Step):
    """An `import nnsight` a pass added goes when a later pass leaves nothing that reads it
    (session-hoisting made a `nnsight.save(...)` of nnsight-05-failures unnecessary): an
    import the script as written does not have, used by nothing, is the tool's litter."""

    name = "unused-import"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.as_written = imports_module(run.version.module, "nnsight")

    def amend(self, turn: Turn) -> None:
        if self.as_written or turn.module is None or turn.module is turn.version.module:
            return
        module = without_unused_import(turn.module, "nnsight")
        if module is not turn.module:
            turn.module, turn.facts, turn.estimate = module, None, None


class ReleaseLowering(Step):
    """A rewrite for nnsight 0.6 (``RunContext.release``): lowered when it makes an outermost
    remote block read a local before binding it (engine/release_lowering.py), left out when
    it cannot be shown to run there."""

    name = "release-lowering"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.on_06 = run.context.release == NNSIGHT_06

    def amend(self, turn: Turn) -> None:
        if not self.on_06 or turn.module is turn.version.module:
            return
        context = turn.context
        try:
            lowered, facts, copies, unbound = _for_06(turn.version, turn.module, turn.run)
        except RecursionError:
            raise
        except Exception as error:  # the rewrite cannot be shown to run on 0.6: left out
            context.unreturned, context.introduced = set(), set()
            turn.module, turn.located = turn.version.module, [internal_error(turn.pass_.id, error)]
            return
        if unbound:  # the rewrite would not run on nnsight 0.6: the code stays as it was
            turn.located = [_not_on_06(f, unbound) for f in turn.located]
            context.unreturned, context.introduced = set(), set()
            turn.module = turn.version.module
            return
        context.introduced |= copies
        turn.module, turn.facts = lowered, facts


def _for_06(version: Version, new_module: cst.Module, run: Run) -> tuple[cst.Module, Facts, frozenset[str], list[str]]:
    """A pass's rewrite as nnsight 0.6 can run it, with its facts and the names of the
    copies it takes: lowered when it makes an outermost remote block read a local before
    binding it (engine/release_lowering.py); with the names still unbound on a 0.6 server
    when it cannot be (analysis/releases.py)."""
    facts = analyze_version(new_module, version.facts, run.options)
    before = unbound_on_server(version.facts)
    unbound = unbound_on_server(facts) - before
    if not unbound:
        return new_module, facts, frozenset(), []
    lowered = lower_for_06(new_module, facts, run.context.reserved_names)
    if lowered is not None:
        module, copies = lowered
        lowered_facts = analyze_version(module, version.facts, run.options)
        # a copy taken only if its name is bound (`try: ids_2 = ids`) is unbound exactly where
        # the script's own name was: as the script is
        if not unbound_on_server(lowered_facts) - before - copies:
            return module, lowered_facts, copies, []
    return new_module, facts, frozenset(), sorted(unbound)


def _not_on_06(finding: Finding, unbound: list[str]) -> Finding:
    if finding.status is not Status.APPLIED:
        return finding
    names = ", ".join(f"`{name}`" for name in unbound)
    left_out = finding.declined(
        f"the rewritten block would read {names} before binding it, and nnsight 0.6 (the release nnterp "
        "1.3.0 needs) ships none of your local variables to the server, where it would be unbound")
    return dataclasses.replace(left_out, message=f"left out for nnsight 0.6: {left_out.message}")


class Guards(Step):
    """What the run takes of no pass, whatever the pass (docs/decisions.md, "A fix is never
    worse"): a version that rewrites code the same pass wrote in an earlier round (a pass
    firing again on its own output would grow the code round after round), and one that
    sends more requests than the code as written (no fix; only a pass that ``adds_requests``
    may). The pass's version is let go, and a finding says why; the pass is not run again on
    this version (its one finding is its word, as the stable step keeps it)."""

    name = "guards"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.added_by: dict[str, str] = {}  # a name a pass added -> that pass
        self.requests_as_written = run.version.cost.requests

    def amend(self, turn: Turn) -> None:
        if turn.module is None or turn.module is turn.version.module:
            return
        reason = self._own_output(turn) or self._more_requests(turn) or self._more_compute(turn)
        if reason:
            where = next((f.range for f in turn.located if f.status is Status.APPLIED), Range.of(0, 0, 0, 0))
            turn.module, turn.facts, turn.estimate = turn.version.module, None, None
            turn.context.introduced.clear()  # (nothing of the version stays: no names either)
            turn.context.unreturned.clear()
            turn.located = [Finding(turn.pass_.id, f"{turn.pass_.id} left this code unchanged", where,
                                   Status.SKIPPED, reason=reason)]

    def taken(self, turn: Turn) -> None:
        if turn.changed:
            self.added_by.update(dict.fromkeys(turn.context.introduced, turn.pass_.id))

    def _own_output(self, turn: Turn) -> str:
        own = {name for name, by in self.added_by.items() if by == turn.pass_.id}
        for raw in turn.context.findings if own else ():
            if raw.status is not Status.APPLIED:
                continue
            nodes = [raw.node] if raw.through is None else [raw.node, raw.through]
            held = sorted({n.value for node in nodes for n in find_nodes(node, lambda n: type(n) is cst.Name)} & own)
            if held:
                return (f"{turn.pass_.id} would rewrite code it wrote itself in an earlier round (it holds "
                        f"`{held[0]}`): left as that round wrote it (a rewrite of its own rewrite could grow the "
                        "code round after round)")
        return ""

    def _estimate(self, turn: Turn):
        run = turn.run
        if turn.facts is None:
            turn.facts = analyze_version(turn.module, turn.version.facts, run.options)
        if turn.estimate is None:
            turn.estimate = explain(turn.facts, run.options)
        return turn.estimate

    def _more_compute(self, turn: Turn) -> str:
        """A version that evaluates more decoder layers than the one the pass was given,
        or runs more forward passes without evaluating fewer layers: the server does more
        work than before (skip-insertion's caching trace is one forward pass more, paid
        for by the layers it skips). A pass that ``adds_requests`` splits a request NDIF
        would stop: what each part must compute again is its price."""
        if turn.pass_.adds_requests:
            return ""
        before, after = turn.version.cost, self._estimate(turn).cost
        if not set(after.unknown_loops) <= set(before.unknown_loops):
            return ""  # a count the walk no longer knows (a loop moved into a session): not compared
        layers = grows(before.layer_evaluations, after.layer_evaluations)
        passes = grows(before.forward_passes, after.forward_passes) and \
            not grows(after.layer_evaluations, before.layer_evaluations)
        if not layers and not passes:
            return ""
        label, old, new = ("layer evaluations", before.layer_evaluations, after.layer_evaluations) if layers \
            else ("forward passes", before.forward_passes, after.forward_passes)
        names = default_names(loops_in(old, new))
        return (f"{turn.pass_.id} would leave the server more work than before ({label} "
                f"{count_text(old, names)} → {count_text(new, names)}): not applied")

    def _more_requests(self, turn: Turn) -> str:
        if turn.pass_.adds_requests:
            return ""
        before, after = self.requests_as_written, self._estimate(turn).cost.requests
        if not grows(before, after):
            return ""
        names = default_names(loops_in(before, after))
        return (f"{turn.pass_.id} would leave the script sending more requests than as written "
                f"({count_text(before, names)} → {count_text(after, names)}): not applied (please report it)")


class Refusals(Step):
    """The refusals of a pass that explains every construct (``Pass.explains``) stand when
    a later round no longer considers the construct: a loop whose inner loop became a
    session in round one is no longer a candidate in round two (it holds a session), but
    the reason it was refused in round one still stands."""

    name = "refusals"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.refused: list[Finding] = []  # every round's

    def taken(self, turn: Turn) -> None:
        if turn.pass_.explains:
            self.refused.extend(turn.reported)

    def finish(self, run: Run, outcome: Outcome) -> None:
        """Those its last round no longer makes and no fix of it replaced."""
        taken = {(f.pass_id, f.range.start) for f in outcome.applied + outcome.findings}
        kept: dict[tuple, Finding] = {}
        for finding in self.refused:
            key = (finding.pass_id, finding.range.start)
            if key not in taken:
                kept[key] = finding  # (the latest round's word on it)
        outcome.findings += kept.values()


class Costs(Step):
    """What each pass saved: the cost of the code as written, each version's change over
    the one it was made from, added up per pass over all rounds, and what the cost model
    had to assume about the script."""

    name = "costs"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.initial = run.version.cost
        self.notes = list(run.version.estimate.notes)
        self.deltas = {p.id: Cost() for p in run.passes}

    def taken(self, turn: Turn) -> None:
        if turn.changed:
            pass_id = turn.pass_.id
            self.deltas[pass_id] = add_costs(self.deltas[pass_id], _cost_change(turn.run.version.cost, turn.version.cost))

    def finish(self, run: Run, outcome: Outcome) -> None:
        """Per-pass costs that chain: each pass starts where the previous one ended."""
        rows, running = [], self.initial
        for pass_ in run.passes:
            if not pass_.report_only:
                after = add_costs(running, self.deltas[pass_.id])
                rows.append(PassCost(pass_.id, running, after))
                running = after
        outcome.costs = tuple(rows)
        outcome.assumptions = tuple(assumptions(run.options) + self.notes)


# every field of a Cost adds up: numbers, and the multiset of downloads of unknown size
COST_FIELDS = tuple(f.name for f in dataclasses.fields(Cost))
cost_fields = operator.attrgetter(*COST_FIELDS)


def _cost_change(a: Cost, b: Cost) -> Cost:
    return Cost(*[x - y for x, y in zip(cost_fields(a), cost_fields(b))])


def add_costs(a: Cost, b: Cost) -> Cost:
    return Cost(*[rounded(x + y) for x, y in zip(cost_fields(a), cost_fields(b))])


def rounded(value):
    """A cost field as costs keep it (to 6 decimals)."""
    return round(value, 6) if isinstance(value, (float, Count)) else value


class FindingEdits(Step):
    """Findings carry their edits: a turn that changed the code gives its applied findings
    the lines of the code as written it changed (engine/finding_edits.py)."""

    name = "finding-edits"

    def __init__(self, run: Run, earlier: Step | None) -> None:
        super().__init__(run, earlier)
        self.origins: LineOrigins | None = None  # where the current version's lines come from

    def taken(self, turn: Turn) -> None:
        if turn.changed:
            run = turn.run
            if self.origins is None:
                self.origins = LineOrigins(run.source)
            run.applied[turn.applied_from:] = self.origins.step(run.version.code, run.applied[turn.applied_from:])


#: The steps, in the order they act at each point of a turn.
STEPS: tuple[type[Step], ...] = (
    Checks,
    Migration,
    Stable,
    Names,
    Suppression,
    UnusedImport,
    ReleaseLowering,
    Guards,
    Refusals,
    Costs,
    FindingEdits,
)

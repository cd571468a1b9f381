"""One module's run of the passes: rounds of pass turns until the code stops changing.

The loop knows the versions of the tree and a pass's turn; everything else it does around a
pass runs as the steps of a declared table (``STEPS`` in engine/steps.py: the checks, the
migration, suppressions, the release lowering, cost accounting, ...), each with its own
state, called at the points of a turn in the table's order:

1. ``answer``: the pass's findings of this round without running it (the first step that
   answers ends the turn);
2. ``prepare``: what the pass's :class:`Context` holds beyond the options and the run;
3. the pass runs, its findings are placed in the code as written (a pass that raises ends
   the turn with an internal-error finding, which ``failed`` sees);
4. ``amend``: the pass's version and findings changed before they are taken;
5. the applied findings are kept, the others reported for the round, and the pass's
   version becomes the current one when its code differs;
6. ``taken``: what the steps keep of the turn;

and once no round changes the code, ``again`` (a step may ask for the whole run once more:
the new run's steps see their predecessors) and ``finish``: each step's part of the
:class:`Result`. A step sees the run through the turn (``turn.run``) and as the argument of
``again`` and ``finish``; it keeps no reference to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import Facts, analyze
from ndif_opt.analysis.legacy_api import api_generation
from ndif_opt.analysis.regions import result_names
from ndif_opt.cost_model import Estimate, explain
from ndif_opt.engine.line_diff import lines_mapped, text_edits
from ndif_opt.engine.origins import Lineage
from ndif_opt.options import Options, RunContext
from ndif_opt.passes import Context, Pass, RawFinding
from ndif_opt.syntax.positions import Positions, code_and_positions
from ndif_opt.types import Cost, Finding, PassCost, Position, Range, Result, Status

MAX_ROUNDS = 16  # passes enable each other (and push one value per run) until stable


@dataclass
class Version:
    """One version of the tree, with what is computed about it at most once."""

    module: cst.Module
    facts: Facts
    code: str
    options: Options
    _estimate: Estimate | None = None
    _server: ServerCheck | None = None
    _positions: Positions | None = None
    _api: str | None = None
    _mapping: tuple[str, Callable[[int, int], tuple[int, int]]] | None = None  # (original, its line map)
    lineage: Lineage | None = None  # the run's versions of the tree, this one last

    def __post_init__(self) -> None:
        if self.lineage is None:  # the code as written
            self.lineage = Lineage(self.module, self.positions)
        else:
            self.lineage.add(self.module)

    @property
    def api(self) -> str:
        """The nnsight API generation this version of the tree targets."""
        if self._api is None:
            self._api = api_generation(self.facts)
        return self._api

    @property
    def positions(self) -> Positions:
        if self._positions is None:  # the first version's code is the source: no generation yet
            self._positions = Positions(self.module)
        return self._positions

    def line_map(self, original: str):
        """(line, column) here -> the closest position in ``original`` (one diff per version)."""
        if self._mapping is None or self._mapping[0] is not original:
            self._mapping = (original, lines_mapped(self.code, original))
        return self._mapping[1]

    def place(self, node: cst.CSTNode, original: str) -> Range | None:
        """Where ``node`` of this version is in ``original`` (the code as written): where
        the node it was made from is (engine/origins.py), else its lines' closest match."""
        origin = self.lineage.where(node, self.module)
        if origin is not None:
            return Range.of(origin.start.line - 1, origin.start.column, origin.end.line - 1, origin.end.column)
        pos = self.positions.get(node)
        if pos is None:
            return None
        line_map = self.line_map(original)
        start = Position(*line_map(pos.start.line - 1, pos.start.column))
        end = Position(*line_map(pos.end.line - 1, pos.end.column))
        return Range(start, max(start, end))

    @property
    def estimate(self) -> Estimate:
        if self._estimate is None:
            self._estimate = explain(self.facts, self.options)
        return self._estimate

    @property
    def cost(self) -> Cost:
        return self.estimate.cost

    @property
    def server(self) -> ServerCheck:
        if self._server is None:
            self._server = ServerCheck(self.facts, self.options.local_modules)
        return self._server


def analyze_version(module: cst.Module, first: Facts, options: Options) -> Facts:
    """The facts of a version of the tree a pass made from one whose facts are ``first``:
    the script's results stay those of the code as written."""
    return analyze(module, assume_remote=options.assume_remote, original_results=result_names(first))


@dataclass
class Turn:
    """One pass's turn in a round: what the steps see of it and may change."""

    run: Run
    pass_: Pass
    version: Version  # the version the pass runs on
    context: Context | None = None  # the pass's, once prepared
    module: cst.Module | None = None  # the pass's version of the tree
    facts: Facts | None = None  # of ``module``, when a step has analysed it already
    estimate: Estimate | None = None  # of ``facts``, when a step has estimated it already
    located: list[Finding] = dataclasses.field(default_factory=list)  # its findings, placed
    reported: list[Finding] = dataclasses.field(default_factory=list)  # those not applied
    applied_from: int = 0  # where its applied findings begin in the run's
    changed: bool = False  # its version became the current one


@dataclass
class Outcome:
    """What the steps make of the run, once the rounds are over: the parts of its Result."""

    findings: list[Finding]  # not applied: the last round's word
    applied: list[Finding]  # applied and not undone by a later pass
    costs: tuple[PassCost, ...] = ()
    assumptions: tuple[str, ...] = ()
    unreturned: tuple[str, ...] = ()
    introduced: tuple[str, ...] = ()


class Run:
    """One module's run of the passes, round after round, until nothing changes: the tree's
    current version (``version``), the applied findings, the last round's others, and the
    steps (made from the table ``steps``) with what each of them keeps."""

    def __init__(self, source: str, options: Options, context: RunContext, version: Version,
                 passes: Sequence[Pass], steps: Sequence[Callable], earlier: Run | None = None) -> None:
        """``steps``: the table (``engine.steps.STEPS``), each made for this run with the same
        step of ``earlier``, the run done before it, if any."""
        self.source = source
        self.options = options
        self.context = context
        self.version = version
        self.passes = passes
        self.applied: list[Finding] = []
        self.last_round: list[Finding] = []
        self.steps = tuple(make(self, earlier.steps[i] if earlier is not None else None)
                           for i, make in enumerate(steps))

    def rounds(self) -> Run:
        """The run after its rounds: until one changes nothing (at most MAX_ROUNDS)."""
        for _round in range(MAX_ROUNDS):
            if not self.round():
                break
        return self

    def again(self) -> bool:
        """Does a step ask for the whole run again?"""
        return any(step.again(self) for step in self.steps)

    def round(self) -> bool:
        """Every pass once, in order: did one change the code?"""
        changed = False
        self.last_round = []
        for pass_ in self.passes:
            if self.turn(pass_):
                changed = True
        return changed

    def turn(self, pass_: Pass) -> bool:
        """One pass's turn: did it change the code?"""
        turn = Turn(self, pass_, self.version)
        for step in self.steps:
            answer = step.answer(turn)
            if answer is not None:
                self.last_round.extend(answer)
                return False
        turn.context = Context(self.options, turn.version.server, run=self.context)
        for step in self.steps:
            step.prepare(turn)
        try:
            turn.module = pass_.run(turn.version.module, turn.version.facts, turn.context)
            turn.located = locate(turn.context.findings, turn.version, self.source, pass_.id)
        except RecursionError:
            raise
        except Exception as error:  # a pass that fails leaves the code as it was
            failure = internal_error(pass_.id, error)
            self.last_round.append(failure)
            for step in self.steps:
                step.failed(turn, failure)
            return False
        for step in self.steps:
            step.amend(turn)
        turn.applied_from = len(self.applied)
        turn.reported = self.record(turn.located)
        turn.changed = self.advance(turn)
        for step in self.steps:
            step.taken(turn)
        return turn.changed

    def record(self, located: list[Finding]) -> list[Finding]:
        """The turn's applied findings kept; returns the others, reported for the round (most
        pass runs have none at all)."""
        if not located:
            return located
        self.applied.extend(f for f in located if f.status is Status.APPLIED)
        reported = [f for f in located if f.status is not Status.APPLIED]
        self.last_round.extend(reported)
        return reported

    def advance(self, turn: Turn) -> bool:
        """The pass's version becomes the current one when its code differs (True)."""
        positions = None
        if turn.module is self.version.module:
            code = self.version.code
        else:  # the code of the new version, and where its nodes are, in one generation
            code, positions = code_and_positions(turn.module)
        if code == self.version.code:
            return False
        api = None if turn.pass_.runs_first_once else self.version.api  # only migration changes it
        facts = turn.facts if turn.facts is not None else analyze_version(turn.module, self.version.facts, self.options)
        self.version = Version(turn.module, facts, code, self.options, _estimate=turn.estimate,
                               _positions=positions, _api=api, lineage=self.version.lineage)
        return True

    def result(self, with_edits: bool) -> Result:
        """The run's Result, once no round changes the code."""
        code, source = self.version.code, self.source
        applied = [f for f in self.applied if f.evidence is None or f.evidence in code]  # not undone later
        outcome = Outcome(self.last_round, applied)
        for step in self.steps:
            step.finish(self, outcome)
        return Result(
            source=source,
            code=code,
            findings=tuple(sorted(outcome.applied + outcome.findings, key=lambda f: (f.range.start, f.pass_id))),
            costs=outcome.costs,
            edits=tuple(text_edits(source, code)) if with_edits else (),
            assumptions=outcome.assumptions,
            unreturned=outcome.unreturned if code != source else (),
            introduced=outcome.introduced if code != source else (),
        )


def locate(raw: list[RawFinding], version: Version, original: str, pass_id: str) -> list[Finding]:
    """A pass's findings on ``version``, placed in ``original`` (the code as written)."""
    if not raw:
        return []

    def located(node: cst.CSTNode) -> Range | None:
        return version.place(node, original)

    found = []
    for item in raw:
        rng = located(item.node) or Range.of(0, 0, 0, 0)
        last = located(item.through) if item.through is not None else None
        if last is not None and last.end > rng.end:
            rng = Range(rng.start, last.end)
        uses = tuple(r for r in map(located, item.uses) if r is not None)
        found.append(
            Finding(pass_id, item.message, rng, item.status, item.safety, item.reason, item.evidence, uses,
                    item.requests, version.lineage.subject(item.node, version.module), item.proposal)
        )
    return found


def internal_error(pass_id: str, error: Exception) -> Finding:
    return Finding(
        pass_id,
        f"{pass_id} could not handle this file and left it unchanged",
        Range.of(0, 0, 0, 0),
        Status.SKIPPED,
        reason=f"internal error: {type(error).__name__}: {error} (please report it)",
    )

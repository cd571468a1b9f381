"""The pass pipeline: parse once, analyse, run the passes in order until stable.

Facts are recomputed only after a pass changed the tree. Findings of a pass are
located in the tree that pass saw and placed where their nodes stood in the original
source (engine/origins.py), so editors can show them on the text the user has.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import Facts, analyze
from ndif_opt.analysis.legacy_api import PRE_05, PRE_05_MESSAGE, api_generation, legacy_summary
from ndif_opt.analysis.regions import client_objects_filled_remotely, result_names
from ndif_opt.analysis.releases import NNSIGHT_06, target_release, unbound_on_server
from ndif_opt.analysis.results import script_result_names
from ndif_opt.cost_model import Estimate, assumptions, explain
from ndif_opt.engine import windows
from ndif_opt.engine.finding_edits import LineOrigins
from ndif_opt.engine.line_diff import lines_mapped, text_edits
from ndif_opt.engine.origins import Lineage
from ndif_opt.engine.prefilter import uses_nnsight
from ndif_opt.engine.release_lowering import lower_for_06
from ndif_opt.engine.suppression import IGNORE_FILE, Suppressions
from ndif_opt.options import Options
from ndif_opt.passes import PASSES, Context, Pass, RawFinding
from ndif_opt.syntax.joined import Part, joined, parse_part
from ndif_opt.syntax.positions import Positions, code_and_positions
from ndif_opt.types import Cost, Count, Edit, Finding, PassCost, Position, Range, Result, Status, UnknownDownloads


MAX_ROUNDS = 16  # passes enable each other (and push one value per run) until stable


def parse(source: str, filename: str | None = None) -> cst.Module:
    """Parse with libcst, turning its parser error into a plain SyntaxError.

    Python's own parser looks first: it rejects what Python rejects (absurd nesting
    among it, on which libcst's native parser would overflow its stack)."""
    _python_parse(source, filename)
    return _libcst_parse(source, filename)


def _libcst_parse(source: str, filename: str | None = None) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise SyntaxError(
            f"{error.message} (line {error.raw_line}, column {error.raw_column})",
            (filename or "<source>", error.raw_line, error.raw_column + 1, None),
        ) from None


def check_syntax(source: str, filename: str | None = None) -> None:
    """SyntaxError (with line and column) when ``source`` is not Python."""
    _python_parse(source, filename)


def _python_parse(source: str, filename: str | None = None) -> ast.Module:
    try:
        return ast.parse(source, filename or "<source>")
    except SyntaxError as error:
        raise SyntaxError(
            f"{error.msg} (line {error.lineno}, column {error.offset})",
            (filename or "<source>", error.lineno, error.offset, None),
        ) from None
    except (ValueError, MemoryError, RecursionError) as error:  # NUL bytes, huge input
        raise SyntaxError(str(error), (filename or "<source>", 1, 1, None)) from None


@dataclass
class _State:
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


class WindowCache:
    """Results of windows from earlier runs, for re-optimizing a file after an edit.

    An editor keeps one per document: after an edit only the windows whose text (with
    their prelude) changed run again. Bounded; safe to share between threads; a change
    of options empties it."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._results: OrderedDict[str, _Optimized] = OrderedDict()
        self._options: Options | None = None
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, text: str, options: Options) -> _Optimized | None:
        with self._lock:
            self._use(options)
            result = self._results.get(text)
            if result is not None:
                self._results.move_to_end(text)
                self.hits += 1
            return result

    def put(self, text: str, options: Options, result: _Optimized) -> None:
        with self._lock:
            self._use(options)
            self._results[text] = result
            while len(self._results) > self.size:
                self._results.popitem(last=False)

    def _use(self, options: Options) -> None:
        """Results of other options do not apply: forget them (the lock is held)."""
        if self._options != options:
            self._results.clear()
            self._options = options


def run_pipeline(source: str, options: Options, filename: str | None = None,
                 cache: WindowCache | None = None, *, prefiltered: bool = False) -> Result:
    """Optimize ``source``: window by window when it splits into independent parts.
    ``prefiltered``: the caller has seen ``uses_nnsight(source)`` say yes."""
    if not prefiltered and not uses_nnsight(source):
        check_syntax(source, filename)  # nothing to optimize, but bad input is still an error
        return Result(source=source, code=source)
    options = _with_release(options, source)
    tree = _python_parse(source, filename)
    results = script_result_names(tree)  # the file's, whatever window a name is bound in
    plan = None if _whole_module_only(source, options) else windows.plan(source, tree)
    if plan is not None:
        result = _run_windows(plan, source, options, filename, cache, results, tree)
        if result is not None:
            return result
    return _run_module(source, options, filename, results=results)


def whole_module(source: str, options: Options, filename: str | None = None) -> Result:
    """The whole file optimized at once, with the windows' edges as the only trace of
    them: what the windowed run of :func:`run_pipeline` must give (a property test checks
    it; windows are a speed device and must not change what is optimized)."""
    if not uses_nnsight(source):
        return Result(source=source, code=source)
    options = _with_release(options, source)
    tree = _python_parse(source, filename)
    plan = None if _whole_module_only(source, options) else windows.plan(source, tree)
    if plan is not None:
        edges = frozenset(line for w in plan.windows if w.active for line in (w.start, w.end))
        options = dataclasses.replace(options, window_edges=edges)
    return _run_module(source, options, filename, results=script_result_names(tree))


def _with_release(options: Options, source: str) -> Options:
    """The options with the nnsight release the rewrite targets decided, for the whole file
    (a window alone may not show the file's imports)."""
    release = target_release(options.nnsight, source)
    return options if release == options.nnsight else dataclasses.replace(options, nnsight=release)


def _whole_module_only(source: str, options: Options) -> bool:
    """Migration rewrites imports and file-wide suppressions need the whole file."""
    return any(cls.runs_first_once and options.wants(cls.id, cls.opt_in) for cls in PASSES) \
        or IGNORE_FILE.search(source) is not None


def _run_windows(plan: windows.Plan, source: str, options: Options, filename: str | None,
                 cache: WindowCache | None = None, results: frozenset[str] = frozenset(),
                 tree: ast.Module | None = None) -> Result | None:
    """Each window optimized after its prelude; None when the whole module must run.

    Fresh names a pass introduces avoid every name of the file, not only the window's.
    An import the passes add to a window (`import nnsight`) goes where they would put it in
    the whole file (``tree``: its Python parse), once."""
    reserved = options.reserved_names | plan.names
    window_options = dataclasses.replace(options, reserved_names=reserved)
    active = [window for window in plan.windows if window.active]
    placed: dict[int, _Placed] = {}  # by window start
    for window, done in zip(active, _placed_all(plan, active, window_options, filename, cache, results)):
        if done is None:
            return None  # a pass changed shared context, or the file is pre-0.5 nnsight
        placed[window.start] = done
    helpers = _rewritten_helpers(plan, active, placed)
    if helpers is None:
        return None  # the windows that call a shared helper do not agree on what it becomes
    edits: list[Edit] = []
    parts: list[str] = []
    position = 0
    for window in plan.windows:
        parts.append(plan.text(position, window.start))
        text = plan.text(window.start, window.end)
        new = placed[window.start].code if window.active else helpers.get(window.start, text)
        parts.append(new)
        if not window.active and new != text:
            edits += [Edit(_shifted(e.range, window.start, window.start), e.new_text) for e in text_edits(text, new)]
        position = window.end
    parts.append(plan.text(position, len(plan.lines)))
    code = "".join(parts)
    imported = sorted({name for done in placed.values() for name in done.imports})
    if imported:
        line = windows.import_line(tree, imported[0]) if tree is not None and len(imported) == 1 else None
        if line is None or (line != windows.IMPORTED and any(w.active and w.start < line for w in plan.windows)):
            return None  # where the whole file's run would put it is not known
        if line != windows.IMPORTED:  # (no window before the line: the text up to it is the source's)
            statement = f"import {imported[0]}\n"
            edits.append(Edit(Range(Position(line, 0), Position(line, 0)), statement))
            at = len(plan.text(0, line))
            code = code[:at] + statement + code[at:]
    return _combined(source, code, list(placed.values()), options, edits)


def _rewritten_helpers(plan: windows.Plan, active: list[windows.Window],
                       placed: dict[int, _Placed]) -> dict[int, str] | None:
    """The new text of each shared helper the passes rewrote, by its first line: what every
    window that calls it made of it (as the whole file's run makes it once); None when
    they do not agree (one left it as it was, or two rewrote it differently)."""
    versions: dict[int, set[str]] = {}
    for window in active:
        for index in window.helpers:
            versions.setdefault(index, set()).add(placed[window.start].rewritten.get(index, ""))
    rewritten = {}
    for index, texts in versions.items():
        if texts != {""}:
            if len(texts) > 1:
                return None
            rewritten[plan.chunks[index].start] = texts.pop()
    return rewritten


@dataclass(frozen=True)
class _Optimized:
    """A window optimized as a module of its own."""

    result: Result  # of the module (its prelude, then the window's text); no edits
    edits: tuple[Edit, ...]  # turn the window's text into its new text (ranges in the window)


@dataclass(frozen=True)
class _Placed:
    """What the file's result takes of a window's: its new text, and its findings and
    edits moved to the file's lines."""

    code: str  # the window's new text
    imports: tuple[str, ...]  # modules the passes import in the window's prelude (`import nnsight`)
    findings: tuple[Finding, ...]
    edits: tuple[Edit, ...]
    assumptions: tuple[str, ...]
    unreturned: tuple[str, ...]
    introduced: tuple[str, ...]
    passes: tuple[str, ...]  # of its per-pass costs
    costs: tuple[int | float, ...]  # each pass's cost before, then after, field by field
    helpers: tuple[tuple[int, int], ...] = ()  # the file's lines of the shared helpers the window calls
    rewritten: dict[int, str] = dataclasses.field(default_factory=dict)  # a shared helper's chunk -> its new text


def _placed_all(plan: windows.Plan, active: Iterable[windows.Window], options: Options,
                filename: str | None, cache: WindowCache | None = None,
                results: frozenset[str] = frozenset()) -> Iterator[_Placed | None]:
    """Each window's result in the file, each window taken when its result is asked for;
    none after one that gives up (the caller gives up there)."""
    for window, done in _optimized(plan, active, options, filename, cache, results):
        placed = _placed(plan, window, done)
        yield placed
        if placed is None:
            return


def _placed(plan: windows.Plan, window: windows.Window, done: _Optimized) -> _Placed | None:
    """The window's result in the file; None when a pass changed the shared context or
    the file is pre-0.5 nnsight (then the whole module must run)."""
    prelude = plan.prelude_text(window)
    result = done.result
    code, imports = _without_added_import(result.code, prelude, plan.text(window.start, window.end))
    cut = plan.after_prelude(window, code)
    if cut is None or _pre_05(result):
        return None
    start = window.start
    shift = start - prelude.count("\n")
    helpers = plan.helper_lines(window)

    def moved(rng: Range) -> Range:
        for first, end, at in helpers:  # in a shared helper: where it stands in the file
            if first <= rng.start.line < end:
                return _shifted(rng, at - first, at)
        return _shifted(rng, shift, start)

    return _Placed(
        cut[0],
        imports,
        tuple(finding.with_range(moved(finding.range), tuple(map(moved, finding.uses)) if finding.uses else None,
                                 tuple(map(moved, finding.touched)) if finding.touched else None)
              for finding in result.findings),
        tuple(Edit(_shifted(edit.range, start, start), edit.new_text) for edit in done.edits),
        result.assumptions, result.unreturned, result.introduced,
        tuple(cost.pass_id for cost in result.costs),
        tuple(field for cost in result.costs for field in (*_fields_of(cost.before), *_fields_of(cost.after))),
        tuple((at, at + end - first) for first, end, at in helpers),
        cut[1],
    )


_ADDED_IMPORT = "import nnsight\n"  # what the passes add (syntax.rewrite.with_module_import)


def _without_added_import(code: str, prelude: str, text: str) -> tuple[str, tuple[str, ...]]:
    """A window's new code without the `import nnsight` line the passes added among the
    imports that open its module (the prelude's; the whole file's run puts it among the
    file's), and that import; the code as it is when there is none. ``text``: the
    window's own text, which follows the prelude in its module."""
    original = prelude + text
    at = code.find(_ADDED_IMPORT)
    while 0 <= at <= len(prelude) and code.startswith(original[:at]):  # (the code before it is as it was)
        if (at == 0 or code[at - 1] == "\n") and not original.startswith(_ADDED_IMPORT, at):
            return code[:at] + code[at + len(_ADDED_IMPORT):], ("nnsight",)
        at = code.find(_ADDED_IMPORT, at + 1)
    return code, ()


def _optimized(plan: windows.Plan, active: Iterable[windows.Window], options: Options,
               filename: str | None, cache: WindowCache | None = None,
               results: frozenset[str] = frozenset()) -> Iterator[tuple[windows.Window, _Optimized]]:
    """Each window with its result, computed when asked for (a caller that stops early
    saves the rest; the next window is taken only then). ``results``: the file's results
    (a name a window binds may be a result because of code in another window)."""
    context: dict[int, Part] = {}  # context chunks parsed once, shared by the windows they open
    for window in active:
        text = plan.text(window.start, window.end)
        prelude = plan.prelude_text(window)
        module_text = prelude + text
        mine = results & plan.names_in(window)
        key = module_text + "\0" + " ".join(sorted(mine))  # the same text may hold other results
        done = cache.get(key, options) if cache is not None else None
        if done is None:
            module = _window_module(plan, window, text, context)
            result = _run_module(module_text, options, filename, module, with_edits=False, results=mine)
            cut = plan.after_prelude(window, _without_added_import(result.code, prelude, text)[0])
            edits = text_edits(text, cut[0]) if cut is not None else []
            done = _Optimized(result, tuple(edits))
            if cache is not None:
                cache.put(key, options, done)
        yield window, done


def _window_module(plan: windows.Plan, window: windows.Window, text: str,
                   context: dict[int, Part]) -> cst.Module | None:
    """The window's module (prelude, then text) from parses of its parts: the prelude's
    statements are the nodes every window it opens shares. None: parse the whole text."""
    if not window.prelude:
        return None
    try:
        prelude = []
        for index in window.prelude:
            if index not in context:
                context[index] = parse_part(plan.chunks[index].text)
            prelude.append(context[index])
        return joined([*prelude, parse_part(text)])
    except cst.ParserSyntaxError:
        return None  # the joint parse reports it, as for any module


def _pre_05(result: Result) -> bool:
    first = {cls.id for cls in PASSES if cls.runs_first_once}
    return any(f.pass_id in first and PRE_05_MESSAGE in f.message for f in result.findings)


def _combined(source: str, code: str, results: list[_Placed], options: Options,
              edits: list[Edit] | None = None) -> Result:
    """One result for the file from the results of its windows (and ``edits`` of the file
    beyond theirs)."""
    findings: list[Finding] = []
    edits = list(edits or [])
    notes: list[str] = []
    unreturned: set[str] = set()
    introduced: set[str] = set()
    in_helpers: set[Finding] = set()  # every window that calls a shared helper says the same of it: once
    for done in results:
        for finding in done.findings:
            if any(first <= finding.range.start.line < end for first, end in done.helpers):
                if finding in in_helpers:
                    continue
                in_helpers.add(finding)
            findings.append(finding)
        edits.extend(done.edits)
        notes.extend(n for n in done.assumptions if n not in notes)
        unreturned.update(done.unreturned)
        introduced.update(done.introduced)
    costs = _summed_all([(done.passes, done.costs) for done in results])
    if not results:  # nothing to optimize in any window
        costs = [PassCost(cls.id, Cost(), Cost()) for cls in PASSES if options.wants(cls.id, cls.opt_in)]
    return Result(
        source=source,
        code=code,
        findings=tuple(sorted(findings, key=lambda f: (f.range.start, f.pass_id))),
        costs=tuple(costs),
        edits=tuple(sorted(edits, key=lambda e: e.range.start)) if code != source else (),
        assumptions=tuple(notes) or tuple(assumptions(options)),
        unreturned=tuple(sorted(unreturned - introduced)) if code != source else (),
        introduced=tuple(sorted(introduced)) if code != source else (),
    )


def _shifted(rng: Range, shift: int, floor: int) -> Range:
    """A range of a window's module moved to the file; inside the prelude: the window start."""
    def move(p: Position) -> Position:
        line = p.line + shift
        return Position(line, p.character) if line >= floor else Position(floor, 0)
    return Range(move(rng.start), move(rng.end))


def _summed_all(rows: list[tuple[tuple[str, ...], tuple]]) -> list[PassCost]:
    """Per-pass costs of the windows (pass ids, numbers as _Placed has them) added up, in
    order; a window whose result has none (nothing for the passes to do, or the analysis
    gave up) adds nothing."""
    rows = [row for row in rows if row[0]]
    if not rows:
        return []
    width = min(len(passes) for passes, _ in rows)
    numbers = [costs for _, costs in rows]
    totals = numbers[0] if len(rows) == 1 else [_column_sum(column) for column in zip(*numbers)]
    size = len(_COST_FIELDS)
    return [PassCost(rows[0][0][i], Cost(*totals[2 * i * size:(2 * i + 1) * size]),
                     Cost(*totals[(2 * i + 1) * size:(2 * i + 2) * size])) for i in range(width)]


def _column_sum(values: tuple) -> int | float | UnknownDownloads:
    """The values added up one after another, each sum rounded like ``_add``'s (so the
    file's costs are what adding its windows' costs pass by pass gives)."""
    if type(values[0]) is UnknownDownloads:
        return UnknownDownloads.total(values)  # (not rounded: a multiset)
    total = values[0]
    for value in values[1:]:
        total = _round(total + value)
    return total


def _run_module(source: str, options: Options, filename: str | None = None,
                module: cst.Module | None = None, with_edits: bool = True,
                results: frozenset[str] | None = None) -> Result:
    """The passes over one module: a whole file, or a window's prelude and text (``module``:
    its parse, when the caller has it; a window's edits are taken of its own text, not
    here). Python's parser and the prefilter have looked at the file already (run_pipeline).
    ``results``: the names of the file's results (analysis/results.py), read from the file."""
    if module is None:
        module = _libcst_parse(source, filename)
    try:
        facts = analyze(module, assume_remote=options.assume_remote, original_results=results)
        state = _State(module, facts, source, options)
    except RecursionError:
        raise
    except Exception as error:  # never crash on code we do not understand
        return _untouched(source, "analysis", error)
    passes = _passes_for(options)
    suppressions = Suppressions.from_source(source)

    def rounds_run(left_on_server: dict[str, str]) -> _Run:
        return _rounds(_Run(source, options, state, passes, suppressions,
                            suppressing=bool(suppressions),  # asked once per pass run: the answer never changes
                            initial_cost=state.cost,
                            notes=list(state.estimate.notes),  # what the cost model had to assume about this script
                            deltas={p.id: Cost() for p in passes}, left_on_server=left_on_server))

    run = rounds_run({})
    left = run.containers_left_on_server()
    if left:  # the migration would leave them empty: run again, with the migration refusing
        run = rounds_run(left)
    return run.result(with_edits)


def _rounds(run: "_Run") -> "_Run":
    """``run`` after its rounds: until one changes nothing (at most MAX_ROUNDS)."""
    for _round in range(MAX_ROUNDS):
        if not run.round():
            break
    return run


@dataclass
class _Run:
    """One module's run of the passes, round after round, until nothing changes: the tree's
    current version (``state``) and what the rounds gathered. A pass run takes named steps:
    answered without running (:meth:`answered`), run (:meth:`run_pass`), lowered for nnsight
    0.6 (:meth:`lowered_for_06`), its findings and names recorded (:meth:`record`), the new
    version taken (:meth:`advance`)."""

    source: str
    options: Options
    state: _State
    passes: list
    suppressions: Suppressions
    suppressing: bool
    initial_cost: Cost
    notes: list
    deltas: dict[str, Cost]
    # a pass that left a version of the tree unchanged would do so again: keep its findings
    stable: dict[str, tuple[cst.Module, list[Finding]]] = dataclasses.field(default_factory=dict)
    applied: list[Finding] = dataclasses.field(default_factory=list)
    last_round: list[Finding] = dataclasses.field(default_factory=list)
    unreturned: set[str] = dataclasses.field(default_factory=set)
    introduced: set[str] = dataclasses.field(default_factory=set)
    # a name a pass added -> that pass (for later passes' findings)
    added_by: dict[str, str] = dataclasses.field(default_factory=dict)
    migrated: list[Finding] | None = None  # migration's unapplied findings, once it has run
    # the checks' findings, from their one run on the code as written
    checked: dict[str, list[Finding]] = dataclasses.field(default_factory=dict)
    # on pre-0.5 code: what a pass would do (see Pass.explains)
    explained: dict[str, list[Finding]] = dataclasses.field(default_factory=dict)
    # every round's refusals by a pass that explains (see _still_refused)
    refused: list[Finding] = dataclasses.field(default_factory=list)
    # client containers an earlier run's migration left filled on the server (Context's)
    left_on_server: dict[str, str] = dataclasses.field(default_factory=dict)
    origins: LineOrigins | None = None  # where the current version's lines come from, once one changed

    def containers_left_on_server(self) -> dict[str, str]:
        """After the rounds: the client containers the migrated script still fills inside
        remote blocks (nnsight < 0.5 filled them; on NDIF they would stay empty), each with
        the reason accumulator-relocation gave for leaving it ("" if none)."""
        if self.migrated is None or self.state.api == PRE_05 or self.left_on_server:
            return {}
        names = {name for name, _ in client_objects_filled_remotely(self.state.facts)}
        refusals = [f for f in self.last_round if f.pass_id == "accumulator-relocation" and f.reason]
        return {name: next((f.reason for f in refusals if f.message.startswith(f"`{name}`")), "")
                for name in sorted(names)}

    def round(self) -> bool:
        """Every pass once, in order: did one change the code?"""
        changed = False
        self.last_round = []
        for pass_ in self.passes:
            if self.step(pass_):
                changed = True
        return changed

    def step(self, pass_: Pass) -> bool:
        """One pass's turn: did it change the code?"""
        if self.answered(pass_):
            return False
        before = self.state.cost
        ran = self.run_pass(pass_)
        if ran is None:
            return False
        new_module, located, context = ran
        new_facts = None  # of new_module, when the 0.6 check has analysed it already
        if self.options.nnsight == NNSIGHT_06 and new_module is not self.state.module:
            new_module, new_facts, located = self.lowered_for_06(pass_, new_module, located, context)
        applied = len(self.applied)
        reported = self.record(pass_, context, located)
        changed = self.advance(pass_, new_module, new_facts, reported, before)
        if changed:  # the lines it changed, on its findings (engine/finding_edits.py)
            if self.origins is None:
                self.origins = LineOrigins(self.source)
            self.applied[applied:] = self.origins.step(self.state.code, self.applied[applied:])
        return changed

    def answered(self, pass_: Pass) -> bool:
        """The pass's findings of this round without running it (True), when running it
        again would change nothing or must not happen."""
        if pass_.checks_as_written:
            if pass_.id in self.checked:  # once, on the code as written: never on a rewrite of it
                self.last_round.extend(self.checked[pass_.id])
                return True
        elif not pass_.runs_first_once and self.state.api == PRE_05:
            # their rewrites are nnsight 0.5+ code: they would break it; one that
            # explains says, once, what it would do (no construct left without a word)
            if pass_.explains:
                if pass_.id not in self.explained:
                    self.explained[pass_.id] = _explained(pass_, self.state, self.source, self.options,
                                                          self.migrated is not None)
                self.last_round.extend(self.explained[pass_.id])
            return True
        if _migrating(pass_) and self.migrated is not None:
            # migration runs once, on the code as written: on its own output it would
            # take `h.output[0]` (a batch row) for a pre-0.5 tuple again
            self.last_round.extend(self.migrated)
            return True
        seen = self.stable.get(pass_.id)
        # reporting pre-0.5 idioms looks at the code as written: once is enough
        if seen is not None and (seen[0] is self.state.module or pass_.report_only):
            self.last_round.extend(seen[1])
            return True
        return False

    def run_pass(self, pass_: Pass) -> tuple[cst.Module, list[Finding], Context] | None:
        """The pass run on the current version: its tree, its findings placed in the
        original, its context; None when it failed (the code stays as it was)."""
        context = Context(self.options, self.state.server, left_on_server=self.left_on_server)
        if self.suppressing:
            context.suppressed = _suppression_check(self.suppressions, self.state, self.source, pass_.id)
        try:
            new_module = pass_.run(self.state.module, self.state.facts, context)
            located = _locate(context.findings, self.state, self.source, pass_.id) if context.findings else []
            if self.added_by and located:
                located = [_naming_added(f, self.added_by) for f in located]
        except RecursionError:
            raise
        except Exception as error:  # a pass that fails leaves the code as it was
            self.last_round.append(_internal_error(pass_.id, error))
            if pass_.checks_as_written:
                self.checked[pass_.id] = [self.last_round[-1]]
            return None
        if self.suppressing:
            located, keep = _enforce_suppressions(self.suppressions, located)
            if not keep:
                new_module, context.unreturned, context.introduced = self.state.module, set(), set()
        return new_module, located, context

    def lowered_for_06(self, pass_: Pass, new_module: cst.Module, located: list[Finding],
                       context: Context) -> tuple[cst.Module, Facts | None, list[Finding]]:
        """The rewrite lowered for nnsight 0.6, its facts and findings; or the version as it
        was when it cannot be shown to run there."""
        try:
            lowered, new_facts, copies, unbound = _for_06(self.state, new_module, self.options)
        except RecursionError:
            raise
        except Exception as error:  # the rewrite cannot be shown to run on 0.6: left out
            context.unreturned, context.introduced = set(), set()
            return self.state.module, None, [_internal_error(pass_.id, error)]
        if unbound:  # the rewrite would not run on nnsight 0.6: the code stays as it was
            located = [_not_on_06(f, unbound) for f in located]
            context.unreturned, context.introduced = set(), set()
            return self.state.module, None, located
        context.introduced |= copies
        return lowered, new_facts, located

    def record(self, pass_: Pass, context: Context, located: list[Finding]) -> list[Finding]:
        """The pass run's names and findings kept; returns those not applied (most pass
        runs have none at all)."""
        if context.unreturned:
            self.unreturned |= context.unreturned
        if context.introduced:
            self.introduced |= context.introduced
            self.added_by.update(dict.fromkeys(context.introduced - self.added_by.keys(), pass_.id))
        reported = located
        if located:
            self.applied.extend(f for f in located if f.status is Status.APPLIED)
            reported = [f for f in located if f.status is not Status.APPLIED]
            self.last_round.extend(reported)
            if pass_.explains:
                self.refused.extend(reported)
        if _migrating(pass_):
            self.migrated = reported
        if pass_.checks_as_written:
            self.checked[pass_.id] = reported
        return reported

    def advance(self, pass_: Pass, new_module: cst.Module, new_facts: Facts | None, reported: list[Finding],
                before: Cost) -> bool:
        """The pass's version becomes the current one when its code differs (True)."""
        positions = None
        if new_module is self.state.module:
            code = self.state.code
        else:  # the code of the new version, and where its nodes are, in one generation
            code, positions = code_and_positions(new_module)
        if code == self.state.code:
            self.stable[pass_.id] = (self.state.module, reported)
            return False
        api = None if pass_.runs_first_once else self.state.api  # only migration changes it
        if new_facts is None:
            new_facts = _analyze_version(new_module, self.state.facts, self.options)
        self.state = _State(new_module, new_facts, code, self.options, _positions=positions, _api=api,
                            lineage=self.state.lineage)
        self.deltas[pass_.id] = _add(self.deltas[pass_.id], _diff(self.state.cost, before))
        return True

    def result(self, with_edits: bool) -> Result:
        """The run's Result, once no round changes the code."""
        state, passes, source, last_round = self.state, self.passes, self.source, self.last_round
        if self.migrated is not None and state.api == PRE_05 and \
                any(not (p.runs_first_once or p.checks_as_written) for p in passes):
            migration = next(p for p in passes if p.runs_first_once)
            last_round.append(_partial_migration(migration.id, state.facts, self.migrated))
        code = state.code
        applied = [f for f in self.applied if f.evidence is None or f.evidence in code]  # not undone later
        last_round += _still_refused(self.refused, applied, last_round)
        findings = tuple(sorted(applied + last_round, key=lambda f: (f.range.start, f.pass_id)))
        unreturned, introduced = self.unreturned, self.introduced
        return Result(
            source=source,
            code=code,
            findings=findings,
            costs=tuple(_chain(self.initial_cost, [p for p in passes if not p.report_only], self.deltas)),
            edits=tuple(text_edits(source, code)) if with_edits else (),
            assumptions=tuple(assumptions(self.options) + self.notes),
            unreturned=tuple(sorted(unreturned - introduced)) if code != source else (),
            introduced=tuple(sorted(introduced)) if code != source else (),
        )


def _migrating(pass_: Pass) -> bool:
    """Is this run of the pass the migration (which runs once, and changes the API)?"""
    return pass_.runs_first_once and not pass_.report_only


def _naming_added(finding: Finding, added_by: dict[str, str]) -> Finding:
    """A finding that speaks of a name an earlier pass added (`_ndif_rows`) says so: the
    user did not write it and would look for it in vain in the script as written."""
    text = finding.reason
    if not text or "`" not in text:
        return finding
    for name, pass_id in added_by.items():
        text = text.replace(f"`{name}`", f"`{name}` (which {pass_id} added)")
    return finding if text == finding.reason else dataclasses.replace(finding, reason=text)


def _analyze_version(module: cst.Module, first: Facts, options: Options) -> Facts:
    """The facts of a version of the tree a pass made from one whose facts are ``first``:
    the script's results stay those of the code as written."""
    return analyze(module, assume_remote=options.assume_remote, original_results=result_names(first))


def _for_06(state: "_State", new_module: cst.Module,
            options: Options) -> tuple[cst.Module, Facts, frozenset[str], list[str]]:
    """A pass's rewrite as nnsight 0.6 can run it, with its facts and the names of the
    copies it takes: lowered when it makes an outermost remote block read a local before
    binding it (engine/release_lowering.py); with the names still unbound on a 0.6 server
    when it cannot be (analysis/releases.py)."""
    facts = _analyze_version(new_module, state.facts, options)
    before = unbound_on_server(state.facts)
    unbound = unbound_on_server(facts) - before
    if not unbound:
        return new_module, facts, frozenset(), []
    lowered = lower_for_06(new_module, facts, options.reserved_names)
    if lowered is not None:
        module, copies = lowered
        lowered_facts = _analyze_version(module, state.facts, options)
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


def _passes_for(options: Options) -> list[Pass]:
    """The passes of a run, in pipeline order: those asked for, and, not asked for but not
    ignored, those that then report only (without --migrate, pre-0.5 code is reported)."""
    passes = []
    for cls in PASSES:
        if options.wants(cls.id, cls.opt_in):
            passes.append(cls())
        elif cls.reports_when_off and cls.id not in options.ignore:
            passes.append(cls(report_only=True))
    return passes


def _still_refused(refused: list[Finding], applied: list[Finding], last_round: list[Finding]) -> list[Finding]:
    """The refusals of earlier rounds by a pass that explains every construct, that its last
    round no longer makes and that no fix of it replaced: a loop whose inner loop became a
    session in round one is no longer a candidate in round two (it holds a session), but the
    reason it was refused in round one still stands."""
    taken = {(f.pass_id, f.range.start) for f in applied + last_round}
    kept: dict[tuple, Finding] = {}
    for finding in refused:
        key = (finding.pass_id, finding.range.start)
        if key not in taken:
            kept[key] = finding  # (the latest round's word on it)
    return list(kept.values())


def _explained(pass_: Pass, state: "_State", source: str, options: Options, migration_tried: bool) -> list[Finding]:
    """What ``pass_`` would do to pre-0.5 code, as findings not fixed: its rewrites are
    nnsight 0.5+ code, which the script's API would not run. Nothing is rewritten."""
    why = ("the migration to nnsight 0.5+ could not be done (the findings of migrate-api say why), and "
           "this rewrite is nnsight 0.5+ code" if migration_tried else
           f"{PRE_05_MESSAGE} ({legacy_summary(state.facts)}), and this rewrite is nnsight 0.5+ code: "
           "run with --migrate to migrate the script first")
    context = Context(options, state.server, rewrites_refused=why)
    try:
        pass_.run(state.module, state.facts, context)
        located = _locate(context.findings, state, source, pass_.id) if context.findings else []
    except RecursionError:
        raise
    except Exception:  # noqa: BLE001 - an explanation that fails explains nothing
        return []
    return [f for f in located if f.status is not Status.APPLIED]


def _partial_migration(pass_id: str, facts, not_migrated: list[Finding]) -> Finding:
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


def _internal_error(pass_id: str, error: Exception) -> Finding:
    return Finding(
        pass_id,
        f"{pass_id} could not handle this file and left it unchanged",
        Range.of(0, 0, 0, 0),
        Status.SKIPPED,
        reason=f"internal error: {type(error).__name__}: {error} (please report it)",
    )


def _untouched(source: str, stage: str, error: Exception) -> Result:
    return Result(source=source, code=source, findings=(_internal_error(stage, error),))


# every field adds up: numbers, and the multiset of downloads of unknown size
_COST_FIELDS = tuple(f.name for f in dataclasses.fields(Cost))
_fields_of = operator.attrgetter(*_COST_FIELDS)


def _diff(a: Cost, b: Cost) -> Cost:
    return Cost(*[x - y for x, y in zip(_fields_of(a), _fields_of(b))])


def _add(a: Cost, b: Cost) -> Cost:
    return Cost(*[_round(x + y) for x, y in zip(_fields_of(a), _fields_of(b))])


def _round(value):
    return round(value, 6) if isinstance(value, (float, Count)) else value


def _chain(initial: Cost, passes, deltas: dict[str, Cost]) -> list[PassCost]:
    """Per-pass costs that chain: each pass starts where the previous one ended, and its
    change is what it saved over all rounds of the fixed point."""
    rows, running = [], initial
    for pass_ in passes:
        after = _add(running, deltas[pass_.id])
        rows.append(PassCost(pass_.id, running, after))
        running = after
    return rows


def _suppression_check(suppressions: Suppressions, state: "_State", original: str, pass_id: str):
    """A node -> bool check of `# ndif-opt: ignore` comments (the version's positions and
    line map are computed on first use, and once)."""

    def check(node: cst.CSTNode) -> bool:
        where = state.place(node, original)
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


def _locate(raw: list[RawFinding], state: _State, original: str, pass_id: str) -> list[Finding]:
    if not raw:
        return []

    def located(node: cst.CSTNode) -> Range | None:
        return state.place(node, original)

    found = []
    for item in raw:
        rng = located(item.node) or Range.of(0, 0, 0, 0)
        last = located(item.through) if item.through is not None else None
        if last is not None and last.end > rng.end:
            rng = Range(rng.start, last.end)
        uses = tuple(r for r in map(located, item.uses) if r is not None)
        found.append(
            Finding(pass_id, item.message, rng, item.status, item.safety, item.reason, item.evidence, uses,
                    item.requests, state.lineage.subject(item.node, state.module), item.proposal)
        )
    return found


__all__ = ["WindowCache", "run_pipeline", "parse", "text_edits"]

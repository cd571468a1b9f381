"""The pass pipeline: a file parsed once, cut into windows, each run through the passes.

:func:`run_pipeline` decides the run's context (``RunContext``: the release the rewrite
targets, the file's names and results), optimizes each independent window of the file
after its prelude (engine/windows.py) and puts their results together; a file that must
run whole runs as one module. One module's run is a loop over the passes until stable, with
the steps of a declared table around each pass (engine/rounds.py, engine/steps.py).
"""

from __future__ import annotations

import ast
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.legacy_api import PRE_05_MESSAGE
from ndif_opt.analysis.releases import target_release
from ndif_opt.analysis.results import script_result_names
from ndif_opt.cost_model import assumptions
from ndif_opt.engine import windows
from ndif_opt.engine.line_diff import text_edits
from ndif_opt.engine.prefilter import uses_nnsight
from ndif_opt.engine.rounds import Run, Version, internal_error
from ndif_opt.engine.steps import COST_FIELDS, STEPS, cost_fields, rounded
from ndif_opt.engine.suppression import IGNORE_FILE
from ndif_opt.options import Options, RunContext
from ndif_opt.passes import PASSES, Pass
from ndif_opt.syntax.joined import Part, joined, parse_part
from ndif_opt.types import Cost, Edit, Finding, PassCost, Position, Range, Result, UnknownDownloads


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



class WindowCache:
    """Results of windows from earlier runs, for re-optimizing a file after an edit.

    An editor keeps one per document: after an edit only the windows whose text (with
    their prelude) changed run again. Bounded; safe to share between threads; a change
    of options, or of the run's context besides the window (the release, the file's
    names), empties it."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._results: OrderedDict[str, _Optimized] = OrderedDict()
        self._settings: tuple[Options, RunContext] | None = None
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, text: str, options: Options, run: RunContext) -> _Optimized | None:
        with self._lock:
            self._use(options, run)
            result = self._results.get(text)
            if result is not None:
                self._results.move_to_end(text)
                self.hits += 1
            return result

    def put(self, text: str, options: Options, run: RunContext, result: _Optimized) -> None:
        with self._lock:
            self._use(options, run)
            self._results[text] = result
            while len(self._results) > self.size:
                self._results.popitem(last=False)

    def _use(self, options: Options, run: RunContext) -> None:
        """Results of other settings do not apply: forget them (the lock is held). The
        window's results are in its text's key; the file's name changes no result."""
        settings = (options, dataclasses.replace(run, filename=None, results=None))
        if self._settings != settings:
            self._results.clear()
            self._settings = settings


def run_pipeline(source: str, options: Options, filename: str | None = None,
                 cache: WindowCache | None = None, *, prefiltered: bool = False) -> Result:
    """Optimize ``source``: window by window when it splits into independent parts.
    ``prefiltered``: the caller has seen ``uses_nnsight(source)`` say yes."""
    if not prefiltered and not uses_nnsight(source):
        check_syntax(source, filename)  # nothing to optimize, but bad input is still an error
        return Result(source=source, code=source)
    tree = _python_parse(source, filename)
    run = _file_context(options, source, filename, tree)
    plan = windows.plan(source, tree)
    if plan is not None and _whole_module_only(source, options):
        return _run_module(source, options, _with_edges(run, plan))
    if plan is not None:
        result = _run_windows(plan, source, options, run, cache, tree)
        if result is not None:
            return result
    # (a window's passes changed shared context: the whole module decides, edges and all)
    return _run_module(source, options, run)


def whole_module(source: str, options: Options, filename: str | None = None) -> Result:
    """The whole file optimized at once, with the windows' edges as the only trace of
    them: what the windowed run of :func:`run_pipeline` must give (a property test checks
    it; windows are a speed device and must not change what is optimized)."""
    if not uses_nnsight(source):
        return Result(source=source, code=source)
    tree = _python_parse(source, filename)
    run = _file_context(options, source, filename, tree)
    return _run_module(source, options, _with_edges(run, windows.plan(source, tree)))


def _with_edges(run: RunContext, plan: windows.Plan | None) -> RunContext:
    """The run with the edges of the file's windows: where the whole file runs at once
    for an option (migration, a file-wide suppression), a session does not cross them
    either, so the option changes nothing else of the output."""
    if plan is None:
        return run
    edges = frozenset(line for w in plan.windows if w.active for line in (w.start, w.end))
    return dataclasses.replace(run, window_edges=edges)


def _file_context(options: Options, source: str, filename: str | None = None,
                  tree: ast.Module | None = None) -> RunContext:
    """The run's context, decided for the whole file (a window alone may not show the file's
    imports, nor the names it leaves as results): the nnsight release the rewrite targets,
    the script's results (``tree``: the file's Python parse; without it the module's own
    analysis finds them)."""
    results = script_result_names(tree, source) if tree is not None else None
    return RunContext(filename, target_release(options.nnsight, source), results=results)


def _whole_module_only(source: str, options: Options) -> bool:
    """Migration rewrites imports and file-wide suppressions need the whole file."""
    return any(cls.runs_first_once and options.wants(cls.id, cls.opt_in) for cls in PASSES) \
        or IGNORE_FILE.search(source) is not None


def _run_windows(plan: windows.Plan, source: str, options: Options, run: RunContext,
                 cache: WindowCache | None = None, tree: ast.Module | None = None) -> Result | None:
    """Each window optimized after its prelude; None when the whole module must run.

    Fresh names a pass introduces avoid every name of the file, not only the window's.
    An import the passes add to a window (`import nnsight`) goes where they would put it in
    the whole file (``tree``: its Python parse), once."""
    run = dataclasses.replace(run, reserved_names=run.reserved_names | plan.names)
    active = [window for window in plan.windows if window.active]
    placed: dict[int, _Placed] = {}  # by window start
    for window, done in zip(active, _placed_all(plan, active, options, run, cache)):
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
                run: RunContext, cache: WindowCache | None = None) -> Iterator[_Placed | None]:
    """Each window's result in the file, each window taken when its result is asked for;
    none after one that gives up (the caller gives up there)."""
    for window, done in _optimized(plan, active, options, run, cache):
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
        tuple(field for cost in result.costs for field in (*cost_fields(cost.before), *cost_fields(cost.after))),
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
               run: RunContext, cache: WindowCache | None = None) -> Iterator[tuple[windows.Window, _Optimized]]:
    """Each window with its result, computed when asked for (a caller that stops early
    saves the rest; the next window is taken only then). ``run.results``: the file's results
    (a name a window binds may be a result because of code in another window)."""
    results = run.results or frozenset()
    context: dict[int, Part] = {}  # context chunks parsed once, shared by the windows they open
    for window in active:
        text = plan.text(window.start, window.end)
        prelude = plan.prelude_text(window)
        module_text = prelude + text
        mine = results & plan.names_in(window)
        key = module_text + "\0" + " ".join(sorted(mine))  # the same text may hold other results
        done = cache.get(key, options, run) if cache is not None else None
        if done is None:
            module = _window_module(plan, window, text, context)
            result = _run_module(module_text, options, dataclasses.replace(run, results=mine), module,
                                 with_edits=False)
            cut = plan.after_prelude(window, _without_added_import(result.code, prelude, text)[0])
            edits = text_edits(text, cut[0]) if cut is not None else []
            done = _Optimized(result, tuple(edits))
            if cache is not None:
                cache.put(key, options, run, done)
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
    size = len(COST_FIELDS)
    return [PassCost(rows[0][0][i], Cost(*totals[2 * i * size:(2 * i + 1) * size]),
                     Cost(*totals[(2 * i + 1) * size:(2 * i + 2) * size])) for i in range(width)]


def _column_sum(values: tuple) -> int | float | UnknownDownloads:
    """The values added up one after another, each sum rounded like ``add_costs``'s (so the
    file's costs are what adding its windows' costs pass by pass gives)."""
    if type(values[0]) is UnknownDownloads:
        return UnknownDownloads.total(values)  # (not rounded: a multiset)
    total = values[0]
    for value in values[1:]:
        total = rounded(total + value)
    return total


def _run_module(source: str, options: Options, run: RunContext | None = None,
                module: cst.Module | None = None, with_edits: bool = True,
                passes: list[Pass] | None = None) -> Result:
    """The passes over one module: a whole file, or a window's prelude and text (``module``:
    its parse, when the caller has it; a window's edits are taken of its own text, not
    here). Python's parser and the prefilter have looked at the file already (run_pipeline).
    ``run``: the run's context (the file's, when None). ``passes``: those to run, in order
    (default: the registry's, as ``options`` asks)."""
    if run is None:
        run = _file_context(options, source)
    if module is None:
        module = _libcst_parse(source, run.filename)
    try:
        facts = analyze(module, assume_remote=options.assume_remote, original_results=run.results)
        version = Version(module, facts, source, options)
    except RecursionError:
        raise
    except Exception as error:  # never crash on code we do not understand
        return _untouched(source, "analysis", error)
    passes = _passes_for(options) if passes is None else passes
    rounds = Run(source, options, run, version, passes, STEPS).rounds()
    if rounds.again():  # (the migration would leave containers empty: once more, refusing that)
        rounds = Run(source, options, run, version, passes, STEPS, earlier=rounds).rounds()
    return rounds.result(with_edits)


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


def _untouched(source: str, stage: str, error: Exception) -> Result:
    return Result(source=source, code=source, findings=(internal_error(stage, error),))


__all__ = ["WindowCache", "run_pipeline", "parse", "text_edits"]

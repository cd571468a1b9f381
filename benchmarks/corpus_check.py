"""Is ndif-opt truthful on code others wrote?

Every file of ``../shared/corpus/`` (public third-party NDIF code, used statically only:
never executed, never copied) goes through every mode — ``default``, ``--unsafe-fixes``,
``--migrate``, and the command line's ``--report --format json`` — and one table row says,
per file and mode:

* ``crash``: the optimizer raised (in-process, or the command line exited 1 or 3);
* ``parses``: the output parses (a notebook's code cells joined, IPython syntax dropped);
* ``idempotent``: optimizing the output again in the same mode changes nothing;
* ``no-edit``: fixed findings whose range overlaps no edit of the result (a finding that
  describes a change the output does not have);
* ``template``: messages matching a broken template (``these 0 … blocks``, ``1 requests``,
  a phrase said twice in a row, an unrendered ``{name}`` or ``None``, …);
* ``report``: fixed findings whose request counts (``Finding.requests``, the claim their
  ``N requests → M`` quotes) differ from the report's row for their pass — the row must
  fall by exactly the claims' sum, loops of unknown length (``7·N → N``) included — a
  fixed finding that quotes a request count without a claim, or a fall of
  session-hoisting or trace-fusion that no finding claims;
* ``misplaced``: findings not on their own statement — on a line that does not read like
  the code the finding is about, or said twice at one place (one of two equal statements
  left without it): :func:`ndif_opt.engine.origins.misplaced`; a notebook's, in their cells;
* ``counts``: findings whose numbers, as their text reads, differ from the table: the
  fixed findings of a pass that quote ``N requests → M``, ``N forward passes → M`` or
  ``layer evaluations N → M`` must add up to the fall of their pass's row in that column
  (when that fall is a number: one with an unknown `N` is judged by ``report``),
  and a finding not fixed may not quote more requests or forward passes than the script
  sends (a count for one call of a function no code calls, which the table leaves out, is
  not judged);
* ``cells merged``: a notebook's cells whose count changed, or a statement moved from one
  cell to another (:func:`statements_moved`); the same for a ``# %%`` script's cells, in a
  column of its own (a ``# %%`` script is a notebook to its user: issue 34);
* ``unserializable``: a value the optimized code sends back from a session (a saved name,
  a record appended to a ``_ndif_`` list) that is a module, a function, an open file... by
  the analysis' one rule (:func:`ndif_opt.analysis.wire.wire_problem`).

    python benchmarks/corpus_check.py              # the table, markdown
    python benchmarks/corpus_check.py --only gptj  # files whose name contains "gptj"
    python benchmarks/corpus_check.py --json out.json

Exit status 1 when any cell shows a problem, so CI or a reviewer can run it as a check.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))  # measure this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reach import output_parses  # noqa: E402

import libcst as cst  # noqa: E402

from ndif_opt import Status, optimize  # noqa: E402
from ndif_opt.analysis.facts import Remote, analyze  # noqa: E402
from ndif_opt.analysis.wire import wire_problem  # noqa: E402
from ndif_opt.engine.origins import misplaced  # noqa: E402
from ndif_opt.frontends.config import load_options  # noqa: E402
from ndif_opt.frontends.files import read_source  # noqa: E402
from ndif_opt.engine.cells import statements_moved
from ndif_opt.frontends.notebook import is_notebook, notebook_script, optimize_notebook  # noqa: E402
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.rewrite import unsave  # noqa: E402
from ndif_opt.syntax.walk import find_nodes  # noqa: E402
from ndif_opt.types import is_known  # noqa: E402
from ndif_opt.output.text import plain_count  # noqa: E402
from ndif_opt.wording import broken_template  # noqa: E402

CORPUS = PROJECT.parent / "shared" / "corpus"
#: mode -> the options it overrides
MODES = {"default": {}, "unsafe": {"unsafe_fixes": True}, "migrate": {"migrate": True}}
CLI_MODE = "report-json"

REQUESTS_CLAIM = re.compile(r"requests? → ")
# the changes a finding's text quotes, by the column of the table they are in: `20 forward
# passes → 4`, `layer evaluations 240 → 168` (numbers only: a count with a loop's symbol is
# judged through its claim, by the report column)
_NUMBER = r"(\d[\d,]*)"
QUOTED_CHANGES = {
    "requests": re.compile(_NUMBER + r" requests? → " + _NUMBER + r"\b(?![·\w])"),
    "forward_passes": re.compile(_NUMBER + r" forward pass(?:es)? → " + _NUMBER + r"\b(?![·\w])"),
    "layer_evaluations": re.compile(r"layer evaluations " + _NUMBER + r" → " + _NUMBER + r"\b(?![·\w])"),
}
QUOTED_COUNTS = {
    "requests": re.compile(_NUMBER + r" (?:separate remote )?requests?\b(?! →)"),
    "forward_passes": re.compile(_NUMBER + r" forward pass(?:es)?\b(?! →)"),
}
UNCALLED = "no code here calls"


@dataclass
class Cell:
    """What one mode did to one file."""

    crash: str | None = None
    parses: bool = True
    idempotent: bool = True
    no_edit: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    counts: list[str] = field(default_factory=list)
    cells_merged: list[str] = field(default_factory=list)
    script_cells_merged: list[str] = field(default_factory=list)  # a `# %%` script's cells
    unserializable: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = [f"crash: {self.crash}"] if self.crash else []
        found += [] if self.parses else ["output does not parse"]
        found += [] if self.idempotent else ["not idempotent"]
        found += [f"no edit under: {m}" for m in self.no_edit]
        found += [f"template: {m}" for m in self.templates]
        found += [f"report: {m}" for m in self.report]
        found += [f"misplaced: {m}" for m in self.misplaced]
        found += [f"counts: {m}" for m in self.counts]
        found += [f"cells merged: {m}" for m in self.cells_merged]
        found += [f"`# %%` cells merged: {m}" for m in self.script_cells_merged]
        found += [f"unserializable value returned: {m}" for m in self.unserializable]
        return found


# -- one mode ------------------------------------------------------------------------------


def optimize_in(path: Path, text: str, mode: str):
    return optimized_in(path, text, mode)[0]


def optimized_in(path: Path, text: str, mode: str):
    """(the result, a notebook's result by cells or None)."""
    options = load_options(path, **MODES[mode])
    if is_notebook(str(path)):
        notebook = optimize_notebook(text, options=options, filename=str(path))
        return notebook.as_result(), notebook
    return optimize(text, filename=str(path), options=options), None


def overlaps(a, b) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line, b.start.character) <= (a.end.line, a.end.character)


def fixed_without_edit(result) -> list[str]:
    """Fixed findings with no edit under their range, nor under the code they name as
    its uses (an element reduction edits the block's fill and the client's reads)."""
    return [f"{f.pass_id} line {f.range.start.line + 1}: {f.message[:70]}"
            for f in result.findings
            if f.status is Status.APPLIED
            and not any(overlaps(where, e.range) for where in (f.range, *f.uses) for e in result.edits)]


def broken_templates(result) -> list[str]:
    found = [(broken_template(f.message) or broken_template(f.reason or ""), f) for f in result.findings]
    return [f"{name}: {f.message[:90]}" for name, f in found if name]


def report_disagreements(result) -> list[str]:
    """Every fixed finding's request counts equal the report's: its pass's row falls by
    exactly the sum of the claims (``Finding.requests``: the counts its message quotes,
    from the estimate the table is made of), and a message that quotes `N requests → M`
    carries its claim (one quoted per call of a function no code calls does not: the table
    leaves that function out)."""
    disagreements = []
    for row in result.costs:
        fixed = [f for f in result.findings if f.pass_id == row.pass_id and f.status is Status.APPLIED]
        claims = [f.requests for f in fixed if f.requests is not None]
        unclaimed = [f for f in fixed if f.requests is None and REQUESTS_CLAIM.search(f.message)
                     and "no code here calls" not in f.message]
        fall = row.before.requests - row.after.requests
        claimed = sum((before - after for before, after in claims), 0)
        shown = f"the report {plain_count(row.before.requests)} → {plain_count(row.after.requests)}"
        if claims and fall != claimed:
            disagreements.append(f"{row.pass_id}: findings claim {plain_count(claimed)} fewer requests, {shown}")
        for finding in unclaimed:
            disagreements.append(f"{row.pass_id} line {finding.range.start.line + 1}: quotes requests the "
                                 f"estimate does not: {finding.message[:70]}")
        if fall != 0 and not claims and row.pass_id in {"session-hoisting", "trace-fusion"}:
            disagreements.append(f"{row.pass_id}: {shown} but no finding says so")
    return disagreements


def misplaced_findings(path: Path, text: str, result, notebook) -> list[str]:
    """Findings not on their own statement (a notebook's judged in their cells)."""
    if notebook is None:
        return [f"{f.pass_id} line {f.range.start.line + 1}: `{f.subject[:50]}`"
                for f in misplaced(result.findings, text)]
    cells = cells_of(path, text) or {}
    found = []
    for index, code in cells.items():
        mine = [item.finding for item in notebook.findings if item.cell == index]
        found += [f"{f.pass_id} cell {index + 1} line {f.range.start.line + 1}: `{f.subject[:50]}`"
                  for f in misplaced(mine, code)]
    return found


def count_disagreements(result) -> list[str]:
    """Findings whose numbers, as their text reads, are not the table's (see the module's
    docstring: ``counts``)."""
    found = []
    if not result.costs:
        return found
    first = result.costs[0].before
    for row in result.costs:
        fixed = [f for f in result.findings if f.pass_id == row.pass_id and f.status is Status.APPLIED
                 and UNCALLED not in f.message]
        for column, pattern in QUOTED_CHANGES.items():
            quoted = [(f, match) for f in fixed for match in pattern.finditer(f.message)]
            if not quoted:
                continue
            claimed = sum(_number(m.group(1)) - _number(m.group(2)) for _, m in quoted)
            before, after = getattr(row.before, column), getattr(row.after, column)
            if not is_known(before - after):
                # the fall holds an `N` that only findings quoting it (`N requests → 1`, which
                # this text check cannot add up) account for: report_disagreements compares
                # their claims exactly
                continue
            if before - after != claimed:
                lines = ", ".join(str(f.range.start.line + 1) for f, _ in quoted)
                found.append(f"{row.pass_id} (line {lines}): findings say {claimed} fewer {column.replace('_', ' ')}, "
                             f"the table {plain_count(before)} → {plain_count(after)}")
    for finding in result.findings:
        if finding.status is Status.APPLIED or UNCALLED in finding.message:
            continue
        for column, pattern in QUOTED_COUNTS.items():
            total = getattr(first, column)
            for match in pattern.finditer(finding.message + " " + (finding.reason or "")):
                if is_known(total) and _number(match.group(1)) > total:
                    found.append(f"{finding.pass_id} line {finding.range.start.line + 1}: quotes "
                                 f"`{match.group(0)}`, the script sends {plain_count(total)}")
    return found


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def cells_of(path: Path, text: str) -> dict[int, str] | None:
    """Cell index -> code of a notebook's code cells (IPython lines blanked), or of a
    script's ``# %%`` cells; None for a script without cells."""
    if is_notebook(str(path)):
        found = {}
        for index, cell in enumerate(json.loads(text)["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                found[index] = "\n".join("" if line.lstrip().startswith(("!", "%")) else line
                                         for line in source.splitlines())
        return found
    parts = re.split(r"^# ?%%.*$", text, flags=re.M)
    return dict(enumerate(parts)) if len(parts) > 1 else None


def merged_cells(path: Path, before: str, after: str) -> list[str]:
    old, new = cells_of(path, before), cells_of(path, after)
    if old is None:
        return []
    if new is None or len(new) != len(old):
        return [f"{len(old)} cells became {0 if new is None else len(new)}"]
    return [f"`{line[:60]}` from cell {a + 1} to cell {b + 1}" for a, b, line in statements_moved(old, new)]


def unserializable_returns(path: Path, code: str) -> list[str]:
    """Names the optimized code saves or records in a remote session whose value cannot
    come back from NDIF."""
    try:
        module = cst.parse_module(notebook_script(code) if is_notebook(str(path)) else code)
    except (cst.ParserSyntaxError, ValueError):
        return []
    facts = analyze(module)
    found = []
    for block in facts.blocks:
        if block.parent is not None or block.method != "session" or block.remote.state is Remote.NO:
            continue
        for name in sorted(_sent_back(block.node)):
            problem = wire_problem(name, [block.node], facts)
            if problem:
                found.append(problem)
    return found


def _sent_back(block: cst.With) -> set[str]:
    """Names a session saves (`x = x.save()`-like, `nnsight.save(x)`) or appends to its
    records (`_ndif_log.append((a, b))`)."""
    names: set[str] = set()
    for node in find_nodes(block, lambda n: isinstance(n, cst.Call)):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "append" and isinstance(func.value, cst.Name) \
                and func.value.value.startswith("_ndif_") and node.args:
            value = node.args[0].value
            items = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            names |= {item.value for item in items if isinstance(item, cst.Name)}
        elif is_save_call(node):
            saved = unsave(node)
            if isinstance(saved, cst.Name):
                names.add(saved.value)
    return names


def check_mode(path: Path, text: str, mode: str) -> Cell:
    try:
        result, notebook = optimized_in(path, text, mode)
    except Exception as error:  # noqa: BLE001 - a crash is what we measure
        return Cell(crash=f"{type(error).__name__}: {error}"[:120])
    cell = Cell(parses=output_parses(path, result.code), no_edit=fixed_without_edit(result),
                templates=broken_templates(result), report=report_disagreements(result),
                misplaced=misplaced_findings(path, text, result, notebook), counts=count_disagreements(result),
                cells_merged=merged_cells(path, text, result.code) if is_notebook(str(path)) else [],
                script_cells_merged=[] if is_notebook(str(path)) else merged_cells(path, text, result.code),
                unserializable=unserializable_returns(path, result.code))
    try:
        cell.idempotent = optimize_in(path, result.code, mode).code == result.code
    except Exception as error:  # noqa: BLE001
        cell.crash = f"on its own output: {type(error).__name__}: {error}"[:120]
    return cell


def check_cli_report(path: Path) -> Cell:
    """The command line's JSON report: exits 0 (nothing to fix) or 1 (fixes found), and
    stdout is one JSON document."""
    run = subprocess.run([sys.executable, "-m", "ndif_opt", str(path), "--report", "--format", "json"],
                         capture_output=True, text=True, cwd=PROJECT, timeout=300)
    if run.returncode not in (0, 1):
        return Cell(crash=f"exit {run.returncode}: {run.stderr.strip()[:100]}")
    try:
        json.loads(run.stdout)
    except ValueError as error:
        return Cell(crash=f"stdout is not JSON: {error}")
    return Cell()


def check_file(path: Path) -> dict[str, Cell]:
    try:
        text = read_source(str(path)).text
    except Exception as error:  # noqa: BLE001
        return {mode: Cell(crash=f"unreadable: {error}") for mode in (*MODES, CLI_MODE)}
    cells = {mode: check_mode(path, text, mode) for mode in MODES}
    cells[CLI_MODE] = check_cli_report(path)
    return cells


# -- the table -----------------------------------------------------------------------------


def mark(cell: Cell) -> str:
    problems = cell.problems()
    return "ok" if not problems else f"**{len(problems)}**"


def render(rows: dict[str, dict[str, Cell]]) -> str:
    modes = [*MODES, CLI_MODE]
    lines = ["| file | " + " | ".join(modes) + " | misplaced | counts ≠ table | cells merged | `# %%` cells merged "
             "| unserializable returned |",
             "|---|" + "---|" * (len(modes) + 5)]
    lines += [f"| {name} | " + " | ".join(mark(cells[m]) for m in modes)
              + f" | {sum(len(c.misplaced) for c in cells.values())}"
              + f" | {sum(len(c.counts) for c in cells.values())}"
              + f" | {sum(len(c.cells_merged) for c in cells.values())}"
              + f" | {sum(len(c.script_cells_merged) for c in cells.values())}"
              + f" | {sum(len(c.unserializable) for c in cells.values())} |"
              for name, cells in rows.items()]
    details = [f"- {name} [{mode}] {problem}"
               for name, cells in rows.items() for mode, cell in cells.items()
               for problem in cell.problems()]
    total = sum(1 for cells in rows.values() for cell in cells.values() if cell.problems())
    merged = sum(len(c.cells_merged) for cells in rows.values() for c in cells.values())
    script_merged = sum(len(c.script_cells_merged) for cells in rows.values() for c in cells.values())
    unserializable = sum(len(c.unserializable) for cells in rows.values() for c in cells.values())
    placed = sum(len(c.misplaced) for cells in rows.values() for c in cells.values())
    counts = sum(len(c.counts) for cells in rows.values() for c in cells.values())
    lines += ["", f"{len(rows)} files × {len(modes)} modes: {total} cells with problems; "
                  f"findings misplaced {placed}; findings whose counts differ from the table {counts}; "
                  f"cells merged {merged} (`# %%` scripts: {script_merged}); "
                  f"unserializable values returned {unserializable}"]
    return "\n".join(lines + ([""] + details if details else []))


def corpus_files(directory: Path, only: str | None) -> list[Path]:
    files = sorted([*directory.glob("*.py"), *directory.glob("*.ipynb")])
    return [f for f in files if only is None or only in f.name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the raw data here")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus_check: {args.corpus}: no such directory", file=sys.stderr)
        return 2
    rows = {path.name: check_file(path) for path in corpus_files(args.corpus, args.only)}
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(
            {name: {mode: cell.__dict__ for mode, cell in cells.items()} for name, cells in rows.items()},
            indent=1))
    return 1 if any(cell.problems() for cells in rows.values() for cell in cells.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

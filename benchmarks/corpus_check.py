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
* ``report``: fixed findings that claim ``N requests → M`` while the report's row for
  their pass falls by less (or a fall of session-hoisting or trace-fusion that no
  finding claims).

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

from ndif_opt import Status, optimize  # noqa: E402
from ndif_opt.frontends.config import load_options  # noqa: E402
from ndif_opt.frontends.files import read_source  # noqa: E402
from ndif_opt.frontends.notebook import is_notebook, optimize_notebook  # noqa: E402
from ndif_opt.output.wording import broken_template  # noqa: E402

CORPUS = PROJECT.parent / "shared" / "corpus"
#: mode -> the options it overrides
MODES = {"default": {}, "unsafe": {"unsafe_fixes": True}, "migrate": {"migrate": True}}
CLI_MODE = "report-json"

REQUESTS_CLAIM = re.compile(r"(\d+)(?: or more)? requests? → (\d+)")


@dataclass
class Cell:
    """What one mode did to one file."""

    crash: str | None = None
    parses: bool = True
    idempotent: bool = True
    no_edit: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = [f"crash: {self.crash}"] if self.crash else []
        found += [] if self.parses else ["output does not parse"]
        found += [] if self.idempotent else ["not idempotent"]
        found += [f"no edit under: {m}" for m in self.no_edit]
        found += [f"template: {m}" for m in self.templates]
        found += [f"report: {m}" for m in self.report]
        return found


# -- one mode ------------------------------------------------------------------------------


def optimize_in(path: Path, text: str, mode: str):
    options = load_options(path, **MODES[mode])
    if is_notebook(str(path)):
        return optimize_notebook(text, options=options, filename=str(path)).as_result()
    return optimize(text, filename=str(path), options=options)


def overlaps(a, b) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line, b.start.character) <= (a.end.line, a.end.character)


def fixed_without_edit(result) -> list[str]:
    return [f"{f.pass_id} line {f.range.start.line + 1}: {f.message[:70]}"
            for f in result.findings
            if f.status is Status.APPLIED and not any(overlaps(f.range, e.range) for e in result.edits)]


def broken_templates(result) -> list[str]:
    found = [(broken_template(f.message) or broken_template(f.reason or ""), f) for f in result.findings]
    return [f"{name}: {f.message[:90]}" for name, f in found if name]


def report_disagreements(result) -> list[str]:
    """Fixed findings that claim `N requests → M` agree with their pass's report row: the
    row falls by at least the claims' sum. (At least: a finding counts one run of its
    code, and a helper called twice sends its requests twice.)"""
    disagreements = []
    for row in result.costs:
        claims = [REQUESTS_CLAIM.search(f.message) for f in result.findings
                  if f.pass_id == row.pass_id and f.status is Status.APPLIED]
        claims = [c for c in claims if c]
        fall = row.before.requests - row.after.requests
        claimed = sum(int(c.group(1)) - int(c.group(2)) for c in claims)
        bounded = any("or more" in c.group(0) for c in claims)
        if claims and fall < claimed:
            disagreements.append(f"{row.pass_id}: findings claim {claimed}{' or more' if bounded else ''} "
                                 f"fewer requests, the report {row.before.requests} → {row.after.requests}")
        if fall > 0 and not claims and row.pass_id in {"session-hoisting", "trace-fusion"}:
            disagreements.append(f"{row.pass_id}: report {row.before.requests} → {row.after.requests} "
                                 "but no finding says so")
    return disagreements


def check_mode(path: Path, text: str, mode: str) -> Cell:
    try:
        result = optimize_in(path, text, mode)
    except Exception as error:  # noqa: BLE001 - a crash is what we measure
        return Cell(crash=f"{type(error).__name__}: {error}"[:120])
    cell = Cell(parses=output_parses(path, result.code), no_edit=fixed_without_edit(result),
                templates=broken_templates(result), report=report_disagreements(result))
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
    lines = ["| file | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    lines += [f"| {name} | " + " | ".join(mark(cells[m]) for m in modes) + " |"
              for name, cells in rows.items()]
    details = [f"- {name} [{mode}] {problem}"
               for name, cells in rows.items() for mode, cell in cells.items()
               for problem in cell.problems()]
    total = sum(1 for cells in rows.values() for cell in cells.values() if cell.problems())
    lines += ["", f"{len(rows)} files × {len(modes)} modes: {total} cells with problems"]
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

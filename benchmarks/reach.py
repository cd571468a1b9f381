"""How far does ndif-opt reach on code it was not written for?

Two sets of scripts outside the project (see their README.md files):

* the devset, ``../shared/devset/[0-9]*.py``: 24 naive NDIF scripts, each ending with a
  ``# expert:`` comment that states how many requests an NDIF expert's version sends.
  For each file: the static request estimate before -> after (default mode and with
  ``--unsafe-fixes``), the expert's count, and whether the optimized count reaches it
  (<= expert). Files 17 ("already optimal") and 18 ("must stay a loop") are negative
  controls: they are not "improvable" and are checked to stay as they are. With
  ``--verify`` each file also runs through ``ndif-opt verify --format json`` (original and
  optimized script on a tiny model through the NDIF emulation), which gives OK / MISMATCH / FAILED /
  ERROR and the *measured* requests before -> after; a verified count replaces the static
  one, and a verified file reaches the expert count only when verify said OK. A static
  count of 0 (the cost model found no request) never counts as reaching it.
* the corpus, ``../shared/corpus/*.py`` and ``*.ipynb``: public third-party code, used
  statically only (never executed). For each file and mode: requests before -> after,
  crashes (any exception, with its type and message), whether the output parses
  (``ast.parse``; a notebook's code cells joined, IPython syntax dropped), and whether it
  is idempotent (optimizing the output again changes nothing). The README's A1 files
  (a loop of remote traces) are marked, and the summary counts in how many of them the
  requests fell in default mode.

The corpus A1 files are also compared with the expert's request count of
``benchmarks/expert_counts.py`` (my reading of each file), as the devset is with its
``# expert:`` comments, on the run that counts: the file as its author intends it (the
author's own switch turned on, where expert_counts names one) and with ``--migrate`` when it
was written for nnsight before 0.5 (issue 19, decided in issue 33). A file is reached at the
expert's count (static after <= expert, not 0, from a static before above it) or with a
named reason (every loop or run it leaves as it is has a finding; a callback or a
string-built trace: a finding names it). Summary: "corpus A1: N/23 at the expert's count or
with a named reason; requests fall in M/23".

Then a histogram of why findings were not fixed: every finding of both sets in default mode
whose status is not "applied", its reason with `backquoted` names replaced by X and numbers
by N, the 25 most common.

No silent refusal (issue 33.1, ``benchmarks/refusals.py``): every loop (at any depth, in
functions too) and every run of remote statements of one suite that sends more than one
request as the static cost model counts it, in the devset (default mode) and the corpus
(the run that counts), is found again in the optimized script; those left as they are
(requests not reduced) are checked for a finding (any status but applied) on their lines.
Printed: the counts, the ones with no finding (file, line, first line of code) — the
target is none — and a histogram of the reasons on the ones left, normalized as above.

    python benchmarks/reach.py                          # static only, a few seconds
    python benchmarks/reach.py --verify                 # + verify each devset file (10-30 s each)
    python benchmarks/reach.py --verify --verify-unsafe # + verify with --unsafe-fixes too (--atol 1e-5)
    python benchmarks/reach.py --only 02_ --verify      # one file
    python benchmarks/reach.py --json reach.json        # also write the raw data
    python benchmarks/reach.py --verify --nnsight 0.6   # rewritten for nnsight 0.6, verified in the nnterp venv

Options: ``--devset DIR``, ``--corpus DIR``, ``--timeout S`` (per verify run, 300),
``--jobs N`` (verify runs at a time, 2). The report is markdown, to paste into docs/reach.md.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))  # measure this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ndif_opt import Status, optimize  # noqa: E402
from ndif_opt.frontends.config import load_options  # noqa: E402
from ndif_opt.frontends.files import read_source  # noqa: E402
from ndif_opt.frontends.notebook import is_notebook, notebook_script, optimize_notebook  # noqa: E402
from ndif_opt.output.text import direction, plain_count, totals  # noqa: E402
from ndif_opt.types import is_known  # noqa: E402
from ndif_opt.wording import human_bytes

from expert_counts import as_intended, check_against_readme, expert_for  # noqa: E402
from refusals import finding_lines, measure, where  # noqa: E402

SHARED = PROJECT.parent / "shared"
MODES = ("default", "unsafe")
#: devset negative controls (devset README): file number -> what must hold
CONTROLS = {"17": "already optimal", "18": "must stay a loop"}
# A `# %%` script is a notebook to its user, and ndif-opt never merges its cells (issue 34:
# a session never crosses a cell marker). Where the devset's expert merged cells, the file
# is held to the count it can reach with its cells kept: (count, why), reported beside it.
CELLS_KEPT = {
    "14_notebook_residual_norms.py": (
        3, "cells kept: one request for each of the three cells that send (the expert's 1 merges them)"),
}
HISTOGRAM_SIZE = 25
UNSAFE_ATOL = "1e-5"  # see verify_command
NNSIGHT: str | None = None  # --nnsight: the release every rewrite targets (else each file's own)


# -- running the optimizer ----------------------------------------------------------------


def optimize_file(path: Path, text: str, unsafe: bool, migrate: bool = False):
    """The optimizer's Result for one file, as the command line computes it (notebooks
    through the notebook pipeline, options from any pyproject.toml that applies)."""
    options = load_options(path, unsafe_fixes=unsafe, nnsight=NNSIGHT, migrate=migrate or None)
    if is_notebook(str(path)):
        return optimize_notebook(text, options=options, filename=str(path)).as_result()
    return optimize(text, filename=str(path), options=options)


def refusal_run(path: Path, result, migrate: bool) -> dict:
    """:func:`refusals.measure` on one run: the loops and runs of statements that send more
    than one request, and the findings on each one the optimizer left as it is. A notebook
    is measured on its joined code cells (its findings located there)."""
    options = load_options(path, nnsight=NNSIGHT, migrate=migrate or None)
    notebook = getattr(result, "notebook", None)
    if notebook is not None:
        source, output = notebook.result.source, notebook.result.code
        findings = finding_lines(notebook.result, notebook)
    else:
        source, output, findings = result.source, result.code, finding_lines(result)
    try:
        measured = measure(source, output, findings, options)
    except Exception as error:  # noqa: BLE001 - a crash of the measurement is reported, not fatal
        return {"constructs": 0, "reduced": 0, "left": [], "walk_error": f"{type(error).__name__}: {error}"}
    for construct in measured["left"]:
        construct["where"] = where(source, construct["start"], notebook is not None)
    return measured


def output_parses(path: Path, code: str) -> bool:
    try:
        ast.parse(notebook_script(code) if is_notebook(str(path)) else code)
    except (SyntaxError, ValueError):
        return False
    return True


def unfixed_findings(result) -> list[dict]:
    return [
        {"pass_id": f.pass_id, "status": f.status.value, "message": f.message, "reason": f.reason,
         "line": f.range.start.line + 1}
        for f in result.findings
        if f.status is not Status.APPLIED
    ]


def static_run(path: Path, text: str, unsafe: bool, checks: bool, migrate: bool = False,
               refusals: bool = False) -> dict:
    """One mode on one file. ``checks``: also whether the output parses and is idempotent;
    ``refusals``: also the loops and runs it leaves as they are (:func:`refusal_run`)."""
    try:
        result = optimize_file(path, text, unsafe, migrate)
    except Exception as error:  # noqa: BLE001 - a crash is what we measure
        return {"requests_before": None, "requests_after": None, "changed": False,
                "crash": f"{type(error).__name__}: {error}", "unfixed": []}
    before, after = totals(result)
    run = {"requests_before": before.requests, "requests_after": after.requests,
           "changed": result.changed, "crash": None, "unfixed": unfixed_findings(result)}
    if refusals:
        run["refusals"] = refusal_run(path, result, migrate)
    if checks:
        run["parses"] = output_parses(path, result.code)
        try:
            run["idempotent"] = optimize_file(path, result.code, unsafe, migrate).code == result.code
        except Exception as error:  # noqa: BLE001
            run["idempotent"] = False
            run["crash"] = f"on its own output: {type(error).__name__}: {error}"
    return run


def read_text(path: Path) -> tuple[str | None, dict | None]:
    try:
        return read_source(str(path)).text, None
    except Exception as error:  # noqa: BLE001
        return None, {"crash": f"{type(error).__name__}: {error}", "requests_before": None,
                      "requests_after": None, "changed": False, "unfixed": []}


def static_runs(path: Path, checks: bool = False, refusals: bool = False) -> dict:
    """Both modes on one file; ``refusals`` measured in default mode."""
    text, crash = read_text(path)
    if text is None:
        return {mode: dict(crash) for mode in MODES}
    return {mode: static_run(path, text, mode == "unsafe", checks, refusals=refusals and mode == "default")
            for mode in MODES}


# -- verify -------------------------------------------------------------------------------


def verify_command(path: Path, unsafe: bool) -> list[str]:
    script = Path(sys.executable).with_name("ndif-opt")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "ndif_opt.frontends.cli"]
    # unsafe fixes may change results in the last bits (invoke batching: ~1e-7 in fp32, as
    # its finding says): compared with that tolerance, safe ones exactly
    unsafe_flags = ["--unsafe-fixes", "--atol", UNSAFE_ATOL] if unsafe else []
    release = ["--nnsight", NNSIGHT] if NNSIGHT else []
    return base + ["verify", str(path), "--format", "json"] + unsafe_flags + release


def run_in_own_group(command: list[str], cwd: Path, timeout: float,
                     env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of ``command`` run in its own process group (in ``env``,
    else this process's environment); None when the group was killed at ``timeout`` seconds."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None
    return process.returncode, stdout, stderr


def run_verify(path: Path, unsafe: bool, timeout: float) -> dict:
    """``ndif-opt verify`` in a subprocess (its own process group, killed on timeout)."""
    started = time.monotonic()
    ran = run_in_own_group(verify_command(path, unsafe), PROJECT, timeout)
    if ran is None:
        return {"outcome": "ERROR", "detail": f"timeout after {timeout:.0f} s",
                "seconds": time.monotonic() - started}
    outcome = verify_outcome(*ran)
    outcome["seconds"] = time.monotonic() - started
    return outcome


def verify_outcome(returncode: int, stdout: str, stderr: str) -> dict:
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or [f"exit {returncode}, no JSON"])[-1]
        return {"outcome": "ERROR", "detail": last[:200]}
    errors = {run: error.splitlines()[0][:120] for run, error in report["errors"].items() if error}
    notes = [f"{run} error: {error}" for run, error in errors.items()]
    if report["original_remote_differs"]:
        notes.insert(0, "original differs remotely")
    notes += [f"mismatch: {m}" for m in report["mismatches"][:3]]
    if report.get("reason"):
        notes.insert(0, report["reason"])
    status = report.get("status", "ok" if report["intended_ok"] else "mismatch")
    return {
        # "FAILED": the script did not run far enough to compare (verify exits 2)
        "outcome": {"ok": "OK", "same-error": "OK", "failed": "FAILED",
                    "not-migrated": "NOT MIGRATED"}.get(status, "MISMATCH"),
        "requests_before": report["before"]["requests"],
        "requests_after": report["after"]["requests"],
        "download_before": report["before"]["download_bytes"],
        "download_after": report["after"]["download_bytes"],
        "detail": "; ".join(notes),
    }


def verify_all(jobs: list[tuple[Path, bool]], timeout: float, workers: int) -> dict:
    """Every (path, unsafe) pair, ``workers`` files at a time, a file's modes one after the
    other (verify compares and restores the files a script writes anywhere: two runs of one
    script at a time would clobber each other's); progress on stderr."""
    results: dict[tuple[Path, bool], dict] = {}
    by_path: dict[Path, list[tuple[Path, bool]]] = defaultdict(list)
    for job in jobs:
        by_path[job[0]].append(job)

    def one_file(path_jobs):
        for job in path_jobs:
            outcome = run_verify(job[0], job[1], timeout)
            results[job] = outcome
            mode = " --unsafe-fixes" if job[1] else ""
            print(f"verify {len(results)}/{len(jobs)} {job[0].name}{mode}: {outcome['outcome']} "
                  f"({outcome['seconds']:.0f} s)", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one_file, by_path.values()))
    return results


# -- the devset ---------------------------------------------------------------------------


def expert_requests(text: str) -> int | None:
    """The first integer after "requests" in the file's closing ``# expert:`` block."""
    start = text.rfind("# expert:")
    if start < 0:
        return None
    match = re.search(r"\brequests\s+(\d+)", text[start:])
    return int(match.group(1)) if match else None


def control_of(path: Path) -> str | None:
    return CONTROLS.get(path.name.split("_", 1)[0])


def best_after(row: dict, mode: str) -> tuple[int | None, bool]:
    """The optimized request count for a mode, and whether it was measured."""
    verified = row["verify"].get(mode)
    if verified and verified.get("requests_after") is not None:
        return verified["requests_after"], True
    return row["static"][mode]["requests_after"], False


def held_to(row: dict) -> int | None:
    """The count the row is held to: the expert's, or with its cells kept (CELLS_KEPT)."""
    kept = CELLS_KEPT.get(row["file"])
    return row["expert"] if kept is None else kept[0]


def reaches(row: dict, mode: str) -> bool:
    after, measured = best_after(row, mode)
    if after is None or row["expert"] is None:
        return False
    if measured and row["verify"][mode]["outcome"] != "OK":
        return False
    if not measured and after == 0 < row["expert"]:
        return False  # a static 0 means the cost model saw no request: unknown, not reached
    if not is_known(after):
        return False  # N requests (a loop of unknown length): not known to be at most the expert's
    return after <= held_to(row)


def control_holds(row: dict) -> bool:
    """17 must stay unchanged; 18 must keep its loop of requests (no fewer after); a
    verified control must also verify OK."""
    static = row["static"]["default"]
    if row["control"] == CONTROLS["17"]:
        held = not static["changed"] and static["crash"] is None
    else:
        held = static["crash"] is None and static["requests_after"] == static["requests_before"]
    verified = row["verify"].get("default")
    if verified:
        held = held and verified["outcome"] == "OK" and verified["requests_after"] >= verified["requests_before"]
    return held


def devset_rows(files: list[Path]) -> list[dict]:
    """The static part of each devset row; :func:`judge_devset` completes it."""
    return [{"file": path.name, "path": str(path), "expert": expert_requests(path.read_text(encoding="utf-8")),
             "control": control_of(path), "static": static_runs(path, refusals=True), "verify": {}}
            for path in files]


def judge_devset(rows: list[dict], verified: dict) -> None:
    """Attach the verify outcomes, then decide reach and whether the controls held."""
    for row in rows:
        for mode in MODES:
            if (Path(row["path"]), mode == "unsafe") in verified:
                row["verify"][mode] = verified[(Path(row["path"]), mode == "unsafe")]
        row["reaches"] = {mode: reaches(row, mode) for mode in MODES}
        if row["control"]:
            row["control_holds"] = control_holds(row)


# -- the corpus ---------------------------------------------------------------------------


def a1_names(readme: Path) -> set[str]:
    """Stems of the files the README lists after "Files marked A1 (...):" (it names
    notebooks by their .py export, so files are matched by stem)."""
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError:
        return set()
    match = re.search(r"Files marked A1[^:]*:(.*)", text)
    if not match:
        return set()
    # "… and the added truthfulqa_mc_activations.py, …": a file's name is an item's last word
    return {Path(name.split()[-1].rstrip(".")).stem for name in match.group(1).split(",") if name.strip()}


def corpus_rows(files: list[Path], a1: set[str]) -> list[dict]:
    return [corpus_row(path, path.stem in a1) for path in files]


def corpus_row(path: Path, a1: bool) -> dict:
    """Both modes on the file as written; for an A1 file also the run that counts against
    the expert's count: the file as its author intends it (expert_counts: the author's own
    switch turned), with --migrate when it was written for nnsight before 0.5 (issue 33).
    The loops left as they are are measured on that run (default mode)."""
    expert = expert_for(path.name) if a1 else None
    own_run = expert is not None and (expert.migrate or expert.intended)
    row = {"file": path.name, "path": str(path), "a1": a1,
           "static": static_runs(path, checks=True, refusals=not own_run),
           "expert": None if expert is None else dataclasses.asdict(expert)}
    if not own_run:
        row["counting"] = row["static"]["default"]
        return row
    text, crash = read_text(path)
    if text is None:
        row["counting"] = crash
        return row
    try:
        text = as_intended(expert, text)
    except ValueError as error:
        row["counting"] = {**crash_run(error), "refusals": None}
        return row
    row["counting"] = static_run(path, text, False, False, migrate=expert.migrate, refusals=True)
    return row


def crash_run(error: Exception) -> dict:
    return {"crash": f"{type(error).__name__}: {error}", "requests_before": None, "requests_after": None,
            "changed": False, "unfixed": []}


# -- the corpus A1 files against the expert's count ------------------------------------------


def _one_per_iteration(count, header: str) -> bool:
    """Is ``count`` exactly N, one per iteration of the loop whose header is ``header``?"""
    if count is None or is_known(count) or count.constant:
        return False
    return len(count.terms) == 1 and count.terms[0][1] <= 1 and [loop.header for loop in count.terms[0][0]] == [header]


def a1_verdict(row: dict) -> tuple[str, bool]:
    """(what the A1 file's counting run shows, whether it counts as reached). Reached: at
    the expert's count (the static count after is at most the expert's, and not 0, from a
    static count before above it: a cost model that sees no more than the expert's count
    before has nothing to compare), or with a named reason: every loop or run it leaves as
    it is has a finding, or (a loop that calls a callback parameter, a trace built from a
    string: ``names`` in expert_counts) a finding names that construct."""
    expert, run = row["expert"], row["counting"]
    if run.get("crash"):
        return "crash", False
    before, after = run["requests_before"], run["requests_after"]
    compared = expert["static"] if expert["static"] is not None else expert["requests"]
    # (an N, a loop of unknown length, is never known to be at most the expert's count,
    # unless the expert's count is itself one per iteration of that loop)
    if after is not None and is_known(after) and 0 < after <= compared and direction(before - compared) == "fewer":
        return f"yes ({after} <= {compared})", True
    if expert.get("per") and _one_per_iteration(after, expert["per"]) and direction(before - after) == "fewer":
        return f"yes ({plain_count(after)}: one per iteration of `{expert['per']}`, as the expert's)", True
    if expert.get("names") and any(re.search(expert["names"], f"{f['reason'] or ''} {f['message']}")
                                   for f in run["unfixed"]):
        return "reason named: a finding names the construct", True
    left = (run.get("refusals") or {}).get("left", [])
    silent = [c for c in left if not c["findings"]]
    if before is not None and is_known(before) and before <= compared:
        sends = expert["sends"] if expert["sends"] is not None else "more"
        return f"no: the cost model counts {before} before, at most the expert's {compared} (the file sends {sends})", False
    partly = (run.get("refusals") or {}).get("partly", [])
    if not left:
        if partly and all(c["findings"] for c in partly):
            return (f"reason named: reduced to {plain_count(after)}; the {len(partly)} loop(s) or run(s) still "
                    "sending more than one request each have a finding"), True
        # sessions kept apart across `if` bodies (the measure's runs stop at an `if`): the
        # pass's finding on the run that holds them names what keeps them apart
        kept_apart = [f for f in run["unfixed"] if f["pass_id"] == "session-hoisting"
                      and f["message"].startswith(("this run of remote work", "this statement")) and f["reason"]]
        if not partly and kept_apart:
            return (f"reason named: reduced to {plain_count(after)}; the finding on line {kept_apart[0]['line']} "
                    "names what keeps its sessions apart"), True
        return (f"no: {plain_count(after)} > {compared}, and nothing is left as it is (reduced short of the "
                "count, no finding)"), False
    if silent:
        return f"no: {len(silent)} of {len(left)} left as is without a finding", False
    return f"reason named: {len(left)} left as is, each with a finding", True


def a1_table(rows: list[dict]) -> str:
    lines = ["| file | sends as intended (my reading) | expert | default, as written | counted run | reached? | why (expert) |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        expert, run, default = row["expert"], row["counting"], row["static"]["default"]
        compared = str(expert["requests"]) + (f" (static: {expert['static']})" if expert["static"] is not None else "")
        how = ", ".join(["switch on"] * bool(expert["intended"]) + ["--migrate"] * expert["migrate"]) or "default"
        verdict, _ = a1_verdict(row)
        sends = "?" if expert["sends"] is None else str(expert["sends"])
        lines.append("| " + " | ".join([
            row["file"], f"{sends}: {expert['sends_how']}".replace("|", "/"), compared,
            arrow(default), f"{arrow(run)} ({how})", verdict, expert["why"].replace("|", "/"),
        ]) + " |")
    return "\n".join(lines)


def a1_summary(rows: list[dict], missing: list[str]) -> str:
    a1 = [row for row in rows if row["a1"] and row["expert"] is not None]
    reached = sum(a1_verdict(row)[1] for row in a1)
    fell = sum(requests_fell(row["counting"]) for row in a1)
    lacking = f" (no expert count: {', '.join(missing)})" if missing else ""
    return (f"corpus A1: {reached}/{len(a1)} at the expert's count or with a named reason; "
            f"requests fall in {fell}/{len(a1)}{lacking}")


# -- loops and runs left as they are -----------------------------------------------------------


def refusal_rows(devset: list[dict], corpus: list[dict]) -> list[tuple[dict, dict]]:
    """(row, refusals) for every file: the devset's default run, the corpus' counting run."""
    found = [(row, row["static"]["default"].get("refusals")) for row in devset]
    found += [(row, row["counting"].get("refusals")) for row in corpus]
    return [(row, measured) for row, measured in found if measured]


def refusal_summary(devset: list[dict], corpus: list[dict]) -> str:
    total = reduced = left = several = 0
    silent: list = []
    for row, measured in refusal_rows(devset, corpus):
        total += measured["constructs"]
        reduced += measured["reduced"]
        left += len(measured["left"])
        # (other passes' findings on the same lines are about other savings: forward passes, bytes)
        # (a finding about an enclosing run spans the construct but starts before it: it is
        # the enclosing run's, not a second finding of this one)
        # (nor is a finding at the first line of a loop or run nested in it: that one's own)
        several += sum(sum(f["pass_id"] == "session-hoisting" and c["start"] <= f["line"] <= c["end"]
                           and not _starts_nested(f["line"], c, measured) for f in c["findings"]) > 1
                       for c in measured["left"])
        silent += [c for c in measured["left"] if not c["findings"]]
    return (f"loops and runs sending more than one request: {total}; reduced {reduced}; left as they are "
            f"{left}, of which with no finding (silent, target 0) {len(silent)}, with more than one session-hoisting "
            f"finding {several}")


def _starts_nested(line: int, construct: dict, measured: dict) -> bool:
    """Is ``line`` the first line of another loop or run of the file inside ``construct``?"""
    return construct["start"] < line <= construct["end"] and line in measured.get("starts", ())


def silent_table(devset: list[dict], corpus: list[dict]) -> str:
    lines = ["| file | where | kind | requests per run | first line |", "|---|---|---|---:|---|"]
    for row, measured in refusal_rows(devset, corpus):
        for c in measured["left"]:
            if not c["findings"]:
                lines.append(f"| {row['file']} | {c['where']} (lines {c['start']}-{c['end']}) | {c['kind']} | "
                             f"{c['requests']:g} | `{c['code'].replace('|', '/').replace('`', '')}` |")
    errors = [f"- {row['file']}: {measured['walk_error']}" for row, measured in refusal_rows(devset, corpus)
              if measured.get("walk_error")]
    return "\n".join(lines + ([""] + errors if errors else []))


def refusal_histogram(devset: list[dict], corpus: list[dict]) -> list[tuple[str, int, list[str]]]:
    """(reason, how many loops/runs left as they are carry it, passes): each construct
    counts once per distinct normalized reason among the findings on its lines."""
    counts: Counter[str] = Counter()
    passes: dict[str, Counter[str]] = defaultdict(Counter)
    for row, measured in refusal_rows(devset, corpus):
        for c in measured["left"]:
            seen = set()
            for finding in c["findings"]:
                reason = normalize_reason(finding)
                passes[reason][finding["pass_id"]] += 1
                if reason not in seen:
                    seen.add(reason)
                    counts[reason] += 1
            if not c["findings"]:
                counts["<no finding on its lines>"] += 1
    return [(reason, count, [p for p, _ in passes[reason].most_common()]) for reason, count in counts.most_common()]


def requests_fell(run: dict) -> bool:
    """Did the requests fall (for a loop of unknown length: when it runs long)?"""
    return run["crash"] is None and direction(run["requests_before"] - run["requests_after"]) == "fewer"


# -- the histogram of reasons ---------------------------------------------------------------


def normalize_reason(finding: dict) -> str:
    reason = finding["reason"]
    if not reason:
        return f"<no reason given; status {finding['status']}>"
    reason = re.sub(r"`[^`]*`", "X", reason)
    reason = re.sub(r"\b\d+(?:\.\d+)?\b", "N", reason)
    return " ".join(reason.split())


def reason_histogram(rows: list[dict]) -> list[tuple[str, int, list[str]]]:
    """(reason, count, the passes that gave it) over default-mode unfixed findings."""
    counts: Counter[str] = Counter()
    passes: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        for finding in row["static"]["default"]["unfixed"]:
            reason = normalize_reason(finding)
            counts[reason] += 1
            passes[reason][finding["pass_id"]] += 1
    return [(reason, count, [p for p, _ in passes[reason].most_common()])
            for reason, count in counts.most_common(HISTOGRAM_SIZE)]


# -- rendering ------------------------------------------------------------------------------


def arrow(run: dict) -> str:
    if run.get("crash"):
        return "crash"
    if run.get("requests_before") is None:
        return "—"
    return f"{plain_count(run['requests_before'])} → {plain_count(run['requests_after'])}"


def verify_cell(outcome: dict | None) -> str:
    if outcome is None:
        return "—"
    if outcome.get("requests_before") is None:
        return outcome["outcome"]
    return f"{outcome['outcome']} {outcome['requests_before']} → {outcome['requests_after']}"


def download_cell(outcome: dict | None) -> str:
    """What the original and the optimized script downloaded, as measured by verify."""
    if outcome is None or outcome.get("download_before") is None:
        return "—"
    return f"{human_bytes(outcome['download_before'])} → {human_bytes(outcome['download_after'])}"


def reach_cell(row: dict, mode: str) -> str:
    if row["control"]:
        return f"control ({row['control']}): {'held' if row['control_holds'] else 'BROKEN'}"
    after, measured = best_after(row, mode)
    mark = "yes" if row["reaches"][mode] else "no"
    note = ", measured" if measured else (", static: unknown" if after == 0 else "")
    return f"{mark} ({after}{note})"


def devset_table(rows: list[dict], verify_modes: list[str]) -> str:
    head = ["file", "expert", "static", "static unsafe"]
    head += [f"verify{' unsafe' if mode == 'unsafe' else ''}" for mode in verify_modes]
    head += ["download (verify)"] if verify_modes else []
    head += ["reaches", "reaches unsafe"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        expert = str(row["expert"])
        if row["file"] in CELLS_KEPT:
            expert += f" ({CELLS_KEPT[row['file']][1]}: {held_to(row)})"
        cells = [row["file"], expert, arrow(row["static"]["default"]), arrow(row["static"]["unsafe"])]
        cells += [verify_cell(row["verify"].get(mode)) for mode in verify_modes]
        cells += [download_cell(row["verify"].get("default"))] if verify_modes else []
        cells += [reach_cell(row, "default"), reach_cell(row, "unsafe")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def corpus_table(rows: list[dict]) -> str:
    lines = ["| file | A1 | default | unsafe | crash | output parses | idempotent | not fixed |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        runs = row["static"]
        crashes = [f"{mode}: {runs[mode]['crash'][:60]}" for mode in MODES if runs[mode]["crash"]]
        lines.append("| " + " | ".join([
            row["file"], "A1" if row["a1"] else "", arrow(runs["default"]), arrow(runs["unsafe"]),
            ", ".join(crashes) or "no", check_cell(runs, "parses"), check_cell(runs, "idempotent"),
            str(len(runs["default"]["unfixed"])),
        ]) + " |")
    return "\n".join(lines)


def check_cell(runs: dict, key: str) -> str:
    failed = [mode for mode in MODES if runs[mode].get(key) is False]
    if all(runs[mode].get(key) is None for mode in MODES):
        return "—"
    return f"no ({', '.join(failed)})" if failed else "yes"


def histogram_table(histogram: list[tuple[str, int, list[str]]]) -> str:
    lines = ["| count | reason (normalized) | passes |", "|---:|---|---|"]
    for reason, count, passes in histogram:
        lines.append(f"| {count} | {reason.replace('|', '/')} | {', '.join(passes)} |")
    return "\n".join(lines)


def devset_summary(rows: list[dict], verify_modes: list[str]) -> str:
    improvable = [row for row in rows if not row["control"]]
    controls = [row for row in rows if row["control"]]
    reach = {mode: sum(row["reaches"][mode] for row in improvable) for mode in MODES}
    text = (f"devset: {reach['default']}/{len(improvable)} improvable reach the expert count (default), "
            f"{reach['unsafe']}/{len(improvable)} with --unsafe-fixes")
    kept = [row["file"] for row in improvable if row["file"] in CELLS_KEPT]
    if kept:
        text += f" ({len(kept)} of them held to the count with its `# %%` cells kept: {', '.join(kept)})"
    if controls:
        text += f"; controls held {sum(row['control_holds'] for row in controls)}/{len(controls)}"
    for mode in verify_modes:
        outcomes = [row["verify"][mode]["outcome"] for row in rows if mode in row["verify"]]
        label = "verify" if mode == "default" else "verify --unsafe-fixes"
        text += f"; {label} OK {outcomes.count('OK')}/{len(outcomes)}"
        if len(outcomes) != outcomes.count("OK"):
            text += (f" ({outcomes.count('MISMATCH')} MISMATCH, {outcomes.count('FAILED')} FAILED, "
                     f"{outcomes.count('ERROR')} ERROR)")
    if not verify_modes:
        text += "; not verified (--verify)"
    return text


def corpus_summary(rows: list[dict], a1_missing: list[str]) -> str:
    a1 = [row for row in rows if row["a1"]]
    fell = sum(requests_fell(row["static"]["default"]) for row in a1)
    crashes = sum(any(row["static"][m]["crash"] for m in MODES) for row in rows)
    unparsed = sum(any(row["static"][m].get("parses") is False for m in MODES) for row in rows)
    unstable = sum(any(row["static"][m].get("idempotent") is False for m in MODES) for row in rows)
    fell_any = sum(requests_fell(row["static"]["default"]) for row in rows)
    missing = f" (README A1 files not found: {', '.join(a1_missing)})" if a1_missing else ""
    return (f"corpus: requests fall in {fell}/{len(a1)} A1 files (default){missing}, in {fell_any}/{len(rows)} "
            f"files overall; crashes {crashes}; outputs that do not parse {unparsed}; not idempotent {unstable}")


def problems(devset: list[dict], corpus: list[dict]) -> list[str]:
    """Things worth a look: crashes, a static estimate of 0 requests for a file that says
    remote=, static before-counts that verify contradicts."""
    found = []
    for row in devset + corpus:
        text = Path(row["path"]).read_text(encoding="utf-8", errors="replace")
        for mode in MODES:
            run = row["static"][mode]
            if run["crash"]:
                found.append(f"{row['file']} ({mode}): crashed: {run['crash'][:200]}")
        run = row["static"]["default"]
        if run["requests_before"] == 0 and re.search(r"remote\s*=", text):
            found.append(f"{row['file']}: static cost model reports 0 requests, but the file passes `remote=`")
    for row in devset:
        outcome = row["verify"].get("default")
        static = row["static"]["default"]
        if outcome and outcome.get("requests_before") is not None and static["requests_before"] is not None:
            if outcome["requests_before"] != static["requests_before"]:
                found.append(f"{row['file']}: static requests before {static['requests_before']}, "
                             f"measured {outcome['requests_before']}")
        for mode, outcome in row["verify"].items():
            if outcome["outcome"] != "OK" and outcome.get("detail"):
                found.append(f"{row['file']} (verify {mode}): {outcome['outcome']}: {outcome['detail'][:300]}")
    return found


def render(devset: list[dict], corpus: list[dict], a1_missing: list[str], verify_modes: list[str],
           notes: list[str], experts_missing: list[str] = ()) -> str:
    histogram = reason_histogram(devset + corpus)
    a1 = [row for row in corpus if row["a1"] and row["expert"] is not None]
    summaries = [devset_summary(devset, verify_modes), corpus_summary(corpus, a1_missing),
                 a1_summary(corpus, list(experts_missing)), refusal_summary(devset, corpus)]
    parts = [
        "# ndif-opt reach", "",
        *summaries, "",
        "## Devset (requests before → after; reaches: optimized <= expert)", "",
        devset_table(devset, verify_modes), "",
        "## Corpus (static only)", "",
        corpus_table(corpus), "",
        "## Corpus A1 against the expert's count (benchmarks/expert_counts.py)", "",
        "Static counts; \"after\" counts against the expert when run as the author intends "
        "(the author's own switch on, --migrate for pre-0.5 code). Reached: at the expert's count, "
        "or every loop/run left as it is has a finding (a callback or a string-built trace: a "
        "finding names it).", "",
        a1_table(a1), "",
        f"## Why findings were not fixed (default mode, both sets, top {HISTOGRAM_SIZE})", "",
        histogram_table(histogram), "",
        "## Loops and runs left as they are (no silent refusal, issue 33.1)", "",
        refusal_summary(devset, corpus) + " (devset: default mode; corpus: the run that counts)", "",
        "Left as they are with no finding on their lines:", "",
        silent_table(devset, corpus), "",
        "Why they were left (each loop/run once per reason on its lines):", "",
        histogram_table(refusal_histogram(devset, corpus)), "",
    ]
    found = notes + problems(devset, corpus)
    if found:
        parts += ["## Problems", ""] + [f"- {line}" for line in found] + [""]
    parts += ["## Summary", "", *summaries]
    return "\n".join(parts) + "\n"


# -- main -----------------------------------------------------------------------------------


def source_fingerprint() -> str:
    """A hash of ndif_opt's sources, to notice that they changed while this ran."""
    digest = hashlib.sha256()
    for path in sorted((PROJECT / "ndif_opt").rglob("*.py")):
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def list_files(directory: Path, patterns: tuple[str, ...], only: str | None) -> list[Path]:
    files = sorted({path for pattern in patterns for path in directory.glob(pattern) if path.is_file()})
    return [path for path in files if only is None or only in path.name]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devset", type=Path, default=SHARED / "devset", help="directory of the devset")
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpus", help="directory of the corpus")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--verify", action="store_true", help="run `ndif-opt verify` on every devset file")
    parser.add_argument("--verify-unsafe", action="store_true", help="also verify with --unsafe-fixes")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per verify run (300)")
    parser.add_argument("--jobs", type=int, default=2, help="verify runs at a time (2)")
    parser.add_argument("--json", type=Path, help="write the raw data here")
    parser.add_argument("--nnsight", choices=("0.8", "0.6"),
                        help="rewrite every file for this nnsight release (run --verify where it is installed)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    global NNSIGHT
    args = parse_args(argv)
    NNSIGHT = args.nnsight
    missing = [str(d) for d in (args.devset, args.corpus) if not d.is_dir()]
    if missing:  # not "0/0": a checkout elsewhere measures nothing and must say so
        print(f"reach.py: no such directory: {', '.join(missing)} (give --devset/--corpus)", file=sys.stderr)
        return 2
    devset_files = list_files(args.devset, ("[0-9]*.py", "[0-9]*.ipynb"), args.only)
    corpus_files = list_files(args.corpus, ("*.py", "*.ipynb"), args.only)
    verify_modes = ["default"] if args.verify or args.verify_unsafe else []
    verify_modes += ["unsafe"] if args.verify_unsafe else []
    fingerprint = source_fingerprint()
    devset = devset_rows(devset_files)  # static first: the same ndif_opt as the verify runs, if it holds still
    a1 = a1_names(args.corpus / "README.md")
    a1_missing = sorted(a1 - {path.stem for path in list_files(args.corpus, ("*.py", "*.ipynb"), None)})
    corpus = corpus_rows(corpus_files, a1)
    experts_missing = [line for line in check_against_readme(a1) if line.startswith("no expert")]
    jobs = [(path, mode == "unsafe") for path in devset_files for mode in verify_modes]
    judge_devset(devset, verify_all(jobs, args.timeout, max(1, args.jobs)) if jobs else {})
    notes = [] if source_fingerprint() == fingerprint else [
        "ndif_opt's sources changed during this run: the numbers may come from different versions"]
    notes += [line for line in check_against_readme(a1) if not line.startswith("no expert")]
    sys.stdout.write(render(devset, corpus, a1_missing, verify_modes, notes, experts_missing))
    if args.json:
        data = {"devset": devset, "corpus": corpus, "a1_listed": sorted(a1), "notes": notes,
                "ndif_opt_fingerprint": fingerprint, "histogram": reason_histogram(devset + corpus),
                "refusal_histogram": refusal_histogram(devset, corpus)}
        args.json.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

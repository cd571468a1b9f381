"""Does ndif-opt keep what real scripts compute? ``ndif-opt verify`` over the runnable corpus.

``../shared/corpus-exec/*.py`` holds runnable adaptations of the public NDIF scripts with a
loop of remote traces (third-party code: run from there, never copied; its README says what
was changed). Each file goes through ``ndif-opt verify`` in the default mode and with
``--unsafe-fixes`` (``--modes`` adds ``migrate``): the original locally (what its author
meant), the original through the emulated NDIF, and the optimized script through it.

A rewrite is **wrong** when the optimized run

* raises where the original's remote run did not, or raises another exception type; or
* differs from the local run in a value (a name, a stdout line, a file) that the original's
  remote run got right.

A file whose original fails when run locally (its author's own run, on nnsight 0.8) and whose
optimized run fails otherwise is FAILED: past the original's failure, what it should compute
is unknown (a correctness fix lets the optimized script run further, to code that fails on
0.8 for its own reasons).

A pre-0.5 file under ``migrate`` runs its original on nnsight 0.4, in
``.venv-nnsight04-corpus`` (``benchmarks/requirements-corpus-nnsight04.txt``: nnsight 0.4 with
transformers 5, which the adaptations are written for). Its original does not run on today's
NDIF, so its requests "before" are those of the script made to run right there without the
optimizations: migrated, with the correctness passes only (:data:`CORRECTNESS`), run through
verify the same way.

A difference the original already shows remotely (a client list left empty by a remote
trace, a print that becomes a server log line) is the original's, not the rewrite's: it is
counted apart ("original wrong remotely"). So is a file whose original fails on nnsight 0.5+
(the pre-0.5 files): what ran before the failure is compared (``--allow-same-error``).

    python benchmarks/corpus_exec.py                    # both modes, 2 runs at a time
    python benchmarks/corpus_exec.py --only days_ --modes default
    python benchmarks/corpus_exec.py --json exec.json

Exit status 1 when any rewrite is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reach import run_in_own_group  # noqa: E402

from ndif_opt.verify.verdict import error_kind, subject  # noqa: E402

PROJECT = Path(__file__).resolve().parents[1]
CORPUS_EXEC = PROJECT.parent / "shared" / "corpus-exec"
#: the adaptations write under /tmp/corpus-exec/out/<stem>/ (their README); runs start there
WORKDIR = Path("/tmp/corpus-exec")
MODE_FLAGS = {"default": [], "unsafe": ["--unsafe-fixes"], "migrate": ["--migrate"]}
TOLERANCE = ["--atol", "1e-4", "--rtol", "1e-4"]  # the adaptations' README: bf16-free tiny models, fp32
#: nnsight 0.4 with transformers 5, for the pre-0.5 originals (see the module docstring)
NNSIGHT04_CORPUS = PROJECT / ".venv-nnsight04-corpus" / "bin" / "python"
#: the passes that make a pre-0.5 script run right on nnsight 0.5+ (the rest optimize)
CORRECTNESS = "nnsight-05-failures,migrate-api,accumulator-relocation"
BASELINE = "baseline"  # the migrate mode's correctness passes only: a pre-0.5 file's "before"


def verify_command(path: Path, mode: str) -> list[str]:
    script = Path(sys.executable).with_name("ndif-opt")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "ndif_opt"]
    flags = ["--migrate", "--select", CORRECTNESS] if mode == BASELINE else MODE_FLAGS[mode]
    return base + ["verify", str(path), "--format", "json", "--allow-same-error", *TOLERANCE, *flags]


def verify_environment() -> dict[str, str] | None:
    """The environment of the verify runs: the pre-0.5 originals on nnsight 0.4 with
    transformers 5, when that venv exists (else verify's own nnsight 0.4 venv)."""
    if NNSIGHT04_CORPUS.exists():
        return dict(os.environ, NDIF_OPT_NNSIGHT04_PYTHON=str(NNSIGHT04_CORPUS))
    return None


def run_verify(path: Path, mode: str, timeout: float) -> dict:
    """One verify run in its own process group (killed on timeout), from a work directory
    of its own under WORKDIR so that two runs at a time do not share files."""
    workdir = WORKDIR / f"run-{path.stem}-{mode}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (WORKDIR / "out").mkdir(exist_ok=True)
    started = time.monotonic()
    try:
        ran = run_in_own_group(verify_command(path, mode), workdir, timeout, verify_environment())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if ran is None:
        return {"outcome": "ERROR", "detail": f"timeout after {timeout:.0f} s", "seconds": timeout}
    returncode, stdout, stderr = ran
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or [f"exit {returncode}, no JSON"])[-1]
        return {"outcome": "ERROR", "detail": last[:300], "seconds": time.monotonic() - started}
    judged = judge(report)
    judged["seconds"] = time.monotonic() - started
    return judged


def judge(report: dict) -> dict:
    """The outcome of one verify report, by the rule in the module docstring."""
    if report.get("local_nnsight"):
        return judge_migration(report)
    errors = report["errors"]
    original_kind = error_kind(errors.get("original"))
    optimized_kind = error_kind(errors.get("optimized"))
    original_wrong = {subject(m) for m in report["original_remote_mismatches"]}
    new = [m for m in report["mismatches"] if subject(m) not in original_wrong]
    raised = optimized_kind is not None and optimized_kind != original_kind
    wrong = raised or bool(new)
    if wrong and errors.get("local") and report["status"] == "failed":
        # the original fails as its author runs it (locally, on nnsight 0.8), and the optimized
        # script fails elsewhere: what either should compute past the failure is unknown
        outcome = "FAILED"
    elif wrong:
        outcome = "WRONG"
    elif report["status"] in ("ok", "same-error"):
        outcome = "OK"
    elif report["status"] == "failed":
        outcome = "FAILED"
    else:
        outcome = "ORIGINAL-WRONG"  # every difference is one the original shows remotely too
    detail = []
    if raised:
        detail.append(f"optimized raised {first_line(errors.get('optimized'))}"
                      f" (original remotely: {first_line(errors.get('original')) or 'no error'})")
    detail += [f"mismatch: {m}" for m in new[:4]]
    if report.get("reason"):
        detail.append(report["reason"])
    if report["original_remote_differs"]:
        detail.append(f"original wrong remotely: {len(report['original_remote_mismatches'])} differences")
    return {"outcome": outcome, **_measured(report), "detail": "; ".join(detail)}


def _measured(report: dict) -> dict:
    """What verify measured of the original's and the optimized script's runs."""
    return {
        "status": report["status"],
        "requests_before": report["before"]["requests"],
        "requests_after": report["after"]["requests"],
        "download_before": report["before"]["download_bytes"],
        "download_after": report["after"]["download_bytes"],
        "forward_before": report["before"]["forward_passes"],
        "forward_after": report["after"]["forward_passes"],
    }


def judge_migration(report: dict) -> dict:
    """A pre-0.5 file under --migrate: its original ran on nnsight 0.4 (and fails on 0.8 as
    written, so its run there excuses nothing). NOT-MIGRATED: ndif-opt refused to migrate it
    (all or nothing); FAILED: the original did not run on 0.4; else the migration is judged
    against the 0.4 run alone: OK, or WRONG."""
    errors = report["errors"]
    if not report.get("rewritten", True):
        outcome, detail = "NOT-MIGRATED", "left as it was (a migration that cannot be completed is not made)"
    elif report["status"] == "failed":
        outcome, detail = "FAILED", report.get("reason") or ""
    elif report["status"] in ("ok", "same-error"):
        outcome, detail = "OK", report.get("reason") or ""
    else:
        outcome = "WRONG"
        detail = "; ".join([f"mismatch: {m}" for m in report["mismatches"][:4]]
                           + ([f"optimized raised {first_line(errors.get('optimized'))}"] if errors.get("optimized") else []))
    return {
        "outcome": outcome,
        **_measured(report),
        "pre05": True,
        "detail": f"original on nnsight {report['local_nnsight']}"
                  + (f" raised {first_line(errors.get('local'))}" if errors.get("local") else "") + f"; {detail}",
    }


def first_line(error: str | None) -> str | None:
    return error.splitlines()[0][:160] if error else None


def table(rows: list[dict], modes: list[str]) -> str:
    head = ["file"] + [f"{mode}" for mode in modes] + ["detail"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["file"]]
        details = []
        for mode in modes:
            run = row[mode]
            if run.get("requests_after") is None:
                cells.append(run["outcome"])
            else:
                before = "?" if run.get("requests_before") is None else run["requests_before"]
                cells.append(f"{run['outcome']} {before} → {run['requests_after']}")
            if run.get("detail"):
                details.append(f"{mode}: {run['detail'][:400]}")
        cells.append("<br>".join(details).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fell(run: dict) -> bool:
    """Did the requests fall, measured, in a run that is not wrong?"""
    return (run.get("requests_after") or 0) < (run.get("requests_before") or 0) \
        and run["outcome"] in ("OK", "ORIGINAL-WRONG")


def as_decided(row: dict, modes: list[str]) -> dict | None:
    """The run a file counts by (issue 19's decision): a pre-0.5 file with --migrate (it
    runs on today's NDIF only migrated), any other in the default mode."""
    if "migrate" in modes and row["migrate"].get("pre05"):
        return row["migrate"]
    return row["default"] if "default" in modes else None


def summary(rows: list[dict], modes: list[str]) -> str:
    parts = []
    for mode in modes:
        outcomes = [row[mode]["outcome"] for row in rows]
        counts = ", ".join(f"{name} {outcomes.count(name)}" for name in
                           ("OK", "ORIGINAL-WRONG", "NOT-MIGRATED", "FAILED", "WRONG", "ERROR")
                           if outcomes.count(name))
        parts.append(f"{mode}: {counts}; requests fall (measured, not wrong) in "
                     f"{sum(fell(row[mode]) for row in rows)}/{len(rows)}")
    if "default" in modes and "migrate" in modes:
        counted = [as_decided(row, modes) for row in rows]
        parts.append(f"as decided (pre-0.5 files with --migrate, before = migrated by the correctness passes only; "
                     f"the others in the default mode): requests fall in {sum(map(fell, counted))}/{len(rows)}")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=CORPUS_EXEC, help="the runnable corpus")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--modes", default="default,unsafe", help="comma list of default, unsafe, migrate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path, help="write the raw data here")
    args = parser.parse_args(argv)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in MODE_FLAGS]
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    files = sorted(path for path in args.dir.glob("*.py") if args.only is None or args.only in path.name)
    # mode by mode, so that the workers mostly run different files
    jobs = [(path, mode) for mode in modes for path in files]
    results: dict[tuple[Path, str], dict] = {}
    # two runs of one file must not overlap: a file empties and writes its own output directory
    file_locks = {path: threading.Lock() for path in files}

    def one(job: tuple[Path, str]) -> None:
        with file_locks[job[0]]:
            results[job] = run_verify(job[0], job[1], args.timeout)
        print(f"{len(results)}/{len(jobs)} {job[0].name} [{job[1]}]: {results[job]['outcome']} "
              f"({results[job]['seconds']:.0f} s)", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, jobs))
        # a pre-0.5 file's "before": its migration by the correctness passes alone, run the same way
        baselines = [(path, BASELINE) for path in files if "migrate" in modes and results[(path, "migrate")].get("pre05")]
        jobs += baselines
        list(pool.map(one, baselines))
    for path in files:
        if (path, BASELINE) in results:
            baseline, migrated = results[(path, BASELINE)], results[(path, "migrate")]
            migrated["requests_original"] = migrated["requests_before"]
            migrated["requests_before"] = baseline.get("requests_after") if baseline["outcome"] == "OK" else None
            if baseline["outcome"] != "OK":
                migrated["detail"] += f"; before unknown: the correctness passes alone gave {baseline['outcome']}" \
                                      f" ({baseline.get('detail', '')[:160]})"
    rows = [{"file": path.name, **{mode: results[(path, mode)] for mode in modes}} for path in files]
    sys.stdout.write("# ndif-opt verify over the runnable corpus\n\n" + table(rows, modes) + "\n\n"
                     + summary(rows, modes) + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 1 if any(row[mode]["outcome"] == "WRONG" for row in rows for mode in modes) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of ndif-opt, measured against a bare libcst parse of the same input.

    python benchmarks/bench.py                 # the table (a few minutes; see --timeout)
    python benchmarks/bench.py --quick         # smaller inputs, same ratios
    python benchmarks/bench.py --profile 300   # cProfile of the pipeline on a 300-line dense script

Inputs are measured with the command line's process settings (fewer garbage collections,
none while a file is optimized: ndif_opt/engine/runtime.py), the bare parse too (no collection
while it parses); ``--library-gc`` keeps Python's defaults for both.
Absolute times drift with the machine and its load; the ratios measured in the same run
(tool time / bare ``libcst.parse_module`` time of the same text) hold better: the parse and
the tool run in turn, five times each, and each figure is the best of its runs. Every input is
measured in a fresh subprocess (modules imported and warmed up on a tiny script first,
so start-up is not counted) with a time limit: a row that hits it says ``>T s`` and its
ratio is a lower bound. ``tool`` is what the command line does with one file, in one
process. ``--cpu-time`` times the tool and the parse by the CPU time of that process
instead of wall time: on a machine that other work shares, wall time counts the time
other processes took from it, CPU time does not (with other work loading 2 cores to 4-5,
realistic-500 took 356-369 ms in three runs by CPU time, 8.6-9.2x a parse, and 568 ms to
1.12 s in four by wall time, 8.1-9.9x; logit_lens 7.6-7.8x against 12.1-15.5x).

Targets (issue 7): the 20,000-line file within 4.5x the 5,000-line time; a file without nnsight skipped by the prefilter at over
100,000 lines/s; a typical 100-300-line script under 150 ms after start-up; directory
mode using all cores, with a progress bar on a terminal.

Targets (issue 21), at the sizes users have: a 500-line realistic script (comments,
helpers, loops of remote traces with prints and f-strings, plain Python in between:
tests/generators.py ``realistic_script``) within 3x a bare parse end to end; the editor's
re-optimization of it after a one-line edit, in one process with the document's
``WindowCache`` (as the editor server calls ``optimize``), within 50 ms; the 5,000-line
realistic script within 12x the 500-line time (measured in turn, as dense-20k/5k is).
Issue 35 adds: the editor's re-run after an edit inside the helper every experiment calls
(``editor-500-helper``: every window calling it runs again) within 3x a parse, and dense-5k
within 2.5x a parse.

    python benchmarks/bench.py --only realistic-500,realistic-5k,editor-500,cells-200,example
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from generators import HEADER, dense_nnsight_script, plain_python, realistic_script  # noqa: E402

PYTHON = sys.executable
#: the larger input whose worker also runs the smaller one in turn: how time grows with size
GROWTH = {"dense-20k": "dense-5k", "realistic-5k": "realistic-500"}
#: where the editor rows edit one line of realistic-500: a print in the middle of the
#: file, one in its last experiment (a fraction of the file: the first print from there),
#: and a line of `residual_norm`, the helper with a remote trace that sections call (text
#: the line starts with)
EDIT_AT = {"editor-500": "0.5", "editor-500-end": "0.95", "editor-500-helper": "return hidden[0, -1]"}


# -- the worker: one input, measured in its own process ---------------------------------------


def _worker(path: str, repeat: int, smaller: str | None = None) -> None:
    import libcst

    from ndif_opt import optimize
    from ndif_opt.engine.prefilter import uses_nnsight

    _process_settings()  # for the tool and the bare parse alike
    optimize(dense_nnsight_script(40))  # import and warm every module first
    source = Path(path).read_text()
    lines = source.count("\n") + 1

    def best(fn) -> float:
        return min(_timed_call(fn) for _ in range(repeat))

    parse = _as_one_file(lambda: libcst.parse_module(source))
    print(json.dumps({"lines": lines, "parse": _timed_call(parse), "prefilter": best(lambda: uses_nnsight(source))}),
          flush=True)  # a first figure, kept if the tool runs out of time
    # The parse and the tool run in turn, `repeat` times each, and each figure is the best
    # of its runs: the machine's drift during the measurement hits both alike. Each tool
    # run is a full run (no cache is shared between them), as the command line runs one
    # file. With ``smaller`` (dense-20k's worker gets dense-5k), the tool on that file runs
    # in turn too: how time grows with size, both sizes measured in the same minutes
    # (`tool_smaller`). The smaller file runs as many times in a row as it fits in the
    # larger (4 for 5k in 20k) and counts their mean: both figures then span the same
    # length of time, so a slow patch of the machine is as likely to fall in either (the
    # best of five short runs would otherwise dodge patches the long runs cannot).

    def tool(text: str = source, name: str = path):
        return _as_one_file(lambda: optimize(text, filename=name))

    small = Path(smaller).read_text() if smaller else None
    in_a_row = max(1, round(lines / (small.count("\n") + 1))) if small else 0
    parses, tools, smalls, result = [], [], [], None
    for _ in range(repeat):
        parses.append(_timed_call(parse))
        started = _clock()
        result = tool()()
        tools.append(_clock() - started)
        if small is not None:
            smalls.append(sum(_timed_call(tool(small, smaller)) for _ in range(in_a_row)) / in_a_row)
    print(json.dumps({"parse": min(parses), "tool": min(tools), "changed": result.changed,
                      **({"tool_smaller": min(smalls)} if smalls else {})}),
          flush=True)


def _editor_worker(path: str, repeat: int, at: str) -> None:
    """The editor's re-run after a one-line edit: the document is optimized once with a
    ``WindowCache`` (as the editor server does when it opens it), then ``repeat`` times
    after a one-line edit, each a new one (its window is not in the cache; every other
    window is), in this process, with the editor server's settings (ndif_opt/frontends/lsp.py:
    fewer collections, none paused). The edited line is the first ``print(`` line from
    ``at`` (a fraction of the file) on, or the first line that starts with ``at`` (other
    text): a comment appended to it."""
    import libcst

    from ndif_opt import optimize
    from ndif_opt.engine.pipeline import WindowCache
    from ndif_opt.engine.runtime import collect_garbage_rarely
    from ndif_opt.options import Options

    if not os.environ.get("NDIF_OPT_BENCH_LIBRARY_GC"):
        collect_garbage_rarely()  # what ndif_opt.frontends.lsp.main sets
    optimize(dense_nnsight_script(40))  # import and warm every module first
    source = Path(path).read_text()
    lines = source.splitlines(keepends=True)
    options = Options()  # the editor's options for a file without a pyproject.toml
    cache = WindowCache()
    opened = _timed_call(lambda: optimize(source, filename=path, options=options, cache=cache))
    if at.replace(".", "", 1).isdigit():
        edited = next(i for i in range(int(len(lines) * float(at)), len(lines)) if lines[i].lstrip().startswith("print("))
    else:
        edited = next(i for i, line in enumerate(lines) if line.lstrip().startswith(at))
    parses, reruns = [], []
    for n in range(repeat):
        text = "".join(lines[:edited] + [lines[edited].rstrip("\n") + f"  # edit {n}\n"] + lines[edited + 1:])
        parses.append(_timed_call(lambda: libcst.parse_module(text)))
        reruns.append(_timed_call(lambda: optimize(text, filename=path, options=options, cache=cache)))
    print(json.dumps({"lines": source.count("\n") + 1, "parse": min(parses), "tool": min(reruns), "opened": opened,
                      "edited_line": edited + 1, "reruns": reruns, "changed": True}), flush=True)


def measure(path: Path, timeout: float, repeat: int = 5, smaller: Path | None = None,
            edit_at: str | None = None) -> dict:
    """Run the worker on ``path`` (and ``smaller`` in turn; with ``edit_at``, the editor's
    re-run after a one-line edit there); partial results survive a timeout."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [PYTHON, __file__, "--worker", str(path), "--repeat", str(repeat),
             *(["--smaller", str(smaller)] if smaller else []),
             *(["--edit-at", edit_at] if edit_at is not None else [])],
            capture_output=True, text=True, timeout=timeout,
        )
        out, timed_out = done.stdout, False
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        timed_out = True
    row: dict = {"timed_out": timed_out, "wall": time.perf_counter() - started}
    for line in out.splitlines():
        if line.startswith("{"):
            row.update(json.loads(line))
    if timed_out:
        row["tool"] = None
    return row


# -- inputs ---------------------------------------------------------------------------------


def write_inputs(directory: Path, quick: bool) -> dict[str, Path]:
    scale = 0.1 if quick else 1.0
    sizes = {
        "dense-5k": int(5000 * scale),
        "dense-20k": int(20000 * scale),
        "dense-200": 200,
        "plain-100k": int(100_000 * scale),
        "mostly-plain-5k": int(5000 * scale),
    }
    paths = {}
    for example in sorted((ROOT / "examples").glob("*.py")):
        paths[f"example:{example.stem}"] = example
    paths["dense-200"] = _write(directory / "dense200.py", dense_nnsight_script(sizes["dense-200"]))
    # the sizes users have (issue 21): a realistic script of 500 lines, edited in the
    # editor, and ten times as long (how time grows)
    paths["realistic-500"] = _write(directory / "realistic500.py", realistic_script(int(500 * scale)))
    for name in EDIT_AT:
        paths[name] = paths["realistic-500"]
    paths["realistic-5k"] = _write(directory / "realistic5k.py", realistic_script(int(5000 * scale)))
    # a notebook-like script: eight examples one after another, each with its own setup
    paths["cells-200"] = _write(directory / "cells.py", "\n\n".join(
        (ROOT / "examples" / f"{name}.py").read_text() for name in CELLS))
    paths["dense-5k"] = _write(directory / "dense5k.py", dense_nnsight_script(sizes["dense-5k"]))
    paths["dense-20k"] = _write(directory / "dense20k.py", dense_nnsight_script(sizes["dense-20k"]))
    paths["plain-100k"] = _write(directory / "plain100k.py", plain_python(sizes["plain-100k"]))
    # a mention in a comment passes the substring test: the ast-grep parse decides
    paths["plain-100k-mention"] = _write(
        directory / "mention100k.py",
        "# compare with the nnsight version (remote=True)\n" + plain_python(sizes["plain-100k"]),
    )
    tail = (
        "\nresults = []\nfor layer in LAYERS:\n    with model.trace(PROMPT, remote=True):\n"
        "        results.append(model.transformer.h[layer].output.save())\n"
    )
    paths["mostly-plain-5k"] = _write(
        directory / "mostly_plain.py", HEADER + plain_python(sizes["mostly-plain-5k"]) + tail
    )
    return paths


CELLS = ("logit_lens", "steering_sweep", "activation_patching", "prompt_loop",
         "layer_statistics", "client_effects", "helper_function", "logit_reductions")


def write_tree(directory: Path, files: int = 500) -> Path:
    """``files`` modules: one in ten a naive nnsight script (an example), the rest ~100
    lines of plain Python."""
    examples = sorted((ROOT / "examples").glob("*.py"))
    plain = plain_python(100)
    for i in range(files):
        text = examples[i // 10 % len(examples)].read_text() if i % 10 == 0 else plain
        _write(directory / f"pkg{i // 50}" / f"module_{i}.py", text)
    return directory


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- directory mode -------------------------------------------------------------------------


def directory_mode(tree: Path, timeout: float) -> dict:
    """`ndif-opt DIR --check -q` with one job and with every core (wall and CPU time of
    each), and the processing phase on its own: from the first file read to the last
    result, after start-up and the pipeline's import (both serial: the import happens
    once, before the workers fork). CPU/wall of that phase, the parent's and the
    workers' CPU together, says whether the work keeps every core busy; CPU/wall of the
    whole run also counts the serial part, which dominates once each file takes a few
    milliseconds."""
    one = _directory_run(tree, timeout, jobs=1)
    every = _directory_run(tree, timeout, jobs=None)
    phases = [_phase(tree, jobs) for jobs in (1, None)]
    return {**every, "wall_one_job": one["wall"], "phase_one_job": phases[0], "phase": phases[1],
            "cores": os.cpu_count() or 1,
            "startup": _timed([PYTHON, "-m", "ndif_opt.frontends.cli", "--help"])}


def _phase(tree: Path, jobs: int | None) -> dict:
    done = subprocess.run([PYTHON, __file__, "--directory-worker", str(tree), "--jobs", str(jobs or 0)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _process_settings() -> None:
    """The settings of the command line's process (garbage collection: ndif_opt/engine/runtime.py);
    with --library-gc, Python's defaults, as a library caller's process has them."""
    from ndif_opt.engine.runtime import collect_garbage_rarely

    if not os.environ.get("NDIF_OPT_BENCH_LIBRARY_GC"):
        collect_garbage_rarely()


def _as_one_file(function):
    """``function`` run as the command line runs one file: without garbage collection
    (ndif_opt/engine/runtime.py); with --library-gc, as is."""
    from ndif_opt.engine.runtime import collector_paused

    if os.environ.get("NDIF_OPT_BENCH_LIBRARY_GC"):
        return function

    def paused():
        with collector_paused():
            return function()

    return paused


def _directory_worker(tree: str, jobs: int) -> None:
    """The processing phase of directory mode, timed from inside (see directory_mode)."""
    from ndif_opt.frontends import batch, cli  # noqa: F401  (what the command line has imported)

    _process_settings()  # what cli.main sets before it runs
    import ndif_opt.engine.pipeline  # noqa: F401
    import ndif_opt.frontends.notebook  # noqa: F401  (imported before the fork, as batch does)
    from ndif_opt.options import Options

    paths = sorted(str(p) for p in Path(tree).rglob("*.py"))
    options = {path: Options() for path in paths}
    before, started = os.times(), time.perf_counter()
    batch.process(paths, options, jobs=jobs or batch.default_jobs())
    wall, after = time.perf_counter() - started, os.times()
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system"))
    print(json.dumps({"wall": wall, "cpu": cpu}))


def _directory_run(tree: Path, timeout: float, jobs: int | None) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [PYTHON, "-m", "ndif_opt.frontends.cli", str(tree), "--check", "-q"]
    if jobs is not None:
        command += ["-j", str(jobs)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        summary = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    except subprocess.TimeoutExpired:
        summary = f"timed out after {timeout:.0f} s"
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "summary": summary}


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True)
    return time.perf_counter() - started


# -- profile --------------------------------------------------------------------------------


def profile(lines: int, top: int = 30) -> str:
    """cProfile of optimize() on a dense script; cumulative time per ndif_opt function."""
    import cProfile
    import io
    import pstats

    from ndif_opt import optimize

    optimize(dense_nnsight_script(40))
    source = dense_nnsight_script(lines)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    optimize(source)
    profiler.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "ndif_opt" in filename:
            short = filename.split("ndif_opt/")[-1]
            rows.append((ct, tt, nc, f"{short}:{line} {name}"))
    rows.sort(reverse=True)
    out = io.StringIO()
    out.write(f"optimize() on {lines} dense lines: {total:.2f} s under cProfile\n")
    out.write(f"{'cumulative':>10} {'own':>8} {'calls':>8}  function\n")
    for ct, tt, nc, label in rows[:top]:
        out.write(f"{ct:10.2f} {tt:8.2f} {nc:8d}  {label}\n")
    libcst = {}
    for (filename, _, name), (_, _, tt, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "libcst" in filename:
            key = "codegen" if "codegen" in name else "metadata" if "metadata" in filename else (
                "parse" if "_parser" in filename else "visit/transform")
            libcst[key] = libcst.get(key, 0.0) + tt
    out.write("libcst own time: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(libcst.items())) + "\n")
    return out.getvalue()


def growth(timeout: float) -> None:
    """Tool time of dense scripts doubling in size, and the exponent between sizes."""
    import math

    previous = None
    print(f"{'lines':>6} {'parse':>9} {'tool':>9} {'tool/parse':>10} {'exponent':>8}")
    with tempfile.TemporaryDirectory(prefix="ndif_opt_growth_") as tmp:
        for lines in (50, 100, 200, 400, 800):
            path = _write(Path(tmp) / f"dense{lines}.py", dense_nnsight_script(lines))
            row = measure(path, timeout)
            tool = row.get("tool")
            exponent = ""
            if tool and previous:
                exponent = f"{math.log(tool / previous[1]) / math.log(row['lines'] / previous[0]):.2f}"
            shown = _fmt_time(tool) if tool else f">{row['wall']:.0f} s"
            ratio = f"{tool / row['parse']:.0f}x" if tool and row.get("parse") else "?"
            print(f"{row.get('lines', lines):>6} {_fmt_time(row.get('parse')):>9} {shown:>9} "
                  f"{ratio:>10} {exponent:>8}", flush=True)
            if not tool:
                break
            previous = (row["lines"], tool)


def growth_pairs(rounds: int) -> None:
    """The tool on dense-5k then dense-20k, ``rounds`` times, in this process: the machine's
    drift hits both sizes alike."""
    from ndif_opt import optimize

    _process_settings()
    small, large = dense_nnsight_script(5000), dense_nnsight_script(20000)
    optimize(dense_nnsight_script(40))
    pairs = []
    for _ in range(rounds):
        pairs.append(tuple(_timed_call(_as_one_file(lambda s=source: optimize(s)))
                           for source in (small, large)))
        print(f"5k {pairs[-1][0]:.2f} s  20k {pairs[-1][1]:.2f} s  ratio {pairs[-1][1] / pairs[-1][0]:.2f}", flush=True)
    best = min(p[1] for p in pairs) / min(p[0] for p in pairs)
    print(f"best 20k / best 5k: {best:.2f} (target <= 4.5)")


def _timed_call(function) -> float:
    started = _clock()
    function()
    return _clock() - started


def _clock() -> float:
    """Wall time; with --cpu-time, the CPU time of this process (the tool and the parse each
    run in it, on one thread): what other processes on a shared machine take from it is
    not counted."""
    return time.process_time() if os.environ.get("NDIF_OPT_BENCH_CPU_TIME") else time.perf_counter()


# -- main -----------------------------------------------------------------------------------


def _fmt_time(seconds) -> str:
    if seconds is None:
        return "?"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--smaller", help=argparse.SUPPRESS)
    parser.add_argument("--edit-at", help=argparse.SUPPRESS)
    parser.add_argument("--directory-worker", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="inputs 10x smaller")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per input (300)")
    parser.add_argument("--only", help="comma-separated row names")
    parser.add_argument("--profile", type=int, metavar="LINES", help="profile a dense script of LINES lines")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--library-gc", action="store_true",
                        help="measure with Python's default garbage collection (as optimize() called from a "
                             "library caller's process), not the command line's (ndif_opt/engine/runtime.py)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the tool and the parse by the CPU time of their process, not wall time "
                             "(steadier on a machine other work shares; the directory rows stay wall time)")
    parser.add_argument("--growth", action="store_true",
                        help="time dense scripts of 50..800 lines: how time grows with size")
    parser.add_argument("--growth-pairs", type=int, metavar="ROUNDS",
                        help="dense-5k and dense-20k alternated ROUNDS times in one process: the 20k/5k "
                             "ratio alone, each pair shown (the table's growth row runs them in turn too)")
    args = parser.parse_args()
    if args.library_gc:
        os.environ["NDIF_OPT_BENCH_LIBRARY_GC"] = "1"  # read by the workers
    if args.cpu_time:
        os.environ["NDIF_OPT_BENCH_CPU_TIME"] = "1"  # read by the workers
    if args.directory_worker:
        _directory_worker(args.directory_worker, args.jobs)
        return
    if args.worker and args.edit_at is not None:
        _editor_worker(args.worker, args.repeat, args.edit_at)
        return
    if args.worker:
        _worker(args.worker, args.repeat, args.smaller)
        return
    if args.profile:
        print(profile(args.profile))
        return
    if args.growth:
        growth(args.timeout)
        return
    if args.growth_pairs:
        growth_pairs(args.growth_pairs)
        return

    with tempfile.TemporaryDirectory(prefix="ndif_opt_bench_") as tmp:
        paths = every_path = write_inputs(Path(tmp), args.quick)
        if args.only:
            wanted = set(args.only.split(","))
            paths = {k: v for k, v in paths.items() if k in wanted or k.split(":")[0] in wanted}
        rows = {}
        if args.cpu_time:
            print("times are CPU time of the measuring process (--cpu-time), not wall time")
        print(f"{'input':28} {'lines':>7} {'parse':>9} {'prefilter':>9} {'tool':>9} {'lines/s':>9} {'tool/parse':>10}")
        for name, path in paths.items():
            timeout = args.timeout if not name.startswith("example") else min(args.timeout, 120)
            # dense-20k's worker runs dense-5k in turn (realistic-5k's realistic-500): the
            # growth rows compare two sizes measured in the same minutes (the VM's slow
            # phases last minutes)
            smaller = every_path.get(GROWTH[name]) if name in GROWTH else None
            repeat = 1 if "100k" in name else 10 if name in EDIT_AT else 5
            row = measure(path, timeout, repeat=repeat, smaller=smaller, edit_at=EDIT_AT.get(name))
            rows[name] = row
            tool = row.get("tool")
            ratio = (f"{tool / row['parse']:.1f}x" if tool is not None and row.get("parse")
                     else f">{(row['wall']) / row['parse']:.0f}x" if row.get("parse") else "?")
            speed = f"{row['lines'] / tool:,.0f}" if tool else "?"
            shown_tool = _fmt_time(tool) if tool is not None else f">{row['wall']:.0f} s"
            print(f"{name:28} {row.get('lines', 0):>7} {_fmt_time(row.get('parse')):>9} "
                  f"{_fmt_time(row.get('prefilter')):>9} {shown_tool:>9} {speed:>9} {ratio:>10}", flush=True)
            if name in EDIT_AT and row.get("reruns"):
                print(f"{'':28} the document opened in {_fmt_time(row['opened'])}; line {row['edited_line']} edited "
                      f"{len(row['reruns'])} times, re-runs {_fmt_time(min(row['reruns']))} - "
                      f"{_fmt_time(max(row['reruns']))} (median {_fmt_time(statistics.median(row['reruns']))})",
                      flush=True)
        if not args.only or "directory" in args.only:
            tree = write_tree(Path(tmp) / "tree")
            d = directory_mode(tree, args.timeout)
            rows["directory-500"] = d
            print(f"\ndirectory of 500 files (`ndif-opt DIR --check -q`): wall {d['wall']:.2f} s, "
                  f"CPU {d['cpu']:.2f} s on {d['cores']} cores (CPU/wall {d['cpu'] / d['wall']:.2f}: "
                  f"{'sequential' if d['cpu'] / d['wall'] < 1.3 else 'parallel'}); with -j 1 "
                  f"{d['wall_one_job']:.2f} s; start-up (`--help`) {d['startup']:.2f} s; {d['summary']}")
            one, every = d["phase_one_job"], d["phase"]
            print(f"processing phase (after start-up and import): {every['wall']:.2f} s, CPU {every['cpu']:.2f} s "
                  f"(CPU/wall {every['cpu'] / every['wall']:.2f}); with -j 1 {one['wall']:.2f} s "
                  f"(speed-up {one['wall'] / every['wall']:.2f}x)")
        print()
        _targets(rows)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))


def _targets(rows: dict) -> None:
    def tool(name):
        return rows.get(name, {}).get("tool")

    checks = []
    # only reported: issue 7 held dense-5k and dense-20k to 2.5x the parse by sharing their
    # windows out over the cores; issue 21 keeps speed code only where it pays at the
    # sizes users have (500 lines, the editor), and single-file forking did not
    for name in ("dense-20k", "dense-200", "cells-200", "mostly-plain-5k"):
        if name in rows and rows[name].get("parse"):
            t = tool(name)
            ratio = t / rows[name]["parse"] if t else None
            checks.append((f"{name}: pipeline / parse", None, f"{ratio:.1f}x" if ratio else "timed out"))
    smaller = rows.get("dense-20k", {}).get("tool_smaller")
    if tool("dense-20k") and smaller:
        growth = tool("dense-20k") / smaller
        checks.append(("20k time <= 4.5x 5k time (in turn)", growth <= 4.5, f"{growth:.1f}x"))
    # issue 21: at the sizes users have
    if tool("realistic-500") and rows["realistic-500"].get("parse"):
        ratio = tool("realistic-500") / rows["realistic-500"]["parse"]
        checks.append(("realistic-500: pipeline <= 3x parse", ratio <= 3, f"{ratio:.1f}x"))
    for name in EDIT_AT:
        if tool(name) is not None and name.endswith("-helper"):  # issue 35: every caller runs again
            ratio = tool(name) / rows[name]["parse"]
            checks.append((f"{name}: re-run <= 3x parse", ratio <= 3, f"{_fmt_time(tool(name))}, {ratio:.1f}x"))
        elif tool(name) is not None:
            checks.append((f"{name}: re-run after edit <= 50 ms", tool(name) <= 0.050, _fmt_time(tool(name))))
    if tool("dense-5k") and rows["dense-5k"].get("parse"):  # issue 35
        ratio = tool("dense-5k") / rows["dense-5k"]["parse"]
        checks.append(("dense-5k: pipeline <= 2.5x parse", ratio <= 2.5, f"{ratio:.1f}x"))
    smaller = rows.get("realistic-5k", {}).get("tool_smaller")
    if tool("realistic-5k") and smaller:
        growth = tool("realistic-5k") / smaller
        checks.append(("realistic 5k time <= 12x 500 (in turn)", growth <= 12, f"{growth:.1f}x"))
    if tool("dense-5k") and tool("dense-20k"):
        growth = tool("dense-20k") / tool("dense-5k")
        checks.append(("20k time / 5k time (their rows)", None, f"{growth:.1f}x"))
    if "plain-100k" in rows and rows["plain-100k"].get("prefilter"):
        speed = rows["plain-100k"]["lines"] / rows["plain-100k"]["prefilter"]
        checks.append(("prefilter > 100,000 lines/s", speed > 100_000, f"{speed:,.0f} lines/s"))
    for name in ("dense-200", "cells-200"):
        if tool(name) is not None:
            checks.append((f"{name}: 200-line script < 150 ms", tool(name) < 0.150, _fmt_time(tool(name))))
    examples = [row["tool"] for name, row in rows.items() if name.startswith("example:") and row.get("tool")]
    if examples:
        checks.append(("each example (18-44 lines) < 150 ms", max(examples) < 0.150,
                       f"{_fmt_time(min(examples))} - {_fmt_time(max(examples))}"))
    if "directory-500" in rows:
        d = rows["directory-500"]
        busy = d["phase"]["cpu"] / d["phase"]["wall"]
        checks.append(("directory mode uses all cores", busy > 0.8 * d["cores"],
                       f"CPU/wall {busy:.2f} of {d['cores']} while processing "
                       f"({d['cpu'] / d['wall']:.2f} with start-up and import)"))
        checks.append(("progress bar on a terminal", True,
                       "ndif_opt/frontends/progress.py (tests/frontends/test_directory_mode.py)"))
    print("target                                   met   measured")
    for label, ok, measured in checks:
        print(f"{label:40} {'' if ok is None else 'yes' if ok else 'NO ':5} {measured}")


if __name__ == "__main__":
    main()

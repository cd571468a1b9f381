"""Execution check: run a script and its optimized form against tiny models.

:func:`verify_sources` runs

(a) the original script with every ``remote=`` ignored — what its author intended;
(b) the original script against an in-process, server-faithful emulation of NDIF;
(c) the optimized script against the same emulation;

and reports whether (c) computes what (a) does (module-level values, client stdout,
files written), whether (b) already differed from (a) (the original was wrong
remotely, e.g. a client-side list appended to inside a remote trace), and what (b)
and (c) cost: requests, upload/download bytes, forward passes, layer evaluations.

Equal results count only when the runs got somewhere: a script that raises locally,
or that opens remote blocks but makes no request, is FAILED (:mod:`.verdict`).

Needs the ``verify`` extra (torch, nnsight, zstandard). Importing this package does
not import torch or nnsight; the submodules are loaded on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

_MISSING = [
    name for name in ("torch", "nnsight", "zstandard") if importlib.util.find_spec(name) is None
]
if _MISSING:
    raise ImportError(
        f"ndif_opt.verify needs {', '.join(_MISSING)}: install the verify extra: "
        "pip install torch==2.13.0 'ndif-opt[verify]' (from a checkout of ndif-opt: "
        "pip install torch==2.13.0 -e '.[verify]')"
    )

from .verdict import (  # plain Python: imports neither torch nor nnsight
    RunFacts,
    Status,
    Verdict,
    error_kind,
    first_remote_block_line,
    headline,
    judge,
    not_migrated_reason,
    only_the_originals,
    subject,
)
from .verdict import reason as verdict_reason

if TYPE_CHECKING:  # pragma: no cover
    from .compare import compare_namespaces
    from .emulation import EmulatedNDIF, RequestRecord
    from .runner import RunResult, run_script
    from .tiny_models import build_tokenizer, tiny_model

__all__ = [
    "EmulatedNDIF",
    "RequestRecord",
    "RunMetrics",
    "RunResult",
    "Status",
    "VerifyReport",
    "build_tokenizer",
    "compare_namespaces",
    "run_script",
    "tiny_model",
    "verify_sources",
    "verify_result",
]

_LAZY = {
    "tiny_model": "tiny_models",
    "build_tokenizer": "tiny_models",
    "run_script": "runner",
    "RunResult": "runner",
    "EmulatedNDIF": "emulation",
    "RequestRecord": "emulation",
    "compare_namespaces": "compare",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ndif_opt.verify' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


@dataclass
class RunMetrics:
    """The measured cost of one emulated run."""

    requests: int = 0
    upload_bytes: int = 0
    upload_raw_bytes: int = 0
    download_bytes: int = 0
    download_raw_bytes: int = 0
    forward_passes: int = 0
    layer_calls: int = 0
    error: Optional[str] = None
    records: list[dict] = field(default_factory=list)  # RequestRecord.to_dict() each

    @classmethod
    def of(cls, run: "RunResult") -> "RunMetrics":
        return cls(
            requests=len(run.requests),
            upload_bytes=run.upload_bytes,
            upload_raw_bytes=run.upload_raw_bytes,
            download_bytes=run.download_bytes,
            download_raw_bytes=run.download_raw_bytes,
            forward_passes=run.forward_passes,
            layer_calls=run.layer_calls,
            error=run.error,
            records=[r.to_dict() for r in run.requests],
        )


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_sources`."""

    # the verdict: optimized-emulated == original-local (values, stdout, files), and the
    # runs got far enough for that to mean something (never true for a FAILED run)
    intended_ok: bool
    mismatches: list[str]  # why not, (a) vs (c)
    original_remote_differs: bool  # original-emulated != original-local
    original_remote_mismatches: list[str]  # (a) vs (b)
    local_forward_passes: int  # (a)
    local_layer_calls: int  # (a)
    before: RunMetrics  # (b) original, emulated
    after: RunMetrics  # (c) optimized, emulated
    errors: dict[str, Optional[str]]  # "local" / "original" / "optimized" -> error
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    status: Status = Status.OK  # ok | same-error | mismatch | failed | not-migrated
    reason: Optional[str] = None  # one line: why FAILED, or what OK (same error) accepted
    # the nnsight (a) ran on when not this process's: "0.4" for a pre-0.5 original
    local_nnsight: Optional[str] = None
    rewritten: bool = True  # the optimized script differs from the original
    compared_within: str = ""  # the tolerance results were compared within, and why (not asked for)
    let_go: tuple[str, ...] = ()  # names the optimized run was not compared on (no longer brought back)
    # what differs between two runs of the original on your machine (a random draw, a clock,
    # a nondeterministic solver): not compared, as nothing could match it
    unstable: tuple[str, ...] = ()
    # stdout lines that differ only in their numbers from a remote run's, of a script that reads
    # your machine's clock: the times it prints differ from run to run
    timed: tuple[str, ...] = ()
    # lines the original printed locally inside its remote blocks (on NDIF, the server's log),
    # compared as one difference of the original's own
    server_log_lines: int = 0

    @classmethod
    def could_not_run(cls, reason: str) -> "VerifyReport":
        """A FAILED report for a check that could not run at all (the input could not be
        read or optimized, or verify itself broke): nothing ran, nothing was compared."""
        return cls(
            intended_ok=False,
            mismatches=[],
            original_remote_differs=False,
            original_remote_mismatches=[],
            local_forward_passes=0,
            local_layer_calls=0,
            before=RunMetrics(),
            after=RunMetrics(),
            errors={"local": None, "original": None, "optimized": None},
            status=Status.FAILED,
            reason=reason,
        )

    @classmethod
    def not_migrated(cls, reason: str) -> "VerifyReport":
        """The report for a pre-0.5 script that --migrate left as it was: nothing ran."""
        report = cls.could_not_run(reason)
        report.status, report.rewritten, report.local_nnsight = Status.NOT_MIGRATED, False, "0.4"
        return report

    @property
    def ok(self) -> bool:
        return self.intended_ok

    @property
    def failed(self) -> bool:
        """Nothing, or not enough, ran to compare (exit 2 on the command line): FAILED, or
        NOT MIGRATED (with --migrate, a script the migration left as it was)."""
        return self.status in (Status.FAILED, Status.NOT_MIGRATED)

    def to_dict(self) -> dict:
        found = asdict(self)
        found["status"] = self.status.value
        return found

    def to_text(self) -> str:
        b, a = self.before, self.after
        rows = [
            ("requests", str(b.requests), str(a.requests)),
            ("upload", _size(b.upload_bytes), _size(a.upload_bytes)),
            ("download", _size(b.download_bytes), _size(a.download_bytes)),
            ("download (raw)", _size(b.download_raw_bytes), _size(a.download_raw_bytes)),
            ("forward passes", str(b.forward_passes), str(a.forward_passes)),
            ("layer calls", str(b.layer_calls), str(a.layer_calls)),
        ]
        width = max(len(r[0]) for r in rows)
        left = max(len(r[1]) for r in rows)
        if self._nothing_ran():
            return headline(self.status, self.reason)
        lines = [
            headline(self.status, self.reason),
            f"  {'':{width}}  {'before':>{left}}    after",
        ]
        # an original that stopped at an error ran part of its work: no ratio compares it
        stopped = bool(self.errors.get("original")) and not self.errors.get("optimized")
        for name, before, after in rows:
            marker = "" if before == after or stopped else "  " + _ratio(name, b, a)
            lines.append(f"  {name:{width}}  {before:>{left}} -> {after}{marker}")
        if stopped:
            lines.append("  (the original stopped at its error: the figures before are of what ran until then)")
        lines.append("  (measured on tiny models of the scripts' model families: the bytes are theirs; "
                     "download (raw) is before NDIF's compression)")
        if self.compared_within:
            lines.append(f"  results compared within {self.compared_within}")
        if self.unstable:
            lines.append(f"  not compared: {', '.join(self.unstable)} (each differs between two runs of the original "
                         "on your machine)")
        if self.timed:
            lines.append(f"  not compared: {', '.join(self.timed)} (the script reads your machine's clock: the "
                         "numbers printed there may be times, which differ from run to run)")
        if self.local_nnsight:
            lines.append(f"  the original ran locally on nnsight {self.local_nnsight} (it uses the pre-0.5 API); "
                         "the original and the optimized script remotely on nnsight 0.8")
        if self.original_remote_differs and self.local_nnsight:
            lines.append("  note: the original script does not run on nnsight 0.8 as written (the optimized "
                         "script is what it becomes there)" if self.errors.get("original") else
                         "  note: the original script on nnsight 0.8 computes something else than on "
                         f"nnsight {self.local_nnsight}")
        elif self.original_remote_differs:
            lines.append("  note: the original script gives a different result remotely than locally"
                         + self._remote_difference_fate())
            lines.extend(f"    {m}" for m in self.original_remote_mismatches[:5])
        if not self.intended_ok:
            lines.extend(f"  mismatch: {m}" for m in self.mismatches[:10])
            if len(self.mismatches) > 10:
                lines.append(f"  ... and {len(self.mismatches) - 10} more")
        for run, error in self.errors.items():
            if error:
                first = error.splitlines()[0] if error else ""
                lines.append(f"  error ({run}): {first[:200]}")
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        return "\n".join(lines)


    def _remote_difference_fate(self) -> str:
        """What became of the original's remote differences in the optimized run: fixed
        (compared, and equal to the local run), or about names the optimized script no
        longer brings back, which were not compared (a clock read in a loop differs from
        run to run: nothing was fixed there)."""
        if not self.intended_ok:
            return ""
        about = {_root_name(subject(m)) for m in self.original_remote_mismatches}
        unchecked = sorted(about & set(self.let_go))
        if not unchecked:
            return " (fixed by the optimized script)"
        names = ", ".join(f"`{name}`" for name in unchecked)
        if len(unchecked) == len(about):
            return (f" in {names}, which the optimized script no longer brings back (nothing after reads "
                    f"{'them' if len(unchecked) > 1 else 'it'}): not compared")
        return f" (fixed by the optimized script, but for {names}: no longer brought back, not compared)"

    def _nothing_ran(self) -> bool:
        return (self.failed and not any(self.errors.values()) and not self.warnings
                and self.before == RunMetrics() and self.after == RunMetrics())


def _root_name(subject_of: str) -> str:
    """The name a mismatch's subject starts with (`results` of `results[0]`), or the subject."""
    match = re.match(r"[A-Za-z_]\w*", subject_of)
    return match.group(0) if match else subject_of


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 ** 2:
        return f"{n / 1024:.1f} KB"
    if n < 1024 ** 3:
        return f"{n / 1024 ** 2:.1f} MB"
    return f"{n / 1024 ** 3:.2f} GB"


def _ratio(name: str, before: RunMetrics, after: RunMetrics) -> str:
    attribute = {
        "requests": "requests",
        "upload": "upload_bytes",
        "download": "download_bytes",
        "download (raw)": "download_raw_bytes",
        "forward passes": "forward_passes",
        "layer calls": "layer_calls",
    }[name]
    x, y = getattr(before, attribute), getattr(after, attribute)
    if y == 0 or x == 0 or x == y:
        return ""
    if max(x, y) / min(x, y) >= 1.5:
        return f"(x{x / y:.1f} fewer)" if x > y else f"(x{y / x:.1f} more)"
    # "x1.0 more" reads as no change: the difference says it
    if attribute.endswith("_bytes"):
        return f"({abs(y - x) / x:.0%} {'less' if x > y else 'more'})"
    return f"({abs(y - x)} {'fewer' if x > y else 'more'})"


def _run_mismatches(
    expected: "RunResult",
    actual: "RunResult",
    atol: float,
    rtol: float,
    ignore_missing: Iterable[str] = frozenset(),
    *,
    ignore: Iterable[str] = (),
    ignore_extra: bool = False,
) -> list[str]:
    from .compare import compare_files, compare_namespaces

    # Names the optimizer declared it no longer brings back (nothing reads them after
    # the rewritten code) are not results: absent, or left holding an earlier value
    # that an earlier request brought back, they are not compared. The helper names it
    # introduced come in `ignore`; any other name, a user's own `_ndif_cache` included,
    # is compared.
    ignore_missing = frozenset(ignore_missing)
    want = {k: v for k, v in expected.namespace.items() if k not in ignore_missing}
    got = {k: v for k, v in actual.namespace.items() if k not in ignore_missing}
    problems = compare_namespaces(
        want, got, atol=atol, rtol=rtol, ignore=ignore, ignore_extra=ignore_extra
    )
    if expected.stdout != actual.stdout:
        problems.extend(_stdout_differences(expected.stdout, actual.stdout, atol=atol, rtol=rtol))
    for name in sorted(expected.files.keys() | actual.files.keys()):
        if name not in actual.files:
            problems.append(f"file {name}: not written")
        elif name not in expected.files:
            problems.append(f"file {name}: unexpectedly written")
        else:
            problems.extend(compare_files(name, expected.files[name], actual.files[name], atol=atol, rtol=rtol))
    if (expected.error is None) != (actual.error is None):
        problems.append(f"error: expected {expected.error or 'none'}, got {actual.error or 'none'}")
    elif expected.error and actual.error:
        if error_kind(expected.error) != error_kind(actual.error):
            problems.append(f"error: expected {expected.error}, got {actual.error}")
    return problems


def _line_difference(index: int, expected: str, actual: str, width: int = 80) -> str:
    """`stdout line 3: expected '…', got '…'`: of a long line, the part where the two first
    differ (its column said), not a start both lines share."""
    first = next((i for i, (x, y) in enumerate(zip(expected, actual)) if x != y), min(len(expected), len(actual)))
    start = 0 if first < width // 2 or max(len(expected), len(actual)) <= width else first - width // 4

    def part(line: str) -> str:
        text = line[start:start + width]
        return ("…" if start else "") + text + ("…" if start + width < len(line) else "")

    where = f" (from column {first + 1})" if start else ""
    return f"stdout line {index + 1}{where}: expected {part(expected)!r}, got {part(actual)!r}"


def _without_server_log_lines(local: "RunResult", remote: tuple["RunResult", ...],
                              original: str) -> tuple["RunResult", int]:
    """The local run without the lines of its output that no ``remote`` run (the original's
    and the optimized script's, on NDIF) prints anywhere, when the original's remote blocks
    call `print`: run remotely, those calls print to the server's log, in both scripts alike.
    Also the number of lines left out."""
    if any(run.error is not None for run in remote) or not _prints_in_remote_blocks(original):
        return local, 0
    printed = {line for run in remote for line in run.stdout.splitlines()}
    mine = local.stdout.splitlines(keepends=True)
    kept = [line for line in mine if line.rstrip("\r\n") in printed]
    if len(kept) == len(mine):
        return local, 0
    return dataclasses.replace(local, stdout="".join(kept)), len(mine) - len(kept)


def _lines_differing_in_numbers(local: str, *remote: str) -> set[str]:
    """The stdout lines (as mismatches name them) where a ``remote`` run's output differs from
    ``local`` only in the numbers written."""
    from .compare import same_but_numbers

    mine = local.splitlines()
    return {f"stdout line {index + 1}" for theirs in remote
            for index, (x, y) in enumerate(zip(mine, theirs.splitlines())) if x != y and same_but_numbers(x, y)}


def _reads_the_clock(source: str) -> bool:
    """Does ``source`` call a function that reads your machine's clock (`time.time()`...)?"""
    import libcst as cst

    from ndif_opt.analysis.effects import CLOCK_FUNCTIONS
    from ndif_opt.analysis.facts import qualify
    from ndif_opt.syntax.walk import find_nodes

    facts = _facts_of(source)
    return facts is not None and any(qualify(call.func, facts.imports) in CLOCK_FUNCTIONS
                                     for call in find_nodes(facts.module, lambda n: type(n) is cst.Call))


def _prints_in_remote_blocks(source: str) -> bool:
    """Does a remote block of ``source`` call `print`?"""
    import libcst as cst

    from ndif_opt.analysis.facts import Remote
    from ndif_opt.syntax.walk import find_nodes

    facts = _facts_of(source)
    return facts is not None and any(
        find_nodes(block.node.body, lambda n: type(n) is cst.Call and type(n.func) is cst.Name
                   and n.func.value == "print")
        for block in facts.blocks if block.remote.state is not Remote.NO)


@functools.lru_cache(maxsize=4)
def _facts_of(source: str):
    """The facts of a script verify runs (None when it does not parse): read once for the
    questions verify asks of it."""
    import libcst as cst

    from ndif_opt.analysis.facts import analyze

    try:
        return analyze(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return None


def _stdout_differences(expected: str, actual: str, shown: int = 10, *, atol: float = 0.0,
                        rtol: float = 0.0) -> list[str]:
    """Each differing line (the first ``shown``), so that two runs wrong on different lines
    can be told apart; then a differing count of lines. Under a tolerance, a line whose
    numbers each differ within it is the same (:func:`compare.same_text_within`)."""
    from .compare import same_text_within

    a, b = expected.splitlines(), actual.splitlines()
    differing = [index for index, (x, y) in enumerate(zip(a, b)) if not same_text_within(x, y, atol, rtol)]
    if not differing and len(a) == len(b) and expected.endswith("\n") == actual.endswith("\n"):
        return []
    found = [_line_difference(i, a[i], b[i]) for i in differing[:shown]]
    if len(differing) > shown:
        found.append(f"stdout: {len(differing) - shown} more lines differ")
    if len(a) != len(b):
        found.append(f"stdout: expected {len(a)} lines, got {len(b)}")
    return found or ["stdout differs"]  # a differing trailing newline


def verify_sources(
    original: str,
    optimized: str,
    *,
    filename: str = "script.py",
    atol: float = 0.0,
    rtol: float = 0.0,
    argv: Optional[list[str]] = None,
    timeout: Optional[float] = None,
    extra_files: Optional[dict[str, str | bytes]] = None,
    ignore_missing: Iterable[str] = frozenset(),
    ignore: Iterable[str] = (),
    ignore_extra: bool = False,
    allow_same_error: bool = False,
    original_nnsight: Optional[str] = None,
    local_run: Optional["RunResult"] = None,
    notebook: bool = False,
) -> VerifyReport:
    """Run (a) original local, (b) original emulated, (c) optimized emulated; compare.

    ``intended_ok`` holds when (c) leaves the same comparable module-level values as
    (a) (tensors exactly equal unless ``atol``/``rtol`` are given), prints the same
    client stdout and writes the same files (the same bytes, or under a tolerance the
    same contents of a file verify can read) — and (a) did not raise, and each script
    that opens ``remote=True`` blocks made a request (else ``status`` is FAILED).
    ``allow_same_error``: accept (a) and (c) raising the same exception, message included (status
    ``same-error``) when their requests ran.

    ``ignore_missing``: names the optimized script may no longer define (compared if
    it does). ``ignore``: names left out of every comparison (:func:`verify_result`
    passes the names the optimizer introduced). ``ignore_extra``: accept any name only
    the optimized script defines.

    ``original_nnsight="0.4"``: the original uses the pre-0.5 API (the optimized script is
    its migration): (a) runs in the nnsight 0.4 venv (:mod:`.original_04`); without that
    venv the report is FAILED and says so. ``local_run``: (a), run already (several
    originals on nnsight 0.4 in one process: :func:`.original_04.run_originals_04`).
    ``notebook``: the scripts are a notebook's cells, run as a kernel runs them
    (``display`` is there: :func:`.runner.run_script`).
    """
    import time

    from .runner import fresh_workdir, run_script

    started = time.perf_counter()
    # one directory for the three runs: `__file__`, the working directory and every path
    # derived from them are the same in each (each run removes it when it ends)
    common = dict(filename=filename, argv=argv, timeout=timeout, extra_files=extra_files,
                  workdir=fresh_workdir(), notebook=notebook)
    missing = None
    if local_run is not None:
        local = local_run
    elif original_nnsight == "0.4":  # (its own process and directory)
        local, missing = _run_original_04(original, {k: v for k, v in common.items() if k != "workdir"})
    else:
        local = run_script(original, mode="local", **common)
    before = run_script(original, mode="emulated", **common)
    after = run_script(optimized, mode="emulated", **common)
    local, server_lines = _without_server_log_lines(local, (before, after), original)
    ignore = tuple(ignore)
    mismatches = _run_mismatches(
        local, after, atol, rtol, frozenset(ignore_missing), ignore=ignore, ignore_extra=ignore_extra
    )
    remote_mismatches = _run_mismatches(local, before, atol, rtol, ignore=ignore)
    unstable: set[str] = set()
    if mismatches and local_run is None and original_nnsight is None and local.error is None:
        # a difference may be the original's own: run it on your machine once more
        again = run_script(original, mode="local", **common)
        if server_lines:
            again = _without_server_log_lines(again, (before, after), original)[0]
        if again.error is None:
            unstable = {subject(m) for m in _run_mismatches(local, again, atol, rtol, ignore=ignore)}
            mismatches = [m for m in mismatches if subject(m) not in unstable]
            remote_mismatches = [m for m in remote_mismatches if subject(m) not in unstable]
    timed: set[str] = set()
    if mismatches and _reads_the_clock(original):
        # (what a line prints of the clock differs from run to run, as two runs may not show)
        timed = _lines_differing_in_numbers(local.stdout, before.stdout, after.stdout)
        mismatches = [m for m in mismatches if subject(m) not in timed]
        remote_mismatches = [m for m in remote_mismatches if subject(m) not in timed]
    if server_lines:
        # lines neither script prints on NDIF: a difference of the original's own, on its own
        # line (compared line by line, they would shift every line after them)
        logged = (f"stdout: {server_lines} line{'s' if server_lines > 1 else ''} the original prints inside its "
                  "remote blocks go to the server's log on NDIF, not to your screen")
        mismatches, remote_mismatches = [*mismatches, logged], [*remote_mismatches, logged]
    # (the two remote runs against each other, only where both differ from the local run)
    between = _run_mismatches(before, after, atol, rtol, frozenset(ignore_missing), ignore=ignore,
                              ignore_extra=ignore_extra) if mismatches and remote_mismatches else []
    verdict = judge(
        RunFacts(local.error, requests=0),  # every `remote=` ignored: no request by design
        RunFacts(before.error, len(before.requests), first_remote_block_line(original)),
        RunFacts(after.error, len(after.requests), first_remote_block_line(optimized)),
        mismatches=mismatches,
        allow_same_error=allow_same_error,
        as_the_original=only_the_originals(mismatches, remote_mismatches, between),
    )
    if missing:  # nothing to compare with: say why, not what differs from an empty run
        verdict, mismatches, remote_mismatches = Verdict(Status.FAILED), [], []
    return VerifyReport(
        intended_ok=verdict.accepted,
        mismatches=mismatches,
        original_remote_differs=bool(remote_mismatches),
        original_remote_mismatches=remote_mismatches,
        local_forward_passes=local.forward_passes,
        local_layer_calls=local.layer_calls,
        before=RunMetrics.of(before),
        after=RunMetrics.of(after),
        errors={"local": local.error, "original": before.error, "optimized": after.error},
        warnings=sorted(set(local.warnings) | set(before.warnings) | set(after.warnings)),
        seconds=time.perf_counter() - started,
        status=verdict.status,
        reason=missing or verdict_reason(verdict),
        local_nnsight=None if missing else original_nnsight,
        rewritten=optimized != original,
        let_go=tuple(sorted(ignore_missing)),
        unstable=tuple(sorted(unstable)),
        server_log_lines=server_lines,
        timed=tuple(sorted(timed)),
    )


def _run_original_04(original: str, common: dict) -> tuple["RunResult", Optional[str]]:
    """(a) of a pre-0.5 script, on nnsight 0.4; and why not, when there is no such venv."""
    from .original_04 import MISSING_04, reads_saved_value, run_original_04
    from .runner import RunResult

    run = run_original_04(original, frame_injection=not reads_saved_value(original), **common)
    if run is None:
        return RunResult(mode="local", error=f"RuntimeError: {MISSING_04}"), MISSING_04
    return run, None


def verify_result(source: str, result, *, filename: str = "script.py", unsafe_fixes: bool = False,
                  **kwargs) -> "VerifyReport":
    """:func:`verify_sources` for an :class:`ndif_opt.Result`: of the names the optimizer
    says it no longer brings back, the script's intermediates may be missing (a saved model
    value, a loop temporary: :func:`ndif_opt.analysis.regions.intermediates`); its results
    are compared like any other, unless the rewrite used ``unsafe_fixes``, which may let
    results go (the user accepted that). Names it introduced are not compared."""
    if kwargs.get("original_nnsight") == "0.4" and _still_pre_05(result.code):
        # --migrate could not migrate it, and left it as it was: no migration to run
        return VerifyReport.not_migrated(not_migrated_reason([
            (f.range.start.line + 1, f.message.removesuffix(": not migrated"), f.reason or "")
            for f in result.findings
            if f.pass_id == "migrate-api" and f.message.endswith(": not migrated")
        ]))
    let_go = kwargs.pop("ignore_missing", None)
    if let_go is None:
        let_go = set(result.unreturned) if unsafe_fixes else set(result.unreturned) & script_intermediates(source)
    tolerance = fixes_tolerance(result) if not kwargs.get("atol") and not kwargs.get("rtol") else None
    if tolerance is not None:
        kwargs["atol"], kwargs["rtol"], passes = tolerance
    report = verify_sources(
        source,
        result.code,
        filename=filename,
        ignore_missing=let_go,
        ignore=tuple(kwargs.pop("ignore", ())) + tuple(result.introduced),
        **kwargs,
    )
    if tolerance is not None:
        report.compared_within = (f"atol {tolerance[0]:g}, rtol {tolerance[1]:g}: the fixes of {passes} change "
                                  "floats in their last bits (--atol and --rtol set other tolerances)")
    if report.failed and kwargs.get("original_nnsight") is None and _still_pre_05(source):
        # (nnsight 0.8 runs no pre-0.5 script: its error is the API's, not the script's)
        report.warnings.append("the script uses the pre-0.5 nnsight API, which nnsight 0.8 does not run: "
                               "`ndif-opt verify --migrate` runs it as its author did, on nnsight 0.4, and its "
                               "migration on nnsight 0.8")
    return report


def fixes_tolerance(result) -> tuple[float, float, str] | None:
    """The tolerance (atol, rtol) the applied fixes of ``result`` keep float32 results
    within (each pass's ``float_tolerance``, the largest), and the passes, named; None
    when every applied fix keeps them exactly."""
    from ndif_opt.passes import PASSES

    inexact = {cls.id: cls.float_tolerance for cls in PASSES if cls.float_tolerance is not None}
    used = sorted({f.pass_id for f in result.findings if f.applied and f.pass_id in inexact})
    if not used:
        return None
    return (max(inexact[p][0] for p in used), max(inexact[p][1] for p in used),
            ", ".join(f"`{p}`" for p in used))


def _still_pre_05(code: str) -> bool:
    """Does ``code`` still use the pre-0.5 nnsight API (a migration that was not made)?"""
    from .original_04 import original_nnsight

    return original_nnsight(code) == "0.4"


def script_intermediates(source: str) -> frozenset[str]:
    """The module-level names of ``source`` that are no results of the script (none when
    it does not parse)."""
    import libcst as cst

    from ndif_opt.analysis.facts import analyze
    from ndif_opt.analysis.regions import intermediates

    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return frozenset()
    return intermediates(analyze(module))

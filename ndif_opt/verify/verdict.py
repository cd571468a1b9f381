"""Whether a verify run compared anything: the verdict over the three runs.

Equal results prove nothing when the runs did not get that far: three runs that all
raise ``ModuleNotFoundError`` on their first line leave equal (empty) namespaces, and
a loop over an empty list of prompts makes no request in either version. Such a run
is FAILED, not OK, and says why in one line.

The rules, in order (runs: (a) original locally, (b) original emulated, (c) optimized
emulated):

1. (a) raised: what the script should compute is unknown. A failure, unless (c) raised
   the same exception, with the same message, and the user accepts that (``allow_same_error``).
2. A script that opens a block with ``remote=True`` (known statically) but whose run
   made no request never exercised the remote part: a failure. (b) is held to it only
   when it failed no differently from (a) — the original failing on the server alone
   is a finding about the original (``original_remote_differs``), not a failed verify.
3. Otherwise the comparison decides: OK, or MISMATCH. (c) raising where (a) did not is
   a MISMATCH: the optimization broke a script that runs. Where (b) differs from (a) too,
   and (c) differs only where (b) does and there as (b) does (a `print` inside a remote
   block is a server log line, not your stdout, in both), the rewrite added no difference:
   ORIGINAL WRONG, the original script's own, not the optimization's.

Before any run, one more: with ``--migrate``, a pre-0.5 script that ``--migrate`` left as
it was (it could not migrate all of it) is NOT MIGRATED — its "optimized" script is the
original, pre-0.5 code, which fails on nnsight 0.8, and differences from that would say
nothing about a migration that was never made.

Does not import torch or nnsight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Optional

REMOTE_WRAPPER = "RemoteError: "  # how nnsight's client re-raises a server exception
ALLOW_SAME_ERROR_FLAG = "--allow-same-error"
SHOWN_ERROR_CHARS = 200


class Status(str, Enum):
    OK = "ok"
    SAME_ERROR = "same-error"  # OK because the user accepts an error both versions raise
    MISMATCH = "mismatch"
    # (c) differs from (a) only where (b), the original on NDIF, does, and as (b) does
    ORIGINAL_WRONG = "original-wrong"
    FAILED = "failed"  # nothing (or not enough) ran to compare
    NOT_MIGRATED = "not-migrated"  # --migrate left a pre-0.5 script as it was: nothing to run


class Failure(str, Enum):
    NO_REQUEST = "no-request"  # remote blocks, zero requests (perhaps after an error)
    RAISED_ALIKE = "raised-alike"  # (a) and (c) raised the same; not accepted
    ORIGINAL_RAISED = "original-raised"  # (a) raised; (c) otherwise


@dataclass(frozen=True)
class RunFacts:
    """What the verdict needs to know of one run."""

    error: Optional[str]  # "Type: message", maybe followed by a server traceback
    requests: int
    remote_block_line: Optional[int] = None  # first `remote=True` block of its script


@dataclass(frozen=True)
class Verdict:
    status: Status
    failure: Optional[Failure] = None
    script: str = "original"  # the script the failure is about
    error: Optional[str] = None  # the error the failure or acceptance is about
    other_error: Optional[str] = None  # (c)'s, when it differs from (a)'s
    line: Optional[int] = None  # the remote block that made no request

    @property
    def accepted(self) -> bool:
        return self.status in (Status.OK, Status.SAME_ERROR)


def error_kind(error: Optional[str]) -> Optional[str]:
    """The exception type of a run's error; a server exception re-raised as nnsight's
    ``RemoteError`` counts as the exception the server raised, so a remote block failing
    remotely fails the same way as it does locally."""
    if error is None:
        return None
    first = error.splitlines()[0] if error else ""
    if first.startswith(REMOTE_WRAPPER):
        first = first[len(REMOTE_WRAPPER):]
    return first.split(":")[0]


def fails_alike(error: Optional[str], other: Optional[str]) -> bool:
    """The same exception with the same message (addresses aside): two runs that both
    raise AttributeError, one on `'tuple' object has no attribute 'shape'` and the other
    further on, on another object, did not fail alike."""
    return error_kind(error) == error_kind(other) and _message(error) == _message(other)


def _message(error: Optional[str]) -> Optional[str]:
    if error is None:
        return None
    first = error.splitlines()[0].removeprefix(REMOTE_WRAPPER)
    return re.sub(r"0x[0-9a-fA-F]+", "0x…", first)


def judge(
    local: RunFacts,
    original: RunFacts,
    optimized: RunFacts,
    *,
    mismatches: list[str],
    allow_same_error: bool = False,
    as_the_original: bool = False,
) -> Verdict:
    """The verdict over (a) ``local``, (b) ``original``, (c) ``optimized``, given the
    ``mismatches`` of (a) against (c); ``as_the_original``: each of them is one (b) shows
    too, alike (:func:`only_the_originals`)."""
    failed = _original_raised(local, original, optimized, allow_same_error) or _no_request(
        local, original, optimized
    )
    if failed is not None:
        return failed
    if mismatches:
        alike = as_the_original and error_kind(optimized.error) == error_kind(original.error)
        return Verdict(Status.ORIGINAL_WRONG if alike else Status.MISMATCH)
    if local.error is not None:
        return Verdict(Status.SAME_ERROR, error=local.error)
    return Verdict(Status.OK)


def subject(mismatch: str) -> str:
    """What a mismatch line is about: a name (with its path), a stdout line, a file, the error."""
    match = re.match(r"(stdout line \d+|stdout|file [^:]+|error|[^:]+):", mismatch)
    return match.group(1) if match else mismatch


def only_the_originals(mismatches: list[str], originals: list[str], between: list[str]) -> bool:
    """Is every difference of the optimized run from the local one (``mismatches``) about
    something the original run on NDIF differs on too (``originals``), where the two
    remote runs agree (nothing of ``between``, the original's remote run against the
    optimized one, is about it)?"""
    subjects = {subject(m) for m in mismatches}
    return bool(subjects) and subjects <= {subject(m) for m in originals} \
        and not subjects & {subject(m) for m in between}


def _original_raised(
    local: RunFacts, original: RunFacts, optimized: RunFacts, allow_same_error: bool
) -> Optional[Verdict]:
    if local.error is None:
        return None
    alike = fails_alike(local.error, optimized.error)
    if alike and allow_same_error:
        return None  # accepted; whether anything ran is rule 2's question
    if original.requests == 0 and optimized.requests == 0:
        return Verdict(Status.FAILED, Failure.NO_REQUEST, error=local.error)
    if alike:
        return Verdict(Status.FAILED, Failure.RAISED_ALIKE, error=local.error)
    return Verdict(Status.FAILED, Failure.ORIGINAL_RAISED, error=local.error, other_error=optimized.error)


def _no_request(local: RunFacts, original: RunFacts, optimized: RunFacts) -> Optional[Verdict]:
    for script, run in (("original", original), ("optimized", optimized)):
        # a run that failed otherwise than (a) is a finding (rule 2), not a silent run
        if run.remote_block_line is not None and run.requests == 0 and fails_alike(local.error, run.error):
            return Verdict(Status.FAILED, Failure.NO_REQUEST, script=script, error=run.error,
                           line=run.remote_block_line)
    return None


# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------


def headline(status: Status, why: Optional[str]) -> str:
    """The first line of the text report: the status, and ``why`` (:func:`reason`) when
    it is not plainly OK or MISMATCH."""
    if status is Status.OK:
        return "verify: OK"
    if status is Status.MISMATCH:
        return "verify: MISMATCH (optimized, remote != original, local)"
    if status is Status.ORIGINAL_WRONG:
        return ("verify: ORIGINAL WRONG — the original script gives a different result on NDIF than locally, and "
                "the optimized script differs only where it does, as it does: the rewrite adds no difference")
    if status is Status.SAME_ERROR:
        return f"verify: OK (same error) — {why}"
    if status is Status.NOT_MIGRATED:
        return f"verify: NOT MIGRATED — {why}"
    return f"verify: FAILED — {why}"


def reason(verdict: Verdict) -> Optional[str]:
    """One line: why the verdict is FAILED, or what OK (same error) accepted."""
    if verdict.status is Status.SAME_ERROR:
        return (f"the original and the optimized script both raised {shown(verdict.error)}, "
                f"accepted by {ALLOW_SAME_ERROR_FLAG}; what ran before it matches")
    if verdict.failure is Failure.NO_REQUEST:
        return _no_request_reason(verdict)
    if verdict.failure is Failure.RAISED_ALIKE:
        return (f"the original script raised {shown(verdict.error)} locally and the optimized "
                f"script raised the same; only what ran before it was compared "
                f"({ALLOW_SAME_ERROR_FLAG} accepts a script that fails alike)")
    if verdict.failure is Failure.ORIGINAL_RAISED:
        return (f"the original script raised {shown(verdict.error)} locally, so what it should "
                f"compute is unknown (the optimized script: {shown(verdict.other_error) or 'no error'})")
    return None


def not_migrated_reason(unmigrated: list[tuple[int, str, str]]) -> str:
    """Why a pre-0.5 script was not migrated, from the migration's findings "not migrated"
    (line, what, why), the first named."""
    first = ""
    if unmigrated:
        line, what, why = unmigrated[0]
        first = f" (line {line}: {what}: {why}" + (f"; and {len(unmigrated) - 1} more" if len(unmigrated) > 1 else "") + ")"
    count = f"{len(unmigrated)} of its uses" if unmigrated else "some of its uses"
    return (f"the script uses the pre-0.5 nnsight API and {count} cannot be migrated "
            f"safely{first}, so --migrate left the whole script as it was (a half-migrated script runs on no "
            "nnsight release); nothing was run or compared — rewrite those uses by hand, then verify again")


def _no_request_reason(verdict: Verdict) -> str:
    if verdict.error is not None:
        return (f"the {verdict.script} script raised {shown(verdict.error)} before any remote "
                f"block ran; nothing was compared")
    return (f"the {verdict.script} script opens a remote block (line {verdict.line}) but made no "
            f"request; nothing ran remotely, so nothing remote was compared")


def shown(error: Optional[str]) -> Optional[str]:
    """An error's first line, cut short (a server error carries its whole traceback)."""
    if error is None:
        return None
    first = error.splitlines()[0] if error else ""
    return first if len(first) <= SHOWN_ERROR_CHARS else first[: SHOWN_ERROR_CHARS - 3] + "..."


# ---------------------------------------------------------------------------
# Static facts
# ---------------------------------------------------------------------------


def first_remote_block_line(source: str) -> Optional[int]:
    """The line of the first block the script opens with ``remote=`` known to be true
    (as the optimizer's analysis decides it: literals, module constants, ``**kwargs``
    dicts), or None: none, or the source does not parse (no static fact to hold to)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ndif_opt.analysis.facts import Remote, analyze

    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return None
    remote = [b.node for b in analyze(wrapper.module).blocks
              if b.parent is None and b.remote.state is Remote.YES]
    if not remote:
        return None
    positions = wrapper.resolve(PositionProvider)
    return min(positions[node].start.line for node in remote)

"""The public value types of ndif-opt: findings, costs and the result of a run.

Everything here is immutable and JSON-friendly (see ``to_dict``), so a result can be
handed to an editor, printed as JSON or compared in a test without further work.
Ranges are 0-based line/character pairs, exactly as the Language Server Protocol uses
them, with an exclusive end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum


class Safety(str, Enum):
    """How sure a fix is to keep the script's results (ruff's safe/unsafe fixes)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class Status(str, Enum):
    """What happened to a finding's fix."""

    APPLIED = "applied"
    SKIPPED = "skipped"  # a precondition failed: the code is left alone, the reason says why
    UNSAFE_NOT_APPLIED = "unsafe-not-applied"  # applicable, but needs --unsafe-fixes
    SUPPRESSED = "suppressed"  # a `# ndif-opt: ignore` comment asked to leave it


@dataclass(frozen=True, order=True)
class Position:
    line: int  # 0-based
    character: int  # 0-based, in code points


@dataclass(frozen=True, order=True)
class Range:
    start: Position
    end: Position

    @staticmethod
    def of(line: int, character: int, end_line: int, end_character: int) -> "Range":
        return Range(Position(line, character), Position(end_line, end_character))


@dataclass(frozen=True)
class Edit:
    """Replace the text in ``range`` of the *original* source by ``new_text``."""

    range: Range
    new_text: str


@dataclass(frozen=True)
class Finding:
    """One thing a pass noticed: what, where, and whether its fix was applied."""

    pass_id: str
    message: str
    range: Range
    status: Status
    safety: Safety = Safety.SAFE
    reason: str | None = None  # for SKIPPED: the precondition that failed, in plain words
    # for APPLIED: text the final code holds while the fix stands (a later pass may undo
    # it: a `.detach().cpu()` goes with the save reduction-pushdown drops); not reported
    evidence: str | None = field(default=None, compare=False, repr=False)
    # where code outside ``range`` reads what the finding is about (the client code whose
    # reductions of a saved value a fix moves to the server), in the coordinates of
    # ``range``; a notebook names their cells. Not reported.
    uses: tuple[Range, ...] = field(default=(), compare=False, repr=False)

    @property
    def applied(self) -> bool:
        return self.status is Status.APPLIED

    def with_range(self, range: Range, uses: tuple[Range, ...] | None = None) -> "Finding":
        """This finding at ``range`` (and its ``uses`` at ``uses``, when given):
        ``dataclasses.replace`` without its per-call cost (a long file's windows move every
        finding they make); keep it to every field."""
        return Finding(self.pass_id, self.message, range, self.status, self.safety, self.reason, self.evidence,
                       self.uses if uses is None else uses)

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["evidence"]
        del data["uses"]
        data["status"] = self.status.value
        data["safety"] = self.safety.value
        return data


@dataclass(frozen=True, order=True)
class UnknownDownload:
    """A value a request downloads whose size the cost model cannot work out statically."""

    name: str  # the name it comes back as: a saved name, or the saved list it is added to
    source: str  # the code that computes it
    reason: str  # why its size is not known, in the shape model's words


@dataclass(frozen=True)
class UnknownDownloads:
    """The downloads of unknown size, each with how many times the script downloads it:
    the part of a download that ``Cost.download_bytes`` counts as framing only.

    Adds and subtracts as a multiset, so that it chains and sums like the numbers of a
    :class:`Cost` (the pipeline chains per-pass costs by differences: a difference may
    hold negative counts)."""

    counts: tuple[tuple[UnknownDownload, int], ...] = ()

    @staticmethod
    def of(counts: Mapping[UnknownDownload, int]) -> UnknownDownloads:
        return UnknownDownloads(tuple(sorted((value, n) for value, n in counts.items() if n)))

    def __add__(self, other: UnknownDownloads) -> UnknownDownloads:
        return self._combined(other, 1)

    def __sub__(self, other: UnknownDownloads) -> UnknownDownloads:
        return self._combined(other, -1)

    def _combined(self, other: UnknownDownloads, sign: int) -> UnknownDownloads:
        if not other.counts:
            return self
        merged = dict(self.counts)
        for value, n in other.counts:
            merged[value] = merged.get(value, 0) + sign * n
        return UnknownDownloads.of(merged)

    @property
    def values(self) -> tuple[UnknownDownload, ...]:
        """The values downloaded at least once (a difference's negative counts are not)."""
        return tuple(value for value, n in self.counts if n > 0)

    def count(self, value: UnknownDownload) -> int:
        return dict(self.counts).get(value, 0)

    def __bool__(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True)
class Cost:
    """Static estimate of what running a script on NDIF costs."""

    requests: int = 0
    upload_bytes: int = 0
    download_bytes: int = 0  # of a value of unknown size, its framing only: see download_unknown
    forward_passes: int = 0
    # decoder-layer evaluations on the server: per forward pass, the model's layers less
    # those replaced by `.skip()` (and those after a `tracer.stop()`)
    layer_evaluations: int = 0
    compute_flops: float = 0.0
    seconds: float = 0.0
    download_unknown: UnknownDownloads = UnknownDownloads()  # what download_bytes leaves out

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PassCost:
    """The cost of the script before and after one pass of the pipeline."""

    pass_id: str
    before: Cost
    after: Cost

    def to_dict(self) -> dict:
        return {"id": self.pass_id, "before": self.before.to_dict(), "after": self.after.to_dict()}


@dataclass(frozen=True)
class Result:
    """What :func:`ndif_opt.optimize` returns."""

    source: str
    code: str
    findings: tuple[Finding, ...] = ()
    costs: tuple[PassCost, ...] = ()
    edits: tuple[Edit, ...] = ()  # turn ``source`` into ``code``; empty when unchanged
    assumptions: tuple[str, ...] = field(default=())  # cost-model assumptions, in words
    # names the original script left on the client that the optimized one no longer
    # brings back, because nothing after the rewritten code reads them
    unreturned: tuple[str, ...] = field(default=())
    # fresh names the optimized script adds (reduced values, loop-split carries)
    introduced: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return self.code != self.source

    def to_dict(self) -> dict:
        return {
            "changed": self.changed,
            "findings": [f.to_dict() for f in self.findings],
            "costs": [c.to_dict() for c in self.costs],
            "assumptions": list(self.assumptions),
            "unreturned": list(self.unreturned),
            "introduced": list(self.introduced),
        }

"""The public value types of ndif-opt: findings, costs and the result of a run.

Everything here is immutable and JSON-friendly (see ``to_dict``), so a result can be
handed to an editor, printed as JSON or compared in a test without further work.
Ranges are 0-based line/character pairs, exactly as the Language Server Protocol uses
them, with an exclusive end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
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
    # the requests (before, after) an applied fix's message quotes, from the estimate the
    # cost table is made of: the fall of its pass's row is the sum of these. None when
    # the message quotes none, or quotes them for one call of a function no code calls
    requests: tuple[int | Count, int | Count] | None = field(default=None, compare=False, repr=False)
    # the first line of the code the finding is about, as the pass saw it (a check compares
    # it with the line the finding is on). Not reported
    subject: str = field(default="", compare=False, repr=False)
    # an applied fix's message worded as a proposal ("would wrap this loop…"), for where the
    # output is not written (see ``worded``); None for a finding whose message proposes already
    proposal: str | None = field(default=None, compare=False, repr=False)
    # an applied fix's lines in the code as written that the pipeline's rewrite for it changed
    # (line spans, end exclusive; an empty one is an insertion there): what ties the final
    # edits to their findings (engine/finding_edits.py). Not reported
    touched: tuple[Range, ...] = field(default=(), compare=False, repr=False)
    # this finding in its result (``pass-id@line:column``), for ``needs``
    id: str = field(default="", compare=False, repr=False)
    # an applied fix's edits of the code as written: the edits the pipeline made for it, with
    # those of the findings in ``needs`` (an edit that is not valid without theirs): applied
    # together, once, they are the fix (Ruff's Fix, Fixit's replacement)
    fix: tuple[Edit, ...] = field(default=(), compare=False, repr=False)
    needs: tuple[str, ...] = field(default=(), compare=False, repr=False)  # ids of the others

    @property
    def applied(self) -> bool:
        return self.status is Status.APPLIED

    def worded(self, written: bool) -> str:
        """Its message as it reads where the output holds its fix (``written``: "wrapped this
        loop…"), or where nothing was written (the editor, ``--diff``, a report): a proposal
        ("would wrap this loop…")."""
        if written and self.status is Status.APPLIED:
            return self.message
        return self.proposal or self.message

    def declined(self, reason: str, status: Status = Status.SKIPPED) -> "Finding":
        """This applied fix left out after all (``reason`` says why): worded as a proposal."""
        return dataclasses.replace(self, message=self.proposal or self.message, proposal=None, status=status,
                                   reason=reason)

    def framed(self, before: str = "", after: str = "") -> "Finding":
        """This finding with ``before`` and ``after`` its message, in both wordings."""
        return dataclasses.replace(self, message=before + self.message + after,
                                   proposal=None if self.proposal is None else before + self.proposal + after)

    def with_range(self, range: Range, uses: tuple[Range, ...] | None = None,
                   touched: tuple[Range, ...] | None = None) -> "Finding":
        """This finding at ``range`` (and its ``uses`` and ``touched`` at those, when given):
        ``dataclasses.replace`` without its per-call cost (a long file's windows move every
        finding they make); keep it to every field."""
        return Finding(self.pass_id, self.message, range, self.status, self.safety, self.reason, self.evidence,
                       self.uses if uses is None else uses, self.requests, self.subject, self.proposal,
                       self.touched if touched is None else touched, self.id, self.fix, self.needs)

    def to_dict(self, written: bool = True) -> dict:
        """JSON-ready; its message worded for whether the output is ``written`` (see ``worded``)."""
        data = asdict(self)
        for unreported in ("evidence", "uses", "requests", "subject", "proposal", "touched", "id", "fix", "needs"):
            del data[unreported]
        data["message"] = self.worded(written)
        data["status"] = self.status.value
        data["safety"] = self.safety.value
        return data


@dataclass(frozen=True, order=True)
class UnknownDownload:
    """A value a request downloads whose size the cost model cannot work out statically."""

    name: str  # the name it comes back as: a saved name, or the saved list it is added to
    source: str  # the code that computes it
    reason: str  # why its size is not known, in the shape model's words


def _first(pair: tuple) -> object:
    return pair[0]


@dataclass(frozen=True)
class UnknownDownloads:
    """The downloads of unknown size, each with how many times the script downloads it:
    the part of a download that ``Cost.download_bytes`` counts as framing only.

    Adds and subtracts as a multiset, so that it chains and sums like the numbers of a
    :class:`Cost` (the pipeline chains per-pass costs by differences: a difference may
    hold negative counts)."""

    counts: tuple[tuple[UnknownDownload, int | Count], ...] = ()

    @staticmethod
    def of(counts: Mapping[UnknownDownload, int | Count]) -> UnknownDownloads:
        return UnknownDownloads(tuple(sorted(((value, n) for value, n in counts.items() if n), key=_first)))

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

    @staticmethod
    def total(items: Sequence[UnknownDownloads]) -> UnknownDownloads:
        """``items[0] + items[1] + ...``, with the multiset sorted once at the end instead of
        after each sum (the windows of a long file add up hundreds)."""
        first, rest = items[0], [item for item in items[1:] if item.counts]
        if not rest:
            return first  # (each sum with nothing to add is its left side)
        merged = {value: n for value, n in first.counts if n}
        for item in rest:
            for value, n in item.counts:
                merged[value] = merged.get(value, 0) + n
            for value, _ in item.counts:  # what each sum's `of` leaves out: a count of 0
                if value in merged and not merged[value]:
                    del merged[value]
        return UnknownDownloads.of(merged)

    @property
    def values(self) -> tuple[UnknownDownload, ...]:
        """The values downloaded at least once (a difference's negative counts are not)."""
        return tuple(value for value, n in self.counts if may_be_positive(n))

    def count(self, value: UnknownDownload) -> int | Count:
        return dict(self.counts).get(value, 0)

    def __bool__(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True, order=True)
class UnknownLoop:
    """A loop whose length the cost model cannot know before the script runs (it walks
    data the script reads): the symbol ``N`` a :class:`Count` is a polynomial in. It
    stands for the loop's iterations each time the loop runs. A function that calls
    itself is such a loop too (``recursion``): its runs per call from outside it."""

    header: str  # `for row in rows`, `while not done`: as ``ast.unparse`` spells it
    function: str = ""  # the function that holds it; "" at module level
    # when the walk first met it (outer loops first): the order its symbols are numbered
    # in (N₁, N₂), not part of what it is
    order: int = field(default=0, compare=False)
    recursion: bool = False  # the calls ``function`` makes of itself (``header``: its name)

    @property
    def lines_key(self) -> tuple[str, str]:
        return self.header, self.function

    @property
    def named(self) -> str:
        """```for row in rows```, or ``the recursion of `search```."""
        return f"the recursion of `{self.function}`" if self.recursion else f"`{self.header}`"


Number = int | float
Monomial = tuple[UnknownLoop, ...]  # the loops multiplied, sorted (nested loops: one each)


@dataclass(frozen=True)
class Count:
    """A number of the bill that depends on loops of unknown length: ``constant`` plus,
    per product of loops (a :data:`Monomial`), a coefficient times their iterations —
    ``1 + 2·N`` is one request, then two per iteration of the loop N stands for.

    It adds, subtracts and multiplies with numbers and other Counts (a sum whose loop
    terms cancel is a plain number again: :meth:`of` never makes a Count without terms),
    and divides by a number or by a Count it is a multiple of. It has no order — ``N``
    may be 0 or 10,000 — so a consumer that needs one number asks for :meth:`at` with an
    assumed length, and says that it assumed one."""

    constant: Number = 0
    terms: tuple[tuple[Monomial, Number], ...] = ()

    @staticmethod
    def of(constant: Number, terms: Mapping[Monomial, Number]) -> Number | Count:
        kept = tuple(sorted(((m, c) for m, c in terms.items() if abs(c) > 1e-9), key=_monomial_order))
        return Count(constant, kept) if kept else constant

    @staticmethod
    def trips(loop: UnknownLoop) -> Count:
        """The iterations of ``loop``: N."""
        return Count(0, (((loop,), 1),))

    @property
    def loops(self) -> tuple[UnknownLoop, ...]:
        """Its loops, in the order the walk met them."""
        return tuple(sorted({loop for monomial, _ in self.terms for loop in monomial}, key=_met))

    def at(self, trips: Number | Mapping[UnknownLoop, Number]) -> Number:
        """The value when each loop runs ``trips`` times (a number, or one per loop)."""
        total = self.constant
        for monomial, coefficient in self.terms:
            for loop in monomial:
                coefficient *= trips[loop] if isinstance(trips, Mapping) else trips
            total += coefficient
        return total

    def _combined(self, other: Number | Count, sign: int) -> Number | Count:
        constant, terms = _parts(other)
        merged = dict(self.terms)
        for monomial, coefficient in terms.items():
            merged[monomial] = merged.get(monomial, 0) + sign * coefficient
        return Count.of(self.constant + sign * constant, merged)

    def __add__(self, other: Number | Count) -> Number | Count:
        return self._combined(other, 1) if _numeric(other) else NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Number | Count) -> Number | Count:
        return self._combined(other, -1) if _numeric(other) else NotImplemented

    def __rsub__(self, other: Number) -> Number | Count:
        return (-self)._combined(other, 1) if _numeric(other) else NotImplemented

    def __neg__(self) -> Count:
        return Count(-self.constant, tuple((m, -c) for m, c in self.terms))

    def __mul__(self, other: Number | Count) -> Number | Count:
        if not _numeric(other):
            return NotImplemented
        constant, terms = _parts(other)
        mine = {(): self.constant, **dict(self.terms)}
        theirs = {(): constant, **terms}
        product: dict[Monomial, Number] = {}
        for left, a in mine.items():
            for right, b in theirs.items():
                monomial = tuple(sorted(left + right))
                product[monomial] = product.get(monomial, 0) + a * b
        return Count.of(product.pop((), 0), product)

    __rmul__ = __mul__

    def __truediv__(self, other: Number | Count) -> Number | Count:
        """By a number; by a Count of one term whose loops every term here holds
        (a loop's total over its iterations, per iteration); by a Count this is a
        multiple of (a number). Anything else raises ValueError."""
        if isinstance(other, (int, float)):
            return Count.of(self.constant / other, {m: c / other for m, c in self.terms})
        if not isinstance(other, Count):
            return NotImplemented
        ratio = _ratio_of(self, other)
        if ratio is not None:
            return ratio
        if other.constant == 0 and len(other.terms) == 1 and self.constant == 0:
            (divisor, scale), = other.terms
            quotient = {}
            for monomial, coefficient in self.terms:
                rest = _without(monomial, divisor)
                if rest is None:
                    break
                quotient[rest] = coefficient / scale
            else:
                return Count.of(quotient.pop((), 0), quotient)
        raise ValueError(f"{self} is not a multiple of {other}")

    def __round__(self, ndigits: int | None = None) -> Number | Count:
        return Count.of(round(self.constant, ndigits), {m: round(c, ndigits) for m, c in self.terms})

    def __bool__(self) -> bool:
        return bool(self.terms) or bool(self.constant)

    def __format__(self, spec: str) -> str:
        return self.text(lambda value: format(value, spec))

    def __str__(self) -> str:
        return self.text(str)

    def text(self, number, names: Mapping[UnknownLoop, str] | None = None) -> str:
        """``1 + 2·N``: the constant and each term, the numbers written by ``number``,
        the loops by ``names`` (default: N, or N₁, N₂, … in order)."""
        names = names if names is not None else default_names(self.loops)
        parts = [number(self.constant)] if self.constant else []
        for monomial, coefficient in self.terms:
            symbols = "·".join(sorted(names.get(loop, "N") for loop in monomial))
            written = number(abs(coefficient))
            term = symbols if written == "1" else f"{written}·{symbols}"
            if parts:
                parts.append(("- " if coefficient < 0 else "+ ") + term)
            else:
                parts.append(("-" if coefficient < 0 else "") + term)
        return " ".join(parts)


def _met(loop: UnknownLoop) -> tuple:
    return loop.order, loop.header, loop.function


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float, Count))


def _parts(value: Number | Count) -> tuple[Number, dict[Monomial, Number]]:
    if isinstance(value, Count):
        return value.constant, dict(value.terms)
    return value, {}


def _monomial_order(term: tuple[Monomial, Number]) -> tuple:
    return len(term[0]), term[0]


def _without(monomial: Monomial, divisor: Monomial) -> Monomial | None:
    rest = list(monomial)
    for loop in divisor:
        if loop not in rest:
            return None
        rest.remove(loop)
    return tuple(rest)


def _ratio_of(a: Count, b: Count) -> Number | None:
    """k when a == k·b, else None."""
    if len(a.terms) != len(b.terms) or any(ma != mb for (ma, _), (mb, _) in zip(a.terms, b.terms)):
        return None
    monomial, first = b.terms[0]
    k = dict(a.terms)[monomial] / first
    if abs(a.constant - k * b.constant) > 1e-9 * max(1.0, abs(a.constant)):
        return None
    if any(abs(ca - k * cb) > 1e-9 * max(1.0, abs(ca)) for (_, ca), (_, cb) in zip(a.terms, b.terms)):
        return None
    return k


def default_names(loops) -> dict[UnknownLoop, str]:
    """N for one loop; N₁, N₂, … for several, in the order given."""
    loops = list(dict.fromkeys(loops))
    if len(loops) == 1:
        return {loops[0]: "N"}
    digits = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    return {loop: "N" + str(index).translate(digits) for index, loop in enumerate(loops, 1)}


def is_known(value: Number | Count) -> bool:
    """Is ``value`` a plain number (no loop of unknown length in it)?"""
    return not isinstance(value, Count)


def direction(change: Number | Count) -> str | None:
    """"fewer" when ``change`` (before − after) is positive, "more" when negative — for
    loops of unknown length, when they run long (its highest-degree terms decide); None
    for no change."""
    if is_known(change):
        return "fewer" if change > 0 else "more" if change < 0 else None
    by_degree: dict[int, float] = {}
    for monomial, coefficient in change.terms:
        by_degree[len(monomial)] = by_degree.get(len(monomial), 0) + coefficient
    for degree in sorted(by_degree, reverse=True):
        if abs(by_degree[degree]) > 1e-9:
            return "fewer" if by_degree[degree] > 0 else "more"
    return direction(change.constant)


def grows(before: Number | Count, after: Number | Count) -> bool:
    """Is ``after`` above ``before`` (for loops of unknown length: when they run long)?"""
    return direction(before - after) == "more"


def loops_in(*values: Number | Count) -> tuple[UnknownLoop, ...]:
    """The loops of unknown length the values depend on, in order."""
    found: dict[UnknownLoop, None] = {}
    for value in values:
        if isinstance(value, Count):
            found.update(dict.fromkeys(value.loops))
    return tuple(sorted(found, key=_met))


def may_be_positive(value: Number | Count) -> bool:
    """Is ``value`` above zero for some lengths of its loops (a multiset count)?"""
    if isinstance(value, Count):
        return value.constant > 0 or any(c > 0 for _, c in value.terms)
    return value > 0


@dataclass(frozen=True)
class Cost:
    """Static estimate of what running a script on NDIF costs.

    Each number is a plain number, or a :class:`Count` when it depends on loops whose
    length is not known before the script runs (``1 + 2·N`` requests)."""

    requests: int | Count = 0
    upload_bytes: int | Count = 0
    download_bytes: int | Count = 0  # of a value of unknown size, its framing only: see download_unknown
    forward_passes: int | Count = 0
    # decoder-layer evaluations on the server: per forward pass, the model's layers less
    # those replaced by `.skip()` (and those after a `tracer.stop()`)
    layer_evaluations: int | Count = 0
    compute_flops: float | Count = 0.0
    seconds: float | Count = 0.0
    download_unknown: UnknownDownloads = UnknownDownloads()  # what download_bytes leaves out

    @property
    def unknown_loops(self) -> tuple[UnknownLoop, ...]:
        """The loops of unknown length its numbers depend on."""
        return loops_in(self.requests, self.upload_bytes, self.download_bytes, self.forward_passes,
                        self.layer_evaluations, self.compute_flops, self.seconds,
                        *(n for _, n in self.download_unknown.counts))

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

"""What every pass is made of: an id, ruff-style docs, cases as data, and ``run``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import Facts
from ndif_opt.options import Options, RunContext
from ndif_opt.types import Safety, Status
from ndif_opt.wording import proposed, split_tenses


@dataclass(frozen=True)
class Case:
    """One example a pass must handle, checked by the test suite.

    ``after`` is the expected output, or None when the pass must leave ``before``
    unchanged; then ``reason`` is a fragment the pass's finding must contain (or ""
    when no finding is expected at all). ``notebook``: ``before`` is a notebook's code
    cells, joined (``Options.notebook``).
    """

    before: str
    after: str | None = None
    reason: str = ""
    unsafe_fixes: bool = False
    name: str = ""
    notebook: bool = False


@dataclass
class RawFinding:
    """A finding tied to a node of the tree the pass saw; the pipeline adds its range."""

    node: cst.CSTNode
    message: str
    status: Status
    safety: Safety = Safety.SAFE
    reason: str | None = None
    evidence: str | None = None  # see Finding.evidence
    uses: tuple[cst.CSTNode, ...] = ()  # see Finding.uses
    requests: tuple | None = None  # see Finding.requests
    through: cst.CSTNode | None = None  # the last node of what it is about (a run of statements)
    proposal: str | None = None  # see Finding.proposal


@dataclass
class Context:
    """What a pass may consult besides the tree and its facts: the user's options, the
    run's context (``run``: the release targeted, names reserved, ...), and what the
    pipeline's steps tell this run of the pass; the pass adds its findings and names."""

    options: Options
    server: ServerCheck
    findings: list[RawFinding] = field(default_factory=list)
    # names the original left on the client that the rewrite no longer brings back,
    # because nothing after the rewritten code reads them (loop variables, dead saves)
    unreturned: set[str] = field(default_factory=set)
    # names the rewrite added to the client's namespace (fresh, unused by the original)
    introduced: set[str] = field(default_factory=set)
    # why no rewrite may be applied in this run (the script's nnsight API): a pass that
    # explains reports what it would do as not fixed, with this reason
    rewrites_refused: str = ""
    # client containers that a whole run with the migration left filled inside remote blocks
    # (they would stay empty on NDIF), with accumulator-relocation's reason: the migration
    # refuses to leave them so
    left_on_server: dict[str, str] = field(default_factory=dict)
    # is this node covered by a `# ndif-opt: ignore` comment for the running pass?
    suppressed: Callable[[cst.CSTNode], bool] | None = None
    # the run's context: the release the rewrite targets, names a fresh name must not take,
    # the windows' edges (engine/pipeline.py sets it)
    run: RunContext = field(default_factory=RunContext)

    def allows(self, node: cst.CSTNode, message: str) -> bool:
        """False (and a SUPPRESSED finding) when a suppression comment covers ``node``."""
        if self.suppressed is not None and self.suppressed(node):
            self.findings.append(
                RawFinding(node, proposed(message), Status.SUPPRESSED, Safety.SAFE,
                           "suppressed by a `# ndif-opt: ignore` comment")
            )
            return False
        return True

    def applied(self, node: cst.CSTNode, message: str, safety: Safety = Safety.SAFE,
                evidence: str | None = None, uses: tuple[cst.CSTNode, ...] = (), requests: tuple | None = None) -> None:
        """``message``: its phrases that change with the moment written as
        ``tense(done, proposed)`` (ndif_opt/wording.py). ``evidence``: text the final code holds
        while this fix stands; the finding is dropped when a later pass undoes the fix.
        ``uses``, ``requests``: see Finding."""
        message, proposal = split_tenses(message)
        self.findings.append(RawFinding(node, message, Status.APPLIED, safety, evidence=evidence, uses=uses,
                                        requests=requests, proposal=proposal))

    def skipped(self, node: cst.CSTNode, message: str, reason: str, through: cst.CSTNode | None = None) -> None:
        """``through``: the finding is about ``node`` and what follows it up to this node (a run
        of statements): its range spans them."""
        self.findings.append(RawFinding(node, proposed(message), Status.SKIPPED, Safety.SAFE, reason, through=through))

    def needs_unsafe(self, node: cst.CSTNode, message: str, reason: str,
                     uses: tuple[cst.CSTNode, ...] = (), through: cst.CSTNode | None = None) -> None:
        self.findings.append(
            RawFinding(node, proposed(message), Status.UNSAFE_NOT_APPLIED, Safety.UNSAFE, reason, uses=uses,
                       through=through)
        )


class Pass:
    """Base class: a subclass has a ruff-style docstring and ``cases``, and says here what
    the pipeline must know about it. Its ``id`` is its module's name (``migrate_api`` is
    ``migrate-api``): the registry (``ndif_opt/passes/__init__.py``) lists modules."""

    id: ClassVar[str]
    cases: ClassVar[tuple[Case, ...]] = ()
    #: one line on the safety of its fixes (the docs' table)
    fix_safety: ClassVar[str] = "safe"
    #: runs only when asked for: ``--migrate`` (``Options.migrate``), or selected by id
    opt_in: ClassVar[bool] = False
    #: when not asked for (and not ignored) it still runs, to report only
    reports_when_off: ClassVar[bool] = False
    #: runs first and once, on the code as written; the only pass that runs on code for
    #: the pre-0.5 nnsight API, and the only one that changes which API the code targets
    runs_first_once: ClassVar[bool] = False
    #: a check: runs once, in the first round, on the code as written, in every mode (also
    #: on pre-0.5 code); its findings stand for the whole run, whatever later passes rewrite
    checks_as_written: ClassVar[bool] = False
    #: every construct it considers gets a word: on code for the pre-0.5 API, which no
    #: pass but migration rewrites, it still runs once to say what it would do and that the
    #: API stops it (findings only: ``Context.rewrites_refused`` says why); and a refusal
    #: of an earlier round stands when a later round no longer considers its construct
    explains: ClassVar[bool] = False
    #: its fix may send more requests than the code as written: it splits a request NDIF
    #: would stop (over the hour's limit) into several it runs; any other pass's version
    #: that sends more is no fix, and the pipeline does not take it
    adds_requests: ClassVar[bool] = False
    #: (atol, rtol) within which its applied fixes keep float32 results (None: exactly):
    #: ``verify --unsafe-fixes`` compares within it unless told a tolerance
    float_tolerance: ClassVar[tuple[float, float] | None] = None

    def __init__(self, report_only: bool = False) -> None:
        self.report_only = report_only

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            cls.id = cls.__module__.rpartition(".")[2].replace("_", "-")

    @classmethod
    def summary(cls) -> str:
        """The first line of its docstring, without the ``id: `` in front."""
        return (cls.__doc__ or "").strip().splitlines()[0].partition(": ")[2]

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        raise NotImplementedError

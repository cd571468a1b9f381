"""What every pass is made of: an id, ruff-style docs, cases as data, and ``run``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from ndif_opt.analysis import Facts
from ndif_opt.effects import ServerCheck
from ndif_opt.options import Options
from ndif_opt.types import Safety, Status


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


@dataclass
class Context:
    """What a pass may consult besides the tree and its facts."""

    options: Options
    server: ServerCheck
    findings: list[RawFinding] = field(default_factory=list)
    # names the original left on the client that the rewrite no longer brings back,
    # because nothing after the rewritten code reads them (loop variables, dead saves)
    unreturned: set[str] = field(default_factory=set)
    # names the rewrite added to the client's namespace (fresh, unused by the original)
    introduced: set[str] = field(default_factory=set)
    # is this node covered by a `# ndif-opt: ignore` comment for the running pass?
    suppressed: Callable[[cst.CSTNode], bool] | None = None

    def allows(self, node: cst.CSTNode, message: str) -> bool:
        """False (and a SUPPRESSED finding) when a suppression comment covers ``node``."""
        if self.suppressed is not None and self.suppressed(node):
            self.findings.append(
                RawFinding(node, message, Status.SUPPRESSED, Safety.SAFE,
                           "suppressed by a `# ndif-opt: ignore` comment")
            )
            return False
        return True

    def applied(self, node: cst.CSTNode, message: str, safety: Safety = Safety.SAFE,
                evidence: str | None = None) -> None:
        """``evidence``: text the final code holds while this fix stands; the finding is
        dropped when a later pass undoes the fix."""
        self.findings.append(RawFinding(node, message, Status.APPLIED, safety, evidence=evidence))

    def skipped(self, node: cst.CSTNode, message: str, reason: str) -> None:
        self.findings.append(RawFinding(node, message, Status.SKIPPED, Safety.SAFE, reason))

    def needs_unsafe(self, node: cst.CSTNode, message: str, reason: str) -> None:
        self.findings.append(
            RawFinding(node, message, Status.UNSAFE_NOT_APPLIED, Safety.UNSAFE, reason)
        )


class Pass:
    """Base class: subclasses set ``id``, a ruff-style docstring and ``cases``."""

    id: ClassVar[str]
    cases: ClassVar[tuple[Case, ...]] = ()

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        raise NotImplementedError

"""What steers a run: the user's :class:`Options` (keyword arguments, configuration, the CLI),
and the :class:`RunContext` the pipeline sets for one run of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
    """What the caller sets: the user's settings, and what the caller says about the code
    (a notebook's cells, the user's modules beside it). Nothing the pipeline decides for a
    run is here: that is the :class:`RunContext`."""

    select: frozenset[str] | None = None  # None: every pass
    ignore: frozenset[str] = frozenset()
    unsafe_fixes: bool = False
    assume_remote: bool = False  # a `remote=` flag of unknown value counts as remote
    max_batch: int = 32
    migrate: bool = False  # first rewrite pre-0.5 nnsight code for nnsight 0.5+
    cost: dict[str, Any] = field(default_factory=dict)  # cost-model assumption overrides (numbers, names)
    # the user's own modules beside the script (name -> source), so helpers imported
    # from them can be checked; the CLI reads them, the library takes them as given
    local_modules: dict[str, str] = field(default_factory=dict)
    # the code is a notebook's code cells, joined: the kernel keeps every module-level name
    # after the last cell, where a cell not yet written may read it
    notebook: bool = False
    # the nnsight release the rewritten code must run on: "0.8" or "0.6" (nnterp 1.3.0's);
    # "" infers it: 0.6 for a script that imports nnterp (see analysis/releases.py and
    # RunContext.release, the release a run decided on)
    nnsight: str = ""

    def wants(self, pass_id: str, opt_in: bool = False) -> bool:
        """Does the run include this pass? An ``opt_in`` pass (``Pass.opt_in``) only when
        asked for: ``migrate``, or selected by id."""
        if pass_id in self.ignore:
            return False
        if opt_in:
            return self.migrate or (self.select is not None and pass_id in self.select)
        return self.select is None or pass_id in self.select


@dataclass(frozen=True)
class RunContext:
    """What one run of the pipeline on one module knows besides the :class:`Options`: set by
    the pipeline (never by a user), read by its steps and, through ``Context.run``, by the
    passes. LibCST's ``CodemodContext`` is the model: the filename and what the file's
    other parts decide, for the one module the run sees (a whole file, or a window of it)."""

    filename: str | None = None
    # the nnsight release the rewrite targets, decided for the whole file (a window alone
    # may not show the file's imports): Options.nnsight, or the one the file needs
    release: str = ""
    # names a fresh name must not take: the whole file's, when a window of it is optimized
    reserved_names: frozenset[str] = frozenset()
    # 0-based lines where a window of the file begins or ends, when the whole file is
    # optimized at once for an option (migration, a file-wide suppression) or to compare
    # with the windowed run: a run of statements that could become one session does not
    # cross them, as it cannot across windows
    window_edges: frozenset[int] = frozenset()
    # the names of the script's results (analysis/results.py), read from the whole file (a
    # window's: those it binds); None: the module's own analysis finds them
    results: frozenset[str] | None = None

"""Options that steer a run; built from keyword arguments, configuration or the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
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
    # names a fresh name must not take: the whole file's, when a part of it is optimized
    reserved_names: frozenset[str] = frozenset()
    # the code is a notebook's code cells, joined: the kernel keeps every module-level name
    # after the last cell, where a cell not yet written may read it
    notebook: bool = False
    # 0-based lines where a window of the file begins or ends, when the whole file is
    # optimized at once to compare with the windowed run: a run of statements that
    # could become one session does not cross them, as it cannot across windows
    window_edges: frozenset[int] = frozenset()
    # the nnsight release the rewritten code must run on: "0.8" or "0.6" (nnterp 1.3.0's);
    # "" infers it: 0.6 for a script that imports nnterp (see analysis/releases.py)
    nnsight: str = ""

    def wants(self, pass_id: str, opt_in: bool = False) -> bool:
        """Does the run include this pass? An ``opt_in`` pass (``Pass.opt_in``) only when
        asked for: ``migrate``, or selected by id."""
        if pass_id in self.ignore:
            return False
        if opt_in:
            return self.migrate or (self.select is not None and pass_id in self.select)
        return self.select is None or pass_id in self.select

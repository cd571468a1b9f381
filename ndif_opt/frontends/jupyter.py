"""An IPython extension: ``%load_ext ndif_opt`` in a notebook or an IPython shell.

Before each cell runs, a ``pre_run_cell`` hook analyses the session's history (the raw
text of the cells run so far, from ``ipython.history_manager``) and the new cell, joined
in order as one script, as :func:`ndif_opt.optimize` does for a notebook's cells
(``Options(notebook=True)``; IPython lines such as ``%time`` or ``!pip`` are masked by
the library). When the cell would send more requests or download more than needed, it
prints one line::

    ndif-opt: this cell sends 8 requests; optimized: 1 (%ndif_opt diff to see, %ndif_opt apply to rewrite this cell)

and the cell then runs unchanged: the extension never rewrites a cell by itself.
``%ndif_opt diff`` prints the diff of the last cell that printed such a line (cells run
since, that needed no change, do not replace it), ``%ndif_opt apply`` puts its optimized
text in the next input (``ipython.set_next_input``), to run by hand. Running that text
uses the suggestion up: ``diff`` then has nothing to show until another cell prints one.

How the cell's cost is attributed: the history ``H`` and the cell ``C`` are optimized
as one script ``H + C``. The earlier cells have already run, so only a rewrite that leaves
``H`` as it is and changes ``C`` is reported; the cell's optimized text is what follows
``H`` in the optimized script. The cell's cost is the difference of the estimates of
``H + C`` and of ``H`` alone (and of the optimized script and ``H``). When the rewrite also
changes an earlier cell (a reduction pushed into the trace of a cell that already ran,
or an earlier cell with a problem of its own), the cell is analysed alone instead, in
which case names defined by earlier cells are unknown to the analysis.
History cells that do not parse are left out.

Nothing here raises into the user's session: any error of the analysis is swallowed,
and then nothing is printed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ndif_opt.options import Options

SUMMARY_TAIL = "(%ndif_opt diff to see, %ndif_opt apply to rewrite this cell)"
USAGE = "usage: %ndif_opt diff | %ndif_opt apply"
NO_SUGGESTION = (
    "ndif-opt: no suggestion to show: no cell run since %load_ext ndif_opt could send fewer requests or download less"
)


@dataclass(frozen=True)
class CellAnalysis:
    """One cell analysed: its text, its optimized text and its cost before/after."""

    cell: str
    code: str
    requests: tuple  # (before, after): numbers, or Counts where a loop of unknown length counts
    download: tuple  # bytes of known size (before, after)
    label: str = "<cell>"  # how diffs name the cell: `In [3]` in a shell that counts its cells

    @property
    def wasteful(self) -> bool:
        return self.code != self.cell and (_fewer(*self.requests) or _fewer(*self.download))

    def summary(self) -> str:
        from ndif_opt.wording import human_bytes

        (r0, r1), (d0, d1) = self.requests, self.download
        fewer_requests = _fewer(r0, r1)
        fewer_bytes = _fewer(d0, d1)
        if fewer_requests and fewer_bytes:
            now = f"sends {_requests(r0)} and downloads {human_bytes(d0)}"
            then = f"{_requests(r1)}, {human_bytes(d1)}"
        elif fewer_requests:
            now, then = f"sends {_requests(r0)}", _count_text(r1)
        else:
            now, then = f"downloads {human_bytes(d0)}", human_bytes(d1)
        return f"ndif-opt: this cell {now}; optimized: {then} {SUMMARY_TAIL}"

    def diff(self) -> str:
        from ndif_opt.output.text import unified_diff

        return unified_diff(self.label, self.cell, self.code)


def _requests(count) -> str:
    """``1 request``, ``N requests`` (N: a loop whose length is not known before running)."""
    return f"{_count_text(count)} request" if count == 1 else f"{_count_text(count)} requests"


def _fewer(before, after) -> bool:
    from ndif_opt.output.text import direction

    return direction(before - after) == "fewer"


def _count_text(value) -> str:
    from ndif_opt.output.text import plain_count as text

    return text(value)


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _parses(text: str) -> bool:
    from ndif_opt.engine.cells import check_script_syntax

    try:
        check_script_syntax(text)
    except SyntaxError:
        return False
    return True


def _totals(result) -> tuple[int, int, int, int]:
    """(requests before, after, download before, after) of a result."""
    if not result.costs:
        return 0, 0, 0, 0
    before, after = result.costs[0].before, result.costs[-1].after
    return before.requests, after.requests, before.download_bytes, after.download_bytes


def analyse(history: list[str], cell: str) -> CellAnalysis:
    """The cell's optimized text and cost, given the cells run before it (see the module
    docstring for how the cost is attributed). Raises on an analysis error."""
    from ndif_opt.api import optimize

    options = Options(notebook=True)
    cell_text = _with_newline(cell)
    prefix = "".join(_with_newline(h) for h in history if h.strip() and _parses(h))
    if prefix:
        whole = optimize(prefix + cell_text, options=options)
        if whole.code.startswith(prefix):
            past = optimize(prefix, options=options)
            r0, r1, d0, d1 = _totals(whole)
            p_requests, _, p_download, _ = _totals(past)
            return CellAnalysis(
                cell=cell_text,
                code=whole.code[len(prefix):],
                requests=(r0 - p_requests, r1 - p_requests),
                download=(d0 - p_download, d1 - p_download),
            )
    alone = optimize(cell_text, options=options)
    r0, r1, d0, d1 = _totals(alone)
    return CellAnalysis(cell=cell_text, code=alone.code, requests=(r0, r1), download=(d0, d1))


class NdifOptExtension:
    """The state of the extension in one shell: the last cell analysed, and the last one
    that had a suggestion (what ``%ndif_opt diff`` and ``apply`` act on)."""

    def __init__(self, ipython: Any):
        self.ipython = ipython
        self.last: CellAnalysis | None = None
        self.suggestion: CellAnalysis | None = None

    def history(self) -> list[str]:
        """The raw text of the cells run so far in this session (not the one about to run)."""
        manager = getattr(self.ipython, "history_manager", None)
        cells = list(getattr(manager, "input_hist_raw", None) or [])
        return [c for c in cells[1:] if isinstance(c, str)]  # entry 0 is a placeholder

    def pre_run_cell(self, info: Any) -> None:
        try:
            cell = getattr(info, "raw_cell", None)
            if not isinstance(cell, str) or not cell.strip() or cell.lstrip().startswith("%ndif_opt"):
                return
            if self.suggestion is not None and _with_newline(cell) == self.suggestion.code:
                self.suggestion = None  # the optimized cell runs: the suggestion is taken
            analysis = replace(analyse(self.history(), cell), label=self._label())
            self.last = analysis
            if analysis.wasteful:
                self.suggestion = analysis
                print(analysis.summary())
        except Exception:  # noqa: BLE001 - never raise into the user's session
            return

    def _label(self) -> str:
        """`In [N]`, N the number of the cell about to run, as the shell's prompt shows it."""
        count = getattr(self.ipython, "execution_count", None)
        return f"In [{count}]" if isinstance(count, int) else "<cell>"

    def magic(self, line: str) -> None:
        """Show or take ndif-opt's suggestion for a cell of this session.

        %ndif_opt diff   print the diff of the last cell that had a suggestion: the line
                         "ndif-opt: this cell sends ...; optimized: ..." printed before it
                         ran. Cells run since, that needed no change, do not replace it.
        %ndif_opt apply  put that cell's optimized text in the next input, to run by hand
                         (nothing is run or rewritten by itself). Once it has run, the
                         suggestion is taken: diff has nothing to show until a cell has
                         another one.

        %load_ext ndif_opt checks each cell before it runs (it needs ndif-opt's jupyter
        extra in the kernel's environment); %unload_ext ndif_opt stops it.
        """
        command = line.strip()
        if command not in ("diff", "apply"):
            print(USAGE)
            return
        if self.suggestion is None:
            print(NO_SUGGESTION)
            return
        if command == "diff":
            print(self.suggestion.diff(), end="")
        else:
            self.ipython.set_next_input(self.suggestion.code, replace=False)
            print(f"ndif-opt: the next input holds {self.suggestion.label} optimized: run it to use it")


def load_ipython_extension(ipython: Any) -> NdifOptExtension:
    """Register the ``pre_run_cell`` hook and the ``%ndif_opt`` line magic."""
    previous = getattr(ipython, "_ndif_opt_extension", None)
    if previous is not None:  # loaded again: one hook, not two
        return previous
    extension = NdifOptExtension(ipython)
    ipython.events.register("pre_run_cell", extension.pre_run_cell)
    ipython.register_magic_function(extension.magic, magic_kind="line", magic_name="ndif_opt")
    ipython._ndif_opt_extension = extension
    return extension


def unload_ipython_extension(ipython: Any) -> None:
    extension = getattr(ipython, "_ndif_opt_extension", None)
    if extension is None:
        return
    try:
        ipython.events.unregister("pre_run_cell", extension.pre_run_cell)
    except ValueError:
        pass
    magics = getattr(getattr(ipython, "magics_manager", None), "magics", {})
    if magics.get("line", {}).get("ndif_opt") == extension.magic:  # %ndif_opt goes with the hook
        magics["line"].pop("ndif_opt")
    ipython._ndif_opt_extension = None

"""The library entry point, :func:`optimize`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ndif_opt.options import Options
from ndif_opt.types import Result

if TYPE_CHECKING:
    from ndif_opt.engine.pipeline import WindowCache


def optimize(
    source: str,
    *,
    filename: str | None = None,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    unsafe_fixes: bool = False,
    assume_remote: bool = False,
    max_batch: int = 32,
    options: Options | None = None,
    cache: "WindowCache | None" = None,
) -> Result:
    """Optimize one Python script for remote execution on NDIF.

    Pure: reads nothing but its arguments, writes nothing, prints nothing, and gives
    the same result for the same input. ``select``/``ignore`` take pass ids;
    ``unsafe_fixes`` also applies fixes that may change results slightly or move
    client effects (see each pass's "Fix safety"); ``assume_remote`` treats a
    ``remote=`` flag whose value cannot be determined as true. ``options``, when
    given, overrides the keyword arguments (it is what configuration files produce).
    ``cache``, a :class:`ndif_opt.engine.pipeline.WindowCache` kept across calls on edits of one
    file, makes a re-run cost only the independent parts of the file that changed; the
    result is the same as without it. IPython lines (``!pip install ...``, ``%time ...``)
    are kept as they are, as in a notebook (:func:`ndif_opt.engine.cells.optimize_script`).
    Raises ``SyntaxError`` for source that does not parse.
    """
    from ndif_opt.engine.cells import optimize_script

    if options is None:
        options = Options(
            select=frozenset(select) if select is not None else None,
            ignore=frozenset(ignore or ()),
            unsafe_fixes=unsafe_fixes,
            assume_remote=assume_remote,
            max_batch=max_batch,
        )
    return optimize_script(source, options, filename=filename, cache=cache)

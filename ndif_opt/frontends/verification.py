"""The execution check of one optimized input, as `ndif-opt verify` and the MCP server's
`verify` tool run it: a notebook runs cell by cell, a script without its IPython lines."""

from __future__ import annotations

from dataclasses import replace

from ndif_opt.frontends.files import SourceFile
from ndif_opt.options import Options
from ndif_opt.types import Result


def verify_optimized(source: SourceFile, result: Result, path: str, settings: Options, **options):
    """The :class:`ndif_opt.verify.VerifyReport` of ``result`` against ``source``.
    ``options``: how results are compared; ``settings``: how the script was optimized
    (unsafe fixes may let results go; with --migrate a pre-0.5 original runs on nnsight 0.4)."""
    from ndif_opt.verify import verify_result

    if getattr(result, "notebook", None) is not None:
        from ndif_opt.frontends.notebook import verify_notebook

        return verify_notebook(source.text, result, filename=path, **options)
    from ndif_opt.engine.ipython_lines import script_without_magics

    # a script's `!pip install` lines are not Python: run it as a notebook would
    runnable = replace(result, code=script_without_magics(result.code))
    original = script_without_magics(source.text)
    return verify_result(original, runnable, filename=path, unsafe_fixes=settings.unsafe_fixes,
                         original_nnsight=original_nnsight(original, settings), **options)


def original_nnsight(source: str, options: Options) -> str | None:
    """With --migrate, a pre-0.5 original runs on nnsight 0.4 (its migration on 0.8)."""
    if not options.migrate:
        return None
    from ndif_opt.verify.original_04 import original_nnsight as release_of

    return release_of(source)

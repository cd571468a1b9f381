"""The execution check of one optimized input, as `ndif-opt verify` and the MCP server's
`verify` tool run it: a notebook runs cell by cell, a script without its IPython lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ndif_opt.frontends.files import SourceFile
from ndif_opt.options import Options
from ndif_opt.types import Result


def verify_optimized(source: SourceFile, result: Result, path: str, settings: Options, **options):
    """The :class:`ndif_opt.verify.VerifyReport` of ``result`` against ``source``.
    ``options``: how results are compared; ``settings``: how the script was optimized
    (unsafe fixes may let results go; with --migrate a pre-0.5 original runs on nnsight 0.4)."""
    from ndif_opt.verify import verify_result

    if getattr(result, "notebook", None) is not None:
        from ndif_opt.frontends.notebook import notebook_script, verify_notebook

        return verify_notebook(source.text, result, filename=path,
                               original_nnsight=original_nnsight(notebook_script(source.text), settings), **options)
    from ndif_opt.engine.cells import script_cells
    from ndif_opt.engine.ipython_lines import script_without_magics

    # a script's `!pip install` lines are not Python: run it as a notebook would
    runnable = replace(result, code=script_without_magics(result.code))
    original = script_without_magics(source.text)
    options.setdefault("extra_files", neighbour_files(path))
    # a `# %%` script's cells run in a kernel (VS Code, PyCharm, jupytext), as ndif-opt
    # optimizes them: `display` is there
    options.setdefault("notebook", script_cells(source.text) is not None)
    return verify_result(original, runnable, filename=path, unsafe_fixes=settings.unsafe_fixes,
                         original_nnsight=original_nnsight(original, settings), **options)


#: what verify copies from beside a script into the directory its runs start in
NEIGHBOURS_MAX_FILE = 2 * 1024 * 1024
NEIGHBOURS_MAX_TOTAL = 20 * 1024 * 1024
NEIGHBOURS_MAX_DEPTH = 2
_SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", "site-packages"})


def neighbour_files(path: str) -> dict[str, bytes]:
    """The files beside the script (and in its folders, two levels down), relative path ->
    content: a run starts in a fresh directory, where `open("prompts.txt")` and `import
    helpers` find them as they do beside the script. Hidden files and folders, virtual
    environments and caches are left out, and so are files over 2 MB, and any past 20 MB
    in all (a large data file: give the script a smaller one to verify)."""
    if not Path(path).is_file():
        return {}
    script = Path(path).resolve()
    found: dict[str, bytes] = {}
    total = 0
    for file in _beside(script.parent, NEIGHBOURS_MAX_DEPTH):
        if file == script:
            continue
        try:
            size = file.stat().st_size
            if size > NEIGHBOURS_MAX_FILE or total + size > NEIGHBOURS_MAX_TOTAL:
                continue
            found[file.relative_to(script.parent).as_posix()] = file.read_bytes()
        except OSError:  # unreadable: the run does without it, as it would fail without it
            continue
        total += size
    return found


def _beside(folder: Path, depth: int):
    """The regular files of ``folder``, then those of its folders to ``depth`` levels."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_file():
            yield entry
    if depth <= 1:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        if entry.name in _SKIPPED_DIRECTORIES or (entry / "pyvenv.cfg").exists():
            continue
        yield from _beside(entry, depth - 1)


def original_nnsight(source: str, options: Options) -> str | None:
    """With --migrate, a pre-0.5 original runs on nnsight 0.4 (its migration on 0.8)."""
    if not options.migrate:
        return None
    from ndif_opt.verify.original_04 import original_nnsight as release_of

    return release_of(source)

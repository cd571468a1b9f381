"""Files a run writes outside its own directory: recorded, read back, put back.

A script's results are often files under absolute paths (``/tmp/out/results.json``,
``~/runs/acts.pt``), not only in its working directory. While a run goes on,
:class:`WrittenFiles` notes every path the script opens for writing (``open`` /
``io.open`` in a writing mode, which ``Path.write_text``, ``np.save``, ``json.dump``
to an opened file and pandas' ``to_csv`` go through; ``torch.save`` to a path, whose
writer opens the file in C++) and every directory it creates (``os.mkdir``, which
``os.makedirs`` and ``Path.mkdir`` call). Before a path is first opened, its content
is kept. After the run :meth:`WrittenFiles.collect` reads what the paths hold, and
:meth:`WrittenFiles.restore` puts each back as it was (deleting what the run created),
so every run of a verify starts from the same files.

Not recorded, because they are no result of the script: paths inside the run's own
directory (collected by the runner), caches and configuration of libraries
(``~/.cache``, ``~/.config``, ``HF_HOME``...), the Python installation, ``/dev``,
``/proc`` and ``/sys``. Files and directories ``tempfile`` created are put back but
not compared: their names differ from run to run. Writes that bypass Python's ``open`` (a C library opening a path itself, other
than ``torch.save``) are not seen.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import sys
from typing import Any, Callable, Optional

__all__ = ["WrittenFiles"]

_WRITING_MODE = re.compile(r"[wax+]")


def _library_roots() -> tuple[str, ...]:
    """Where libraries keep caches and configuration, and the Python installation."""
    home = os.path.expanduser("~")
    roots = [
        os.path.join(home, ".cache"),
        os.path.join(home, ".config"),
        os.path.join(home, ".matplotlib"),
        os.path.join(home, ".triton"),
        sys.prefix,
        sys.base_prefix,
        "/dev",
        "/proc",
        "/sys",
    ]
    for variable in ("XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE",
                     "TORCH_HOME", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "PYTHONPYCACHEPREFIX"):
        if os.environ.get(variable):
            roots.append(os.environ[variable])
    return tuple(real for real in (os.path.realpath(root) for root in roots) if real != os.sep)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _read(path: str) -> Optional[bytes]:
    try:
        with io.FileIO(path, "r") as handle:  # FileIO: not the recording open
            return handle.readall()
    except OSError:
        return None


class WrittenFiles:
    """The files and directories one run writes outside ``run_dir`` (see the module doc)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = os.path.realpath(run_dir)
        self.ignored = _library_roots()
        self.before: dict[str, Optional[bytes]] = {}  # path -> content before the run (None: absent)
        self.created_dirs: list[str] = []
        self.temporary: list[str] = []  # files and directories tempfile created

    # -- recording -------------------------------------------------------------

    def install(self, patches: Any) -> None:
        """Record through ``patches`` (undone with them): ``open``, ``io.open``,
        ``os.mkdir``, ``torch.save``, and ``os.open`` when ``tempfile`` calls it."""
        opener = self._recording_open(builtins.open)
        patches.set(builtins, "open", opener)
        patches.set(io, "open", opener)
        patches.set(os, "mkdir", self._recording_mkdir(os.mkdir))
        patches.set(os, "open", self._tempfile_open(os.open))
        import torch
        import torch.serialization

        saver = self._recording_save(torch.save)
        patches.set(torch, "save", saver)
        patches.set(torch.serialization, "save", saver)

    def _recording_open(self, original: Callable) -> Callable:
        def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - stands in for open
            if isinstance(mode, str) and _WRITING_MODE.search(mode):
                self.note(file)
            return original(file, mode, *args, **kwargs)

        open.__wrapped__ = original  # type: ignore[attr-defined]
        return open

    def _recording_save(self, original: Callable) -> Callable:
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            self.note(f)
            return original(obj, f, *args, **kwargs)

        save.__wrapped__ = original  # type: ignore[attr-defined]
        return save

    def _recording_mkdir(self, original: Callable) -> Callable:
        def mkdir(path: Any, *args: Any, **kwargs: Any) -> Any:
            target = self._path(path)
            existed = target is None or os.path.lexists(target)
            result = original(path, *args, **kwargs)
            if not existed:
                self.created_dirs.append(target)
                if _called_by_tempfile():
                    self.temporary.append(target)
            return result

        mkdir.__wrapped__ = original  # type: ignore[attr-defined]
        return mkdir

    def _tempfile_open(self, original: Callable) -> Callable:
        """``os.open`` noting the files ``tempfile`` creates (mkstemp, NamedTemporaryFile):
        removed afterwards, never compared."""

        def open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:  # noqa: A001 - stands in for os.open
            descriptor = original(path, flags, *args, **kwargs)
            if _called_by_tempfile() and flags & os.O_CREAT:
                target = self._path(path)
                if target is not None:
                    self.temporary.append(target)
                    self.before.setdefault(target, None)
            return descriptor

        open.__wrapped__ = original  # type: ignore[attr-defined]
        return open

    def _path(self, file: Any) -> Optional[str]:
        """The absolute path of ``file`` when it is one this recorder keeps, else None."""
        if isinstance(file, int) or not isinstance(file, (str, bytes, os.PathLike)):
            return None  # a file descriptor or a buffer
        try:
            path = os.fsdecode(os.fspath(file))
        except (TypeError, ValueError):
            return None
        path = os.path.realpath(os.path.abspath(path))
        if _within(path, self.run_dir) or "__pycache__" in path.split(os.sep):
            return None
        if any(_within(path, root) for root in self.ignored):
            return None
        return path

    def note(self, file: Any) -> None:
        """``file`` is about to be written: keep its content from before the run."""
        path = self._path(file)
        if path is not None and path not in self.before:
            self.before[path] = _read(path) if os.path.isfile(path) else None

    # -- after the run -----------------------------------------------------------

    def _temporary(self, path: str) -> bool:
        return any(_within(path, made) for made in self.temporary)

    def collect(self) -> dict[str, bytes]:
        """What each recorded path holds now, by absolute path (files that are gone,
        and temporary ones, left out)."""
        found: dict[str, bytes] = {}
        for path in sorted(self.before):
            if self._temporary(path) or not os.path.isfile(path):
                continue
            data = _read(path)
            if data is not None:
                found[path] = data
        return found

    def restore(self) -> None:
        """Put every recorded path back as it was before the run; remove the
        directories the run created, when empty."""
        for path, content in self.before.items():
            try:
                if content is None:
                    if os.path.isfile(path) or os.path.islink(path):
                        os.remove(path)
                elif _read(path) != content:
                    with io.FileIO(path, "w") as handle:
                        handle.write(content)
            except OSError:  # pragma: no cover - vanished or not writable
                pass
        for directory in reversed(self.created_dirs):
            try:
                os.rmdir(directory)
            except OSError:  # not empty (files the run did not open through Python), or gone
                pass
        self.before.clear()
        self.created_dirs.clear()
        self.temporary.clear()


def _called_by_tempfile() -> bool:
    """Whether the caller of the recording wrapper is ``tempfile``'s own code."""
    return sys._getframe(2).f_globals.get("__name__") == "tempfile"

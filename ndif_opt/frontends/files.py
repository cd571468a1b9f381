"""Reading and writing scripts without ever losing the user's work.

Reads keep what the file was (encoding, byte-order mark) so the output is written the
same way; writes go to a temporary file in the target's directory and are renamed
into place, so a crash or a full disk never leaves a half-written file.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class InputError(Exception):
    """A file that cannot be optimized; the message names the file and the cause."""


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str
    encoding: str = "utf-8"
    bom: bool = False

    def encode(self, text: str) -> bytes:
        """``text`` as the input was stored: same encoding, same byte-order mark."""
        try:
            data = text.encode(self.encoding)
        except UnicodeEncodeError as error:
            raise InputError(
                f"{self.path}: the result has {text[error.start]!r}, which {self.encoding} cannot encode"
            ) from None
        return (codecs.BOM_UTF8 + data) if self.bom else data


_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def decode(path: str, data: bytes) -> SourceFile:
    for bom, name in _WIDE_BOMS:  # UTF-32 first: its LE mark starts with UTF-16's
        if data.startswith(bom):
            raise InputError(f"{path}: {name} text; Python source must be UTF-8 or declare an 8-bit encoding")
    if b"\x00" in data:
        raise InputError(f"{path}: binary file, not Python source")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "invalid or missing encoding declaration" in str(error):
            raise InputError(f"{path}: not valid utf-8 text (and no encoding declaration)") from None
        raise InputError(f"{path}: {error}") from None
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as error:
        line = body[: error.start].count(b"\n") + 1
        raise InputError(f"{path}: not valid {encoding} text (line {line})") from None
    except LookupError:
        raise InputError(f"{path}: unknown encoding {encoding!r}") from None
    return SourceFile(path, text, encoding, bom)


def read_source(path: str) -> SourceFile:
    target = Path(path)
    try:
        if target.is_dir():
            raise InputError(f"{path}: is a directory")
        data = target.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror or error})") from None
    return decode(path, data)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` by renaming a finished temporary file over it.

    A symlink is written through (its target is replaced, the link stays); an existing
    file keeps its permission bits, a new one gets the usual ``0o666 & ~umask``. On any
    failure — or an interrupt — the temporary file is removed and the target is as it
    was.
    """
    try:
        info = os.stat(path)
    except OSError:
        info = None  # absent (or a broken or looping symlink, which is replaced)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        # a device, FIFO or terminal (`-o /dev/stdout`): write to it, never replace it
        try:
            with open(path, "wb") as handle:
                handle.write(data)
        except OSError as error:
            raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
        return
    target = Path(os.path.realpath(path))  # through symlinks, as editors write
    directory = target.parent
    try:
        mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except FileNotFoundError:
        if directory.is_dir():
            raise InputError(f"{path}: cannot create a file in {str(directory)!r}") from None
        raise InputError(f"{path}: the output directory {str(directory)!r} does not exist") from None
    except NotADirectoryError:
        raise InputError(f"{path}: a parent of the output path is not a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied (cannot create a file in {str(directory)!r})") from None
    except OSError as error:
        raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(error, FileNotFoundError):
            raise InputError(f"{path}: the output directory {str(directory)!r} disappeared") from None
        if isinstance(error, OSError):
            raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
        raise


def python_files(root: str, suffixes: tuple[str, ...] = (".py",)) -> list[str]:
    """`*.py` files under a directory, sorted, without following symlinked directories.

    Hidden directories and ``__pycache__`` are skipped, and so are names that are not
    regular files (a FIFO would block the whole run on its first read). A symlink to a
    file is listed; one that is broken or loops is listed too, so that it is reported.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(suffixes):
                continue
            full = os.path.join(dirpath, name)
            try:
                if not stat.S_ISREG(os.stat(full).st_mode):
                    continue
            except OSError:
                pass  # broken or looping symlink: reading it gives the error to report
            found.append(full)
    return found


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)

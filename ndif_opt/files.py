"""Reading and writing scripts without ever losing the user's work.

Reads keep what the file was (encoding, byte-order mark) so the output is written the
same way; writes go to a temporary file in the target's directory and are renamed
into place, so a crash or a full disk never leaves a half-written file.
"""

from __future__ import annotations

import codecs
import io
import os
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
        data = text.encode(self.encoding)
        return (codecs.BOM_UTF8 + data) if self.bom else data


def decode(path: str, data: bytes) -> SourceFile:
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
    except (UnicodeDecodeError, LookupError):
        raise InputError(f"{path}: not valid {encoding} text") from None
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


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` by renaming a finished temporary file over it."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        mode = target.stat().st_mode & 0o777 if target.exists() else None
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except FileNotFoundError:
        raise InputError(f"{path}: the output directory does not exist") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as error:
        raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except OSError as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise InputError(f"{path}: cannot write ({error.strerror or error})") from None


def python_files(root: str) -> list[str]:
    """`*.py` files under a directory, sorted, without following symlinked directories."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                found.append(os.path.join(dirpath, name))
    return found


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)

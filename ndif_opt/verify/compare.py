"""Comparing what two runs of a script left behind.

Only *comparable* values take part: tensors, numpy arrays (numbers, strings, bytes,
dates; an object array when its elements are comparable) and scalars, Python
numbers, ``bool``, ``str``, ``bytes``, ``None``, pandas frames, series, indexes and
timestamps (when pandas is installed) and lists/tuples/dicts/sets made only of those. Modules, functions,
classes, model wrappers, tokenizers, open files and the like are dropped by
:func:`comparable_namespace` (as are dunder names).

Tensors must agree in shape and dtype; values must be identical when
``atol == rtol == 0`` (NaN equals NaN), else ``allclose``. Python numbers compare
with the same tolerances; ``int`` and ``float`` are different types on purpose (a
rewrite that turns a tensor into a ``float`` changes what the script computed).
Numeric numpy arrays compare as tensors do; other arrays (strings, dates) must be
equal. Pandas values compare with pandas' own ``equals``, or its testing helpers
under a tolerance. A value that cannot be compared at all is a mismatch line saying
so, never an exception.

Files compare by their bytes; under a tolerance, one whose bytes differ is read as its
extension says (``.pt``, ``.npy``, ``.npz``, ``.json``, ``.csv``, ``.pkl``...) and its
contents compared as values are (:func:`compare_files`): results saved from values
that agree within the tolerance agree too.
"""

from __future__ import annotations

import io
import math
import os
import re
from typing import Any, Callable, Iterable, Optional

__all__ = ["comparable", "comparable_namespace", "compare_files", "compare_namespaces", "describe"]

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MAX_DEPTH = 12


def _is_tensor(value: Any) -> bool:
    module = type(value).__module__
    if not module.startswith("torch"):
        return False
    import torch

    return isinstance(value, torch.Tensor)


#: numpy dtype kinds torch can hold: bool, signed and unsigned ints, floats, complex
_NUMERIC_KINDS = "biufc"
#: an object array is compared element by element only up to this size
_MAX_OBJECT_ELEMENTS = 10_000


def _is_ndarray(value: Any) -> bool:
    if type(value).__module__ != "numpy":
        return False
    import numpy

    return isinstance(value, numpy.ndarray)


def _is_object_array(value: Any) -> bool:
    return _is_ndarray(value) and value.dtype == object


def _is_numpy_scalar(value: Any) -> bool:
    if type(value).__module__ != "numpy":
        return False
    import numpy

    return isinstance(value, numpy.generic) and not isinstance(value, numpy.object_)


def _is_pandas(value: Any) -> bool:
    """A pandas frame, series or index (any index class)."""
    if not (type(value).__module__ or "").startswith("pandas"):
        return False
    import pandas

    return isinstance(value, (pandas.DataFrame, pandas.Series, pandas.Index))


def _is_pandas_scalar(value: Any) -> bool:
    """A pandas timestamp, time delta or period (``pd.NaT`` included)."""
    if not (type(value).__module__ or "").startswith("pandas"):
        return False
    import pandas

    return isinstance(value, (pandas.Timestamp, pandas.Timedelta, pandas.Period)) or value is pandas.NaT


def comparable(value: Any, _depth: int = 0, _seen: frozenset = frozenset()) -> bool:
    """Whether ``value`` is made only of comparable parts (see the module docstring)."""
    if isinstance(value, _SCALARS):
        return True
    if _is_tensor(value):
        return getattr(value, "device", None) is None or value.device.type != "meta"
    if _is_object_array(value):
        return value.size <= _MAX_OBJECT_ELEMENTS and _depth < _MAX_DEPTH and all(
            comparable(v, _depth + 1, _seen | {id(value)}) for v in value.flat
        )
    if _is_ndarray(value) or _is_numpy_scalar(value) or _is_pandas(value) or _is_pandas_scalar(value):
        return True
    if _depth >= _MAX_DEPTH or id(value) in _seen:
        return False
    seen = _seen | {id(value)}
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(comparable(v, _depth + 1, seen) for v in value)
    if isinstance(value, dict):
        return all(
            comparable(k, _depth + 1, seen) and comparable(v, _depth + 1, seen)
            for k, v in value.items()
        )
    return False


def comparable_namespace(namespace: dict) -> dict:
    """The comparable, non-dunder entries of a module namespace."""
    return {
        name: value
        for name, value in namespace.items()
        if isinstance(name, str)
        and not (name.startswith("__") and name.endswith("__"))
        and comparable(value)
    }


def describe(value: Any) -> str:
    """A short description of a value for mismatch messages."""
    if _is_tensor(value):
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if _is_ndarray(value):
        return f"ndarray{list(value.shape)} {value.dtype}"
    if _is_pandas(value):
        return f"{type(value).__name__}{list(value.shape)}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"dict of {len(value)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def compare_namespaces(
    expected: dict,
    actual: dict,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    ignore: Iterable[str] = (),
    ignore_extra: bool = False,
) -> list[str]:
    """Mismatch lines between two namespaces (empty list = equal).

    Both sides are first reduced with :func:`comparable_namespace`. Names in
    ``ignore`` are skipped; ``ignore_extra`` accepts names only ``actual`` has
    (e.g. temporaries a rewrite introduced).
    """
    skip = set(ignore)
    expected = {k: v for k, v in comparable_namespace(expected).items() if k not in skip}
    actual = {k: v for k, v in comparable_namespace(actual).items() if k not in skip}
    problems: list[str] = []
    for name in sorted(expected.keys() - actual.keys()):
        problems.append(f"{name}: missing (expected {describe(expected[name])})")
    for name in sorted(actual.keys() - expected.keys()):
        if not ignore_extra:
            problems.append(f"{name}: unexpected name ({describe(actual[name])})")
    for name in sorted(expected.keys() & actual.keys()):
        try:
            _compare(name, expected[name], actual[name], atol, rtol, problems)
        except Exception as error:  # noqa: BLE001 - one mismatch line, never a crash of verify
            problems.append(f"{name}: could not be compared ({type(error).__name__}: {error})")
    return problems


def _numbers_close(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if isinstance(a, complex) or isinstance(b, complex):
        return a == b or abs(a - b) <= atol + rtol * abs(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    if atol == 0 and rtol == 0:
        return False
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def _compare(path: str, a: Any, b: Any, atol: float, rtol: float, out: list[str]) -> None:
    if _is_tensor(a) or _is_tensor(b):
        if not (_is_tensor(a) and _is_tensor(b)):
            out.append(f"{path}: expected {describe(a)}, got {describe(b)}")
            return
        _compare_tensors(path, a, b, atol, rtol, out)
        return
    if _is_ndarray(a) or _is_ndarray(b):
        if not (_is_ndarray(a) and _is_ndarray(b)):
            out.append(f"{path}: expected {describe(a)}, got {describe(b)}")
            return
        _compare_arrays(path, a, b, atol, rtol, out)
        return
    if _is_pandas(a) or _is_pandas(b):
        if type(a) is not type(b):
            out.append(f"{path}: expected {type(a).__name__}, got {type(b).__name__}")
        elif not _pandas_equal(a, b, atol, rtol):
            out.append(f"{path}: {type(a).__name__} contents differ")
        return
    if _is_pandas_scalar(a) or _is_pandas_scalar(b):
        if type(a) is not type(b) or not (a == b or (a is b)):
            out.append(f"{path}: expected {describe(a)}, got {describe(b)}")
        return
    if _is_numpy_scalar(a):
        a = a.item()
    if _is_numpy_scalar(b):
        b = b.item()
    if type(a) is not type(b) and _same_named_tuple(a, b):
        a, b = tuple(a), tuple(b)  # one class the script defines, made once in each run
    if type(a) is not type(b):
        out.append(
            f"{path}: type {type(a).__name__} != {type(b).__name__} "
            f"(expected {describe(a)}, got {describe(b)})"
        )
        return
    if isinstance(a, bool) or a is None or isinstance(a, (str, bytes)):
        if a != b:
            out.append(f"{path}: expected {describe(a)}, got {describe(b)}")
        return
    if isinstance(a, (int, float, complex)):
        if not _numbers_close(a, b, atol, rtol):
            out.append(f"{path}: expected {a!r}, got {b!r}")
        return
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: expected {describe(a)}, got {describe(b)}")
            return
        for index, (x, y) in enumerate(zip(a, b)):
            _compare(f"{path}[{index}]", x, y, atol, rtol, out)
        return
    if isinstance(a, dict):
        missing = [k for k in a if k not in b]
        extra = [k for k in b if k not in a]
        for key in missing:
            out.append(f"{path}[{key!r}]: missing (expected {describe(a[key])})")
        for key in extra:
            out.append(f"{path}[{key!r}]: unexpected key ({describe(b[key])})")
        for key in a:
            if key in b:
                _compare(f"{path}[{key!r}]", a[key], b[key], atol, rtol, out)
        return
    if isinstance(a, (set, frozenset)):
        if a != b:
            out.append(f"{path}: sets differ ({describe(a)} vs {describe(b)})")
        return
    if a != b:  # pragma: no cover - only comparable types reach here
        out.append(f"{path}: expected {describe(a)}, got {describe(b)}")


def _same_named_tuple(a: Any, b: Any) -> bool:
    """Are ``a`` and ``b`` instances of one namedtuple class of the script, defined once in
    each run (two class objects of one name and fields)?"""
    return (isinstance(a, tuple) and isinstance(b, tuple) and hasattr(type(a), "_fields")
            and type(a).__qualname__ == type(b).__qualname__ and getattr(type(b), "_fields", None) == type(a)._fields)


def _compare_arrays(path: str, a: Any, b: Any, atol: float, rtol: float, out: list[str]) -> None:
    """Numeric arrays as tensors; strings, bytes and dates by equality; object arrays
    element by element."""
    if a.shape != b.shape:
        out.append(f"{path}: shape {list(a.shape)} != {list(b.shape)}")
        return
    # the width of a string dtype (<U3 vs <U5) is not content: compare the strings
    same_strings = a.dtype.kind == b.dtype.kind and a.dtype.kind in "US"
    if a.dtype != b.dtype and not same_strings:
        out.append(f"{path}: dtype {a.dtype} != {b.dtype}")
        return
    if a.dtype == object:
        _compare(path, a.tolist(), b.tolist(), atol, rtol, out)
        return
    if a.dtype.kind in _NUMERIC_KINDS:
        import torch

        _compare_tensors(path, torch.from_numpy(a.copy()), torch.from_numpy(b.copy()), atol, rtol, out, kind="ndarray")
        return
    import numpy

    # strings, bytes, datetimes (NaT never equals NaT: compare their positions instead)
    same = a == b
    if a.dtype.kind in "mM":
        same = same | (numpy.isnat(a) & numpy.isnat(b))
    if not bool(numpy.all(same)):
        differing = int(numpy.size(same) - numpy.count_nonzero(same))
        out.append(f"{path}: ndarray values differ ({differing} of {a.size} elements)")


def _pandas_equal(a: Any, b: Any, atol: float, rtol: float) -> bool:
    """pandas' own equality (NaN equals NaN); under a tolerance, its testing helpers."""
    if atol == 0 and rtol == 0:
        return bool(a.equals(b))
    import pandas
    from pandas import testing

    check = {
        pandas.DataFrame: testing.assert_frame_equal,
        pandas.Series: testing.assert_series_equal,
    }.get(type(a), testing.assert_index_equal)
    try:
        check(a, b, check_exact=False, atol=atol, rtol=rtol)
    except AssertionError:
        return False
    return True


def _compare_tensors(
    path: str, a: Any, b: Any, atol: float, rtol: float, out: list[str], kind: str = "Tensor"
) -> None:
    import torch

    if tuple(a.shape) != tuple(b.shape):
        out.append(f"{path}: shape {list(a.shape)} != {list(b.shape)}")
        return
    if a.dtype != b.dtype:
        out.append(f"{path}: dtype {a.dtype} != {b.dtype}")
        return
    a = a.detach().cpu()
    b = b.detach().cpu()
    if a.numel() == 0:
        return
    exact = atol == 0 and rtol == 0
    if a.is_floating_point() or a.is_complex():
        if exact:
            same = (a == b) | (torch.isnan(a) & torch.isnan(b))
            ok = bool(same.all())
        else:
            ok = torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)
        if not ok:
            diff = (a.to(torch.complex128 if a.is_complex() else torch.float64)
                    - b.to(torch.complex128 if b.is_complex() else torch.float64)).abs()
            diff = torch.nan_to_num(diff, nan=float("inf"))
            flat = int(diff.argmax())
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
            out.append(
                f"{path}: {kind} values differ (max abs diff {float(diff.max()):.3g} "
                f"at {index}; {int((diff > 0).sum())} of {a.numel()} elements differ)"
            )
        return
    if not torch.equal(a, b):
        differing = int((a != b).sum())
        out.append(f"{path}: {kind} values differ ({differing} of {a.numel()} elements)")


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


#: a number as `print` writes one (`3`, `-0.25`, `1e-07`, `.5`)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def same_but_numbers(expected: str, actual: str) -> bool:
    """Are two lines of text the same but for the numbers written in them?"""
    return _NUMBER.split(expected) == _NUMBER.split(actual)


def same_text_within(expected: str, actual: str, atol: float, rtol: float) -> bool:
    """Are two lines of text the same but for the numbers written in them, each within
    the tolerance (`|a - b| <= atol + rtol * |a|`, as for tensors)? Without a tolerance,
    the lines must be equal."""
    if expected == actual:
        return True
    if atol == 0 and rtol == 0 or not same_but_numbers(expected, actual):
        return False
    for x, y in zip(_NUMBER.findall(expected), _NUMBER.findall(actual)):
        if x != y and not abs(float(x) - float(y)) <= atol + rtol * abs(float(x)):
            return False
    return True


def compare_files(name: str, expected: bytes, actual: bytes, *, atol: float = 0.0, rtol: float = 0.0) -> list[str]:
    """Mismatch lines for a file two runs wrote (empty list = equal): equal bytes, or,
    under a tolerance, contents equal as values when the file's format is known."""
    if expected == actual:
        return []
    differ = [f"file {name}: contents differ"]
    reader = _file_reader(name)
    if reader is None or (atol == 0 and rtol == 0):
        return differ
    try:
        want, got = reader(expected), reader(actual)
    except Exception:  # noqa: BLE001 - unreadable as its extension says: compare the bytes
        return differ
    if not (comparable(want) and comparable(got)):
        return differ
    found: list[str] = []
    try:
        _compare("contents", want, got, atol, rtol, found)
    except Exception:  # noqa: BLE001
        return differ
    return [f"file {name}: {line}" for line in found]


def _file_reader(name: str) -> Optional[Callable[[bytes], Any]]:
    """How to read a file of this name's extension, if verify knows its format."""
    extension = os.path.splitext(name)[1].lower()
    return {
        ".pt": _torch_load, ".pth": _torch_load, ".bin": _torch_load, ".ckpt": _torch_load,
        ".npy": _numpy_load, ".npz": _numpy_archive,
        ".json": _json_load, ".jsonl": _json_lines,
        ".csv": _csv_load, ".tsv": _tsv_load,
        ".pkl": _pickle_load, ".pickle": _pickle_load,
    }.get(extension)


def _torch_load(data: bytes) -> Any:
    import torch

    # the script's own output, written by the run verify just made
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def _numpy_load(data: bytes) -> Any:
    import numpy

    return numpy.load(io.BytesIO(data), allow_pickle=False)


def _numpy_archive(data: bytes) -> dict:
    import numpy

    with numpy.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _json_load(data: bytes) -> Any:
    import json

    return json.loads(data.decode("utf-8"))


def _json_lines(data: bytes) -> list:
    import json

    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def _csv_load(data: bytes, separator: str = ",") -> Any:
    import pandas

    return pandas.read_csv(io.BytesIO(data), sep=separator)


def _tsv_load(data: bytes) -> Any:
    return _csv_load(data, "\t")


def _pickle_load(data: bytes) -> Any:
    import pickle

    return pickle.loads(data)  # noqa: S301 - the script's own output, as above

"""Comparing what two runs of a script left behind.

Only *comparable* values take part: tensors, numpy arrays and scalars, Python
numbers, ``bool``, ``str``, ``bytes``, ``None``, pandas frames/series (when pandas
is installed) and lists/tuples/dicts/sets made only of those. Modules, functions,
classes, model wrappers, tokenizers, open files and the like are dropped by
:func:`comparable_namespace` (as are dunder names).

Tensors must agree in shape and dtype; values must be identical when
``atol == rtol == 0`` (NaN equals NaN), else ``allclose``. Python numbers compare
with the same tolerances; ``int`` and ``float`` are different types on purpose (a
rewrite that turns a tensor into a ``float`` changes what the script computed).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

__all__ = ["comparable", "comparable_namespace", "compare_namespaces", "describe"]

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MAX_DEPTH = 12


def _is_tensor(value: Any) -> bool:
    module = type(value).__module__
    if not module.startswith("torch"):
        return False
    import torch

    return isinstance(value, torch.Tensor)


def _is_ndarray(value: Any) -> bool:
    if type(value).__module__ != "numpy":
        return False
    import numpy

    return isinstance(value, numpy.ndarray) and value.dtype != object


def _is_numpy_scalar(value: Any) -> bool:
    if type(value).__module__ != "numpy":
        return False
    import numpy

    return isinstance(value, numpy.generic) and not isinstance(value, numpy.object_)


def _is_pandas(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("pandas") and type(value).__name__ in ("DataFrame", "Series")


def comparable(value: Any, _depth: int = 0, _seen: frozenset = frozenset()) -> bool:
    """Whether ``value`` is made only of comparable parts (see the module docstring)."""
    if isinstance(value, _SCALARS):
        return True
    if _is_tensor(value):
        return getattr(value, "device", None) is None or value.device.type != "meta"
    if _is_ndarray(value) or _is_numpy_scalar(value) or _is_pandas(value):
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
        _compare(name, expected[name], actual[name], atol, rtol, problems)
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
        import torch

        _compare_tensors(path, torch.from_numpy(a.copy()), torch.from_numpy(b.copy()), atol, rtol, out, kind="ndarray")
        return
    if _is_pandas(a) or _is_pandas(b):
        if type(a) is not type(b):
            out.append(f"{path}: expected {type(a).__name__}, got {type(b).__name__}")
        elif not a.equals(b):
            out.append(f"{path}: {type(a).__name__} contents differ")
        return
    if _is_numpy_scalar(a):
        a = a.item()
    if _is_numpy_scalar(b):
        b = b.item()
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

"""analysis.tensors.holds_only_scalars: a name bound only by simple assignments of plain
scalars (numbers, strings, `.item()`, `len(...)`) makes a new value at `n += v`; any other
binding (a list, a tensor, a loop target, a parameter, a walrus) may be changed in place."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.tensors import holds_only_scalars

SCRIPT = '''
n = 0
xs = []
total = 0.0
t = 0
w = 0
label = f"run {n}"
label += "!"
for p in range(3):
    n += 1
    xs += [p]
    total += float(p) * 2 + len(xs)
    t += model.x.output.sum()
    size = abs(total) if n else round(total, 2)
    if (w := [1]):
        pass
def f(a):
    return a
'''


@pytest.mark.parametrize("name, scalar", [
    ("n", True), ("total", True), ("label", True), ("size", True),
    ("xs", False),  # a list: `+=` extends it in place
    ("t", False),  # 0, then a tensor: its next `+=` is in place
    ("w", False),  # a walrus binds a list too
    ("p", False), ("a", False), ("f", False),  # a loop target, a parameter, a function
    ("unbound", False),
])
def test_a_name_holds_only_scalars_when_every_binding_is_a_scalar(name, scalar):
    assert holds_only_scalars(analyze(cst.parse_module(SCRIPT)), name) is scalar

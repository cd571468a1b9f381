"""Every pass's cases, discovered from the passes themselves (like Fixit's VALID/INVALID)."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt import Status, optimize
from ndif_opt.options import Options
from ndif_opt.passes import PASSES

CASES = [
    pytest.param(cls, case, id=f"{cls.id}:{case.name or index}")
    for cls in PASSES
    for index, case in enumerate(cls.cases)
]


def _options(pass_cls, case) -> Options:
    return Options(select=frozenset([pass_cls.id]), unsafe_fixes=case.unsafe_fixes, notebook=case.notebook)


@pytest.mark.parametrize("pass_cls, case", CASES)
def test_case(pass_cls, case):
    result = optimize(case.before, options=_options(pass_cls, case))
    cst.parse_module(result.code)  # the output parses
    if case.after is None:
        assert result.code == case.before, "expected the code to be left alone"
        texts = [f"{f.message} {f.reason or ''}" for f in result.findings if not f.applied]
        if case.reason:
            assert any(case.reason in t for t in texts), texts
        else:  # (no finding expected at all: Case's contract)
            assert not [f for f in result.findings if f.pass_id == pass_cls.id], texts
    else:
        assert result.code == case.after
        assert any(f.applied for f in result.findings)
        again = optimize(result.code, options=_options(pass_cls, case))
        assert again.code == result.code, "a second run must change nothing"


@pytest.mark.parametrize("pass_cls", PASSES, ids=[p.id for p in PASSES])
def test_pass_has_docs_and_cases(pass_cls):
    doc = pass_cls.__doc__ or ""
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert heading in doc, heading
    assert any(c.after is not None for c in pass_cls.cases)
    assert any(c.after is None for c in pass_cls.cases)

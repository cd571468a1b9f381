"""The client/server split's execution tests (tests/passes/session_hoisting/test_execution_split.py), rewritten for
nnsight 0.6 and run on nnsight 0.6.3: every script gives what the original gives locally,
in one request.

Rewritten for 0.8 instead, 12 of them fail on 0.6.3 (a session that rebinds a local the
server does not have; see ndif_opt/analysis/releases.py): that is what the release is for.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("nnterp")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes" / "session_hoisting"))

import test_execution_split as split  # noqa: E402
from execution import FAMILIES, script  # noqa: E402  (tests/ is on sys.path: pyproject's pythonpath)

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.verify import verify_result  # noqa: E402

TESTS = [
    (name, function)
    for name, function in inspect.getmembers(split, inspect.isfunction)
    if name.startswith("test_") and "family" in inspect.signature(function).parameters
    and "check(" in inspect.getsource(function)  # the others verify their scripts themselves
]


class _Script(Exception):
    """Raised by the stand-in for `split.check`: the script a test checks, and how."""


def _script_of(function, family: str) -> tuple:
    def record(template: str, family: str, requests_after: int = 1):
        raise _Script(template, family, requests_after)

    original = split.check
    split.check = record
    try:
        function(family)
    except _Script as found:
        return found.args
    finally:
        split.check = original
    raise AssertionError("the test checked no script")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("name,function", TESTS, ids=[name for name, _ in TESTS])
def test_split_script_rewritten_for_0_6_runs_on_0_6(name, function, family):
    # the test's own checks of the 0.8 rewrite's text do not apply: its script does
    template, family, requests_after = _script_of(function, family)
    source = script(template, family)
    result = optimize(source, options=Options(nnsight="0.6"))
    report = verify_result(source, result, filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert not report.errors["optimized"], report.errors
    assert report.after.requests == requests_after, report.to_text() + "\n" + result.code
    assert report.before.requests > requests_after

"""Golden outputs, reviewed by reading.

The scripts of tests/golden/inputs/ were written for these tests, as researchers write
them: a long per-example replay, a `# %%` script, a loop whose requests may fail one by
one, helpers under a retry, a run of traces in sections. Optimized in default mode, each
must give its file of tests/golden/expected/ exactly, and each optimized script must
compute what its original does (both run on a tiny GPT-2 through verify's emulation of
NDIF; a script whose imports are not installed here is only compared as text).

After a change to what the passes write, set NDIF_OPT_UPDATE=1 to write the expected
outputs again, then read every changed line of the diff as a reviewer would before
committing it.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import libcst as cst
import pytest

from ndif_opt import optimize

GOLDEN = Path(__file__).resolve().parent / "golden"
INPUTS = sorted((GOLDEN / "inputs").glob("*.py"))
UPDATE = os.environ.get("NDIF_OPT_UPDATE") == "1"
golden = pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])


def test_there_are_golden_scripts():
    assert len(INPUTS) >= 5


@golden
def test_golden_output(path):
    result = optimize(path.read_text())
    cst.parse_module(result.code)
    expected = GOLDEN / "expected" / path.name
    if UPDATE:
        expected.write_text(result.code)
    assert result.code == expected.read_text(), f"{path.name}: the output changed; see the module docstring"
    assert optimize(result.code).code == result.code, "a second run must change nothing"


@golden
def test_golden_output_computes_what_the_original_does(path):
    pytest.importorskip("nnsight")
    from ndif_opt.verify import verify_result

    source = path.read_text()
    missing = [name for name in _imported_modules(source) if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{path.name} imports {missing[0]}, which is not installed here")
    result = optimize(source)
    report = verify_result(source, result, filename=path.name)
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert not report.errors["optimized"], report.errors
    assert report.after.requests < report.before.requests, report.to_text()


def _imported_modules(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module.split(".")[0])
    return found


def _pass_case_outputs() -> list[str]:
    from ndif_opt.passes import PASSES

    return [case.after for cls in PASSES for case in cls.cases if case.after]


def test_each_generated_helper_name_says_what_it_holds():
    # where the output first binds a name of the tool's own (`_ndif_...`), a comment on that
    # line or the one above says what it is for (`# one record per iteration, ...`)
    outputs = [p.read_text() for p in sorted((GOLDEN / "expected").glob("*.py"))] + _pass_case_outputs()
    silent = []
    for code in outputs:
        lines = code.splitlines()
        seen: set[str] = set()
        for number, line in enumerate(lines):
            name = line.strip().split(" = ")[0] if " = " in line else ""
            if not name.startswith("_ndif_") or not name.isidentifier() or name in seen:
                continue
            seen.add(name)
            above = lines[number - 1].strip() if number else ""
            if "#" not in line and not above.startswith("#"):
                silent.append(line.strip())
    assert not silent, silent

"""The examples and their optimized forms stay in sync; the docs too.

Set NDIF_OPT_UPDATE=1 to regenerate examples/optimized/ and docs/passes.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
import pytest

from ndif_opt import optimize
from ndif_opt.options import Options
from ndif_opt.output.docs import render

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
UPDATE = os.environ.get("NDIF_OPT_UPDATE") == "1"
MIGRATE = {"legacy_api"}  # pre-0.5 scripts: optimized with --migrate


def test_there_are_examples():
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_in_sync_and_stable(path):
    options = Options(migrate=path.stem in MIGRATE)
    result = optimize(path.read_text(), options=options)
    cst.parse_module(result.code)
    assert result.changed, "every example has something to optimize"
    expected = ROOT / "examples" / "optimized" / path.name
    if UPDATE:
        expected.write_text(result.code)
    assert expected.read_text() == result.code
    assert optimize(result.code, options=options).code == result.code, "a second run must change nothing"
    before, after = result.costs[0].before, result.costs[-1].after
    assert (
        before.requests > after.requests
        or before.download_bytes > after.download_bytes
        or any(f.pass_id == "accumulator-relocation" and f.applied for f in result.findings)
    )


def test_docs_in_sync():
    path = ROOT / "docs" / "passes.md"
    if UPDATE:
        path.write_text(render())
    assert path.read_text() == render()

"""`verify` on real scripts: what public NDIF scripts do that verify must run and compare.

Real nnsight 0.8 on tiny models through the NDIF emulation (no mocks): scripts that read an
API key from the environment, configure ``logging``, derive paths from ``__file__``, write
files under absolute paths, keep numpy string arrays and pandas values, or name a model of
another family than GPT-2 and Llama; the emulated server refusing what NDIF's refuses; and
one ``verify: FAILED — …`` line for whatever verify cannot run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnsight")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")

from ndif_opt.frontends import cli  # noqa: E402
from ndif_opt.verify import compare_namespaces, run_script, verify_sources  # noqa: E402
from ndif_opt.verify.tiny_models import model_spec, tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXIT_FAILED = 2


def script(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def assert_ok(report) -> None:
    assert report.intended_ok and not report.original_remote_differs, report.to_text()


# ---------------------------------------------------------------------------
# Values a real script leaves behind
# ---------------------------------------------------------------------------


def test_numpy_string_arrays_are_compared_not_crashed_on():
    words = np.array(["Paris", "Rome"])
    assert compare_namespaces({"words": words}, {"words": words.copy()}) == []
    assert compare_namespaces({"w": words}, {"w": np.array(["Paris", "Berlin"])}) == [
        "w: ndarray values differ (1 of 2 elements)"
    ]
    # the width of a string dtype is not content
    assert compare_namespaces({"w": words}, {"w": words.astype("<U12")}) == []


def test_pandas_values_are_compared_within_the_tolerance():
    frame = pd.DataFrame({"layer": [0, 1], "prompt": ["a", "b"], "logit": [1.0, 2.0]})
    close = frame.copy()
    close.loc[1, "logit"] = 2.0 + 1e-7
    assert compare_namespaces({"df": frame}, {"df": close}, atol=1e-5) == []
    assert compare_namespaces({"df": frame}, {"df": close}) == ["df: DataFrame contents differ"]
    # an index and a timestamp are results too
    assert compare_namespaces({"cols": frame.columns}, {"cols": pd.Index(["layer", "prompt", "x"])}) == [
        "cols: Index contents differ"
    ]
    assert compare_namespaces({"t": pd.Timestamp("2024-01-01")}, {"t": pd.Timestamp("2024-01-02")})


def test_a_users_own_ndif_global_is_compared():
    original = "_ndif_cache = [1, 2]\n"
    changed = "_ndif_cache = [1, 3]\n"
    report = verify_sources(original, changed)
    assert not report.intended_ok
    assert report.mismatches == ["_ndif_cache[1]: expected 2, got 3"]
    # the names the optimizer introduced are the ones left out (verify_result passes them)
    assert verify_sources(original, changed, ignore=("_ndif_cache",)).intended_ok

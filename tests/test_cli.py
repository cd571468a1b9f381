"""The command line: outputs, exit codes, and never losing the user's input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAIVE = (ROOT / "examples" / "prompt_loop.py").read_text()


def run(*args, stdin: str | None = None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.cli", *map(str, args)],
        input=stdin, capture_output=True, text=True, cwd=cwd, timeout=120,
    )


def test_stdout_gets_the_code(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script)
    assert done.returncode == 0
    assert "model.session(remote=True)" in done.stdout
    assert "session-hoisting" in done.stderr
    assert script.read_text() == NAIVE


def test_output_file_and_check(tmp_path):
    script, out = tmp_path / "s.py", tmp_path / "out.py"
    script.write_text(NAIVE)
    assert run(script, "-o", out).returncode == 0
    assert "model.session(remote=True)" in out.read_text()
    assert run(script, "--check", "-q").returncode == 1
    assert run(out, "--check", "-q").returncode == 0  # stable: nothing left to do
    assert script.read_text() == NAIVE


def test_output_equal_to_input_is_refused(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script, "-o", script)
    assert done.returncode == 2
    assert str(script) in done.stderr and "input" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert script.read_text() == NAIVE


def test_missing_file(tmp_path):
    done = run(tmp_path / "nope.py")
    assert done.returncode == 2
    assert "nope.py: no such file" in done.stderr


def test_syntax_error(tmp_path):
    script = tmp_path / "bad.py"
    source = "from nnsight import LanguageModel\nwith model.trace(:\n"
    script.write_text(source)
    done = run(script)
    assert done.returncode == 2
    assert "bad.py: cannot parse" in done.stderr
    assert script.read_text() == source


def test_file_without_nnsight_passes_through(tmp_path):
    script = tmp_path / "plain.py"
    source = "# a comment\nx = [1, 2]  # trailing\nprint(x)\n"
    script.write_text(source)
    done = run(script)
    assert done.returncode == 0 and done.stdout == source


def test_binary_and_non_utf8(tmp_path):
    binary = tmp_path / "b.py"
    binary.write_bytes(b"\x00\x01\x02nnsight")
    done = run(binary)
    assert done.returncode == 2 and "binary" in done.stderr
    latin = tmp_path / "l.py"
    latin.write_bytes(b"x = '\xe9'\n")
    done = run(latin)
    assert done.returncode == 2 and "not valid utf-8" in done.stderr


def test_stdin_and_json(tmp_path):
    done = run("-", "--format", "json", stdin=NAIVE)
    assert done.returncode == 0
    payload = json.loads(done.stdout)
    assert payload["totals"]["requests_before"] == 8
    assert payload["totals"]["requests_after"] == 1
    assert [p["id"] for p in payload["passes"]][:2] == ["session-hoisting", "accumulator-relocation"]
    for key in ("requests_before", "requests_after", "download_bytes_before", "download_bytes_after",
                "forward_passes_before", "forward_passes_after",
                "layer_evaluations_before", "layer_evaluations_after"):
        assert key in payload["totals"] and key in payload["passes"][0]


def test_directory_mode_counts_bad_files(tmp_path):
    (tmp_path / "a.py").write_text(NAIVE)
    (tmp_path / "b.py").write_text("from nnsight import x\nwith (:\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("print(1)\n")
    done = run(tmp_path, "--check", "-q")
    assert done.returncode == 2  # one unparsable file
    assert "3 file(s): 1 would change, 1 unchanged, 1 error(s)" in done.stderr
    assert (tmp_path / "a.py").read_text() == NAIVE


def test_in_place(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    assert run(script, "--in-place", "-q").returncode == 0
    assert "model.session(remote=True)" in script.read_text()


def test_unknown_pass_is_a_usage_error(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script, "--select", "no-such-pass")
    assert done.returncode == 2 and "unknown pass id" in done.stderr


def test_report_shows_table_and_diff(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script, "--report", "-q")
    assert done.returncode == 0
    assert "session-hoisting" in done.stdout and "8 → 1" in done.stdout
    assert "+with model.session(remote=True):" in done.stdout


def test_report_shows_the_layer_evaluations_skip_insertion_saves():
    done = run(ROOT / "examples" / "steering_sweep.py", "--report", "-q")
    assert done.returncode == 0
    header = next(line for line in done.stdout.splitlines() if line.startswith("pass "))
    assert "layer evals" in header
    row = next(line for line in done.stdout.splitlines() if line.startswith("skip-insertion"))
    # 8 passes of 32 layers; then the caching pass stops after 12, and 6 skip 12 each
    assert "8 → 9" in row and "256 → 196" in row


@pytest.mark.parametrize("import_first", [True, False])
def test_helper_module_beside_the_script(tmp_path, import_first):
    (tmp_path / "helpers.py").write_text("def margin(row, a, b):\n    return (row[a] - row[b]).item()\n")
    head = "from nnsight import LanguageModel\n" + ("from helpers import margin\n" if import_first else "")
    body = (
        'model = LanguageModel("openai-community/gpt2")\n'
        'with model.trace("hello", remote=True):\n'
        "    logits = model.lm_head.output.save()\n"
        + ("" if import_first else "from helpers import margin\n")
        + "gap = margin(logits[0, -1], 3, 4)\n"
    )
    script = tmp_path / "s.py"
    script.write_text(head + body)
    done = run(script, "-q")
    assert done.returncode == 0
    # shipped by value only when imported before the first remote request
    assert ("gap = margin(logits[0, -1], 3, 4).save()" in done.stdout) is import_first

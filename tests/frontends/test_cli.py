"""The command line: outputs, exit codes, and never losing the user's input."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAIVE = (ROOT / "examples" / "prompt_loop.py").read_text()


def run(*args, stdin: str | None = None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
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


def test_output_dash_is_stdout_not_a_file_named_dash(tmp_path):
    """`-o -` wrote a file named `-` where the command ran (black and ruff read `-` as
    the standard stream)."""
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script, "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model.session(remote=True)" in done.stdout
    assert not (tmp_path / "-").exists()


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
    assert [p["id"] for p in payload["passes"]][:3] == ["nnsight-05-failures", "session-hoisting",
                                                         "accumulator-relocation"]
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


# --- IPython lines in a .py script (a notebook exported or pasted) ---------------------

MAGIC_LOOP = (
    "!pip install nnsight\n"
    "from nnsight import LanguageModel\n"
    'model = LanguageModel("gpt2")\n'
    'for p in ["a","b"]:\n'
    "    with model.trace(p, remote=True):\n"
    "        h = model.transformer.h[0].output[0].save()\n"
    "    print(h.shape)\n"
)


def test_magics_in_a_script_are_kept_and_the_loop_optimized(tmp_path):
    script = tmp_path / "magic.py"
    script.write_text(MAGIC_LOOP)
    done = run(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("!pip install nnsight\nfrom nnsight import LanguageModel\n")
    assert "with model.session(remote=True):" in done.stdout
    # findings name the lines of the file as written (the loop is on line 4)
    assert f"{script}:4:1: session-hoisting" in done.stderr


def test_magics_in_a_script_come_back_byte_for_byte(tmp_path):
    source = (
        "%%capture\n"
        "%load_ext autoreload\n"
        "!pip install -q nnsight  \\\n"
        "    transformers\n"
        "from nnsight import LanguageModel\n"
        'model = LanguageModel("gpt2")\n'
        "if True:\n"
        "    %time x = 1\n"
        "    !nvidia-smi\n"
        'for p in ["a","b"]:\n'
        "    with model.trace(p, remote=True):\n"
        "        h = model.transformer.h[0].output[0].save()\n"
        "    print(h.shape)\n"
        "%env\n"
    )
    script = tmp_path / "cells.py"
    script.write_text(source)
    done = run(script, "-q")
    assert done.returncode == 0, done.stderr
    assert "with model.session(remote=True):" in done.stdout
    for line in source.splitlines(keepends=True):
        if line.lstrip().startswith(("%", "!")) or line == "    transformers\n":
            assert line in done.stdout, line
    assert done.stdout.index("    %time x = 1\n") < done.stdout.index("with model.session")
    assert done.stdout.endswith("%env\n")


def test_a_rewrite_that_would_move_a_magic_leaves_the_script_unchanged(tmp_path):
    script = tmp_path / "traced.py"
    source = MAGIC_LOOP.replace("        h = model", "        %time x = 1\n        h = model")
    script.write_text(source)
    done = run(script)
    assert done.returncode == 0 and done.stdout == source, done.stderr
    assert "session-hoisting [not fixed]" in done.stderr
    assert "the script was left unchanged: a rewrite moved an IPython magic or shell line" in done.stderr


def test_a_script_with_magics_and_no_nnsight_passes_through(tmp_path):
    script = tmp_path / "plain.py"
    source = "%matplotlib inline\n!ls\nprint(1)\n"
    script.write_text(source)
    done = run(script)
    assert done.returncode == 0 and done.stdout == source, done.stderr


@pytest.mark.parametrize("source, line, hint", [
    ("from nnsight import LanguageModel\nx = (1,\n%time f()\n)\n", 3, "line 3 is an IPython magic (`%time f()`)"),
    ("from nnsight import LanguageModel\nfiles = !ls\n", 2, "line 2 is an IPython magic (`files = !ls`)"),
    ("from nnsight import LanguageModel\nx = 1\n%%bash\necho hi\n", 4,
     "line 4 follows the cell magic `%%bash` (line 3), whose body is not Python"),
], ids=["in-brackets", "assigned", "cell-body"])
def test_a_magic_that_cannot_be_set_aside_is_a_parse_error_that_says_so(tmp_path, source, line, hint):
    script = tmp_path / "bad.py"
    script.write_text(source)
    done = run(script)
    assert done.returncode == 2 and done.stdout == ""
    [message] = done.stderr.strip().splitlines()
    assert message.startswith(f"ndif-opt: {script}: cannot parse: ") and f"(line {line}, column" in message
    assert hint in message, message


def test_library_and_editor_keep_the_magics_too():
    from ndif_opt import optimize
    from ndif_opt.frontends.lsp import analyze
    from ndif_opt.options import Options

    result = optimize(MAGIC_LOOP, filename="magic.py")
    assert result.source == MAGIC_LOOP and result.code.startswith("!pip install nnsight\n")
    assert "with model.session(remote=True):" in result.code
    assert ("session-hoisting", 3) in [(f.pass_id, f.range.start.line) for f in result.findings]
    assert apply_edits(MAGIC_LOOP, result.edits) == result.code
    analysed, error = analyze(MAGIC_LOOP, Options(), "magic.py")
    assert error is None and analysed.code == result.code


def apply_edits(text: str, edits) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e.range.start, reverse=True):
        lines[edit.range.start.line : edit.range.end.line] = [edit.new_text]
    return "".join(lines)


# --- stdout carries only the requested output; findings go to stderr -------------------

FINDING = "session-hoisting ["


def test_diff_is_a_patch_and_findings_go_to_stderr(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(MAGIC_LOOP.split("\n", 1)[1])
    done = run("plain.py", "--diff", cwd=tmp_path)
    assert done.returncode == 0
    assert FINDING in done.stderr and FINDING not in done.stdout
    assert all(line[:1] in "-+ @\\" for line in done.stdout.splitlines()), done.stdout
    source, expected = script.read_text(), run("plain.py", "-q", cwd=tmp_path).stdout
    if shutil.which("patch") is None:  # the diff of the two texts, then
        lines = difflib.unified_diff(source.splitlines(True), expected.splitlines(True),
                                     "plain.py", "plain.py", "(original)", "(optimized)")
        assert done.stdout == "".join(lines)
        return
    (tmp_path / "change.patch").write_text(done.stdout)
    patched = subprocess.run(["patch", "-p0", "-i", "change.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert script.read_text() == expected


def test_diff_applies_with_git_and_without_a_final_newline(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    script = tmp_path / "plain.py"
    script.write_text(MAGIC_LOOP.split("\n", 1)[1].rstrip("\n"))  # no newline at the end
    expected = run("plain.py", "-q", cwd=tmp_path).stdout
    done = run("plain.py", "--diff", cwd=tmp_path)
    assert done.stdout.endswith("\\ No newline at end of file\n")
    (tmp_path / "change.patch").write_text(done.stdout)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    applied = subprocess.run(["git", "apply", "-p0", "change.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert script.read_text() == expected


@pytest.mark.parametrize("flags", [[], ["--report"], ["--check"], ["--format", "json"], ["-o", "out.py"]],
                         ids=["code", "report", "check", "json", "output-file"])
def test_findings_never_go_to_stdout(tmp_path, flags):
    (tmp_path / "plain.py").write_text(MAGIC_LOOP.split("\n", 1)[1])
    done = run("plain.py", *flags, cwd=tmp_path)
    assert FINDING not in done.stdout
    if flags[:1] != ["--format"]:  # the JSON document holds them
        assert FINDING in done.stderr


# -- conventions a ruff or black user expects (issue 34) -----------------------------------------


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_shows_the_usage_line_the_commands_and_no_type_names(flag):
    done = run(flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ndif-opt [OPTIONS] PATHS...\n")
    for command in ("verify FILE", "rules", "lsp"):
        assert command in " ".join(done.stdout.split())
    assert "<str>" not in done.stdout and "<int>" not in done.stdout and "<list" not in done.stdout
    assert "optimize" not in done.stdout.split("\n")[0]


@pytest.mark.parametrize("command", ["verify", "rules"])
def test_each_command_takes_h_too(command):
    done = run(command, "-h")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: ndif-opt {command} [OPTIONS]")
    assert "<float>" not in done.stdout and "<str>" not in done.stdout


def test_version():
    from ndif_opt import __version__

    done = run("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"ndif-opt {__version__}")


def test_select_takes_a_comma_separated_list_as_ruff_does(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    comma = run(script, "--select", "session-hoisting,reduction-pushdown", "--diff")
    repeated = run(script, "--select", "session-hoisting", "--select", "reduction-pushdown", "--diff")
    only_one = run(script, "--select", "session-hoisting", "--diff")
    assert comma.returncode == 0, comma.stderr
    assert comma.stdout == repeated.stdout != only_one.stdout
    unknown = run(script, "--ignore", "detach-cpu,no-such-pass")
    assert unknown.returncode == 2 and "unknown pass id 'no-such-pass'" in unknown.stderr


def test_verify_offers_only_the_formats_it_writes(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run("verify", script, "--format", "html")
    assert done.returncode == 2 and "'html' is not one of 'text', 'json'" in done.stderr


@pytest.mark.parametrize("release, ok", [("0.8", True), ("0.8.1", True), ("0.7", True), ("0.5.0", True),
                                         ("0.6.3", True), ("0.4", False), ("latest", False)])
def test_any_05_release_is_accepted_and_older_ones_are_sent_to_migrate(tmp_path, release, ok):
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    done = run(script, "--nnsight", release, "--check")
    if ok:
        assert done.returncode in (0, 1), done.stderr
    else:
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
        assert ("--migrate" in done.stderr) == (release == "0.4")


def test_release_rules():
    from ndif_opt.analysis.releases import release_rules

    assert [release_rules(r) for r in ("0.8", "0.8.2", "0.6.3", "0.5", "0.7.1", "0.9")] == [
        "0.8", "0.8", "0.6", "0.6", "0.6", "0.6"]


def test_a_file_without_nnsight_work_says_so_in_the_report(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import math\nprint(math.pi)\n")
    done = run(script, "--report")
    assert done.returncode == 0
    assert "nothing to optimize" in done.stdout and "requests" not in done.stdout
    quiet = run(script, "--check")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


@pytest.mark.parametrize("command, needs", [("lsp", ["lsprotocol", "pygls"]), ("mcp", ["mcp"])])
def test_a_server_without_its_extra_is_one_line_naming_the_extra(command, needs):
    hidden = "; ".join(f"sys.modules[{name!r}] = None" for name in needs)
    code = f"import sys; {hidden}\nfrom ndif_opt.frontends.cli import main; main([{command!r}])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and f"[{command}]" in done.stderr
    assert "Traceback" not in done.stderr


def test_verify_takes_the_passes_to_check_as_optimizing_does(tmp_path):
    pytest.importorskip("nnsight")
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    unknown = run("verify", script, "--select", "no-such-pass")
    assert unknown.returncode == 2 and "unknown pass id 'no-such-pass'" in unknown.stderr
    # one pass that leaves this script alone: the rewrite is the original, its requests too
    alone = run("verify", script, "--select", "skip-insertion", "--format", "json", cwd=tmp_path)
    report = json.loads(alone.stdout)
    assert report["before"]["requests"] == report["after"]["requests"] > 1, alone.stderr


def test_verify_runs_a_script_with_the_files_beside_it(tmp_path):
    # a run starts in a fresh directory: the data file and the helper module next to the
    # script (and a folder's) are there too, as they are where the user runs it
    pytest.importorskip("nnsight")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.txt").write_text("The cat sat on the\nThe dog ran to the\n")
    (tmp_path / "helpers.py").write_text("def top(model):\n    return model.lm_head.output[0, -1].argmax()\n")
    script = tmp_path / "s.py"
    script.write_text(
        "from nnsight import LanguageModel\nfrom helpers import top\n\n"
        'model = LanguageModel("openai-community/gpt2")\n'
        'prompts = open("data/prompts.txt").read().splitlines()\n'
        "tops = []\nfor prompt in prompts:\n    with model.trace(prompt, remote=True):\n"
        "        t = top(model).save()\n    tops.append(int(t))\nprint(tops)\n")
    done = run("verify", script, "--format", "json", cwd=tmp_path.parent)
    report = json.loads(done.stdout)
    assert report["status"] == "ok", done.stdout
    assert report["before"]["requests"] == 2

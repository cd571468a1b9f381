"""`verify` never says OK when the script did not run.

Real nnsight 0.8 on tiny models through the NDIF emulation (no mocks): a script that
raises, or that opens remote blocks but makes no request, is a failure (exit 2) with
one line saying why; a script that fails the same way locally and in its optimized
form passes only when the user asks for it (``--allow-same-error``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnsight")
pytest.importorskip("torch")

from ndif_opt import optimize  # noqa: E402
from ndif_opt.verify import verify_result, verify_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_MISMATCH, EXIT_FAILED = 0, 1, 2  # README "Exit codes"


def script(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


MISSING_MODULE = script(
    """
    import nnterp_not_installed
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    for p in ["a", "b"]:
        with model.trace(p, remote=True):
            h = model.transformer.h[0].output[0].save()
    """
)

# layer 99 of a 12-layer model: the remote part raises, locally and on the server alike
REMOTE_PART_RAISES = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    outs = []
    for p in ["a", "b"]:
        with model.trace(p, remote=True):
            h = model.transformer.h[99].output[0].save()
        outs.append(h)
    """
)

# the remote blocks run, then the script fails after them, in every version alike
RAISES_AFTER_REMOTE = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    outs = []
    for p in ["a", "b"]:
        with model.trace(p, remote=True):
            h = model.transformer.h[0].output[0].save()
        outs.append(h)
    raise RuntimeError("plotting failed")
    """
)

EMPTY_LOOP = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    prompts = []
    outs = []
    for p in prompts:
        with model.trace(p, remote=True):
            h = model.transformer.h[0].output[0].save()
        outs.append(h)
    """
)

LOCAL_ONLY = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    with model.trace("a"):
        h = model.transformer.h[0].output[0].save()
    """
)


def verify(source: str, **kwargs):
    return verify_result(source, optimize(source), **kwargs)


def cli_verify(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.frontends.cli", "verify", str(path), *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )


def headline(text: str) -> str:
    return text.splitlines()[0]


def test_a_missing_module_is_a_failure_not_ok(tmp_path):
    done = cli_verify(tmp_path, MISSING_MODULE)
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    assert headline(done.stdout) == (
        "verify: FAILED — the original script raised ModuleNotFoundError: No module named "
        "'nnterp_not_installed' before any remote block ran; nothing was compared"
    )


def test_json_says_failed_in_a_status_field(tmp_path):
    done = cli_verify(tmp_path, MISSING_MODULE, "--format", "json")
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["intended_ok"] is False
    assert report["status"] == "failed"
    assert "ModuleNotFoundError" in report["reason"]


def test_a_remote_part_that_raises_in_both_versions_is_a_failure():
    report = verify(REMOTE_PART_RAISES)
    assert not report.ok, report.to_text()
    assert report.status == "failed"
    assert headline(report.to_text()).startswith(
        "verify: FAILED — the original script raised AttributeError: "
    )
    assert "the optimized script raised the same" in report.reason
    assert "--allow-same-error" in report.reason


def test_a_script_that_fails_after_its_remote_blocks_fails_unless_allowed(tmp_path):
    refused = cli_verify(tmp_path, RAISES_AFTER_REMOTE)
    assert refused.returncode == EXIT_FAILED, refused.stdout + refused.stderr
    assert headline(refused.stdout).startswith("verify: FAILED — the original script raised "
                                               "RuntimeError: plotting failed locally")
    allowed = cli_verify(tmp_path, RAISES_AFTER_REMOTE, "--allow-same-error")
    assert allowed.returncode == EXIT_OK, allowed.stdout + allowed.stderr
    assert headline(allowed.stdout) == (
        "verify: OK (same error) — the original and the optimized script both raised "
        "RuntimeError: plotting failed, accepted by --allow-same-error; what ran before it matches"
    )
    assert "2 -> 1" in allowed.stdout  # the remote blocks did run and were measured


def test_allowing_the_same_error_does_not_accept_a_script_that_never_ran():
    report = verify(MISSING_MODULE, allow_same_error=True)
    assert not report.ok, report.to_text()
    assert report.status == "failed"
    assert report.reason.endswith("before any remote block ran; nothing was compared")


def test_remote_blocks_that_make_no_request_are_a_failure():
    report = verify(EMPTY_LOOP)
    assert not report.ok, report.to_text()
    assert report.status == "failed"
    assert report.errors == {"local": None, "original": None, "optimized": None}
    assert headline(report.to_text()) == (
        "verify: FAILED — the original script opens a remote block (line 6) but made no "
        "request; nothing ran remotely, so nothing remote was compared"
    )


def test_a_script_without_remote_blocks_may_make_no_request():
    report = verify(LOCAL_ONLY)
    assert report.ok and report.status == "ok", report.to_text()
    assert (report.before.requests, report.after.requests) == (0, 0)


MAGIC_SCRIPT = '''\
!pip install nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
shapes = []
for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
    with model.trace(prompt, remote=True):
        hidden = model.transformer.h[0].output.save()
    shapes.append(tuple(hidden.shape))
print(shapes)
'''


def test_a_script_with_ipython_lines_is_verified_as_a_notebook_runs_it(tmp_path):
    done = cli_verify(tmp_path, MAGIC_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("verify: OK") and "2 -> 1" in done.stdout


def test_a_small_change_reads_as_a_difference_not_as_x1_0():
    """`forward passes 25 -> 26 (x1.0 more)` read as "no change" to a new user."""
    from ndif_opt.verify import RunMetrics, VerifyReport

    report = VerifyReport(
        intended_ok=True, mismatches=[], original_remote_differs=False, original_remote_mismatches=[],
        local_forward_passes=25, local_layer_calls=300,
        before=RunMetrics(requests=25, upload_bytes=1000, download_bytes=10_000, download_raw_bytes=12_000,
                          forward_passes=25, layer_calls=300),
        after=RunMetrics(requests=1, upload_bytes=900, download_bytes=1_000, download_raw_bytes=1_200,
                         forward_passes=26, layer_calls=246),
        errors={},
    )
    text = report.to_text()
    assert "forward passes" in text and "25 -> 26  (1 more)" in text, text
    assert "300 -> 246  (54 fewer)" in text and "(10% less)" in text and "(x25.0 fewer)" in text, text
    assert "x1.0" not in text, text


def test_an_original_that_stopped_at_its_error_gets_no_ratio():
    """`requests 1 -> 4 (x4.0 more)` for a pre-0.5 original that raised after its first
    request (r1_70b_mmlu_chunked_generate_v03 under --migrate) read as a rewrite that sends
    four times as many."""
    from ndif_opt.verify import RunMetrics, VerifyReport

    report = VerifyReport(
        intended_ok=True, mismatches=[], original_remote_differs=True, original_remote_mismatches=[],
        local_forward_passes=8, local_layer_calls=640,
        before=RunMetrics(requests=1, forward_passes=8, layer_calls=640),
        after=RunMetrics(requests=4, forward_passes=32, layer_calls=2560),
        errors={"original": "AttributeError: 'Tensor' object has no attribute 'value'"},
    )
    text = report.to_text()
    assert "1 -> 4\n" in text and "more)" not in text, text
    assert "the original stopped at its error" in text, text


@pytest.mark.parametrize("remote, let_go, said", [
    # a clock read in a loop (`t0 = time.time()`), which the rewrite no longer brings back:
    # it was said "fixed by the optimized script", where nothing was compared
    (["t0: expected 1796651755.37, got 1796651755.70"], ("t0",),
     "in `t0`, which the optimized script no longer brings back (nothing after reads it): not compared"),
    (["results: expected list of 3, got list of 0"], (), "(fixed by the optimized script)"),
    (["results: expected list of 3, got list of 0", "t0[0]: expected 1, got 2"], ("t0",),
     "(fixed by the optimized script, but for `t0`: no longer brought back, not compared)"),
])
def test_a_remote_difference_is_fixed_only_where_it_was_compared(remote, let_go, said):
    from ndif_opt.verify import RunMetrics, VerifyReport

    report = VerifyReport(
        intended_ok=True, mismatches=[], original_remote_differs=True, original_remote_mismatches=remote,
        local_forward_passes=2, local_layer_calls=24, before=RunMetrics(requests=2), after=RunMetrics(requests=1),
        errors={}, let_go=let_go,
    )
    assert said in report.to_text(), report.to_text()


# the original fails on one attribute; a "rewrite" that runs past it fails on another
# attribute, of another object: the same exception type, not the same error
FAILS_ON_ONE_ATTRIBUTE = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("openai-community/gpt2")
    with model.trace("a b c", remote=True):
        h = model.transformer.h[0].output.save()
    shape = (1, 2).shape
    """
)
FAILS_FURTHER_ON = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("openai-community/gpt2")
    with model.trace("a b c", remote=True):
        h = model.transformer.h[0].output.save()
    shape = tuple(h.shape)
    done = model.no_such_attribute
    """
)


def test_the_same_exception_type_with_another_message_is_not_the_same_error():
    from ndif_opt.verify import verify_sources

    report = verify_sources(FAILS_ON_ONE_ATTRIBUTE, FAILS_FURTHER_ON, allow_same_error=True)
    assert report.status == "failed", report.to_text()
    assert "so what it should compute is unknown" in report.reason
    alike = verify_sources(FAILS_ON_ONE_ATTRIBUTE, FAILS_ON_ONE_ATTRIBUTE, allow_same_error=True)
    assert alike.status == "same-error", alike.to_text()


LONG_LINE = '''
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    with model.trace("The Eiffel Tower is in the city of", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    print("the top token of the prompt about the tower in the city of lights, as the model sees it, is:", OFFSET)
'''


def test_a_long_stdout_line_that_differs_late_is_shown_where_it_differs():
    # the message showed each line's first 80 characters: here the same in both runs
    original = script(LONG_LINE.replace("OFFSET", "top.item()"))
    changed = script(LONG_LINE.replace("OFFSET", "top.item() + 1"))
    report = verify_sources(original, changed)
    assert not report.intended_ok
    (line,) = [m for m in report.mismatches if m.startswith("stdout line")]
    assert "(from column" in line, line
    expected, got = line.split(": expected ", 1)[1].split(", got ")
    assert expected != got, line


# a pre-0.5 script that --migrate cannot migrate (a `.next()` on one layer, newuser6 m04):
# the migration is all or nothing, so the file is left as it was; verify said MISMATCH
# (the "optimized" script, the pre-0.5 original, fails on nnsight 0.8), as if a migration
# had been made and were wrong
UNMIGRATABLE = script(
    """
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.generate("Long ago", max_new_tokens=3, remote=True) as tracer:
        h0 = LAYERS[1].output[0].save()
        LAYERS[1].next()
        h1 = LAYERS[1].output[0].save()
        out = model.generator.output.save()
    print(h0.value.shape, h1.value.shape, out.value[0].tolist())
    """
)


@pytest.mark.parametrize("repo, layers", [("openai-community/gpt2", "model.transformer.h"),
                                          ("meta-llama/Llama-3.1-8B", "model.model.layers")])
def test_verify_migrate_says_plainly_that_nothing_was_migrated(tmp_path, repo, layers):
    source = UNMIGRATABLE.replace("REPO", repo).replace("LAYERS", layers)
    done = cli_verify(tmp_path, source, "--migrate")
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr  # README "Exit codes": 2
    assert done.stdout.strip() == headline(done.stdout), done.stdout  # one line: nothing ran
    assert headline(done.stdout).startswith(
        "verify: NOT MIGRATED — the script uses the pre-0.5 nnsight API and 1 of its uses cannot be migrated "
        f"safely (line 6: `{layers}[1].next()`: a `.next()` that is not `model.next()`"), done.stdout
    assert "nothing was run or compared" in done.stdout and "MISMATCH" not in done.stdout
    as_json = json.loads(cli_verify(tmp_path, source, "--migrate", "--format", "json").stdout)
    assert as_json["status"] == "not-migrated" and as_json["intended_ok"] is False
    assert as_json["rewritten"] is False and as_json["before"]["requests"] == 0
    assert as_json["reason"] == headline(done.stdout).split(" — ", 1)[1]


# prompts of different lengths: batched as invokes of one trace, with left padding, the
# last-token norms come out a few float32 ulps off those of one trace each
BATCHED_NORMS = textwrap.dedent('''
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    PROMPTS = ["Paris is the capital of", "The weather in Oslo is", "People from Lima", "Cairo"]
    norms = []
    for prompt in PROMPTS:
        with model.trace(prompt, remote=True):
            n = model.transformer.h[6].output[0, -1].norm().save()
        norms.append(n.item())
    print(norms)
''')


def test_unsafe_batching_is_compared_within_the_tolerance_its_finding_states():
    from ndif_opt.options import Options

    result = optimize(BATCHED_NORMS, options=Options(unsafe_fixes=True))
    assert any(f.applied and f.pass_id == "invoke-batching" for f in result.findings), result.code
    report = verify_result(BATCHED_NORMS, result, unsafe_fixes=True)
    assert report.intended_ok, report.to_text()
    assert "the fixes of `invoke-batching` change floats in their last bits" in report.to_text(), report.to_text()
    # a tolerance asked for is the one used, and said by no note
    exact = verify_result(BATCHED_NORMS, result, unsafe_fixes=True, atol=1e-12, rtol=1e-12)
    assert not exact.compared_within


@pytest.mark.parametrize("expected, actual, same", [
    ("[0.2493777871131897, 0.29]", "[0.2493778020143509, 0.29]", True),  # a few ulps of float32
    ("layer 3: 0.25", "layer 4: 0.25", False),  # a number that differs by more
    ("top 'Paris' 0.25", "top 'Rome' 0.25", False),  # the text around the numbers differs
    ("1e-07 x", "1.2e-07 x", True),
    ("[1, 2]", "[1, 2, 3]", False),
])
def test_printed_numbers_are_compared_within_the_tolerance(expected, actual, same):
    from ndif_opt.verify.compare import same_text_within

    assert same_text_within(expected, actual, 1e-5, 1e-5) is same
    assert same_text_within(expected, actual, 0.0, 0.0) is (expected == actual)


# pyplot's current figure is the process's: verify's runs share the process, so a script
# that plots into it drew on the figure an earlier run left (its saved image differed, and
# verify said MISMATCH of a script that plots constant data)
PLOTS = textwrap.dedent('''
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    norms = []
    for prompt in ["The cat sat", "A dog ran"]:
        with model.trace(prompt, remote=True):
            n = model.transformer.h[1].output.norm().save()
        norms.append(n.item())
    plt.plot([1, 2, 3])
    plt.savefig("plot.png")
''')


def test_each_run_plots_on_a_figure_of_its_own():
    pytest.importorskip("matplotlib")
    result = optimize(PLOTS)
    report = verify_result(PLOTS, result)
    assert report.intended_ok and not report.original_remote_differs, report.to_text()


def test_a_pre_05_script_that_fails_on_nnsight_08_is_pointed_to_verify_migrate():
    # `.value` is the pre-0.5 API: nnsight 0.8 raises in every run, and the failure's own
    # advice (--allow-same-error) is not what the script needs
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        with model.trace("Hello", remote=True):
            logits = model.lm_head.output.save()
        print(logits.value.shape)
        """
    )
    report = verify_result(source, optimize(source))
    assert report.failed, report.to_text()
    assert "`ndif-opt verify --migrate` runs it as its author did" in report.to_text(), report.to_text()
    fine = source.replace("logits.value.shape", "logits.shape")
    assert not any("--migrate" in w for w in verify_result(fine, optimize(fine)).warnings)


def test_what_a_remote_block_prints_is_the_servers_log_in_both_scripts():
    # `print` inside a remote trace prints to NDIF's log: the local run's lines are no
    # output either remote run could give. Compared line by line, they shifted the line
    # after them, which the rewrite fixed (`res` no longer empty): verify said MISMATCH
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        res = []
        for layer in range(2):
            with model.trace("Print me", remote=True):
                h = model.transformer.h[layer].output
                print("mean", h.mean())
                res.append(h.mean().save())
        print(len(res))
        """
    )
    report = verify(source)
    assert report.status.value == "original-wrong" and report.server_log_lines == 2, report.to_text()
    assert "stdout: 2 lines the original prints inside its remote blocks go to the server's log" in report.to_text()
    # a line printed outside the remote blocks is still compared
    changed = verify_sources(source, source.replace("print(len(res))", "print(len(res) + 1)"))
    assert not changed.ok, changed.to_text()


def test_times_a_script_prints_are_not_compared():
    # the latency printed to two decimals: the same in two local runs, not on NDIF (nor in
    # the optimized script, which reads the clock after its one session)
    source = script(
        """
        import time
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        latency = []
        for p in ["a b", "c d"]:
            t0 = time.time()
            with model.trace(p, remote=True):
                h = model.transformer.h[0].output.save()
            time.sleep(0.02)
            latency.append(time.time() - t0)
        print(f"mean request latency: {sum(latency) / len(latency):.2f}s")
        """
    )
    report = verify(source)
    # (on a busy machine two local runs may print two latencies: the line is then unstable)
    assert report.ok and "stdout line 1" in report.timed + report.unstable, report.to_text()

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

ROOT = Path(__file__).resolve().parents[2]
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


# ---------------------------------------------------------------------------
# The environment a real script expects
# ---------------------------------------------------------------------------

API_KEY = script(
    """
    import os
    from nnsight import CONFIG, LanguageModel
    CONFIG.set_default_api_key(os.environ["NDIF_API_KEY"])
    token = os.getenv("HF_TOKEN")
    model = LanguageModel("openai-community/gpt2", token=token)
    means = []
    for prompt in ["The Eiffel Tower is in", "Hello"]:
        with model.trace(prompt, remote=True):
            h = model.transformer.h[1].output.mean().save()
        means.append(h)
    """
)


def test_an_api_key_read_from_the_environment_holds_a_placeholder(monkeypatch):
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    report = verify_sources(API_KEY, API_KEY)
    assert_ok(report)
    assert report.before.requests == 2
    assert "NDIF_API_KEY" not in os.environ and "HF_TOKEN" not in os.environ


def test_a_key_that_is_set_or_of_another_service_is_left_as_it_is(monkeypatch):
    monkeypatch.setenv("NDIF_API_KEY", "mine")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    source = 'import os\nkey = os.environ["NDIF_API_KEY"]\nother = os.environ.get("OPENAI_API_KEY")\n'
    namespace = run_script(source).namespace
    # a script that calls another service when it has a key must not be sent there
    assert (namespace["key"], namespace["other"]) == ("mine", None)


FILE_PATHS = script(
    """
    import os
    from pathlib import Path
    from nnsight import LanguageModel
    HERE = os.path.dirname(os.path.abspath(__file__))
    RESULTS = Path(__file__).parent / "results"
    print("running", __file__)
    model = LanguageModel("openai-community/gpt2")
    with model.trace("Hello", remote=True):
        h = model.transformer.h[0].output.mean().save()
    """
)


def test_values_derived_from_the_script_file_are_equal_across_runs():
    assert_ok(verify_sources(FILE_PATHS, FILE_PATHS))


LOGGING = script(
    """
    import logging
    import sys
    from nnsight import LanguageModel
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")
    log = logging.getLogger("experiment")
    model = LanguageModel("openai-community/gpt2")
    for prompt in ["a b", "c d"]:
        with model.trace(prompt, remote=True):
            h = model.transformer.h[0].output.mean().save()
        log.info("traced %r", prompt)
    """
)


def verify_cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.frontends.cli", "verify", str(path), *args],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
    )


def test_logging_output_reaches_every_run(tmp_path):
    # in a process of its own: pytest's own root handlers would make basicConfig a no-op
    path = tmp_path / "logs.py"
    path.write_text(LOGGING)
    done = verify_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("verify: OK")


def test_logging_handlers_of_a_run_do_not_outlive_it():
    import logging

    before = list(logging.root.handlers)
    run_script('import logging, sys\nlogging.basicConfig(stream=sys.stdout, force=True)\n')
    assert logging.root.handlers == before


# ---------------------------------------------------------------------------
# Files written anywhere
# ---------------------------------------------------------------------------

WRITES = """
import json
import os
from pathlib import Path
import numpy as np
import torch
from nnsight import LanguageModel
OUT = Path("OUTDIR")
os.makedirs(OUT, exist_ok=True)
model = LanguageModel("openai-community/gpt2")
means = []
for prompt in ["The Eiffel Tower is in", "Hello"]:
    with model.trace(prompt, remote=True):
        h = model.transformer.h[1].output.mean().save()
    means.append(round(float(h), 4))
(OUT / "means.json").write_text(json.dumps(means SUFFIX))
torch.save(torch.tensor(means), str(OUT / "means.pt"))
np.save(OUT / "means.npy", np.array(means))
with open(OUT.parent / "kept.txt", "a") as handle:
    handle.write("run\\n")
"""


def writes(out: Path, suffix: str = "") -> str:
    return WRITES.replace("OUTDIR", str(out)).replace("SUFFIX", suffix)


def test_files_written_under_any_path_are_compared_and_put_back(tmp_path):
    out = tmp_path / "results" / "run1"
    kept = tmp_path / "results" / "kept.txt"
    kept.parent.mkdir()
    kept.write_text("before\n")
    report = verify_sources(writes(out), writes(out))
    assert_ok(report)
    # every run started from the same files, and verify left them as it found them
    assert kept.read_text() == "before\n"
    assert not (tmp_path / "results" / "run1").exists()

    changed = verify_sources(writes(out), writes(out, " + [0]"))
    assert not changed.intended_ok
    assert changed.mismatches == [f"file {out / 'means.json'}: contents differ"]


def test_files_of_values_within_the_tolerance_agree():
    import io
    import json

    from ndif_opt.verify.compare import compare_files

    def saved(value) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    close = {"h": torch.ones(3) + 1e-7}
    assert compare_files("h.pt", saved({"h": torch.ones(3)}), saved(close), atol=1e-5) == []
    assert compare_files("h.pt", saved({"h": torch.ones(3)}), saved(close)) == ["file h.pt: contents differ"]
    far = compare_files("h.pt", saved({"h": torch.ones(3)}), saved({"h": torch.zeros(3)}), atol=1e-5)
    assert far == ["file h.pt: contents['h']: Tensor values differ (max abs diff 1 at (0,); 3 of 3 elements differ)"]
    rows = json.dumps([{"layer": 0, "logit": 1.0}]).encode(), json.dumps([{"layer": 0, "logit": 1.0 + 1e-9}]).encode()
    assert compare_files("rows.json", *rows, atol=1e-6) == []
    assert compare_files("notes.txt", b"1.0", b"1.0000001", atol=1.0) == ["file notes.txt: contents differ"]


def test_a_run_reports_the_files_it_wrote_by_absolute_path(tmp_path):
    out = tmp_path / "o"
    files = run_script(writes(out), mode="emulated").files
    assert {str(out / name) for name in ("means.json", "means.pt", "means.npy")} <= set(files)
    assert str(tmp_path / "kept.txt") in files


# ---------------------------------------------------------------------------
# One FAILED line, never a traceback
# ---------------------------------------------------------------------------


def run_cli(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(["verify", *args])
    captured = capsys.readouterr()
    return exited.value.code, captured.out + captured.err


def test_an_unreadable_script_is_one_failed_line(capsys, tmp_path):
    code, output = run_cli(capsys, str(tmp_path / "missing.py"))
    assert code == EXIT_FAILED
    assert output.strip() == f"verify: FAILED — {tmp_path / 'missing.py'}: no such file"


def test_verify_breaking_is_one_failed_line(capsys, tmp_path, monkeypatch):
    import ndif_opt.verify as verify

    def broken(*args, **kwargs):
        raise RuntimeError("the emulation broke\nwith details")

    monkeypatch.setattr(verify, "verify_result", broken)
    path = tmp_path / "s.py"
    path.write_text("x = 1\n")
    code, output = run_cli(capsys, str(path))
    assert code == EXIT_FAILED
    assert output.strip() == "verify: FAILED — the check could not run: RuntimeError: the emulation broke"
    assert "Traceback" not in output


# ---------------------------------------------------------------------------
# The families NDIF hosts
# ---------------------------------------------------------------------------

#: repo id -> (the transformers class of the real checkpoint, its num_hidden_layers)
CHECKPOINTS = {
    "EleutherAI/gpt-j-6b": ("GPTJForCausalLM", 28),
    "EleutherAI/pythia-70m": ("GPTNeoXForCausalLM", 6),
    "EleutherAI/pythia-2.8b-deduped": ("GPTNeoXForCausalLM", 32),
    "google/gemma-2b-it": ("GemmaForCausalLM", 18),
    "google/gemma-2-9b-it": ("Gemma2ForCausalLM", 42),
    "google/gemma-3-1b-it": ("Gemma3ForCausalLM", 26),
    "Qwen/Qwen2.5-7B-Instruct": ("Qwen2ForCausalLM", 28),
    "Qwen/Qwen3-8B": ("Qwen3ForCausalLM", 36),
    "mistralai/Mistral-7B-Instruct-v0.3": ("MistralForCausalLM", 32),
    "mistralai/Mixtral-8x7B-v0.1": ("MixtralForCausalLM", 32),
}

FAMILY_SCRIPT = """
from nnsight import LanguageModel
model = LanguageModel("REPO")
with model.trace(["The Eiffel Tower is in", "Hi"], remote=True):
    last = model.LAYERS[-1].output.save()
    logits = model.HEAD.output.save()
with model.generate("Hello", max_new_tokens=2, remote=True):
    tokens = model.generator.output.save()
"""


@pytest.mark.parametrize("repo", sorted(CHECKPOINTS))
def test_each_family_traces_with_its_real_module_names(repo):
    from ndif_opt.verify.tiny_models import FAMILIES

    cls, layers = CHECKPOINTS[repo]
    spec = model_spec(repo)
    assert (spec.n_layers, spec.approximate) == (layers, False)
    model = tiny_model(repo)
    assert type(model._module).__name__ == cls
    _, layer_path, head = FAMILIES[spec.family]
    source = FAMILY_SCRIPT.replace("REPO", repo).replace("LAYERS", layer_path).replace("HEAD", head)
    run = run_script(source, mode="emulated")
    assert run.error is None, run.traceback
    assert tuple(run.namespace["last"].shape) == (2, 11, 64)
    assert tuple(run.namespace["logits"].shape)[:2] == (2, 11)
    # every forward pass (the trace's, one a generated token) evaluates every layer
    assert len(run.requests) == 2 and run.forward_passes >= 2
    assert run.layer_calls == run.forward_passes * layers


def test_layer_counts_agree_with_the_cost_models_registry():
    from ndif_opt.cost.model_registry import dims_for

    for repo in ("EleutherAI/gpt-j-6b", "google/gemma-2-9b-it", "Qwen/Qwen2.5-14B", "mistralai/Mistral-7B-v0.1"):
        assert model_spec(repo).n_layers == dims_for(repo).n_layers, repo


# ---------------------------------------------------------------------------
# What NDIF's server allows a request
# ---------------------------------------------------------------------------

IN_SESSION = script(
    """
    import sys
    import math
    import numpy
    import pandas as pd
    from nnsight import LanguageModel
    model = LanguageModel("openai-community/gpt2")
    CASE = sys.argv[1]
    with model.session(remote=True):
        with model.trace("Hello world"):
            h = model.transformer.h[0].output.mean().save()
        if CASE == "open":
            with open("notes.txt", "w") as handle:
                handle.write("x")
        elif CASE == "import os":
            import os
            where = os.getcwd()
        elif CASE == "from json":
            from json import dumps
        elif CASE == "locals":
            names = locals()
        elif CASE == "allowed":
            root = math.sqrt(4.0)
            table = pd.DataFrame({"h": [1.0, 2.0]}).save()
            ids = model.tokenizer("The Eiffel Tower")["input_ids"]
            count = numpy.int64(len(ids)).item()
    """
)


@pytest.mark.parametrize("case, error", [
    ("open", "NameError: name 'open' is not defined"),
    ("import os", "ImportError: Module os is not whitelisted"),
    ("from json", "ImportError: Module json is not whitelisted"),
    ("locals", "NameError: name 'locals' is not defined"),
])
def test_the_server_refuses_what_ndif_refuses(case, error):
    assert run_script(IN_SESSION, argv=[case]).error is None
    remote = run_script(IN_SESSION, argv=[case], mode="emulated")
    assert remote.error is not None and remote.error.splitlines()[0] == f"RemoteError: {error}"


def test_the_server_allows_what_ndif_allows():
    remote = run_script(IN_SESSION, argv=["allowed"], mode="emulated")
    assert remote.error is None, remote.error
    assert remote.namespace["table"].equals(pd.DataFrame({"h": [1.0, 2.0]}))


def test_an_object_of_a_package_the_server_lacks_does_not_arrive():
    source = script(
        """
        from IPython.display import display
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        with model.session(remote=True):
            with model.trace("Hello"):
                h = model.transformer.h[0].output.mean().save()
            display(h)
        """
    )
    remote = run_script(source, mode="emulated")
    assert remote.error is not None and "is not whitelisted" in remote.error.splitlines()[0]


CLIENT_WRITES = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("openai-community/gpt2")
    means = []
    for prompt in ["a b", "c d"]:
        with model.trace(prompt, remote=True):
            h = model.transformer.h[0].output.mean().save()
        means.append(h)
        with open("log.txt", "a") as handle:
            handle.write(prompt)
    """
)

# a wrong rewrite: the file write moved into the session, where NDIF has no `open`
SERVER_WRITES = script(
    """
    from nnsight import LanguageModel
    model = LanguageModel("openai-community/gpt2")
    with model.session(remote=True):
        means = list().save()
        for prompt in ["a b", "c d"]:
            with model.trace(prompt):
                h = model.transformer.h[0].output.mean().save()
            means.append(h)
            with open("log.txt", "a") as handle:
                handle.write(prompt)
    """
)


def test_a_rewrite_moving_a_file_write_into_a_session_fails_verify():
    report = verify_sources(CLIENT_WRITES, SERVER_WRITES)
    assert not report.intended_ok
    assert "NameError: name 'open' is not defined" in report.errors["optimized"]

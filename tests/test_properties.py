"""Properties of the whole pipeline on generated naive nnsight scripts.

For every script drawn from :func:`tests.strategies.scripts` (loops over layers /
prompts / coefficients, accumulators, reductions, helpers, client effects, comments
in odd places, GPT-2 and Llama, ``remote=True`` or ``REMOTE``):

* the output parses;
* optimizing the output again changes nothing (idempotence);
* every comment of the input is still in the output;
* the cost model's requests and download bytes never increase;
* for a small sample, the execution check (tiny models, NDIF emulation) shows the
  optimized script computes what the original intended;
* as a notebook's cells, no value saved outside a function stops coming back.

And arbitrary valid Python without nnsight — a deterministic sample of the standard
library's own files — passes through byte for byte.

Profiles: ``ci`` (default; derandomized, a fixed number of examples, ~a minute on two
cores) and ``long`` (``HYPOTHESIS_PROFILE=long``: many more random examples).
"""

from __future__ import annotations

import ast
import functools
import io
import os
import random
import sys
import sysconfig
import textwrap
import tokenize
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from strategies import Script, scripts  # noqa: E402

from ndif_opt import optimize  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    # a failing example is printed whole; shrinking it can take minutes (use `long`)
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=300,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE_NAME = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Applied per test (not loaded globally) so other test modules keep their own settings.
PROFILE = settings.get_profile(PROFILE_NAME)
EXECUTION_EXAMPLES = 6 if PROFILE_NAME == "ci" else 60


@functools.lru_cache(maxsize=None)
def _optimized(source: str):
    """optimize() once per distinct source: the static properties share the examples."""
    return optimize(source, filename="script.py")


def _comments(source: str) -> Counter:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return Counter(tok.string.rstrip() for tok in tokens if tok.type == tokenize.COMMENT)


# -- static properties -----------------------------------------------------------------
# One example is optimized once (and its output once more) and all static properties
# are checked on it: optimizing is the expensive part, and derandomized tests with
# different names would draw different examples.


def check_parses(script: Script, result) -> None:
    ast.parse(result.code)
    cst.parse_module(result.code)


def check_idempotent(script: Script, result) -> None:
    again = optimize(result.code, filename="script.py")
    assert again.code == result.code, "a second run changed the output:\n" + again.code


def check_comments_kept(script: Script, result) -> None:
    lost = _comments(script.source) - _comments(result.code)
    assert not lost, f"comments lost: {sorted(lost)}\n--- output:\n{result.code}"


def check_costs_never_increase(script: Script, result) -> None:
    if not result.costs:
        return
    before, after = result.costs[0].before, result.costs[-1].after
    assert after.requests <= before.requests, (before, after)
    for row in result.costs:  # no single pass adds requests
        assert row.after.requests <= row.before.requests, row
    if script.client_bug:
        # the original fills a client container inside a remote block: on NDIF it stays
        # empty and nothing is downloaded, so fixing it rightly downloads more
        return
    assert after.download_bytes <= before.download_bytes, (before, after)
    for row in result.costs:
        if row.after.requests < row.before.requests:
            # a session brings back what the client computed (`acts.append(h[0, -1])`) while
            # the saves it replaces are still there: reduction-pushdown drops those next
            # (the whole run never downloads more, checked above)
            assert row.after.download_bytes <= row.before.download_bytes * 1.01 + 4096, row
        else:
            assert row.after.download_bytes <= row.before.download_bytes, row


STATIC_CHECKS = (check_parses, check_idempotent, check_comments_kept, check_costs_never_increase)


@settings(PROFILE)
@given(scripts())
def test_static_properties(script: Script):
    """Output parses, a second run changes nothing, every comment survives, and the
    cost model's requests and download bytes never increase."""
    result = _optimized(script.source)
    for check in STATIC_CHECKS:
        check(script, result)


COMMENT_IN_CALL = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    with model.trace(
        prompt,  # which prompt
        remote=True,  # on NDIF
    ):
        hidden = model.transformer.h[0].output.save()
        out = model.lm_head.output.save()
print(hidden.shape, out.shape)
"""


def test_comment_inside_trace_call_is_kept():
    """Found by the comment property (comments inside a multi-line `trace(...)` call):
    removing a trailing `remote=` argument dropped the comma, and the comment, before it."""
    result = optimize(COMMENT_IN_CALL)
    assert "model.session(remote=True)" in result.code, result.code
    assert "# which prompt" in result.code and "# on NDIF" in result.code, result.code


def test_generated_scripts_are_worth_optimizing():
    """A guard on the generator itself: most scripts it draws get rewritten."""
    seen: list[bool] = []

    @settings(PROFILE, max_examples=min(PROFILE.max_examples, 6))
    @given(scripts())
    def collect(script: Script):
        seen.append(_optimized(script.source).changed)

    collect()
    assert sum(seen) >= len(seen) // 2, f"only {sum(seen)} of {len(seen)} scripts changed"


# -- execution ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def verify_sources():
    pytest.importorskip("nnsight")
    verify = pytest.importorskip("ndif_opt.verify", exc_type=ImportError)
    return verify.verify_sources


def _assert_right_or_wrong_where_the_original_was(report, code: str) -> None:
    assert report.errors["local"] is None, f"generator bug: {report.errors['local']}"
    if report.intended_ok:
        return
    detail = report.to_text() + "\n--- optimized:\n" + code
    assert report.original_remote_differs, detail
    assert _wrong_at(report.mismatches) <= _wrong_at(report.original_remote_mismatches), detail


def _wrong_at(mismatches) -> set[str]:
    """Where each mismatch is (`acts_3`, `stdout line 2`), not what the wrong value was:
    a run wrong where another was may be wrong in another way (a list half filled)."""
    return {mismatch.split(": ", 1)[0] for mismatch in mismatches}


def test_execution_check_shows_equal_results(verify_sources):
    """On the tiny models, through the NDIF emulation, the optimized script computes
    what the original intended (its local run). When the original is already wrong on
    NDIF and the optimizer could not fix it, the optimized script may be wrong only
    where the original was."""

    @settings(PROFILE, max_examples=EXECUTION_EXAMPLES)
    @given(scripts(max_segments=2))
    def check(script: Script):
        result = _optimized(script.source)
        report = verify_sources(
            script.source, result.code, filename="script.py",
            ignore_missing=result.unreturned, ignore=tuple(getattr(result, "introduced", ())),
        )
        _assert_right_or_wrong_where_the_original_was(report, result.code)

    check()


# -- notebooks ----------------------------------------------------------------------


def _saved_outside_functions(source: str) -> set[str]:
    """Names the script binds to ``<expr>.save()`` outside any function."""
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "save"):
            names.add(node.targets[0].id)
        pending.extend(ast.iter_child_nodes(node))
    return names


@functools.lru_cache(maxsize=None)
def _optimized_as_notebook(source: str):
    from ndif_opt.options import Options

    return optimize(source, filename="notebook.py", options=Options(notebook=True))


def test_a_notebook_keeps_every_value_saved_outside_functions():
    """The same scripts as a notebook's cells: the output parses, a second run changes
    nothing, and no value saved outside a function stops coming back (the kernel keeps it
    for cells not yet written)."""

    @settings(PROFILE)
    @given(scripts())
    def check(script: Script):
        result = _optimized_as_notebook(script.source)
        cst.parse_module(result.code)
        assert _optimized_as_notebook(result.code).code == result.code
        lost = _saved_outside_functions(script.source) & set(result.unreturned)
        assert not lost, (lost, result.code)

    check()


def test_a_notebook_keeps_its_saved_values_equal(verify_sources):
    """Executed: every value saved outside a function is compared, whatever the rewrite
    says it no longer brings back (the other names it lists are left out)."""

    @settings(PROFILE, max_examples=max(2, EXECUTION_EXAMPLES // 3))
    @given(scripts(max_segments=2))
    def check(script: Script):
        result = _optimized_as_notebook(script.source)
        report = verify_sources(
            script.source, result.code, filename="notebook.py",
            ignore_missing=tuple(set(result.unreturned) - _saved_outside_functions(script.source)),
            ignore=tuple(result.introduced),
        )
        _assert_right_or_wrong_where_the_original_was(report, result.code)

    check()


STALE_NAME = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
first = {}
for coefficient in [1.0, 2.0]:
    with model.trace("Hello", remote=True):
        model.transformer.h[2].output = model.transformer.h[2].output + coefficient
        logits = model.lm_head.output.save()
    first[coefficient] = logits[0, -1, 0].item()
with open("first.txt", "w") as handle:
    handle.write(str(first))
second = {}
for prompt in ["Paris is", "The cat sat on the mat"]:
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    second[prompt] = int(logits[0, -1].argmax())
"""


def test_unreturned_name_left_stale_by_an_earlier_session(verify_sources):
    """Found by the execution property (shrunk by hand). Nothing reads `logits` after the
    script, so stdout, files and every used value agree; only the dead name differs."""
    result = _optimized(STALE_NAME)
    assert "logits" in result.unreturned and result.code.count("model.session(") == 1  # the write replayed
    report = verify_sources(
        STALE_NAME, result.code, filename="script.py",
        ignore_missing=result.unreturned, ignore=tuple(getattr(result, "introduced", ())),
    )
    assert report.intended_ok, report.to_text()


# -- code without nnsight passes through -------------------------------------------------


def _stdlib_sample(count: int = 200, seed: int = 7) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )
    return sorted(random.Random(seed).sample(files, min(count, len(files))))


def _read_python(path: Path) -> str | None:
    try:
        with tokenize.open(path) as handle:
            source = handle.read()
        ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return None  # test data with deliberate syntax errors or bad encodings
    return source


def test_standard_library_passes_through_byte_for_byte():
    checked, failures = 0, []
    for path in _stdlib_sample():
        source = _read_python(path)
        if source is None:
            continue
        checked += 1
        try:
            code = optimize(source, filename=str(path)).code
        except Exception as error:  # noqa: BLE001 - every failure is reported below
            failures.append(f"{path}: {type(error).__name__}: {error}")
            continue
        if code != source:
            failures.append(f"{path}: changed")
    assert checked >= 150
    assert not failures, "\n".join(failures)


def test_arbitrary_python_passes_through():
    """hypothesmith's grammar-generated programs pass through byte for byte."""
    import hypothesmith  # in the test extra: a CI without it must fail, not skip

    @settings(
        PROFILE,
        max_examples=min(PROFILE.max_examples, 20),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    @given(hypothesmith.from_grammar())
    def check(source: str):
        assert optimize(source).code == source

    check()


def test_a_session_may_trade_a_little_download_for_fewer_requests():
    """Found by the `long` profile: hoisting brings back `acts_4` (views the client took of
    `hidden`) while `hidden` is still saved; reduction-pushdown removes that save next."""
    source = textwrap.dedent('''\
        from nnsight import LanguageModel

        model = LanguageModel("openai-community/gpt2")
        PROMPT = 'The Eiffel Tower is in the city of'
        N_LAYERS = 1

        if __name__ == "__main__":
            with model.trace(PROMPT, remote=True):
                clean_1 = model.transformer.h[0].output.mean(dim=1).save()
            with model.trace(PROMPT, remote=True):
                patched_2 = model.lm_head.output.save()
            score_3 = clean_1.norm().item() + patched_2[0, -1].argmax().item()
            acts_4 = []
            for layer in range(N_LAYERS):
                with model.trace(PROMPT, remote=True):
                    hidden = model.transformer.h[layer].output.save()
                acts_4.append(hidden[0, -1])
            summary_5 = [round(float(a.sum()), 4) for a in acts_4]
            print(score_3, summary_5)
    ''')
    result = _optimized(source)
    hoisting = next(cost for cost in result.costs if cost.pass_id == "session-hoisting")
    assert hoisting.after.requests < hoisting.before.requests
    assert hoisting.after.download_bytes > hoisting.before.download_bytes  # the trade
    check_costs_never_increase(Script(source, None, remote_constant=False), result)

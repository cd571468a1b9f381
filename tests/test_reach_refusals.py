"""benchmarks/refusals.py (loops and runs left without a reason) and benchmarks/expert_counts.py
(the corpus A1 expert counts) as reach.py uses them. Scripts here are written for the test."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import expert_counts  # noqa: E402
import reach  # noqa: E402
from refusals import constructs, line_map, measure, walk_requests, where  # noqa: E402

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

SCRIPT = textwrap.dedent('''\
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    prompts = ["a b c", "d e f", "g h i"]


    def sweep(prompt):
        outs = []
        for layer in range(4):
            with model.trace(prompt, remote=True):
                outs.append(model.transformer.h[layer].output.sum().item().save())
        return outs


    first = sweep(prompts[0])
    second = sweep(prompts[1])
    print(first, second)
''')


def test_walk_charges_a_loop_per_run_and_a_run_of_calls():
    walk = walk_requests(SCRIPT, Options())
    found = {(c.kind, c.start): c for c in constructs(walk)}
    loop = found[("loop", 9)]
    assert loop.requests == 4  # per run of the loop, although the function runs twice
    run = found[("run", 15)]
    assert run.requests == 8 and run.end == 16
    assert walk.total == 8


def test_a_loop_the_optimizer_bundles_is_not_left():
    result = optimize(SCRIPT)
    assert result.changed
    measured = measure(result.source, result.code, [], Options())
    assert measured["constructs"] == 2
    assert measured["left"] == []
    assert measured["reduced"] == 2


def test_a_loop_left_as_it_is_needs_a_finding_on_its_lines():
    silent = measure(SCRIPT, SCRIPT, [], Options())
    assert [(c["kind"], c["start"]) for c in silent["left"]] == [("loop", 9), ("run", 15)]
    assert all(not c["findings"] for c in silent["left"])
    finding = {"pass_id": "session-hoisting", "status": "skipped", "message": "m", "reason": "why", "line": 10}
    named = measure(SCRIPT, SCRIPT, [(10, finding)], Options())
    assert named["left"][0]["findings"] == [finding]
    assert named["left"][1]["findings"] == []  # line 10 is not the run's


def test_a_loop_nested_in_a_loop_left_counts_with_it():
    script = textwrap.dedent('''\
        from nnsight import LanguageModel
        import random
        model = LanguageModel("openai-community/gpt2")
        rng = random.Random(0)
        for a in range(3):
            for b in range(2):
                with model.trace("x y", remote=True):
                    out = model.lm_head.output.sum().save()
                rng.random()
    ''')
    measured = measure(script, script, [], Options())
    assert measured["constructs"] == 2
    assert [(c["start"], c["requests"]) for c in measured["left"]] == [(5, 6)]


def test_line_map_pairs_a_trace_with_its_rewrite_inside_a_session():
    old = "for p in ps:\n    with model.trace(p, remote=True):\n        x = 1\n"
    new = "with model.session(remote=True):\n    for p in ps:\n        with model.trace(p):\n            x = 1\n"
    assert line_map(old, new) == {1: 2, 2: 3, 3: 4}


def test_where_names_a_notebook_cell():
    joined = 'from IPython import get_ipython\n"ndif-opt cell abc123 1"\nx = 1\nglobal ndif_opt_cell_abc123_3\ny = 2\nz = 3\n'
    assert where(joined, 6, True) == "cell 4, line 2"
    assert where(joined, 3, True) == "cell 2, line 1"
    assert where(joined, 6, False) == "line 6"


def test_expert_data_is_complete_and_consistent():
    for expert in expert_counts.EXPERTS:
        assert expert.requests >= 1 and expert.why and expert.sends_how
        if expert.sends is not None:
            assert expert.sends > expert.requests, expert.file  # an A1 file sends more than the expert's
    readme = reach.SHARED / "corpus" / "README.md"
    if not readme.exists():
        pytest.skip("the shared corpus is not here")
    assert expert_counts.check_against_readme(reach.a1_names(readme)) == []
    assert len(expert_counts.EXPERTS) == 23


def test_as_intended_replaces_exactly_as_often_as_stated():
    expert = expert_counts.Expert("x.py", 1, "w", None, "h", intended=(("REMOTE = False", "REMOTE = True", 1),))
    assert expert_counts.as_intended(expert, "REMOTE = False\n") == "REMOTE = True\n"
    with pytest.raises(ValueError):
        expert_counts.as_intended(expert, "REMOTE = False\nREMOTE = False\n")


def _row(before, after, left=(), unfixed=(), static=None, names=None, requests=1, sends=10):
    expert = dict(requests=requests, static=static, names=names, sends=sends)
    run = {"crash": None, "requests_before": before, "requests_after": after, "unfixed": list(unfixed),
           "refusals": {"left": list(left)}}
    return {"expert": expert, "counting": run}


def test_a1_verdict():
    assert reach.a1_verdict(_row(57, 1))[1]
    assert not reach.a1_verdict(_row(57, 0))[1]  # the cost model saw no request after: unknown
    assert not reach.a1_verdict(_row(2, 2, requests=2))[1]  # saw no more than the expert's count before
    assert not reach.a1_verdict(_row(57, 2))[1]  # reduced short, nothing says why
    assert not reach.a1_verdict(_row(57, 57, left=[{"findings": []}]))[1]
    assert reach.a1_verdict(_row(57, 57, left=[{"findings": [{"reason": "r"}]}]))[1]
    assert reach.a1_verdict(_row(64, 8, requests=100, static=8))[1]
    named = [{"reason": "it calls `test_fn`, a parameter", "message": "m"}]
    assert reach.a1_verdict(_row(6, 6, unfixed=named, names=r"`test_fn`", requests=6))[1]


def test_a_loop_refused_inside_a_loop_refused_for_the_same_reason_has_no_finding_of_its_own():
    # the prompt grows by what a function of the user's own package (on your machine only)
    # makes of each prediction: neither loop can be a session, for that one reason, and the
    # outer loop's finding says it once
    source = textwrap.dedent('''\
        from nnsight import LanguageModel
        from mytools import continuation

        model = LanguageModel("openai-community/gpt2")
        prompts = ["a b c", "d e f"]
        for prompt in prompts:
            for step in range(3):
                with model.trace(prompt, remote=True):
                    logits = model.lm_head.output.save()
                prompt += continuation(logits[0, -1].argmax().item())
            print(prompt)
    ''')
    result = optimize(source)
    refused = [f for f in result.findings if f.pass_id == "session-hoisting" and f.status.value == "skipped"]
    assert len(refused) == 1, [(f.range.start.line + 1, f.message) for f in refused]
    assert refused[0].range.start.line + 1 == 6 and "`prompt`" in refused[0].reason


def test_reach_says_so_when_the_shared_directories_are_missing(tmp_path, capsys):
    """A checkout without ../shared measured "0/0" and looked like a result."""
    assert reach.main(["--devset", str(tmp_path / "devset"), "--corpus", str(tmp_path / "corpus")]) == 2
    assert "no such directory" in capsys.readouterr().err


# a greedy decoding loop whose logits pass through a helper of a module NDIF does not have:
# the refusal names the name the remote part needs, and the statement it comes from
LOCAL_HELPER_FEEDS_THE_PROMPT = '''\
from nnsight import LanguageModel
from my_utils import soft_cap

model = LanguageModel("openai-community/gpt2")
prompt = "The first three colours are"
for _ in range(3):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    logits = soft_cap(logits)
    token = logits[0, -1].argmax().item()
    prompt += model.tokenizer.decode(token) + ","
print(prompt)
'''


def test_a_refusal_names_the_local_statement_the_remote_part_depends_on():
    reasons = [f.reason for f in optimize(LOCAL_HELPER_FEEDS_THE_PROMPT).findings if f.pass_id == "session-hoisting"]
    assert len(reasons) == 1, reasons
    assert "`prompt`" in reasons[0] and "it comes from `logits = soft_cap(logits)`" in reasons[0], reasons
    assert "`my_utils.soft_cap`" in reasons[0], reasons


def test_a_nested_loops_own_finding_is_not_a_second_finding_of_the_loop_around_it():
    finding = lambda line: {"pass_id": "session-hoisting", "line": line}  # noqa: E731
    outer = {"kind": "loop", "start": 34, "end": 67, "findings": [finding(34), finding(42)]}
    row = lambda starts: ({"static": {"default": {"refusals": {  # noqa: E731
        "constructs": 2, "reduced": 0, "left": [outer], "starts": starts}}}})
    assert reach.refusal_summary([row([34, 42])], []).endswith("with more than one session-hoisting finding 0")
    assert reach.refusal_summary([row([34])], []).endswith("with more than one session-hoisting finding 1")


def test_a_print_of_a_growing_container_says_why_it_is_not_replayed():
    # it said only "the loop prints: inside a session `print` becomes a server log line",
    # though prints of what a loop builds are replayed after the session elsewhere
    from ndif_opt import optimize

    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
history = {"layers": [], "tops": []}
for layer in range(0, 12, 4):
    with model.trace("The quick brown fox", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    history["layers"].append(layer)
    history["tops"].append(int(top))
    print(layer, history)
'''
    (found,) = [f for f in optimize(source).findings if f.pass_id == "session-hoisting"]
    assert "cannot be replayed after the session: `history` is read by code" in found.reason, found.reason
    assert found.reason.endswith("(use --unsafe-fixes to accept)")

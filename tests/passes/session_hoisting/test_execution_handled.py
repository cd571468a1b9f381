"""Execution checks for loops that handle each request's failure on their own
(`try: <trace> <decoding> except Exception: <an error record>`), and for the data flow
that decides which part of a loop body runs on the client.

The session takes the remote work of every iteration; the decoding and the handler are
replayed in the same `try` after it; and should the session fail, the loop runs as
written (`except Exception:` around the session), so a request that fails is still
handled on its own. Each script runs on a tiny model of each family: the original
locally, the original and the optimized script through the NDIF emulation; stdout and
every module-level value must match.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

ERROR_RECORDS = '''
    import traceback
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    tok = model.tokenizer


    def classify(prompts, layers):
        results = []
        for i, prompt in enumerate(prompts):
            print(f"example {i + 1}/{len(prompts)}: {prompt[:12]}...")
            try:
                with model.trace(prompt, remote=True):
                    hidden = LAYERS[layers[i]].output.save()
                    logits = model.lm_head.output.save()
                top = logits[0, -1].argmax().item()
                word = tok.decode(top)
                print(f"  predicted {word!r}")
                result = {"prompt": prompt, "top": top, "norm": round(hidden.norm().item(), 3), "ok": True}
            except Exception as e:
                print("  failed")
                result = {"prompt": prompt, "ok": False}
            results.append(result)
        ok = sum(r["ok"] for r in results)
        print(f"{ok}/{len(results)} answered")
        return results


    out = classify(["The cat sat on the", "Paris is the capital of", "One two three four"], LAYER_INDICES)
'''


@both
def test_error_records_run_in_one_session(family):
    result, report = optimized_and_verified(ERROR_RECORDS.replace("LAYER_INDICES", "[0, 1, 0]"), family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert "except Exception:  # the session failed" in result.code
    # should the session fail, the loop runs as written: its prints are not lost
    hoisting, = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "only when the whole session succeeds" not in hoisting.message, hoisting.message


@both
def test_a_failing_request_is_still_handled_on_its_own(family):
    # layer 99 does not exist: the third request fails on the server. The session fails
    # with it, and the loop as written runs: the same records, the same lines printed
    result, report = optimized_and_verified(ERROR_RECORDS.replace("LAYER_INDICES", "[0, 1, 99]"), family)
    assert report.after.requests == report.before.requests + 1, report.to_text()
    assert "model.session(" in result.code


@both
def test_what_reads_the_clients_values_runs_on_the_client_too(family):
    # `entry` is built from `line`, which only the client computes (json): it was built
    # in the session, where `line` does not exist (NameError), and must be replayed
    result, report = optimized_and_verified(
        '''
        import json
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        rows = []
        for prompt in ["The cat sat on the", "One two three"]:
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output.save()
            line = json.dumps({"prompt": prompt, "top": logits[0, -1].argmax().item()})
            entry = {"line": line, "size": len(line)}
            rows.append(entry)
        print(rows)
        ''',
        family,
    )
    assert report.before.requests == 2 and report.after.requests == 1, report.to_text() + result.code


@both
def test_a_trace_that_reads_what_the_client_computed_from_the_last_result_stays_a_request_per_iteration(family):
    # `shifted` comes from json on the client, from the previous request's answer: it can
    # neither run in the session (it ran `steer = torch.from_numpy(shifted)` there
    # without `shifted`: NameError) nor before it
    result, report = optimized_and_verified(
        '''
        import json
        import numpy as np
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        base = np.linspace(-1, 1, model.config.hidden_size).astype(np.float32)
        outs = [1]
        for k in range(3):
            shifted = np.roll(base, json.loads(json.dumps(outs[-1] % 7)))
            steer = torch.from_numpy(shifted)
            with model.trace("The cat sat", remote=True):
                LAYERS[0].output[:, -1, :] = steer
                logits = model.lm_head.output[:, -1].save()
            outs.append(logits.argmax().item())
        print(outs)
        ''',
        family,
    )
    assert "model.session(" not in result.code
    assert report.after.requests == report.before.requests == 3


@both
def test_a_helpers_parameter_is_not_the_clients_object_of_the_same_name(family):
    # `log` is a file at module level; in `scaled` it is a number. The helper may run in
    # the session (it was taken for a user of the file, and the loop was not hoisted)
    result, report = optimized_and_verified(
        '''
        import os
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        log = open(os.devnull, "w")


        def scaled(base, log):
            return base * log


        base = torch.linspace(-1, 1, model.config.hidden_size)
        tops = []
        for k in range(3):
            vec = scaled(base, k + 1)
            with model.trace("The cat sat", remote=True):
                LAYERS[0].output[:, -1, :] += vec
                logits = model.lm_head.output[:, -1].save()
            tops.append(logits.argmax().item())
            print(k, tops[-1], file=log)
        print(tops)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code


@both
def test_inputs_computed_on_your_machine_run_before_the_session(family):
    # `shifted` needs json (not on NDIF) and nothing remote: it runs before the session,
    # once per item, and the session takes each value where the line stood. The loop
    # goes over a generator: it is listed once, so both loops see the same items
    result, report = optimized_and_verified(
        '''
        import json
        import numpy as np
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        base = np.linspace(-1, 1, model.config.hidden_size).astype(np.float32)
        outs = []
        for k in (n * 2 for n in range(3)):
            shifted = np.roll(base, json.loads(json.dumps(k)))
            steer = torch.from_numpy(shifted)
            with model.trace("The cat sat", remote=True):
                LAYERS[0].output[:, -1, :] = steer
                logits = model.lm_head.output[:, -1].save()
            outs.append(logits.argmax().item())
            print(k, outs[-1], float(shifted[0]))
        print(outs)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert result.code.index("json.loads") < result.code.index("model.session(")


@both
def test_a_random_generator_the_client_draws_from_after_the_trace_stays_in_order(family):
    # `rng` picks each prompt's word (before the trace) and a threshold (after it): run
    # before the session, the first draws would all come first and every value differ
    result, report = optimized_and_verified(
        '''
        import random
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        rng = random.Random(7)
        WORDS = ["cat", "dog", "tree", "house"]
        kept = []
        for i in range(3):
            prompt = "The " + rng.choice(WORDS) + " sat"
            with model.trace(prompt, remote=True):
                best = model.lm_head.output[0, -1].max().item().save()
            if best > rng.random():
                kept.append(prompt)
        print(kept)
        ''',
        family,
    )
    assert "model.session(" not in result.code


@both
def test_a_prompt_formatted_on_your_machine_is_sent_with_the_session(family):
    # the trace's own input is the value json formats on your machine
    result, report = optimized_and_verified(
        '''
        import json
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        rows = [{"q": "The cat", "a": "sat"}, {"q": "Paris is", "a": "nice"}, {"q": "One", "a": "two"}]
        for row in rows:
            prompt = json.dumps(row)
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().item().save()
            print(row["q"], top)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code


PROBER = '''
    from nnsight import LanguageModel


    class Prober:
        def __init__(self, model):
            self.model = model
            self.cache = {}
            self.calls = 0

        def run(self, prompt):
            with self.model.trace(prompt, remote=True):
                norm = SELFLAYERS[1].output[0, -1].norm().save()
            return round(norm.item(), 4)READS_CACHE

        def sweep(self, prompts):
            for p in prompts:
                self.cache[p] = self.run(p)
                self.calls += 1
                print(p, self.cache[p], self.calls)
            return self.cache


    model = LanguageModel("REPO")
    prober = Prober(model)
    res = prober.sweep(["a b c", "d e f", "g h i"])
    print(res, prober.calls)
'''


@both
def test_a_method_that_stores_its_results_on_self_runs_in_one_session(family):
    # `self` stays on your machine: the session computes each value, the replay stores
    # it (`self.cache[p] = ...`, `self.calls += 1`) and prints, in order
    source = PROBER.replace("READS_CACHE", "")
    result, report = optimized_and_verified(source, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code


@both
def test_a_method_that_reads_what_the_loop_stored_on_self_keeps_its_requests(family):
    # `run` reads `self.cache`, which each iteration's replayed store changes: in one
    # session every call would see it empty
    source = PROBER.replace("READS_CACHE", " + len(self.cache)")
    result, report = optimized_and_verified(source, family)
    assert "session(" not in result.code


@both
def test_a_dict_the_caller_passes_in_is_filled_on_your_machine(family):
    result, report = optimized_and_verified(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def probe(prompt):
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().item().save()
            return top


        def sweep(prompts, results):
            for p in prompts:
                results[p] = probe(p)
                print(p, results[p])


        found = {}
        sweep(["a b", "c d", "e f"], found)
        print(found)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code


@both
def test_prompts_read_from_files_are_read_before_the_session(family, tmp_path):
    for i in range(3):
        (tmp_path / f"p{i}.txt").write_text(f"The cat number {i} sat on the\n")
    result, report = optimized_and_verified(
        f'''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        tops = []
        for i in range(3):
            with open(f"{tmp_path}/p{{i}}.txt") as fh:
                prompt = fh.read().strip()
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().item().save()
            tops.append(top)
            print(i, prompt, top)
        print(tops)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code


@both
def test_a_file_the_loop_writes_and_reads_again_keeps_its_requests(family, tmp_path):
    # each iteration reads the prompt the last one wrote: read before the session, every
    # read would see the first
    result, report = optimized_and_verified(
        f'''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        with open("{tmp_path}/state.txt", "w") as fh:  # each run starts from the same text
            fh.write("The cat sat on the")
        for i in range(3):
            with open("{tmp_path}/state.txt") as fh:
                prompt = fh.read()
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().item().save()
            with open("{tmp_path}/state.txt", "a") as out:
                out.write(" x" + str(top % 3))
            print(i, prompt)
        ''',
        family,
    )
    assert "session(" not in result.code


@both
def test_an_array_loaded_from_a_file_travels_into_the_session(family, tmp_path):
    # `np.load` runs on your machine, but what it returns is data the session may take
    import numpy as np

    np.save(tmp_path / "dirs.npy", np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64))
    result, report = optimized_and_verified(
        f'''
        import numpy as np
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        dirs = np.load("{tmp_path}/dirs.npy")
        tops = []
        for k in range(3):
            steer = torch.from_numpy(dirs[k])
            with model.trace("The cat sat", remote=True):
                LAYERS[0].output[:, -1, :64] += steer
                tops.append(model.lm_head.output[0, -1].argmax().item().save())
        print(tops)
        ''',
        family,
    )
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert "_ndif_feed" not in result.code  # the session computes `steer` itself

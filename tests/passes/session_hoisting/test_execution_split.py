"""Execution checks for the client/server split: loops and runs of remote work whose
code must stay on your machine (prints, files, progress bars) become one session, and
that code is replayed afterwards in its order, over what the session recorded.

Each script runs three times on a tiny model of each family (the original locally,
the original and the optimized script through the NDIF emulation); stdout, files and
every module-level value must match, and the optimized script must send one request.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

from ndif_opt import optimize  # noqa: E402


def check(template: str, family: str, requests_after: int = 1):
    """The template optimized and verified (execution.optimized_and_verified); the optimized
    script sends ``requests_after`` requests, fewer than the original."""
    result, report = optimized_and_verified(template, family)
    assert report.after.requests == requests_after, report.to_text() + "\n" + result.code
    assert report.before.requests > requests_after
    return result, report


@both
def test_loop_that_prints_after_its_trace(family):
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        prompt = "The capital of France is"
        drops = []
        for layer in range(3):
            with model.trace(prompt, remote=True):
                LAYERS[layer].mlp.output[:] = 0
                logits = model.lm_head.output.save()
            diff = (logits[0, -1, 5] - logits[0, -1, 7]).item()
            drops.append(diff)
            print(f"layer {layer}: diff={diff:+.4f}")  # the client's line, in order
        print(f"swept {layer + 1} layers")
        ''',
        family,
    )
    assert "print(" not in result.code.split("with model.session")[1].split("\nfor ")[0]
    # the lines printed are the session's records: a failure anywhere loses them all, and
    # the finding says so (a loop that printed two lines before failing prints none)
    hoisting, = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "only when the whole session succeeds" in hoisting.message, hoisting.message


@both
def test_trace_in_a_helper_called_from_nested_loops_with_prints(family):
    check(
        '''
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        tok = model.tokenizer


        def lens(prompt, layer):
            with model.trace(prompt, remote=True):
                logits = model.lm_head(LAYERS[layer].output).save()
            return logits


        table = {"prompt": [], "layer": [], "p": []}
        for prompt in ["a b c", "hello world"]:
            for layer in range(2):
                logits = lens(prompt, layer)
                p = torch.softmax(logits[0, -1], dim=-1).max().item()
                table["prompt"].append(prompt)
                table["layer"].append(layer)
                table["p"].append(p)
            print(f"{prompt!r}: last p={p:.4f} rows so far {len(table['p'])}")
        best = max(range(len(table["p"])), key=lambda i: table["p"][i])
        ''',
        family,
    )


@both
def test_generate_loop_decoding_and_printing(family):
    check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        outputs = {}
        for prompt in ["Once upon", "The cat"]:
            with model.generate(prompt, max_new_tokens=3, do_sample=False, remote=True):
                tokens = model.generator.output.save()
            text = model.tokenizer.decode(tokens[0])
            outputs[prompt] = text
            print(prompt, "->", repr(text))
        ''',
        family,
    )


@both
def test_run_of_remote_blocks_with_prints_between_and_a_file_written(family):
    check(
        '''
        import json
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        prompt = "The quick brown fox"
        with model.trace(prompt, remote=True):
            clean = model.lm_head.output[0, -1].save()
        base = clean.max().item()
        print(f"clean max {base:.3f}")
        rows = []
        for layer in range(2):
            with model.trace(prompt, remote=True):
                LAYERS[layer].output[:] = 0
                out = model.lm_head.output[0, -1].save()
            rows.append({"layer": layer, "drop": base - out.max().item()})
            with open("/tmp/ndif_opt_split_rows.jsonl", "a") as f:
                f.write(json.dumps(rows[-1]) + "\\n")
        print("rows:", len(rows))
        ''',
        family,
    )


@both
def test_values_read_after_the_loop_come_back_and_rebinding_kills_liveness(family):
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        for layer in range(3):
            with model.trace("a b c", remote=True):
                h = LAYERS[layer].output.save()
            norm = h.norm().item()
        print("last layer", layer, "norm", round(norm, 4))
        total = sum(norm for norm in [1.0, 2.0])  # its own `norm`: not a read of the loop's
        for layer in ["x", "y"]:  # rebinds `layer` before any read
            print(layer)
        ''',
        family,
    )
    assert 'layer = _ndif_log["layer"]' in result.code and 'norm = _ndif_log["norm"]' in result.code


@both
def test_a_list_still_growing_is_printed_as_it_was(family):
    check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        results = {"layer": [], "norm": []}
        n = 3
        for layer in range(n):
            with model.trace("hello world", remote=True):
                h = LAYERS[layer].output.save()
            results["layer"].append(layer)
            results["norm"].append(h.norm().item())
            print(f"{layer}: {results['norm'][-1]:.3f} ({len(results['norm'])} so far)")
        ''',
        family,
    )


@both
def test_progress_bar_and_a_name_the_client_loop_and_the_server_loop_share(family):
    check(
        '''
        from tqdm import tqdm
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        with model.trace("one two three", remote=True):
            first = LAYERS[0].output[0, -1].norm().save()
        for i, n in enumerate([1.5, first.item()]):
            print(f"{i}: {n}")
        sums = []
        for i in tqdm(range(2), desc="layers"):
            with model.trace("one two three", remote=True):
                out = LAYERS[i].mlp.output.save()
            sums.append(out.sum().item() + first.item())  # reads the first trace: one experiment
        ''',
        family,
    )


@both
def test_dict_of_lists_created_above_other_code_is_taken_along(family):
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        store = {"a b": [], "c d": []}
        labels = {p: p.upper() for p in store}   # other code between the container and the loop
        for prompt in store:
            with model.trace(prompt, remote=True):
                store[prompt].append(LAYERS[0].output[0, -1].sum().item().save())
        ''',
        family,
    )
    assert "nnsight.save(store)" in result.code


@both
def test_lists_filled_under_a_variable_key_are_printed_as_they_were(family):
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        runs = {"plain": [], "zeroed": []}
        for prompt in ["a b c", "one two"]:
            for mode in runs:
                with model.trace(prompt, remote=True):
                    if mode == "zeroed":
                        LAYERS[0].output[:] = 0
                    top = model.lm_head.output[0, -1].argmax().save()
                runs[mode].append(int(top))
            print(f"plain {runs['plain'][-1]} zeroed {runs['zeroed'][-1]} after {len(runs['plain'])}")
        ''',
        family,
    )
    assert "runs['plain'][-1]" in result.code  # the element, not the list still growing


@both
def test_a_branch_on_a_remote_result_that_skips_the_rest_of_the_iteration(family):
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        changed = {}
        for prompt in ["a b", "c d e", "f", "g h"]:
            with model.trace(prompt, remote=True):
                base = model.lm_head.output[0, -1].argmax().save()
            if base.item() % 2 == 0:
                print(f"{prompt!r}: even, skipped")
                continue
            with model.trace(prompt, remote=True):
                LAYERS[0].output[:] = 0
                top = model.lm_head.output[0, -1].argmax().save()
            changed[prompt] = bool(top != base)
            print(prompt, "changed" if changed[prompt] else "unchanged")
        ''',
        family,
    )
    assert "next(" in result.code  # the replay takes the branch the session took


@both
def test_greedy_decoding_that_stops_early_runs_in_one_session(family):
    check(
        '''
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        ids = model.tokenizer("Once upon a time", return_tensors="pt")["input_ids"]
        stop = int(ids[0, 1])
        for step in range(4):
            with model.trace(ids, remote=True):
                logits = model.lm_head.output.save()
            next_id = logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
            print(f"step {step}: {model.tokenizer.decode(next_id)!r}")
            if next_id.item() == stop:
                print("stop token")
                break
        print("generated", ids.shape[1], "tokens in all")
        ''',
        family,
    )


@both
def test_a_helper_reading_a_value_the_session_computes_takes_it_as_an_argument(family):
    # `steered` reads the module's `vec`: computed inside the same session, its copy on
    # NDIF could not see it, so the session hands it over (`def steered(..., *, vec)`)
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def resid(text):
            with model.trace(text, remote=True):
                h = LAYERS[0].output[0, -1].save()
            return h


        def steered(prompt, alpha):
            with model.trace(prompt, remote=True):
                LAYERS[0].output[0, -1] += alpha * vec
                top = model.lm_head.output[0, -1].argmax().save()
            return int(top)


        vec = resid("I love it") - resid("I hate it")
        print(f"norm {vec.norm().item():.3f}")
        for alpha in [0.0, 4.0]:
            print(alpha, steered("The movie was", alpha))
        ''',
        family,
        requests_after=1,
    )
    assert "def steered(prompt, alpha, remote=True, *, vec):" in result.code


@both
def test_a_helper_under_a_grad_mode_decorator_joins_the_session(family):
    # the copy of a decorated function that a session carries cannot see the module's
    # names; `@torch.no_grad()` is said as a `with` around the body instead
    result, _ = check(
        '''
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        @torch.no_grad()
        def last_resid(text):
            """The last token's residual after the first layer."""
            with model.trace(text, remote=True):
                h = LAYERS[0].output.save()
            return h[0, -1]


        acts = torch.stack([last_resid(t) for t in ["a b c", "d e", "f"]])
        print(acts.shape, acts.norm().item())
        ''',
        family,
    )
    assert "@torch.no_grad()" not in result.code
    assert "with torch.no_grad():" in result.code


@both
def test_a_value_printed_then_rebound_by_the_remote_part_ends_with_its_last_value(family):
    # the print reads `direction` before the remote part normalises it: the replay reads
    # the record in place, and `direction` ends normalised, as in the original
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def resid(text):
            with model.trace(text, remote=True):
                h = LAYERS[0].output.save()
            return h[0, -1]


        direction = resid("I love it") - resid("I hate it")
        print(f"raw norm {direction.norm().item():.4f}")
        direction = direction / direction.norm()
        score = resid("The movie was") @ direction
        print(f"score {score.item():+.4f}")
        ''',
        family,
    )
    assert "{_ndif_log['direction_norm']:.4f}" in result.code, result.code


@both
def test_a_helper_that_retries_its_trace_runs_in_one_session_under_the_same_retry(family):
    result, _ = check(
        '''
        import time
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def activations(text, retries=3):
            for attempt in range(retries):
                try:
                    with model.trace(text, remote=True):
                        acts = torch.stack([LAYERS[i].output for i in range(2)]).save()
                    return acts
                except Exception as err:  # a busy queue: back off and try again
                    print(f"attempt {attempt} failed: {err}")
                    time.sleep(2 ** attempt)
            raise RuntimeError(f"giving up on {text!r}")


        feats = []
        for i, text in enumerate(["a b c", "d e", "f g h i"]):
            acts = activations(text)
            last = acts[:, 0, -1]
            print(i, last.norm().item())
            feats.append(last)
        print(len(feats))
        ''',
        family,
    )
    head = result.code.split("with model.session")[0]
    assert "for _ndif_attempt in range(3):" in head and "try:" in head.split("_ndif_attempt")[-1]


@both
def test_calls_through_a_retry_wrapper_run_in_one_session_under_it(family):
    result, _ = check(
        '''
        import time
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def with_retries(fn, *args, tries=3, wait=5.0):
            for attempt in range(1, tries + 1):
                try:
                    return fn(*args)
                except Exception as exc:
                    print(f"attempt {attempt}/{tries} failed: {exc!r}")
                    if attempt == tries:
                        raise
                    time.sleep(wait * attempt)


        def top_token(model, prompt):
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output.save()
            return logits[0, -1].argmax().item()


        def greedy(model, prompt):
            with model.generate(prompt, max_new_tokens=3, do_sample=False, remote=True):
                out = model.generator.output.save()
            return out[0].tolist()


        for prompt in ["The cat sat", "Once upon"]:
            token = with_retries(top_token, model, prompt)
            ids = with_retries(greedy, model, prompt)
            print(prompt, token, ids)
        ''',
        family,
    )
    assert "with_retries(" not in result.code.split("with model.session")[1].split("\nfor ")[0]
    assert "time.sleep(5.0 * _ndif_attempt)" in result.code
    # the wrapper's `tries=3` is a number in the message, not `{3}`
    assert 'print(f"attempt {_ndif_attempt}/3 failed: {exc!r}")' in result.code, result.code


@both
def test_an_inline_retry_around_a_trace_goes_around_the_session(family):
    result, _ = check(
        '''
        import time
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        tops = []
        for i, prompt in enumerate(["The cat", "A dog runs", "Hello there"]):
            for attempt in range(3):
                try:
                    with model.trace(prompt, remote=True):
                        top = model.lm_head.output[0, -1].argmax().save()
                    tops.append(int(top))
                    break
                except Exception as e:
                    print(f"prompt {i} attempt {attempt + 1} failed: {e}")
                    if attempt < 2:
                        time.sleep(5)
                    else:
                        raise
            print(i, tops[-1])
        print(len(tops))
        ''',
        family,
    )
    assert "tops = []" not in result.code  # created in the session, saved (read after it)
    assert "for _ndif_attempt in range(3):" in result.code


@both
def test_a_library_function_whose_helper_takes_the_model_as_a_parameter(family):
    # the model arrives as a parameter, the loop sits under `torch.no_grad()` with a
    # progress bar, and the lists it fills are returned after it
    result, _ = check(
        '''
        import torch
        from tqdm import tqdm
        from nnsight import LanguageModel


        def _extract(lm, prompts, layers, remote=False):
            tok = lm.tokenizer(prompts, return_tensors="pt", padding=True)
            with lm.trace(tok, remote=remote):
                acts = torch.cat([LMLAYERS[i].output for i in layers], dim=-1).save()
            return acts, tok["attention_mask"]


        def extract(lm, prompts, layers, batch_size=2, remote=False):
            outs, masks = [], []
            with torch.no_grad():
                for i in tqdm(range(0, len(prompts), batch_size)):
                    a, m = _extract(lm, prompts[i : i + batch_size], layers, remote=remote)
                    outs.append(a.cpu())
                    masks.append(m.cpu())
            return outs, masks


        model = LanguageModel("REPO")
        model.tokenizer.pad_token = model.tokenizer.eos_token
        acts, masks = extract(model, ["a b", "c d e", "f", "g h"], [0, 1], remote=True)
        print(len(acts), acts[0].shape, masks[1].sum().item())
        ''',
        family,
    )
    assert "with lm.session(remote=remote):" in result.code
    assert result.code.index("import nnsight") < result.code.index("def _extract")


@both
def test_traces_in_methods_called_from_a_loop_in_another_method(family):
    # `self.remote` cannot be a default (it is read when the method is defined): the
    # method's block takes `remote and self.remote`; what the clean run stores on the
    # server's copy of `self` comes back to yours after the session (the script reads it)
    result, report = check(
        '''
        import torch
        from nnsight import LanguageModel


        class Patching:
            def __init__(self, model, clean, corrupt, remote=True):
                self.model = model
                self.clean, self.corrupt = clean, corrupt
                self.remote = remote
                self.n_layers = 2

            def run_clean(self):
                with self.model.trace(self.clean, remote=self.remote):
                    hidden = torch.stack([SELFLAYERS[i].output for i in range(self.n_layers)]).save()
                self.clean_hidden = hidden

            def patch(self, layer, pos):
                vec = self.clean_hidden[layer, 0, pos]
                with self.model.trace(self.corrupt, remote=self.remote):
                    SELFLAYERS[layer].output[0, pos, :] = vec
                    logits = self.model.lm_head.output.save()
                return (logits[0, -1, 5] - logits[0, -1, 7]).item()

            def sweep(self, positions):
                self.run_clean()
                grid = torch.zeros(self.n_layers, len(positions))
                for layer in range(self.n_layers):
                    for j, pos in enumerate(positions):
                        grid[layer, j] = self.patch(layer, pos)
                    print(f"layer {layer}: " + " ".join(f"{v:+.3f}" for v in grid[layer].tolist()))
                return grid


        model = LanguageModel("REPO")
        exp = Patching(model, "The cat sat on the mat", "The dog sat on the mat")
        grid = exp.sweep([0, 1, 2])
        print(grid.abs().argmax().item())
        print(tuple(exp.clean_hidden.shape))
        ''',
        family,
    )
    assert "remote=remote and self.remote" in result.code
    assert "self.patch(layer, pos, remote=False)" in result.code
    assert 'self.clean_hidden = _ndif_log["self.clean_hidden"]' in result.code  # read after the session
    assert report.before.requests == 7


@both
def test_blocks_opened_under_no_grad_in_the_same_with(family):
    # `with torch.no_grad(), model.trace(...)` is a block under a grad-mode context
    result, _ = check(
        '''
        import torch
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        kl = {}
        for n in [0, 3, 5]:
            with torch.no_grad(), model.trace("The cat sat on the", remote=True):
                clean = model.lm_head.output.save()
            with torch.no_grad(), model.trace("The cat sat on the", remote=True):
                LAYERS[0].mlp.output[:, :, n] = 0
                ablated = model.lm_head.output.save()
            kl[n] = (clean[0, -1].softmax(-1) - ablated[0, -1].softmax(-1)).abs().sum().item()
            print(n, f"{kl[n]:.3e}")
        print(max(kl, key=kl.get))
        ''',
        family,
    )
    assert "with torch.no_grad(), model.trace(" in result.code


@both
def test_a_helper_that_opens_its_own_session_joins_the_callers(family):
    # called with remote=False, its session runs inside the caller's, on the server
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")


        def effect(prompt, remote=True):
            with model.session(remote=remote):
                with model.trace(prompt):
                    a = model.lm_head.output[0, -1].argmax().save()
                with model.trace(prompt):
                    LAYERS[0].mlp.output[:] = 0
                    b = model.lm_head.output[0, -1].argmax().save()
            return int(a), int(b)


        changed = []
        for p in ["The cat", "A dog runs", "Hello there"]:
            a, b = effect(p)
            print(p, a, b)
            changed.append(a != b)
        print(sum(changed))
        ''',
        family,
    )
    assert "effect(p, remote=False)" in result.code


@both
def test_a_replayed_line_that_reads_parts_of_a_value_gets_only_those_parts(family):
    # the print needs the shape and the top token, not the [1, seq, vocab] logits
    result, report = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        for p in ["The cat sat", "A dog runs fast"]:
            with model.trace(p, remote=True):
                logits = model.lm_head.output.save()
            print(p, tuple(logits.shape), logits[0, -1].argmax().item())
        ''',
        family,
    )
    assert "logits.shape" in result.code.split("with model.session")[1].split("\nfor ")[0]
    assert report.after.download_raw_bytes * 5 < report.before.download_raw_bytes


@both
def test_a_replayed_part_may_read_other_values_the_session_computes(family):
    # `probs[0, -1, top]` reads `top`, computed in the session from the same trace: the
    # session records the one probability, not the [1, seq, vocab] distribution
    result, report = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        k = 2
        for p in ["The cat sat", "A dog runs fast"]:
            with model.trace(p, remote=True):
                probs = model.lm_head.output.softmax(-1).save()
            top = probs[0, -1].argmax().item()
            print(p, top, probs[0, -1, top].item(), probs[0, -k, top].item())
        ''',
        family,
    )
    assert "probs[0, -1, top].item()" in result.code.split("with model.session")[1].split("\nfor ")[0]
    assert report.after.download_raw_bytes * 5 < report.before.download_raw_bytes


@both
def test_a_replayed_conversion_that_widens_a_value_runs_on_your_machine(family):
    # `.tolist()` makes a Python float of each element and `.float()` widens: recorded in the
    # session they would download more than the tensors the original downloads. The records
    # hold the tensors (`row`, `h[0, -1]`); the replay converts them.
    result, report = check(
        '''
        import statistics
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        spread, peaks = {}, {}
        for L in [0, 1]:
            with model.trace("The lazy dog sleeps", remote=True):
                row = LAYERS[L].output[0, -1].save()
                h = LAYERS[L + 2].output.save()
            spread[L] = statistics.pstdev(row.tolist())
            peaks[L] = statistics.fmean(h[0, -1].double().tolist())
        ''',
        family,
    )
    session = result.code.split("with model.session")[1].split("\nfor ")[0]
    assert "tolist" not in session and "double" not in session, result.code
    assert report.after.download_raw_bytes <= report.before.download_raw_bytes, report.to_text()


@both
def test_a_part_reading_a_value_bound_again_later_is_recorded_before_that(family):
    # `top` is bound again after the print: the print's record is taken where it stands,
    # before that, so it reads the first `top`
    result, _ = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        seen = []
        for p in ["The cat sat", "A dog runs fast"]:
            with model.trace(p, remote=True):
                probs = model.lm_head.output.softmax(-1).save()
            top = probs[0, -1].argmax().item()
            print(p, probs[0, -1, top].item())
            top = probs[0, 0].argmax().item()
            seen.append(top)
        print(seen)
        ''',
        family,
    )
    session = result.code.split("with model.session")[1].split("\nfor ")[0]
    assert session.index("probs[0, -1, top]") < session.index("top = probs[0, 0]")


@both
def test_a_part_reading_a_value_that_changes_before_the_iteration_ends_is_not_recorded_late(family):
    # a later client line makes the row be appended at the iteration's end, after `top`
    # is bound again: the part must not be recorded there (the split is refused or reads
    # the right `top`; either way the results must match)
    optimized_and_verified(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        for p in ["The cat sat", "A dog runs fast"]:
            with model.trace(p, remote=True):
                probs = model.lm_head.output.softmax(-1).save()
            top = probs[0, -1].argmax().item()
            print(p, probs[0, -1, top].item())
            top = probs[0, 0].argmax().item()
            print(p, top)
        ''',
        family,
    )


@both
def test_a_method_that_appends_what_another_methods_trace_returns_to_self(family):
    # `self` stays on your machine: the session computes `self.logit(layer)` and the
    # replay appends it to `self.records`. The split crashed building the path of
    # `self.records.append(...)` (CSTValidationError: Cannot have empty SubscriptElement),
    # reported as an internal error at 1:1
    result, _ = check(
        '''
        from nnsight import LanguageModel


        class Sweep:
            def __init__(self):
                self.model = LanguageModel("REPO")
                self.records = []

            def logit(self, layer):
                with self.model.trace("The cat sat on the", remote=True):
                    value = SELFLAYERS[layer].output[0, -1].norm().save()
                return value

            def run(self, layers):
                for layer in layers:
                    self.records.append(self.logit(layer))


        sweep = Sweep()
        sweep.run([0, 1, 0])
        print([round(r.item(), 4) for r in sweep.records])
        ''',
        family,
    )
    assert "self.records.append(" in result.code.split("with self.model.session")[1].split("_ndif_rows:")[1]
    [found] = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert (found.range.start.line, found.range.start.character) == (15, 8), found  # `for layer in layers:`


@both
def test_a_loop_that_fills_a_dataframe_and_a_defaultdict_and_stops_early(family):
    # the data frame stays on your machine (its rows are replayed); `log[...].append(...)`
    # beside it crashed the split, as above
    result, _ = check(
        '''
        from collections import defaultdict

        import pandas as pd
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        log = defaultdict(list)
        df = pd.DataFrame(columns=["layer", "rank"])
        first_hit = None
        for layer in range(4):
            with model.trace("The Eiffel Tower is in the city of", remote=True):
                logits = model.lm_head(LAYERS[layer].output)
                rank = (logits[0, -1] > logits[0, -1, 7]).sum().save()
            log["layer"].append(layer)
            log["rank"].append(int(rank))
            df.loc[len(df)] = [layer, int(rank)]
            if rank.item() < 0 or layer == 2:
                first_hit = layer
                print(f"stopped at layer {layer}")
                break
        print(first_hit, dict(log), len(df))
        ''',
        family,
    )
    assert "df.loc[len(df)]" in result.code.split("with model.session")[1].split("_ndif_rows:")[1]
    [found] = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert found.range.start.line == 10, found  # `for layer in range(4):`


WHILE_TEST_CALLS_A_HELPER = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")


def next_piece(text):
    with model.trace(text, remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    return f" t{top.item() % 7}"


text, steps, pieces = "Once upon a time", 0, []
while steps < 3 and (piece := next_piece(text)) != " stop":
    text += piece
    steps += 1
    pieces.append(piece)
print("done after", steps, pieces)
'''


@both
def test_a_while_loop_whose_test_calls_a_tracing_helper_is_one_session(family):
    # the test runs before every iteration: its requests are the loop's (N + 1 of them)
    result, report = check(WHILE_TEST_CALLS_A_HELPER, family)
    assert "while steps < 3" in result.code and ".session(remote=True)" in result.code


def test_a_while_loop_whose_test_calls_a_tracing_helper_and_that_prints_says_why_it_stays():
    source = WHILE_TEST_CALLS_A_HELPER.replace("    pieces.append(piece)", "    print(piece)")
    result = optimize(source)
    [finding] = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert finding.range.start.line == source.splitlines().index(  # (0-based)
        'while steps < 3 and (piece := next_piece(text)) != " stop":')
    assert "N separate remote requests" in finding.message and "`print`" in finding.reason


@both
def test_a_progress_bar_reading_an_outer_loops_variable_is_shown_where_it_was(family):
    # the inner loop's bar is labelled with the outer loop's prompt: replayed after one
    # session of both loops, it read `prompt` where no prompt is bound (NameError). The
    # outer loop stays (its bar would not show what it shows), each inner loop is a session
    result, report = optimized_and_verified(
        '''
        from nnsight import LanguageModel
        from tqdm import tqdm

        model = LanguageModel("REPO")
        scores = {}
        for prompt in ["The capital of France is", "One, two, three,"]:
            for layer in tqdm(range(2), desc=prompt[:8]):
                with model.trace(prompt, remote=True):
                    LAYERS[layer].mlp.output[:] = 0
                    top = model.lm_head.output[0, -1].argmax().save()
                scores[(prompt, layer)] = top.item()
        print(scores)
        ''',
        family,
    )
    assert (report.before.requests, report.after.requests) == (4, 2), report.to_text() + result.code
    assert "desc=prompt[:8]" in result.code
    outer = [f for f in result.findings if f.pass_id == "session-hoisting" and not f.applied]
    assert outer and "reads `prompt`, which the loop changes" in (outer[0].reason or ""), \
        [(f.message, f.reason) for f in result.findings]


@both
def test_a_container_made_before_the_loop_is_said_to_be_taken_into_the_session(family):
    # a `defaultdict(list)` stays where your code makes it: `nnsight.save(...)` takes it
    # into the session (the finding said it "would be created in the session")
    result, _ = check(
        '''
        from collections import defaultdict
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        by_layer = defaultdict(list)
        for prompt in ["The cat sat", "A dog ran"]:
            for layer in range(2):
                with model.trace(prompt, remote=True):
                    top = model.lm_head(LAYERS[layer].output)[0, -1].max().item().save()
                by_layer[layer].append(round(top, 4))
        print(dict(by_layer))
        ''',
        family,
    )
    hoisting, = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "`by_layer` now taken into the session, filled there and saved" in hoisting.message, hoisting.message
    assert "by_layer = defaultdict(list)" in result.code


# a function the remote part calls reads a list that code replayed on your machine grows
# (a trial's: the append was replayed after the session, every iteration built its prompt
# from the first context; MISMATCH). Here the appended text needs a file read, so the list
# stays on your machine.
READ_BY_A_CALLED_FUNCTION = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    context = ["The story begins."]
    with open("suffix.txt", "w") as f:
        f.write("!")


    def next_word():
        prompt = " ".join(context)
        with model.trace(prompt, remote=True):
            t = model.lm_head.output[0, -1].argmax().save()
        return model.tokenizer.decode([t.item()]) + f"<{len(prompt)}>"


    for _ in range(3):
        word = next_word()
        with open("suffix.txt") as f:
            suffix = f.read()
        context.append(word + suffix)
    print(context)
'''


@both
def test_a_function_the_remote_part_calls_reads_what_the_replay_would_change_too_late(family):
    result, report = optimized_and_verified(READ_BY_A_CALLED_FUNCTION, family)
    assert report.before.requests == report.after.requests == 3, report.to_text() + result.code
    hoisting, = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "`context` is changed by code that must run on your machine and is also used by the remote part" \
        in hoisting.reason, hoisting.reason


# random noise drawn on your machine from a size the region computes before it: the draw
# needs `emb_dim`, which the session would compute (a trial's: the reason said the remote
# part "changes" it, where nothing changes it)
NOISE_SIZED_BY_THE_REGION = '''
    import torch
    from nnsight import LanguageModel

    torch.manual_seed(0)
    model = LanguageModel("REPO")
    PROMPT = "The Space Needle is located in the city of"
    with model.trace(PROMPT, remote=True):
        clean = LAYERS[1].output[0, -1].save()
    emb_dim = model.config.hidden_size
    noises = [torch.randn(emb_dim) for _ in range(3)]
    scores = []
    for noise in noises:
        with model.trace(PROMPT, remote=True):
            LAYERS[1].output[0, -1] = clean + noise
            p = model.lm_head.output[0, -1].softmax(-1).max().save()
        scores.append(p.item())
    print(scores)
'''


@both
def test_a_name_the_region_computes_is_said_to_be_computed_not_changed(family):
    result, _ = optimized_and_verified(NOISE_SIZED_BY_THE_REGION, family)
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "session-hoisting" and not f.applied]
    assert any("reads `emb_dim`, which the remote part computes" in r for r in reasons), reasons


# what a call reads through an object or a default: the loop changes it on your machine, the
# remote part's calls read it (trials': every iteration built its prompt from the first
# value; MISMATCH)
READ_THROUGH_A_METHOD = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Chat:
        def __init__(self, opening):
            self.turns = [opening]

        def reply(self):
            prompt = " ".join(self.turns)
            with model.trace(prompt, remote=True):
                t = model.lm_head.output[0, -1].argmax().save()
            return model.tokenizer.decode([t.item()]) + f"<{len(prompt)}>"


    chat = Chat("Hi, how are you?")
    for _ in range(3):
        chat.turns.append(chat.reply())
    print(chat.turns)
'''

READ_THROUGH_A_METHOD_OF_AN_ATTRIBUTE_SET = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Conv:
        def __init__(self):
            self.prefix = "Start"

        def make_prompt(self, q):
            return self.prefix + " " + q


    conv = Conv()
    lens = []
    for q in ["one", "two", "three"]:
        prompt = conv.make_prompt(q)
        with model.trace(prompt, remote=True):
            t = model.lm_head.output[0, -1].argmax().save()
        conv.prefix = prompt
        lens.append(len(prompt))
    print(lens)
'''

READ_THROUGH_A_DEFAULT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    history = ["The story begins."]


    def next_word(ctx=history):
        prompt = " ".join(ctx)
        with model.trace(prompt, remote=True):
            t = model.lm_head.output[0, -1].argmax().save()
        return model.tokenizer.decode([t.item()]) + f"<{len(prompt)}>"


    for _ in range(3):
        history.append(next_word())
    print(history)
'''


@both
@pytest.mark.parametrize("template", [READ_THROUGH_A_METHOD, READ_THROUGH_A_METHOD_OF_AN_ATTRIBUTE_SET,
                                      READ_THROUGH_A_DEFAULT], ids=["method", "attribute-set", "default"])
def test_what_a_call_reads_through_an_object_or_a_default_is_not_replayed_too_late(template, family):
    result, report = optimized_and_verified(template, family)
    assert report.before.requests == report.after.requests == 3, report.to_text() + result.code

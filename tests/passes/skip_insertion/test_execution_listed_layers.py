"""skip-insertion over a sweep whose layers are a list known before running: a name bound
once to `list(range(...))` (as session-hoisting binds the loop's items when the loop
computes an input of each trace on your machine) is followed to the `range` it copies, so
the layer numbers are known to be 0 or more and the prefix is cached (it was refused:
"cannot tell ... that the layer numbers in `_ndif_items` are all 0 or more"). A list that
may be empty caches no layer (`max(..., default=0)`: `max([])` raises). Each script runs
on a tiny model of each family: the original locally, the original and the optimized script
through the NDIF emulation; stdout and every module-level value must match."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

# the noise of each iteration is drawn on your machine: session-hoisting lists the loop's
# items (`_ndif_items = list(range(3))`) and the session takes the noise in turn
NOISE_SWEEP = '''
    import torch
    from nnsight import LanguageModel

    torch.manual_seed(0)
    model = LanguageModel("REPO")
    flips = {}
    for layer in range(3):
        noise = torch.randn(4) * 2.0
        with model.trace("The Eiffel Tower is in", remote=True):
            LAYERS[layer].output[0, -1, :4] += noise
            top = model.lm_head.output[0, -1].argmax().save()
        flips[layer] = top.item()
        print(layer, round(noise.norm().item(), 3), flips[layer])
'''

# the user's own list of the layers, copied from a range
LISTED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    SWEEP = list(range(1, 3))
    drops = {}
    for layer in SWEEP:
        with model.trace("One two three four", remote=True):
            LAYERS[layer].mlp.output[:] = 0
            drops[layer] = model.lm_head.output[0, -1].max().item().save()
    print(drops)
'''

# a list that is empty when the script runs: no layer is cached, nothing fails
EMPTY = '''
    import sys
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    chosen = list(range(len(sys.argv[1:])))
    seen = {}
    for layer in chosen:  # (no command-line arguments: none)
        noise = float(layer) / 10
        with model.trace("One two three four", remote=True):
            LAYERS[layer].output[0, -1] += noise
            seen[layer] = model.lm_head.output[0, -1].max().item().save()
    print(seen)
'''


def _skip_finding(result):
    return next(f for f in result.findings if f.pass_id == "skip-insertion")


@both
def test_a_sweep_with_inputs_computed_on_your_machine_caches_its_prefix(family):
    result, report = optimized_and_verified(NOISE_SWEEP, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert "_ndif_items = list(range(3))" in result.code and "_ndif_cache" in result.code, result.code
    assert report.after.layer_calls < report.before.layer_calls, report.to_text()
    assert "cannot tell" not in (_skip_finding(result).reason or "")


@both
def test_a_sweep_over_a_list_copied_from_a_range_caches_its_prefix(family):
    result, report = optimized_and_verified(LISTED, family)
    assert "range(max(SWEEP, default=0))" in result.code, result.code
    assert report.after.layer_calls < report.before.layer_calls, report.to_text() + result.code


@both
def test_a_list_empty_when_the_script_runs_caches_no_layer(family):
    # (verify calls the run FAILED: the original sends no request, so nothing remote is
    # compared; what matters is that the optimized script runs and ends with the same values)
    result, report = optimized_and_verified(EMPTY, family, expect_ok=False)
    assert "range(max(chosen, default=0))" in result.code, result.code
    assert not report.errors.get("optimized") and not report.mismatches, report.to_text()
    assert report.after.forward_passes == 0, report.to_text()

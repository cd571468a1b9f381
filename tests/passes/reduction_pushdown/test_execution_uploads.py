"""reduction-pushdown weighs what it uploads against what it saves: a reduction that reads a
tensor of your machine (a distribution an earlier request downloaded) makes each request
carry that tensor once it is computed in the block. When the upload takes longer than the
download saved (uploads are slower: 20 MB/s against 50 MB/s, the cost model's settings),
the value stays downloaded, and the finding says why; a reduction that reads only small
values of your machine is still computed in the block. Each script runs on a tiny model of
each family: the original locally, the original and the optimized script through the NDIF
emulation; stdout and every module-level value must match."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

# the KL divergence of each randomly steered run from the base run: `base` is a whole
# distribution (the draws of your machine's generator, before and after, keep the requests
# apart: session-hoisting leaves them, and says why)
KL_FROM_BASE = '''
    import torch
    from nnsight import LanguageModel

    torch.manual_seed(0)
    model = LanguageModel("REPO")
    P = "My favourite food is"
    with model.trace(P, remote=True):
        base = model.lm_head.output[0, -1].log_softmax(-1).save()
    kls = []
    for i in range(3):
        v = torch.randn(4)
        with model.trace(P, remote=True):
            LAYERS[1].output[0, -1, :4] += v
            lp = model.lm_head.output[0, -1].log_softmax(-1).save()
        kls.append(torch.sum(base.exp() * (base - lp)).item())
    print([round(k, 4) for k in kls], round(torch.rand(1).item(), 4))
'''

# the same, against a threshold of your machine: a number travels, not a distribution
OVER_THRESHOLD = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    P = "My favourite food is"
    floor = torch.tensor(-12.0)
    counts = []
    for i in range(3):
        with model.trace(P, remote=True):
            LAYERS[1].output[:, -1] += float(i)
            lp = model.lm_head.output[0, -1].log_softmax(-1).save()
        counts.append((lp > floor).sum().item())
    print(counts)
'''


def _pushdown(result):
    return [f for f in result.findings if f.pass_id == "reduction-pushdown"]


@both
def test_a_reduction_reading_a_downloaded_distribution_stays_on_your_machine(family):
    result, report = optimized_and_verified(KL_FROM_BASE, family)
    reasons = [f.reason or "" for f in _pushdown(result) if not f.applied]
    assert any("would read `base`" in r and "takes longer" in r for r in reasons), \
        [(f.message, f.reason) for f in result.findings]
    assert "torch.sum(base.exp() * (base - lp)).item()" in result.code.split("kls.append(")[1], result.code
    # `base` is not uploaded with the requests: the upload does not grow by it
    assert report.after.upload_bytes < report.before.upload_bytes + 2 * report.before.download_bytes / 4, \
        report.to_text()


@both
def test_a_reduction_reading_a_small_value_of_your_machine_is_computed_in_the_block(family):
    result, report = optimized_and_verified(OVER_THRESHOLD, family)
    assert any(f.applied for f in _pushdown(result)), [(f.message, f.reason) for f in result.findings]
    assert report.after.download_bytes < report.before.download_bytes, report.to_text()


# the same weighing against an edited copy of the model (`ablated`), whose values the bill
# once did not size: the finding said the reduction would save "~0 B" of download
KL_FROM_ABLATED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.edit() as (tracer, ablated):
        ablated.LAYERS_TAIL[1].mlp.output[:] = 0
    kls = []
    for p in ["The quick brown fox", "Hello, my name is"]:
        with model.trace(p, remote=True):
            base = model.lm_head.output[0, -1].softmax(-1).save()
        with ablated.trace(p, remote=True):
            abl = ablated.lm_head.output[0, -1].softmax(-1).save()
        kls.append((base * (base.log() - abl.log())).sum().item())
    print([round(k, 5) for k in kls])
'''


@both
def test_the_download_an_edited_copy_s_reduction_would_save_is_its_size(family):
    tail = {"gpt2": "transformer.h", "llama": "model.layers"}[family]
    result, report = optimized_and_verified(KL_FROM_ABLATED.replace("LAYERS_TAIL", tail), family)
    reasons = [f.reason or "" for f in _pushdown(result) if not f.applied]
    assert any("would read `base`" in r and "takes longer" in r for r in reasons), reasons
    assert not any("~0 B" in r for r in reasons), reasons
    assert (report.before.requests, report.after.requests) == (4, 4)

"""A call that changes the model object on your machine (`model.clear_edits()` between two
remote traces) is no remote work: in a session it would clear the server's edits and leave
yours, so a later local trace would still see them. The traces around it stay apart, with
the reason. Llama, original and rewrite through verify's emulation of NDIF."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import optimized_and_verified  # noqa: E402

EDITS_CLEARED_BETWEEN = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
with model.edit(inplace=True):
    LAYERS[1].mlp.output[:] = 0

with model.trace("One two", remote=True):
    edited = model.lm_head.output[0, -1].argmax().item().save()
model.clear_edits()
with model.trace("One two", remote=True):
    clean = model.lm_head.output[0, -1].argmax().item().save()
with model.trace("One two"):  # on your machine, after the edits were cleared
    local = model.lm_head.output[0, -1].argmax().item().save()
print(edited, clean, local)
"""


@pytest.mark.parametrize("family", ["llama"])  # (the rule reads the script, not the model)
def test_clearing_the_models_edits_between_traces_stays_on_your_machine(family):
    result, report = optimized_and_verified(EDITS_CLEARED_BETWEEN, family)
    assert "model.clear_edits()" in result.code.split("with model.trace")[1], result.code  # between the traces
    assert report.after.requests == 2

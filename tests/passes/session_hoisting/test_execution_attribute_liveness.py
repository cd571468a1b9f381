"""Execution checks for what methods store on `self` inside a session.

A class-based experiment keeps the clean run's hidden states on `self` for the patch
runs that follow. In one session the methods run on the server's copy of the object:
what they store there comes back to your object only when code may read it after the
session; when only methods the session itself runs read it, it stays on the server and
is not downloaded. Each script runs on a tiny model of each family: the original
locally, the original and the optimized script through the NDIF emulation; stdout and
the values the script reads must match.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

PATCHING = '''
    import torch
    from nnsight import LanguageModel


    class Patching:
        def __init__(self, model, clean, corrupt):
            self.model = model
            self.clean, self.corrupt = clean, corrupt

        def run_clean(self):
            with self.model.trace(self.clean, remote=True):
                hidden = torch.stack([SELFLAYERS[i].output for i in range(2)]).save()
                top = self.model.lm_head.output[0, -1].argmax().item().save()
            self.clean_hidden = hidden
            return top

        def patch(self, layer):
            vec = self.clean_hidden[layer, 0, -1]
            with self.model.trace(self.corrupt, remote=True):
                SELFLAYERS[layer].output[0, -1] = vec
                top = self.model.lm_head.output[0, -1].argmax().item().save()
            return top

        def sweep(self):
            clean_top = self.run_clean()
            tops = []
            for layer in range(2):
                tops.append(self.patch(layer))
            return clean_top, tops


    model = LanguageModel("REPO")
    experiment = Patching(model, "the cat sat on the", "one two three four")
    print(experiment.sweep())
'''


@both
def test_what_only_the_sessions_methods_read_stays_on_the_server(family):
    result, report = optimized_and_verified(PATCHING, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "self.clean_hidden = _ndif" not in result.code, result.code
    # read after the session, the hidden states come back: what the first run does not download
    kept, kept_report = optimized_and_verified(PATCHING + "    print(tuple(experiment.clean_hidden.shape))\n", family)
    assert kept_report.after.requests == 1, kept_report.to_text() + kept.code
    assert "self.clean_hidden = _ndif" in kept.code, kept.code
    assert report.after.download_bytes < kept_report.after.download_bytes, (report.to_text(), kept_report.to_text())


@both
def test_a_method_called_after_the_session_keeps_what_it_reads_coming_back(family):
    # `patch` runs again after the sweep, on your machine: it reads `self.clean_hidden`
    result, report = optimized_and_verified(PATCHING + "    print(experiment.patch(1))\n", family)
    assert "self.clean_hidden = _ndif" in result.code, result.code

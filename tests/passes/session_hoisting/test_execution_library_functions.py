"""A library's functions: nothing in the file calls them, so their callers (in other files) set
their `remote` flag. The default of the parameter is only what a caller that leaves it out
gets, so the flag is of unknown value: the session takes the same flag, and the loop is
bundled for callers that pass `remote=True` and runs as before for those that do not.

Two functions with a local list of the same name (`probs_l`) filled in a remote trace are
two lists: each is carried into its own trace (accumulator-relocation), not refused as
"filled by other remote blocks".

The file is optimized as a library (without a caller); the test then calls the functions
both ways, from the original and from the optimized library, and compares every result.
"""

from __future__ import annotations

from execution import both, script, verified_sources

from ndif_opt import Status, optimize

LIBRARY = '''
    import torch
    from nnsight import LanguageModel


    def lens(model, prompt, remote=False):
        """The answer's probability at the last position, through three layers."""
        probs_l = []
        for layer in LAYERS[:3]:
            with model.trace(prompt, remote=remote):
                probs_l.append(model.lm_head.output[0, -1].softmax(-1).max().save())
        return torch.stack(probs_l)


    def norms(model, prompt, remote=False):
        probs_l = []
        with model.trace(prompt, remote=remote):
            for layer in LAYERS[:2]:
                probs_l.append(layer.output[0, -1].norm())
        return probs_l
'''

CALLERS = '''

model = LanguageModel("REPO")
remote_lens = lens(model, "The Eiffel Tower is in", remote=True).tolist()
local_lens = lens(model, "The Eiffel Tower is in").tolist()
remote_norms = [float(n) for n in norms(model, "The cat sat on the", remote=True)]
print(remote_lens, local_lens, remote_norms)
'''


@both
def test_a_library_function_is_bundled_under_its_callers_flag(family):
    library = script(LIBRARY, family)
    result = optimize(library)
    assert "session(remote=remote)" in result.code, result.code
    fixed = {f.pass_id for f in result.findings if f.status is Status.APPLIED}
    assert {"session-hoisting", "accumulator-relocation"} <= fixed, result.findings
    callers = script(CALLERS, family)
    report = verified_sources(library + callers, result.code + callers, filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + result.code
    # as written, the lists stay empty on NDIF (`torch.stack` of nothing fails after 3 requests)
    assert report.original_remote_differs, report.to_text()
    assert report.after.requests == 2, report.to_text()  # the lens's three traces, one session

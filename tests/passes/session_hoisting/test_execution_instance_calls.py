"""Methods called on an instance of a class of the file (`ablation.top_logit(...)`, the
instance made in `main()`), each call a remote trace: the bill counts every call, and a
loop of them is one session, the method called with `remote=False` on the same instance.
A method that stores on its instance stays out of a session, with a finding that says so.

Each script is our own, in the shape a new user wrote (issue "Reach on unseen code"); the
rewritten ones run on tiny GPT-2 and Llama models (the original locally, the original and
the optimized script through verify's emulation of NDIF) and must give equal results.
"""

from __future__ import annotations

from execution import both, optimized_and_verified, script

from ndif_opt import optimize
from ndif_opt.types import Status

# the instance is a local of `main()`: before, `ablation.top_logit(...)` was no call the
# analysis knew (only a module-level instance was), so the bill counted none of it and the
# loop got no finding
INSTANCE_IN_MAIN = '''
    from nnsight import LanguageModel


    class Ablation:
        def __init__(self, model, remote=True):
            self.model = model
            self.remote = remote

        def top_logit(self, prompt, layer=None):
            with self.model.trace(prompt, remote=self.remote):
                if layer is not None:
                    SELFLAYERS[layer].output[:] *= 0.5
                top = self.model.lm_head.output[0, -1].max().save()
            return round(top.item(), 4)


    def main():
        model = LanguageModel("REPO")
        ablation = Ablation(model)
        clean = ablation.top_logit("The Eiffel Tower is in")
        print("clean", clean)
        rows = []
        for layer in range(2):
            rows.append((layer, round(clean - ablation.top_logit("The Eiffel Tower is in", layer), 4)))
        return rows


    if __name__ == "__main__":
        rows = main()
'''


@both
def test_a_loop_of_method_calls_on_an_instance_made_in_main_is_one_session(family):
    result, report = optimized_and_verified(INSTANCE_IN_MAIN, family)
    # the bill is what runs: the clean call and the two in the loop
    assert result.costs[0].before.requests == report.before.requests == 3, report.to_text()
    assert result.costs[-1].after.requests == report.after.requests == 1, report.to_text() + result.code
    assert "with ablation.model.session(remote=ablation.remote):" in result.code, result.code
    (hoisted,) = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "3 requests → 1" in hoisted.message and "`ablation.top_logit`" in hoisted.message, hoisted.message


# a method that stores what its trace saved on its instance: in a session the store would
# change the server's copy of the instance, and the client's would keep its old value
STORES_ON_THE_INSTANCE = '''
    from nnsight import LanguageModel


    class Probe:
        def __init__(self, model):
            self.model = model
            self.last = None

        def read(self, prompt):
            with self.model.trace(prompt, remote=True):
                norm = SELFLAYERS[0].output[0, -1].norm().save()
            self.last = norm


    def main():
        probe = Probe(LanguageModel("REPO"))
        norms = []
        for prompt in ["The sky is", "Snow is", "Grass is"]:
            probe.read(prompt)
            norms.append(round(probe.last.item(), 4))
        print(norms)


    main()
'''


def test_a_method_that_stores_on_its_instance_is_left_with_one_finding_naming_the_store():
    result = optimize(script(STORES_ON_THE_INSTANCE, "gpt2"))
    assert "session(" not in result.code
    assert result.costs[0].before.requests == 3
    hoisted = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert len(hoisted) == 1 and hoisted[0].status is Status.SKIPPED, [f.message for f in hoisted]
    assert "`probe.read` stores `self.last` on `probe`" in hoisted[0].reason, hoisted[0].reason


# a method with a loop of traces, called twice by another method of the class: the second
# becomes one session calling the first with `remote=False`, and the first is rewritten
# whole (a flag parameter). The first was met before the second, and its own session,
# planned then lost with its body, kept its finding: two findings on one loop, the second
# quoting the flag ndif-opt wrote (`remote and self.remote`)
METHOD_CALLED_BY_A_METHOD = '''
    from nnsight import LanguageModel


    class Contrast:
        def __init__(self, model, remote=True):
            self.model = model
            self.remote = remote

        def mean_norm(self, prompts):
            norms = []
            for p in prompts:
                with self.model.trace(p, remote=self.remote):
                    norm = SELFLAYERS[0].output[0, -1].norm().save()
                norms.append(norm.item())
            return sum(norms) / len(norms)

        def difference(self, pos, neg):
            self.value = self.mean_norm(pos) - self.mean_norm(neg)
            print(f"difference: {self.value:.3f}")


    model = LanguageModel("REPO")
    contrast = Contrast(model)
    contrast.difference(["I love it", "A great day"], ["I hate it", "A sad day"])
    value = round(contrast.value, 4)
'''


@both
def test_a_method_a_session_calls_gets_one_finding_for_its_loop(family):
    result, report = optimized_and_verified(METHOD_CALLED_BY_A_METHOD, family)
    assert report.before.requests == 4 and report.after.requests == 1, report.to_text() + result.code
    hoisted = [f for f in result.findings if f.pass_id == "session-hoisting"]
    lines = [f.range.start.line for f in hoisted]
    assert len(lines) == len(set(lines)), [f.message for f in hoisted]
    assert not any("remote and self.remote" in f.message for f in hoisted), [f.message for f in hoisted]
    # the table falls by what the findings claim: 4 → 1, all of it the calling session's
    assert any("4 requests → 1" in f.message for f in hoisted), [f.message for f in hoisted]


# a plain method of a class of the file that changes its object (`self.rows.append(...)`),
# called in a loop of remote traces: the session ran it on the server's copy of `rec`, and
# the script printed `[]` (verify: MISMATCH); it is code of your machine, replayed after
RECORDED_BY_A_METHOD = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Recorder:
        def __init__(self):
            self.rows = []
            self.calls = 0

        def record(self, prompt, value):
            self._count()
            self.rows.append((prompt, round(value, 4)))

        def _count(self):
            self.calls += 1


    rec = Recorder()
    for p in ["The cat sat on the", "A dog ran to the"]:
        with model.trace(p, remote=True):
            top = model.lm_head.output[0, -1].max().save()
        rec.record(p, top.item())
    print(rec.rows, rec.calls)
'''


@both
def test_a_method_that_changes_its_object_runs_on_your_machine(family):
    result, report = optimized_and_verified(RECORDED_BY_A_METHOD, family)
    assert report.before.requests == 2 and report.after.requests == 1, report.to_text() + result.code
    assert " in _ndif_rows" in result.code and "rec.record(" in result.code.split(" in _ndif_rows")[-1], \
        result.code


# the same change one call deeper, and a method that prints: both run on your machine
METHOD_THAT_PRINTS = RECORDED_BY_A_METHOD.replace(
    "print(rec.rows, rec.calls)", "rec.show()").replace(
    "        def _count(self):", "        def show(self):\n            print(self.rows, self.calls)\n\n"
    "        def _count(self):")


@both
def test_a_method_that_prints_runs_on_your_machine(family):
    result, report = optimized_and_verified(METHOD_THAT_PRINTS.replace(
        "        rec.record(p, top.item())", "        rec.show()\n        rec.record(p, top.item())"), family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "rec.show()" in result.code.split(" in _ndif_rows")[-1], result.code


# an object of a class of the file called (`scorer(p)` runs `__call__`, a remote trace):
# refused as "a callable that holds objects of your machine", where `scorer.score(p)` was
# hoisted; now the same: the session is the instance's model's
CALLED_INSTANCE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Scorer:
        def __init__(self, model, position):
            self.model = model
            self.position = position

        def __call__(self, prompt):
            with self.model.trace(prompt, remote=True):
                top = self.model.lm_head.output[0, self.position].max().save()
            return round(top.item(), 4)


    scorer = Scorer(model, -1)
    scores = []
    for p in ["The cat sat on the", "A dog ran to the", "Birds fly over the"]:
        scores.append(scorer(p))
    print(scores)
'''


@both
def test_a_called_instance_is_hoisted_as_its_method(family):
    result, report = optimized_and_verified(CALLED_INSTANCE, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert "with scorer.model.session(remote=True):" in result.code, result.code


# a called instance whose `__call__` changes the object: it runs on your machine
CALLED_INSTANCE_THAT_COUNTS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Tally:
        def __init__(self):
            self.values = []

        def __call__(self, value):
            self.values.append(round(value, 4))


    tally = Tally()
    for p in ["The cat sat on the", "A dog ran to the"]:
        with model.trace(p, remote=True):
            top = model.lm_head.output[0, -1].max().save()
        tally(top.item())
    print(tally.values)
'''


@both
def test_a_called_instance_that_changes_its_object_runs_on_your_machine(family):
    result, report = optimized_and_verified(CALLED_INSTANCE_THAT_COUNTS, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "tally(" in result.code.split(" in _ndif_rows")[-1], result.code


# a method that changes its object runs on your machine; another method that reads the
# object ran in the session, on the server's copy, which the first never changed: the
# scaled values were wrong (verify: MISMATCH). The split now knows what a method changes.
CHANGED_BY_ONE_METHOD_READ_BY_ANOTHER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class Scaler:
        def __init__(self):
            self.k = 1.0

        def scale(self, v):
            return v * self.k

        def bump(self):
            self.k *= 2


    s = Scaler()
    out = []
    for p in ["The cat sat on the", "A dog ran to the"]:
        with model.trace(p, remote=True):
            top = model.lm_head.output[0, -1].max().save()
        s.bump()
        out.append(round(s.scale(top.item()), 4))
    print(out)
'''


@both
def test_a_method_reading_what_another_changes_stays_with_it(family):
    result, report = optimized_and_verified(CHANGED_BY_ONE_METHOD_READ_BY_ANOTHER, family)
    hoisting = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert report.after.requests == 2 and "session(" not in result.code, result.code
    assert any("`s`" in (f.reason or f.message) for f in hoisting), [(f.message, f.reason) for f in hoisting]

"""An object made of a function the script defines holds it (`defaultdict(bucket)`,
`defaultdict(lambda: [])`, `functools.partial(score, 2)`), and a member of an enum the script
defines is an instance of its class (`Mode.ZERO`, `for mode in Mode`, `{s: [] for s in Split}`).
Such a value cannot come back from NDIF (the server's `__main__` is not the script's: `Can't
pickle <function bucket>`), so a session may not save it: the dict stays on your machine and
the session records what fills it, or the loop stays as it is, with the reason. A builtin's
result holds no function it was given (`sorted(xs, key=f)`): that still travels. GPT-2 and
Llama (one family a test: the rule reads the script), original and rewrite through verify's
emulation of NDIF (one process: it cannot see a pickling error of the wire itself, so the
tests also read what the session saves)."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import optimized_and_verified  # noqa: E402

FACTORY = """\
from collections import defaultdict
from nnsight import LanguageModel
model = LanguageModel("REPO")


def bucket():
    return []


results = defaultdict(bucket)
for prompt in ["One two", "Three four"]:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].max().save()
    results[prompt].append(top.item())
print(dict(results))
"""

SORTED_BY_A_FUNCTION = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")


def length(text):
    return len(text)


ordered = sorted(["One two three", "Four"], key=length)
tops = {}
for prompt in ordered:
    with model.trace(prompt, remote=True):
        tops[prompt] = model.lm_head.output[0, -1].argmax().save()
print({p: int(t) for p, t in tops.items()})
"""


ENUM_KEYS = """\
from enum import Enum
from nnsight import LanguageModel
model = LanguageModel("REPO")


class Mode(Enum):
    CLEAN = "clean"
    ZERO = "zero"


out = {}
for mode in Mode:
    with model.trace("One two", remote=True):
        if mode is Mode.ZERO:
            LAYERS[0].mlp.output[:] = 0
        top = model.lm_head.output[0, -1].max().save()
    out[mode] = top.item()
print({m.value: round(v, 4) for m, v in out.items()})
"""

ENUM_PREFILLED = """\
from enum import Enum
from nnsight import LanguageModel
model = LanguageModel("REPO")


class Split(Enum):
    TRAIN = "train"
    TEST = "test"


DATA = {Split.TRAIN: ["One two", "Three four"], Split.TEST: ["Five six", "Seven eight"]}
scores = {s: [] for s in Split}
for split, prompts in DATA.items():
    for prompt in prompts:
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].max().save()
        scores[split].append(top.item())
print({s.value: len(v) for s, v in scores.items()})
"""


# (one family each: the rule reads the script, not the model; the file covers both)
@pytest.mark.parametrize("family, factory", [("gpt2", "bucket"), ("llama", "lambda: []")],
                         ids=["gpt2-function", "llama-lambda"])
def test_a_dict_made_with_a_factory_of_the_script_is_not_sent_back(family, factory):
    result, report = optimized_and_verified(FACTORY.replace("defaultdict(bucket)", f"defaultdict({factory})"),
                                            family)
    assert "save(results)" not in result.code, result.code  # it stays on your machine
    assert report.after.requests == 1, result.code


@pytest.mark.parametrize("family, template, name", [("gpt2", ENUM_KEYS, "out"), ("llama", ENUM_PREFILLED, "scores")],
                         ids=["gpt2-members-as-keys", "llama-dict-of-members"])
def test_members_of_an_enum_of_the_script_are_not_sent_back(family, template, name):
    result, _report = optimized_and_verified(template, family)
    assert f"save({name})" not in result.code and f"{name} = list().save()" not in result.code, result.code
    assert not any("split" in line and "_ndif_row" in line and "append" in line for line in result.code.splitlines()), \
        result.code  # (no record of a member either)


@pytest.mark.parametrize("family", ["gpt2"])
def test_a_list_sorted_by_a_function_of_the_script_still_travels(family):
    result, report = optimized_and_verified(SORTED_BY_A_FUNCTION, family)
    assert report.after.requests == 1, result.code

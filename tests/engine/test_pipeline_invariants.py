"""What the pipeline refuses of any pass, whatever the pass: a step that rewrites code the
same pass wrote in an earlier round (a pass that fires again on its own output grows the
code round after round: a loop's replay that still held its remote trace was wrapped in a
session of its own, and that session's replay again, the code doubling each round), and a
step that leaves the script sending more requests than as written (no fix at all).

The passes here are written for the test, each doing one of those things; they run
through the pipeline as the registry's passes do.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.engine import pipeline
from ndif_opt.options import Options
from ndif_opt.passes.base import Pass
from ndif_opt.types import Status

SOURCE = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    out = model.lm_head.output.save()
total = 1
'''


class Rewrap(Pass):
    """rewrap: wraps the last statement in a loop of its own, every time it runs."""

    id = "rewrap"

    def run(self, module, facts, context):
        last = module.body[-1]
        context.applied(last, "wrapped it")
        context.introduced.add("_wrap")
        loop = cst.parse_statement("for _wrap in range(1):\n    pass\n")
        return module.with_changes(body=[*module.body[:-1], loop.with_changes(body=loop.body.with_changes(body=[last]))])


class MoreRequests(Pass):
    """more-requests: adds a remote trace after the last statement."""

    id = "more-requests"

    def run(self, module, facts, context):
        context.applied(module.body[-1], "added a trace")
        extra = cst.parse_statement('with model.trace("again", remote=True):\n    again = model.lm_head.output.save()\n')
        return module.with_changes(body=[*module.body, extra])


def test_a_pass_that_fires_again_on_its_own_output_is_stopped():
    result = pipeline._run_module(SOURCE, Options(), passes=[Rewrap()])
    assert result.code.count("for _wrap in range(1):") == 1, result.code  # the first round's, once
    refused = [f for f in result.findings if f.status is Status.SKIPPED]
    assert refused and "would rewrite code it wrote itself" in refused[0].reason, result.findings
    assert "`_wrap`" in refused[0].reason


def test_a_step_that_sends_more_requests_than_the_script_as_written_is_not_taken():
    result = pipeline._run_module(SOURCE, Options(), passes=[MoreRequests()])
    assert result.code == SOURCE
    assert not [f for f in result.findings if f.status is Status.APPLIED], result.findings
    refused = [f for f in result.findings if f.status is Status.SKIPPED]
    assert refused and "more requests than as written (1 → 2)" in refused[0].reason, refused
    assert result.costs[0].before.requests == result.costs[-1].after.requests == 1

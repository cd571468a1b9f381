"""migrate-api: rewrite code written for the pre-0.5 nnsight API (and transformers < 5).

## What it does
Opt-in: runs only with `--migrate` (or `Options(migrate=True)`, or when selected
explicitly with `--select migrate-api`), first in the pipeline, so the other passes
see nnsight 0.5+ code. It rewrites

- `x.value` on a value bound to `.save()` (or collected from saved values) → `x`;
- `nnsight.list()` / `nnsight.dict()` → `list()` / `dict()`, saved with `.save()` when
  the client reads the container after its block; `nnsight.apply(f, x)` → `f(x)`,
  `nnsight.log(x)` → `print(x)`, `nnsight.int(x)` (and the other builtins) → `int(x)`;
- `layers[i].output[0]` on a decoder layer → `layers[i].output`, in reads
  (`output[0][:, -1]` → `output[:, -1]`) and in interventions (`output[0][:] = v` →
  `output[:] = v`), also through a name or a helper (`out = layer.output; out = out[0]`) —
  where the code shows that `[0]` took the hidden states out of the old tuple: the script
  uses the pre-0.5 API, or a use of the value needs three dimensions (`h[:, -1, :]`,
  `b, s, d = h.shape`). The sites of one function, and those a helper's return links, are
  decided together (ndif_opt/analysis/layer_outputs.py);
- the `scan=` / `validate=` arguments of `.trace()` and `.invoke()` (removed in 0.5);
- `model.next()` in a generate block or one of its invokes → `for _ in tracer.iter[s]:` around
  what reads the model at step `s`, and `for _ in range(K): ...; model.next()` →
  `for _ in tracer.iter[s:s + K]: ...`;
- statements after the last `with tracer.invoke(...)` of a trace that read values of the
  invokes → after the trace, in a session (a session is added around a lone trace).

Without `--migrate` the pass only looks: on a script that uses the pre-0.5 API it
reports where, and the other passes leave the script alone, because their rewrites
(`list().save()`, sessions) are nnsight 0.5+ idioms that would not run on the
version the script was written for.

## Why is this bad?
nnsight 0.5 changed the API: `.save()` returns the value itself, so `x.value` raises
`AttributeError`; `nnsight.list()` and friends are gone; code placed after the invokes
of a trace runs *before* them, so it cannot read their values. And nnsight 0.8 runs
with transformers 5, where a decoder layer returns a tensor instead of a tuple:
`layers[i].output[0]` no longer selects the hidden states but the first batch row —
`[seq, hidden]` instead of `[1, seq, hidden]` — and `output[0][:, -1]` then silently
reads one hidden unit of every position.

## Example
```python
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True, scan=False):
    norms = nnsight.list().save()
    for layer in model.transformer.h:
        norms.append(layer.output[0][:, -1].norm())
    logits = model.lm_head.output.save()
print(norms.value, logits.value[0, -1].argmax())
```

## Use instead
```python
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    norms = list().save()
    for layer in model.transformer.h:
        norms.append(layer.output[:, -1].norm())
    logits = model.lm_head.output.save()
print(norms, logits[0, -1].argmax())
```

## Fix safety
Safe for nnsight 0.5+ with transformers 5. A name a block binds without saving it (a loop's
variable, a temporary) stayed bound after the block before 0.5, which ran the block's Python on
the client; on 0.5+ it does not (reported as not brought back; `verify` lets such a loop
temporary go, and compares every result). All or nothing: when a pre-0.5 script holds an
idiom with no safe rewrite, nothing is rewritten (a half-migrated script runs on no nnsight
release) and each such idiom is reported. `model.next()` in a generate block (or one of its
invokes), alone or ending a `for _ in range(K):` loop, becomes `tracer.iter[...]` at the same
steps (ndif_opt/analysis/generation_steps.py). Not migrated: other `.next()`s (on one module,
under a condition), `nnsight.cond/iter/local`,
`session.iter`, `tracer.cond`, a used `as invoker` target, `output[1]` of a decoder layer,
`.value` on a name that is also bound to something other than a saved value, statements
after invokes that touch the model, and a decoder layer's `output[0]` whose uses do not
show which it means (with transformers 5 it is the first batch row, `[S, D]`, which a
script written for nnsight 0.8 may mean). `output[0]` is looked at only on modules taken
from a list of decoder layers (`layers`, `h`, `layer`, `blocks`); a custom module in such a
list that still returns a tuple would be misread.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.legacy_api import (
    PRE_05_MESSAGE, Legacy, Move, Scan, legacy_summary, names_left_in_blocks, scan, unmigratable,
)
from ndif_opt.analysis.regions import client_objects_filled_remotely
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import reindentable, without_remote
from ndif_opt.wording import tense


class MigrateApi(Pass):
    __doc__ = __doc__

    fix_safety = "safe"
    opt_in = True
    reports_when_off = True  # without --migrate, pre-0.5 code is only reported
    runs_first_once = True

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        found = scan(facts)
        if not found.legacy:
            return module
        if self.report_only:
            self._report(module, facts, found, context)
            return module
        allowed = [item for item in found.legacy if context.allows(_anchor(item), f"{item.what}: old nnsight API")]
        blockers = _blockers(found.legacy, allowed)
        if blockers:
            # a half-migrated script runs on no nnsight: the whole migration, or none of it
            for item in blockers:
                context.skipped(item.place, f"{item.what}: not migrated", item.reason or "its finding is suppressed")
            return module
        if any(item.pre05 for item in allowed) and self._leaves_containers_empty(facts, context):
            return module
        edits: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] = {}
        moves: list[Move] = []
        if any(item.pre05 for item in allowed):
            context.unreturned.update(names_left_in_blocks(facts))
        for item in allowed:
            if item.move is not None:
                moves.append(item.move)
                context.applied(
                    item.node,
                    f"{item.what} {tense('moved', 'would move')} out of the trace"
                    + (" into a new session around it" if item.move.wrap else ", after it in the session")
                    + ": in nnsight 0.5+ code after the invokes runs before them",
                )
            elif item.fix is None:  # (only in a 0.5+ script: a pre-0.5 one would be blocked)
                context.skipped(item.place, f"{item.what}: not migrated", item.reason)
            else:
                edits[id(item.node)] = _then(edits.get(id(item.node)), item.fix)
                context.introduced.update(item.added)
                context.applied(item.place, _applied_message(item))
        if not edits and not moves:
            return module
        return module.visit(_Edit(edits, moves))

    @staticmethod
    def _leaves_containers_empty(facts: Facts, context: Context) -> bool:
        """Would the migrated script leave a container of the client empty (refused, True)?
        nnsight < 0.5 filled a client container in a remote block with the saved values;
        on 0.5+ the block runs on NDIF, and only accumulator-relocation brings the filling
        back: when it is not in the run, or a whole run with the migration left the
        container filled on the server (``context.left_on_server``), nothing is migrated."""
        relocating = context.options.wants("accumulator-relocation")
        filled = [(name, block) for name, block in client_objects_filled_remotely(facts)
                  if not relocating or name in context.left_on_server]
        if not filled:
            return False
        name, block = filled[0]
        if not relocating:
            why = "which accumulator-relocation rewrites: run it with the migration (--select/--ignore leave it out)"
        else:
            why = "and accumulator-relocation does not move it" + (
                f": {context.left_on_server[name].removeprefix('not moved: ')}" if context.left_on_server.get(name) else "")
        context.skipped(
            block.node, f"`{name}`, a container of your machine, is filled inside this remote block: not migrated",
            f"nnsight < 0.5 filled it with the saved values; on 0.5+ the block runs on NDIF and it stays empty on "
            f"your machine, {why}")
        return True

    def _report(self, module: cst.Module, facts: Facts, found: Scan, context: Context) -> None:
        pre05 = [item for item in found.legacy if item.pre05]
        if pre05:
            summary = legacy_summary(facts)
            context.skipped(
                pre05[0].place,
                f"{PRE_05_MESSAGE} ({summary}); ndif-opt left it unchanged",
                "its rewrites are nnsight 0.5+ code; run with --migrate to migrate the script first",
            )
        # one finding per file and meaning, at the first use, naming the others: the same
        # advice on every `output[0]` of a sweep drowned the rest of the report
        layer_outputs = [item for item in found.legacy if item.kind == "layer-output"]
        tuples = [item for item in layer_outputs if item.fix is not None]
        undecided = [item for item in layer_outputs if item.fix is None and item.what.endswith("[0]`")]
        if tuples:
            context.skipped(
                tuples[0].node, _layer_output_message(tuples) + ", and the code reads the hidden states",
                f"{tuples[0].evidence}; run with --migrate to rewrite it to `.output`",
            )
        if undecided:
            context.skipped(
                undecided[0].node, _layer_output_message(undecided),
                f"{undecided[0].reason}: if it means the hidden states, drop the `[0]` (the output is the "
                "hidden states; --migrate leaves it)",
            )


def _then(first: Callable[[cst.CSTNode], cst.CSTNode] | None,
          second: Callable[[cst.CSTNode], cst.CSTNode]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """Two rewrites of one node (`scan=` removed from a generate call that gets
    `max_new_tokens=1`), one after the other."""
    if first is None:
        return second
    return lambda updated: second(first(updated))


def _layer_output_message(items: list[Legacy]) -> str:
    # (no line numbers: in a notebook they would be the joined cells', not yours)
    more = f" (and {len(items) - 1} more like it)" if len(items) > 1 else ""
    return (f"{items[0].what}{more}: with transformers >= 5 (nnsight 0.8) a decoder layer's output is a tensor, "
            "so `[0]` selects the first batch row, not the hidden states")


def _anchor(item: Legacy) -> cst.CSTNode:
    """Where an item's suppression comment is looked for (a move: at its trace)."""
    return item.move.trace.node if item.move is not None else item.place


def _blockers(legacy: list[Legacy], allowed: list[Legacy]) -> list[Legacy]:
    """What keeps a pre-0.5 script from being migrated whole: each idiom with no safe
    rewrite, or whose finding is suppressed. A 0.5+ script has none (its rewrites are
    independent: a layer output's group is decided as a whole, see layer_outputs)."""
    if not any(item.pre05 for item in legacy):
        return []
    kept = {id(item) for item in allowed}
    unsafe = {id(item) for item in unmigratable(legacy)}
    return [item for item in legacy if id(item) not in kept or id(item) in unsafe]


def _applied_message(item: Legacy) -> str:
    # (lazy: only the item's own kind builds its replacement)
    messages = {
        "value": lambda: f"{item.what} {_becomes()} the saved value itself (nnsight 0.5+ `.save()` returns it)",
        "builtin": lambda: f"{item.what} {_becomes()} {_replacement(item)} (nnsight 0.5+ traces builtins directly)",
        "import": lambda: f"{item.what}: {tense('removed', 'would be removed')} from the import (gone in nnsight 0.5+)",
        "layer-output": lambda: f"{item.what} {_becomes()} {_replacement(item)} ({item.evidence}; a decoder layer "
                                "returns a tensor with transformers >= 5)",
        "old-kwarg": lambda: f"{item.what}: {tense('removed', 'would be removed')} (nnsight 0.5+ does not use it)",
        "next": lambda: f"{item.what}: the steps of generation {tense('are', 'would be')} chosen with "
                        "`tracer.iter[...]` (nnsight 0.5+ has no `.next()`)",
        "generation-length": lambda: f"{item.what}: `max_new_tokens=1` {tense('written', 'would be written')} "
                                     "out (nnsight < 0.5 generated one new token unless told otherwise; 0.5+ "
                                     "generates up to the model's generation config)",
    }
    return messages.get(item.kind, lambda: item.what)()


def _becomes() -> str:
    """The arrow of a replacement done, the words of one proposed."""
    return tense("→", "would become")


def _replacement(item: Legacy) -> str:
    new = item.fix(item.node)
    return "removed" if isinstance(new, cst.RemovalSentinel) else f"`{code_of(new).strip()}`"


# ---------------------------------------------------------------------------------------
# Applying the edits
# ---------------------------------------------------------------------------------------


class _Edit(cst.CSTTransformer):
    """Expression edits by node identity, and statements after invokes moved out of
    their trace, in one walk (``on_leave`` sees the original node and the updated one)."""

    def __init__(self, edits: dict[int, Callable[[cst.CSTNode], cst.CSTNode]], moves: list[Move]) -> None:
        self.edits = edits
        self.moves: dict[int, list[Move]] = {}
        for move in moves:
            self.moves.setdefault(id(move.trace.stmt.suite), []).append(move)

    def on_leave(self, original, updated):
        fix = self.edits.get(id(original))
        if fix is not None:
            return fix(updated)
        if isinstance(original, (cst.Module, cst.IndentedBlock)) and id(original) in self.moves:
            return self._move(updated, self.moves[id(original)])
        return updated

    def _move(self, updated, moves: list[Move]):
        body = list(updated.body)
        for move in sorted(moves, key=lambda m: m.trace.stmt.index, reverse=True):
            index = move.trace.stmt.index
            trace = body[index]
            inner = list(trace.body.body)
            kept, moved = inner[: move.start], inner[move.start :]
            new_trace = trace.with_changes(body=trace.body.with_changes(body=kept))
            if not move.wrap:
                body[index : index + 1] = [new_trace, *moved]
                continue
            call = new_trace.items[0].item
            flag = next(
                (a.value for a in call.args if a.keyword is not None and a.keyword.value == "remote"), None
            )
            new_trace = new_trace.with_changes(
                items=[new_trace.items[0].with_changes(item=without_remote(call))], leading_lines=[]
            )
            flag_code = "" if flag is None else f"remote={code_of(flag)}"
            header = cst.parse_statement(f"with {move.trace.model}.session({flag_code}):\n    pass\n")
            body[index : index + 1] = [
                header.with_changes(
                    body=cst.IndentedBlock(body=[reindentable(new_trace), *[reindentable(s) for s in moved]]),
                    leading_lines=trace.leading_lines,
                )
            ]
        return updated.with_changes(body=body)


MigrateApi.cases = (
    Case(
        name="saved values read with .value",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
    hiddens = [model.transformer.h[i].mlp.output.save() for i in range(3)]
top = logits.value[0, -1].argmax().item()
sizes = [h.value.shape for h in hiddens]
print(f"{top} {logits.value.shape}", hiddens[0].value.norm())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
    hiddens = [model.transformer.h[i].mlp.output.save() for i in range(3)]
top = logits[0, -1].argmax().item()
sizes = [h.shape for h in hiddens]
print(f"{top} {logits.shape}", hiddens[0].norm())
""",
    ),
    Case(
        name="nnsight builtins become plain Python",
        before="""\
import nnsight
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = nnsight.list().save()
    seen = nnsight.dict()
    with model.trace("hello"):
        hidden = model.transformer.h[0].mlp.output
        nnsight.log(hidden.shape)
        norms.append(nnsight.apply(torch.norm, hidden))
        seen["first"] = nnsight.int(hidden.shape[1])
print(norms.value, seen)
""",
        after="""\
import nnsight
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    seen = dict().save()
    with model.trace("hello"):
        hidden = model.transformer.h[0].mlp.output
        print(hidden.shape)
        norms.append(torch.norm(hidden))
        seen["first"] = int(hidden.shape[1])
print(norms, seen)
""",
    ),
    Case(
        name="a session's apply and log",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True) as session:
    tops = session.apply(list).save()
    with model.trace("hello"):
        tops.append(model.lm_head.output[0, -1].argmax())
    session.log("done", len(tops))
print(tops.value)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True) as session:
    tops = list().save()
    with model.trace("hello"):
        tops.append(model.lm_head.output[0, -1].argmax())
    print("done", len(tops))
print(tops)
""",
    ),
    Case(
        name="a decoder layer's output[0] is its output with transformers 5",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
layers = model.model.layers
with model.trace("The Eiffel Tower is in", remote=True):
    model.model.layers[3].output[0][:] = 0
    layers[4].output[0][:, -1, :] *= 2
    last = model.model.layers[-1].output[0][:, -1].save()
    norms = [layer.output[0].norm().save() for layer in model.model.layers[:2]]
    attn = model.model.layers[0].self_attn.output[0].save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
layers = model.model.layers
with model.trace("The Eiffel Tower is in", remote=True):
    model.model.layers[3].output[:] = 0
    layers[4].output[:, -1, :] *= 2
    last = model.model.layers[-1].output[:, -1].save()
    norms = [layer.output.norm().save() for layer in model.model.layers[:2]]
    attn = model.model.layers[0].self_attn.output[0].save()
""",
    ),
    Case(
        name="the old tuple's hidden states, taken from a saved layer output's value",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    out = model.transformer.h[5].output.save()
hidden = out.value[0]
print(hidden[0, -1].norm())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    out = model.transformer.h[5].output.save()
hidden = out
print(hidden[0, -1].norm())
""",
    ),
    Case(
        name="saved values reached through containers filled by remote traces",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def last_logits(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output[0, -1].save()
    return logits


grid = []
for prompt in ["The Eiffel Tower is in", "The Colosseum is in"]:
    row = []
    with model.trace(prompt, remote=True):
        for layer in model.transformer.h[:2]:
            row.append(layer.mlp.output.norm().save())
    grid.append(row)
norms = [[n.value for n in row] for row in grid]
top = last_logits("hello").value.argmax()
""",
        # selected alone, without accumulator-relocation: `row` would stay empty remotely
        reason="run it with the migration",
    ),
    Case(
        name="a helper's layer output and its caller's [0] are migrated together",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def layer_output(layer):
    return model.transformer.h[layer].output


with model.trace("The Eiffel Tower is in", remote=True):
    first = layer_output(0)[0].save()
    out = layer_output(5)
    out = out[0]
    last = out[:, -1, :].save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def layer_output(layer):
    return model.transformer.h[layer].output


with model.trace("The Eiffel Tower is in", remote=True):
    first = layer_output(0).save()
    out = layer_output(5)
    last = out[:, -1, :].save()
""",
    ),
    Case(
        name="scan and validate arguments are gone",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True, scan=False, validate=False) as tracer:
    with tracer.invoke("hello", scan=True):
        out = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("hello"):
        out = model.lm_head.output.save()
""",
    ),
    Case(
        name="code after the invokes moves after the trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("The Eiffel Tower is in"):
        paris = model.lm_head.output[0, -1]
    with tracer.invoke("The Colosseum is in"):
        rome = model.lm_head.output[0, -1]
    diff = (paris - rome).norm().save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace() as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            paris = model.lm_head.output[0, -1]
        with tracer.invoke("The Colosseum is in"):
            rome = model.lm_head.output[0, -1]
    diff = (paris - rome).norm().save()
""",
    ),
    Case(
        name="nnsight 0.5+ code and other .value attributes are left alone",
        before="""\
import enum
from nnsight import LanguageModel


class Mode(enum.Enum):
    FAST = 1


model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    hidden = model.transformer.h[0].output[:, -1].save()
    attn = model.transformer.h[0].attn.output[0].save()
print(Mode.FAST.value, hidden.shape)
""",
    ),
    Case(
        name="a decoder layer's other outputs",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    cache = model.transformer.h[0].output[1].save()
""",
        reason="returns only its hidden states",
    ),
    Case(
        name="a decoder layer's output[0] that may mean the batch row",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    row = model.model.layers[3].output[0].save()
print(row.shape[0], row[-1].norm())
""",
        reason="nothing in its uses shows whether `[0]`",
    ),
    Case(
        name="removed helpers without an equivalent",
        before="""\
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    out = model.lm_head.output
    with nnsight.cond(out.sum() > 0):
        out[:] = 0
""",
        reason="no direct nnsight 0.5+ equivalent",
    ),
    Case(
        name="a patch across invokes that reads the first invoke's value before a module",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("Paris is the capital of France"):
        source = model.transformer.h[2].output[0][:, -1, :]
    with tracer.invoke("Berlin is the capital of Germany"):
        model.transformer.h[2].output[0][:, -1, :] = source
        top = model.lm_head.output[0, -1].argmax().save()
print(top.value)
""",
        reason="`source` read in an invoke before a module",
    ),
    Case(
        name="a gradient read before `.backward()`, as nnsight 0.4 allowed",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The nurse said", remote=True):
    hidden = model.transformer.h[5].output[0]
    grad = hidden.grad.save()
    model.lm_head.output[0, -1].max().backward()
print(grad.value.norm())
""",
        reason="a gradient read outside `with loss.backward():`",
    ),
    Case(
        name=".value on a name that may not be a saved value where it is read",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    out = model.lm_head.output.save()
if out is None:
    out = Fallback()
print(out.value)
""",
        reason="also bound to values that are not saved",
    ),
    Case(
        name=".value on a name whose last binding before the read is a save",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    probs = model.lm_head.output.softmax(-1)
    probs = probs[0, -1].save()
if probs.value.max() > 0.5:
    probs = None
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    probs = model.lm_head.output.softmax(-1)
    probs = probs[0, -1].save()
if probs.max() > 0.5:
    probs = None
""",
    ),
    Case(
        name="generation stepped with model.next()",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate(max_new_tokens=4, remote=True) as generator:
    with generator.invoke("The weather is"):
        for _ in range(3):
            model.transformer.h[2].output[0][:, -1] *= 2  # steer each new token
            model.next()
        tokens = model.generator.output.save()
    with generator.invoke("The sky is"):
        model.next()
        second = model.lm_head.output.argmax(dim=-1).save()
print(tokens.value, second.value)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate(max_new_tokens=4, remote=True) as generator:
    with generator.invoke("The weather is"):
        for _ in generator.iter[0:3]:
            model.transformer.h[2].output[:, -1] *= 2  # steer each new token
        tokens = model.generator.output.save()
    with generator.invoke("The sky is"):
        for _ in generator.iter[1]:
            second = model.lm_head.output.argmax(dim=-1).save()
print(tokens, second)
""",
    ),
    Case(
        name="a generate block stepped with model.next() gets a name to step with",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=2, remote=True):
    first = model.lm_head.output.argmax(dim=-1).save()
    model.next()
    second = model.lm_head.output.argmax(dim=-1).save()
print(first.value, second.value)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=2, remote=True) as tracer:
    first = model.lm_head.output.argmax(dim=-1).save()
    for _ in tracer.iter[1]:
        second = model.lm_head.output.argmax(dim=-1).save()
print(first, second)
""",
    ),
    Case(
        name="model.next() under a condition is not migrated",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=4, remote=True) as generator:
    for step in range(3):
        if step > 0:
            model.next()
        model.transformer.h[2].output[0][:, -1] *= 2
print(generator.output.value)
""",
        reason="nor the last statement of a `for ... in range(K):` loop",
    ),
    Case(
        name="a generate that does not say how many tokens keeps nnsight 0.4's one",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", remote=True):
    tokens = model.generator.output.save()
print(tokens.value[0, -1])
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", remote=True, max_new_tokens=1):
    tokens = model.generator.output.save()
print(tokens[0, -1])
""",
    ),
    Case(
        name="a generate given keywords no one can tell is not migrated",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def generated(prompt, settings):
    with model.generate(prompt, **settings):
        tokens = model.generator.output.save()
    return tokens.value


print(generated("The weather is", {"remote": True}))
""",
        reason="which keywords `**` passes here cannot be told before running",
    ),
)

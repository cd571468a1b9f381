"""accumulator-relocation: create containers filled in a remote block inside it.

## What it does
Finds a list or dict created on your machine (``[]``, ``list()``, ``{}``, ``dict()``) and
filled inside a remote trace or session (``append``, ``extend``, item assignment,
``+=``). It moves the creation into the block as a saved container
(``results = list().save()``, keeping your name) and drops the now redundant
``.save()`` on the elements.

## Why is this bad?
Only values marked with ``.save()`` come back from NDIF. The block runs on the server
against a *copy* of your list, so the appends happen there and your list stays empty —
silently. This is a correctness bug, not only a slow-down: the script works locally
and returns nothing remotely.

## Example
```python
results = []
with model.trace(prompt, remote=True):
    for layer in model.model.layers:
        results.append(layer.output.save())
```

## Use instead
```python
with model.trace(prompt, remote=True):
    results = list().save()
    for layer in model.model.layers:
        results.append(layer.output)
```

## Fix safety
Safe. Applied only when the container is created empty right before the block (in the
same suite, not used in between) and no other remote block fills it. Otherwise the
finding explains why the list will stay empty and leaves the code alone.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote, module_import_name, opens_invoke
from ndif_opt.analysis.names import collect, local_to
from ndif_opt.analysis.regions import Accumulator, carried_container, client_objects_filled, find_accumulator
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.syntax.rewrite import DropElementSaves, SuitePlan, saved_container, with_module_import
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.wording import tense


class AccumulatorRelocation(Pass):
    __doc__ = __doc__
    fix_safety = "safe"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        self.needs_nnsight_import = False
        remote_blocks = [
            b for b in facts.blocks if b.parent is None and b.remote.state is not Remote.NO
        ]
        for block in remote_blocks:
            found = self._accumulators(block, remote_blocks, facts, context)
            if found:
                self._plan(block, found, plan, context, facts)
        if not plan:
            return module
        module = plan.apply(module, facts)
        return with_module_import(module, "nnsight") if self.needs_nnsight_import else module

    def _accumulators(self, block: Block, remote_blocks, facts: Facts, context: Context):
        found: list[Accumulator] = []
        for name, node in client_objects_filled(block, facts).items():
            where = "session" if block.method == "session" else "remote trace"
            bug = (
                f"`{name}` lives on your machine but is filled inside this {where}: "
                f"on NDIF the block changes the server's copy, so `{name}` stays empty here"
            )
            if any(name in other.names.mutates and _same_variable(name, block, other)
                   for other in remote_blocks if other is not block):
                context.skipped(node, bug, f"not moved: other remote blocks also fill `{name}`")
                continue
            late = _filled_after_invokes(block, name)
            if late is not None:
                # moving the list in would not make it come back filled: claim no fix
                context.skipped(
                    late, bug,
                    f"not moved: `{name}` is filled in the trace's own body after its `.invoke` blocks, "
                    "which nnsight 0.5+ runs before them (the invokes' values do not exist yet); "
                    "fill it inside the last invoke, or after the trace",
                )
                continue
            acc, why = find_accumulator(facts, name, block.stmt.suite, block.stmt.index)
            if acc is None:
                # any new container can travel into the block and come back saved
                acc, why = carried_container(facts, name, block.stmt.suite, block.stmt.index + 1)
            if acc is None:
                context.skipped(node, bug, f"not moved: {why}")
                continue
            if context.allows(acc.stmt or node, bug):
                found.append((acc, node))
        return found

    def _plan(self, block: Block, found: list[tuple[Accumulator, cst.CSTNode]], plan: SuitePlan, context,
              facts: Facts) -> None:
        accumulators = [acc for acc, _node in found]
        drop = DropElementSaves({a.name for a in accumulators})
        module_name = module_import_name(facts, "nnsight")
        created = [
            saved_container(a.name, a.kind, a.stmt) if a.kind != "carried"
            else cst.parse_statement(f"{a.name} = {module_name or 'nnsight'}.save({a.name})\n")
            for a in accumulators
        ]
        if not module_name and any(a.kind == "carried" for a in accumulators):
            self.needs_nnsight_import = True

        def build(stmts):
            moved = [s.visit(drop) for s in stmts]  # drop matches by name, not identity
            context.unreturned |= drop.unsaved_names
            return created + moved

        body = block.node.body
        plan.replace(body, 0, len(body.body), build)
        for acc, node in found:
            if acc.kind == "carried":
                context.applied(
                    block.node,  # (the edit: `name = nnsight.save(name)` opens its body)
                    f"`{acc.name}` {tense('is now', 'would be')} sent into the block and saved there, so the "
                    f"changes the block makes {tense('come', 'would come')} back; "
                    f"{tense('before, it was', 'as written, it is')} left unchanged on your machine when run on NDIF "
                    "(a correctness fix)",
                )
                continue
            plan.remove(block.stmt.suite, acc.index)
            context.applied(
                acc.stmt,
                f"`{acc.name}` {tense('is now', 'would be')} created inside the block as a saved {acc.kind}; "
                f"{tense('before, it stayed', 'as written, it stays')} empty on your machine when run on NDIF "
                "(a correctness fix)",
            )


AccumulatorRelocation.cases = (
    Case(
        name="list filled inside one remote trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = []  # one entry per layer
with model.trace("hello", remote=True):
    for layer in model.transformer.h:
        results.append(layer.output.save())
print(len(results))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    results = list().save()  # one entry per layer
    for layer in model.transformer.h:
        results.append(layer.output)
print(len(results))
""",
    ),
    Case(
        name="dict filled inside a session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
norms = {}
with model.session(remote=True):
    for i in range(2):
        with model.trace("hello"):
            norms[i] = model.transformer.h[i].output.norm().save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = dict().save()
    for i in range(2):
        with model.trace("hello"):
            norms[i] = model.transformer.h[i].output.norm()
""",
    ),
    Case(
        name="container used before the block: it travels into the block and back",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = []
results.append(0)
with model.trace("hello", remote=True):
    results.append(model.lm_head.output.save())
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
results = []
results.append(0)
with model.trace("hello", remote=True):
    results = nnsight.save(results)
    results.append(model.lm_head.output)
""",
    ),
    Case(
        name="container that another name also refers to",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = []
everything = {"results": results}
with model.trace("hello", remote=True):
    results.append(model.lm_head.output.save())
""",
        reason="also reachable through another name",
    ),
    Case(
        name="a module's container filled by a function's block stays (and the reason says where it is made)",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
_cache = {}


def hidden(prompt):
    if prompt not in _cache:
        with model.trace(prompt, remote=True):
            _cache[prompt] = model.lm_head.output.save()
    return _cache[prompt]
""",
        reason="`_cache` is created at module level, outside `hidden`, which fills it",
    ),
    Case(
        name="local trace is fine",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = []
with model.trace("hello"):
    results.append(model.lm_head.output.save())
""",
    ),
)


def _filled_after_invokes(block: Block, name: str) -> cst.CSTNode | None:
    """The statement of the trace body, after an invoke, that fills ``name`` outside any
    invoke; None if there is none."""
    tracer = block.tracer_name
    if tracer is None:
        return None
    seen_invoke = False
    for stmt in block.node.body.body:
        if find_nodes(stmt, lambda n: opens_invoke(n, tracer)):
            seen_invoke = True
        elif seen_invoke and name in collect(stmt).mutates:
            return stmt
    return None


def _same_variable(name: str, block: Block, other: Block) -> bool:
    """Do the two blocks mean one variable by ``name``? Not a local of one function and
    a local (or a global) of another: `probs_l` of two functions are two lists."""
    return local_to(name, block.stmt.function) is local_to(name, other.stmt.function)

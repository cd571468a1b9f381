"""detach-cpu: `.detach().cpu()` before saving a tensor in a remote block.

## What it does
Inserts ``.detach().cpu()`` before ``.save()`` (or inside ``nnsight.save(...)``) when the
saved value is a tensor taken from the model — a module's ``.output``/``.input``, a
slice of it, or tensor arithmetic on such values — in a block that runs on NDIF.

## Why is this bad?
A tensor saved on the server is a CUDA tensor that may carry autograd history; it is
shipped with extra metadata, and a view of a larger tensor can ship the whole
underlying storage. Detaching and moving the (already narrowed) value to the CPU on
the server sends only what you asked for.

## Example
```python
with model.trace(prompt, remote=True):
    hidden = model.model.layers[-1].output[:, -1].save()
```

## Use instead
```python
with model.trace(prompt, remote=True):
    hidden = model.model.layers[-1].output[:, -1].detach().cpu().save()
```

## Fix safety
Safe: values are unchanged. Not applied to Python values (``.item()``, ``.tolist()``),
containers, tuples (``topk``), values that already have ``.cpu()``/``.detach()``/``.to()``,
or when the block later writes to the module the value was read from (a copy on the CPU
would no longer see that in-place change), or when the saved value flows into a
`.backward()` (a detached copy has no autograd history), nor to a name saved (`d = diff.save()`) that is
used after the block or is a result of the script: `diff` names the saved object too, and a
copy would leave it behind (a loop temporary is let go, and the finding says so).
"""

from __future__ import annotations

import functools

import libcst as cst

from ndif_opt.analysis.facts import Facts, Remote
from ndif_opt.analysis.names import collect
from ndif_opt.analysis.regions import intermediates, result_names
from ndif_opt.analysis.scopes import scope_index
from ndif_opt.analysis.tensors import has_detach_cpu, is_tensor
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import method_call
from ndif_opt.syntax.walk import find_nodes, paths_to, transform, walk
from ndif_opt.wording import tense


class DetachCpu(Pass):
    __doc__ = __doc__
    fix_safety = "safe"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        targets: dict[int, cst.Call] = {}
        models = set(facts.models)
        for block in facts.blocks:
            if block.effective_remote is Remote.NO or block.method == "session":
                continue
            tensors: set[str] = set()
            for stmt in block.node.body.body:
                for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
                    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                        continue
                    target = small.targets[0].target
                    value = small.value
                    inner = _saved_inner(value)
                    if inner is not None and is_tensor(inner, models, tensors) and not has_detach_cpu(inner):
                        # (the block's writes, looked for only when a save needs them)
                        if any(w in code_of(inner) for w in _written_envoys(block.node.body)):
                            context.skipped(
                                small, "saved tensor not moved to the CPU",
                                "the block later writes to this module's value in place",
                            )
                        elif type(inner) is cst.Name and (inner.value in result_names(facts) or
                                                          scope_index(facts).read_outside(inner.value, [block.node])):
                            # `d = diff.save()` saves the object `diff` names too: a copy on
                            # the CPU would be saved instead, and `diff` would not come back
                            context.skipped(
                                small, "saved tensor not moved to the CPU",
                                f"`{inner.value}` names the saved object too and is used after the block: "
                                "a copy would leave it behind",
                            )
                        elif type(target) is cst.Name and target.value in facts.once(_autograd_reach):
                            # a detached copy has no autograd history: `.backward()` would raise
                            context.skipped(
                                small, "saved tensor not moved to the CPU",
                                f"`{target.value}` flows into a `.backward()` of the code after the block: a "
                                "detached copy has no autograd history, and `.backward()` would raise",
                            )
                        elif context.allows(small, "saved tensor not moved to the CPU"):
                            targets[id(value)] = value
                            if type(inner) is cst.Name and inner.value in intermediates(facts):
                                context.unreturned.add(inner.value)  # (a loop temporary, let go)
                            context.applied(small, f"{tense('added', 'would add')} `.detach().cpu()` before saving "
                                                   f"`{code_of(inner)}`",
                                            evidence=f"{code_of(inner)}.detach().cpu()")
                    if isinstance(target, cst.Name) and is_tensor(inner if inner is not None else value, models, tensors):
                        tensors.add(target.value)
        if not targets:
            return module
        # rebuild only the nodes above a changed call, not the whole module
        on_path = paths_to(module, lambda node: id(node) in targets)
        return transform(module, _Insert(targets, on_path))


def _autograd_reach(facts: Facts) -> frozenset[str]:
    """Names whose values may flow into autograd (`loss.backward()`, `torch.autograd.grad(
    loss, ...)`), back through the file's assignments (`loss = (score - y) ** 2`)."""
    wanted: set[str] = set()
    for call in find_nodes(facts.module, lambda n: type(n) is cst.Call and type(n.func) is cst.Attribute
                           and n.func.attr.value in ("backward", "grad")):
        target = call.func.value if call.func.attr.value == "backward" else (call.args[0].value if call.args else None)
        if target is not None:
            wanted |= set(collect(target).reads)
    reached, todo = set(), list(wanted)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for _info, value in facts.bindings.get(name, ()):
            todo.extend(collect(value).reads)
    return frozenset(reached)


def _saved_inner(value: cst.BaseExpression) -> cst.BaseExpression | None:
    if not is_save_call(value):
        return None
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value == "save" and not value.args:
        return func.value
    return value.args[0].value


@functools.lru_cache(maxsize=1024)
def _written_envoys(body: cst.CSTNode) -> frozenset[str]:
    """Code of module values assigned to in the block (`layers[3].output`)."""
    # a pure function of the (immutable) block body: the versions of the tree that
    # share the block ask once
    finder = _WrittenEnvoys()
    walk(body, finder)
    return frozenset(finder.written)


class _WrittenEnvoys(cst.CSTVisitor):
    # a class of its own, not one per call: a walk learns a visitor class's methods once
    def __init__(self) -> None:
        self.written: set[str] = set()

    def _target(self, target) -> None:
        while isinstance(target, cst.Subscript):
            target = target.value
        if isinstance(target, cst.Attribute) and target.attr.value in ("output", "input"):
            self.written.add(code_of(target))

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._target(t.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)


def _detached(expr: cst.BaseExpression) -> cst.BaseExpression:
    return method_call(method_call(expr, "detach"), "cpu")


class _Insert(cst.CSTTransformer):
    def __init__(self, targets: dict[int, cst.Call], on_path: set[int]) -> None:
        self.targets = targets
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path and super().on_visit(node)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if id(original) not in self.targets:
            return updated
        func = updated.func
        if isinstance(func, cst.Attribute) and func.attr.value == "save" and not updated.args:
            return updated.with_changes(func=func.with_changes(value=_detached(func.value)))
        first = updated.args[0]
        return updated.with_changes(args=[first.with_changes(value=_detached(first.value)), *updated.args[1:]])


DetachCpu.cases = (
    Case(
        name="layer output slice",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("hello", remote=True):
    hidden = model.model.layers[-1].output[:, -1].save()
    diff = (model.model.layers[2].output - model.model.layers[1].output).save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("hello", remote=True):
    hidden = model.model.layers[-1].output[:, -1].detach().cpu().save()
    diff = (model.model.layers[2].output - model.model.layers[1].output).detach().cpu().save()
""",
    ),
    Case(
        name="python values, containers and detached tensors are left alone",
        before="""\
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    top = model.lm_head.output[0, -1].argmax().item().save()
    acts = list().save()
    done = model.lm_head.output.cpu().save()
    pair = model.lm_head.output[0, -1].topk(5).save()
    out = nnsight.save(model.output)
""",
    ),
    Case(
        name="local traces are left alone",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello"):
    hidden = model.transformer.h[0].output.save()
""",
    ),
    Case(
        name="value later written in place",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    hidden = model.transformer.h[0].output.save()
    model.transformer.h[0].output[:] = 0
""",
        reason="writes to this module",
    ),
)

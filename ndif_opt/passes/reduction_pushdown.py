"""reduction-pushdown: download the reduced value, not the tensor it came from.

## What it does
For every value saved in a remote block, looks at how the code after the request
uses it. When every use reads only a reduced form of it — an index or slice, an
``argmax``/``max``/``topk``/``sum``/``mean``/``norm``, a softmax followed by indexing,
``.item()``, arithmetic with values the server has, a same-file function that NDIF can
run — that reduced form is computed inside the block and saved instead (under a new
name, or under the name of the assignment that computed it), and the full value is no
longer saved. Inside a session, a value that only code in the session reads is not
saved at all: the session's code can read an inner trace's values without it.

## Why is this bad?
Every ``.save()`` is a download. Full logits of a 70B-class model are
``seq × 128,256 × 2`` bytes per prompt; the argmax you take from them is 8 bytes.

## Example
```python
with model.trace(prompt, remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
```

## Use instead
```python
with model.trace(prompt, remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()
```

## Fix safety
Safe: the client reads the same names with the same values. Not applied when any use
needs the full value (it is plotted, written to disk, returned, passed to a function
NDIF cannot run), when the reduction reads a value the client changes after the
request, or when the saved name is bound more than once.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis import Block, Facts, Remote, is_save_call
from ndif_opt.names import collect, collect_all
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.regions import reads_after
from ndif_opt.rewrite import SuitePlan, code_of, unsave

REDUCING_METHODS = frozenset(
    {
        "argmax", "argmin", "max", "min", "topk", "sort", "sum", "mean", "norm", "std",
        "var", "item", "amax", "amin", "logsumexp", "prod", "all", "any", "count_nonzero",
    }
)
KEEPING_METHODS = frozenset(
    {
        "softmax", "log_softmax", "float", "half", "double", "detach", "cpu", "abs", "exp",
        "log", "squeeze", "clone", "contiguous", "sigmoid", "tolist", "indices", "values",
    }
)
TORCH_REDUCERS = frozenset(
    {"torch.argmax", "torch.argmin", "torch.max", "torch.min", "torch.topk", "torch.sum",
     "torch.mean", "torch.norm", "torch.linalg.norm"}
)
TORCH_KEEPERS = frozenset(
    {"torch.softmax", "torch.log_softmax", "torch.nn.functional.softmax",
     "torch.nn.functional.log_softmax", "F.softmax", "F.log_softmax", "torch.exp", "torch.log"}
)


@dataclass
class _Save:
    block: Block
    stmt: cst.SimpleStatementLine  # `x = <expr>.save()` at the block's top level
    name: str


class ReductionPushdown(Pass):
    __doc__ = __doc__
    id = "reduction-pushdown"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        for save in _saves(facts):
            self._unneeded_in_session(save, facts, context, plan)
        return plan.apply(module) if plan else module

    def _unneeded_in_session(self, save: _Save, facts: Facts, context: Context, plan: SuitePlan) -> None:
        """Inside a session, a save that nothing after the session reads is dropped."""
        session = save.block.outermost
        if session is save.block or session.method != "session":
            return
        if save.name in reads_after(facts, session.stmt.suite, session.stmt.index + 1):
            return
        if _bindings_in(session.node.body, save.name) != 1:
            return
        if not context.allows(save.stmt, f"`{save.name}` need not be downloaded"):
            return
        body = save.block.node.body
        index = list(body.body).index(save.stmt)
        plan.replace(body, index, index + 1, lambda stmts, s=save.stmt: [_without_save(s)])
        context.unreturned.add(save.name)
        context.applied(
            save.stmt,
            f"`{save.name}` is no longer downloaded: only code inside the session reads it, "
            "and the session sees it without `.save()`",
        )


def _saves(facts: Facts) -> list[_Save]:
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.effective_remote is Remote.NO:
            continue
        for stmt in block.node.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and is_save_call(small.value)
                and not _is_container(unsave(small.value))
            ):
                found.append(_Save(block, stmt, small.targets[0].target.value))
    return found


def _is_container(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.List, cst.Dict, cst.Tuple, cst.Set)) or (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "dict", "set", "tuple")
    )


def _bindings_in(node: cst.CSTNode, name: str) -> int:
    count = 0

    class Counter(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            pass

        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            nonlocal count
            if name in collect(n.target).binds or (isinstance(n.target, cst.Name) and n.target.value == name):
                count += 1

        def visit_For(self, n: cst.For) -> None:
            nonlocal count
            if isinstance(n.target, cst.Name) and n.target.value == name:
                count += 1

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            nonlocal count
            if isinstance(n.target, cst.Name) and n.target.value == name:
                count += 1

    node.visit(Counter())
    return count


def _without_save(stmt: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    small = stmt.body[0]
    return stmt.with_changes(body=[small.with_changes(value=unsave(small.value))])


ReductionPushdown.cases = (
    Case(
        name="saved value only read inside the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
    ),
    Case(
        name="saved value read after the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
print(logits.shape)
""",
    ),
)

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

import builtins

from ndif_opt.analysis import Block, Facts, Remote, is_save_call, qualify
from ndif_opt.describe import saved_shape
from ndif_opt.names import all_params, collect, collect_all
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.regions import reads_after
from ndif_opt.rewrite import NodeEdits, SuitePlan, code_of, unsave

BUILTIN_NAMES = frozenset(dir(builtins))

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
        if plan:
            return plan.apply(module, facts)
        # one saved value per run: each push changes what the next one sees, and the
        # pipeline runs the passes again until nothing changes
        for save in _saves(facts):
            edits = ChainPushdown(save, facts, context).plan()
            if edits:
                return module.visit(edits)
        return module

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
        full = saved_shape(unsave(save.stmt.body[0].value), save.block, facts)
        context.applied(
            save.stmt,
            f"`{save.name}`{f' ({full})' if full else ''} is no longer downloaded: only code inside "
            "the session reads it, and the session sees it without `.save()`",
        )


class ChainPushdown:
    """Move the reductions client code applies to one saved value into its block."""

    def __init__(self, save: _Save, facts: Facts, context: Context) -> None:
        self.save = save
        self.facts = facts
        self.context = context
        self.request = save.block.outermost
        suite = self.request.stmt.suite
        self.after = list(suite.body[self.request.stmt.index + 1 :])
        self.after_use = collect_all(self.after)
        self.request_use = collect(self.request.node.body)
        self.parents = _parents(self.after)
        self.shipped: set[str] = set()

    def plan(self) -> NodeEdits | None:
        x = self.save.name
        uses = [n for stmt in self.after for n in _name_nodes(stmt, x)]
        if not uses or x in self.after_use.binds:
            return None
        inside = {id(n) for n in _name_nodes(self.request.node, x)}
        used = {id(n) for n in uses}
        if any(id(n) not in inside and id(n) not in used for n in _name_nodes(self.facts.module, x)):
            return None  # read elsewhere too (before the request, in a function, ...)
        chains = []
        for node in uses:
            chain, reduced = self._grow(node)
            if not reduced:
                if chains or any(self._grow(u)[1] for u in uses):
                    self.context.skipped(
                        self.save.stmt,
                        f"`{x}` is still downloaded whole",
                        f"`{code_of(self.parents.get(id(node), node))}` uses it whole, on your machine",
                    )
                return None
            chains.append(chain)
        chains = self._outermost(chains)
        if not self.context.allows(self.save.stmt, f"`{x}` could be reduced on the server"):
            return None
        return self._edits(chains)

    # -- growing a use into the largest reduction the server can compute -----------------
    def _grow(self, node: cst.CSTNode) -> tuple[cst.CSTNode, bool]:
        current, reduced = node, False
        while True:
            parent = self.parents.get(id(current))
            step = self._step(current, parent)
            if step is None:
                return current, reduced
            current, narrows = step
            reduced = reduced or narrows
            if isinstance(current, cst.Call) and _is_scalar_end(current):
                return current, reduced

    def _step(self, current, parent):
        if isinstance(parent, cst.Subscript) and parent.value is current:
            if not all(self._ok(e) for e in parent.slice):
                return None
            return parent, any(_narrows(e) for e in parent.slice)
        if isinstance(parent, cst.Attribute) and parent.value is current:
            call = self.parents.get(id(parent))
            name = parent.attr.value
            if isinstance(call, cst.Call) and call.func is parent:
                if name in REDUCING_METHODS or name in KEEPING_METHODS:
                    if all(self._ok(a.value) for a in call.args):
                        return call, name in REDUCING_METHODS
                return None
            if name in ("T", "mT", "indices", "values"):
                return parent, False
            return None
        if isinstance(parent, cst.Arg):
            call = self.parents.get(id(parent))
            if not isinstance(call, cst.Call) or not all(self._ok(a.value) for a in call.args if a is not parent):
                return None
            path = qualify(call.func, self.facts.imports) or ""
            first = call.args and call.args[0] is parent
            if first and path in TORCH_REDUCERS:
                return call, True
            if first and path in TORCH_KEEPERS:
                return call, False
            name = code_of(call.func)
            if name in self.facts.functions and not self.context.server.function_problems(name):
                return call, True  # a same-file helper NDIF can run: a metric
            module, _, function = path.rpartition(".")
            shipped = self.context.server.shipped_module(module) if module else None
            if shipped is not None and function in shipped.facts.functions and not shipped.function_problems(function):
                self.shipped.add(module)  # the user's module travels with the request
                return call, True
            return None
        if isinstance(parent, cst.BinaryOperation):
            other = parent.right if parent.left is current else parent.left
            return (parent, False) if self._ok(other) else None
        if isinstance(parent, cst.UnaryOperation):
            return parent, False
        if isinstance(parent, cst.Comparison) and all(self._ok(c.comparator) for c in parent.comparisons) and self._ok(parent.left):
            return parent, False
        return None

    def _ok(self, node: cst.CSTNode) -> bool:
        """May ``node`` be evaluated in the block instead, with the same value?"""
        if self.context.server.problems(node):
            return False
        for name in collect(node).reads:
            if name == self.save.name or name in self.save.block.saved_names and name in self._top_level_saves():
                continue
            if name in self.after_use.binds or name in self.after_use.mutates:
                return False  # changed on the client after the request
            if name in self.request_use.binds or name in self.request_use.mutates:
                return False  # the server has its own value
            if name in self.facts.imports or name in self.facts.functions or name in BUILTIN_NAMES:
                continue
            if name not in self.facts.bindings and not _bound_somewhere(self.facts, name):
                return False
        return True

    def _top_level_saves(self) -> set[str]:
        return {s.name for s in _saves(self.facts) if s.block is self.save.block}

    def _outermost(self, chains):
        ids = {id(c) for c in chains}
        kept, seen = [], set()
        for chain in chains:
            node, nested = chain, False
            while id(node) in self.parents:
                node = self.parents[id(node)]
                if id(node) in ids:
                    nested = True
                    break
            if not nested and id(chain) not in seen:
                seen.add(id(chain))
                kept.append(chain)
        return kept

    # -- the rewrite ---------------------------------------------------------------------
    def _edits(self, chains) -> NodeEdits:
        x = self.save.name
        edits = NodeEdits()
        taken = _all_names(self.facts.module) | self.context.options.reserved_names
        added: list[cst.BaseStatement] = []
        by_code: dict[str, str] = {}
        moved = []
        for chain in chains:
            code = code_of(chain)
            if code in by_code:
                edits.replace[id(chain)] = cst.Name(by_code[code])
                continue
            stmt, target = self._whole_assignment(chain)
            if stmt is not None:
                by_code[code] = target
                added.append(_saved_assignment(target, chain, like=stmt))
                edits.remove.add(id(stmt))
                moved.append(target)
                continue
            name = _fresh_name(x, chain, taken)
            taken.add(name)
            self.context.introduced.add(name)
            by_code[code] = name
            added.append(_saved_assignment(name, chain))
            edits.replace[id(chain)] = cst.Name(name)
        edits.append[id(self.save.block.node.body)] = added
        edits.replace[id(self.save.stmt)] = _without_save(self.save.stmt)
        self.context.unreturned.add(x)
        reduced = ", ".join(f"`{c}`" for c in by_code)
        full = saved_shape(unsave(self.save.stmt.body[0].value), self.save.block, self.facts)
        self.context.applied(
            self.save.stmt,
            f"`{x}`{f' ({full})' if full else ''} is no longer downloaded whole: {reduced} "
            "now computed in the block and saved"
            + (f" (as {', '.join(f'`{m}`' for m in moved)})" if moved else "")
            + "".join(
                f"; `{m}` is your module: it is shipped by value with the request because it is "
                "imported before the first remote request (or registered with `nnsight.register`)"
                for m in sorted(self.shipped)
            ),
        )
        return edits

    def _whole_assignment(self, chain):
        """`y = CHAIN` as a top-level statement after the request, movable as a whole."""
        for index, stmt in enumerate(self.after):
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            if not (isinstance(small, cst.Assign) and small.value is chain and len(small.targets) == 1):
                continue
            target = small.targets[0].target
            if not isinstance(target, cst.Name):
                return None, None
            y = target.value
            earlier = collect_all(self.after[:index])
            if y in earlier.reads or y in earlier.binds or y in self.request_use.reads or y in self.request_use.binds:
                return None, None
            if y in collect_all(self.after[index + 1 :]).binds or _binding_count(self.facts.module, y) != 1:
                return None, None
            return stmt, y
        return None, None


def _is_scalar_end(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("item", "tolist")


def _narrows(element: cst.SubscriptElement) -> bool:
    index = element.slice
    if isinstance(index, cst.Index):
        return not (isinstance(index.value, cst.Name) and index.value.value == "None") and not isinstance(index.value, cst.Ellipsis)
    if isinstance(index, cst.Slice):
        return index.lower is not None or index.upper is not None
    return False


def _parents(nodes) -> dict[int, cst.CSTNode]:
    parents: dict[int, cst.CSTNode] = {}

    class Walker(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: list[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if self.stack:
                parents[id(node)] = self.stack[-1]
            self.stack.append(node)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()

    for node in nodes:
        node.visit(Walker())
    return parents


def _name_nodes(node: cst.CSTNode, name: str) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Finder(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            if n.value == name:
                found.append(n)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            # a function whose parameter or local has the same name has its own variable
            params = {p.name.value for p in all_params(n.params)}
            return name not in params and name not in collect(n.body).binds

        def visit_Lambda(self, n: cst.Lambda) -> bool:
            return name not in {p.name.value for p in all_params(n.params)}

    node.visit(Finder())
    return found


def _all_names(module: cst.Module) -> set[str]:
    use = collect(module)
    return set(use.reads) | set(use.binds)


def _bound_somewhere(facts: Facts, name: str) -> bool:
    return name in collect(facts.module).binds


def _binding_count(module: cst.Module, name: str) -> int:
    return _bindings_in(module, name)


def _fresh_name(base: str, chain: cst.CSTNode, taken: set[str]) -> str:
    suffix = "reduced"
    node = chain
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        suffix = node.func.attr.value
        if suffix in ("item", "tolist") and isinstance(node.func.value, cst.Call) and isinstance(node.func.value.func, cst.Attribute):
            suffix = node.func.value.func.attr.value
    elif isinstance(node, cst.Call):
        suffix = code_of(node.func).split(".")[-1]
    elif isinstance(node, cst.Subscript):
        suffix = "slice"
    elif isinstance(node, cst.BinaryOperation):
        suffix = "diff" if isinstance(node.operator, cst.Subtract) else "value"
    name = f"{base}_{suffix}"
    counter = 2
    while name in taken:
        name = f"{base}_{suffix}{counter}"
        counter += 1
    return name


def _saved_assignment(name: str, chain: cst.BaseExpression, like: cst.SimpleStatementLine | None = None):
    value = chain
    if isinstance(value, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.BooleanOperation)) and not value.lpar:
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    saved = cst.Call(func=cst.Attribute(value=value, attr=cst.Name("save")))
    stmt = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], saved)])
    if like is not None:
        comments = [line for line in like.leading_lines if line.comment is not None]
        stmt = stmt.with_changes(leading_lines=comments, trailing_whitespace=like.trailing_whitespace)
    return stmt


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
    """`x = e.detach().cpu().save()` → `x = e`: a value that is no longer downloaded
    should stay where the server computes with it."""
    small = stmt.body[0]
    value = unsave(small.value)
    if _is_method_call(value, "cpu") and _is_method_call(value.func.value, "detach"):
        value = value.func.value.func.value
    return stmt.with_changes(body=[small.with_changes(value=value)])


def _is_method_call(expr: cst.BaseExpression, name: str) -> bool:
    return (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == name
    )


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
        name="argmax after a standalone remote trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()  # the next token
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()  # the next token
print(top)
""",
    ),
    Case(
        name="several reductions of one value, a logit difference and a helper",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
target, distractor = 5, 7


def entropy(logits):
    probs = torch.softmax(logits, dim=-1)
    return -(probs * probs.log()).sum()


with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
diff = logits[0, -1, target] - logits[0, -1, distractor]
print(logits[0, -1].topk(5).indices.tolist(), entropy(logits[0, -1]).item())
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
target, distractor = 5, 7


def entropy(logits):
    probs = torch.softmax(logits, dim=-1)
    return -(probs * probs.log()).sum()


with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    diff = (logits[0, -1, target] - logits[0, -1, distractor]).save()
    logits_tolist = logits[0, -1].topk(5).indices.tolist().save()
    logits_item = entropy(logits[0, -1]).item().save()
print(logits_tolist, logits_item)
""",
    ),
    Case(
        name="the full value is needed: written to disk",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax()
torch.save(logits, "logits.pt")
""",
        reason="uses it whole",
    ),
    Case(
        name="a library NDIF does not allow stays on the client",
        before="""\
import scipy.special
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    logits = model.lm_head.output.save()
probs = scipy.special.softmax(logits.numpy())
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

"""reduction-pushdown: download the reduced value, not the tensor it came from.

## What it does
For every value saved in a remote block, looks at how the code after the request
uses it. When every use reads only a reduced form of it — an index or slice, an
``argmax``/``max``/``topk``/``sum``/``mean``/``norm``, a softmax followed by indexing,
``.item()`` (or ``float(x)``, ``int(x)``), arithmetic with values the server has, a same-file function that NDIF can
run — that reduced form is computed inside the block and saved instead (under a new
name, or under the name of the assignment that computed it), and the full value is no
longer saved. Inside a session, a value that only code in the session reads is not
saved at all: the session's code can read an inner trace's values without it.

The same holds for the elements of a saved list or dict that a loop of traces fills
(`logits_by_prompt.append(model.lm_head.output)`): when the code after the request reads
every element through one reduction (`[l[0, -1].argmax().item() for l in
logits_by_prompt]`, `for layer, logits in ablated.items(): ...`), each element is reduced
where the block stores it, and the client's loop reads the reduced values (the container
and the loop's variable now hold those). A loop over saved values written out in a list
(`for name, logits in [("clean", clean), ("patched", patched)]`) is treated alike: each
value's reduction is computed and saved in its own block, and the list holds those.

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
request, when the client or the rest of the session changes the saved value in place
(`logits[0, -1] = 0`, `logits.mul_(2)`: the reductions read what it becomes), when
the saved name is bound more than once, or when the client computes a reduction only
sometimes (under an `if`, in a `try` whose handler may catch what it raises, in a loop
or after a `return`): computed in the block it would run every time, and could fail
(an index past a short prompt's end) where the client code does not run it. For the elements of a list or
dict, the container and the loop's variable hold the reduced values after the change:
nothing read them but through these reductions. Not applied when the block fills the container
at more than one place or reads it, when the client reads the elements in different
ways, when no loop over the whole container applies the reduction to every element
unconditionally (with a condition or a jump in front of it the reduction is not known to
work on each element), or when the request changes the stored value in place after
storing it.

Unsafe in a notebook, applied only with ``--unsafe-fixes``, for a value saved outside a
function: the kernel keeps it after the last cell, and a cell added later may read it
(the cells in the file are not all its readers). Without the flag it stays downloaded
and the finding says what dropping it would save.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote, qualify
from ndif_opt.analysis.names import (
    COMPREHENSIONS,
    NameUse,
    collect,
    definite_binds,
    fresh_name,
    name_assignment,
    target_names,
)
from ndif_opt.analysis.regions import reads_after, results_kept
from ndif_opt.analysis.scopes import INDEX_KEY, ScopeIndex, TakenNames, binding_count_in, scope_index, statement_index
from ndif_opt.analysis.vocabulary import FILLING_METHODS
from ndif_opt.cost_model import saved_shape
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.passes.common.guards import CONDITIONAL_EXPRESSIONS, guard_in, guard_words
from ndif_opt.passes.common.records import RECORD_PREFIX, plain_loads
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import NodeEdits, SuitePlan, empty_container_kind, method_call, unsave
from ndif_opt.syntax.walk import all_nodes, find_nodes, transform
from ndif_opt.types import Safety
from ndif_opt.wording import tense

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
SCALAR_BUILTINS = frozenset({"float", "int", "bool"})  # a one-element tensor as a Python number
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
    fix_safety = "safe"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        saves = _saves(facts)
        nested = facts.once("reduction-pushdown:nested-session-saves", lambda: _nested_session_saves(facts))
        for save in saves + nested:
            self._unneeded_in_session(save, facts, context, plan)
        if plan:
            return plan.apply(module, facts)
        # one saved value per run: each push changes what the next one sees, and the
        # pipeline runs the passes again until nothing changes
        for save in saves:
            edits = ChainPushdown(save, facts, context).plan()
            if edits:
                return transform(module, edits)
        # the containers' edits touch nodes of their own: all of them in one run
        edits = _EditsAlongPaths(scope_index(facts).parents)
        for container in _containers(facts):
            ElementPushdown(container, facts, context).plan(edits)
        if edits:
            return transform(module, edits)
        # loops over lists of saved values written out in the code: those that share no
        # saved value, in one run
        taken: set[str] = set()
        for literal in LiteralPushdown.candidates(facts, context):
            names = {save.name for save in literal.saves}
            if not names & taken and literal.plan(edits):
                taken |= names
        if edits:
            return transform(module, edits)
        return module

    def _unneeded_in_session(self, save: _Save, facts: Facts, context: Context, plan: SuitePlan) -> None:
        """Inside a session, a save that nothing after the session reads is dropped."""
        session = save.block.outermost
        if session is save.block or session.method != "session":
            return
        # nothing after the session reads this value: the name is not read there, or the
        # session binds it again for sure before it ends; the session's code reads each
        # value where it is bound, saved or not
        if save.name in reads_after(facts, session.stmt.suite, session.stmt.index + 1) and not any(
            save.name in definite_binds(stmt) for stmt in _later_in_session(save, session)
        ):
            return
        if not context.allows(save.stmt, f"`{save.name}` need not be downloaded"):
            return
        full = saved_shape(unsave(save.stmt.body[0].value), save.block, facts)
        value = f"`{save.name}`{f' ({full})' if full else ''}"
        safety = _letting_go_safety(save, context, facts,
                                lambda: f"{value} need not be downloaded: only code inside the session reads it")
        if safety is None:
            return
        where = facts.statements[id(save.stmt)]
        plan.replace(where.suite, where.index, where.index + 1, lambda stmts, s=save.stmt: [_without_save(s)])
        context.unreturned.add(save.name)
        context.applied(
            save.stmt,
            f"{value} {tense('is no longer', 'would no longer be')} downloaded: only code inside the session reads "
            "it, and the session sees it without `.save()`",
            safety,
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
        self.after_at_top_level = suite is facts.module
        self.shipped: set[str] = set()
        # _grow and _ok are asked again about the same nodes (a use grown twice)
        self._grown: dict[int, tuple[cst.CSTNode, bool]] = {}
        self._movable: dict[int, bool] = {}

    @cached_property
    def index(self) -> "ScopeIndex":
        return scope_index(self.facts)

    @cached_property
    def near(self) -> "ScopeIndex":
        """The index of the statements after a top-level request, enough to answer about
        them (the uses there, their parents, the names they bind): a saved value whose
        uses reduce nothing is let go without indexing the whole module."""
        whole = self.facts.memo.get(INDEX_KEY)
        if whole is not None or not self.after_at_top_level:
            return self.index
        return ScopeIndex(self.facts, self.after)

    @cached_property
    def parents(self) -> dict[int, cst.CSTNode]:
        return self.index.parents

    def _after_use(self, name: str) -> NameUse:
        """``collect_all(self.after)`` as far as ``name`` goes."""
        return self.near.use_naming(name, self.after)

    @cached_property
    def request_use(self) -> NameUse:
        return self.request.names  # collect(self.request.node.body), kept on the block

    def plan(self) -> NodeEdits | None:
        x = self.save.name
        if self.after_at_top_level and not any(x in statement_index(stmt).spelled for stmt in self.after):
            return None  # no use of `x` after the request (see _uses): no index needed
        uses = self._uses()
        if not any(self._grow(node)[1] for node in uses):
            return None  # as below, without a word (no use reduces): no index of the module
        if x in self._after_use(x).binds:
            return None
        if self.request is not self.save.block and not _last_value_in_session(self.save, self.request, self.facts):
            # bound again in the session: the code after it may read another value
            return None
        if self.request is not self.save.block and _changed_in_place_outside(x, self.request, self.save.block):
            return None  # the session changes the value after its block: the reduction would miss it
        if self.index.read_outside(x, [self.request.node, *self.after]):
            return None  # read elsewhere too (before the request, in a function, ...)
        changed = next((node for node in uses if _changed_through(node, self.parents)), None)
        if changed is not None:
            self.context.skipped(self.save.stmt, f"`{x}` is still downloaded whole",
                                 f"`{code_of(_mutating_code(changed, self.parents)).strip()}` changes it in place "
                                 "on your machine, so the reductions read what it becomes")
            return None
        chains = []
        for node in uses:
            chain, reduced = self._grow(node)
            if not reduced:
                if chains or any(self._grow(u)[1] for u in uses):
                    self.context.skipped(
                        self.save.stmt,
                        f"`{x}` is still downloaded whole",
                        f"`{code_of(self.parents.get(id(node), node)).strip()}` uses it whole, on your machine",
                    )
                return None
            chains.append(chain)
        chains = self._outermost(chains)
        guarded = next(((c, g) for c in chains if (g := guard_in(self.after, c)) is not None), None)
        if guarded is not None:
            chain, guard = guarded
            self.context.skipped(
                self.save.stmt, f"`{x}` is still downloaded whole",
                f"`{code_of(chain)}` runs only {guard_words(guard)}: computed in the block, it would run "
                "every time, and could fail where your code does not run it")
            return None
        if not self.context.allows(self.save.stmt, f"`{x}` could be reduced on the server"):
            return None
        safety = _letting_go_safety(self.save, self.context, self.facts, lambda: (
            f"`{x}` need not be downloaded whole: {', '.join(dict.fromkeys(f'`{code_of(c)}`' for c in chains))} "
            "could be computed in the block"), tuple(chains))
        if safety is None:
            return None
        return self._edits(chains, safety)

    def _uses(self) -> list[cst.Name]:
        """The saved name's occurrences after the request, in the order of the code."""
        x = self.save.name
        found = self.near.occurrences_under(x, self.after)
        uses: list[cst.Name] = []
        for stmt in self.after:
            uses.extend(found.get(id(stmt), ()))
        return uses

    # -- growing a use into the largest reduction the server can compute -----------------
    def _grow(self, node: cst.CSTNode) -> tuple[cst.CSTNode, bool]:
        known = self._grown.get(id(node))
        if known is None:
            known = self._grown[id(node)] = self._grow_once(node)
        return known

    def _grow_once(self, node: cst.CSTNode) -> tuple[cst.CSTNode, bool]:
        current, reduced = node, False
        while True:
            parent = self.near.parents.get(id(current))
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
            call = self.near.parents.get(id(parent))
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
            call = self.near.parents.get(id(parent))
            if not isinstance(call, cst.Call) or not all(self._ok(a.value) for a in call.args if a is not parent):
                return None
            path = qualify(call.func, self.facts.imports) or ""
            first = call.args and call.args[0] is parent
            if first and path in TORCH_REDUCERS:
                return call, True
            if first and len(call.args) == 1 and path in SCALAR_BUILTINS and path not in self.facts.functions \
                    and path not in self.facts.bindings:
                return call, True  # `float(x)`: a number, like `x.item()`
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
        known = self._movable.get(id(node))
        if known is None:
            known = self._movable[id(node)] = self._movable_once(node)
        return known

    def _movable_once(self, node: cst.CSTNode) -> bool:
        if self.context.server.problems(node):
            return False
        for name in collect(node).reads:
            # (a top-level save of the block is one of its `saved_names`)
            if name == self.save.name or name in self._top_level_saves():
                continue
            after_use = self._after_use(name)
            if name in after_use.binds or name in after_use.mutates:
                return False  # changed on the client after the request
            if name in self.request_use.binds or name in self.request_use.mutates:
                return False  # the server has its own value
            if name in self.facts.imports or name in self.facts.functions or name in BUILTIN_NAMES:
                continue
            if name not in self.facts.bindings and name not in self.near.module_use().binds:
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
    def _edits(self, chains, safety: Safety) -> NodeEdits:
        x = self.save.name
        edits = _EditsAlongPaths(self.parents)
        taken = TakenNames(self.index, self.context.options.reserved_names)
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
            name = _reduced_name(x, chain, taken)
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
            f"`{x}`{f' ({full})' if full else ''} {tense('is no longer', 'would no longer be')} downloaded whole: "
            f"{reduced} {tense('now computed', 'would be computed')} in the block and saved"
            + (f" (as {', '.join(f'`{m}`' for m in moved)})" if moved else "")
            + "".join(
                f"; `{m}` is your module: it is shipped by value with the request because it is "
                "imported before the first remote request (or registered with `nnsight.register`)"
                for m in sorted(self.shipped)
            ),
            safety,
            uses=tuple(chains),
        )
        return edits

    def _whole_assignment(self, chain):
        """`y = CHAIN` as a top-level statement after the request, movable as a whole. Not
        in a notebook: the statement would leave its cell for the request's (the chain is
        given a name of its own there instead, and the cell keeps `y = ...`)."""
        if self.context.options.notebook:
            return None, None
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
            earlier = self.index.use_naming(y, self.after[:index])
            if y in earlier.reads or y in earlier.binds or y in self.request_use.reads or y in self.request_use.binds:
                return None, None
            if y in self.index.use_naming(y, self.after[index + 1 :]).binds or self.index.binding_count(y) != 1:
                return None, None
            return stmt, y
        return None, None


@dataclass
class _Container:
    """`C = list().save()` / `C = dict().save()` at the top level of a request's block."""

    block: Block  # the request (an outermost block)
    stmt: cst.SimpleStatementLine
    name: str
    kind: str  # list | dict


def _containers(facts: Facts) -> list[_Container]:
    found = []
    for block in facts.blocks:
        if block.parent is not None or block.effective_remote is Remote.NO:
            continue
        for stmt in block.node.body.body:
            assigned = name_assignment(stmt)
            if assigned is None or not is_save_call(assigned[1]):
                continue
            kind = empty_container_kind(unsave(assigned[1]))
            # (a split's records hold what its replay reads, already reduced where they can be)
            if kind is not None and not assigned[0].startswith(RECORD_PREFIX):
                found.append(_Container(block, stmt, assigned[0], kind))
    return found


ELEMENT = "_ndif_element"  # stands for one element while reductions are compared
_JUMPS = (cst.Break, cst.Continue, cst.Return, cst.Raise)
_NEW_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_ITERATED_WHOLE = {"list": ("",), "dict": ("items", "values")}


@dataclass
class _ElementUse:
    """A place the code after the request reads one element of the container."""

    root: cst.CSTNode  # the element: the loop variable's name, or `C[k]`
    loop: cst.CSTNode | None  # the loop or comprehension that binds it (None: `C[k]`)


class _LoopReads:
    """What a client loop over several saved values does with each one: its variable's
    reads, whether every iteration runs them, whether the variable outlives the loop."""

    def __init__(self, facts: Facts, context: Context) -> None:
        self.facts = facts
        self.context = context
        self.index = scope_index(facts)

    def _runs_whole(self, loop: cst.CSTNode, variable: str) -> bool:
        """Does every iteration of ``loop`` run all its body, with ``variable`` bound only
        by the loop?"""
        if isinstance(loop, cst.For):
            return loop.orelse is None and not find_nodes(loop.body, lambda n: isinstance(n, _JUMPS)) \
                and variable not in collect(loop.body).binds
        return not (loop.inner_for_in is not None or loop.ifs or isinstance(self.index.parents.get(id(loop)), cst.CompFor))

    def _variable_ok(self, loop: cst.CSTNode, variable: str) -> bool:
        """Does every iteration of ``loop`` run its whole body, with ``variable`` bound only
        by the loop and read by nothing after it?"""
        if not self._runs_whole(loop, variable):
            return False
        if isinstance(loop, cst.CompFor):
            return True  # (a comprehension's variable is its own)
        where = self.facts.statements.get(id(loop))
        # (the loop's variable keeps the last element)
        return where is not None and variable not in reads_after(self.facts, where.suite, where.index + 1)

    def _reads_of(self, variable: str, loop: cst.CSTNode) -> list[cst.Name] | None:
        """The loop variable's reads in the loop's body (or the comprehension's
        expression); None when a function or lambda inside mentions it."""
        if isinstance(loop, cst.For):
            scopes = [loop.body]
        else:
            comprehension = self.index.parents.get(id(loop))
            scopes = [comprehension.key, comprehension.value] if isinstance(comprehension, cst.DictComp) \
                else [comprehension.elt]
        reads = []
        for scope in scopes:
            for node in find_nodes(scope, lambda n: isinstance(n, (cst.Name, *_NEW_SCOPES))):
                if isinstance(node, _NEW_SCOPES):
                    if variable in _spelled_names(node):
                        return None
                    continue
                if node.value == variable and self._is_read(node):
                    reads.append(node)
        return reads

    def _is_read(self, node: cst.Name) -> bool:
        parent = self.index.parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return False
        return not (isinstance(parent, cst.Arg) and parent.keyword is node)

    def _reduction(self, save: _Save, root: cst.CSTNode, once: set[str]) -> tuple[cst.CSTNode, str] | None:
        """The reduction grown from ``root`` (one value of the loop) as the block of
        ``save`` can compute it, and its code with ELEMENT for the value; None when it
        does not narrow, changes the value in place, or reads a name of ``once`` anywhere
        but at ``root``."""
        if _changed_through(root, self.index.parents):
            return None
        chain, reduced = ChainPushdown(save, self.facts, self.context)._grow(root)
        if not reduced:
            return None
        general = chain.deep_replace(root, cst.Name(ELEMENT))
        if set(collect(general).reads) & once:
            return None
        return chain, code_of(general)

    def _unconditional(self, chain: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Does the loop evaluate ``chain`` for every element: in a simple statement of
        its body (a comprehension's expression), with no condition or new scope between?"""
        stop = loop.body if isinstance(loop, cst.For) else self.index.parents.get(id(loop))
        node = self.index.parents.get(id(chain))
        while node is not None and node is not stop:
            if isinstance(node, CONDITIONAL_EXPRESSIONS) or isinstance(node, cst.BaseCompoundStatement):
                return False
            node = self.index.parents.get(id(node))
        return node is stop


class ElementPushdown(_LoopReads):
    """Move the reduction client code applies to every element of a saved list or dict
    into the block that fills it, so that each element is downloaded reduced.

    Applied when the block fills the container at one place (`C.append(E)` or
    `C[k] = E`) and reads it nowhere else; the code after the request reads it only by
    iterating over it (`for x in C`, `for k, x in C.items()`, a comprehension), by
    `C[k]` (a loop over a dict's keys, or over a list's `range(len(C))`, that reads
    `C[k]` goes over every element), or through `len(C)`, `C.keys()`, `k in C`; every element it reads goes through the
    same reduction R, which a loop over the whole container applies to every element
    (no jump, no condition in front of it: R is known to work on each); and nothing in
    the request changes the element in place after it is stored. Then `C.append(R(E))`
    and the client's `R(x)` becomes `x`: the names keep the reduced values, which
    nothing else reads."""

    def __init__(self, container: _Container, facts: Facts, context: Context) -> None:
        super().__init__(facts, context)
        self.container = container
        self.request = container.block
        suite = self.request.stmt.suite
        self.after = list(suite.body[self.request.stmt.index + 1 :])

    def plan(self, edits: "_EditsAlongPaths") -> None:
        """Add this container's edits to ``edits`` (shared by the run's containers)."""
        name = self.container.name
        if not any(name in statement_index(stmt).spelled for stmt in self.after):
            return None
        if self.index.binding_count(name) != 1:
            return None
        fill = self._fill()
        if fill is None:
            return None
        _, value = fill
        if self.index.read_outside(name, [self.request.node, *self.after]):
            return None
        after_use = self.index.use_naming(name, self.after)
        if name in after_use.binds or name in after_use.mutates:
            return None
        uses = self._element_uses()
        if not uses:
            return None
        found = self._reductions(uses)
        if isinstance(found, str):
            if found:
                self.context.skipped(self.container.stmt, f"the elements of `{name}` are still downloaded whole", found)
            return None
        chains, reduction = found
        why = self._changed_after_fill(value)
        if why:
            self.context.skipped(self.container.stmt, f"the elements of `{name}` are still downloaded whole", why)
            return None
        if not self.context.allows(self.container.stmt, f"the elements of `{name}` could be reduced on the server"):
            return None
        save = _Save(self.request, self.container.stmt, name)
        safety = _letting_go_safety(save, self.context, self.facts, lambda: (
            f"the elements of `{name}` need not be downloaded whole: `{reduction.replace(ELEMENT, code_of(unsave(value)))}` "
            "could be computed in the block for each one"), tuple(chain for chain, _ in chains))
        if safety is None:
            return None
        self._edits(edits, value, uses, chains, reduction, safety)

    # -- the block's side ------------------------------------------------------------------
    def _fill(self) -> tuple[cst.Name, cst.BaseExpression] | None:
        """The one place the request stores a value in the container: the container's
        name there and the value (`E` of `C.append(E)` or `C[k] = E`), when the request
        does nothing else with it."""
        name = self.container.name
        creation = self.container.stmt.body[0].targets[0].target
        found = self.index.occurrences_under(name, [self.request.node]).get(id(self.request.node), [])
        fills = []
        for node in found:
            if node is creation:
                continue
            value = self._stored_value(node)
            if value is None:
                return None
            fills.append((node, value))
        return fills[0] if len(fills) == 1 else None

    def _stored_value(self, node: cst.Name) -> cst.BaseExpression | None:
        parents = self.index.parents
        parent = parents.get(id(node))
        if self.container.kind == "list":
            call = parents.get(id(parent))
            if (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "append"
                    and isinstance(call, cst.Call) and call.func is parent and len(call.args) == 1
                    and call.args[0].keyword is None and not call.args[0].star
                    and isinstance(parents.get(id(call)), cst.Expr)):
                return call.args[0].value
            return None
        target = parents.get(id(parent))
        assign = parents.get(id(target))
        if (isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1
                and isinstance(target, cst.AssignTarget) and target.target is parent
                and isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            return assign.value
        return None

    def _changed_after_fill(self, value: cst.BaseExpression) -> str:
        """Why the element the client reads may differ from the value when it is stored:
        a change in place after it in the block that stores it, or, anywhere in the
        request, a change in place of a name of the value or of a name bound to a view
        of one (a later iteration would change an element stored earlier)."""
        block = self._innermost_block(value)
        seen = False
        for node in all_nodes(block.node.body):
            if node is value:
                seen = True
            elif seen and _changes_in_place(node) and not self._is_the_fill(node):
                return f"`{code_of(node).strip()}` changes a value in place after the block stores it"
        # a loop of the block around the store runs what comes before it again, after it
        loop = self.index.parents.get(id(value))
        while loop is not None and loop is not block.node:
            if isinstance(loop, (cst.For, cst.While)):
                for node in all_nodes(loop.body):
                    if _changes_in_place(node) and not self._is_the_fill(node):
                        return (f"`{code_of(node).strip()}` changes a value in place in the loop that stores it "
                                "(a later iteration runs it after the store)")
            loop = self.index.parents.get(id(loop))
        nodes = all_nodes(self.request.node.body)
        aliases = _aliases(set(collect(value).reads) - set(self.facts.models), nodes)
        for node in nodes:
            if (_changes_in_place(node) or _fills_in_place(node)) and not self._is_the_fill(node):
                changed = _changed_roots(node) & aliases
                if changed:
                    return (f"`{sorted(changed)[0]}` is changed in place in the request "
                            f"(`{code_of(node).strip()}`), and the stored value may be it or a view of it")
        return ""

    def _is_the_fill(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Assign) and any(
            isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)
            and t.target.value.value == self.container.name for t in node.targets)

    def _innermost_block(self, node: cst.CSTNode) -> Block:
        blocks = {id(b.node): b for b in self.facts.blocks}
        parent = self.index.parents.get(id(node))
        while parent is not None:
            if id(parent) in blocks:
                return blocks[id(parent)]
            parent = self.index.parents.get(id(parent))
        return self.request

    # -- the client's side -----------------------------------------------------------------
    def _element_uses(self) -> list[_ElementUse] | None:
        """Where the code after the request reads elements; None when it uses the
        container another way (whole), or no loop goes over all of it."""
        name = self.container.name
        parents = self.index.parents
        uses: list[_ElementUse] = []
        whole = False
        for stmt_nodes in self.index.occurrences_under(name, self.after).values():
            for node in stmt_nodes:
                parent = parents.get(id(node))
                if isinstance(parent, cst.Subscript) and parent.value is node:
                    uses.append(_ElementUse(parent, None))
                    whole = whole or self._keys_loop(parent) is not None
                    continue
                if isinstance(parent, cst.Arg) and self._is_len(parents.get(id(parent))):
                    continue
                iterated, holder = self._iterated(node)
                if iterated is None:
                    return None
                if holder == "keys":
                    whole = whole or self._keys_loop_here(node)
                    continue
                target = self._element_target(iterated, holder)
                if target is None:
                    return None
                uses.append(_ElementUse(target, iterated))
                whole = True
        return uses if whole else None

    def _membership(self, node: cst.Name) -> bool:
        """Is ``node`` what `k in C` / `k not in C` looks in?"""
        target = self.index.parents.get(id(node))
        return isinstance(target, cst.ComparisonTarget) and target.comparator is node \
            and isinstance(target.operator, (cst.In, cst.NotIn))

    def _keys_loop_here(self, node: cst.Name) -> bool:
        """Is ``node`` (the container) what a loop over its keys goes over?"""
        iterable = node
        parent = self.index.parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node:
            iterable = self.index.parents.get(id(parent))
        loop = self.index.parents.get(id(iterable))
        return isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is iterable

    def _keys_loop(self, subscript: cst.Subscript) -> cst.CSTNode | None:
        """The loop over the container's keys (a dict's keys, a list's `range(len(C))`)
        whose variable ``subscript`` (`C[k]`) reads, when every iteration runs its whole
        body (then it reads every element)."""
        if len(subscript.slice) != 1:
            return None
        key = subscript.slice[0].slice
        if not (isinstance(key, cst.Index) and isinstance(key.value, cst.Name)):
            return None
        node = self.index.parents.get(id(subscript))
        while node is not None and not isinstance(node, _NEW_SCOPES):
            loop = node.for_in if isinstance(node, COMPREHENSIONS) else node
            if isinstance(loop, (cst.For, cst.CompFor)) and isinstance(loop.target, cst.Name) \
                    and loop.target.value == key.value.value and self._over_keys(loop.iter):
                return loop if self._runs_whole(loop, key.value.value) else None
            node = self.index.parents.get(id(node))
        return None

    def _over_keys(self, iterable: cst.BaseExpression) -> bool:
        """`C` or `C.keys()` for a dict; `range(len(C))` for a list (the builtins)."""
        if self.container.kind == "list":
            return (isinstance(iterable, cst.Call) and code_of(iterable.func) == "range" and len(iterable.args) == 1
                    and "range" not in self.facts.bindings and self._is_len(iterable.args[0].value))
        if isinstance(iterable, cst.Call) and not iterable.args and isinstance(iterable.func, cst.Attribute) \
                and iterable.func.attr.value == "keys":
            iterable = iterable.func.value
        return isinstance(iterable, cst.Name) and iterable.value == self.container.name

    def _is_len(self, call: cst.CSTNode | None) -> bool:
        """`len(C)` (the builtin)."""
        return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "len"
                and len(call.args) == 1 and "len" not in self.facts.functions and "len" not in self.facts.bindings
                and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == self.container.name)

    def _iterated(self, node: cst.Name) -> tuple[cst.CSTNode | None, str]:
        """The `for` or comprehension `for` whose iterable is the container (or its
        `.items()`/`.values()`/`.keys()`), and which of those."""
        parents = self.index.parents
        iterable, holder = node, ""
        parent = parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if not (isinstance(call, cst.Call) and call.func is parent and not call.args):
                return None, ""
            holder = parent.attr.value
            if self.container.kind == "dict" and holder == "keys":
                return node, "keys"
            iterable = call
        elif self.container.kind == "dict" and (self._keys_loop_here(node) or self._membership(node)):
            return node, "keys"  # `for k in C`, `k in C`: its keys
        if holder not in _ITERATED_WHOLE[self.container.kind]:
            return None, ""
        loop = parents.get(id(iterable))
        if isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is iterable:
            return loop, holder
        return None, ""

    def _element_target(self, loop: cst.CSTNode, holder: str) -> cst.Name | None:
        target = loop.target
        if holder == "items":
            if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
                return None
            target = target.elements[1].value
        if not isinstance(target, cst.Name) or not self._variable_ok(loop, target.value):
            return None
        return target

    def _reductions(self, uses: list[_ElementUse]):
        """The chains that reduce each element read and the one reduction they share
        (with ELEMENT for the element); or why not, once some read reduces an element
        ("" when none does: nothing to offer)."""
        name = self.container.name
        chains: list[tuple[cst.CSTNode, _ElementUse]] = []  # (chain, the use it reduces)
        codes: dict[str, cst.CSTNode] = {}
        witnessed = False
        whole = None  # a read that takes an element whole
        for use in uses:
            reads = [use.root] if use.loop is None else self._reads_of(use.root.value, use.loop)
            if not reads:
                return "" if not chains else f"a loop over `{name}` reads its elements in a function or lambda"
            for read in reads:
                grown = self._grow(read, name if use.loop is None else use.root.value)
                if grown is None:
                    whole = whole or read
                    continue
                chains.append((grown[0], use))
                codes.setdefault(grown[1], grown[0])
                loop = use.loop if use.loop is not None else self._keys_loop(use.root)
                if loop is not None:
                    witnessed = witnessed or self._unconditional(grown[0], loop)
        if not chains:
            return ""
        if whole is not None:
            parent = self.index.parents.get(id(whole), whole)
            return f"`{code_of(parent).strip()}` uses an element whole, on your machine"
        if len(codes) != 1:
            return "its elements are reduced in different ways (" + ", ".join(
                f"`{code_of(c)}`" for c in codes.values()) + ")"
        if not witnessed:
            return ("no loop over all of it reduces every element: the reduction is not known to work on "
                    "each one (a condition or a jump stands in front of it)")
        return chains, next(iter(codes))

    def _grow(self, root: cst.CSTNode, variable: str) -> tuple[cst.CSTNode, str] | None:
        save = _Save(self.request, self.container.stmt, variable)
        return self._reduction(save, root, {variable, self.container.name})

    # -- the rewrite -----------------------------------------------------------------------
    def _edits(self, edits: "_EditsAlongPaths", fill: cst.BaseExpression, uses: list[_ElementUse], chains,
               reduction: str, safety: Safety) -> None:
        """The block stores R(E), and the client's reductions read what it stored. The
        container and the loops' variables keep their names and now hold the reduced
        values (nothing read them any other way): they are no longer what the script
        had, and are named so (`unreturned`). New names would be numbered by what else
        the run renamed, which a window of the file does not see."""
        name = self.container.name
        stored = unsave(fill)
        if not isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            stored = stored.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        general = cst.parse_expression(reduction)
        element = next(n for n in find_nodes(general, lambda n: isinstance(n, cst.Name) and n.value == ELEMENT))
        edits.replace[id(fill)] = general.deep_replace(element, stored)
        for chain, use in chains:
            edits.replace[id(chain)] = cst.Name(use.root.value) if use.loop is not None else use.root
            if isinstance(use.loop, cst.For):
                self.context.unreturned.add(use.root.value)
            copy = self._copy_of_container(chain, use)
            if copy is not None:
                edits.replace[id(self.index.parents[id(use.loop)])] = copy
        self.context.unreturned.add(name)
        self.context.applied(
            self.container.stmt,
            f"the elements of `{name}` {tense('are no longer', 'would no longer be')} downloaded whole: "
            f"`{reduction.replace(ELEMENT, code_of(stored))}` {tense('is now', 'would be')} computed in the block "
            f"for each one, and `{name}` {tense('holds', 'would hold')} those",
            safety,
            uses=tuple(chain for chain, _ in chains),
        )

    def _copy_of_container(self, chain: cst.CSTNode, use: _ElementUse) -> cst.Call | None:
        """`list(C)` for `[x for x in C]`, which a comprehension whose expression was the
        reduction becomes once the reduction moves into the block (`set(C)` for a set)."""
        comprehension = self.index.parents.get(id(use.loop)) if isinstance(use.loop, cst.CompFor) else None
        maker = {cst.ListComp: "list", cst.SetComp: "set"}.get(type(comprehension))
        if maker is None or comprehension.elt is not chain or self._shadowed(maker):
            return None
        loop = use.loop
        if loop.ifs or loop.inner_for_in is not None or loop.asynchronous is not None:
            return None
        if not (isinstance(loop.target, cst.Name) and loop.target.value == use.root.value):
            return None
        return cst.Call(func=cst.Name(maker), args=[cst.Arg(loop.iter)]).with_changes(
            lpar=comprehension.lpar, rpar=comprehension.rpar)

    def _shadowed(self, builtin: str) -> bool:
        """Does the file bind ``builtin`` anywhere (a parameter, a `def`, an assignment)?"""
        return self.facts.once(f"shadowed:{builtin}", lambda: plain_loads(self.facts.module, builtin) is None)


class LiteralPushdown(_LoopReads):
    """Reduce the saved values a client loop goes over in a list written out in the code:
    `for name, logits in [("clean", clean), ("patched", patched)]: print(logits[0, -1].argmax())`.

    Each saved value the list holds at the loop variable's place gets its reduction
    computed in its own block (`clean_argmax = clean[0, -1].argmax().save()`, as for a
    value read through one reduction), the list holds those, and the loop's reads take
    them as they are. Applied under the conditions of the elements of a container (one
    reduction, applied unconditionally on each value, the variable read by nothing
    after the loop) and those of a saved value's own reductions (the value not bound
    again after its request, not read before it or in a function). A value that the
    code after its request also reads another way keeps its own save."""

    def __init__(self, loop: cst.CSTNode, place: int | None, saves: list[_Save], facts: Facts, context: Context) -> None:
        super().__init__(facts, context)
        self.loop = loop
        self.saves = saves  # the saved value at that place of each item of the list
        target = loop.target
        self.variable = (target if place is None else target.elements[place].value).value
        # the name at that place of each item (the list's own nodes)
        self.held = _held_at(loop, place)

    @staticmethod
    def candidates(facts: Facts, context: Context) -> list["LiteralPushdown"]:
        """The loops over a list (or tuple) display whose items hold, at one place of the
        loop's target, only names bound to saved values."""
        index = scope_index(facts)
        saves = {s.name: s for s in _saves(facts)}
        loops: dict[int, cst.CSTNode] = {}
        for name in saves:
            for node, _ in index.occurrences.get(name, ()):
                loop = _display_loop(node, index.parents)
                if loop is not None:
                    loops.setdefault(id(loop), loop)
        found = []
        for loop in loops.values():
            target = loop.target
            if isinstance(target, cst.Name):
                places = [None]
            elif isinstance(target, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in target.elements):
                places = list(range(len(target.elements)))
            else:
                continue
            for place in places:
                held = _held_at(loop, place)
                if held and all(isinstance(h, cst.Name) and h.value in saves for h in held):
                    found.append(LiteralPushdown(loop, place, [saves[h.value] for h in held], facts, context))
        return found

    def plan(self, edits: "_EditsAlongPaths") -> bool:
        variable = self.variable
        names = [s.name for s in self.saves]
        if len(set(names)) != len(names) or not self._variable_ok(self.loop, variable):
            return False
        reads = self._reads_of(variable, self.loop)
        if not reads:
            return False
        chains, codes, witnessed = [], set(), False
        for read in reads:
            grown = [self._reduction(_Save(save.block, save.stmt, variable), read, {variable}) for save in self.saves]
            if any(g is None for g in grown) or len({id(g[0]) for g in grown}) != 1:
                return False
            chain, code = grown[0]
            chains.append(chain)
            codes.add(code)
            witnessed = witnessed or self._unconditional(chain, self.loop)
        if len(codes) != 1 or not witnessed:
            return False
        for save in self.saves:
            pushdown = ChainPushdown(save, self.facts, self.context)
            if save.name in pushdown._after_use(save.name).binds:
                return False
            if pushdown.request is not save.block and not _last_value_in_session(save, pushdown.request, self.facts):
                return False
            if pushdown.request is not save.block and _changed_in_place_outside(save.name, pushdown.request, save.block):
                return False
            if self.index.read_outside(save.name, [pushdown.request.node, *pushdown.after]):
                return False
        if not self.context.allows(self.saves[0].stmt, "the values the loop goes over could be reduced on the server"):
            return False
        reduction = codes.pop()
        # a value the code after its request also reads another way keeps its own save
        whole_too = {save.name for save in self.saves if self._read_elsewhere(save)}
        safety = Safety.SAFE
        for save in self.saves:
            if save.name in whole_too:
                continue  # its own save stays: the kernel keeps what it kept
            kept = _letting_go_safety(save, self.context, self.facts, lambda save=save: (
                f"`{save.name}` need not be downloaded whole for the loop over it: "
                f"`{reduction.replace(ELEMENT, save.name)}` could be computed in the block"), tuple(chains))
            if kept is None:
                return False
            if kept is Safety.UNSAFE:
                safety = Safety.UNSAFE
        self._edits_for(edits, chains, reduction, whole_too, safety)
        return True

    def _edits_for(self, edits: "_EditsAlongPaths", chains, reduction: str, whole_too: set[str],
                   safety: Safety) -> None:
        taken = TakenNames(self.index, self.context.options.reserved_names)
        general = cst.parse_expression(reduction)
        element = next(n for n in find_nodes(general, lambda n: isinstance(n, cst.Name) and n.value == ELEMENT))
        reduced_names = []
        for save, name_node in zip(self.saves, self.held):
            name = _reduced_name(save.name, chains[0], taken)
            taken.add(name)
            self.context.introduced.add(name)
            reduced_names.append(name)
            added = edits.append.setdefault(id(save.block.node.body), [])
            added.append(_saved_assignment(name, general.deep_replace(element, cst.Name(save.name))))
            edits.replace[id(name_node)] = cst.Name(name)
            if save.name not in whole_too:
                edits.replace[id(save.stmt)] = _without_save(save.stmt)
                self.context.unreturned.add(save.name)
        for chain in chains:
            edits.replace[id(chain)] = cst.Name(self.variable)
        if isinstance(self.loop, cst.For):
            self.context.unreturned.add(self.variable)
        for save, name in zip(self.saves, reduced_names):
            self.context.applied(
                save.stmt,
                f"`{save.name}` {tense('is no longer', 'would no longer be')} downloaded whole for the loop over it: "
                f"`{reduction.replace(ELEMENT, save.name)}` {tense('now computed', 'would be computed')} in the "
                f"block and saved (as `{name}`)",
                safety,
                uses=tuple(chains),
            )

    def _read_elsewhere(self, save: _Save) -> bool:
        """Does the code after the request read the saved value elsewhere than in the
        loop's list?"""
        pushdown = ChainPushdown(save, self.facts, self.context)
        return any(_display_loop(node, self.index.parents) is not self.loop for node in pushdown._uses())


def _display_loop(node: cst.Name, parents: dict[int, cst.CSTNode]) -> cst.CSTNode | None:
    """The `for` (or comprehension `for`) whose iterable is a list or tuple display that
    holds ``node`` as an item, or as an item of a tuple item."""
    display = None
    current = node
    for _ in range(2):
        element = parents.get(id(current))
        holder = parents.get(id(element))
        if not (isinstance(element, cst.Element) and element.value is current
                and isinstance(holder, (cst.List, cst.Tuple))):
            break
        display, current = holder, holder
        loop = parents.get(id(display))
        if isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is display:
            return loop
    return None


def _held_at(loop: cst.CSTNode, place: int | None) -> list[cst.BaseExpression | None]:
    """What each item of the loop's list display holds at ``place`` of its tuple target
    (None: the target is a name, the item itself)."""
    width = len(loop.target.elements) if place is not None else 0
    return [_item_at(item.value, place, width) for item in loop.iter.elements]


def _item_at(item: cst.BaseExpression, place: int | None, width: int) -> cst.BaseExpression | None:
    """The part of a display's item the loop binds at ``place`` of its tuple target."""
    if place is None:
        return item
    if isinstance(item, cst.Tuple) and len(item.elements) == width and \
            all(isinstance(e, cst.Element) for e in item.elements):
        return item.elements[place].value
    return None


def _mutation_site(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    """What ``node`` is read through: the largest `x[...]` / `x.attr` around it."""
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, (cst.Subscript, cst.Attribute)) and parent.value is node:
            node = parent
            continue
        return node


def _mutating_code(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    """The assignment or call that changes ``node``'s value in place (see _changed_through)."""
    site = _mutation_site(node, parents)
    parent = parents.get(id(site))
    if isinstance(parent, cst.AssignTarget):
        return parents.get(id(parent), site)
    if isinstance(parent, (cst.AugAssign, cst.Call)):
        return parent
    return site


def _changed_through(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> bool:
    """Is the value of ``node`` (a name) changed in place there: assigned through
    (`x[0] = v`, `x[0] += v`), deleted from, or given to an in-place method
    (`x.mul_(2)`, `x[0].zero_()`, `x.append(v)`)?"""
    site = _mutation_site(node, parents)
    parent = parents.get(id(site))
    if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) and parent.target is site and site is not node:
        return True
    if isinstance(parent, cst.Del) or isinstance(parents.get(id(parent)), cst.Del):
        return site is not node
    if isinstance(site, cst.Attribute) and isinstance(parents.get(id(site)), cst.Call) \
            and parents.get(id(site)).func is site:
        method = site.attr.value
        return (method.endswith("_") and not method.endswith("__")) or method in FILLING_METHODS
    return False


def _changed_in_place_outside(name: str, session: Block, block: Block) -> bool:
    """Does the session's code outside ``block`` change ``name``'s value in place (or a
    name bound to it or to a view of it)?"""
    inside = {id(n) for n in all_nodes(block.node)}
    nodes = [n for n in all_nodes(session.node.body) if id(n) not in inside]
    aliases = _aliases({name}, nodes)
    return any((_changes_in_place(n) or _fills_in_place(n)) and _changed_roots(n) & aliases for n in nodes)


def _aliases(names: set[str], nodes: list[cst.CSTNode]) -> set[str]:
    """``names`` and the names the assignments among ``nodes`` bind to them or to a view
    of them (`y = x`, `y = x[0]`, `y = x.T`), over and over."""
    aliases = set(names)
    assignments = [n for n in nodes if isinstance(n, cst.Assign)
                   and isinstance(n.value, (cst.Name, cst.Subscript, cst.Attribute))]
    grew = True
    while grew:
        grew = False
        for assign in assignments:
            if set(collect(assign.value).reads) & aliases:
                for target in assign.targets:
                    for bound in target_names(target.target):
                        if bound not in aliases:
                            aliases.add(bound)
                            grew = True
    return aliases


def _spelled_names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in find_nodes(node, lambda n: isinstance(n, cst.Name))}




def _fills_in_place(node: cst.CSTNode) -> bool:
    """A call of a method that changes a list or dict (`x.append(...)`)."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
        and node.func.attr.value in FILLING_METHODS


def _changes_in_place(node: cst.CSTNode) -> bool:
    """An assignment to a subscript or attribute, an augmented assignment, or an
    in-place tensor method (`x.add_(...)`)."""
    if isinstance(node, cst.AugAssign):
        return True
    if isinstance(node, cst.Assign):
        return any(isinstance(t.target, (cst.Subscript, cst.Attribute)) for t in node.targets)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        return method.endswith("_") and not method.endswith("__")
    return False


def _changed_roots(node: cst.CSTNode) -> set[str]:
    """The names whose values an in-place change changes."""
    if isinstance(node, cst.AugAssign):
        targets = [node.target]
    elif isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    else:
        targets = [node.func.value]
    roots = set()
    for target in targets:
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        if isinstance(target, cst.Name):
            roots.add(target.value)
    return roots


NOTEBOOK_REASON = (
    "in a notebook the kernel keeps it after the last cell, where a cell you add later may read "
    "it; use --unsafe-fixes to stop downloading it"
)


RESULT_REASON = (
    "`{name}` is a result of the script: it is bound at module level and still holds this value "
    "when the script ends, where `python -i`, `%run` or an import sees it; use --unsafe-fixes to "
    "stop downloading it"
)


def _letting_go_safety(save: _Save, context: Context, facts: Facts, message: Callable[[], str],
                   uses: tuple[cst.CSTNode, ...] = ()) -> Safety | None:
    """How safe it is to stop downloading ``save``'s value, or None (reported, with
    ``message()`` and the client code that reads it, ``uses``) when that needs
    --unsafe-fixes: in a notebook, a value saved outside functions stays in the kernel,
    where the cells read so far are not all its readers; in a script, a result the script
    ends with (:func:`ndif_opt.analysis.regions.results_kept`) is compared like any other."""
    if save.block.stmt.function is not None:
        return Safety.SAFE
    if context.options.notebook:
        reason = NOTEBOOK_REASON
    else:
        request = save.block.outermost.stmt
        if save.name not in results_kept(facts, request.suite, request.index + 1):
            return Safety.SAFE
        reason = RESULT_REASON.format(name=save.name)
    if context.options.unsafe_fixes:
        return Safety.UNSAFE
    context.needs_unsafe(save.stmt, message(), reason, uses=uses)
    return None


def _is_scalar_end(call: cst.Call) -> bool:
    if isinstance(call.func, cst.Name):
        return call.func.value in SCALAR_BUILTINS
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("item", "tolist")


def _narrows(element: cst.SubscriptElement) -> bool:
    index = element.slice
    if isinstance(index, cst.Index):
        return not (isinstance(index.value, cst.Name) and index.value.value == "None") and not isinstance(index.value, cst.Ellipsis)
    if isinstance(index, cst.Slice):
        return index.lower is not None or index.upper is not None
    return False


def _reduced_name(base: str, chain: cst.CSTNode, taken: TakenNames) -> str:
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
    return fresh_name(f"{base}_{suffix}", taken, separator="")


def _saved_assignment(name: str, chain: cst.BaseExpression, like: cst.SimpleStatementLine | None = None):
    saved = method_call(chain, "save")
    stmt = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], saved)])
    if like is not None:
        comments = [line for line in like.leading_lines if line.comment is not None]
        stmt = stmt.with_changes(leading_lines=comments, trailing_whitespace=like.trailing_whitespace)
    return stmt


def _saves(facts: Facts) -> list[_Save]:
    return facts.once("reduction-pushdown:saves", lambda: _find_saves(facts))


def _find_saves(facts: Facts) -> list[_Save]:
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.effective_remote is Remote.NO:
            continue
        for stmt in block.node.body.body:
            save = _save_in(block, stmt)
            if save is not None:
                found.append(save)
    return found


def _save_in(block: Block, stmt: cst.BaseStatement) -> _Save | None:
    """``stmt`` as a save of one name (`x = <expr>.save()`, not of a container)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and is_save_call(small.value)
        and not _is_container(unsave(small.value))
    ):
        return _Save(block, stmt, small.targets[0].target.value)
    return None


def _nested_session_saves(facts: Facts) -> list[_Save]:
    """Saves in the loops and conditionals of a block inside a session (trace-fusion puts
    a loop of traces inside one trace): the session reads them without `.save()` too."""
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.parent is None or block.effective_remote is Remote.NO:
            continue
        for stmt in _nested_statements(block.node.body.body):
            save = _save_in(block, stmt)
            if save is not None:
                found.append(save)
    return found


_BRANCHING = (cst.For, cst.While, cst.If)


def _nested_statements(statements) -> Iterator[cst.BaseStatement]:
    """The statements in the loops and conditionals among ``statements``, at any depth, in
    the order of the code (not those of other compound statements: a nested block has
    its own saves, a function its own scope)."""
    for stmt in statements:
        if not isinstance(stmt, _BRANCHING):
            continue
        suites = [stmt.body]
        orelse = stmt.orelse
        while orelse is not None:  # `else:`, or `elif` (an If) with its own `else`
            suites.append(orelse.body)
            orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        for suite in suites:
            if isinstance(suite, cst.IndentedBlock):
                for inner in suite.body:
                    if isinstance(inner, _BRANCHING):
                        yield from _nested_statements([inner])
                    else:
                        yield inner


def _is_container(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.List, cst.Dict, cst.Tuple, cst.Set)) or (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "dict", "set", "tuple")
    )


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


# -- what the pass asks about one version of the tree ---------------------------------------

def _session_statement(save: _Save, session: Block) -> int | None:
    """The index of the statement of the session's body that holds the save's block."""
    body = session.node.body.body
    for node in (*save.block.stmt.ancestors, save.block.node):
        for index, stmt in enumerate(body):
            if stmt is node:
                return index
    return None


def _later_in_session(save: _Save, session: Block) -> list[cst.BaseStatement]:
    """The statements of the session's body after the one that holds the save."""
    index = _session_statement(save, session)
    return [] if index is None else list(session.node.body.body[index + 1 :])


def _last_value_in_session(save: _Save, session: Block, facts: Facts) -> bool:
    """Is the saved value the one the name holds when the session ends? It is when the
    session binds the name once, or when the save's block is a statement of the
    session's own body (it runs for sure), binds the name once, and nothing after it in
    the session binds the name again."""
    name = save.name
    if _binding_count_within(facts, name, session) == 1:
        return True
    if _session_statement(save, session) is None or save.block.stmt.ancestors[-1] is not session.node:
        return False
    if binding_count_in(save.block.node, name) != 1:
        return False
    return not any(name in collect(stmt).binds for stmt in _later_in_session(save, session))


def _binding_count_within(facts: Facts, name: str, block: Block) -> int:
    """``scope_index(facts).binding_count(name, within=block.node)``. For a block that is a
    top-level statement, its binding sites are counted without the module's index."""
    if block.stmt.suite is not facts.module:
        return scope_index(facts).binding_count(name, within=block.node)
    return binding_count_in(block.node, name)


class _EditsAlongPaths(NodeEdits):
    """NodeEdits that walks only the nodes that hold an edit somewhere below them, found
    with the index's parents: every other subtree is kept as it is, unvisited."""

    def __init__(self, parents: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.parents = parents
        self.above_edits: set[int] | None = None  # ids of the nodes above an edited node

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.above_edits is None:
            self.above_edits = self._above_edits()
        return id(node) in self.above_edits and super().on_visit(node)

    def _above_edits(self) -> set[int]:
        above: set[int] = set()
        for edited in [*self.replace, *self.remove, *self.append]:
            parent = self.parents.get(edited)
            while parent is not None and id(parent) not in above:
                above.add(id(parent))
                parent = self.parents.get(id(parent))
        return above


ReductionPushdown.cases = (
    Case(
        name="a reduction under a condition stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
POS = 40
prompt = "The Eiffel Tower is in"
with model.trace(prompt, remote=True):
    logits = model.lm_head.output.save()
if len(prompt.split()) > POS:
    subject = logits[0, POS].argmax().item()
else:
    subject = None
print(subject, logits[0, -1].argmax().item())
""",
        reason="`logits[0, POS].argmax().item()` runs only when `len(prompt.split()) > POS`",
    ),
    Case(
        name="a reduction whose error a handler catches stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("Hi there", remote=True):
    logits = model.lm_head.output.save()
try:
    subject = logits[0, 40].argmax().item()
except IndexError:
    subject = None  # the prompt is too short
print(subject)
""",
        reason="runs only inside `try:`, whose handler may catch what it raises",
    ),
    Case(
        name="a reduction after an early return stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
POS = 40


def subject_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    if len(prompt.split()) <= POS:
        return None
    top = logits[0, POS].argmax().item()
    return top


print(subject_token("Hi there"))
""",
        reason="after `return None`, which may end the code first",
    ),
    Case(
        name="nnterp: reductions of StandardizedTransformer values move into the block",
        before="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B", enable_attention_probs=True)
with model.trace("The Eiffel Tower is in the city of", remote=True):
    attn = model.attentions_output[2].save()
    pattern = model.attention_probabilities[3].save()
    mlp = model.mlps_output[5].save()
print(pattern[0, :, -1].max(dim=-1).values, mlp[0, -1].norm(), attn.mean())
""",
        after="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B", enable_attention_probs=True)
with model.trace("The Eiffel Tower is in the city of", remote=True):
    attn = model.attentions_output[2]
    pattern = model.attention_probabilities[3]
    mlp = model.mlps_output[5]
    attn_mean = attn.mean().save()
    pattern_reduced = pattern[0, :, -1].max(dim=-1).values.save()
    mlp_norm = mlp[0, -1].norm().save()
print(pattern_reduced, mlp_norm, attn_mean)
""",
    ),
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
        name="saved in a loop inside a trace, only read inside the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    with model.trace("The Eiffel Tower is in"):
        for layer in range(3):
            hidden = model.transformer.h[layer].output.save()
            norms.append(hidden.norm().item())
print(norms)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    with model.trace("The Eiffel Tower is in"):
        for layer in range(3):
            hidden = model.transformer.h[layer].output
            norms.append(hidden.norm().item())
print(norms)
""",
    ),
    Case(
        name="a notebook's kernel keeps a value saved at module level",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
""",
        reason="a cell you add later may read it",
    ),
    Case(
        name="a notebook's value saved at module level, not downloaded",
        notebook=True,
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
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
""",
    ),
    Case(
        name="a notebook's value saved at module level, reduced on the client",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
""",
        reason="need not be downloaded whole",
    ),
    Case(
        name="a notebook's value saved inside a function",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def next_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


print(next_token("The Eiffel Tower is in"))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def next_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output
        logits_argmax = logits[0, -1].argmax().item().save()
    return logits_argmax


print(next_token("The Eiffel Tower is in"))
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
        name="a comprehension's own variable of the same name is another value",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
sizes = [len(logits) for logits in ["a b", "c"]]  # another `logits`: the comprehension's own
print(top, sizes)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()
sizes = [len(logits) for logits in ["a b", "c"]]  # another `logits`: the comprehension's own
print(top, sizes)
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
    Case(
        name="the elements of a saved list, read through one reduction, are reduced where the block stores them (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
tops = [logits[0, -1].argmax().item() for logits in logits_by_prompt]
print(tops)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output[0, -1].argmax().item())
tops = list(logits_by_prompt)
print(tops)
""",
    ),
    Case(
        name="the elements of a list the script ends with stay as they are",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
tops = [logits[0, -1].argmax().item() for logits in logits_by_prompt]
print(tops)
""",
        reason="`logits_by_prompt` is a result of the script",
    ),
    Case(
        name="the elements of a saved dict, read by a loop over its items (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    ablated = dict().save()
    for layer in range(12):
        with model.trace("The Eiffel Tower is in the city of"):
            model.transformer.h[layer].mlp.output[:] = 0
            ablated[layer] = model.lm_head.output
for layer, logits in ablated.items():
    print(layer, logits[0, -1].softmax(-1).max().item())
print(len(ablated), "layers")
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    ablated = dict().save()
    for layer in range(12):
        with model.trace("The Eiffel Tower is in the city of"):
            model.transformer.h[layer].mlp.output[:] = 0
            ablated[layer] = model.lm_head.output[0, -1].softmax(-1).max().item()
for layer, logits in ablated.items():
    print(layer, logits)
print(len(ablated), "layers")
""",
    ),
    Case(
        name="an element also used whole keeps the list whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
for logits in logits_by_prompt:
    print(logits[0, -1].argmax().item(), logits.shape)
""",
        reason="`logits.shape` uses an element whole, on your machine",
    ),
    Case(
        name="an element the block changes in place after storing it is downloaded whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    hidden = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            hidden.append(model.transformer.h[6].output)
            model.transformer.h[6].output[:] = 0
print([h[0, -1].norm().item() for h in hidden])
""",
        reason="changes a value in place after the block stores it",
    ),
    Case(
        name="saved values a loop goes over in a written-out list are reduced in their blocks",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output
    clean_argmax = clean[0, -1].argmax().item().save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output
    patched_argmax = patched[0, -1].argmax().item().save()
for name, logits in [("clean", clean_argmax), ("patched", patched_argmax)]:
    print(name, logits)
""",
    ),
    Case(
        name="a loop variable read after the loop keeps the values whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
print(logits.shape)
""",
    ),
    Case(
        name="in a notebook the values a loop goes over still come back whole without --unsafe-fixes",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
""",
        reason="the kernel keeps it after the last cell",
    ),
    Case(
        name="a number taken with float() is computed in the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output.save()
print(float(logits[0, -1, 5] - logits[0, -1, 7]))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output
    logits_float = float(logits[0, -1, 5] - logits[0, -1, 7]).save()
print(logits_float)
""",
    ),
    Case(
        name="a value the client changes in place is downloaded whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output.save()
logits[0, -1, 50256] = float("-inf")
print(logits[0, -1].argmax().item())
""",
        reason="changes it in place on your machine",
    ),
    Case(
        name="a dict read by key in a loop over its keys (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            cache[prompt] = model.lm_head.output
for prompt in cache:
    print(prompt, cache[prompt][0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            cache[prompt] = model.lm_head.output[0, -1].argmax().item()
for prompt in cache:
    print(prompt, cache[prompt])
""",
    ),
)

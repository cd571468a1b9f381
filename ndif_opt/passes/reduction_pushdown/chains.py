"""reduction-pushdown's first strategy: the reductions client code applies to one saved value,
moved into its block (ChainPushdown)."""

from __future__ import annotations

import builtins
from functools import cached_property

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import NameUse, collect
from ndif_opt.analysis.scopes import ScopeIndex, TakenNames, known_scope_index, scope_index, statement_index
from ndif_opt.cost.constants import setting
from ndif_opt.cost_model import explain, saved_estimate, saved_shape
from ndif_opt.passes.base import Context
from ndif_opt.passes.common.guards import guard_in, guard_words
from ndif_opt.passes.reduction_pushdown.saves import (
    EditsAlongPaths,
    Save,
    changed_in_place_outside,
    changed_through,
    last_value_in_session,
    letting_go_safety,
    mutating_code,
    reduced_name,
    saved_assignment,
    saves_of,
    without_save,
)
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import NodeEdits, unsave
from ndif_opt.types import Safety
from ndif_opt.wording import human_bytes, tense


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


class ChainPushdown:
    """Move the reductions client code applies to one saved value into its block."""

    def __init__(self, save: Save, facts: Facts, context: Context) -> None:
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
        whole = known_scope_index(self.facts)
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

    def _left_whole(self, reason: str) -> None:
        """Say why the saved value is still downloaded whole, unless it is a scalar (its
        reductions would bring back nothing smaller)."""
        shape = saved_estimate(unsave(self.save.stmt.body[0].value), self.save.block, self.facts)
        if shape is not None and shape.kind in ("scalar", "python") and not shape.dims:
            return
        self.context.skipped(self.save.stmt, f"`{self.save.name}` is still downloaded whole", reason)

    def plan(self) -> NodeEdits | None:
        x = self.save.name
        if self.after_at_top_level and not any(x in statement_index(stmt).spelled for stmt in self.after):
            return None  # no use of `x` after the request (see _uses): no index needed
        uses = self._uses()
        if not any(self._grow(node)[1] for node in uses):
            return None  # as below, without a word (no use reduces): no index of the module
        if x in self._after_use(x).binds:
            return None
        if self.request is not self.save.block and not last_value_in_session(self.save, self.request, self.facts):
            # bound again in the session: the code after it may read another value
            return None
        if self.request is not self.save.block and changed_in_place_outside(x, self.request, self.save.block):
            return None  # the session changes the value after its block: the reduction would miss it
        if self.index.read_outside(x, [self.request.node, *self.after]):
            return None  # read elsewhere too (before the request, in a function, ...)
        changed = next((node for node in uses if changed_through(node, self.parents)), None)
        if changed is not None:
            self._left_whole(f"`{code_of(mutating_code(changed, self.parents)).strip()}` changes it in place "
                             "on your machine, so the reductions read what it becomes")
            return None
        chains = []
        for node in uses:
            chain, reduced = self._grow(node)
            if not reduced:
                if chains or any(self._grow(u)[1] for u in uses):
                    self._left_whole(
                        f"`{code_of(self.parents.get(id(node), node)).strip()}` uses it whole, on your machine")
                return None
            chains.append(chain)
        chains = self._outermost(chains)
        guards = [guard_in(self.after, c) for c in chains]
        guarded = None
        if any(g is not None for g in guards):
            # a reduction your code runs unguarded too (`if v.item() > best: best = v.item()`)
            # runs in any case: computed in the block, it fails nowhere your code would not
            always = {code_of(c) for c, g in zip(chains, guards) if g is None}
            guarded = next(((c, g) for c, g in zip(chains, guards) if g is not None and code_of(c) not in always),
                           None)
        if guarded is not None:
            chain, guard = guarded
            self._left_whole(
                f"`{code_of(chain)}` runs only {guard_words(guard)}: computed in the block, it would run "
                "every time, and could fail where your code does not run it")
            return None
        problem = self._upload_problem(chains)
        if problem:
            self._left_whole(problem)
            return None
        if not self.context.allows(self.save.stmt, f"`{x}` could be reduced on the server"):
            return None
        safety = letting_go_safety(self.save, self.context, self.facts, lambda: (
            f"`{x}` need not be downloaded whole: {', '.join(dict.fromkeys(f'`{code_of(c)}`' for c in chains))} "
            "could be computed in the block"), tuple(chains))
        if safety is None:
            return None
        return self._edits(chains, safety)

    def _upload_problem(self, chains) -> str:
        """Would the reductions, computed in the block, make its request carry tensors of
        your machine (a value an earlier request downloaded) that take longer to upload
        than the download they save? ("" when not, or when the sizes are not known.)"""
        options = self.context.options
        request = explain(self.facts, options).request_for(self.request.node)
        full = request.saved.get(self.save.name) if request is not None else None
        if not isinstance(full, int) or any(value.name == self.save.name for value in request.unknown_downloads):
            return ""  # (a value of unknown size: its entry counts only its framing)
        read = set().union(*(collect(chain).reads for chain in chains)) - {self.save.name} - set(self.request_use.reads)
        sizes = {name: size for name in sorted(read) if (size := request.client_tensor_bytes(name))}
        upload = sum(sizes.values())
        if not sizes or upload / setting(options, "upload-bandwidth") < full / setting(options, "bandwidth"):
            return ""
        held = ", ".join(f"`{name}` (~{human_bytes(size)})" for name, size in sizes.items())
        return (f"computed in the block, the reduction would read {held} from your machine: uploaded with every "
                f"request, it takes longer than the ~{human_bytes(full)} of download it would save")

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
        return {s.name for s in saves_of(self.facts) if s.block is self.save.block}

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
        edits = EditsAlongPaths(self.parents)
        taken = TakenNames(self.index, self.context.run.reserved_names)
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
                added.append(saved_assignment(target, chain, like=stmt))
                edits.remove.add(id(stmt))
                moved.append(target)
                continue
            name = reduced_name(x, chain, taken)
            taken.add(name)
            self.context.introduced.add(name)
            by_code[code] = name
            added.append(saved_assignment(name, chain))
            edits.replace[id(chain)] = cst.Name(name)
        edits.append[id(self.save.block.node.body)] = added
        edits.replace[id(self.save.stmt)] = without_save(self.save.stmt)
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

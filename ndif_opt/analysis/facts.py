"""Facts about what a script does with nnsight, computed once per tree and shared.

The facts are statement-level: every statement knows the suite (list of statements)
it sits in and its enclosing compound statements; every nnsight with-block
(``model.trace/.session/.generate``) knows its model, whether it is remote, its
enclosing loops and blocks. Expression-level questions (which names a region reads,
which objects it mutates, whether its code may run on the server) are answered on
demand by :mod:`ndif_opt.analysis.names` and :mod:`ndif_opt.analysis.effects`, memoized per node.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, TypeVar

import libcst as cst

from ndif_opt.analysis.names import NameUse, all_params, collect, free_reads, function_locals, target_names
from ndif_opt.analysis.vocabulary import MODEL_BLOCK_METHODS, STORING_METHODS
from ndif_opt.syntax.expressions import dotted_name, is_save_call, remote_arg, root_name
from ndif_opt.syntax.literals import literal_value  # the model's repo id, read in every version
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import find_nodes, walk

T = TypeVar("T")

# Classes whose instances are nnsight models, by their public import paths.
MODEL_CLASSES = frozenset(
    {
        "nnsight.LanguageModel",
        "nnsight.TransformersModel",
        "nnsight.NNsight",
        "nnsight.VisionLanguageModel",
        "nnsight.DiffusionModel",
        "nnsight.modeling.language.LanguageModel",
        "nnsight.modeling.transformers.TransformersModel",
        "nnsight.modeling.base.NNsight",
        "nnsight.models.LanguageModel.LanguageModel",
        "nnsight.models.NNsightModel.NNsight",
        "nnterp.StandardizedTransformer",
        "nnterp.standardized_transformer.StandardizedTransformer",
    }
)
MODEL_CLASS_NAMES = frozenset(path.rsplit(".", 1)[1] for path in MODEL_CLASSES)
# torch's grad-mode context managers: `@torch.no_grad()` on a plain function is its body
# run inside `with torch.no_grad():`, and `with torch.no_grad(), model.trace(...)` is a
# block under one (they run the same on the server)
CONTEXT_DECORATORS = frozenset(
    {"torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.autograd.no_grad",
     "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}
)
LOOP_TYPES = (cst.For, cst.While)


class Remote(str, Enum):
    """Whether a block's ``remote=`` flag is on."""

    YES = "yes"
    NO = "no"
    MAYBE = "maybe"  # a variable or expression whose value is not known statically


@dataclass(frozen=True)
class RemoteFlag:
    state: Remote
    expr: cst.BaseExpression | None = None  # the argument's value, None when absent
    reason: str = ""  # how the state was decided, for findings
    via_kwargs: bool = False  # passed inside `**kwargs`: cannot be removed from the call

    @property
    def code(self) -> str:
        if self.expr is None:
            return ""
        # asked of every block in every version: the code is kept by node

        return code_of(self.expr)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # the variable bound to the model
    class_path: str  # e.g. nnsight.LanguageModel
    repo_id: str | None  # the first argument when it is a string literal
    node: cst.CSTNode


@dataclass(eq=False, slots=True)  # one per statement per version of the tree
class StmtInfo:
    """Where a statement sits: its suite, its index there, and what encloses it."""

    node: cst.BaseStatement
    suite: cst.CSTNode  # Module or IndentedBlock owning the statement list
    index: int
    ancestors: tuple[cst.CSTNode, ...]  # enclosing compound statements, outermost first

    @property
    def function(self) -> cst.FunctionDef | None:
        for node in reversed(self.ancestors):
            if isinstance(node, cst.FunctionDef):
                return node
        return None

    def loops(self) -> tuple[cst.CSTNode, ...]:
        """Enclosing loops inside the statement's own function, outermost first."""
        found = []
        for node in reversed(self.ancestors):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(node, LOOP_TYPES):
                found.append(node)
        return tuple(reversed(found))


@dataclass(eq=False)
class Block:
    """A ``with <model>.trace/.session/.generate(...)`` statement."""

    node: cst.With
    call: cst.Call
    model: str  # the receiver's code, e.g. `model` or `self.llm`
    method: str  # trace | session | generate
    remote: RemoteFlag
    stmt: StmtInfo
    # the innermost enclosing nnsight block (no link back to the children: a cycle would
    # leave every version's blocks to the garbage collector)
    parent: "Block | None" = None

    @property
    def outermost(self) -> "Block":
        block = self
        while block.parent is not None:
            block = block.parent
        return block

    @property
    def effective_remote(self) -> Remote:
        """Remote-ness of the request this block belongs to (sessions pass it down)."""
        return self.outermost.remote.state

    @property
    def tracer_name(self) -> str | None:
        asname = next(i for i in self.node.items if i.item is self.call).asname
        if asname is not None and isinstance(asname.name, cst.Name):
            return asname.name.value
        return None

    @cached_property
    def names(self) -> NameUse:
        return collect(self.node.body)

    @cached_property
    def saved_names(self) -> frozenset[str]:
        """Names bound in the block to a value marked with `.save()`/`nnsight.save()`, or to
        the cache its tracer's `.cache()` returns (nnsight 0.8 saves it)."""
        saved = set()
        for assign in _assignments(self.node.body):
            if is_saved_expr(assign.value) or self._tracer_cache(assign.value):
                for target in assign.targets:
                    if type(target.target) is cst.Name:
                        saved.add(target.target.value)
        return frozenset(saved)

    def _tracer_cache(self, value: cst.BaseExpression) -> bool:
        """`tracer.cache(...)` of this block's tracer."""
        return (type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "cache"
                and self.tracer_name is not None and dotted_name(value.func.value) == self.tracer_name)


# literal containers whose contents in-place changes make unknown
_CONTAINER_DISPLAYS = (cst.List, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)


def opens_invoke(node: cst.CSTNode, tracer: str | None = None) -> bool:
    """`with tracer.invoke(...):` — of ``tracer`` when it is given."""
    if type(node) is not cst.With or len(node.items) != 1:
        return False
    call = node.items[0].item
    return (
        type(call) is cst.Call
        and type(call.func) is cst.Attribute
        and call.func.attr.value == "invoke"
        and (tracer is None or dotted_name(call.func.value) == tracer)
    )


def is_saved_expr(expr: cst.BaseExpression) -> bool:
    return is_save_call(expr)


def _assignments(node: cst.CSTNode) -> list[cst.Assign]:
    """The assignments outside nested functions, in the order of the code. An assignment
    is a (small) statement and no expression holds one: only statements are read, not
    the expressions a walk of every node would enter."""
    found: list[cst.Assign] = []
    _gather_assignments(node, found)
    return found


# the fields of a node that hold statements, in the order of the code (a function's body
# is left out: its assignments are not the enclosing code's)
_STATEMENT_FIELDS = {
    cst.Module: ("body",),
    cst.IndentedBlock: ("body",),
    cst.SimpleStatementLine: ("body",),
    cst.SimpleStatementSuite: ("body",),
    cst.For: ("body", "orelse"),
    cst.While: ("body", "orelse"),
    cst.If: ("body", "orelse"),
    cst.Else: ("body",),
    cst.Try: ("body", "handlers", "orelse", "finalbody"),
    cst.TryStar: ("body", "handlers", "orelse", "finalbody"),
    cst.ExceptHandler: ("body",),
    cst.ExceptStarHandler: ("body",),
    cst.Finally: ("body",),
    cst.With: ("body",),
    cst.ClassDef: ("body",),
    cst.Match: ("cases",),
    cst.MatchCase: ("body",),
}


def _gather_assignments(node: cst.CSTNode, found: list[cst.Assign]) -> None:
    kind = type(node)
    if kind is cst.Assign:
        found.append(node)
        return
    for name in _STATEMENT_FIELDS.get(kind, ()):
        value = getattr(node, name)
        if type(value) is tuple or type(value) is list:
            for item in value:
                _gather_assignments(item, found)
        elif value is not None:
            _gather_assignments(value, found)


@dataclass(eq=False)
class Facts:
    """Everything the passes and the cost model know about one module."""

    module: cst.Module
    imports: dict[str, str]  # local name -> qualified name (`np` -> `numpy`)
    models: dict[str, ModelInfo]
    functions: dict[str, cst.FunctionDef]  # module-level functions by name
    statements: dict[int, StmtInfo]  # id(statement) -> where it sits
    blocks: list[Block]
    bindings: dict[str, list[tuple[StmtInfo, cst.BaseExpression]]]  # simple `x = value`
    assume_remote: bool = False
    # the script's results as the code was written (see analysis.regions.script_results):
    # a rewritten version keeps the original's, None in the original's own facts
    original_results: frozenset[str] | None = None
    # answers about this version of the tree, computed once (see once)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def once(self, compute: Callable[..., T], *args: Hashable) -> T:
        """``compute(self, *args)``, once for this version of the tree: the one way a fact of
        a version is cached (docs/architecture.md, "Caching"). The key is the function and
        its arguments: ``compute`` is a module-level function (a lambda would be a new key
        at every call), an argument a node (libcst nodes hash and compare by identity;
        the memo keeps the node with its answer, so its id is not reused) or a value. The
        answer is shared: do not change it."""
        key = (compute, *args) if args else compute
        try:
            return self.memo[key]
        except KeyError:
            if compute.__name__ == "<lambda>":
                raise TypeError("Facts.once keys on the function: give it a named one, not a lambda") from None
            found = self.memo[key] = compute(self, *args)
            return found

    def known(self, compute: Callable[..., T], *args: Hashable) -> T | None:
        """What :meth:`once` has computed for these arguments, or None (nothing computed)."""
        return self.memo.get((compute, *args) if args else compute)

    def stmt(self, node: cst.CSTNode) -> StmtInfo:
        return self.statements[id(node)]

    def block_of(self, node: cst.With) -> Block | None:
        return self.once(Facts._blocks_by_node).get(id(node))

    def _blocks_by_node(self) -> dict[int, Block]:
        found: dict[int, Block] = {}
        for block in self.blocks:
            found.setdefault(id(block.node), block)  # (`with a.trace(), b.trace()`: the first)
        return found

    def blocks_within(self, node: cst.CSTNode) -> list[Block]:
        """nnsight blocks inside ``node`` (the statement itself included)."""
        return [b for b in self.blocks if b.node is node or node in b.stmt.ancestors]

    def in_session_fallback(self, suite: cst.CSTNode) -> bool:
        """Is the suite inside the handler of a session fallback (:func:`in_session_fallback`)?"""
        body = getattr(suite, "body", ())
        return bool(body) and in_session_fallback(body[0], self.stmt(body[0]).ancestors)

    def uses_nnsight(self) -> bool:
        return bool(self.blocks)

    def is_remote(self, state: Remote) -> bool:
        return state is Remote.YES or (state is Remote.MAYBE and self.assume_remote)

    def suite_body(self, suite: cst.CSTNode) -> tuple[cst.BaseStatement, ...]:
        return tuple(suite.body)

    def constant(self, name: str) -> cst.BaseExpression | None:
        """The value of a module-level name assigned exactly once, else None."""
        values = self.bindings.get(name, [])
        module_level = [v for s, v in values if not s.ancestors]
        if len(values) == 1 and len(module_level) == 1 and name not in self.once(_bound_otherwise):
            value = module_level[0]
            if type(value) in _CONTAINER_DISPLAYS and name in self.mutated_names():
                return None  # `xs = []` then `xs.append(...)`: its value is not the literal
            return value
        return None

    def changes_a_module(self, name: str, node: cst.CSTNode) -> bool:
        """Does ``node``, which changes ``name`` in place as far as names.collect can tell,
        change a module's object? Not a call: `torch.sort(x)` or `np.append(a, b)` is a
        function of the module an import binds (the name is bound by nothing else), not a
        list's `.sort()` or `.append()`."""
        return not (type(node) is cst.Call and name in self.imports and name not in self.bindings)

    def is_model_like(self, name: str) -> bool:
        """A model, or an alias of one of its modules (`layers = model.model.layers`)."""
        if name in self.models or name in self._block_handles():
            return True
        value = self.constant(name)
        return value is not None and root_name(value) in self.models

    def _block_handles(self) -> frozenset[str]:
        """The tracers and models the blocks name (`tracer` of `as tracer`, `model`)."""
        return self.once(Facts._handles)

    def _handles(self) -> frozenset[str]:
        return frozenset(name for block in self.blocks for name in (block.tracer_name, block.model) if name is not None)

    def mutated_names(self) -> frozenset[str]:
        """Names whose object the module changes in place anywhere (functions included)."""
        return self.once(Facts._mutated_names)

    def _mutated_names(self) -> frozenset[str]:
        return frozenset(collect(self.module).mutates)

    def changed_by_calls(self, node: cst.CSTNode) -> frozenset[str]:
        """Names of the module whose objects the script's own functions that ``node``
        calls change in place or bind (`push(x)` where `def push(item): queue.append(item)`),
        through the functions they call too; and every name bound to the same object as
        one of those or as a name ``node`` changes (`alias = prompts`: see :meth:`aliases`)."""
        changed = set(collect(node).mutates)
        for func in self.functions_called(node):
            use = collect(func.body)
            local = function_locals(func)
            changed |= {n for n in use.mutates if n not in local}
            changed |= {n for n in use.binds if n not in local}  # (`global` names)
        aliases = self.aliases()
        return frozenset(changed.union(*(aliases.get(n, ()) for n in changed)))

    def read_by_calls(self, node: cst.CSTNode) -> frozenset[str]:
        """Names of the module that the script's own functions ``node`` calls read, through
        the functions they call too (`next_word()` reading `context`): the call reads
        them where it runs."""
        return self.once(_read_by_calls, node)

    def functions_called(self, node: cst.CSTNode) -> list[cst.FunctionDef]:
        """The script's functions that ``node`` calls by name, and those they call, each
        once (in no particular order)."""
        found: dict[str, cst.FunctionDef] = {}
        todo = [node]
        while todo:
            for call in find_nodes(todo.pop(), lambda n: type(n) is cst.Call):
                name = call.func.value if type(call.func) is cst.Name else None
                if name in self.functions and name not in found:
                    found[name] = self.functions[name]
                    todo.append(found[name].body)
        return list(found.values())

    def grows_its_iterable(self, loop: cst.For) -> bool:
        """Does the loop's body add to the list it walks (`queue.append(...)`, in a function
        of the script it calls too, or through another name of the list)? Then it visits
        what it appends: its length is not the list's length before it, and its items are
        not the list as it starts. (A change of an item, `groups[key].append(...)`, adds
        nothing.)"""
        return self.once(Facts._grows_its_iterable, loop)

    def _grows_its_iterable(self, loop: cst.For) -> bool:
        if type(loop.iter) is not cst.Name:
            return False
        walked = {loop.iter.value} | self.aliases().get(loop.iter.value, frozenset())
        for body in [loop.body, *(func.body for func in self.functions_called(loop.body))]:
            for node in find_nodes(body, lambda n: type(n) in (cst.Call, cst.AugAssign)):
                if type(node) is cst.AugAssign:
                    if type(node.target) is cst.Name and node.target.value in walked:
                        return True
                    continue
                func = node.func
                if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in walked \
                        and func.attr.value in _GROWING_METHODS:
                    return True
        return False

    def aliases(self) -> dict[str, frozenset[str]]:
        """Module-level names bound to the same object by `a = b` (both plain names),
        grouped: each name of a group maps to the others."""
        return self.once(Facts._aliases)

    def _aliases(self) -> dict[str, frozenset[str]]:
        groups: dict[str, set[str]] = {}
        for stmt in self.module.body:
            if type(stmt) is not cst.SimpleStatementLine:
                continue
            for small in stmt.body:
                if type(small) is cst.Assign and type(small.value) is cst.Name and \
                        all(type(t.target) is cst.Name for t in small.targets):
                    group = {small.value.value, *(t.target.value for t in small.targets)}
                    for name in list(group):
                        group |= groups.get(name, set())
                    for name in group:
                        groups[name] = group
        return {name: frozenset(group - {name}) for name, group in groups.items()}


#: methods that add items to a container: those that store into it, and `__setitem__` called by name
_GROWING_METHODS = STORING_METHODS | {"__setitem__"}


# ---------------------------------------------------------------------------------------
# Building the facts
# ---------------------------------------------------------------------------------------


def _read_by_calls(facts: Facts, node: cst.CSTNode) -> frozenset[str]:
    """:meth:`Facts.read_by_calls` (asked of one statement by several checks of a split)."""
    read: set[str] = set()
    for func in facts.functions_called(node):
        read |= free_reads(func)
        # a default is the object it was made of (`def f(ctx=history)` reads `history`)
        for param in all_params(func.params):
            if param.default is not None:
                read |= set(collect(param.default).reads)
    return frozenset(read)


def _module_functions(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """The functions a module's own code defines: at the top level, and in the branches of
    its top-level `if`, `try` and `with` statements (`if not cached: def extract(...): ...`
    then a call in that branch) where the name is defined only there. A name two
    statements define (`if fast: def f` / `else: def f`) is left out: which one runs is
    decided when the script runs; so is one the module defines twice (a notebook's cell that
    defines `probe` again: each call runs the `def` above it, not the last one). Functions
    inside functions and classes are not the module's."""
    defined: dict[str, list[cst.FunctionDef]] = {}
    for stmt in module.body:
        if type(stmt) is cst.FunctionDef:
            defined.setdefault(stmt.name.value, []).append(stmt)
        elif type(stmt) in (cst.If, cst.Try, cst.With):
            for func in _branch_functions(stmt):
                defined.setdefault(func.name.value, []).append(func)
    return {name: found[0] for name, found in defined.items() if len(found) == 1}


def _branch_functions(stmt: cst.CSTNode) -> Iterator[cst.FunctionDef]:
    """The `def` statements in the suites of a compound statement, through nested `if`,
    `try` and `with` statements (not through loops, functions or classes)."""
    for suite in child_suites(stmt):
        for inner in suite.body:
            if type(inner) is cst.FunctionDef:
                yield inner
            elif type(inner) in (cst.If, cst.Try, cst.With):
                yield from _branch_functions(inner)


def analyze(module: cst.Module, *, assume_remote: bool = False,
            original_results: frozenset[str] | None = None) -> Facts:
    table = _Table()
    _walk_suite(module, (), table)
    statements = table.statements
    if table.count == len(statements):  # each statement in one place: the walk's order is the table's
        lines, withs = table.lines, table.withs
    else:  # a statement node in two places: its last place counts, at its first's turn
        lines = [line_facts(i.node) for i in statements.values() if type(i.node) is cst.SimpleStatementLine]
        withs = [i for i in statements.values() if type(i.node) is cst.With]
    imports: dict[str, str] = {}
    for facts in lines:
        if facts.imports:
            imports.update(facts.imports)
    functions = _module_functions(module)
    models = _models(lines, imports)
    facts = Facts(
        module=module,
        imports=imports,
        models=models,
        functions=functions,
        statements=statements,
        blocks=[],
        bindings=table.bindings,
        assume_remote=assume_remote,
        original_results=original_results,
    )
    facts.models = {name: _resolve_repo(info, facts) for name, info in models.items()}
    facts.blocks = _blocks(withs, facts)
    return facts


def _resolve_repo(info: ModelInfo, facts: Facts) -> ModelInfo:
    """`LanguageModel(MODEL_NAME)` / `LanguageModel(cfg.model_name)`: the repo id through
    module constants and config objects, when the script spells it out."""
    if info.repo_id is not None or not isinstance(getattr(info.node, "value", None), cst.Call):
        return info
    args = info.node.value.args
    if not args:
        return info
    value = args[0].value
    for _ in range(4):
        if isinstance(value, cst.SimpleString):
            text = literal_value(value)
            return ModelInfo(info.name, info.class_path, text if isinstance(text, str) else None, info.node)
        if isinstance(value, cst.Name):
            name = value.value
            value = facts.constant(name)
            if value is None:
                value = _passed_everywhere(info.node, name, facts)
        elif isinstance(value, (cst.Attribute, cst.Subscript)):
            value = config_entry(value, facts)
        else:
            return info
        if value is None:
            return info
    return info


def _passed_everywhere(node: cst.CSTNode, param: str, facts: Facts) -> cst.BaseExpression | None:
    """The one value the script gives ``param``, a parameter of the top-level function or
    method that holds ``node`` (`self.model = LanguageModel(name)` in `__init__`), at
    every call of it (`Runner("openai-community/gpt2")`; a method's class called), or its
    default when nothing calls it; None when the calls give it different code, or none."""
    for func, called in _functions_and_callers(facts.module):
        params = [p.name.value for p in func.params.params]
        if param not in params or not find_nodes(func.body, lambda n: n is node):
            continue
        position = params.index(param) - (1 if called != func.name.value else 0)  # (a method's `self`)
        default = next((p.default for p in func.params.params if p.name.value == param), None)
        given = []
        for call in find_nodes(facts.module, lambda n: type(n) is cst.Call and type(n.func) is cst.Name
                               and n.func.value == called):
            keyword = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == param), None)
            positional = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args):
                return None
            value = keyword if keyword is not None else positional[position].value \
                if 0 <= position < len(positional) else default
            if value is None:
                return None
            given.append(value)
        if not given:
            return default
        codes = {facts.module.code_for_node(v) for v in given}
        return given[0] if len(codes) == 1 else None
    return None


def _functions_and_callers(module: cst.Module):
    """(function, the name a call of it is spelled with): each top-level function, by its
    name, and each class's `__init__`, by the class's."""
    for stmt in module.body:
        if type(stmt) is cst.FunctionDef:
            yield stmt, stmt.name.value
        elif type(stmt) is cst.ClassDef and isinstance(stmt.body, cst.IndentedBlock):
            for member in stmt.body.body:
                if type(member) is cst.FunctionDef and member.name.value == "__init__":
                    yield member, stmt.name.value


class _Table:
    """What one walk over a module's statements gathers (one walk, and one look-up of each
    line's facts: the analysis runs after every change of the tree)."""

    __slots__ = ("statements", "bindings", "lines", "withs", "count")

    def __init__(self) -> None:
        self.statements: dict[int, StmtInfo] = {}  # id(statement) -> where it sits
        self.bindings: dict[str, list[tuple[StmtInfo, cst.BaseExpression]]] = {}
        self.lines: list[LineFacts] = []  # of the simple statement lines, in the walk's order
        self.withs: list[StmtInfo] = []  # the with statements, in the walk's order
        self.count = 0  # statements walked: more than the table holds when one is in two places


def _walk_suite(suite, ancestors, table: _Table) -> None:
    statements, bindings, lines, withs = table.statements, table.bindings, table.lines, table.withs
    body = suite.body
    table.count += len(body)
    index = 0
    for stmt in body:
        info = StmtInfo(stmt, suite, index, ancestors)
        index += 1
        statements[id(stmt)] = info
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            facts = line_facts(stmt)
            lines.append(facts)
            for name, value in facts.bindings:
                found = bindings.get(name)
                if found is None:
                    bindings[name] = [(info, value)]
                else:
                    found.append((info, value))
            continue
        if kind is cst.With:
            withs.append(info)
            inner = stmt.body
            if type(inner) is cst.IndentedBlock:  # (the one suite of a with, as child_suites finds)
                _walk_suite(inner, ancestors + (stmt,), table)
            continue
        suites = child_suites(stmt)
        if suites:
            inner_ancestors = ancestors + (stmt,)
            for child in suites:
                _walk_suite(child, inner_ancestors, table)


def child_suites(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    """The indented blocks directly owned by a compound statement."""
    # exact classes, not isinstance (an ABC check): libcst's statement classes have no
    # subclasses, and every version of every window asks this of every compound statement
    kind = type(stmt)
    if kind is cst.For or kind is cst.While:
        bodies = [stmt.body] if stmt.orelse is None else [stmt.body, stmt.orelse.body]
    elif kind is cst.If:
        bodies = [stmt.body]
        orelse = stmt.orelse
        if type(orelse) is cst.If:
            return [body for body in bodies if type(body) is cst.IndentedBlock] + _child_suites_if_chain(orelse)
        if type(orelse) is cst.Else:
            bodies.append(orelse.body)
    elif kind is cst.Try or kind is cst.TryStar:
        bodies = [stmt.body]
        bodies.extend(handler.body for handler in stmt.handlers)
        if stmt.orelse is not None:
            bodies.append(stmt.orelse.body)
        if stmt.finalbody is not None:
            bodies.append(stmt.finalbody.body)
    elif kind is cst.With or kind is cst.FunctionDef or kind is cst.ClassDef:
        bodies = [stmt.body]
    elif kind is cst.Match:
        bodies = [case.body for case in stmt.cases]
    else:
        return []
    return [body for body in bodies if type(body) is cst.IndentedBlock]


def _child_suites_if_chain(stmt: cst.If) -> list[cst.CSTNode]:
    # an `elif` is an If node nested in orelse, not a statement of its own: its suites
    # belong to the outer `if` statement
    return child_suites(stmt)


def module_import_name(facts: Facts, path: str) -> str:
    """The name an `import <path>` (or `import <path> as name`) of the module's own top level
    binds before its first nnsight block, where code the passes write there can read it; ""
    when no such import runs first (one in a function, a branch or a later cell may not)."""
    blocks = [facts.stmt(b.node) for b in facts.blocks]
    first = min((info.index if not info.ancestors else facts.stmt(info.ancestors[0]).index for info in blocks),
                default=len(facts.module.body))
    for stmt in facts.module.body[:first]:
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.Import:
                for local, qualified in _imported_names(small):
                    if qualified == path:
                        return local
    return ""


def _bound_otherwise(facts: Facts) -> frozenset[str]:
    """Names something other than a plain `name = value` binds somewhere in the module (a
    `for` or `with ... as` target, an unpacking, `a = b = v`, a walrus, a `def`, a `class`,
    an import, `except ... as`, `del`, a function's parameter): such a name holds more than
    its one assigned value. (A comprehension's variables are its own.)"""
    found: set[str] = set()
    for node in find_nodes(facts.module, lambda n: type(n) in _OTHER_BINDERS):
        kind = type(node)
        if kind is cst.Assign:
            if len(node.targets) > 1 or (type(node.targets[0].target) is not cst.Name
                                         and unpacked(node.targets[0].target, node.value) is None):
                found.update(n for t in node.targets for n in target_names(t.target))
        elif kind is cst.For:
            found.update(target_names(node.target))
        elif kind is cst.WithItem:
            if node.asname is not None:
                found.update(target_names(node.asname.name))
        elif kind is cst.NamedExpr:
            found.update(target_names(node.target))
        elif kind in (cst.FunctionDef, cst.ClassDef):
            found.add(node.name.value)
        elif kind in (cst.Import, cst.ImportFrom):
            found.update(local for local, _ in _imported_names(node))
        elif kind is cst.ExceptHandler:
            if node.name is not None:
                found.update(target_names(node.name.name))
        elif kind is cst.Del:
            found.update(target_names(node.target))
        elif kind is cst.Param:  # (a function's own name, in its body)
            found.add(node.name.value)
        elif kind in (cst.MatchAs, cst.MatchStar):  # `case LOW:` binds `LOW`
            if node.name is not None:
                found.add(node.name.value)
        elif kind is cst.MatchMapping:
            if node.rest is not None:
                found.add(node.rest.value)
        elif _rebinds_by_name(node):
            return _EVERY_NAME  # `globals()["LOW"] = 10`, `exec(...)`: any name may be bound again
    return frozenset(found)


class _EveryName(frozenset):
    """Every name (a module that binds names through its namespace)."""

    def __contains__(self, name: object) -> bool:
        return True


_EVERY_NAME = _EveryName()

# calls through which code binds names it does not spell (`globals()["x"] = 1`, `exec("x = 1")`)
_NAMESPACE_CALLS = frozenset({"globals", "vars", "locals", "exec", "eval", "setattr", "__import__"})


def _rebinds_by_name(node: cst.CSTNode) -> bool:
    """A call of a namespace function, or `sys.modules` read: either may bind any name."""
    if type(node) is cst.Call:
        return type(node.func) is cst.Name and node.func.value in _NAMESPACE_CALLS or \
            type(node.func) is cst.Attribute and node.func.attr.value in _NAMESPACE_CALLS
    return type(node) is cst.Attribute and node.attr.value == "modules" and type(node.value) is cst.Name \
        and node.value.value == "sys"


def unpacked(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]] | None:
    """`a, b = x, y`: each name of a tuple or list target with its element of a display of
    as many elements (no starred one on either side); None for any other unpacking."""
    if type(target) not in (cst.Tuple, cst.List) or type(value) not in (cst.Tuple, cst.List):
        return None
    if len(target.elements) != len(value.elements):
        return None
    pairs = []
    for name, element in zip(target.elements, value.elements):
        if type(name) is not cst.Element or type(element) is not cst.Element or type(name.value) is not cst.Name:
            return None
        pairs.append((name.value.value, element.value))
    return pairs


_OTHER_BINDERS = (cst.Assign, cst.For, cst.WithItem, cst.NamedExpr, cst.FunctionDef, cst.ClassDef, cst.Import,
                  cst.ImportFrom, cst.ExceptHandler, cst.Del, cst.Param, cst.MatchAs, cst.MatchStar,
                  cst.MatchMapping, cst.Call, cst.Attribute)


@dataclass(frozen=True)
class LineFacts:
    """What the analysis reads from one simple statement line: a function of the
    (immutable) line alone, kept across the versions of the tree that share it."""

    bindings: tuple[tuple[str, cst.BaseExpression | None], ...]  # `x = v`, `x: T = v`, `x += v` (None)
    imports: tuple[tuple[str, str], ...]  # local name -> qualified name, in order
    # (statement, call, the call's dotted function name) for `x = f(...)` and `x: T = f(...)`
    # with `f` a (dotted) name
    assigned_calls: tuple[tuple[cst.BaseSmallStatement, cst.Call, str], ...]


@functools.lru_cache(maxsize=8192)
def line_facts(stmt: cst.SimpleStatementLine) -> LineFacts:
    # exact classes, not isinstance (an ABC check, several per line): libcst's node
    # classes have no subclasses, and every new line of every version is read here
    bindings, imports, calls = [], [], []
    for small in stmt.body:
        kind = type(small)
        if kind is cst.Assign:
            if len(small.targets) == 1:
                target = small.targets[0].target
                if type(target) is cst.Name:
                    bindings.append((target.value, small.value))
                else:  # `prompt, n = "Once", 2`: each name its element
                    bindings.extend(unpacked(target, small.value) or ())
        elif kind is cst.AnnAssign or kind is cst.AugAssign:
            target = small.target
            if type(target) is cst.Name:
                bindings.append((target.value, small.value if kind is cst.AnnAssign else None))
        elif kind is cst.Import or kind is cst.ImportFrom:
            imports.extend(_imported_names(small))
            continue
        else:
            continue  # no binding, call or import
        if kind is not cst.AugAssign and type(small.value) is cst.Call:
            func = dotted_name(small.value.func)
            if func is not None:
                calls.append((small, small.value, func))
    return LineFacts(tuple(bindings), tuple(imports), tuple(calls))


def _imported_names(node: cst.BaseSmallStatement) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if type(node) is cst.Import:
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                found.append((alias.asname.name.value, full))
            else:
                root = full.split(".")[0]
                found.append((root, root))
    elif type(node) is cst.ImportFrom:
        if node.relative or node.module is None or type(node.names) is cst.ImportStar:
            return found
        base = dotted_name(node.module) or ""
        for alias in node.names:
            name = alias.name.value if type(alias.name) is cst.Name else None
            if name is None:
                continue
            local = name
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                local = alias.asname.name.value
            found.append((local, f"{base}.{name}"))
    return found


def grad_mode_context(decorator: cst.BaseExpression, facts: Facts) -> cst.BaseExpression | None:
    """The context manager a grad-mode decorator stands for (`@torch.no_grad` and
    `@torch.no_grad()` both give `torch.no_grad()`); None for any other decorator."""
    func = decorator.func if isinstance(decorator, cst.Call) else decorator
    if qualify(func, facts.imports) not in CONTEXT_DECORATORS:
        return None
    return decorator if isinstance(decorator, cst.Call) else cst.Call(func=decorator)


def qualify(expr: cst.BaseExpression, imports: dict[str, str]) -> str | None:
    """The qualified name an expression refers to through imports, e.g. `np.save`."""
    name = dotted_name(expr)
    if name is None:
        return None
    return qualify_dotted(name, imports)


def qualify_dotted(name: str, imports: dict[str, str]) -> str:
    """:func:`qualify` for the code of a dotted name."""
    head, _, rest = name.partition(".")
    if head in imports:
        return imports[head] + ("." + rest if rest else "")
    return name


def _is_model_class(path: str | None) -> bool:
    if path is None:
        return False
    if path in MODEL_CLASSES:
        return True
    root = path.split(".")[0]
    return root in ("nnsight", "nnterp") and path.rsplit(".", 1)[-1] in MODEL_CLASS_NAMES


def _models(lines: list["LineFacts"], imports: dict[str, str]) -> dict[str, ModelInfo]:
    models: dict[str, ModelInfo] = {}
    for facts in lines:
        for small, value, func in facts.assigned_calls:
            if not _is_model_class(qualify_dotted(func, imports)):
                continue
            targets = (
                [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            )
            repo = None
            if value.args and isinstance(value.args[0].value, cst.SimpleString):
                repo = literal_value(value.args[0].value)
            for target in targets:
                name = dotted_name(target)
                if name is not None:
                    models[name] = ModelInfo(name, qualify(value.func, imports) or "", repo, small)
    return models


def in_session_fallback(stmt: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...]) -> bool:
    """Does ``stmt`` sit in the handler of a session fallback, `try: <session> except
    Exception: <the code as written>` (then `else: <the replay>`, if any)? That code runs only when the
    session failed, as its author wrote it: no pass rewrites it and it sends no request
    in a run without failures."""
    inner = stmt
    for ancestor in reversed(ancestors):
        if type(ancestor) is cst.Try and _is_session_fallback(ancestor):
            if any(inner in handler.body.body for handler in ancestor.handlers):
                return True
        inner = ancestor
    return False


def _is_session_fallback(node: cst.Try) -> bool:
    if node.finalbody is not None or len(node.handlers) != 1:
        return False
    handler = node.handlers[0]
    if handler.name is not None or not (type(handler.type) is cst.Name and handler.type.value == "Exception"):
        return False
    return any(_opens_session(w) for w in find_nodes(node.body, lambda n: type(n) is cst.With))


def _opens_session(node: cst.With) -> bool:
    return any(
        type(item.item) is cst.Call and type(item.item.func) is cst.Attribute and item.item.func.attr.value == "session"
        for item in node.items
    )


def _blocks(withs: list[StmtInfo], facts: Facts) -> list[Block]:
    blocks: list[Block] = []
    by_node: dict[int, Block] = {}
    for info in withs:
        stmt = info.node
        if in_session_fallback(stmt, info.ancestors):
            continue  # the code as written, run only should the session fail
        call = _block_item(stmt, facts)
        receiver = None if call is None else model_block_receiver(call, facts)
        if receiver is None:
            continue
        block = Block(
            node=stmt,
            call=call,
            model=receiver,
            method=call.func.attr.value,
            remote=_remote_flag(call, remote_arg(call), info, facts),
            stmt=info,
        )
        blocks.append(block)
        by_node[id(stmt)] = block
    for block in blocks:
        for ancestor in reversed(block.stmt.ancestors):
            parent = by_node.get(id(ancestor))
            if parent is not None:
                block.parent = parent
                break
    return blocks


def model_block_receiver(call: cst.BaseExpression, facts: Facts) -> str | None:
    """The model ``call`` opens a block on, when it is `<model>.trace/.session/.generate(...)`
    of a model the script knows, or of any receiver given `remote=`; None otherwise."""
    if type(call) is not cst.Call or type(call.func) is not cst.Attribute:
        return None
    if call.func.attr.value not in MODEL_BLOCK_METHODS:
        return None
    receiver = dotted_name(call.func.value)
    if receiver is None or (receiver not in facts.models and remote_arg(call) is None):
        return None
    return receiver


def _block_item(stmt: cst.With, facts: Facts) -> cst.BaseExpression | None:
    """The item of a `with` that may open an nnsight block: its only item, or the last
    one after grad-mode contexts (`with torch.no_grad(), model.trace(...)`)."""
    items = stmt.items
    for other in items[:-1]:
        call = other.item
        if not (type(call) is cst.Call and qualify(call.func, facts.imports) in CONTEXT_DECORATORS) or other.asname:
            return None
    return items[-1].item


def call_remote_flag(call: cst.Call, facts: Facts, info: StmtInfo | None = None) -> RemoteFlag:
    """The `remote=` flag of any call (a block's, or a library function's that sends its
    own requests, such as nnterp's `run_prompts(..., remote=True)`)."""
    return _remote_flag(call, remote_arg(call), info, facts)


def _remote_flag(call: cst.Call, arg: cst.Arg | None, info: StmtInfo | None, facts: Facts) -> RemoteFlag:
    """The flag of a block's call, whose `remote=` argument is ``arg`` (None: none)."""
    if arg is None:
        for star in (a for a in call.args if a.star == "**"):
            state, reason = _kwargs_remote(star.value, facts)
            return RemoteFlag(state, None, reason, via_kwargs=True)
        return RemoteFlag(Remote.NO, None, "no `remote=` argument")
    state, _, reason = _truth(arg.value, facts, set(), info)
    return RemoteFlag(state, arg.value, reason)


def _kwargs_remote(expr: cst.BaseExpression, facts: Facts) -> tuple[Remote, str]:
    """`**kw` where `kw` is a module-level dict with a literal "remote" key."""
    code = code_of(expr)
    value = facts.constant(expr.value) if isinstance(expr, cst.Name) else None
    entry = _dict_entry(value, "remote") if value is not None else None
    if entry is None:
        return Remote.MAYBE, f"`**{code}` may carry `remote=`"
    state, _, _ = _truth(entry, facts, set(), None)
    return state, f"`{code}[\"remote\"]` is {_said(state)}"


def _dict_entry(value: cst.BaseExpression, key: str) -> cst.BaseExpression | None:
    """The value of ``key`` in a dict literal, `dict(key=...)` or `Namespace(key=...)` call."""
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if (
                isinstance(element, cst.DictElement)
                and isinstance(element.key, cst.SimpleString)
                and element.key.evaluated_value == key
            ):
                return element.value
        return None
    if isinstance(value, cst.Call):
        for arg in value.args:
            if arg.keyword is not None and arg.keyword.value == key:
                return arg.value
    return None


def _said(state: Remote) -> str:
    return {Remote.YES: "true", Remote.NO: "false", Remote.MAYBE: "unknown"}[state]


def _truth(expr: cst.BaseExpression, facts: Facts, seen: set[str], info: StmtInfo | None = None) -> tuple:
    # exact classes (libcst's have no subclasses): an ABC isinstance costs more than the answer
    kind = type(expr)
    if kind is cst.Name:
        if expr.value == "True":
            return Remote.YES, expr, "`remote=True`"
        if expr.value in ("False", "None"):
            return Remote.NO, expr, f"`remote={expr.value}`"
        if info is not None and info.function is not None:
            resolved = _parameter_truth(expr.value, info.function, facts)
            if resolved is not None:
                return resolved[0], expr, resolved[1]
        value = facts.constant(expr.value)
        if value is not None and expr.value not in seen:
            state, _, _ = _truth(value, facts, seen | {expr.value})
            if state is not Remote.MAYBE:
                return state, expr, f"`{expr.value}` is set to {state is Remote.YES} at module level"
        return Remote.MAYBE, expr, f"the value of `{expr.value}` is not known before running"
    if kind is cst.SimpleString:
        return (Remote.YES if expr.evaluated_value else Remote.NO), expr, "a string host"
    if kind is cst.Integer:
        return (Remote.YES if int(expr.value) else Remote.NO), expr, "an integer flag"
    code = code_of(expr)
    entry = config_entry(expr, facts)
    if entry is not None and code not in seen:
        state, _, _ = _truth(entry, facts, seen | {code})
        if state is not Remote.MAYBE:
            return state, expr, f"`{code}` is set to {state is Remote.YES} in the script"
    return Remote.MAYBE, expr, f"the value of `{code}` is not known before running"


def config_entry(expr: cst.BaseExpression, facts: Facts) -> cst.BaseExpression | None:
    """`cfg.remote` / `CONFIG["remote"]` / `Config.REMOTE` resolved through module code."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        owner, key = expr.value.value, expr.attr.value
        value = facts.constant(owner)
        if value is not None:
            entry = _dict_entry(value, key)
            if entry is not None:
                return entry
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                owner = value.func.value  # an instance of a class defined here
        return _class_attribute(facts.module, owner, key)
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            value = facts.constant(expr.value.value)
            if value is not None:
                return _dict_entry(value, index.value.evaluated_value)
    return None


def _class_attribute(module: cst.Module, cls: str, attr: str) -> cst.BaseExpression | None:
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == cls:
            for item in stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ():
                if isinstance(item, cst.SimpleStatementLine):
                    for small in item.body:
                        target = None
                        if isinstance(small, cst.Assign) and len(small.targets) == 1:
                            target, value = small.targets[0].target, small.value
                        elif isinstance(small, cst.AnnAssign) and small.value is not None:
                            target, value = small.target, small.value
                        if isinstance(target, cst.Name) and target.value == attr:
                            return value
    return None


def _parameter_truth(name: str, function: cst.FunctionDef, facts: Facts) -> tuple[Remote, str] | None:
    """A `remote` parameter: its default and what every call site in the file passes."""
    params = list(function.params.posonly_params) + list(function.params.params)
    kwonly = list(function.params.kwonly_params)
    param = next((p for p in params + kwonly if p.name.value == name), None)
    if param is None:
        return None
    position = params.index(param) if param in params else None
    calls, escapes = _calls_of(facts.module, function.name.value)
    if escapes:
        # `functools.partial(answer, ...)`, `map(answer, xs)`: calls no reader of calls sees
        return Remote.MAYBE, f"`{function.name.value}` is passed on as a value: what calls it there sets `{name}`"
    states: set[Remote] = set()
    for call in calls:
        passed = None
        for index, arg in enumerate(call.args):
            if arg.star:
                return Remote.MAYBE, f"`{function.name.value}` is called with `*args`/`**kwargs`"
            if arg.keyword is not None and arg.keyword.value == name:
                passed = arg.value
            elif arg.keyword is None and position is not None and index == position:
                passed = arg.value
        if passed is None:
            passed = param.default
        if passed is None:
            return Remote.MAYBE, f"`{name}` has no default"
        states.add(_truth(passed, facts, set(), None)[0])
    if not calls:
        # a library's entry point: its callers, elsewhere, set the flag (its default is only
        # what a caller that leaves it out gets)
        return Remote.MAYBE, f"no code in this file calls `{function.name.value}`: its callers set `{name}`"
    if len(states) == 1:
        state = states.pop()
        return state, f"`{name}` is {_said(state)} by every call of `{function.name.value}` in this file"
    return Remote.MAYBE, f"`{function.name.value}` is called with `{name}` both true and false"


def _calls_of(module: cst.Module, name: str) -> tuple[list[cst.Call], bool]:
    """The calls of the function ``name`` by its name, and whether the name is read
    otherwise too (the function passed on as a value: it is called where no one reads)."""
    finder = _CallsOf(name)
    walk(module, finder)
    return finder.found, finder.spelled > len(finder.found) + finder.defined


class _CallsOf(cst.CSTVisitor):
    """Calls of one function by name, and the other places the name stands (a class of
    its own: a class made per call is a reference cycle each time, left to the garbage
    collector)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found: list[cst.Call] = []
        self.spelled = 0  # names spelled so (an attribute's own name is not one)
        self.defined = 0  # `def`s and classes of that name

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Name and node.func.value == self.name:
            self.found.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.spelled += 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)  # (`x.answer` spells no name `answer`)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == self.name:
            self.defined += 1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if node.name.value == self.name:
            self.defined += 1

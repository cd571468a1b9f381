"""What a chunk of top-level statements reads and binds: def-use on ``ast`` for the windows
(windows.py), in one walk where it can."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ndif_opt.analysis.vocabulary import BLOCK_METHODS, MUTATING_METHODS, SAVE_METHODS
from ndif_opt.syntax.python_ast import children


@dataclass
class Chunk:
    """Whole lines ``[start, end)`` of the source holding top-level statements."""

    start: int
    end: int
    statements: list[ast.stmt]
    text: str = ""
    nnsight: bool = False
    reads: set[str] = field(default_factory=set)  # top-level reads not preceded by a binding here
    may_bind: set[str] = field(default_factory=set)
    definite: set[str] = field(default_factory=set)
    deferred: set[str] = field(default_factory=set)  # read when a function defined here runs
    globals_: set[str] = field(default_factory=set)  # declared `global` in a function here
    mutated: set[str] = field(default_factory=set)  # receivers of mutating calls / item stores
    mutated_in_blocks: set[str] = field(default_factory=set)  # the same, inside nnsight blocks
    receivers: set[str] = field(default_factory=set)  # `x` of `x.trace(...)` and friends: models
    # the `remote=` of its blocks, as code ("False" for none; ANY_FLAG for `**kwargs`)
    flags: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # every identifier mentioned
    active: bool = False  # opens an nnsight block or saves: something for the passes
    imports: dict[str, str] = field(default_factory=dict)  # name -> what an import binds it to
    functions: dict[str, set[str]] = field(default_factory=dict)  # top-level def -> its free names
    called: set[str] = field(default_factory=set)  # `f` of `f(...)` in top-level code
    escaping: set[str] = field(default_factory=set)  # other uses of names: as values, in bodies


# -- what a chunk reads and binds -------------------------------------------------------------


def describe_chunk(chunk: Chunk) -> None:
    """The flow's walk also gathers what the uses walk (:func:`_empty_stacks`) needs from the statements and
    expressions it knows; it leaves the rest on the uses walk's stacks (one walk instead of two
    over most of the code)."""
    flow = _Flow(chunk)
    bound: set[str] = set()
    for stmt in chunk.statements:
        bound = flow.statement(stmt, bound)
    chunk.definite = bound
    if flow.outside_later or flow.inside_later:
        _empty_stacks(chunk, {
            (False, False): flow.outside_later, (True, False): flow.inside_later, (False, True): [], (True, True): [],
        })


# the node classes the walks below test for most, by identity (ast makes no subclasses of them)
_Name, _Attribute, _Call, _Constant, _Subscript, _keyword, _Assign, _Load = (
    ast.Name, ast.Attribute, ast.Call, ast.Constant, ast.Subscript, ast.keyword, ast.Assign, ast.Load)
_Expr, _Tuple, _UnaryOp, _BinOp, _withitem, _For = ast.Expr, ast.Tuple, ast.UnaryOp, ast.BinOp, ast.withitem, ast.For
_With, _Dict = ast.With, ast.Dict
#: The node classes the uses walk looks at (ast makes no subclasses of them); it only walks through others.
_USES_KINDS = frozenset({
    ast.Name, ast.Call, ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
    ast.arg, ast.alias, ast.Global, ast.Nonlocal, ast.ExceptHandler, ast.Assign, ast.AugAssign,
    ast.AnnAssign, ast.Delete, ast.Lambda, ast.GeneratorExp,
})


def _empty_stacks(chunk: Chunk, stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """The uses walk over what the flow left: every name the code mentions, the receivers
    of model methods, what it changes in place (inside nnsight blocks or not), and which
    names it calls directly from top-level code (any other use of a name, including a
    call from a function body or a generator, lets it escape). The stacks are keyed by
    (inside an nnsight block, in a body that runs later); what the walk gathers are sets,
    so the order it looks in does not matter."""
    while any(stacks.values()):
        for (inside, in_body), stack in stacks.items():
            if stack:
                _walk_uses(chunk, stack, inside, in_body, stacks)


def _walk_uses(chunk: Chunk, stack: list[ast.AST], inside: bool, in_body: bool,
               stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """Empty one stack of the uses walk (:func:`_empty_stacks`). The node classes most code is made of are handled
    here, inline (most of the plan's time is this walk); the rarer classes of
    :data:`_USES_KINDS` by :func:`_use`, and every other class by listing its children."""
    names, escaping = chunk.names, chunk.escaping
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        if kind is _Name:
            names.add(current.id)
            escaping.add(current.id)
        elif kind is _Attribute:
            push(current.value)
        elif kind is _Constant:
            pass
        elif kind is _Call:
            func = current.func
            _note_remote_argument(chunk, current)
            if type(func) is _Name and not in_body:
                names.add(func.id)
                chunk.called.add(func.id)
            else:
                if type(func) is _Attribute:
                    _method_call(chunk, current, inside)
                push(func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
        elif kind is _Subscript:
            push(current.value)
            push(current.slice)
        elif kind is _keyword or kind is _Expr:
            push(current.value)
        elif kind is _Tuple:
            extend(current.elts)
        elif kind is _UnaryOp:
            push(current.operand)
        elif kind is _withitem:
            push(current.context_expr)
            if current.optional_vars is not None:
                push(current.optional_vars)
        elif kind is _For:
            push(current.target)
            push(current.iter)
            extend(current.body)
            extend(current.orelse)
        elif kind is _BinOp:
            push(current.left)
            push(current.right)
        elif kind is _Assign:
            for target in current.targets:
                if type(target) is not _Name:
                    _stored_into(chunk, target, inside)
            extend(current.targets)
            push(current.value)
        elif kind in _USES_KINDS:
            _use(chunk, current, inside, in_body, stacks)
        else:  # most other nodes: only their children matter here
            extend(children(current))


#: The methods whose calls tell _method_call something (and those ending in ``_``).
_TELLING_METHODS = BLOCK_METHODS | SAVE_METHODS | MUTATING_METHODS


def _method_call(chunk: Chunk, call: ast.Call, inside: bool) -> None:
    """``x.trace(...)``, ``x.save()``, ``x.append(...)``: what a method call tells the uses walk (:func:`_empty_stacks`)."""
    method = call.func.attr
    opens_block = method in BLOCK_METHODS
    if opens_block or method in SAVE_METHODS:
        chunk.active = True
    elif method not in MUTATING_METHODS and not method.endswith("_"):
        return  # (most calls: no need for the receiver's root)
    root = _root(call.func.value)
    if root and opens_block:
        chunk.receivers.add(root)
        chunk.flags.add(_remote_flag(call))
    if root and (method in MUTATING_METHODS or method.endswith("_")):
        (chunk.mutated_in_blocks if inside else chunk.mutated).add(root)


#: a block's `remote=` that the code does not spell out (passed in ``**kwargs``)
ANY_FLAG = "*"


def _remote_flag(call: ast.Call) -> str:
    """The code of the block's `remote=` ("False" without one; ANY_FLAG when it may come
    in ``**kwargs``)."""
    for keyword in call.keywords:
        if keyword.arg is None:
            return ANY_FLAG
        if keyword.arg == "remote":
            return ast.unparse(keyword.value)
    return "False"


def _stored_into(chunk: Chunk, target: ast.AST, inside: bool) -> None:
    """``x.a = ...``, ``x[i] = ...``, ``del x[i]``: the root ``x`` is changed in place."""
    for element in flattened(target):
        root = _root(element) if isinstance(element, (ast.Attribute, ast.Subscript)) else None
        if root:
            (chunk.mutated_in_blocks if inside else chunk.mutated).add(root)


def _use(chunk: Chunk, current: ast.AST, inside: bool, in_body: bool,
         stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """What one node of :data:`_USES_KINDS` tells the uses walk (:func:`_empty_stacks`); its children to look at
    go on the stack of their flags."""
    if isinstance(current, ast.Name):
        chunk.names.add(current.id)
        chunk.escaping.add(current.id)
        return
    if isinstance(current, ast.Call):
        _note_remote_argument(chunk, current)
    if isinstance(current, ast.Call) and isinstance(current.func, ast.Name) and not in_body:
        chunk.names.add(current.func.id)
        chunk.called.add(current.func.id)
        stacks[inside, in_body].extend([*current.args, *current.keywords])
        return
    if isinstance(current, (ast.With, ast.AsyncWith)) and any(
        _block_call(item.context_expr) for item in current.items
    ):
        stacks[inside, in_body].extend(current.items)
        stacks[True, in_body].extend(current.body)
        return
    if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        chunk.names.add(current.name)
    elif isinstance(current, ast.arg):
        chunk.names.add(current.arg)
    elif isinstance(current, ast.alias):
        chunk.names.add((current.asname or current.name).split(".")[0])
    elif isinstance(current, (ast.Global, ast.Nonlocal)):
        chunk.names.update(current.names)
    elif isinstance(current, ast.ExceptHandler) and current.name:
        chunk.names.add(current.name)
    elif isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
        _method_call(chunk, current, inside)
    elif isinstance(current, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = current.targets if isinstance(current, (ast.Assign, ast.Delete)) else [current.target]
        for target in targets:
            _stored_into(chunk, target, inside)
    # bodies run later, and so does a generator expression
    later = in_body or isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                            ast.GeneratorExp))
    stacks[inside, later].extend(children(current))


def attach_calls(chunks: list[Chunk]) -> dict[str, set[str]]:
    """A function only ever called by name from top-level code reads its globals where it
    is called: those reads become the caller's. Any other use (passed as a value, called
    from another function, decorated, bound twice) and they count wherever it could run.
    A function nothing calls or uses never runs, but the passes still read its body: its
    reads count where it is defined (so its window holds what they read, as the whole
    module does). Returns the free names of the functions of the first kind, by name."""
    defined: dict[str, int] = {}
    for chunk in chunks:
        for name in chunk.may_bind:
            defined[name] = defined.get(name, 0) + 1
    escaping = set().union(*(c.escaping for c in chunks))
    called = set().union(*(c.called for c in chunks))
    free_of: dict[str, set[str]] = {}
    for chunk in chunks:
        for name, free in chunk.functions.items():
            if name in escaping or defined.get(name) != 1 or name not in called:
                chunk.deferred |= free
            else:
                free_of[name] = free
    for chunk in chunks:
        for name in chunk.called & free_of.keys():
            chunk.reads |= free_of[name]
    return free_of


def _note_remote_argument(chunk: Chunk, call: ast.Call) -> None:
    """``f(..., remote=...)``: a function that may send requests of its own (nnterp's
    ``run_prompts``): the cost model counts them, so the chunk is one for the passes."""
    if call.keywords and any(keyword.arg == "remote" for keyword in call.keywords):
        chunk.active = True


def _block_call(node: ast.AST) -> bool:
    """``x.trace(...)``, ``x.session(...)``, ...: a call that opens an nnsight block."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BLOCK_METHODS


class _Flow:
    """Names read before being bound, in execution order, through one chunk; on the way,
    what the uses walk (:func:`_empty_stacks`) gathers from the same top-level code. What is not top-level code
    (function and class definitions) or is rare goes on the uses walk's stacks instead, with the
    flag saying whether it is inside an nnsight block."""

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.inside = False  # in the body of a `with` opening an nnsight block
        # what the flow leaves to the uses walk, outside and inside nnsight blocks (top-level code)
        self.outside_later: list[ast.AST] = []
        self.inside_later: list[ast.AST] = []
        self.later_stack = self.outside_later  # the one of the code being walked

    def read(self, node: ast.AST | None, bound: set[str]) -> None:
        """Top-level code read now: for the flow and for the uses walk."""
        if node is not None:  # (walrus targets are bound)
            _gather_names_and_uses(node, bound, self.chunk, self.inside, self.later_stack)

    def read_only(self, node: ast.AST | None, bound: set[str]) -> None:
        """For the flow only (the uses walk takes the statement itself, as a body that runs later)."""
        if node is not None:
            _gather_names(node, bound, self.chunk.reads, self.chunk.may_bind, self.chunk.deferred)

    def later(self, node: ast.AST) -> None:
        """Leave ``node`` to the uses walk."""
        self.later_stack.append(node)

    def bind(self, target: ast.AST, bound: set[str]) -> set[str]:
        chunk = self.chunk
        if type(target) is _Name:  # most targets
            name = target.id
            chunk.may_bind.add(name)
            chunk.names.add(name)  # (what the uses walk gathers from a name bound)
            chunk.escaping.add(name)
            return bound if name in bound else bound | {name}  # (the flow never changes a bound set)
        names = set()
        for element in flattened(target):
            if type(element) is _Name:
                names.add(element.id)
            else:  # x.a = ..., x[i] = ...: reads x (and what the index reads)
                self.read(element, bound)
        chunk.may_bind |= names
        chunk.names |= names
        chunk.escaping |= names
        return bound | names

    def body(self, statements: list[ast.stmt], bound: set[str]) -> set[str]:
        for stmt in statements:
            bound = self.statement(stmt, bound)
        return bound

    def with_statement(self, stmt: ast.With | ast.AsyncWith, bound: set[str]) -> set[str]:
        """Its items in order, then its body: inside an nnsight block if an item opens one."""
        opens_block = False
        for item in stmt.items:
            expr = item.context_expr
            _gather_names_and_uses(expr, bound, self.chunk, self.inside, self.later_stack)
            if type(expr) is _Call and type(expr.func) is _Attribute and expr.func.attr in BLOCK_METHODS:
                opens_block = True  # (what _block_call says)
            target = item.optional_vars
            if target is not None:
                bound = self.bind(target, bound)
        if self.inside or not opens_block:
            return self.body(stmt.body, bound)
        self.inside, self.later_stack = True, self.inside_later
        inner = self.body(stmt.body, bound)
        self.inside, self.later_stack = False, self.outside_later
        # what the block binds without saving it stays unbound after it (nnsight 0.5+), or
        # keeps what it held: a read after it may see a binding from before it
        return bound | (inner & _saved_in(stmt.body))

    def statement(self, stmt: ast.stmt, bound: set[str]) -> set[str]:  # noqa: C901 - one case per statement kind
        kind = type(stmt)
        if kind is _Assign:
            _gather_names_and_uses(stmt.value, bound, self.chunk, self.inside, self.later_stack)
            for target in stmt.targets:
                bound = self.bind(target, bound)
                if type(target) is not _Name:  # x.a = ..., x[i] = ...: x changed in place
                    _stored_into(self.chunk, target, self.inside)
            return bound
        if kind is _Expr:
            _gather_names_and_uses(stmt.value, bound, self.chunk, self.inside, self.later_stack)
            return bound
        if kind is _With:
            return self.with_statement(stmt, bound)
        if isinstance(stmt, ast.AugAssign):
            self.read(stmt.value, bound)
            self.read(_as_load(stmt.target), bound)
            _stored_into(self.chunk, stmt.target, self.inside)
            return self.bind(stmt.target, bound)
        if isinstance(stmt, ast.AnnAssign):
            self.read(stmt.value, bound)
            self.read(stmt.annotation, bound)
            _stored_into(self.chunk, stmt.target, self.inside)
            if stmt.value is None:
                self.later(stmt.target)  # not bound: only the uses walk looks at it
                return bound
            return self.bind(stmt.target, bound)
        if kind is _For or kind is ast.AsyncFor:
            self.read(stmt.iter, bound)
            inner = self.bind(stmt.target, bound)
            self.body(stmt.body, inner)
            self.body(stmt.orelse, bound)
            return bound  # the loop may not run
        if isinstance(stmt, ast.While):
            self.read(stmt.test, bound)
            self.body(stmt.body, bound)
            self.body(stmt.orelse, bound)
            return bound
        if isinstance(stmt, ast.If):
            self.read(stmt.test, bound)
            return self.body(stmt.body, bound) & self.body(stmt.orelse, bound)
        if kind is ast.AsyncWith:
            return self.with_statement(stmt, bound)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.later(stmt)
            for decorator in stmt.decorator_list:
                self.read_only(decorator, bound)
            if isinstance(stmt, ast.ClassDef):
                for base in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                    self.read_only(base, bound)
            else:
                self.read_only(_defaults(stmt.args), bound)
            free, globals_ = _function_names(stmt)
            if stmt in self.chunk.statements and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and not stmt.decorator_list:
                self.chunk.functions[stmt.name] = free  # where it is called decides
            else:
                self.chunk.deferred |= free
            self.chunk.globals_ |= globals_
            self.chunk.may_bind |= {stmt.name}
            return bound | {stmt.name}
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = set()
            for alias in stmt.names:
                name = (alias.asname or alias.name).split(".")[0]
                names.add(name)
                origin = alias.name if isinstance(stmt, ast.Import) else f"{'.' * stmt.level}{stmt.module}:{alias.name}"
                self.chunk.imports[name] = origin if alias.asname or isinstance(stmt, ast.ImportFrom) else name
            self.chunk.may_bind |= names
            self.chunk.names |= names  # (what the uses walk gathers from an import)
            return bound | names
        if isinstance(stmt, (ast.Expr, ast.Return, ast.Raise, ast.Assert)):
            for child in children(stmt):
                self.read(child, bound)
            return bound
        if isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            return bound
        # try, match, del, global, ...: every name read, every name possibly bound
        self.later(stmt)
        _gather_names(stmt, bound, self.chunk.reads, self.chunk.may_bind, self.chunk.deferred)
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.chunk.may_bind.add(node.name)
                self.chunk.globals_ |= _function_names(node)[1]
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:  # `case LOW:` binds `LOW`
                self.chunk.may_bind.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                self.chunk.may_bind.add(node.rest)
        return bound


def _saved_in(body: list[ast.stmt]) -> set[str]:
    """The names that statements of ``body`` (blocks nested in it included) bind to a saved
    value only: `x = ....save()`, `x = nnsight.save(...)`, and no other binding of `x`."""
    saved: set[str] = set()
    targets: set[int] = set()  # the names those statements bind
    stores: set[str] = set()  # names bound otherwise
    for stmt in body:
        for node in ast.walk(stmt):
            kind = type(node)
            if kind is _Assign and len(node.targets) == 1 and type(node.targets[0]) is _Name \
                    and type(node.value) is _Call and _is_save(node.value.func):
                saved.add(node.targets[0].id)
                targets.add(id(node.targets[0]))
            elif kind is _Name and type(node.ctx) is not _Load and id(node) not in targets:
                stores.add(node.id)
    return saved - stores


def _is_save(func: ast.AST) -> bool:
    return (type(func) is _Attribute and func.attr == "save") or (type(func) is _Name and func.id == "save")


def _as_load(target: ast.AST) -> ast.AST:
    return ast.Name(id=target.id, ctx=ast.Load()) if isinstance(target, ast.Name) else target


def _defaults(args: ast.arguments) -> ast.AST:
    values = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    annotations = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.annotation]
    return ast.Tuple(elts=values + annotations, ctx=ast.Load())


def flattened(target: ast.AST):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from flattened(element)
    elif isinstance(target, ast.Starred):
        yield from flattened(target.value)
    else:
        yield target


def _root(node: ast.AST) -> str | None:
    kind = type(node)
    while kind is _Attribute or kind is _Subscript or kind is _Call:
        node = node.func if kind is _Call else node.value
        kind = type(node)
    return node.id if kind is _Name else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


#: The node classes _expression_names looks at; it only walks through others.
_NAME_KINDS = frozenset({ast.Name, ast.NamedExpr, *_SCOPES})


def _expression_names(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names read now, names bound by `:=`, names read later by a function defined here)."""
    free: set[str] = set()
    stores: set[str] = set()
    deferred: set[str] = set()
    _gather_names(node, _NOTHING_BOUND, free, stores, deferred)
    return free, stores, deferred


_NOTHING_BOUND: frozenset[str] = frozenset()


def _gather_names(node: ast.AST, bound: set[str] | frozenset[str], free: set[str], stores: set[str],
                  deferred: set[str]) -> None:
    """:func:`_expression_names` added into the caller's sets (the flow's walk calls it for
    every expression: no sets of its own to make and merge), leaving out of ``free`` the
    names in ``bound``."""
    stack = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        # the classes most code is made of first, inline: this walk is much of the plan's time
        if kind is _Name:
            if type(current.ctx) is not _Load:
                stores.add(current.id)
            elif current.id not in bound:
                free.add(current.id)
            continue
        if kind is _Attribute:
            push(current.value)
            continue
        if kind is _Call:
            push(current.func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
            continue
        if kind is _Constant:
            continue
        if kind is _Subscript:
            push(current.value)
            push(current.slice)
            continue
        if kind is _Tuple:
            extend(current.elts)
            continue
        if kind is _UnaryOp:
            push(current.operand)
            continue
        if kind is _BinOp:
            push(current.left)
            push(current.right)
            continue
        if kind not in _NAME_KINDS:  # most other nodes: only their children matter here
            extend(children(current))
            continue
        if isinstance(current, ast.NamedExpr):
            stores.add(current.target.id)
            stack.append(current.value)
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner, comp_stores = _comprehension_names(current)
            free |= inner - bound
            stores |= comp_stores
            continue
        if isinstance(current, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner, _ = _function_names(current)
            free |= inner - bound  # a lambda may run at once
            deferred |= inner
            continue
        stack.extend(children(current))


#: The node classes that either walk looks at, beyond names and calls: _gather_names_and_uses
#: leaves them to the two walks (comprehensions, lambdas, `:=`: rare in top-level code).
_EITHER_KINDS = (_NAME_KINDS | _USES_KINDS) - {ast.Name, ast.Call}


def _gather_names_and_uses(node: ast.AST, bound: set[str], chunk: Chunk, inside: bool,
                           uses_stack: list[ast.AST]) -> None:
    """:func:`_gather_names` into the chunk's reads, and what :func:`_walk_uses` gathers,
    in one walk over an expression of top-level code (``inside`` an nnsight block or not).
    Subtrees of :data:`_EITHER_KINDS` go to both walks: to _gather_names now, and on
    ``uses_stack`` for the uses walk."""
    free, stores, deferred = chunk.reads, chunk.may_bind, chunk.deferred
    names, escaping, called = chunk.names, chunk.escaping, chunk.called
    stack = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        while kind is _Attribute:  # (only its object matters to either walk)
            current = current.value
            kind = type(current)
        if kind is _Name:
            name = current.id
            names.add(name)
            escaping.add(name)
            if type(current.ctx) is not _Load:
                stores.add(name)
            elif name not in bound:
                free.add(name)
        elif kind is _Constant:
            pass
        elif kind is _Call:
            func = current.func
            _note_remote_argument(chunk, current)
            if type(func) is _Name:  # called from top-level code: not escaping
                name = func.id
                names.add(name)
                called.add(name)
                if name not in bound:
                    free.add(name)
            elif type(func) is _Attribute:
                method = func.attr
                if method in _TELLING_METHODS or method.endswith("_"):
                    _method_call(chunk, current, inside)
                push(func.value)
            else:
                push(func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
        elif kind is _Subscript:
            push(current.value)
            push(current.slice)
        elif kind is _Tuple:
            extend(current.elts)
        elif kind is _UnaryOp:
            push(current.operand)
        elif kind is _BinOp:
            push(current.left)
            push(current.right)
        elif kind is _Dict:
            extend(current.values)
            extend([key for key in current.keys if key is not None])  # (None: a `**mapping`)
        elif kind in _EITHER_KINDS:
            _gather_names(current, bound, free, stores, deferred)
            uses_stack.append(current)
        else:  # most other nodes: only their children matter to either walk
            extend(children(current))


def _comprehension_names(node) -> tuple[set[str], set[str]]:
    """(free names, names bound by `:=`); the first iterable is read in the enclosing scope."""
    targets: set[str] = set()
    for generator in node.generators:
        targets |= {e.id for e in flattened(generator.target) if isinstance(e, ast.Name)}
    outer, stores, _ = _expression_names(node.generators[0].iter)
    free = set(outer)
    parts = [*node.generators[0].ifs]
    for generator in node.generators[1:]:
        parts += [generator.iter, *generator.ifs]
    parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    for part in parts:
        inner, inner_stores, _ = _expression_names(part)
        free |= inner - targets
        stores |= inner_stores  # `:=` in a comprehension binds in the enclosing scope
    return free, stores


def _function_names(node) -> tuple[set[str], set[str]]:
    """(free names a function or class body reads, names it declares ``global``).

    Over-approximates the free names: only names bound at the function's own level
    (parameters, assignments, imports, nested definitions) are local."""
    globals_: set[str] = set()
    local: set[str] = set()
    loads: set[str] = set()
    if isinstance(node, ast.Lambda):
        body: list[ast.AST] = [node.body]
    else:
        body = list(node.body)
    if not isinstance(node, ast.ClassDef):
        args = node.args
        local |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    stack = list(body)
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Global):
            globals_ |= set(current.names)
            continue
        if isinstance(current, ast.Name):
            if isinstance(current.ctx, ast.Load):
                loads.add(current.id)
            else:
                local.add(current.id)
            continue
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.add(current.name)
            inner, inner_globals = _function_names(current)
            loads |= inner
            globals_ |= inner_globals
            for decorator in current.decorator_list:
                stack.append(decorator)
            continue
        if isinstance(current, ast.Lambda):
            loads |= _function_names(current)[0]
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner, inner_stores = _comprehension_names(current)
            loads |= inner
            local |= inner_stores
            continue
        if isinstance(current, (ast.Import, ast.ImportFrom)):
            local |= {(a.asname or a.name).split(".")[0] for a in current.names}
            continue
        if isinstance(current, ast.ExceptHandler) and current.name:
            local.add(current.name)
        stack.extend(children(current))
    return (loads - (local - globals_)) | globals_, globals_

"""Which names a piece of code reads, binds and mutates — a light def-use analysis.

libcst's ScopeProvider is exact but costs several seconds on a large file; ndif-opt only
needs conservative answers to three questions about a region of code: which names it
reads, which it binds, and which objects bound elsewhere it mutates in place. Over-
approximating reads and binds only makes a pass refuse more often, never miscompile.
"""

from __future__ import annotations

import functools
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.vocabulary import ARGUMENT_MUTATORS, CONTAINER_MUTATORS, MUTATING_METHODS, STORING_METHODS
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.walk import children, find_nodes, walk

#: The comprehensions: each has its own scope for the names its `for` binds.
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
#: Builtins that change none of their arguments (not even an iterator's position).
PURE_BUILTINS = frozenset(
    {
        "len", "str", "repr", "int", "float", "bool", "isinstance", "type", "hash", "id", "format",
        "print", "abs", "round", "divmod", "pow", "ord", "chr", "range",
    }
)  # fmt: skip
#: Builtins that change nothing at all (print writes to the output).
EFFECT_FREE_BUILTINS = PURE_BUILTINS - {"print"}



def fresh_name(base: str, taken: Container[str], *, first: int = 2, separator: str = "_") -> str:
    """``base``, or else ``base_2``, ``base_3``...: the first that is not in ``taken``. The
    one way the passes name what they add to a script (``taken``: the names the code uses
    and those given out already; each pass knows which those are).

    ``first``/``separator``: trace-fusion's sweeps number from ``_1``, reduction-pushdown
    and session-chunking write ``x_argmax2``/``_ndif_chunk2``. Kept, so that ndif-opt
    optimizes a script as it did before; one numbering for all is an output change."""
    name, number = base, first
    while name in taken:
        name, number = f"{base}{separator}{number}", number + 1
    return name


# Methods that convert or copy a value without saying anything about what it is.
_PLUMBING_METHODS = frozenset(
    {"item", "tolist", "cpu", "detach", "float", "double", "half", "clone", "copy", "numpy", "contiguous",
     "to", "squeeze", "strip"}
)


def describing_name(expr: cst.BaseExpression, *, parts: int = 2) -> str:
    """A name that says what ``expr`` holds, for a value the passes store under a name of
    their own: `logits.shape` → ``logits_shape``, `example['question'][:50]` →
    ``example_question_head``, `probs[answer]` → ``probs_answer``, `x[0, -1].argmax().item()`
    → ``x_argmax``, `len(states)` → ``len_states``. Numeric indexes and conversions
    (`.item()`, `.cpu()`) say nothing and are left out, but for a value nothing else
    describes (`ranks[-1]` → ``ranks_last``, `xs[0]` → ``xs_first``); the root is followed
    by the ``parts`` words nearest the value."""
    words: list[str] = []
    end = ""  # `ranks[-1]` is not `ranks`: when nothing else describes it, the last of them
    while True:
        kind = type(expr)
        if kind is cst.Attribute:
            words.append(expr.attr.value)
            expr = expr.value
        elif kind is cst.Subscript:
            words += reversed([word for element in expr.slice if (word := _index_word(element.slice))])
            if not end and len(expr.slice) == 1:
                end = _end_word(expr.slice[0].slice)
            expr = expr.value
        elif kind is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value not in _PLUMBING_METHODS:
                words.append(expr.func.attr.value)
            expr = expr.func.value
        elif kind is cst.Call and type(expr.func) is cst.Name and len(expr.args) == 1:
            return _identifier(f"{expr.func.value}_{describing_name(expr.args[0].value, parts=parts)}")
        else:
            break
    root = expr.value if type(expr) is cst.Name else "value"
    described = words[:parts][::-1] or ([end] if end else [])
    return _identifier("_".join([root, *described]))


def _index_word(index: cst.BaseSlice) -> str:
    """What an index says: a string key (`['question']`), a name (`probs[0, answer]`: the
    answer's), the head or tail a slice keeps (`[:50]`, `[-n:]`); a number says nothing."""
    if isinstance(index, cst.Slice):
        if index.step is not None or (index.lower is None) == (index.upper is None):
            return "" if index.lower is None and index.step is None else "slice"
        return "head" if index.lower is None else "tail"
    if isinstance(index.value, cst.SimpleString):
        return index.value.raw_value  # (not evaluated_value: literal_eval leaves reference cycles)
    return index.value.value if type(index.value) is cst.Name else ""


def _end_word(index: cst.BaseSlice) -> str:
    """`first` for a lone `[0]`, `last` for a lone `[-1]`: the one element of a sequence
    the index keeps, which a name must not confuse with the whole."""
    if type(index) is not cst.Index:
        return ""
    code = cst.Module([]).code_for_node(index.value).replace(" ", "")
    return {"0": "first", "-1": "last"}.get(code, "")


def _identifier(text: str) -> str:
    """``text`` as a Python identifier: other characters become `_`, never a leading digit."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in text).strip("_") or "value"
    return f"_{name}" if name[0].isdigit() else name


@dataclass
class NameUse:
    """Names read, bound and mutated by some code; each maps to the first node seen."""

    reads: dict[str, cst.CSTNode] = field(default_factory=dict)
    binds: dict[str, cst.CSTNode] = field(default_factory=dict)
    mutates: dict[str, cst.CSTNode] = field(default_factory=dict)
    # `global`/`nonlocal`/`return`/`yield`/`await` seen: code that cannot move as a unit
    control: list[tuple[str, cst.CSTNode]] = field(default_factory=list)

    def merge(self, other: "NameUse") -> None:
        for mine, theirs in (
            (self.reads, other.reads),
            (self.binds, other.binds),
            (self.mutates, other.mutates),
        ):
            if not mine:
                mine.update(theirs)  # (the same as the loop below, in one call)
            elif theirs and not theirs.keys() <= mine.keys():
                for name, node in theirs.items():
                    mine.setdefault(name, node)
        if other.control:
            self.control.extend(other.control)


# (type checks, not isinstance: see ndif_opt.syntax.expressions)
def mutated_roots(expr: cst.BaseExpression) -> list[str]:
    """The names whose objects a change made through ``expr`` is known to reach: `a` for
    `a[0].b` and for `a.get(k)[0]` (a method's result may be part of its object); none for
    a function's result (`layer_output(model, i)[0] = v` changes what the function returned,
    never `layer_output`; that a call may change what it is given is :func:`may_change`'s)."""
    while True:
        kind = type(expr)
        if kind is cst.Name:
            return [expr.value]
        if kind is cst.Attribute or kind is cst.Subscript:
            expr = expr.value
        elif kind is cst.Call and type(expr.func) is cst.Name:
            return []
        elif kind is cst.Call:
            expr = expr.func
        elif kind is cst.IfExp:  # `(hits if ok else misses).append(p)`: either one
            return mutated_roots(expr.body) + mutated_roots(expr.orelse)
        elif kind is cst.BooleanOperation:  # `(cache or fallback).append(p)`
            return mutated_roots(expr.left) + mutated_roots(expr.right)
        elif kind is cst.NamedExpr:
            return mutated_roots(expr.value)
        else:
            return []


class _Collector(cst.CSTVisitor):
    def __init__(self, whole_statements: bool = False) -> None:
        self.use = NameUse()
        # the statements of a suite are collected (and cached) one by one and merged:
        # the result is the same, names in the order first seen
        self.whole_statements = whole_statements

    def visit_Module(self, node: cst.Module) -> bool:
        return self._suite(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return self._suite(node.body)  # (statements sit only in modules and indented blocks)

    def _suite(self, statements) -> bool:
        if not self.whole_statements:
            return True
        for statement in statements:
            self.use.merge(_collect_whole(statement))
        return False

    def _walk_value(self, expr: cst.BaseExpression) -> None:
        """``walk(expr, self)``, without a walk for the commonest values: an attribute
        chain is walked from its root (visit_Attribute walks only the value), and a name
        is just read (it holds only layout)."""
        kind = type(expr)
        while kind is cst.Attribute:
            expr = expr.value
            kind = type(expr)
        if kind is cst.Name:
            self.use.reads.setdefault(expr.value, expr)
        else:
            walk(expr, self)

    # -- binding forms -------------------------------------------------------------
    def _bind_target(self, target: cst.BaseExpression) -> None:
        kind = type(target)  # (final classes: see ndif_opt.syntax.expressions)
        if kind is cst.Name:
            self.use.binds.setdefault(target.value, target)
        elif kind is cst.Tuple or kind is cst.List:
            for element in target.elements:
                self._bind_target(element.value)
        elif kind is cst.StarredElement:
            self._bind_target(target.value)
        elif kind is cst.Subscript or kind is cst.Attribute:
            # `x[i] = v` / `x.a = v` mutate the object bound to `x`
            for name in mutated_roots(target):
                self.use.mutates.setdefault(name, target)
            self._walk_value(target)  # the index and the base are read

    def visit_Assign(self, node: cst.Assign) -> bool:
        for target in node.targets:
            self._bind_target(target.target)
        self._walk_value(node.value)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._bind_target(node.target)
        if node.value is not None:
            self._walk_value(node.value)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        target = node.target
        if isinstance(target, cst.Name):
            # `acc += [x]` both reads and rebinds; for a list it also mutates in place
            self.use.reads.setdefault(target.value, target)
            self.use.binds.setdefault(target.value, target)
            self.use.mutates.setdefault(target.value, target)
        else:
            self._bind_target(target)
        self._walk_value(node.value)
        return False

    def visit_For(self, node: cst.For) -> bool:
        self._bind_target(node.target)
        self._walk_value(node.iter)
        walk(node.body, self)
        if node.orelse is not None:
            walk(node.orelse, self)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> bool:
        self._bind_target(node.target)
        self._walk_value(node.iter)
        for condition in node.ifs:
            walk(condition, self)
        if node.inner_for_in is not None:
            walk(node.inner_for_in, self)
        return False

    # a comprehension's targets are its own (Python 3): `[a.sum() for a in acts]` reads
    # `acts` and binds nothing outside; a walrus in it binds where the comprehension is
    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return self._comprehension(node.for_in, (node.elt,))

    def visit_SetComp(self, node: cst.SetComp) -> bool:
        return self._comprehension(node.for_in, (node.elt,))

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return self._comprehension(node.for_in, (node.elt,))

    def visit_DictComp(self, node: cst.DictComp) -> bool:
        return self._comprehension(node.for_in, (node.key, node.value))

    def _comprehension(self, for_in: cst.CompFor, elements: tuple[cst.BaseExpression, ...]) -> bool:
        outer, inner = self.use, NameUse()
        self.use = inner
        try:
            for element in elements:
                walk(element, self)
            walk(for_in, self)  # visit_CompFor: its targets, iterables and conditions
        finally:
            self.use = outer
        own = comprehension_targets(for_in)
        # the first iterable is evaluated outside the comprehension: its names are the
        # enclosing scope's even where a target has the same name (`[x for x in x]`)
        first = _Collector()
        first._walk_value(for_in.iter)
        for mine, theirs in ((outer.reads, inner.reads), (outer.binds, inner.binds), (outer.mutates, inner.mutates)):
            for name, node in theirs.items():
                if name not in own or (mine is outer.reads and name in first.use.reads):
                    mine.setdefault(name, node)
        if inner.control:
            outer.control.extend(inner.control)
        return False

    # -- `match` patterns: a capture binds its name; a class or a dotted value is read; the
    # keyword of `Point(x=...)` is an attribute name, not a read
    def visit_MatchAs(self, node: cst.MatchAs) -> bool:
        if node.pattern is not None:
            walk(node.pattern, self)
        if node.name is not None:
            self._bind_target(node.name)
        return False

    def visit_MatchStar(self, node: cst.MatchStar) -> bool:
        if node.name is not None:
            self._bind_target(node.name)
        return False

    def visit_MatchMapping(self, node: cst.MatchMapping) -> bool:
        for element in node.elements:
            walk(element.key, self)
            walk(element.pattern, self)
        if node.rest is not None:
            self._bind_target(node.rest)
        return False

    def visit_MatchSingleton(self, node: cst.MatchSingleton) -> bool:
        return False  # `None`, `True`, `False`: constants, not names

    def visit_MatchClass(self, node: cst.MatchClass) -> bool:
        self._walk_value(node.cls)
        for element in node.patterns:
            walk(element.pattern, self)
        for keyword in node.kwds:
            walk(keyword.pattern, self)
        return False

    def visit_WithItem(self, node: cst.WithItem) -> bool:
        self._walk_value(node.item)
        if node.asname is not None:
            self._bind_target(node.asname.name)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        self._bind_target(node.target)
        self._walk_value(node.value)
        return False

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        if node.type is not None:
            walk(node.type, self)
        if node.name is not None:
            self._bind_target(node.name.name)
        walk(node.body, self)
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            if alias.asname is not None:
                self._bind_target(alias.asname.name)
            else:
                self.use.binds.setdefault(dotted_name(alias.name).split(".")[0], alias)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if isinstance(node.names, cst.ImportStar):
            self.use.control.append(("import *", node))
            return False
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            if isinstance(bound, cst.Name):
                self._bind_target(bound)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.use.binds.setdefault(node.name.value, node.name)
        for decorator in node.decorators:
            walk(decorator, self)
        self._defaults(node.params)
        # the body's free names are read when the function runs: count them as reads,
        # but the body's own bindings and returns are its own business (a name the body
        # binds is its local wherever the body reads it: `with ... as tracer` in a function
        # reads no `tracer` of the module)
        inner = collect(node.body)
        params = {p.name.value for p in all_params(node.params)}
        local = function_locals(node)  # (its parameters among them)
        for name, n in inner.reads.items():
            if name not in local:
                self.use.reads.setdefault(name, n)
        for name, n in inner.mutates.items():
            if name not in params and name not in inner.binds:
                self.use.mutates.setdefault(name, n)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.use.binds.setdefault(node.name.value, node.name)
        inner = collect(node.body)
        for name, n in inner.reads.items():
            self.use.reads.setdefault(name, n)
        return False

    def _defaults(self, params: cst.Parameters) -> None:
        """A parameter's default is read where the function is defined (`lambda x, w=w:`
        reads `w` there)."""
        for param in all_params(params):
            if param.default is not None:
                walk(param.default, self)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self._defaults(node.params)
        params = {p.name.value for p in all_params(node.params)}
        inner = collect(node.body)
        for name, n in inner.reads.items():
            if name not in params:
                self.use.reads.setdefault(name, n)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        target = node.target
        if isinstance(target, cst.Name):
            self.use.binds.setdefault(target.value, target)
        else:
            self._bind_target(target)
        return False

    # -- effects ---------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Attribute and (func.attr.value in CONTAINER_MUTATORS or _in_place(func.attr.value)):
            for name in mutated_roots(func.value):  # (`acc.add_(x)`: torch's in-place methods too)
                self.use.mutates.setdefault(name, node)
        # `random.shuffle(xs)`, `rng.shuffle(xs)`, `heapq.heappush(h, x)`: the first argument
        called = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
        if called in ARGUMENT_MUTATORS and node.args and not node.args[0].keyword and not node.args[0].star:
            for name in mutated_roots(node.args[0].value):
                self.use.mutates.setdefault(name, node)

    def visit_Global(self, node: cst.Global) -> None:
        self.use.control.append(("global", node))

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.use.control.append(("nonlocal", node))

    def visit_Return(self, node: cst.Return) -> None:
        self.use.control.append(("return", node))

    def visit_Yield(self, node: cst.Yield) -> None:
        self.use.control.append(("yield", node))

    def visit_Await(self, node: cst.Await) -> None:
        self.use.control.append(("await", node))

    # -- reads -----------------------------------------------------------------------
    def visit_Name(self, node: cst.Name) -> None:
        self.use.reads.setdefault(node.value, node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._walk_value(node.value)  # `.attr` is not a name read
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self._walk_value(node.value)  # a keyword is not a name read
        return False


class _SkippingCollector(_Collector):
    """Leaves out the subtrees in ``skip``."""

    def __init__(self, skip: tuple[cst.CSTNode, ...]) -> None:
        super().__init__()
        self.skip = {id(node) for node in skip}

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.skip and super().on_visit(node)

    def _walk_value(self, expr: cst.BaseExpression) -> None:
        walk(expr, self)  # every node passes the hook (a name may be left out)


#: The node classes of a block's body: a walk that leaves bodies out can refuse them in
#: the visit methods of these two classes, with no ``on_visit`` hook (which would see
#: every node, layout included).
BODY_KINDS = frozenset({cst.IndentedBlock, cst.SimpleStatementSuite})


class _BodySkippingCollector(_Collector):
    """:class:`_SkippingCollector` for the usual ``skip``, bodies of blocks
    (:data:`BODY_KINDS`)."""

    def __init__(self, skip: tuple[cst.CSTNode, ...]) -> None:
        super().__init__()
        self.skip = {id(node) for node in skip}

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return id(node) not in self.skip and super().visit_IndentedBlock(node)

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
        return id(node) not in self.skip


def comprehension_targets(for_in: cst.CompFor) -> set[str]:
    """The names the `for` clauses of a comprehension bind: its own variables."""
    own: set[str] = set()
    comp: cst.CompFor | None = for_in
    while comp is not None:
        own.update(_target_names(comp.target))
        comp = comp.inner_for_in
    return own


def _target_names(target: cst.BaseExpression) -> list[str]:
    """The names a `for` target binds (`x`, `i, (a, b)`, `*rest`); none for `x.a` or `x[i]`."""
    kind = type(target)
    if kind is cst.Name:
        return [target.value]
    if kind is cst.Tuple or kind is cst.List:
        return [name for element in target.elements for name in _target_names(element.value)]
    if kind is cst.StarredElement:
        return _target_names(target.value)
    return []


def function_locals(func: cst.FunctionDef) -> frozenset[str]:
    """The names local to a function: its parameters and what its body binds, but those
    it declares `global` or `nonlocal`."""
    use = collect(func.body)
    declared = {
        name.name.value
        for kind, node in use.control
        if kind in ("global", "nonlocal")
        for name in node.names
    }
    params = {p.name.value for p in all_params(func.params)}
    return frozenset((params | set(use.binds)) - declared)


def is_generator_function(func: cst.FunctionDef) -> bool:
    """Does calling ``func`` make a generator (a `yield` in its own body, not in a
    function nested in it)?"""
    return any(kind == "yield" for kind, _node in collect(func.body).control)


def local_to(name: str, func: cst.FunctionDef | None) -> cst.FunctionDef | None:
    """The function whose local variable ``name`` is, seen from inside ``func``: ``func``
    itself, or None for the module's (a closure's free names are taken for the module's)."""
    return func if func is not None and name in function_locals(func) else None


def free_reads(func: cst.FunctionDef) -> set[str]:
    """The names a function's body reads from outside it when it is called: its reads
    but its locals (:func:`function_locals`)."""
    return set(collect(func.body).reads) - function_locals(func)


def all_params(params: cst.Parameters) -> list[cst.Param]:
    """Every parameter of a signature, `*args` and `**kwargs` included."""
    found = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            found.append(star)
    return found


def target_names(target: cst.BaseExpression) -> list[str]:
    """Names an assignment or loop target binds, in order (`i`, `(i, prompt)`, `*rest`)."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []


def collect(node: cst.CSTNode, skip: tuple[cst.CSTNode, ...] = ()) -> NameUse:
    """Names read, bound and mutated anywhere in ``node`` (nested functions included),
    leaving out the subtrees in ``skip``. The result is shared: do not change it."""
    return _collect_skipping(node, tuple(skip)) if skip else _collect_whole(node)


@functools.lru_cache(maxsize=4096)
def _collect_skipping(node: cst.CSTNode, skip: tuple[cst.CSTNode, ...]) -> NameUse:
    # cached like _collect_whole: a pure function of immutable nodes
    bodies = all(type(s) in BODY_KINDS for s in skip)
    collector = _BodySkippingCollector(skip) if bodies else _SkippingCollector(skip)
    walk(node, collector)
    return collector.use


@functools.lru_cache(maxsize=8192)
def _collect_whole(node: cst.CSTNode) -> NameUse:
    # A pure function of an immutable node (libcst nodes hash by identity, and the
    # cache keeps them alive, so an id is never reused while cached). Passes ask about
    # the same statements again and again, and a new version of the tree shares every
    # statement a pass did not touch: the names of those are not walked again.
    collector = _Collector(whole_statements=True)
    walk(node, collector)
    return collector.use


@functools.lru_cache(maxsize=64)
def bound_in_any_scope(module: cst.Module) -> frozenset[str] | None:
    """Every name some scope of ``module`` binds (assigns, imports, takes as a parameter,
    defines with `def` or `class`), by Python's own symbol tables; None when Python cannot
    build them. (A whole-module question, asked rarely: it costs the module's code.)"""
    import symtable

    try:
        tables = [symtable.symtable(module.code, "<module>", "exec")]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: set[str] = set()
    while tables:
        table = tables.pop()
        for symbol in table.get_symbols():
            if symbol.is_assigned() or symbol.is_imported() or symbol.is_parameter() or symbol.is_namespace():
                found.add(symbol.get_name())
        tables.extend(table.get_children())
    return frozenset(found)


def collect_all(nodes, skip: tuple[cst.CSTNode, ...] = ()) -> NameUse:
    use = NameUse()
    for node in nodes:
        use.merge(collect(node, skip))
    return use


# -- liveness: reads that a rebinding kills ------------------------------------------


def exposed_reads(stmts) -> dict[str, cst.CSTNode]:
    """Names the statements may read before binding them for sure: a name read only
    after an assignment, a `for` target, a `with ... as` or an import that always runs
    first is not among them (its earlier value is dead there)."""
    reads: dict[str, cst.CSTNode] = {}
    bound: set[str] = set()
    for stmt in stmts:
        for name, node in _exposed_in(stmt).items():
            if name not in bound:
                reads.setdefault(name, node)
        bound |= definite_binds(stmt)
    return reads


@functools.lru_cache(maxsize=8192)
def _exposed_in(stmt: cst.CSTNode) -> dict[str, cst.CSTNode]:
    # cached like _collect_whole (a pure function of an immutable node): the questions
    # about what the rest of a scope reads walk the same statements again and again.
    # The result is shared: do not change it.
    kind = type(stmt)
    if kind is cst.For and stmt.orelse is None:
        found = dict(collect(stmt.iter).reads)
        targets = set(target_names(stmt.target))
        for name, node in exposed_reads(stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else stmt.body.body).items():
            if name not in targets:
                found.setdefault(name, node)
        return found
    if kind is cst.If:
        found = dict(collect(stmt.test).reads)
        for suite in (stmt.body, stmt.orelse):
            if suite is None:
                continue
            inner = [suite] if isinstance(suite, cst.If) else list(suite.body.body) if isinstance(suite, cst.Else) else list(suite.body)
            for name, node in exposed_reads(inner).items():
                found.setdefault(name, node)
        return found
    if kind is cst.With:
        found: dict[str, cst.CSTNode] = {}
        bound: set[str] = set()
        for item in stmt.items:
            for name, node in collect(item.item).reads.items():
                found.setdefault(name, node)
            if item.asname is not None:
                bound |= set(target_names(item.asname.name))
        for name, node in exposed_reads(list(stmt.body.body)).items():
            if name not in bound:
                found.setdefault(name, node)
        return found
    if kind is cst.Try:
        # a handler's `as e` binds `e` before its body reads it
        found = dict(exposed_reads(list(stmt.body.body)))
        for handler in stmt.handlers:
            if handler.type is not None:
                for name, node in collect(handler.type).reads.items():
                    found.setdefault(name, node)
            own = set(target_names(handler.name.name)) if handler.name is not None else set()
            for name, node in exposed_reads(list(handler.body.body)).items():
                if name not in own:
                    found.setdefault(name, node)
        for suite in (stmt.orelse, stmt.finalbody):
            if suite is not None:
                for name, node in exposed_reads(list(suite.body.body)).items():
                    found.setdefault(name, node)
        return found
    if kind is cst.Match:
        # a case's guard and body read after its pattern bound its captures
        found = dict(collect(stmt.subject).reads)
        for case in stmt.cases:
            pattern = collect(case.pattern)
            for name, node in pattern.reads.items():
                found.setdefault(name, node)
            captured = set(pattern.binds)
            guard = collect(case.guard).reads if case.guard is not None else {}
            for name, node in [*guard.items(), *exposed_reads(list(case.body.body)).items()]:
                if name not in captured:
                    found.setdefault(name, node)
        return found
    if kind is cst.SimpleStatementLine and len(stmt.body) > 1:
        # `x = 1; y = x`: each small statement reads after the ones before it bound
        found = {}
        bound = set()
        for small in stmt.body:
            for name, node in collect(small).reads.items():
                if name not in bound:
                    found.setdefault(name, node)
            bound |= _small_binds(small)
        return found
    return collect(stmt).reads  # anything else: every read counts (conservative)


def definite_binds(stmt: cst.CSTNode) -> frozenset[str]:
    """Names the statement binds whenever it completes normally."""
    return _definite_binds(stmt)


@functools.lru_cache(maxsize=8192)
def _definite_binds(stmt: cst.CSTNode) -> frozenset[str]:
    # cached like _exposed_in
    return frozenset(_binds_when_complete(stmt))


def _binds_when_complete(stmt: cst.CSTNode) -> set[str]:
    kind = type(stmt)
    if kind is cst.SimpleStatementLine:
        return set().union(*(_small_binds(small) for small in stmt.body))
    if kind in (cst.FunctionDef, cst.ClassDef):
        return {stmt.name.value}
    if kind is cst.With:
        found = set()
        for item in stmt.items:
            if item.asname is not None:
                found |= set(target_names(item.asname.name))
        return found | _definite_in(stmt.body.body)
    if kind is cst.For and stmt.orelse is None and _runs_at_least_once(stmt.iter) and not _skips(stmt.body):
        # every statement of the body runs in the first iteration, and there is one
        return set(target_names(stmt.target)) | _definite_in(stmt.body.body)
    if kind is cst.If and stmt.orelse is not None:
        other = stmt.orelse
        rest = definite_binds(other) if isinstance(other, cst.If) else _definite_in(other.body.body)
        return _definite_in(stmt.body.body) & rest
    if kind is cst.Match:
        # completed normally: one case ran, up to the first that matches anything (without
        # one, no case may match and the statement binds nothing)
        ends = []
        for case in stmt.cases:
            ends.append(set(collect(case.pattern).binds) | _definite_in(case.body.body))
            if _matches_anything(case):
                return set.intersection(*ends)
        return set()
    if kind is cst.Try:
        # completed normally: the body (and `else:`) ran to its end, or one handler did
        ends = [_definite_in(stmt.body.body) | (_definite_in(stmt.orelse.body.body) if stmt.orelse else set())]
        ends += [_definite_in(handler.body.body) for handler in stmt.handlers]
        return set.intersection(*ends) | (_definite_in(stmt.finalbody.body.body) if stmt.finalbody else set())
    return set()


def reads_before_binding(parts) -> dict[str, cst.CSTNode]:
    """:func:`exposed_reads` of a run of statements and expressions (a trace's arguments
    after the statements that compute them): an expression binds nothing for sure."""
    reads: dict[str, cst.CSTNode] = {}
    bound: set[str] = set()
    for part in parts:
        found = _exposed_in(part) if isinstance(part, cst.BaseStatement) else collect(part).reads
        for name, node in found.items():
            if name not in bound:
                reads.setdefault(name, node)
        if isinstance(part, cst.BaseStatement):
            bound |= definite_binds(part)
    return reads


def may_change(node: cst.CSTNode) -> dict[str, cst.CSTNode]:
    """Names whose object ``node`` may change in place: those :func:`collect` finds
    mutated, those whose in-place method it calls (`ids.add_(1)`, `f.write(s)`), and
    those it hands to a call as an argument (`random.shuffle(xs)`, `fill(row)`: a call
    may change what it is given), but to builtins that change nothing (`len(xs)`)."""
    found = dict(collect(node).mutates)
    for call in find_nodes(node, lambda n: type(n) is cst.Call):
        func = call.func
        if type(func) is cst.Name and func.value in PURE_BUILTINS:
            continue
        if type(func) is cst.Attribute and (func.attr.value in MUTATING_METHODS or _in_place(func.attr.value)):
            for name in mutated_roots(func.value):
                found.setdefault(name, call)
        for arg in call.args:
            if type(arg.value) is cst.Name:
                found.setdefault(arg.value.value, arg.value)
    return found


def _in_place(method: str) -> bool:
    """`add_`, `zero_`: torch's in-place methods."""
    return method.endswith("_") and not method.startswith("_")


def depended_on(stmts, needed) -> list[int]:
    """The positions of the statements of ``stmts`` (a run of statements, in order) that
    code reading ``needed`` right after them depends on, transitively: a statement that
    may bind or change (:func:`may_change`) a needed name is in, and the names it reads
    are needed in turn; a name it binds for sure (:func:`definite_binds`) is no longer
    needed before it. A backward slice: moving these statements, in order, ahead of
    the rest keeps every value the reader sees."""
    need = set(needed)
    chosen: list[int] = []
    for position in range(len(stmts) - 1, -1, -1):
        stmt = stmts[position]
        use = collect(stmt)
        if need & (use.binds.keys() | may_change(stmt).keys()):
            chosen.append(position)
            need = (need - definite_binds(stmt)) | set(use.reads)
    return chosen[::-1]


def _small_binds(small: cst.BaseSmallStatement) -> set[str]:
    """Names a small statement (`x = 1` of `x = 1; y = x`) binds whenever it completes."""
    if type(small) is cst.Assign:
        return {name for target in small.targets for name in target_names(target.target)}
    if type(small) is cst.AnnAssign and small.value is not None:
        return set(target_names(small.target))
    if type(small) in (cst.Import, cst.ImportFrom):
        return set(collect(small).binds)
    return set()


def _runs_at_least_once(iterable: cst.BaseExpression) -> bool:
    """Is the loop's iterable plainly not empty: `range(3)`, `range(1, 4)`, `[a, b]`, `("x",)`?"""
    if type(iterable) in (cst.List, cst.Tuple):
        return bool(iterable.elements) and not any(type(e) is cst.StarredElement for e in iterable.elements)
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == "range":
        bounds = [a.value for a in iterable.args]
        if not 1 <= len(bounds) <= 2 or any(a.keyword or a.star for a in iterable.args):
            return False
        if not all(type(b) is cst.Integer for b in bounds):
            return False
        values = [int(b.value, 0) for b in bounds]
        return values[0] > 0 if len(values) == 1 else values[0] < values[1]
    return False


def _skips(body: cst.BaseSuite) -> bool:
    """May an iteration end early (`break`, `continue`), leaving what follows unbound?"""
    return bool(find_nodes(body, lambda node: type(node) in (cst.Break, cst.Continue)))


def _matches_anything(case: cst.MatchCase) -> bool:
    """`case _:` or `case name:` without a guard (an irrefutable pattern)."""
    pattern = case.pattern
    while type(pattern) is cst.MatchAs and pattern.pattern is not None:
        pattern = pattern.pattern  # `case (_ as whole):`
    return case.guard is None and type(pattern) is cst.MatchAs and pattern.pattern is None


def _definite_in(statements) -> set[str]:
    """Names a run of statements binds whenever it completes normally."""
    return set().union(*(definite_binds(s) for s in statements))


def name_assignment(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """`name = value` alone on its line → (name, value); else None."""
    if type(stmt) is not cst.SimpleStatementLine or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if type(small) is not cst.Assign or len(small.targets) != 1 or type(small.targets[0].target) is not cst.Name:
        return None
    return small.targets[0].target.value, small.value


@functools.lru_cache(maxsize=1024)
def returned_name(func: cst.FunctionDef) -> str | None:
    """The name every `return` of the function's own body returns, if one (`return
    logits` everywhere); None when a return gives anything else, or there is none. (A
    pure function of an immutable node, hashed by identity and kept alive while cached:
    the cost model asks at every call of a helper, in every version of the tree.)"""
    names = {stmt.value.value if type(stmt.value) is cst.Name else None for stmt in own_returns(func.body)}
    return names.pop() if len(names) == 1 else None


def returned_names(func: cst.FunctionDef) -> set[str]:
    """The names the `return` statements of the function's own body give back, alone or
    in a tuple (`return resid, logits`)."""
    found: set[str] = set()
    for stmt in own_returns(func.body):
        value = stmt.value
        elements = [e.value for e in value.elements] if type(value) is cst.Tuple else [value]
        found |= {e.value for e in elements if type(e) is cst.Name}
    return found


def own_returns(node: cst.CSTNode) -> Iterator[cst.Return]:
    """The `return` statements of a function body, not of functions defined in it."""
    for child in children(node):
        if type(child) is cst.Return:
            yield child
        elif type(child) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            yield from own_returns(child)


#: Builtins whose result is a new number, string or bool: never an object they were given.
NEW_VALUE_BUILTINS = frozenset({
    "len", "str", "repr", "int", "float", "bool", "isinstance", "hash", "id", "format", "abs", "round",
    "divmod", "pow", "ord", "chr", "complex", "bytes", "sum", "any", "all",
})  # fmt: skip
#: Methods that may return the object they are called on (a tensor already of that
#: device or type, `.save()`), and those that return an element of a container.
RETURNS_ITS_OBJECT = frozenset({
    "to", "cpu", "cuda", "float", "half", "double", "bfloat16", "long", "int", "bool", "type", "type_as",
    "contiguous", "save", "pin_memory", "coalesce", "__enter__",
})  # fmt: skip
RETURNS_AN_ELEMENT = frozenset({"get", "pop", "popitem", "setdefault", "values", "items", "__getitem__", "__next__"})
_NEW_VALUE_KINDS = (
    cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.BaseNumber, cst.BaseString, cst.Lambda,
    *COMPREHENSIONS, cst.List, cst.Dict, cst.Set, cst.Tuple,
)


def may_be_one_of(expr: cst.BaseExpression, names: Container[str]) -> bool:
    """May ``expr`` evaluate to an object one of ``names`` holds, or one such an object
    holds (`d[k]`, `d.get(k)`, `x.to(...)`, which returns `x` itself when nothing changes)?
    Not an operator's, a literal's or a comparison's result (a new object), nor a number
    or string a builtin makes, nor a method's result but for those that return their object
    or its elements; a call given one of them may, and any other expression reading one.
    (What a function reads from outside its arguments is not followed.)"""
    if type(expr) is cst.Name:
        return expr.value in names
    if isinstance(expr, _NEW_VALUE_KINDS):
        return False
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value in NEW_VALUE_BUILTINS:
        return False
    if type(expr) is cst.IfExp:
        return may_be_one_of(expr.body, names) or may_be_one_of(expr.orelse, names)
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        # a method of the object: itself or an element of it only for the methods that
        # return those (`x.to(...)`, `d.get(k)`, an in-place `x.add_(1)`); any other makes
        # a new object (`x.argmax()`, `x.item()`), unless it is given one of them
        method = expr.func.attr.value
        if method in RETURNS_ITS_OBJECT or method in RETURNS_AN_ELEMENT or _in_place(method):
            if may_be_one_of(expr.func.value, names):
                return True
        return any(may_be_one_of(arg.value, names) for arg in expr.args)
    if type(expr) is cst.Call:  # a function may return what it is given (not what it computes of it)
        return may_be_one_of(expr.func, names) or any(may_be_one_of(arg.value, names) for arg in expr.args)
    return any(name in names for name in collect(expr).reads)


def aliases(statements, names: Iterable[str]) -> set[str]:
    """``names`` and the names ``statements`` (at any depth) may bind to an object one of
    them holds: `y = x`, `a, b = x, z`, `for k, v in d.items()`, `with x as y` —
    transitively, in any order (a loop may run a later binding first); not a name bound
    to a value saved there (`y = f(x).save()`), which comes back by its own save."""
    found = set(names)
    bindings = list(_alias_bindings(statements))
    grown = True
    while grown:
        grown = False
        for targets, value in bindings:
            new = [name for name in targets if name not in found]
            # (`y = f(x).save()` saves what `y` holds itself: it comes back whatever `x`'s fate)
            if new and (value is None or (not is_save_call(value) and may_be_one_of(value, found))):
                found.update(new)
                grown = True
    return found


def containers_holding(statements, names: set[str]) -> set[str]:
    """The containers ``statements`` (at any depth) put one of ``names`` in: `c[k] = x`,
    `c.append(x)` (a storing method, :data:`STORING_METHODS`), by the container's name."""
    found: set[str] = set()
    for node in statements:
        for assign in find_nodes(node, lambda n: type(n) is cst.Assign):
            if type(assign.value) is cst.Name and assign.value.value in names:
                found.update(target.target.value.value for target in assign.targets
                             if type(target.target) is cst.Subscript and type(target.target.value) is cst.Name)
        for call in find_nodes(node, lambda n: type(n) is cst.Call and type(n.func) is cst.Attribute
                               and n.func.attr.value in STORING_METHODS and type(n.func.value) is cst.Name):
            if any(type(arg.value) is cst.Name and arg.value.value in names for arg in call.args):
                found.add(call.func.value.value)
    return found


def _alias_bindings(statements) -> Iterator[tuple[list[str], cst.BaseExpression | None]]:
    """(names bound, the value they get) of each assignment, loop and `with` target and
    walrus of ``statements`` (an import, a `def`, an `except ... as` bind no object of the
    code's: not aliases)."""
    for node in statements:
        for found in find_nodes(node, lambda n: type(n) in _BINDING_KINDS):
            kind = type(found)
            if kind is cst.Assign:
                for target in found.targets:
                    yield from _paired(target.target, found.value)
            elif kind is cst.AnnAssign:  # (`n += v` binds `n` to its object or to a new one: no alias)
                if found.value is not None:
                    yield target_names(found.target), found.value
            elif kind is cst.For:
                yield target_names(found.target), found.iter
            elif kind is cst.WithItem:
                if found.asname is not None:
                    yield target_names(found.asname.name), found.item
            elif kind is cst.NamedExpr:
                yield target_names(found.target), found.value


def _paired(target: cst.BaseExpression, value: cst.BaseExpression):
    """`a, b = x, y`: `a` gets `x` and `b` gets `y`; any other unpacking, any element."""
    if type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List) \
            and len(target.elements) == len(value.elements) \
            and not any(type(e) is cst.StarredElement for e in (*target.elements, *value.elements)):
        for t, v in zip(target.elements, value.elements):
            yield from _paired(t.value, v.value)
        return
    yield target_names(target), value


_BINDING_KINDS = frozenset({cst.Assign, cst.AnnAssign, cst.For, cst.WithItem, cst.NamedExpr})

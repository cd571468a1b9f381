"""nnsight-05-failures: module values read out of the model's order (OutOfOrderError)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, opens_invoke
from ndif_opt.analysis.names import COMPREHENSIONS, collect, function_locals, target_names
from ndif_opt.analysis.regions import int_value
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.model_registry import dims_for
from ndif_opt.cost.module_values import OUTPUT, forward_order
from ndif_opt.passes.nnsight_05_failures.reports import MODULE_HOOKS, invokes_of
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children, find_nodes


OUT_OF_ORDER = "OutOfOrderError: '{where}' was requested but the model already ran past it"


@dataclass(frozen=True)
class Scope:
    """Statements that one forward pass serves in order: an invoke's body, or the body of
    a trace or generate block without invokes."""

    block: Block
    body: cst.IndentedBlock

    @property
    def statements(self) -> tuple[cst.BaseStatement, ...]:
        return tuple(self.body.body)


def forward_scopes(facts: Facts) -> Iterator[Scope]:
    for block in facts.blocks:
        if block.method == "session" or _steps(block.node.body) or _nnterp(block, facts):
            continue
        invokes = invokes_of(block)
        if invokes:
            for invoke in invokes:
                if type(invoke.body) is cst.IndentedBlock:
                    yield Scope(block, invoke.body)
        elif type(block.node.body) is cst.IndentedBlock:
            yield Scope(block, block.node.body)


def _steps(body: cst.CSTNode) -> bool:
    """Does the body step through generation (`tracer.iter`, `.all()`, `.next()`), where
    every step runs the modules again?"""
    return bool(find_nodes(body, lambda n: type(n) is cst.Attribute and n.attr.value in ("iter", "all", "next")))


def _nnterp(block: Block, facts: Facts) -> bool:
    info = facts.models.get(block.model)
    return info is not None and info.class_path.startswith("nnterp")


# Index values in a module path while walking: a literal, an element (or the count) of a
# loop of the scope, or code whose value is not known (the same only as itself).
@dataclass(frozen=True)
class _Lit:
    value: int


@dataclass(frozen=True)
class _Var:
    loop: "_Loop"
    offset: int = 0
    count: bool = False  # enumerate's count, not the element


@dataclass(frozen=True)
class _Opaque:
    serial: int  # an index nobody can order: equal only to itself
    code: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"<{self.code}>" if self.code else "<i>"


@dataclass(eq=False)
class _Loop:
    node: cst.CSTNode = field(repr=False)
    domain: Callable[[int], list[int]] | None  # N layers -> the elements; None: not known
    irregular: bool  # break / continue / return / raise in its body: iterations may stop early
    names: frozenset[str]  # what its iterable reads (a condition when its domain is unknown)


@dataclass(frozen=True)
class _Branch:
    node_id: int
    arm: int
    names: frozenset[str]


@dataclass(eq=False)
class _Site:
    node: cst.CSTNode = field(repr=False)
    path: tuple
    hook: int
    frames: tuple  # _Loop / _Branch, outermost first
    caught: bool  # inside a `try` of the scope that has handlers
    order: int
    top: int  # the position in the scope of the statement it is in
_TERMINAL = (cst.Return, cst.Raise, cst.Break, cst.Continue)


class _Walk:
    """The module reads of a scope, in the order Python evaluates them, with the loops and
    conditions around each."""

    def __init__(self, block: Block, facts: Facts) -> None:
        self.root = block.model
        self.facts = facts
        self.sites: list[_Site] = []
        self.env: dict[str, tuple] = {}  # name -> ("path", path) | ("index", value)
        self.frames: list = []
        self.caught = 0
        self.serial = itertools.count()
        self.stopped = False
        self.aliases = _aliases(block, facts)
        self.top: int | None = None  # the scope's statement being walked
        self.calling: list[cst.FunctionDef] = []  # the functions whose returned module is being read

    def scope(self, statements) -> None:
        for index, stmt in enumerate(statements):
            if self.stopped:
                return
            self.top = index
            self.statement(stmt)
            if isinstance(stmt, cst.SimpleStatementLine) and any(type(s) in _TERMINAL for s in stmt.body):
                return

    # -- statements ------------------------------------------------------------------
    def statements(self, statements) -> None:
        for stmt in statements:
            if self.stopped:
                return
            self.statement(stmt)
            if isinstance(stmt, cst.SimpleStatementLine) and any(type(s) in _TERMINAL for s in stmt.body):
                return  # the rest of the suite does not run

    def statement(self, stmt: cst.BaseStatement) -> None:
        if _backward(stmt):
            self.stopped = True  # from here on the order may be the backward pass's
            return
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                self.small(small)
                if _stops(small):
                    self.stopped = True
                    return
        elif kind is cst.If:
            self.if_chain(stmt)
        elif kind is cst.For:
            self.for_loop(stmt)
        elif kind is cst.While:
            self.expr(stmt.test)
            loop = _Loop(stmt, None, True, _reads(stmt.test))
            self.in_frame(loop, lambda: self.statements(stmt.body.body))
            self.forget(collect(stmt.body).binds)
        elif kind is cst.With:
            for item in stmt.items:
                self.expr(item.item)
            if not opens_invoke(stmt):
                self.statements(stmt.body.body)
            self.forget(collect(stmt).binds)
        elif kind in (cst.Try, cst.TryStar):
            self.try_statement(stmt)
        elif kind in (cst.FunctionDef, cst.ClassDef):
            self.forget({stmt.name.value})
        else:  # match and anything else: its reads are not ordered here
            self.forget(collect(stmt).binds)

    def if_chain(self, stmt: cst.If) -> None:
        names: set[str] = set()
        arm = 0
        node: cst.CSTNode | None = stmt
        before = dict(self.env)
        bound: set[str] = set()
        while node is not None:
            test = None
            if isinstance(node, cst.If):
                test = node.test
                if arm == 0:
                    self.expr(test)
                    before = dict(self.env)
                names |= _reads(test)
                body, node = node.body, node.orelse
            else:  # Else
                body, node = node.body, None
            self.env = dict(before)

            def run(b=body, t=test, first=arm == 0) -> None:
                if t is not None and not first:  # an elif's test runs on the way to its arm
                    self.expr(t)
                self.statements(b.body)

            self.in_frame(_Branch(id(stmt), arm, frozenset(names)), run)
            bound |= set(collect(body).binds)
            arm += 1
        self.env = before
        self.forget(bound)

    def for_loop(self, stmt: cst.For) -> None:
        self.expr(stmt.iter)
        loop, targets = self.loop_of(stmt.iter, stmt.target, stmt, stmt.body)
        before = dict(self.env)
        self.env.update(targets)
        self.in_frame(loop, lambda: self.statements(stmt.body.body))
        self.env = before
        self.forget(set(collect(stmt.body).binds) | set(target_names(stmt.target)))
        if stmt.orelse is not None:
            self.in_frame(_Branch(id(stmt), 1, frozenset({f"#loop{id(stmt)}"})),
                          lambda: self.statements(stmt.orelse.body.body))

    def try_statement(self, stmt) -> None:
        handled = bool(stmt.handlers)
        self.caught += handled
        self.statements(stmt.body.body)
        self.caught -= handled
        guard = frozenset({f"#try{id(stmt)}"})
        for arm, handler in enumerate(stmt.handlers):
            self.in_frame(_Branch(id(stmt), arm, guard), lambda h=handler: self.statements(h.body.body))
        if stmt.orelse is not None:
            self.in_frame(_Branch(id(stmt), len(stmt.handlers), guard),
                          lambda: self.statements(stmt.orelse.body.body))
        self.forget(collect(stmt).binds)
        if stmt.finalbody is not None:
            self.statements(stmt.finalbody.body.body)

    def in_frame(self, frame, run: Callable[[], None]) -> None:
        self.frames.append(frame)
        try:
            run()
        finally:
            self.frames.pop()

    def small(self, small: cst.BaseSmallStatement) -> None:
        kind = type(small)
        if kind is cst.Assign:
            self.expr(small.value)
            for target in small.targets:
                self.target(target.target)
            value = self.module_value(small.value)
            for target in small.targets:
                if type(target.target) is cst.Name and value is not None:
                    self.env[target.target.value] = value
        elif kind is cst.AugAssign:
            self.target(small.target, load=True)
            self.expr(small.value)
            if type(small.target) is cst.Name:
                self.forget({small.target.value})
        elif kind is cst.AnnAssign:
            if small.value is not None:
                self.expr(small.value)
            self.target(small.target)
        elif kind in (cst.Expr, cst.Return):
            if small.value is not None:
                self.expr(small.value)
        else:
            for child in children(small):
                if isinstance(child, cst.BaseExpression):
                    self.expr(child)
            self.forget(collect(small).binds)

    def target(self, target: cst.BaseExpression, load: bool = False) -> None:
        """An assignment target: its receiver and index are read, then a module value is
        written (`layers[3].output[:] = ...`, `layer.output = ...`)."""
        kind = type(target)
        if kind is cst.Name:
            if not load:
                self.forget({target.value})
            return
        if kind in (cst.Tuple, cst.List):
            for element in target.elements:
                self.target(element.value, load)
            return
        if kind is cst.StarredElement:
            self.target(target.value, load)
            return
        if kind is cst.Attribute and target.attr.value in MODULE_HOOKS:
            self.expr(target.value)
            self.site(target)
            return
        self.expr(target)

    # -- expressions ------------------------------------------------------------------
    def expr(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind is cst.Attribute:
            self.expr(node.value)
            if node.attr.value in MODULE_HOOKS:
                self.site(node)
        elif kind is cst.Call:
            self.expr(node.func)
            for arg in node.args:
                self.expr(arg.value)
        elif kind is cst.IfExp:
            self.expr(node.test)
            names = frozenset(_reads(node.test))
            self.in_frame(_Branch(id(node), 0, names), lambda: self.expr(node.body))
            self.in_frame(_Branch(id(node), 1, names), lambda: self.expr(node.orelse))
        elif kind is cst.BooleanOperation:
            self.expr(node.left)
            self.in_frame(_Branch(id(node), 0, frozenset(_reads(node.left))), lambda: self.expr(node.right))
        elif kind in COMPREHENSIONS:
            self.comprehension(node)
        elif kind is cst.Lambda:
            return  # runs when called, if ever
        elif kind is cst.NamedExpr:
            self.expr(node.value)
            self.forget({code_of(node.target)})
        else:
            for child in children(node):
                self.expr(child)

    def comprehension(self, node) -> None:
        comp = node.for_in
        self.expr(comp.iter)
        if comp.inner_for_in is not None or comp.asynchronous is not None:
            return  # nested clauses: not ordered here
        loop, targets = self.loop_of(comp.iter, comp.target, node, None)
        before = dict(self.env)
        self.env.update(targets)
        elements = (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)

        def body() -> None:
            for condition in comp.ifs:
                self.expr(condition.test)
            names = frozenset().union(*(_reads(c.test) for c in comp.ifs)) if comp.ifs else None
            for element in elements:
                if names is None:
                    self.expr(element)
                else:
                    self.in_frame(_Branch(id(node), 0, names), lambda e=element: self.expr(e))

        self.in_frame(loop, body)
        self.env = before

    def site(self, node: cst.Attribute) -> None:
        path = self.path(node.value)
        if path is None:
            return
        self.sites.append(_Site(node, path, MODULE_HOOKS[node.attr.value], tuple(self.frames), self.caught > 0,
                                len(self.sites), self.top))

    # -- values -------------------------------------------------------------------------
    def path(self, expr: cst.BaseExpression) -> tuple | None:
        """The module ``expr`` is, as a path from the model root; None if not a module."""
        kind = type(expr)
        name = dotted_name(expr)
        if name is not None and name == self.root:
            return ()
        if kind is cst.Name:
            value = self.env.get(expr.value) or self.aliases.get(expr.value)
            return value[1] if value is not None and value[0] == "path" else None
        if kind is cst.Attribute:
            if expr.attr.value in MODULE_HOOKS or expr.attr.value in ("source", "_module"):
                return None
            base = self.path(expr.value)
            return None if base is None else base + (expr.attr.value,)
        if kind is cst.Subscript:
            base = self.path(expr.value)
            if base is None or not base or base[-1] not in LAYER_LISTS or len(expr.slice) != 1:
                return None
            item = expr.slice[0].slice
            if not isinstance(item, cst.Index):
                return None
            return base + (self.index(item.value),)
        if kind is cst.Call:
            return self.returned_path(expr)
        return None

    def returned_path(self, call: cst.Call) -> tuple | None:
        """The module a call of a script function returns, when its body is one `return`
        of a module (`def mlp(i): return model.transformer.h[i].mlp`), its parameters taken
        as the call's arguments: the module, or the index, each argument is here."""
        func = self.facts.functions.get(call.func.value) if type(call.func) is cst.Name else None
        if func is None or len(self.env) > 10_000 or any(f is func for f in self.calling):
            return None  # (a function returning a call of itself: not followed)
        returned = _one_return(func)
        if returned is None or any(arg.star or arg.keyword is not None for arg in call.args):
            return None
        params = [p.name.value for p in func.params.params]
        if len(call.args) > len(params) or func.params.star_arg is not cst.MaybeSentinel.DEFAULT:
            return None
        bound = {}
        for name, arg in zip(params, call.args):
            path = self.path(arg.value)
            bound[name] = ("path", path) if path is not None else ("index", self.index(arg.value))
        if len(bound) < len(params):
            return None  # a default: not followed here
        outer, self.env = self.env, {**self.env, **bound}
        self.calling.append(func)
        try:
            return self.path(returned)
        finally:
            self.calling.pop()
            self.env = outer

    def index(self, expr: cst.BaseExpression):
        literal = _int_literal(expr)
        if literal is not None:
            return _Lit(literal)
        if type(expr) is cst.Name:
            value = self.env.get(expr.value)
            if value is not None and value[0] == "index":
                return value[1]
            constant = int_value(expr, self.facts) if value is None else None
            if constant is not None:
                return _Lit(constant)  # `h[STOP]` of `STOP = 3`, a module constant
        if type(expr) is cst.BinaryOperation and type(expr.left) is cst.Name:
            offset = _int_literal(expr.right)
            value = self.env.get(expr.left.value)
            if offset is not None and value is not None and value[0] == "index" and isinstance(value[1], _Var):
                sign = {cst.Add: 1, cst.Subtract: -1}.get(type(expr.operator))
                if sign is not None:
                    var = value[1]
                    return _Var(var.loop, var.offset + sign * offset, var.count)
        return self.opaque_of(expr)

    def opaque_of(self, expr: cst.BaseExpression):
        """The same code means the same index while none of its names is bound again."""
        key = ("code", code_of(expr))
        value = self.env.get(key)
        if value is None:
            value = self.env[key] = ("index", _Opaque(next(self.serial), code_of(expr)), frozenset(_reads(expr)))
        return value[1]

    def module_value(self, expr: cst.BaseExpression) -> tuple | None:
        path = self.path(expr)
        return None if path is None else ("path", path)

    def forget(self, names) -> None:
        """``names`` are bound anew: what was known of them (and of code reading them) goes."""
        names = set(names)
        if not names:
            return
        for key in list(self.env):
            if isinstance(key, tuple) and self.env[key][2] & names:
                del self.env[key]
        for name in names:
            self.env[name] = ("gone", None)  # (not the alias of that name outside the block)

    def loop_of(self, iterable, target, node, body) -> tuple[_Loop, dict]:
        """The loop over ``iterable`` and what its target names are in each iteration."""
        irregular = body is not None and bool(find_nodes(body, lambda n: type(n) in _TERMINAL))
        names = frozenset(_reads(iterable))
        start = 0
        element = iterable
        count_name = None
        if (type(iterable) is cst.Call and dotted_name(iterable.func) == "enumerate" and iterable.args
                and type(target) is cst.Tuple and len(target.elements) == 2):
            element = iterable.args[0].value
            for arg in iterable.args[1:]:
                value = _int_literal(arg.value)
                if value is None:
                    element = None
                else:
                    start = value
            count_name = target.elements[0].value
            target = target.elements[1].value
        domain, layer_list = self.domain(element) if element is not None else (None, None)
        loop = _Loop(node, domain, irregular, names)
        targets: dict = {}
        if domain is None:
            for name in target_names(target) + (target_names(count_name) if count_name is not None else []):
                targets[name] = ("index", _Opaque(next(self.serial), name))  # each iteration: not known
            layers = self.path(element.value if type(element) is cst.Subscript else element) \
                if element is not None else None
            if type(target) is cst.Name and layers and layers[-1] in LAYER_LISTS:  # some of the layers
                targets[target.value] = ("path", layers + (_Opaque(next(self.serial), target.value),))
            return loop, targets
        if count_name is not None and type(count_name) is cst.Name:
            targets[count_name.value] = ("index", _Var(loop, start, count=True))
        if type(target) is cst.Name:
            if layer_list is not None:
                targets[target.value] = ("path", layer_list + (_Var(loop),))
            else:
                targets[target.value] = ("index", _Var(loop))
        return loop, targets

    def domain(self, expr) -> tuple[Callable[[int], list[int]] | None, tuple | None]:
        """The values a loop over ``expr`` takes (a function of the layer count) and, for a
        loop over decoder layers, the path of their list."""
        kind = type(expr)
        if kind is cst.Call and dotted_name(expr.func) == "range" and 1 <= len(expr.args) <= 3:
            if any(arg.keyword is not None or arg.star for arg in expr.args):
                return None, None
            bounds = [self.count(arg.value) for arg in expr.args]
            if any(b is None for b in bounds) or (len(bounds) == 3 and bounds[2](2) == 0):
                return None, None
            return (lambda n, bounds=bounds: list(range(*[b(n) for b in bounds]))), None
        if kind is cst.Call and dotted_name(expr.func) == "reversed" and len(expr.args) == 1:
            inner, layer_list = self.domain(expr.args[0].value)
            return (None, None) if inner is None else ((lambda n: inner(n)[::-1]), layer_list)
        if kind in (cst.List, cst.Tuple):
            values = [_int_literal(e.value) if type(e) is cst.Element else None for e in expr.elements]
            if not values or any(v is None for v in values):
                return None, None
            return (lambda n, values=values: list(values)), None
        path = self.path(expr)
        if path is not None and path and path[-1] in LAYER_LISTS:
            return (lambda n: list(range(n))), path
        if kind is cst.Subscript and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice):
            path = self.path(expr.value)
            if path is None or not path or path[-1] not in LAYER_LISTS:
                return None, None
            part = expr.slice[0].slice
            bounds = [None if b is None else self.count(b) for b in (part.lower, part.upper, part.step)]
            given = [b for b, x in zip(bounds, (part.lower, part.upper, part.step)) if x is not None]
            if any(b is None for b in given) or (bounds[2] is not None and bounds[2](2) == 0):
                return None, None
            return (lambda n, b=bounds: list(range(n))[slice(*[x(n) if x else None for x in b])]), path
        return None, None

    def count(self, expr) -> Callable[[int], int] | None:
        """An integer as a function of the layer count: literals, `len(<layers>)`,
        `<model>.config.num_hidden_layers`, and sums and differences of those."""
        literal = _int_literal(expr)
        if literal is not None:
            return lambda n: literal
        kind = type(expr)
        if kind is cst.Call and dotted_name(expr.func) == "len" and len(expr.args) == 1:
            path = self.path(expr.args[0].value)
            if path and path[-1] in LAYER_LISTS:
                return lambda n: n
            return None
        name = dotted_name(expr)
        if name is not None and name.startswith(self.root + ".config.") and \
                name.rpartition(".")[2] in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
            return lambda n: n
        if kind is cst.BinaryOperation and type(expr.operator) in (cst.Add, cst.Subtract):
            left, right = self.count(expr.left), self.count(expr.right)
            if left is None or right is None:
                return None
            sign = 1 if type(expr.operator) is cst.Add else -1
            return lambda n: left(n) + sign * right(n)
        return None


def _one_return(func: cst.FunctionDef) -> cst.BaseExpression | None:
    """The value of a function whose body is one `return value` (after a docstring)."""
    body = [s for s in func.body.body if not (type(s) is cst.SimpleStatementLine and len(s.body) == 1
                                              and type(s.body[0]) is cst.Expr
                                              and type(s.body[0].value) is cst.SimpleString)]
    if len(body) != 1 or type(body[0]) is not cst.SimpleStatementLine or len(body[0].body) != 1:
        return None
    small = body[0].body[0]
    return small.value if type(small) is cst.Return and small.value is not None else None


def _aliases(block: Block, facts: Facts) -> dict[str, tuple]:
    """Names bound once to one of the model's modules, at module level or in the
    function of the block, before it (`layers = model.model.layers`)."""
    found: dict[str, tuple] = {}
    function = block.stmt.function
    own = function_locals(function) if function is not None else frozenset()
    root = block.model
    for name, bindings in facts.bindings.items():
        if len(bindings) != 1:
            continue
        info, value = bindings[0]
        if info.function is not function and (info.ancestors or name in own):
            continue  # bound in another function, or a local of this one that shadows it
        path = _plain_path(value, root)
        if path is not None and path:
            found[name] = ("path", path)
    return found


def _plain_path(expr, root: str) -> tuple | None:
    if dotted_name(expr) == root:
        return ()
    if type(expr) is cst.Attribute:
        base = _plain_path(expr.value, root)
        return None if base is None else base + (expr.attr.value,)
    if type(expr) is cst.Subscript and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        base = _plain_path(expr.value, root)
        index = _int_literal(expr.slice[0].slice.value)
        if base and base[-1] in LAYER_LISTS and index is not None:
            return base + (_Lit(index),)
    return None


def _int_literal(expr) -> int | None:
    if type(expr) is cst.Integer:
        return int(expr.value, 0)
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and type(expr.expression) is cst.Integer:
        return -int(expr.expression.value, 0)
    return None


def _reads(node: cst.CSTNode) -> set[str]:
    return set(collect(node).reads)


def _backward(stmt: cst.CSTNode) -> bool:
    return bool(find_nodes(stmt, lambda n: type(n) is cst.Attribute and n.attr.value == "backward"))


def _stops(small: cst.BaseSmallStatement) -> bool:
    """`tracer.stop()`: the forward pass ends there."""
    return (type(small) is cst.Expr and type(small.value) is cst.Call and type(small.value.func) is cst.Attribute
            and small.value.func.attr.value == "stop")


# -- the pairs ----------------------------------------------------------------------------

_LAYER_COUNTS = (2, 3, 4, 5, 7, 12, 32)  # of a model whose layer count is not known
_MAX_EVALUATIONS = 4096


@dataclass
class _Finding:
    early: _Site
    late: _Site
    where: str  # nnsight's name of the hook it asked for too late
    certain: bool  # both reads run whenever the scope does
    next_iteration: bool  # ``late`` runs in the iteration after ``early``'s


def out_of_order_findings(statements, block: Block, facts: Facts) -> list["_Finding"]:
    walk = _Walk(block, facts)
    walk.scope(statements)
    sites = _known_sites(walk.sites, block, facts)
    if not sites:
        return []
    counts = _layer_counts(block, facts)
    found: list[_Finding] = []
    seen: set[int] = set()
    for late in sites:
        if late.caught:
            continue  # the scope catches the error itself
        for early in sites:
            if early is late and not any(isinstance(f, _Loop) for f in late.frames):
                continue
            witness = _out_of_order(early, late, counts)
            if witness is not None and id(late) not in seen:
                seen.add(id(late))
                found.append(_Finding(early, late, witness[0], witness[1], early is late or early.order > late.order))
                break
    return found


def _known_sites(sites: list[_Site], block: Block, facts: Facts) -> list[_Site]:
    """The reads of modules the architecture orders, on paths this model has."""
    info = facts.models.get(block.model)
    layout = None
    if info is not None and info.repo_id:
        dims = dims_for(info.repo_id)
        if dims.family != "unknown":
            layout = tuple(dims.module_paths.layers.split("."))
    kept = []
    for site in sites:
        if layout is not None and len(site.path) >= 2 and site.path[0] != layout[0] and \
                isinstance(site.path[1], str) and site.path[1] in LAYER_LISTS:
            continue  # `transformer.h` of a Llama: an AttributeError, not a read
        if layout is not None and len(site.path) >= 2 and site.path[0] == layout[0] and \
                isinstance(site.path[1], str) and site.path[1] in LAYER_LISTS and site.path[1] != layout[1]:
            continue
        kept.append(site)
    return kept


def _layer_counts(block: Block, facts: Facts) -> tuple[int, ...]:
    info = facts.models.get(block.model)
    if info is not None and info.repo_id:
        dims = dims_for(info.repo_id)
        if dims.known:
            return (dims.n_layers,)
    return _LAYER_COUNTS


def _out_of_order(early: _Site, late: _Site, counts: tuple[int, ...]) -> tuple[str, bool] | None:
    """(nnsight's name of the hook ``late`` asks for, whether both reads run whenever the
    scope does) when ``late`` — read after ``early`` (later in the code, or in the next
    iteration of a loop around both) — asks for a hook the model passed when it served
    ``early``, for every layer count the model may have; else None."""
    shared = 0
    while shared < min(len(early.frames), len(late.frames)) and _same(early.frames[shared], late.frames[shared]):
        shared += 1
    carried = None
    if early is late or early.order > late.order:  # only in a later iteration of a loop around both
        carried = next((f for f in reversed(early.frames[:shared]) if isinstance(f, _Loop)), None)
        if carried is None or carried.domain is None or carried.irregular:
            return None
        if not (_runs_each_iteration(early, carried) and _runs_each_iteration(late, carried)):
            return None
    elif shared < len(early.frames) and shared < len(late.frames):
        a, b = early.frames[shared], late.frames[shared]
        if isinstance(a, _Branch) and isinstance(b, _Branch) and a.node_id == b.node_id:
            return None  # two arms of one condition
    if _guard_names(early.frames[shared:]) & _guard_names(late.frames[shared:]):
        return None  # conditions that may depend on each other
    certain = not _guard_names(early.frames) and not _guard_names(late.frames)
    shared_loops = [f for f in early.frames[:shared] if isinstance(f, _Loop)]
    early_loops = [f for f in early.frames[shared:] if isinstance(f, _Loop)]
    late_loops = [f for f in late.frames[shared:] if isinstance(f, _Loop)]
    verdicts = []
    for n in counts:
        verdict = _decide(early, late, n, shared_loops, early_loops, late_loops, carried)
        if verdict is None:
            continue  # a model of n layers cannot run this code (an index out of range)
        if verdict is False:
            return None
        verdicts.append(verdict)
    if not verdicts:
        return None
    where = verdicts[0] if len(set(verdicts)) == 1 else _generic_where(verdicts[0])
    return where, certain


def _same(a, b) -> bool:
    return a is b or (isinstance(a, _Branch) and a == b)


def _guard_names(frames) -> frozenset[str]:
    """What the conditions among ``frames`` read (a loop of unknown length is one)."""
    names: set[str] = set()
    for frame in frames:
        if isinstance(frame, _Branch):
            names |= frame.names
        elif frame.domain is None:
            names |= frame.names | {f"#loop{id(frame)}"}
    return frozenset(names)


def _uses(site: _Site, loop: _Loop) -> bool:
    return any(isinstance(item, _Var) and item.loop is loop for item in site.path)


def _decide(early: _Site, late: _Site, n: int, shared: list[_Loop], early_only: list[_Loop],
            late_only: list[_Loop], carried: _Loop | None):
    """For a model of ``n`` layers: the hook's name when ``late`` is surely out of order,
    False when not, None when such a model cannot run this code.

    A loop whose every iteration runs the read counts if one iteration puts it out of
    order; a loop that may skip it in some iterations, only if all do."""
    domains = {}
    for loop in shared + early_only + late_only:
        if loop.domain is not None:
            values = loop.domain(n)
            if not values:
                return False  # the loop does not run
            domains[id(loop)] = values
    if carried is not None and len(domains[id(carried)]) < 2:
        return False

    def quantifier(loop: _Loop, sites) -> str:
        every = not loop.irregular and all(_runs_each_iteration(site, loop) for site in sites)
        return "any" if every else "all"

    axes = []  # (loop, the reads whose iteration it is, quantifier)
    for loop in shared:
        if loop.domain is not None and (loop is carried or _uses(early, loop) or _uses(late, loop)):
            axes.append((loop, "both", "any" if loop is carried else quantifier(loop, (early, late))))
    for loop in early_only:
        if loop.domain is not None and _uses(early, loop):
            axes.append((loop, "early", quantifier(loop, (early,))))
    for loop in late_only:
        if loop.domain is not None and _uses(late, loop):
            axes.append((loop, "late", quantifier(loop, (late,))))
    ranges = [range(len(domains[id(loop)]) - (1 if loop is carried else 0)) for loop, _, _ in axes]
    total = 1
    for r in ranges:
        total *= len(r)
    if total > _MAX_EVALUATIONS:
        return False
    alls = [i for i, axis in enumerate(axes) if axis[2] == "all"]
    anys = [i for i, axis in enumerate(axes) if axis[2] == "any"]
    witness = None
    for outer in itertools.product(*[ranges[i] for i in alls]):
        found = None
        for inner in itertools.product(*[ranges[i] for i in anys]):
            positions = dict(zip(alls, outer)) | dict(zip(anys, inner))
            result = _compare(early, late, n, axes, positions, domains, carried)
            if result is None:
                return None
            if result is not False:
                found = result
                break
        if found is None:
            return False
        witness = witness or found
    return witness


def _runs_each_iteration(site: _Site, loop: _Loop) -> bool:
    """Does every iteration of ``loop`` run ``site`` (no condition between them)?"""
    index = next(i for i, f in enumerate(site.frames) if f is loop)
    return not any(isinstance(f, _Branch) or (isinstance(f, _Loop) and (f.domain is None or f.irregular))
                   for f in site.frames[index + 1:])


def _compare(early: _Site, late: _Site, n: int, axes, positions: dict, domains: dict, carried):
    """The hook's name when ``late`` comes before ``early`` for these iterations; False when
    not; None when an index is out of range for ``n`` layers."""
    values_early: dict[int, tuple[int, int]] = {}
    values_late: dict[int, tuple[int, int]] = {}
    for i, (loop, which, _) in enumerate(axes):
        p = positions[i]
        if which in ("both", "early"):
            values_early[id(loop)] = (p, domains[id(loop)][p])
        if which in ("both", "late"):
            q = p + 1 if loop is carried else p
            values_late[id(loop)] = (q, domains[id(loop)][q])
    a = _concrete(early.path, n, values_early)
    b = _concrete(late.path, n, values_late)
    if a is None or b is None:
        return None
    order = forward_order(b, late.hook, a, early.hook)
    if order is None or order >= 0:
        return False
    name = "model" + "".join(f".{item}" for item in b)
    return f"{name}.{'output' if late.hook == OUTPUT else 'input'}.i0"


def _concrete(path: tuple, n: int, values: dict) -> tuple | None:
    out = []
    for i, item in enumerate(path):
        if isinstance(item, (_Lit, _Var)):
            if isinstance(item, _Lit):
                value = item.value
            else:
                chosen = values.get(id(item.loop))
                if chosen is None:
                    out.append(("var", id(item.loop)))  # same loop, same iteration: the same index
                    continue
                value = (chosen[0] if item.count else chosen[1]) + item.offset
            in_list = i > 0 and path[i - 1] in LAYER_LISTS
            if in_list:
                if value < 0:
                    value += n
                if not 0 <= value < n:
                    return None
            out.append(value)
        else:
            out.append(item)
    return tuple(out)


def _generic_where(where: str) -> str:
    """The hook's name with its layer number left out (it depends on the layer count)."""
    parts = where.split(".")
    return ".".join("<i>" if part.isdigit() else part for part in parts)

"""Which expressions hold a saved value, or containers of saved values, wherever they go.

Before nnsight 0.5, `.save()` returned a proxy and the value was read as `x.value` after the
block; since 0.5 it returns the value itself. Pre-0.5 scripts read `.value` on a saved name,
but as often on values reached some other way: `[v.value for v in results.values()]`,
`[[p.value for p in row] for row in grid]` (lists of lists of saves), `self.cache.value`,
`get_logits(model).value`. A `.value` the detector does not recognise leaves a pre-0.5
script looking like 0.5+ code, which the other passes then rewrite.

The *depth* of an expression says what it holds: 0 a saved value (`x.save()`,
`nnsight.list()`), 1 a container of saved values, 2 a container of those... It flows through
names (every binding of the name in its scope — a function's local, or the module's — read
flow-insensitively), containers filled with `append`/`extend`/`x[k] = v`/literals/
comprehensions, iteration (`for v in xs`, `.values()`, `.items()`, `enumerate`, `zip`),
indexing, attributes assigned saved values (`self.h = ... .save()`), function returns and
parameters. A name's depths are a set: a name bound to a saved value in one place and to
something else in another is "maybe saved" (None among its depths).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import all_params, collect, function_locals, own_returns
from ndif_opt.syntax.expressions import dotted_name, is_save_call

Depths = frozenset  # of int | None (None: not known to be saved)
UNKNOWN: Depths = frozenset({None})
EMPTY: Depths = frozenset()  # `[]`, `{}`: adds nothing to what a name holds
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)
# builtins that keep what an iterable yields
SAME_ITEMS = frozenset({"list", "tuple", "sorted", "reversed", "set", "iter"})
ROUNDS = 6  # enough for saves nested a few containers deep through a few names


class SavedValues:
    """Depths of the expressions of one module (see the module docstring)."""

    def __init__(self, facts: Facts, walk, parents: dict[int, cst.CSTNode],
                 is_nnsight_container: Callable[[cst.Call], bool]) -> None:
        self.facts = facts
        self.walk = walk
        self.parents = parents
        self.is_nnsight_container = is_nnsight_container
        self.names: dict[tuple[int, str], Depths] = {}  # (id of the function or 0, name)
        self.attributes: dict[str, Depths] = {}
        self.returns: dict[str, Depths] = {}
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        for function in walk.functions:
            self.functions.setdefault(function.name.value, []).append(function)
        self._locals: dict[int, frozenset[str]] = {}
        self._solve()

    def key(self, name: str, node: cst.CSTNode) -> tuple[int, str]:
        """The variable ``name`` is where ``node`` is: a local of the function around it, or
        the module's (a closure's variables are taken for the module's)."""
        parent = self.parents.get(id(node))
        while parent is not None:
            if type(parent) is cst.FunctionDef:
                names = self._locals.get(id(parent))
                if names is None:
                    names = self._locals[id(parent)] = function_locals(parent)
                return (id(parent), name) if name in names else (0, name)
            parent = self.parents.get(id(parent))
        return 0, name

    # --- the fixpoint over names, attributes and returns -----------------------------------
    def _solve(self) -> None:
        for _ in range(ROUNDS):
            names, attributes, returns = self._one_round()
            if (names, attributes, returns) == (self.names, self.attributes, self.returns):
                return
            self.names, self.attributes, self.returns = names, attributes, returns

    def _one_round(self):
        names: dict[tuple[int, str], set] = {}
        attributes: dict[str, set] = {}

        def add(table, key, depths: Depths) -> None:
            table.setdefault(key, set()).update(depths)

        for assign in self.walk.assigns:
            value = self.depth(assign.value, {})
            for target in assign.targets:
                self._bind(target.target, value, add, names, attributes)
        for target, iterable in self.walk.for_loops:
            self._bind_items(target, self.items(iterable, {}), add, names)
        for call in self.walk.calls:
            self._mutation(call, add, names)
            self._arguments(call, add, names)
        returns = {name: frozenset(d for f in functions for r in own_returns(f.body)
                                   for d in (self.depth(r.value, {}) if r.value is not None else UNKNOWN))
                   for name, functions in self.functions.items()}
        return ({k: frozenset(v) for k, v in names.items()}, {k: frozenset(v) for k, v in attributes.items()},
                returns)

    def _bind(self, target, value: Depths, add, names, attributes) -> None:
        kind = type(target)
        if kind is cst.Name:
            add(names, self.key(target.value, target), value)
        elif kind is cst.Attribute:
            add(attributes, target.attr.value, value)
        elif kind is cst.Subscript and type(target.value) is cst.Name:  # `xs[k] = v`
            add(names, self.key(target.value.value, target), _filled(value))
        elif kind in (cst.Tuple, cst.List):
            for element in target.elements:
                self._bind(element.value, UNKNOWN, add, names, attributes)

    def _bind_items(self, target, items, add, names, key=None) -> None:
        """A `for` target: ``items`` is what the iterable yields (Depths, or a tuple of
        them for `.items()`, `enumerate`, `zip`). ``key``: the variable a name is (a
        comprehension's targets are its own: their names)."""
        key = key or self.key
        if type(target) is cst.Name:
            add(names, key(target.value, target), items if isinstance(items, frozenset) else UNKNOWN)
        elif type(target) in (cst.Tuple, cst.List):
            parts = items if isinstance(items, tuple) and len(items) == len(target.elements) else None
            for position, element in enumerate(target.elements):
                self._bind_items(element.value, parts[position] if parts else UNKNOWN, add, names, key)

    def _mutation(self, call: cst.Call, add, names) -> None:
        """`xs.append(v)`, `xs.extend(vs)`, `xs.insert(i, v)`, `d.setdefault(k, v)`."""
        func = call.func
        if type(func) is not cst.Attribute or type(func.value) is not cst.Name or not call.args:
            return
        method, name = func.attr.value, self.key(func.value.value, call)
        if method in ("append", "add") and len(call.args) == 1:
            add(names, name, _filled(self.depth(call.args[0].value, {})))
        elif method == "extend" and len(call.args) == 1:
            add(names, name, _filled(_shallower(self.depth(call.args[0].value, {}))))
        elif method in ("insert", "setdefault") and len(call.args) == 2:
            add(names, name, _filled(self.depth(call.args[1].value, {})))

    def _arguments(self, call: cst.Call, add, names) -> None:
        """A function's parameters hold what its calls pass."""
        function = self._function(call)
        if function is None:
            return
        params = [p.name.value for p in all_params(function.params)]
        if type(call.func) is cst.Attribute and params[:1] == ["self"]:
            params = params[1:]
        for position, arg in enumerate(call.args):
            if arg.star:
                return
            name = arg.keyword.value if arg.keyword is not None else (
                params[position] if position < len(params) else None)
            if name in params:
                add(names, (id(function), name), self.depth(arg.value, {}))

    def _function(self, call: cst.Call) -> cst.FunctionDef | None:
        func = call.func
        name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
        found = self.functions.get(name or "", ())
        return found[0] if len(found) == 1 else None

    # --- depths of expressions ---------------------------------------------------------------
    def depth(self, expr: cst.BaseExpression, env: dict[str, Depths]) -> Depths:
        """What ``expr`` may hold; ``env``: the targets of the comprehensions around it."""
        kind = type(expr)
        if kind is cst.Name:
            if expr.value in env:
                return env[expr.value]
            return self.names.get(self.key(expr.value, expr), UNKNOWN)
        if kind is cst.Call and len(expr.args) == 1 and qualify(expr.func, self.facts.imports) == "nnsight.save":
            # nnsight 0.5+ code (the check nnsight-05-failures adds it before migration runs):
            # it returns its argument, which holds what it held
            return self.depth(expr.args[0].value, env)
        if is_save_call(expr) or (kind is cst.Call and self.is_nnsight_container(expr)):
            return frozenset({0})
        if kind is cst.Subscript:
            return _shallower(self.depth(expr.value, env))
        if kind is cst.Attribute:
            if expr.attr.value == "value":
                return UNKNOWN
            return self.attributes.get(expr.attr.value, UNKNOWN)
        if kind is cst.Call:
            return self._call_depth(expr, env)
        if kind in (cst.List, cst.Tuple, cst.Set):
            return self._literal(expr.elements, env)
        if kind is cst.Dict:
            return self._literal([e for e in expr.elements if type(e) is cst.DictElement], env)
        if kind in COMPREHENSIONS:
            inner = self.comprehension_env(expr.for_in, env)
            return _deeper(self.depth(expr.value if kind is cst.DictComp else expr.elt, inner))
        if kind is cst.IfExp:
            return self.depth(expr.body, env) | self.depth(expr.orelse, env)
        return UNKNOWN

    def _literal(self, elements, env) -> Depths:
        if not elements:
            return EMPTY
        if any(type(e) in (cst.StarredElement, cst.StarredDictElement) for e in elements):
            return UNKNOWN
        found = frozenset().union(*(self.depth(e.value, env) for e in elements))
        return _deeper(found)

    def _call_depth(self, call: cst.Call, env) -> Depths:
        func = call.func
        name = dotted_name(func)
        if name in ("list", "dict") and not call.args:
            return EMPTY
        if name in SAME_ITEMS and len(call.args) == 1:
            return self.depth(call.args[0].value, env)
        function = self._function(call)
        if function is not None:
            return self.returns.get(function.name.value, UNKNOWN)
        return UNKNOWN

    def items(self, iterable: cst.BaseExpression, env):
        """What iterating over ``iterable`` yields: Depths, or a tuple of Depths for
        `.items()` (key, value), `enumerate(xs)` (index, item) and `zip(xs, ys)`."""
        if type(iterable) is cst.Call:
            func, args = iterable.func, iterable.args
            name = dotted_name(func)
            if type(func) is cst.Attribute and not args and func.attr.value in ("values", "items", "keys"):
                inside = _shallower(self.depth(func.value, env))
                return {"values": inside, "keys": UNKNOWN}.get(func.attr.value, (UNKNOWN, inside))
            if name == "enumerate" and args:
                return UNKNOWN, self.items(args[0].value, env)
            if name == "zip" and args and not any(a.star for a in args):
                return tuple(self.items(a.value, env) for a in args)
            if name in SAME_ITEMS and len(args) == 1:
                return self.items(args[0].value, env)
        return _shallower(self.depth(iterable, env))

    def comprehension_env(self, for_in: cst.CompFor, env: dict[str, Depths]) -> dict[str, Depths]:
        inner = dict(env)
        while for_in is not None:
            table: dict[str, set] = {}
            self._bind_items(for_in.target, self.items(for_in.iter, inner),
                             lambda t, key, depths: t.setdefault(key, set()).update(depths), table,
                             key=lambda name, node: name)
            inner.update({k: frozenset(v) for k, v in table.items()})
            for_in = for_in.inner_for_in
        return inner

    def depth_where_read(self, name: cst.Name) -> Depths:
        """What the name holds where it is read: the value of the one assignment that reaches
        the read through the statements before it (and into the `with` blocks among them,
        whose bodies always run), when that can be told; else every binding of the name."""
        value = _reaching_value(name, self.parents)
        return self.depth(name, {}) if value is None else self.depth(value, {})

    def at(self, node: cst.CSTNode) -> dict[str, Depths]:
        """The comprehension targets seen where ``node`` is, outermost comprehension first."""
        around = []
        parent = self.parents.get(id(node))
        while parent is not None and type(parent) is not cst.FunctionDef:
            if type(parent) in COMPREHENSIONS:
                around.append(parent)
            parent = self.parents.get(id(parent))
        env: dict[str, Depths] = {}
        for comprehension in reversed(around):
            env = self.comprehension_env(comprehension.for_in, env)
        return env


def _filled(items: Depths) -> Depths:
    """What a container holds once ``items`` are put in it: what it is (a saved
    `nnsight.list()`, a plain list) is its binding's to say; only saved items add to it."""
    return _deeper(items - UNKNOWN)


def _deeper(depths: Depths) -> Depths:
    return frozenset(d + 1 if d is not None else None for d in depths)


def _shallower(depths: Depths) -> Depths:
    return frozenset(d - 1 if d is not None and d >= 1 else None for d in depths)


def _reaching_value(name: cst.Name, parents: dict[int, cst.CSTNode]) -> cst.BaseExpression | None:
    """The value of the assignment `name = value` that the read ``name`` sees, found by
    walking back through straight-line code; None where a branch, loop, `try` or the start of
    a function could bring another value (`probs = logits.cpu()` in a loop, then
    `probs = stack(...).save()` last in the trace: the read after the trace sees the save)."""
    node: cst.CSTNode = name
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return None
        if type(parent) in (cst.IndentedBlock, cst.Module) and node in parent.body:
            break
        node = parent
    statement, suite = node, parent
    while True:
        before = suite.body[: suite.body.index(statement)]
        found = _last_assigned(name.value, before)
        if found is not False:
            return found
        block = parents.get(id(suite))  # what holds the suite: a `with` is passed through
        if type(block) is not cst.With:
            return None
        statement, suite = block, parents.get(id(block))
        if type(suite) not in (cst.IndentedBlock, cst.Module):
            return None


def _last_assigned(name: str, statements) -> cst.BaseExpression | None | bool:
    """The value the last statement binding ``name`` among ``statements`` gives it; None when
    that statement binds it otherwise (or may not); False when none binds it."""
    for statement in reversed(statements):
        if name not in collect(statement).binds:
            continue
        if type(statement) is cst.With and isinstance(statement.body, cst.IndentedBlock):
            found = _last_assigned(name, statement.body.body)
            return None if found is False else found
        small = statement.body if type(statement) is cst.SimpleStatementLine else ()
        if len(small) == 1 and type(small[0]) is cst.Assign and len(small[0].targets) == 1:
            target = small[0].targets[0].target
            if type(target) is cst.Name and target.value == name:
                return small[0].value
        return None
    return False

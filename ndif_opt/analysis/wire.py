"""What may cross the wire from NDIF back to your machine, and what can stay behind.

What a session saves, records for the replay or brings back for the code after it is
`torch.save`d on the server and loaded on your machine. Data crosses (tensors, numbers,
strings, lists and dicts of them, numpy arrays); some objects never do: a module
(`cannot pickle 'module' object`), a function, lambda or class the script defines (the
server's `__main__` is not the script's), an instance of such a class, an open file, a
generator, a progress bar, a lock. :func:`wire_problem` is the one rule every pass asks
before a value crosses, from how the code binds it (a conservative reading: a binding it
cannot classify is data).

A *definition* — an import, a `def`, a `class`, `f = lambda ...` — binds such an object
but computes nothing: it can run on your machine before the session instead, once, and
the session reads the name as it reads any other client name (modules by reference, your
functions by value). :func:`hoistable_definition` says when that keeps what the script
does: the statement runs whenever its place in the region is reached (not under an `if`
or a `try`), and nothing it reads when it runs or when it is called is bound in the
region.
"""

from __future__ import annotations

import functools

import libcst as cst

from ndif_opt.analysis.effects import PROGRESS_BARS
from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import all_params, collect, collect_all, free_reads, is_generator_function, target_names
from ndif_opt.analysis.vocabulary import STORING_METHODS
from ndif_opt.syntax.walk import find_nodes

# What :func:`_made_by` says of the script's own functions and classes (a call's result that
# is given one holds it: :func:`_held_argument`).
SCRIPT_FUNCTION = "a function the script defines"
SCRIPT_CLASS = "a class the script defines"

# Calls that return an object which cannot be pickled.
_UNPICKLABLE_CALLS = {
    "open": "an open file",
    "io.open": "an open file",
    "threading.Lock": "a lock",
    "threading.RLock": "a lock",
    "multiprocessing.Lock": "a lock",
    **{bar: "a progress bar" for bar in PROGRESS_BARS},
}


def wire_problem(name: str, statements, facts: Facts) -> str:
    """Why a value ``statements`` bind to ``name`` cannot cross from NDIF to your machine
    ("`torch` is a module"), or "" when every binding of it there is data as far as the
    code shows."""
    for stmt in statements:
        for node in _binders_by_name(stmt).get(name, ()):
            what = _bound_object(node, name, facts)
            if what:
                return f"`{name}` is {what}, which cannot be sent back from NDIF"
    return ""


def stored_problem(container: str, statements, facts: Facts) -> str:
    """Why what ``statements`` store into ``container`` (`xs.append(v)`, `d[k] = v`)
    cannot cross from NDIF to your machine when the container comes back from a session
    (a function, a class, a module, a generator), or "" when all of it is data as far as
    the code shows."""
    for stmt in statements:
        for value in _stored_values(stmt, container):
            what = _made_by(value, facts)
            if not what and type(value) is cst.Name:
                problem = wire_problem(value.value, statements, facts)
                if problem:
                    return f"`{container}` would hold `{value.value}`, and {problem}"
            elif what:
                return f"`{container}` would hold {what}, which cannot be sent back from NDIF"
    return ""


def bound_value_problem(name: str, facts: Facts) -> str:
    """Why an object ``name`` is bound to (by a plain assignment anywhere in the script)
    cannot travel to NDIF and back — it holds an open file, a generator, a function... —
    or "": a container a session takes along is sent with everything in it."""
    what = _named_object(name, facts, 0)
    return f"`{name}` is or holds {what}, which cannot travel to NDIF and back" if what else ""


def _stored_values(stmt: cst.CSTNode, container: str) -> list[cst.BaseExpression]:
    """The values (and keys) ``stmt`` puts into the object named ``container``."""
    found: list[cst.BaseExpression] = []
    for node in find_nodes(stmt, lambda n: isinstance(n, (cst.Call, cst.Assign))):
        if isinstance(node, cst.Call):
            func = node.func
            if (isinstance(func, cst.Attribute) and func.attr.value in STORING_METHODS
                    and isinstance(func.value, cst.Name) and func.value.value == container):
                found += [arg.value for arg in node.args]
        else:
            for target in node.targets:
                t = target.target
                if isinstance(t, cst.Subscript) and isinstance(t.value, cst.Name) and t.value.value == container:
                    found.append(node.value)
                    found += [e.slice.value for e in t.slice if isinstance(e.slice, cst.Index)]  # `d[key] = v`
    return found


_BINDERS = (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef, cst.Assign, cst.WithItem, cst.For)


@functools.lru_cache(maxsize=4096)
def _binders_by_name(stmt: cst.CSTNode) -> dict[str, list[cst.CSTNode]]:
    """The nodes of ``stmt`` that bind each name, in the order of the code: the passes ask
    about many names of one region, and one walk per statement answers them all (a fact
    of the statement alone: cached by node, shared, not to be changed)."""
    found: dict[str, list[cst.CSTNode]] = {}
    for node in find_nodes(stmt, lambda n: type(n) in _BINDERS):
        for name in _names_bound_by(node):
            found.setdefault(name, []).append(node)
    return found


def _names_bound_by(node: cst.CSTNode) -> set[str]:
    """The names a node of :data:`_BINDERS` binds, as :func:`_bound_object` tells them."""
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return set(collect(node).binds)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return {node.name.value}
    if isinstance(node, cst.WithItem):
        return set(target_names(node.asname.name)) if node.asname is not None else set()
    if isinstance(node, cst.For):
        return set(target_names(node.target))
    return {name for t in node.targets for name in target_names(t.target)}


def _bound_object(node: cst.CSTNode, name: str, facts: Facts) -> str:
    """What kind of unpicklable object ``node`` binds to ``name`` ("" for data, or when
    ``node`` does not bind it)."""
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return "a module or an object imported from one" if name in collect(node).binds else ""
    if isinstance(node, cst.FunctionDef):
        return SCRIPT_FUNCTION if node.name.value == name else ""
    if isinstance(node, cst.ClassDef):
        return SCRIPT_CLASS if node.name.value == name else ""
    if isinstance(node, cst.WithItem):
        bound = node.asname is not None and name in target_names(node.asname.name)
        return _made_by(node.item, facts) if bound else ""
    if isinstance(node, cst.For):  # `for mod in [model.h[0], model.h[1]]`: each element in turn
        elements = _bound_elements(node.target, node.iter, name, facts)
        return next((w for e in elements if (w := _made_by(e, facts))), "")
    if not any(name in target_names(t.target) for t in node.targets):
        return ""
    if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
        return _made_by(node.value, facts)
    return ""


# Attributes on a path from the model that reach values, not modules (`model.config`,
# `layer.output`, `lm_head.weight`): what lies past them is data.
_VALUE_ATTRIBUTES = frozenset({"output", "input", "inputs", "config", "tokenizer", "weight", "bias", "grad",
                               "shape", "dtype", "device", "value", "logits"})


def _made_by(value: cst.BaseExpression, facts: Facts, depth: int = 0) -> str:
    """The unpicklable object an expression makes or holds, or "": a function, a
    generator, a module of the model, and what a display of values holds (a lambda in a
    tuple, a file in a dict, a module as a key)."""
    if depth > 4:
        return ""
    kind = type(value)
    if kind is cst.Lambda:
        return SCRIPT_FUNCTION
    if kind is cst.GeneratorExp:
        return "a generator"
    if kind in (cst.Tuple, cst.List, cst.Set):
        return next((w for e in value.elements if (w := _made_by(e.value, facts, depth + 1))), "")
    if kind in (cst.ListComp, cst.SetComp):
        return _made_by_in(value.elt, value, facts, depth + 1)
    if kind is cst.DictComp:
        return _made_by_in(value.key, value, facts, depth + 1) or _made_by_in(value.value, value, facts, depth + 1)
    if kind is cst.Dict:
        parts = [part for e in value.elements
                 for part in ((e.key, e.value) if isinstance(e, cst.DictElement) else (e.value,))]
        return next((w for part in parts if (w := _made_by(part, facts, depth + 1))), "")
    if kind is cst.Name:
        return _named_object(value.value, facts, depth + 1)
    if kind is cst.Attribute and type(value.value) is cst.Name and _defines_enum(facts, value.value.value):
        return "a member of an enum the script defines"  # `Mode.ZERO`
    if kind in (cst.Attribute, cst.Subscript):
        return "a module of the model" if _model_module(value, facts) else ""
    if not isinstance(value, cst.Call):
        return ""
    path = qualify(value.func, facts.imports) or ""
    if path in _UNPICKLABLE_CALLS:
        return _UNPICKLABLE_CALLS[path]
    if isinstance(value.func, cst.Name):
        local = value.func.value
        if _defines_class(facts.module, local):
            return "an instance of a class the script defines"
        function = facts.functions.get(local)
        if function is not None and is_generator_function(function):
            return "a generator"
    return _held_argument(value, facts, depth)


def _made_by_in(part: cst.BaseExpression, comprehension, facts: Facts, depth: int) -> str:
    """:func:`_made_by` of an element of a comprehension: a name its `for` binds is each
    element of what it walks (`{s: [] for s in Split}` holds the members of `Split`)."""
    if type(part) is cst.Name:
        clause = comprehension.for_in
        while clause is not None:
            if type(clause.target) is cst.Name and clause.target.value == part.value:
                return next((w for e in _elements_of(clause.iter, facts) if (w := _made_by(e, facts, depth))), "")
            clause = clause.inner_for_in
    return _made_by(part, facts, depth)


# builtins whose result keeps the function it is given (an iterator that calls it as it goes)
_HOLDING_BUILTINS = frozenset({"map", "filter", "iter"})


def _held_argument(call: cst.Call, facts: Facts, depth: int) -> str:
    """What a call's result holds of a function or class the script defines that it is given
    positionally (`defaultdict(bucket)`, `defaultdict(lambda: [])`, `partial(score, 2)`,
    `map(f, xs)`): an object a library makes keeps what it is made of. Not the result of
    the script's own function (what it returns is read where it is defined), of another
    builtin (`sorted(xs, key=f)` calls `f`), nor of a method of a value (`df.apply(f)`)."""
    func = call.func
    root = func
    while type(root) is cst.Attribute:
        root = root.value
    if type(root) is not cst.Name or root.value in facts.functions:
        return ""
    if root.value not in facts.imports and not (root is func and func.value in _HOLDING_BUILTINS):
        return ""
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            what = _made_by(arg.value, facts, depth + 1)
            if what in (SCRIPT_FUNCTION, SCRIPT_CLASS):
                return f"an object holding {what}"
    return ""


def _defines_enum(facts: Facts, name: str) -> bool:
    """Is ``name`` a class the script defines from the `enum` module's (`class Mode(Enum)`)?
    Its members are its instances, sent by reference to a class the server does not have."""
    return any(isinstance(stmt, cst.ClassDef) and stmt.name.value == name
               and any((qualify(base.value, facts.imports) or "").startswith("enum.") for base in stmt.bases)
               for stmt in facts.module.body)


def _named_object(name: str, facts: Facts, depth: int) -> str:
    """The unpicklable object the name stands for, as far as the script shows: a function
    or class it defines at module level, the model, or what a plain assignment or a `for`
    over a display binds it to (any binding of the name, in any scope: conservative)."""
    if name in facts.functions:
        return SCRIPT_FUNCTION
    if _defines_class(facts.module, name):
        return SCRIPT_CLASS
    if name in facts.models:
        return "the model"
    for _info, value in facts.bindings.get(name, ()):
        what = _made_by(value, facts, depth)
        if what:
            return what
    for loop in _loops_binding(facts.module, name):
        what = next((w for e in _elements_of(loop.iter, facts) if (w := _made_by(e, facts, depth))), "")
        if what:
            return what
    return ""


def _bound_elements(target: cst.BaseExpression, iterable: cst.BaseExpression, name: str,
                    facts: Facts) -> list[cst.BaseExpression]:
    """What a `for` over ``iterable`` binds to ``name`` through ``target``: each element, or a
    part of each when the target unpacks (`for key, value in table.items()`, `for i, (a, b) in
    enumerate(zip(xs, ys))`), as far as the code shows."""
    if type(target) is cst.Name:
        return _elements_of(iterable, facts) if target.value == name else []
    if type(target) not in (cst.Tuple, cst.List):
        return []
    for position, element in enumerate(target.elements):
        if name in target_names(element.value):
            parts = _parts_of(iterable, position, facts) or ()
            return [e for part in parts for e in _bound_elements(element.value, part, name, facts)]
    return []


def _parts_of(iterable: cst.BaseExpression, position: int, facts: Facts) -> list[cst.BaseExpression] | None:
    """Iterables whose elements are the ``position``-th part of each element of ``iterable``:
    the keys or values of a dict display (`.items()`), the ``position``-th argument of `zip`,
    the items of `enumerate`'s argument; None when the code does not show them."""
    if type(iterable) is not cst.Call:
        return None
    func = iterable.func
    args = [a.value for a in iterable.args if a.keyword is None and not a.star]
    if type(func) is cst.Attribute and func.attr.value == "items" and not args:
        entries = [e for d in _dict_displays(func.value, facts) for e in d.elements if isinstance(e, cst.DictElement)]
        return [cst.List([cst.Element(e.key if position == 0 else e.value) for e in entries])]
    if type(func) is cst.Name and func.value == "zip" and position < len(args):
        return [args[position]]
    if type(func) is cst.Name and func.value == "enumerate" and args:
        return [] if position == 0 else [args[0]]
    return None


def _dict_displays(expr: cst.BaseExpression, facts: Facts) -> list[cst.Dict]:
    """The dict displays ``expr`` is (or a name of it is bound to)."""
    if type(expr) is cst.Dict:
        return [expr]
    if type(expr) is cst.Name:
        return [value for _info, value in facts.bindings.get(expr.value, ()) if type(value) is cst.Dict]
    return []


def _elements_of(iterable: cst.BaseExpression, facts: Facts) -> list[cst.BaseExpression]:
    """What a `for` over ``iterable`` binds, as far as the code shows: the elements of a
    display, the element of a comprehension, and those of what a name is bound to."""
    kind = type(iterable)
    if kind in (cst.List, cst.Tuple, cst.Set):
        return [e.value for e in iterable.elements]
    if kind is cst.Name and _defines_enum(facts, iterable.value):  # `for mode in Mode`: its members
        return [cst.Attribute(iterable, cst.Name("member"))]
    if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
        return [iterable.elt]
    if kind is cst.Name:
        return [e for _info, value in facts.bindings.get(iterable.value, ())
                if type(value) is not cst.Name for e in _elements_of(value, facts)]
    return []


@functools.lru_cache(maxsize=1024)
def _loops_binding(module: cst.Module, name: str) -> tuple[cst.For, ...]:
    """The `for name in ...` loops of the module (any depth)."""
    return tuple(n for n in find_nodes(module, lambda n: type(n) is cst.For)
                 if type(n.target) is cst.Name and n.target.value == name)


def _model_module(expr: cst.BaseExpression, facts: Facts) -> bool:
    """Is ``expr`` a module of a model (an nnsight Envoy): a chain of attributes and
    subscripts from a model's name, without a call, that passes no value attribute
    (`model.transformer.h[3]`, `model.lm_head`; not `model.config.n_layer`)?"""
    node = expr
    while type(node) in (cst.Attribute, cst.Subscript):
        if type(node) is cst.Attribute and node.attr.value in _VALUE_ATTRIBUTES:
            return False
        node = node.value
    return type(node) is cst.Name and node.value in facts.models


def _defines_class(module: cst.Module, name: str) -> bool:
    return any(isinstance(stmt, cst.ClassDef) and stmt.name.value == name for stmt in module.body)


def is_definition(stmt: cst.CSTNode) -> bool:
    """An import, a `def`, a `class`, or `name = lambda ...`: a statement that binds an
    object and computes nothing."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return True
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            continue
        if (isinstance(small, cst.Assign) and isinstance(small.value, cst.Lambda) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)):
            continue
        return False
    return True


def hoistable_definition(stmt: cst.CSTNode, bound_in_region, checked_at_calls: bool = False) -> bool:
    """May the definition ``stmt`` run once on your machine before the session instead of
    where it stands? Only when nothing it reads — when it runs (decorators, defaults,
    bases) or when its function is called (the free names of its body) — is bound by the
    region (``bound_in_region``): then the object it makes behaves the same wherever it is
    made. (That it runs whenever its place is reached is the caller's to check.)

    ``checked_at_calls``: a module-level function whose calls the session's own check
    covers (a name the session binds and the function reads is handed over as an
    argument, or the region stays: session-hoisting's hidden globals). Its body reads
    module names when it is called, not where it is defined, so only what the `def`
    itself reads when it runs must not be bound by the region."""
    if not is_definition(stmt):
        return False
    if checked_at_calls and isinstance(stmt, cst.FunctionDef):
        return not (_header_reads(stmt) & set(bound_in_region))
    return not (_reads_of_definition(stmt) & set(bound_in_region))


def _reads_of_definition(stmt: cst.CSTNode) -> set[str]:
    """What a definition reads: when it runs, and, for a function, the free names its
    body reads when it is called (its own locals — parameters, what its body binds —
    are not read from anywhere else)."""
    if not isinstance(stmt, cst.FunctionDef):
        return set(collect(stmt).reads)
    return _header_reads(stmt) | free_reads(stmt)


def _header_reads(func: cst.FunctionDef) -> set[str]:
    """What a `def` reads when it runs: decorators, defaults, annotations (not the
    parameters' own names, which it binds)."""
    params = all_params(func.params)
    header = [*func.decorators, *(p.default for p in params if p.default is not None),
              *(p.annotation for p in params if p.annotation is not None),
              *([func.returns] if func.returns is not None else [])]
    return set(collect_all(header).reads)

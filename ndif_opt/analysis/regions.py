"""Questions about a run of statements that might move into one remote request.

A *region* is a slice ``suite.body[start:end]``. Moving it into a session means: its
client code runs on the server, and only saved values come back. These helpers say
what the rest of the script would miss (names read after the region), which client
objects the region mutates, and how many requests it issues.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Container
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.classes import class_methods
from ndif_opt.analysis.facts import Block, Facts, Remote, StmtInfo, qualify
from ndif_opt.analysis.names import (
    all_params,
    collect,
    definite_binds,
    exposed_reads,
    name_assignment,
    target_names,
)
from ndif_opt.analysis.results import script_result_names
from ndif_opt.analysis.retries import retry_guard
from ndif_opt.analysis.tensors import holds_only_scalars
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import empty_container_kind
from ndif_opt.syntax.walk import all_nodes, children, content_children, find_nodes, walk

UNKNOWN_TRIPS = 2  # a loop of unknown length issues "many" requests: at least two


def owner_statement(facts: Facts, suite: cst.CSTNode) -> StmtInfo | None:
    """The compound statement whose indented block is ``suite`` (None for the module)."""
    if isinstance(suite, cst.Module):
        return None
    for info in facts.statements.values():
        if info.suite is suite:
            if not info.ancestors:
                return None
            owner = info.ancestors[-1]
            return facts.statements.get(id(owner))
    return None


def bound_before(facts: Facts, info: StmtInfo | None, name: str) -> bool:
    """Is ``name`` bound whenever the statement of ``info`` starts: by an earlier
    statement of its suite or of an enclosing one (a class body reads the module's names
    too), or as a parameter of its function?"""
    while info is not None:
        if any(name in definite_binds(stmt) for stmt in info.suite.body[: info.index]):
            return True
        if not info.ancestors:
            return False
        parent = info.ancestors[-1]
        if isinstance(parent, cst.FunctionDef):
            return name in {param.name.value for param in all_params(parent.params)}
        info = facts.statements.get(id(parent))
    return False


def reads_after(facts: Facts, suite: cst.CSTNode, end: int) -> dict[str, cst.CSTNode]:
    """Names the script may read after ``suite.body[:end]`` has run (conservative); a
    result of the script (:func:`script_results`) is read when it ends."""
    return _after(facts, suite, end)[0]


def results_kept(facts: Facts, suite: cst.CSTNode, end: int) -> frozenset[str]:
    """The script's results whose values after ``suite.body[:end]`` the script may end
    with: module-level results that the code after it does not bind again for sure."""
    return _after(facts, suite, end)[1]


def _after(facts: Facts, suite: cst.CSTNode, end: int) -> tuple[dict[str, cst.CSTNode], frozenset[str]]:
    reads: dict[str, cst.CSTNode] = {}
    killed: set[str] = set()  # bound for sure before any read still to come

    def add(found: dict[str, cst.CSTNode]) -> None:
        for name, node in found.items():
            if name not in killed:
                reads.setdefault(name, node)

    def run(stmts) -> None:
        add(exposed_reads(stmts))
        for stmt in stmts:
            killed.update(definite_binds(stmt))

    run(suite.body[end:])
    info = owner_statement(facts, suite)
    in_function = False
    while info is not None:
        node = info.node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            in_function = isinstance(node, cst.FunctionDef)
            break
        if isinstance(node, cst.For):
            # the loop runs its body again, its target bound anew first
            targets = set(target_names(node.target))
            add({n: v for n, v in exposed_reads(node.body.body).items() if n not in targets})
            if node.orelse is not None:
                add(collect(node.orelse).reads)
        elif isinstance(node, cst.While):
            add(collect(node).reads)  # the loop runs its test and body again
        run(info.suite.body[info.index + 1 :])
        info = facts.statements.get(id(info.ancestors[-1])) if info.ancestors else None
        if info is None:
            break
    if not in_function:
        # module-level names are also read by functions called later (their own
        # parameters and locals are other variables)
        for func in facts.functions.values():
            body = collect(func.body)
            local = set(body.binds) | {p.name.value for p in all_params(func.params)}
            for name, node in body.reads.items():
                if name not in local:
                    reads.setdefault(name, node)
        # and the script's results are read when it ends (python -i, %run, runpy, an
        # import, a debugger): each holds what it held, unless bound again for sure
        kept = {name: node for name, node in script_results(facts).items() if name not in killed}
        add(kept)
        return reads, frozenset(kept)
    return reads, frozenset()


def script_results(facts: Facts) -> dict[str, cst.CSTNode]:
    """The script's results (:mod:`ndif_opt.analysis.results`), each with its first binding
    in this version of the tree (the module itself when this version binds it nowhere):
    the names of the code as written, which the pipeline hands to every version
    (``facts.original_results``)."""
    return facts.once(_results_here)


def result_names(facts: Facts) -> frozenset[str]:
    """The names of :func:`script_results`."""
    return frozenset(script_results(facts))


def intermediates(facts: Facts) -> frozenset[str]:
    """Module-level names that are not results of the script (see :func:`script_results`):
    a rewrite may let them go when nothing reads them, saying so in a finding."""
    results = script_results(facts)
    return frozenset(name for name in collect(facts.module).binds if name not in results)


def _results_here(facts: Facts) -> dict[str, cst.CSTNode]:
    names = facts.original_results
    if names is None:  # facts made outside the pipeline: the code is as written
        code = facts.module.code
        names = script_result_names(ast.parse(code), code)
    bound = collect(facts.module).binds
    return {name: bound.get(name, facts.module) for name in names}


@dataclass(frozen=True)
class Accumulator:
    name: str
    kind: str  # list | dict | carried (any fresh object, sent to the session and saved there)
    stmt: cst.SimpleStatementLine | None  # the `name = []` statement (None: carried)
    index: int  # its index in the suite (-1: carried)


# Calls that return a new object nothing else refers to.
FRESH_OBJECT_CALLS = frozenset(
    {
        "list", "dict", "set", "collections.defaultdict", "collections.OrderedDict", "collections.Counter",
        "collections.deque", "torch.zeros", "torch.ones", "torch.full", "torch.empty", "torch.zeros_like",
        "torch.ones_like", "torch.full_like", "torch.empty_like", "torch.tensor", "numpy.zeros", "numpy.ones",
        "numpy.full", "numpy.empty",
    }
)


def carried_container(
    facts: Facts, name: str, suite: cst.CSTNode, end: int | None = None
) -> tuple[Accumulator | None, str]:
    """A container the region may take with it into the session (``name =
    nnsight.save(name)`` at its start) and bring back: bound only to new objects that
    no other name refers to, in the scope of ``suite``, and never aliased there. With
    ``end`` (the region ends before ``suite.body[end]``), a second name given after the
    region is given to what came back, and counts only when a loop runs the region again."""
    info, func, scope = _scope_of(facts, suite)
    why = _parameter_reason(func, name)
    if why:
        return None, why
    bindings = [value for stmt, value in facts.bindings.get(name, ()) if stmt.function is func]
    bindings += _unpacked_bindings(scope, name)
    if not bindings and func is not None and any(stmt.function is None for stmt, _ in facts.bindings.get(name, ())):
        where = func.name.value
        return None, (f"`{name}` is created at module level, outside `{where}`, which fills it: a container made "
                      f"in `{where}` would not be the module's `{name}`")
    if not bindings:
        return None, f"`{name}` is not created in this function or module by a plain assignment"
    for value in bindings:
        if not _fresh_object(value, facts):
            return None, (
                f"`{name}` is bound to `{_short(value)}`, which may be shared with other names; "
                "only a new list, dict, set or tensor can travel to the session and back"
            )
    why = _alias_reason(facts, name, scope, _after_every_run(facts, info, func, suite, end))
    if why:
        return None, why
    return Accumulator(name, "carried", None, -1), ""


def shared_elsewhere(facts: Facts, name: str, suite: cst.CSTNode, end: int | None = None) -> str:
    """Why the object ``name`` holds when a region of ``suite`` (ending before
    ``suite.body[end]``) starts may be seen through something else than the name, or "":
    it is a parameter (the caller holds it), or another name may reach it (the rule of
    :func:`carried_container`, for an object of any kind). A region that changes that
    object in place (`acc += [x]`, `h += delta` on a list or tensor) changes what the
    other holder sees; in a session it would change a copy."""
    info, func, scope = _scope_of(facts, suite)
    return _parameter_reason(func, name) or _alias_reason(facts, name, scope,
                                                          _after_every_run(facts, info, func, suite, end))


def _parameter_reason(func: cst.FunctionDef | None, name: str) -> str:
    """Why the object ``name`` holds is the caller's too: it is a parameter of ``func``; or ""."""
    if func is not None and name in {p.name.value for p in all_params(func.params)}:
        return f"`{name}` is a parameter: the caller's object would not see the changes"
    return ""


def _alias_reason(facts: Facts, name: str, scope: cst.CSTNode, later: list[cst.CSTNode]) -> str:
    """Why another name of ``scope`` may reach the object ``name`` holds (:func:`escape_of`,
    ``later``: the statements after the region), or ""."""
    where = escape_of(name, scope, later, facts)
    if where:
        return f"`{name}` is also reachable through another name ({where}), which would not see the session's changes"
    return ""


def holds_immutable(facts: Facts, name: str, suite: cst.CSTNode, changing: Container[int]) -> bool:
    """Is ``name`` bound in its scope only to literals of immutable values (a number, a
    string, a tuple of them), apart from the augmented assignments ``changing`` (ids of
    nodes) of a region of ``suite``? Then what it holds when the region starts is such a
    value, which `+=` does not change in place (a new object is bound instead)."""
    _, func, scope = _scope_of(facts, suite)
    if _parameter_reason(func, name):
        return False  # what the caller passed
    found = _immutables_bound(scope, name, changing)
    return bool(found)  # (None: something else; False: bound to nothing here)


def _immutables_bound(scope: cst.CSTNode, name: str, changing: Container[int]) -> bool | None:
    """Does ``scope`` bind ``name`` to immutable literals (True), to nothing (False), or
    to anything else (None)? A function of the scope that declares it `global` or
    `nonlocal` binds it too: its bindings count. An augmented assignment of an immutable
    literal (`n += 1`) keeps an immutable value immutable (or raises): it binds nothing
    new; so do ``changing``'s."""
    literal = False
    for node in _binders_of_scope(scope):
        if id(node) in changing or type(node) in (cst.Global, cst.Nonlocal):
            continue
        if type(node) is cst.AugAssign and type(node.target) is cst.Name and node.target.value == name \
                and _immutable_literal(node.value):
            continue
        if type(node) in _NESTED_SCOPES and _declares_outer(node, name):
            inner = _immutables_bound(node.body, name, changing)
            if inner is None:
                return None
            literal = literal or inner
            continue
        values = _values_bound(node, name)
        if values is None or not all(map(_immutable_literal, values)):
            return None
        literal = literal or bool(values)
    return literal


def _declares_outer(scope: cst.CSTNode, name: str) -> bool:
    """Does a `global` or `nonlocal` statement of ``scope`` (a function, class or lambda)
    name ``name``?"""
    return any(type(n) in (cst.Global, cst.Nonlocal) and name in (item.name.value for item in n.names)
               for n in find_nodes(scope, lambda n: type(n) in (cst.Global, cst.Nonlocal)))


_BINDING_NODES = frozenset({cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.WithItem, cst.NamedExpr,
                            cst.CompFor, cst.AsName, cst.ImportAlias, cst.Global, cst.Nonlocal, cst.Param, cst.Del,
                            cst.FunctionDef, cst.ClassDef})


_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _binders_of_scope(node: cst.CSTNode):
    """The nodes that may bind a name of the scope ``node`` is the body of: those of
    _BINDING_NODES, not inside the functions, classes and lambdas it defines (their
    names are the scope's: those nodes themselves are given)."""
    for child in children(node):
        kind = type(child)
        if kind in _NESTED_SCOPES:
            yield child
            continue
        if kind in _BINDING_NODES:
            yield child
        yield from _binders_of_scope(child)


def _values_bound(node: cst.CSTNode, name: str) -> list[cst.BaseExpression] | None:
    """The values ``node`` binds ``name`` to ([]: it does not bind it); None when it binds
    it to something that is not an expression of the code (a loop's items, an import, a
    parameter) or that cannot be matched to it."""
    kind = type(node)
    if kind is cst.Assign:
        values = []
        for target in node.targets:
            if type(target.target) is cst.Name:
                if target.target.value == name:
                    values.append(node.value)
            elif name in target_names(target.target):
                if not (type(target.target) is type(node.value) is cst.Tuple
                        and len(target.target.elements) == len(node.value.elements)):
                    return None
                for element, value in zip(target.target.elements, node.value.elements):
                    if type(element.value) is cst.Name and element.value.value == name:
                        values.append(value.value)
                    elif name in target_names(element.value):
                        return None
        return values
    if kind is cst.AnnAssign and type(node.target) is cst.Name and node.target.value == name:
        return [node.value] if node.value is not None else []
    if kind in (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del):
        bound = target_names(node.target)
    elif kind is cst.WithItem:
        bound = target_names(node.asname.name) if node.asname is not None else []
    elif kind is cst.AsName:
        bound = target_names(node.name) if isinstance(node.name, cst.BaseExpression) else []
    elif kind is cst.ImportAlias:
        bound = [node.evaluated_alias or node.evaluated_name.split(".")[0]]
    elif kind in (cst.Global, cst.Nonlocal):
        bound = [item.name.value for item in node.names]
    elif kind is cst.Lambda:
        bound = []
    else:  # Param, FunctionDef, ClassDef
        bound = [node.name.value]
    return None if name in bound else []


_IMMUTABLE_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                       cst.FormattedString)


def _immutable_literal(expr: cst.BaseExpression) -> bool:
    kind = type(expr)
    if kind in _IMMUTABLE_LITERALS:
        return True
    if kind is cst.Name:
        return expr.value in ("True", "False", "None")
    if kind is cst.UnaryOperation:
        return _immutable_literal(expr.expression)
    if kind is cst.BinaryOperation:
        return _immutable_literal(expr.left) and _immutable_literal(expr.right)
    if kind is cst.Tuple:
        return all(_immutable_literal(e.value) for e in expr.elements)
    return False


def _scope_of(facts: Facts, suite: cst.CSTNode) -> tuple[StmtInfo | None, cst.FunctionDef | None, cst.CSTNode]:
    """The statement that owns ``suite``, the function around it (None at module level),
    and that function's body or the module: the scope of the names bound in ``suite``."""
    info = owner_statement(facts, suite)
    func = None
    if info is not None:
        func = next((a for a in reversed((*info.ancestors, info.node)) if isinstance(a, cst.FunctionDef)), None)
    return info, func, func.body if func is not None else facts.module


def _after_every_run(facts: Facts, info: StmtInfo | None, func: cst.FunctionDef | None, suite: cst.CSTNode,
                     end: int | None) -> list[cst.CSTNode]:
    """The statements of the scope that run after every run of the region ending before
    ``suite.body[end]`` (none when ``end`` is None): those after it, in its suite and past
    the blocks around it; in a loop, only those past the outermost loop around it (what
    follows the region inside the loop runs before its next run)."""
    if end is None:
        return []
    later: list[cst.CSTNode] = []
    owner = info
    loop = _outermost_loop(info, func)
    if loop is None:
        later = list(suite.body[end:])
    else:
        owner = facts.statements.get(id(loop))
    while owner is not None and owner.node is not func:
        later += owner.suite.body[owner.index + 1 :]  # what follows the enclosing blocks
        owner = facts.statements.get(id(owner.ancestors[-1])) if owner.ancestors else None
    return later


def _outermost_loop(info: StmtInfo | None, func: cst.FunctionDef | None) -> cst.CSTNode | None:
    """The outermost `for`/`while` of ``func`` (or the module) around the suite ``info`` owns
    (``info`` itself included)."""
    if info is None:
        return None
    chain = (*info.ancestors, info.node)
    start = chain.index(func) + 1 if func is not None and func in chain else 0
    return next((node for node in chain[start:] if isinstance(node, (cst.For, cst.While))), None)


def _unpacked_bindings(scope: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
    """The values ``name`` gets from `a, b = {}, []` statements directly in ``scope``."""
    found = []
    for stmt in getattr(scope, "body", ()):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not (isinstance(small, cst.Assign) and isinstance(small.value, cst.Tuple)):
                continue
            for target in small.targets:
                if isinstance(target.target, cst.Tuple) and len(target.target.elements) == len(small.value.elements):
                    for element, value in zip(target.target.elements, small.value.elements):
                        if isinstance(element.value, cst.Name) and element.value.value == name:
                            found.append(value.value)
    return found


def _fresh_object(expr: cst.BaseExpression, facts: Facts) -> bool:
    if isinstance(expr, (cst.List, cst.Set, cst.Tuple, cst.Dict)):
        return not any(_shared_reference(e.value) for e in expr.elements)
    if isinstance(expr, (cst.ListComp, cst.DictComp, cst.SetComp)):
        return True
    if isinstance(expr, cst.Call):
        path = qualify(expr.func, facts.imports) or ""
        return path in FRESH_OBJECT_CALLS or path.split(".")[-1] in ("defaultdict",)
    return False


def _shared_reference(expr: cst.BaseExpression) -> bool:
    """Is ``expr`` (an element of a container written out) an object another name may
    hold (`{"vals": results}`)? A change made through the container would reach it. A
    starred element (`[*xs]`) copies, a literal or a call makes a new value."""
    if type(expr) is cst.Name:
        return expr.value not in ("None", "True", "False")
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        return True
    if isinstance(expr, (cst.List, cst.Set, cst.Tuple, cst.Dict)):
        return any(_shared_reference(e.value) for e in expr.elements if not isinstance(e, cst.StarredDictElement))
    return False


# Builtins that read what they are given and keep no reference to it.
_READING_BUILTINS = frozenset(
    {"len", "print", "sorted", "list", "tuple", "set", "dict", "str", "repr", "sum", "min", "max", "any", "all",
     "isinstance", "type", "id", "bool", "hash", "format", "enumerate", "zip", "reversed", "iter", "round", "abs"}
)


def _aliased(name: str, scope: cst.CSTNode, later=(), facts: Facts | None = None) -> bool:
    """Does ``name``'s object get a second name anywhere in ``scope`` but ``later``?"""
    return bool(escape_of(name, scope, later, facts))


def escape_of(name: str, scope: cst.CSTNode, later=(), facts: Facts | None = None) -> str:
    """Where ``name``'s object may become reachable through something other than the
    name (the construct, in words), or "": stored in another object, a bound method or a
    default value made of it, handed to a call that may keep it."""
    finder = _AliasFinder(name, {id(n) for n in later}, facts)
    walk(scope, finder)
    return finder.where


_STRING_LITERALS = frozenset({cst.SimpleString, cst.ConcatenatedString, cst.FormattedString})
# methods that, of the builtin types, only str and bytes have, and that build a new string of
# their arguments (a class of the file may define one of these names: then it may keep them)
_STRING_BUILDERS = frozenset({"join", "format", "format_map"})


class _AliasFinder(cst.CSTVisitor):
    """Finds where a name's object gets a second name: `other = name`, `x.attr = name`,
    `container.append(name)`, `{"k": name}`, `return name`, `global name`, `def f(s=name)`,
    `add = name.append`, `Log(name)`, `functools.partial(f, name)`."""

    def __init__(self, name: str, skip: set[int] = frozenset(), facts: Facts | None = None) -> None:
        self.name = name
        self.skip = skip
        self.facts = facts
        self.where = ""
        self.called: set[int] = set()  # the `func` of each call seen

    def _note(self, hit: bool, node: cst.CSTNode, what: str) -> None:
        if hit and not self.where:
            line = code_of(node).strip().splitlines()[0] if code_of(node).strip() else ""
            self.where = f"{what} (`{line[:60]}`)"

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.skip and super().on_visit(node)

    def visit_Param(self, node: cst.Param) -> None:
        self._note(node.default is not None and _is_name(node.default, self.name), node,
                   "it is a parameter's default value")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._note(id(node) not in self.called and _is_name(node.value, self.name), node,
                   "one of its methods is taken as a value")

    def visit_Yield(self, node: cst.Yield) -> None:
        self._note(isinstance(node.value, cst.BaseExpression) and _is_name(node.value, self.name), node, "it is yielded")

    def _kept_by_call(self, node: cst.Call) -> bool:
        """May the call keep a reference to an argument? Not a method of a string, a reading builtin, nor a
        function of this file that stores none of its parameters, nor a function of an
        imported module other than `functools`."""
        func = node.func
        facts = self.facts
        if type(func) is cst.Attribute and type(func.value) in _STRING_LITERALS:
            return False  # a method of a string (`" ".join(words)`) makes a new one
        if type(func) is cst.Attribute and func.attr.value in _STRING_BUILDERS and not (
                facts is not None and any(func.attr.value in methods for methods in class_methods(facts).values())):
            return False  # `sep.join(words)`: of the builtins' methods, only a string's; it makes a new one
        if type(func) is cst.Name:
            if facts is not None and func.value in facts.functions:
                target = facts.functions[func.value]
                return any(_aliased(p.name.value, target.body) for p in all_params(target.params))
            if func.value in _READING_BUILTINS and (facts is None or func.value not in facts.bindings):
                return False
        if facts is not None and isinstance(func, (cst.Name, cst.Attribute)):
            while type(func) is cst.Attribute:
                func = func.value
            root = func.value if type(func) is cst.Name else None
            if root in facts.imports and facts.imports[root].split(".")[0] != "functools":
                return False
            if root is not None and type(node.func) is cst.Attribute and facts.is_model_like(root):
                return False  # a method of the model's (`model.tokenizer.decode(ids)`)
        return True

    def visit_Assign(self, node: cst.Assign) -> None:
        self._note(_is_name(node.value, self.name), node, "another name is bound to it")
        self._note(_part_of(node.value, self.name), node,
                   "a part of it is bound to another name (an element, or a view sharing its memory)")

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False  # `a, b = ...` binds names, it does not store them

    def visit_For(self, node: cst.For) -> bool:
        walk(node.iter, self)
        walk(node.body, self)
        if node.orelse is not None:
            walk(node.orelse, self)
        return False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        self.called.add(id(func))
        passed = any(_is_name(a.value, self.name) for a in node.args)
        if isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend", "insert", "add", "update", "setdefault"):
            self._note(passed, node, "it is stored in another container")
        elif isinstance(func, cst.Attribute) and _is_name(func.value, self.name):
            pass  # its own method
        else:
            self._note(passed and self._kept_by_call(node), node, "it is handed to a call that may keep it")

    def visit_Element(self, node: cst.Element) -> None:
        self._note(_is_name(node.value, self.name), node, "it is stored in another container")

    def visit_DictElement(self, node: cst.DictElement) -> None:
        self._note(_is_name(node.value, self.name), node, "it is stored in another container")

    def visit_Return(self, node: cst.Return) -> None:
        self._note(node.value is not None and _is_name(node.value, self.name), node, "it is returned")

    def visit_Global(self, node: cst.Global) -> None:
        self._note(any(n.name.value == self.name for n in node.names), node, "it is declared `global`")


# Tensor and array methods whose result may share the memory of the object they are called on.
VIEW_METHODS = frozenset({"view", "view_as", "reshape", "transpose", "permute", "narrow", "expand", "expand_as",
                          "squeeze", "unsqueeze", "flatten", "unflatten", "select", "diagonal", "unfold", "detach",
                          "as_strided", "numpy", "t", "swapaxes", "movedim", "split", "chunk", "unbind", "ravel"})
VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})


def _part_of(expr: cst.BaseExpression, name: str) -> bool:
    """Is ``expr`` a part of ``name``'s object that shares it: `name[i]`, `name[:10]`,
    `name.T`, `name.view(-1)`, followed down (`name[0].view(2, 2)`)?"""
    seen_part = False
    while True:
        kind = type(expr)
        if kind is cst.Subscript:
            expr = expr.value
        elif kind is cst.Attribute and expr.attr.value in VIEW_ATTRIBUTES:
            expr = expr.value
        elif kind is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in VIEW_METHODS:
            expr = expr.func.value
        else:
            return seen_part and _is_name(expr, name)
        seen_part = True


def _is_name(expr: cst.BaseExpression | None, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _short(expr: cst.BaseExpression) -> str:
    text = code_of(expr)
    return text if len(text) <= 40 else text[:37] + "..."


def client_objects_filled(block: Block, facts: Facts) -> dict[str, cst.CSTNode]:
    """Objects of the client's scope that ``block`` changes in place (`d[k] = v`,
    `xs.append(v)`) without binding them, name -> the first change: not its model, nor the
    object holding it when every change goes through the model (`self.model...[:] = x` is
    an intervention, not `self` filled). Remotely, the block changes the server's copy."""
    names = block.names
    return {
        name: node for name, node in names.mutates.items()
        if (name not in names.binds or _changed_by_augmenting_only(block, name, facts))
        and not facts.is_model_like(name) and not ("." in block.model and _intervenes_only(block, name))
    }


def _changed_by_augmenting_only(block: Block, name: str, facts: Facts) -> bool:
    """Does ``block`` bind ``name`` only by `name += v` (and the like), of an object that
    may be a list, dict, array or tensor, and read it nowhere else (where it might be
    saved or recorded, and so come back)? Then it changes the object it was given in
    place, the client's, and nothing brings the change back."""
    if holds_only_scalars(facts, name):
        return False  # (a number's `+=` makes a new value in the block: nothing is filled)
    augmenting = find_nodes(block.node.body, lambda n: type(n) is cst.AugAssign and type(n.target) is cst.Name
                            and n.target.value == name)
    if not augmenting:
        return False
    rest = collect(block.node.body, skip=tuple(augmenting))
    return name not in rest.binds and name not in rest.reads


def client_objects_filled_remotely(facts: Facts) -> list[tuple[str, Block]]:
    """(name, block): the client objects an outermost block that may run remotely fills
    (:func:`client_objects_filled`): on NDIF each stays as it was on the client."""
    return [(name, block) for block in facts.blocks
            if block.parent is None and block.remote.state is not Remote.NO
            for name in client_objects_filled(block, facts)]


def _intervenes_only(block: Block, name: str) -> bool:
    """Is every change the block makes to ``name`` a change through its model
    (`self.model...` when the model is `self.model`)?"""
    if block.model.split(".")[0] != name:
        return False
    prefix = block.model
    for node in find_nodes(block.node.body, lambda n: isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.Call))):
        target = node.target if not isinstance(node, cst.Call) else node.func
        code = code_of(target)
        if code.split(".")[0].split("[")[0] != name:
            continue
        if not (code.startswith(prefix + ".") or code.startswith(prefix + "[")):
            return False
    return True


def find_accumulator(
    facts: Facts, name: str, suite: cst.CSTNode, start: int
) -> tuple[Accumulator | None, str]:
    """The `name = []`-like statement before ``suite.body[start]`` that the region may
    take over, or None and the reason it cannot."""
    body = suite.body
    for index in range(start - 1, -1, -1):
        stmt = body[index]
        use = collect(stmt)
        if name in use.binds:
            kind = empty_container_binding(stmt, name)
            if kind is None:
                return None, f"`{name}` is not created as an empty list or dict right before"
            return Accumulator(name, kind, stmt, index), ""
        if name in use.reads or name in use.mutates:
            return None, f"`{name}` is used on your machine before the remote code runs"
    return None, f"`{name}` is not created in the same block of code as the loop (it comes from an enclosing block or function)"


def empty_container_binding(stmt: cst.BaseStatement, name: str) -> str | None:
    """"list" / "dict" when ``stmt`` is `name = []` / `name = {}` (or `list()`, `dict()`)."""
    found = name_assignment(stmt)
    return empty_container_kind(found[1]) if found is not None and found[0] == name else None


def trip_count(loop: cst.CSTNode, facts: Facts) -> int | None:
    """Iterations of a `for` loop when they are known statically, else None: those that
    run its whole body, when a `break` stops it at an item known before running
    (:func:`constant_break`)."""
    if type(loop) is not cst.For:
        return None
    if retry_guard(loop, facts) is not None:
        return 1  # a retry sends its request once when it succeeds
    stop = constant_break(loop, facts)
    return stop[0] if stop is not None else iterable_length(loop.iter, facts)


def constant_break(loop: cst.For, facts: Facts) -> tuple[int, int] | None:
    """Where a `for` loop over items known before running (`range(12)`, a display of
    literals, a constant naming one) stops at a `break` decided by its loop variable and
    constants: ``if layer > MAX_LAYER: break`` among the statements of its body. The
    index of the first item whose iteration breaks, and the index in the body of the
    `if` that does; None when no item breaks, or when that cannot be told (an `if` that
    a `continue` before it may skip, a test that reads other names, items not known)."""
    if type(loop.target) is not cst.Name or loop.orelse is not None:
        return None
    name = loop.target.value
    tests = []  # (index in the body, test, True: breaks when the test holds)
    for index, stmt in enumerate(loop.body.body):
        if type(stmt) is cst.If:
            for branch, when in ((stmt.body, True), (stmt.orelse.body if type(stmt.orelse) is cst.Else else None, False)):
                if branch is not None and _breaks(branch):
                    tests.append((index, stmt.test, when))
        if jumps_of_loop(stmt) & {"continue"}:
            break  # an `if` after it may not be reached in every iteration
    if not tests:
        return None
    items = _known_items(loop.iter, facts)
    if items is None:
        return None
    for position, item in enumerate(items):
        for index, test, when in tests:
            decided = _test_value(test, {name: item}, facts)
            if decided is None:
                return None  # (an earlier item's test not known: where it stops is not either)
            if decided == when:
                return position, index
    return None


def _breaks(suite: cst.BaseSuite) -> bool:
    """Does a branch leave its loop with `break` whenever it runs (a `break` among its
    own statements, no `continue` before it)?"""
    for stmt in suite.body if type(suite) is cst.IndentedBlock else ():
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                if type(small) is cst.Break:
                    return True
                if type(small) is cst.Continue:
                    return False
        elif "continue" in jumps_of_loop(stmt):
            return False
    return False


def jumps_of_loop(node: cst.CSTNode) -> set[str]:
    """`break` / `continue` in ``node`` that belong to the loop around it (not to a loop
    or function inside it)."""
    return {"break" if type(jump) is cst.Break else "continue" for jump in _loop_jumps(node)}


def leaves_its_iteration(node: cst.CSTNode) -> bool:
    """Does ``node`` hold a `break` or `continue` of the loop around it?"""
    return next(_loop_jumps(node), None) is not None


# (compared with `is`: libcst's node classes are final, and an isinstance against them is an
# ABC check; the split asks this of every statement it classifies)
_OWN_JUMPS_KINDS = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def _loop_jumps(node: cst.CSTNode):
    """The `break` and `continue` nodes in ``node`` that belong to the loop around it."""
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is cst.Break or kind is cst.Continue:
            yield current
        elif kind is cst.For or kind is cst.While:
            if current.orelse is not None:  # (its `else:` is outside its loop)
                stack.append(current.orelse)
        elif kind not in _OWN_JUMPS_KINDS:
            stack.extend(content_children(current))


_COMPARE = {
    cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b, cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b, cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b, cst.In: lambda a, b: a in b, cst.NotIn: lambda a, b: a not in b,
}


def _known_items(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> list | None:
    """The items of an iterable known before running: `range(...)` of known integers, a
    list or tuple display of literals, a constant naming one of them."""
    if depth > 5:
        return None
    if type(expr) is cst.Name:
        value = facts.constant(expr.value)
        return None if value is None else _known_items(value, facts, depth + 1)
    if type(expr) in (cst.List, cst.Tuple):
        values = [_literal(e.value, {}, facts) if type(e) is cst.Element else None for e in expr.elements]
        return None if any(v is None for v in values) else values
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "range" \
            and 1 <= len(expr.args) <= 3 and all(a.keyword is None and not a.star for a in expr.args) \
            and "range" not in collect(facts.module).binds:
        values = [int_value(a.value, facts) for a in expr.args]
        if any(v is None for v in values) or (len(values) == 3 and values[2] == 0):
            return None
        items = range(*values)
        return list(items) if len(items) <= 4096 else None
    return None


def _literal(expr: cst.BaseExpression, bindings: dict, facts: Facts):
    """The value of ``expr`` from literals, constants and ``bindings`` (None: not known)."""
    kind = type(expr)
    if kind is cst.Name and expr.value in bindings:
        return bindings[expr.value]
    if kind in (cst.Integer, cst.Float, cst.SimpleString) or (
            kind is cst.UnaryOperation and type(expr.operator) is cst.Minus
            and type(expr.expression) in (cst.Integer, cst.Float)):
        try:
            return ast.literal_eval(code_of(expr))
        except (ValueError, SyntaxError):
            return None
    if kind is cst.BinaryOperation:
        return arithmetic(expr, lambda operand: _integer(_literal(operand, bindings, facts)))
    if kind is cst.Name and expr.value in ("True", "False", "None"):
        return None
    if kind in (cst.List, cst.Tuple):
        values = [_literal(e.value, bindings, facts) if type(e) is cst.Element else None for e in expr.elements]
        return None if any(v is None for v in values) else values
    if kind is cst.Name and facts.constant(expr.value) is not None:
        return _literal(facts.constant(expr.value), {}, facts)
    return int_value(expr, facts)


def _integer(value) -> int | None:
    return value if type(value) is int else None


def _test_value(test: cst.BaseExpression, bindings: dict, facts: Facts) -> bool | None:
    """The truth of an `if` test with the names of ``bindings`` given those values (None:
    not known)."""
    kind = type(test)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _test_value(test.expression, bindings, facts)
        return None if inner is None else not inner
    if kind is cst.BooleanOperation:
        left, right = _test_value(test.left, bindings, facts), _test_value(test.right, bindings, facts)
        if type(test.operator) is cst.And:
            return False if False in (left, right) else None if None in (left, right) else True
        return True if True in (left, right) else None if None in (left, right) else False
    if kind is not cst.Comparison:
        return None
    left = _literal(test.left, bindings, facts)
    for target in test.comparisons:
        compare = _COMPARE.get(type(target.operator))
        right = _literal(target.comparator, bindings, facts)
        if compare is None or left is None or right is None:
            return None
        try:
            if not compare(left, right):
                return False
        except TypeError:
            return None
        left = right
    return True


def dict_view_length(expr: cst.BaseExpression, facts: Facts) -> int | None:
    """Entries of `D.items()` / `.keys()` / `.values()` (or `for k in D`) when `D` is a
    dict literal, or a name bound once to one: `{"a": ..., "b": ...}` has 2."""
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute and not expr.args \
            and expr.func.attr.value in ("items", "keys", "values"):
        expr = expr.func.value
    if type(expr) is cst.Name:
        expr = facts.constant(expr.value)
    if type(expr) is cst.DictComp:
        return _keyed_by_distinct_items(expr, facts)
    if type(expr) is not cst.Dict or any(type(e) is not cst.DictElement for e in expr.elements):
        return None
    return len(expr.elements)


def _keyed_by_distinct_items(comp: cst.DictComp, facts: Facts) -> int | None:
    """Entries of `{k: ... for k in ITEMS}` (one `for`, no `if`) whose key is the loop
    variable and whose items are distinct (a `range`, a display of distinct literals):
    one entry per item. Keys that may repeat collapse, so their count is not known."""
    clause = comp.for_in
    if clause.inner_for_in is not None or clause.ifs or type(clause.target) is not cst.Name \
            or type(comp.key) is not cst.Name or comp.key.value != clause.target.value:
        return None
    items = clause.iter
    if type(items) is cst.Name:
        items = facts.constant(items.value) or items
    if type(items) is cst.Call and type(items.func) is cst.Name and items.func.value == "range":
        return iterable_length(items, facts)
    if type(items) in (cst.List, cst.Tuple, cst.Set):
        try:  # (keys compare as Python compares them: `1` and `1.0` are one key)
            values = [ast.literal_eval(code_of(e.value)) for e in items.elements if type(e) is cst.Element]
            distinct = len(values) == len(items.elements) and len(set(values)) == len(values)
        except (ValueError, SyntaxError, TypeError):
            return None
        return len(values) if distinct else None
    return None


def iterable_length(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> int | None:
    if depth > 5:
        return None
    entries = dict_view_length(expr, facts)
    if entries is not None:
        return entries
    # exact classes (libcst's have no subclasses): an ABC isinstance costs more than the answer
    kind = type(expr)
    if kind is cst.List or kind is cst.Tuple or kind is cst.Set:
        if any(type(e) is cst.StarredElement for e in expr.elements):
            return None
        return len(expr.elements)
    if kind is cst.Name:
        value = facts.constant(expr.value)
        return None if value is None else iterable_length(value, facts, depth + 1)
    if kind is cst.Subscript:
        value = constant_item(expr, facts, depth + 1)  # `CONFIG["layers"]`
        return None if value is None else iterable_length(value, facts, depth + 1)
    if kind is cst.Call and type(expr.func) is cst.Name:
        func = expr.func.value
        args = [a.value for a in expr.args if a.keyword is None and not a.star]
        if func == "range" and 1 <= len(args) <= 3:
            values = [int_value(a, facts) for a in args]
            if any(v is None for v in values):
                return None
            return len(range(*values))
        if func in ("enumerate", "list", "tuple", "reversed", "sorted", "tqdm") and args:
            return iterable_length(args[0], facts, depth + 1)
        if func == "zip" and args:
            lengths = [iterable_length(a, facts, depth + 1) for a in args]
            return None if any(n is None for n in lengths) else min(lengths)
    if kind is cst.Call and qualify(expr.func, facts.imports) == "itertools.product":
        if any(a.keyword is not None or a.star for a in expr.args) or not expr.args:
            return None  # (`repeat=`: the cost model's walk knows it)
        lengths = [iterable_length(a.value, facts, depth + 1) for a in expr.args]
        return None if any(n is None for n in lengths) else math.prod(lengths)
    return None


def constant_item(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> cst.BaseExpression | None:
    """The expression a constant stands for: a name bound once at module level
    (:meth:`Facts.constant`), or an item of a constant dict, list or tuple display taken
    with a constant key (`CONFIG["layer"]`, `LAYERS["mid"]`, `SIZES[0]`), followed
    through (`CONFIG["layers"]["mid"]`); None for anything else."""
    if depth > 5:
        return None
    kind = type(expr)
    if kind is cst.Name:
        value = facts.constant(expr.value)
        if value is None:
            return None
        return constant_item(value, facts, depth + 1) or value
    if kind is not cst.Subscript or len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
        return None
    container = expr.value
    if type(container) not in (cst.Dict, cst.List, cst.Tuple):
        container = constant_item(container, facts, depth + 1)
    key = expr.slice[0].slice.value
    item = None
    if type(container) is cst.Dict:
        wanted = _literal_key(key, facts, depth)
        if wanted is None:
            return None
        for element in container.elements:
            if type(element) is not cst.DictElement:
                return None  # `**other`: the key may come from it
            if _literal_key(element.key, facts, depth) == wanted:
                item = element.value  # the last one counts, as in Python
    elif type(container) in (cst.List, cst.Tuple):
        index = int_value(key, facts, depth + 1)
        elements = container.elements
        if index is None or any(type(e) is cst.StarredElement for e in elements):
            return None
        if -len(elements) <= index < len(elements):
            item = elements[index].value
    if item is None:
        return None
    return constant_item(item, facts, depth + 1) or item


def _literal_key(expr: cst.BaseExpression, facts: Facts, depth: int):
    """A dict key as Python would compare it: ("str", text) or ("int", n); None if unknown."""
    if type(expr) is cst.SimpleString:
        value = expr.evaluated_value
        return ("str", value) if isinstance(value, str) else None
    if type(expr) is cst.Name and depth < 5:
        value = facts.constant(expr.value)  # `ARCH = "gpt2"` ... `PATHS[ARCH]`
        if type(value) is cst.SimpleString:
            return _literal_key(value, facts, depth + 1)
    number = int_value(expr, facts, depth + 1)
    return None if number is None else ("int", number)


def int_value(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> int | None:
    if depth > 5:
        return None
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.Subscript):
        item = constant_item(expr, facts, depth + 1)
        return None if item is None else int_value(item, facts, depth + 1)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = int_value(expr.expression, facts, depth + 1)
        return None if value is None else -value
    if isinstance(expr, cst.Name):
        value = facts.constant(expr.value)
        return None if value is None else int_value(value, facts, depth + 1)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len":
        if len(expr.args) == 1:
            return iterable_length(expr.args[0].value, facts, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        return arithmetic(expr, lambda operand: int_value(operand, facts, depth + 1))
    return None


def arithmetic(expr: cst.BinaryOperation, integer) -> int | None:
    """``a + b``, ``a - b``, ``a * b``, ``a // b``, ``a % b`` of integers, the operands
    valued by ``integer`` (None when one is unknown, or for any other operator)."""
    left, right = integer(expr.left), integer(expr.right)
    if left is None or right is None:
        return None
    op = type(expr.operator)
    if op is cst.Add:
        return left + right
    if op is cst.Subtract:
        return left - right
    if op is cst.Multiply:
        return left * right
    if op is cst.FloorDivide and right:
        return left // right
    if op is cst.Modulo and right:  # `if layer % 2: continue` of an unrolled loop
        return left % right
    return None


def requests_in(blocks: list[Block], region: list[cst.CSTNode], facts: Facts, unknown: int = UNKNOWN_TRIPS) -> int:
    """How many requests the outermost ``blocks`` of a region issue, loops counted (a loop
    of unknown length as ``unknown`` iterations)."""
    inside = {id(n) for n in region}
    total = 0
    for block in blocks:
        count = 1
        chain = block.stmt.ancestors + (block.node,)
        entered = False
        for position, node in enumerate(chain):
            if id(node) in inside:
                entered = True
            if entered and (type(node) is cst.For or type(node) is cst.While):
                trips = _trips_reaching(node, chain[position + 1], facts)
                count *= unknown if trips is None else trips
        total += count
    return total


def _trips_reaching(loop: cst.CSTNode, inner: cst.CSTNode, facts: Facts) -> int | None:
    """The iterations of ``loop`` that reach ``inner``, a statement of its body: those that run
    the whole body (:func:`trip_count`), and the one a constant `break` stops when
    ``inner`` comes before the `if` that breaks (`for i in range(3): <trace>; if i == 1:
    break` sends two requests)."""
    stop = constant_break(loop, facts) if type(loop) is cst.For and retry_guard(loop, facts) is None else None
    if stop is None:
        return trip_count(loop, facts)
    first, index = stop
    # (``inner`` is the statement of the loop's body that holds the block: ancestors name
    # every compound statement on the way)
    return first + (1 if any(inner is stmt for stmt in loop.body.body[:index]) else 0)


# Names through which code reads an object's attributes without spelling them.
_REFLECTION = frozenset({
    "getattr", "hasattr", "vars", "setattr", "__dict__", "pickle", "dill", "cloudpickle", "deepcopy",
    "asdict", "astuple", "__getstate__", "__reduce__", "__reduce_ex__", "__getattr__", "__getattribute__",
})


def self_attributes_read_after(
    facts: Facts, region: list[cst.BaseStatement], attrs: list[str], moved: frozenset[str]
) -> dict[str, str]:
    """For each of ``attrs``, why code may read ``self.<attr>`` after ``region``
    (statements of a method) has run, or "" when no code can: only methods of the class
    that only the session runs read it (``moved``: the methods the region calls inside the
    session, and those only they call; not the region's own lines, some of which may stay
    on your machine); the class has no bases or decorators; neither ``self`` nor an
    instance of the class is handed to other code (an argument, a return value, an alias,
    a bound method); and nothing reads attributes by reflection. The module is read once
    for all of them."""
    info = facts.statements.get(id(region[0]))
    method = info.function if info is not None else None
    at = info.ancestors.index(method) if method is not None else 0
    cls = info.ancestors[at - 1] if at > 0 else None
    if not isinstance(cls, cst.ClassDef):
        return dict.fromkeys(attrs, "the code is not in a method of a class")
    if cls.decorators or any(code_of(b.value) != "object" for b in cls.bases):
        return dict.fromkeys(attrs, f"`{cls.name.value}` has bases or decorators, which may read it")
    nodes = all_nodes(facts.module)
    reflection = sorted({n.value for n in nodes if type(n) is cst.Name} & _REFLECTION)
    if reflection:
        return dict.fromkeys(attrs, f"the script reads attributes by name (`{reflection[0]}`)")
    parents = {id(child): node for node in nodes for child in children(node)}
    methods = {m.name.value: m for m in cls.body.body if isinstance(m, cst.FunctionDef)}
    escape = _escaping_instance(nodes, parents, cls, methods)
    if escape:
        return dict.fromkeys(attrs, escape)
    inside = {id(n) for stmt in region for n in all_nodes(stmt)}

    def owner(node: cst.CSTNode) -> cst.FunctionDef | None:
        while node is not None:
            if type(node) is cst.FunctionDef and methods.get(node.name.value) is node:
                return node
            node = parents.get(id(node))
        return None

    live: dict[str, bool] = {}

    def runs_after(function: cst.FunctionDef) -> bool:
        """May this method of the class run after the region?"""
        name = function.name.value
        if function is method or name.startswith("__"):
            return True  # (the region's own method: its code after the region, or a second call)
        if name not in live:
            live[name] = False  # (a method that calls itself)
            live[name] = any(
                name not in moved if id(ref) in inside else owner(ref) is None or runs_after(owner(ref))
                for ref in nodes if type(ref) is cst.Attribute and ref.attr.value == name
            )
        return live[name]

    def read_after(read: cst.Attribute) -> str:
        """Why this read of the attribute may come after the region, or ""."""
        target = parents.get(id(read))
        if type(target) is cst.AssignTarget and target.target is read:
            return ""  # `self.x = ...` stores it
        if id(read) in inside:
            # the region's own code: a line of it may stay on your machine and run after
            return f"`{code_of(read)}` reads it in the code that moves"
        function = owner(read)
        if function is None:
            return f"`{code_of(read)}` reads it outside `{cls.name.value}`"
        if runs_after(function):
            return f"`{code_of(read)}` in `{function.name.value}` may read it after"
        return ""

    reasons = dict.fromkeys(attrs, "")
    for read in nodes:
        if type(read) is cst.Attribute and reasons.get(read.attr.value) == "":
            reasons[read.attr.value] = read_after(read)
    return reasons


def _escaping_instance(nodes, parents, cls: cst.ClassDef, methods: dict[str, cst.FunctionDef]) -> str:
    """Why an instance of ``cls`` may reach code that reads its attributes, or ""."""
    name = cls.name.value
    holders: set[str] = set()
    for method in methods.values():
        if method.params.params:
            holders.add(method.params.params[0].name.value)
    for node in nodes:
        if type(node) is cst.Call and code_of(node.func) == name:
            parent = parents.get(id(node))
            if type(parent) is cst.Assign:
                for target in parent.targets:
                    holders.update(target_names(target.target))
            elif not (type(parent) is cst.Attribute and parent.value is node):
                return f"an instance of `{name}` is handed to other code"
    for node in nodes:
        if type(node) is not cst.Name or node.value not in holders:
            continue
        parent = parents.get(id(node))
        kind = type(parent)
        if kind is cst.Attribute:
            if parent.attr is node:
                continue
            grand = parents.get(id(parent))
            if parent.attr.value in methods and not (type(grand) is cst.Call and grand.func is parent):
                return f"`{code_of(parent)}` hands a method of `{name}` to other code"
            continue
        if kind in (cst.Param, cst.AssignTarget) or (kind is cst.Arg and parent.keyword is node):
            continue
        return f"`{node.value}` (an instance of `{name}`) is handed to other code"
    return ""

"""The file's own classes, as the analysis reads them: their plain methods (what
`self.name(...)` and `exp.name(...)` run), their constructors, and the names that hold
one of their objects wherever they are bound. One home for these questions, asked by the
effects check, the remote helpers and the cost walk."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import collect, function_locals, may_change
from ndif_opt.analysis.vocabulary import READING_METHODS
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.walk import find_nodes


def self_methods(facts: Facts) -> dict[str, cst.FunctionDef]:
    """`self.name` -> the method, for the plain methods of the file's top-level classes
    whose name no other class of the file also uses (once per version of the tree)."""
    return facts.once(_self_methods)


def _self_methods(facts: Facts) -> dict[str, cst.FunctionDef]:
    found: dict[str, cst.FunctionDef] = {}
    seen: set[str] = set()
    for stmt in facts.module.body:
        if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
            continue
        for member in stmt.body.body:
            if not isinstance(member, cst.FunctionDef) or member.decorators:
                continue
            params = member.params.params
            if not params or params[0].name.value != "self":
                continue
            key = f"self.{member.name.value}"
            if key in seen:
                found.pop(key, None)  # two classes: `self.name` could be either
                continue
            seen.add(key)
            found[key] = member
    return found


def constructors(facts: Facts) -> dict[str, cst.FunctionDef]:
    """A top-level class of the file -> its `__init__` (what `Patching(...)` runs); classes
    without one are left out (once per version of the tree)."""
    return facts.once(_constructors)


def _constructors(facts: Facts) -> dict[str, cst.FunctionDef]:
    found = {}
    for stmt in facts.module.body:
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            init = next((m for m in stmt.body.body if isinstance(m, cst.FunctionDef) and m.name.value == "__init__"
                         and not m.decorators), None)
            if init is not None and init.params.params and init.params.params[0].name.value == "self":
                found[stmt.name.value] = init
    return found


def instance_names(facts: Facts) -> frozenset[str]:
    """Names that hold an object of one class of the file wherever they are bound
    (`exp = Patching(model, ...)`, at module level or in `main()`): `exp.sweep(...)`
    runs that class's `sweep` (once per version of the tree)."""
    return facts.once(_instance_names)


def _instance_names(facts: Facts) -> frozenset[str]:
    """A name is an instance when every binding of it in the file, in every scope, is
    `name = C(...)` of the same top-level class C of the file: then `name.m(...)`, wherever
    it stands, calls C's `m` on an object `C.__init__` made (or the name is unbound there).
    Any other binding of the name (a parameter, a loop or `with` target, an unpacking, an
    import, `del`, another value) in any scope makes it unknown."""
    classes = {stmt.name.value for stmt in facts.module.body if isinstance(stmt, cst.ClassDef)}
    if not classes:
        return frozenset()
    candidates: dict[str, list[cst.BaseStatement]] = {}
    for name, values in facts.bindings.items():
        made = {v.func.value if type(v) is cst.Call and type(v.func) is cst.Name else None for _, v in values}
        if len(made) == 1 and made <= classes:
            candidates[name] = [info.node for info, _ in values]
    if not candidates:
        return frozenset()
    found = set()
    scopes = [facts.module, *find_nodes(facts.module, lambda n: type(n) in (cst.FunctionDef, cst.ClassDef))]
    parameters = {n.name.value for n in find_nodes(facts.module, lambda n: type(n) is cst.Param)}
    targets = {name for n in find_nodes(facts.module, lambda n: type(n) is cst.CompFor)
               for name in collect(n.target).binds}
    methods = {stmt.name.value: {m.name.value for m in stmt.body.body if isinstance(m, cst.FunctionDef)}
               for stmt in facts.module.body
               if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock)}
    others = set().union(*methods.values()) if methods else set()
    for name, lines in candidates.items():
        if name in parameters or name in targets:
            continue
        cls = next(iter(facts.bindings[name]))[1].func.value
        called = {n.func.attr.value for n in find_nodes(facts.module, lambda n, x=name: (
            type(n) is cst.Call and type(n.func) is cst.Attribute and type(n.func.value) is cst.Name
            and n.func.value.value == x))}
        if (called & others) - methods.get(cls, set()):
            continue  # a method another class defines, which this one does not: inherited, or not its own
        if any(len(line.body) != 1 for line in lines if isinstance(line, cst.SimpleStatementLine)):
            continue  # `a = C(); a = 1` on one line: skipping the line would hide the other
        skip = tuple(lines)
        if any(name in collect(scope if scope is facts.module else scope.body, skip).binds for scope in scopes):
            continue
        found.add(name)
    return frozenset(found)


def class_methods(facts: Facts) -> dict[str, dict[str, cst.FunctionDef]]:
    """A top-level class of the file -> its plain methods by name (undecorated, `self`
    first), those of the file's classes it names as bases included where it does not
    define them (once per version of the tree). A class defined twice is left out: which
    one an object is of is not known."""
    return facts.once(_class_methods)


def _class_methods(facts: Facts) -> dict[str, dict[str, cst.FunctionDef]]:
    defined: dict[str, list[cst.ClassDef]] = {}
    for stmt in facts.module.body:
        if isinstance(stmt, cst.ClassDef):
            defined.setdefault(stmt.name.value, []).append(stmt)
    own = {name: _plain_methods(found[0]) for name, found in defined.items()
           if len(found) == 1 and isinstance(found[0].body, cst.IndentedBlock)}
    merged: dict[str, dict[str, cst.FunctionDef]] = {}
    for name in own:
        methods: dict[str, cst.FunctionDef] = {}
        for cls in _file_ancestry(name, defined):
            for method, func in own.get(cls, {}).items():
                methods.setdefault(method, func)
        merged[name] = methods
    return merged


def _plain_methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {m.name.value: m for m in cls.body.body
            if isinstance(m, cst.FunctionDef) and not m.decorators and m.params.params
            and m.params.params[0].name.value == "self"}


def _file_ancestry(name: str, defined: dict[str, list[cst.ClassDef]]) -> list[str]:
    """The class and the file's classes it derives from, depth first (a base of another
    module is not followed: its methods are not known)."""
    order, todo = [], [name]
    while todo:
        current = todo.pop(0)
        if current in order or len(defined.get(current, ())) != 1:
            continue
        order.append(current)
        todo.extend(b.value.value for b in defined[current][0].bases
                    if b.keyword is None and type(b.value) is cst.Name)
    return order


def classes_made(facts: Facts, name: str) -> frozenset[str]:
    """The file's classes `C` of the bindings `name = C(...)` of ``name``, in any scope."""
    classes = class_methods(facts)
    return frozenset(value.func.value for _info, value in facts.bindings.get(name, ())
                     if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in classes)


def library_class_made(facts: Facts, name: str) -> str:
    """The library class whose object a binding of ``name`` makes (`torch.optim.SGD` of
    `opt = torch.optim.SGD(...)`), by the convention that a class's name is capitalized;
    "" for none. Its methods are not known: any but READING_METHODS may change the object
    (the file's own classes are read instead: :func:`self_change`)."""
    return facts.once(_library_class_made, name)


def _library_class_made(facts: Facts, name: str) -> str:
    own = class_methods(facts)
    return next((spelled for _info, value in facts.bindings.get(name, ())
                 if type(value) is cst.Call and (spelled := dotted_name(value.func)) is not None
                 and spelled.rpartition(".")[2][:1].isupper() and spelled not in own), "")


def self_change(facts: Facts, cls: str, method: str) -> cst.CSTNode | None:
    """Where the method ``method`` of the file's class ``cls`` changes its object (`self.n
    += 1`, `self.rows.append(x)`, `fill(self)`), itself or through a method of `self` it
    calls; None when it does not (or the class has no such plain method)."""
    return facts.once(_self_change, cls, method)


def _self_change(facts: Facts, cls: str, method: str, seen: frozenset[str] = frozenset()) -> cst.CSTNode | None:
    func = class_methods(facts).get(cls, {}).get(method)
    if func is None or method in seen:
        return None
    changed = may_change(func.body).get("self")
    if changed is not None:
        return changed
    for call in find_nodes(func.body, lambda n: type(n) is cst.Call and type(n.func) is cst.Attribute
                           and type(n.func.value) is cst.Name and n.func.value.value == "self"):
        if _self_change(facts, cls, call.func.attr.value, seen | {method}) is not None:
            return call
    return None


def changed_through_methods(facts: Facts, node: cst.CSTNode) -> frozenset[str]:
    """Names whose objects the method calls of ``node`` may change: `s.bump()` where the
    file's class of `s` changes `self` in `bump` (`tally(x)`: its `__call__`), and what such
    a method changes outside itself; `opt.step()` on an object a library class made, but
    for the methods that only read (READING_METHODS): the object, and what it was made
    of (its optimizer steps `probe`)."""
    found: set[str] = set()
    for call in find_nodes(node, lambda n: type(n) is cst.Call and type(n.func) in (cst.Attribute, cst.Name)):
        func = call.func
        if type(func) is cst.Name:
            receiver, method = func.value, "__call__"
        elif type(func.value) is cst.Name:
            receiver, method = func.value.value, func.attr.value
        else:
            continue
        made = classes_made(facts, receiver)
        for cls in made:
            method_def = class_methods(facts)[cls].get(method)
            if method_def is None:
                continue
            if self_change(facts, cls, method) is not None:
                found.add(receiver)
            use, local = collect(method_def.body), function_locals(method_def)
            found |= {n for n in [*use.mutates, *use.binds] if n not in local}
        if not made and type(func) is cst.Attribute and method not in READING_METHODS \
                and library_class_made(facts, receiver):
            found.add(receiver)
            found |= _given_to_its_class(facts, receiver)  # (the probe an optimizer steps)
    return frozenset(found)


def _given_to_its_class(facts: Facts, name: str) -> set[str]:
    """The names the calls that make ``name``'s object read (`probe` of `opt =
    torch.optim.SGD(probe.parameters())`): the object may hold theirs and change them."""
    return {read for _info, value in facts.bindings.get(name, ()) if type(value) is cst.Call
            for arg in value.args for read in collect(arg.value).reads}

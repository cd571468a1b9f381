"""nnsight-05-failures: values of a block read after it without `.save()`, and the save added."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, StmtInfo, qualify
from ndif_opt.analysis.names import COMPREHENSIONS, all_params, collect, target_names
from ndif_opt.analysis.regions import bound_before
from ndif_opt.analysis.tensors import TENSOR_METHODS, is_envoy_tensor, is_tensor
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.passes.nnsight_05_failures.reports import MODULE_HOOKS, invokes_of
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import method_call, unsave
from ndif_opt.syntax.walk import children, find_nodes


@dataclass
class Unsaved:
    """A name the outermost block binds and code after it reads, unsaved."""

    name: str
    bindings: list[cst.CSTNode]  # where the block binds it (a statement or a `for` target)
    read: cst.CSTNode  # the first read after the block
    unbound: bool  # nothing binds it outside the block: the read raises
    in_function: bool  # the read is a function's own (not in a block): UnboundLocalError
    caught: bool = False  # the read is in a `try`: the script may mean to handle its failure
    stale: bool = False  # surely bound before the block: the read gets that value
    fix: dict[int, cst.BaseExpression] | None = None  # id(value) -> the value saved
    why_not: str = ""


# kinds of values, for "may the block save this very object?"
_FRESH, _SCALAR, _ENVOY, _UNKNOWN = "fresh", "scalar", "envoy", "unknown"
_SCALAR_CALLS = frozenset({"len", "int", "float", "bool", "round", "abs", "str", "repr", "hash", "ord", "chr"})
_FRESH_CALLS = frozenset({"list", "dict", "set", "sorted", "torch.zeros", "torch.ones", "torch.tensor",
                          "torch.stack", "torch.cat", "torch.empty", "torch.zeros_like", "torch.ones_like",
                          "torch.arange", "torch.randn", "torch.rand", "defaultdict", "collections.defaultdict"})
_SIZES = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"})
# tensor methods that may return the tensor itself (then a save of the result saves it)
_SELF_RETURNING = frozenset({"to", "cpu", "cuda", "float", "half", "double", "bfloat16", "long", "int", "bool",
                             "type", "contiguous", "type_as", "save", "requires_grad_", "retain_grad",
                             "numpy", "flatten", "view_as", "expand_as"})


def unsaved_names(block: Block, facts: Facts, pre05: bool = False) -> list[Unsaved]:
    """The names ``block`` (outermost) binds and the code after it reads though no saved
    value of the block can be theirs: after the block they are unbound, or hold what they
    held before it."""
    scope = _scope_of(block, facts)
    if scope is None:
        return []
    after = _after(block, facts)
    if not after:
        return []
    bindings = _bindings(block.node.body)
    if not bindings:
        return []
    nnsight_withs = facts.once(_nnsight_withs)
    reads = _reads_after(after, set(bindings), nnsight_withs)
    if not reads:
        return []
    saves = [unsave(call) for call in find_nodes(block.node.body, is_save_call)]
    saved_names = set(block.saved_names) | {s.value for s in saves if type(s) is cst.Name}
    tensors = _tensor_names(bindings, facts)
    save_kinds = {_kind_of_saved(s, block, bindings, tensors, facts) for s in saves}
    helpers = _calls_saving_helpers(block, facts)
    if helpers:
        save_kinds.add(_UNKNOWN)
    declared = _declared(block.node.body)
    outside, star = _bound_outside(block, scope, facts)
    straight = _straight_line_assignments(block)
    found = []
    for name, sites in bindings.items():
        if name not in reads or name in saved_names or name in declared:
            continue
        if any(kind not in ("assign", "for", "aug", "target") for kind, _, _ in sites):
            continue  # imports, definitions, `with ... as`, `except ... as`: left alone
        if pre05 and _migrate_reports(name, sites, after):
            continue  # migrate-api speaks of it
        in_turn = all(kind == "assign" and id(node) in straight for kind, node, _ in sites)
        if in_turn:
            sites = sites[-1:]  # assigned in turn, each for sure: the block ends with the last value
        kinds = {_binding_kind(kind, value, facts) for kind, _, value in sites}
        if not _surely_unsaved(kinds, save_kinds) and not (
                in_turn and kinds == {_FRESH} and not helpers and _unreachable_after(name, sites[0][1], block)):
            continue
        read, caught, in_block = reads[name]
        unbound = not star and name not in outside and not hasattr(builtins, name)
        # (a block's code is compiled on its own: a local it reads is looked up as a global)
        local = isinstance(scope, cst.FunctionDef) and not in_block
        item = Unsaved(name, [node for _, node, _ in sites], read, unbound, local, caught,
                       stale=not unbound and bound_before(facts, block.stmt, name))
        item.fix, item.why_not = _fix(name, sites, facts)
        found.append(item)
    return found


def _straight_line_assignments(block: Block) -> set[int]:
    """The ids of the assignments of the block's own statements (not nested in a branch
    or loop; a `with` inside it, `with loss.backward():`, runs its body once): each runs,
    in turn, whenever the block does (a block's body has no jumps)."""
    return {id(small) for line in _in_turn(block.node.body) if type(line) is cst.SimpleStatementLine
            for small in line.body}


def _in_turn(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of ``body`` in the order they run, the bodies of its `with`
    statements in their place (a branch or a loop is one statement)."""
    lines: list[cst.BaseStatement] = []
    for line in body.body:
        if type(line) is cst.With:
            lines.extend(_in_turn(line.body))
        else:
            lines.append(line)
    return lines


def _unreachable_after(name: str, binding: cst.CSTNode, block: Block) -> bool:
    """Can no expression of the block reach the object the assignment ``binding`` (one of
    the block's own statements) gives ``name``? A new object is reached only through its
    name: the statements after it read the name, if at all, as the receiver of a method
    call that does not return its receiver (`xs.append(v)`) or as a container indexed
    (`xs[i]`), so no save can be of it (saves before it were of other objects)."""
    lines = _in_turn(block.node.body)
    at = next(i for i, line in enumerate(lines) if type(line) is cst.SimpleStatementLine
              and any(small is binding for small in line.body))
    line = lines[at]
    later = [*line.body[[small is binding for small in line.body].index(True) + 1:], *lines[at + 1:]]

    def named(node) -> bool:
        return type(node) is cst.Name and node.value == name

    def harmless(node) -> bool:
        kind = type(node)
        if kind is cst.Subscript:
            return named(node.value)
        return kind is cst.Call and type(node.func) is cst.Attribute and named(node.func.value) \
            and not _returns_receiver(node.func.attr.value)

    return all(len(find_nodes(stmt, named)) == len(find_nodes(stmt, harmless)) for stmt in later)


def _nnsight_withs(facts: Facts) -> frozenset[int]:
    """The ids of the `with` statements of every block and invoke (once per tree)."""
    return frozenset(id(b.node) for b in facts.blocks) | frozenset(id(w) for b in facts.blocks for w in invokes_of(b))


def _scope_of(block: Block, facts: Facts) -> cst.CSTNode | None:
    """The function (or module) whose names the block binds; None in a class body."""
    for node in reversed(block.stmt.ancestors):
        if isinstance(node, cst.FunctionDef):
            return node
        if isinstance(node, cst.ClassDef):
            return None
    return facts.module


def _after(block: Block, facts: Facts) -> list[cst.BaseStatement]:
    """The statements that run after the block, in order, up to the end of its function
    (or module): the rest of its suite, then of each enclosing statement's (a `try`'s
    `else` and `finally`, a loop's `else` included)."""
    out: list[cst.BaseStatement] = []
    info: StmtInfo | None = block.stmt
    while info is not None:
        out.extend(info.suite.body[info.index + 1:])
        if not info.ancestors:
            break
        parent = info.ancestors[-1]
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(parent, (cst.Try, cst.TryStar)):
            for part in (parent.orelse, parent.finalbody):
                if part is not None:
                    out.extend(part.body.body)
        elif isinstance(parent, (cst.For, cst.While)) and parent.orelse is not None:
            out.extend(parent.orelse.body.body)
        info = facts.statements.get(id(parent))
    return out


def _bindings(body: cst.CSTNode) -> dict[str, list[tuple[str, cst.CSTNode, cst.BaseExpression | None]]]:
    """name -> (kind, the binding statement or target, the value bound) for each place the
    block binds it: "assign" (`x = v`, `x: T = v`), "aug" (`x += v`), "for" (a loop
    target), "target" (a name inside a tuple target or a walrus: its value is not known),
    "other" (imports, definitions, `with`/`except ... as`, `del`, `global`)."""
    found: dict[str, list] = {}
    _visit_bindings(body, found)
    return found


def _visit_bindings(node: cst.CSTNode, found: dict[str, list]) -> None:
    """:func:`_bindings`' walk (a function of its own: a nested recursive one is a
    reference cycle per call, left to the garbage collector)."""

    def add(name, kind, node, value=None):
        found.setdefault(name, []).append((kind, node, value))

    kind = type(node)
    if kind in (cst.FunctionDef, cst.ClassDef):
        add(node.name.value, "other", node)
        return
    if kind is cst.Lambda:
        return
    if kind in COMPREHENSIONS:
        for walrus in find_nodes(node, lambda n: type(n) is cst.NamedExpr):
            for name in target_names(walrus.target):
                add(name, "target", walrus)
        return
    if kind is cst.Assign:
        for target in node.targets:
            if type(target.target) is cst.Name and len(node.targets) == 1:
                add(target.target.value, "assign", node, node.value)
            else:
                for name in target_names(target.target):
                    add(name, "target", node)
    elif kind is cst.AnnAssign and node.value is not None and type(node.target) is cst.Name:
        add(node.target.value, "assign", node, node.value)
    elif kind is cst.AugAssign and type(node.target) is cst.Name:
        add(node.target.value, "aug", node)
    elif kind is cst.For:
        for name in target_names(node.target):
            add(name, "for" if type(node.target) is cst.Name else "target", node.target, node.iter)
    elif kind is cst.NamedExpr:
        for name in target_names(node.target):
            add(name, "target", node)
    elif kind in (cst.Import, cst.ImportFrom, cst.Del):
        for name in collect(node).binds:
            add(name, "other", node)
    elif kind is cst.WithItem and node.asname is not None:
        for name in target_names(node.asname.name):
            add(name, "other", node)
    elif kind is cst.ExceptHandler and node.name is not None:
        for name in target_names(node.name.name):
            add(name, "other", node)
    for child in children(node):
        _visit_bindings(child, found)


def _declared(body: cst.CSTNode) -> set[str]:
    return {name.name.value for node in find_nodes(body, lambda n: type(n) in (cst.Global, cst.Nonlocal))
            for name in node.names}


def _reads_after(after: list[cst.BaseStatement], names: set[str],
                 blocks: frozenset[int]) -> dict[str, tuple[cst.CSTNode, bool, bool]]:
    """name -> (its first read, whether a `try` around it catches errors, whether it is in
    an nnsight block of ``blocks`` (ids)) for the names of ``names`` that the statements
    read on some path before anything may bind them again. Reads in functions, lambdas and
    classes defined there do not count (they run when called, if ever); a statement the
    walk does not follow (`match`) ends it."""
    found: dict[str, tuple[cst.CSTNode, bool, bool]] = {}
    _sequence(after, set(names), (False, False, blocks), found)
    return found


def _sequence(statements, live: set[str], where: tuple, found: dict) -> bool:
    """Reads of ``live`` names in ``statements``, in order, into ``found``; False when the
    walk stopped at a statement it does not follow."""
    live = set(live)
    for stmt in statements:
        if not live - set(found):
            return True
        if not _statement_reads(stmt, live, where, found):
            return False
        live -= set(collect(stmt).binds) if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) \
            else {stmt.name.value}
    return True


def _statement_reads(stmt, live: set[str], where: tuple, found: dict) -> bool:
    """``where``: (in a `try` with handlers, in an nnsight block, the ids of the blocks)."""
    kind = type(stmt)
    caught, in_block, blocks = where

    def read(node: cst.CSTNode, shadow: set[str] = frozenset()) -> None:
        for name, at in collect(node).reads.items():
            if name in live and name not in shadow and name not in found and not _in_lambda(node, at):
                found[name] = (at, caught, in_block)

    def suite(body, names=live, catching=caught) -> bool:
        inside = (catching, in_block or id(stmt) in blocks, blocks)
        return _sequence(body.body if hasattr(body, "body") else body, names, inside, found)

    if kind is cst.SimpleStatementLine:
        names = set(live)
        for small in stmt.body:
            read(small, live - names)
            names -= set(collect(small).binds)
        return True
    if kind in (cst.FunctionDef, cst.ClassDef):
        return True
    if kind is cst.If:
        read(stmt.test)
        if not suite(stmt.body):
            return False
        other = stmt.orelse
        if type(other) is cst.If:
            return _statement_reads(other, live, where, found)
        return other is None or suite(other.body)
    if kind in (cst.For, cst.While):
        read(stmt.iter if kind is cst.For else stmt.test)
        names = live - set(target_names(stmt.target)) if kind is cst.For else live
        if not suite(stmt.body, names):
            return False
        return stmt.orelse is None or suite(stmt.orelse.body)
    if kind is cst.With:
        bound: set[str] = set()
        for item in stmt.items:
            read(item.item)
            if item.asname is not None:
                bound |= set(target_names(item.asname.name))
        return suite(stmt.body, live - bound)
    if kind in (cst.Try, cst.TryStar):
        if not suite(stmt.body, live, caught or bool(stmt.handlers)):
            return False
        for handler in stmt.handlers:
            if handler.type is not None:
                read(handler.type)
            own = set(target_names(handler.name.name)) if handler.name is not None else set()
            if not suite(handler.body, live - own):
                return False
        for part in (stmt.orelse, stmt.finalbody):
            if part is not None and not suite(part.body):
                return False
        return True
    return False  # `match` and anything else: not followed


def _in_lambda(statement: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is ``node`` inside a lambda (or a function or class defined) in ``statement``?"""
    for holder in find_nodes(statement, lambda n: type(n) in (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
        if find_nodes(holder, lambda n: n is node):
            return True
    return False


def _bound_outside(block: Block, scope: cst.CSTNode, facts: Facts) -> tuple[set[str], bool]:
    """Names bound in ``scope`` outside the block (parameters and `global` names included),
    and whether a star import may bind any."""
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    holder = _statement_holding(block, scope, facts)
    # the scope's statements one by one (their names are cached per statement), the one
    # holding the block without the block's body: as collect(body, skip=...) would find
    names: set[str] = set()
    for stmt in body.body:
        use = collect(stmt, skip=(block.node.body,)) if stmt is holder else collect(stmt)
        names.update(use.binds)
    if isinstance(scope, cst.FunctionDef):
        names |= {p.name.value for p in all_params(scope.params)}
        names |= {n.name.value for g in find_nodes(body, lambda n: type(n) in (cst.Global, cst.Nonlocal))
                  for n in g.names}
    else:  # functions that assign a module name
        names |= facts.once(_global_names)
    return names, facts.once(_star_import)


def _global_names(facts: Facts) -> frozenset[str]:
    """The names the module's functions declare `global` (once per version of the tree)."""
    return frozenset(n.name.value for g in find_nodes(facts.module, lambda n: type(n) is cst.Global) for n in g.names)


def _star_import(facts: Facts) -> bool:
    """Does the module hold a `from ... import *` (once per version of the tree)?"""
    return bool(find_nodes(facts.module, lambda n: type(n) is cst.ImportStar))


def _statement_holding(block: Block, scope: cst.CSTNode, facts: Facts) -> cst.CSTNode:
    """The statement of ``scope``'s own body that holds the block (the block itself, or
    its outermost enclosing statement below the scope)."""
    chain = (*facts.stmt(block.node).ancestors, block.node)
    if isinstance(scope, cst.FunctionDef):
        chain = chain[chain.index(scope) + 1:]
    return chain[0]


def _migrate_reports(name: str, sites, after) -> bool:
    """Pre-0.5 idioms migrate-api reports: `name.value` after the block, a name bound to
    `nnsight.list()` and its kin."""
    for stmt in after:
        if find_nodes(stmt, lambda n: type(n) is cst.Attribute and n.attr.value == "value"
                      and type(n.value) is cst.Name and n.value.value == name):
            return True
    for kind, _, value in sites:
        if type(value) is cst.Call and (dotted_name(value.func) or "").startswith("nnsight."):
            return True
    return False


def _kind(expr: cst.BaseExpression, facts: Facts) -> str:
    """What ``expr`` evaluates to, for identity: a new object (a container, a new tensor),
    a Python scalar (which may be a shared cached object: small ints, short strings), a
    module's value itself, or anything."""
    models = set(facts.models)
    kind = type(expr)
    if kind in (cst.List, cst.Dict, cst.Set, *COMPREHENSIONS):
        return _FRESH
    if kind in (cst.Tuple, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                cst.FormattedString, cst.Comparison):
        return _SCALAR
    if kind is cst.Name and expr.value in ("True", "False", "None"):
        return _SCALAR
    if kind is cst.UnaryOperation:
        if type(expr.operator) is cst.Not:
            return _SCALAR
        if is_tensor(expr.expression, models, set()):
            return _FRESH  # `-t`: a new tensor, whatever `t` was (saved or not)
        inner = _kind(expr.expression, facts)
        if inner == _UNKNOWN and is_save_call(expr.expression):
            # `-x.save()`: x comes out of the trace (a tensor, or a scalar some method made,
            # which `_kind` would tell): its negation is a new object, never the saved one
            return _FRESH
        return inner if inner in (_SCALAR, _FRESH) else _UNKNOWN
    if kind is cst.Attribute and expr.attr.value in MODULE_HOOKS:
        return _ENVOY
    if kind is cst.Attribute and expr.attr.value in _SIZES:
        return _SCALAR
    if kind is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":
        return _SCALAR  # an int
    if kind is cst.Subscript and is_envoy_tensor(expr, models):
        return _FRESH  # a view: a new tensor object
    if kind is cst.Subscript and type(expr.value) in (cst.List, cst.ListComp) \
            and all(type(element.slice) is cst.Slice for element in expr.slice):
        return _FRESH  # `[...][::-1]`: a slice of a new list is a new list
    if kind is cst.Subscript and _module_value_part(expr):
        return _ENVOY  # an item of a module's value: maybe an object it holds
    if kind is cst.BinaryOperation:
        if is_tensor(expr.left, models, set()) or is_tensor(expr.right, models, set()):
            return _FRESH  # a new tensor
        operands = {_kind(expr.left, facts), _kind(expr.right, facts)}
        if operands == {_SCALAR}:
            return _SCALAR
        if operands <= {_SCALAR, _FRESH}:
            return _FRESH  # (lists, tensors: a new one)
        return _ENVOY if operands <= {_SCALAR, _FRESH, _ENVOY} else _UNKNOWN  # (`t * 1` may be `t`)
    if kind is cst.Call:
        func = expr.func
        name = qualify(func, facts.imports) or ""
        if name in _SCALAR_CALLS:
            return _SCALAR
        if name in _FRESH_CALLS or code_of(func) in _FRESH_CALLS:
            return _FRESH
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in ("item", "size", "dim", "numel", "nelement", "element_size"):
                return _SCALAR
            if method == "tolist":
                return _FRESH
            if method not in _SELF_RETURNING and (is_tensor(expr, models, set()) or (
                    method in TENSOR_METHODS and _kind(func.value, facts) in (_ENVOY, _FRESH))):
                return _FRESH  # a new tensor
    return _UNKNOWN


def _module_value_part(expr: cst.BaseExpression) -> bool:
    while type(expr) is cst.Subscript:
        expr = expr.value
    return type(expr) is cst.Attribute and expr.attr.value in MODULE_HOOKS


def _binding_kind(kind: str, value, facts: Facts) -> str:
    if kind == "assign":
        return _kind(value, facts)
    if kind == "for" and type(value) is cst.Call and dotted_name(value.func) == "range":
        return _SCALAR  # an int
    if kind == "for" and _layer_list(value, facts):
        return _FRESH  # a module of the model: no value the block saves
    return _UNKNOWN  # an element of some container, a part of a tuple: may be any object


def _layer_list(expr: cst.BaseExpression, facts: Facts) -> bool:
    """`model.model.layers`, an alias of it, or either `reversed` or sliced."""
    if type(expr) is cst.Call and dotted_name(expr.func) == "reversed" and len(expr.args) == 1:
        expr = expr.args[0].value
    if type(expr) is cst.Subscript and all(isinstance(e.slice, cst.Slice) for e in expr.slice):
        expr = expr.value
    name = dotted_name(expr)
    if name is not None and "." not in name:
        value = facts.constant(name)
        name = dotted_name(value) if value is not None else None
    if name is None or name.rpartition(".")[2] not in LAYER_LISTS:
        return False
    head = name.split(".")[0]
    return head in facts.models or any(block.model.split(".")[0] == head for block in facts.blocks)


def _kind_of_saved(saved: cst.BaseExpression, block: Block, bindings, tensors: set[str], facts: Facts) -> str:
    """The kind of a saved value; a saved name takes the kinds the block binds it to.
    ``tensors``: the names the block binds only to tensors (:func:`_tensor_names`)."""
    if type(saved) is cst.Name:
        sites = bindings.get(saved.value, [])
        kinds = {_binding_kind(kind, value, facts) for kind, _, value in sites}
        if len(kinds) == 1:
            return kinds.pop()
        return _UNKNOWN
    if _new_tensor(saved, tensors, facts):
        return _FRESH
    return _kind(saved, facts)


def _tensor_names(bindings, facts: Facts) -> set[str]:
    """The names the block binds only to tensors (`logits = model.lm_head.output[:, -1]`)."""
    models = set(facts.models)
    return {name for name, sites in bindings.items()
            if all(kind == "assign" and is_tensor(value, models, set()) for kind, _, value in sites)}


def _returns_receiver(method: str) -> bool:
    """May a call of this method give back its receiver (`t.float()`, `t.add_(x)`)?"""
    return method in _SELF_RETURNING or (method.endswith("_") and not method.startswith("_"))


def _new_tensor(expr: cst.BaseExpression, tensors: set[str], facts: Facts) -> bool:
    """An item of a tensor (a view), or what a tensor method that never returns the tensor
    itself gives: a new tensor object, which no name can already hold."""
    models = set(facts.models)
    if type(expr) is cst.Subscript:
        return is_tensor(expr.value, models, tensors)
    if type(expr) is cst.UnaryOperation and type(expr.operator) is not cst.Not:
        # `-t` (`-t.sum().save()` too: `.save()` gives its receiver): a new tensor
        inner = expr.expression
        if is_save_call(inner) and type(inner.func) is cst.Attribute:
            inner = inner.func.value
        return is_tensor(inner, models, tensors)
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        # any method of a tensor gives a new object (`.max()`, `.tolist()`), but those that
        # may return the tensor itself and the in-place ones (`add_`), which return it
        return not _returns_receiver(expr.func.attr.value) and is_tensor(expr.func.value, models, tensors)
    return False


#: libraries whose functions save nothing in a block (nnterp's helpers may: not among them)
_SAVE_FREE_LIBRARIES = frozenset({
    "torch", "numpy", "math", "einops", "nnsight", "transformers", "collections", "itertools", "functools",
    "operator", "random", "time", "typing", "pandas", "json", "os", "re", "string", "tqdm", "builtins",
})


def _functions_and_savers(facts: Facts) -> tuple[dict[str, cst.FunctionDef], frozenset[str]]:
    """The file's functions by name, and the names of those that save (once per tree)."""
    functions = {fn.name.value: fn for fn in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef)}
    return functions, frozenset(name for name, fn in functions.items() if find_nodes(fn, is_save_call))


def _calls_saving_helpers(block: Block, facts: Facts) -> bool:
    """May a call in the block save a value out of sight: a function or method of this file
    that saves, a function of a module of yours (or of nnterp), or a function the code
    does not define at all (a parameter, a star import)?"""
    functions, savers = facts.once(_functions_and_savers)
    for call in find_nodes(block.node.body, lambda n: type(n) is cst.Call):
        func = call.func
        if is_save_call(call):
            continue
        name = dotted_name(func)
        root = name.split(".")[0] if name is not None else None
        if type(func) is cst.Name:
            if name in savers:
                return True
            if name in functions or name in facts.models or hasattr(builtins, name):
                continue
            if root in facts.imports and facts.imports[root].split(".")[0] in _SAVE_FREE_LIBRARIES:
                continue
            return True  # a function of your modules, or one the file does not define
        if type(func) is cst.Attribute:
            if func.attr.value in savers:
                return True
            if root in facts.imports and facts.imports[root].split(".")[0] not in _SAVE_FREE_LIBRARIES:
                return True  # `helpers.grab(...)`
    return False


def _surely_unsaved(kinds: set[str], save_kinds: set[str]) -> bool:
    """Can no value the block saves be the object the name is bound to? (nnsight sends
    back every name whose value *is* a saved object.) A new object (a container, a new
    tensor) is none of them: what the block saves is either made by another expression
    or reached through a name, an item or a call, which counts as anything. A Python
    scalar may be a shared object (a small int, a short string) and so may be a saved
    scalar; a module's value read twice is one tensor."""
    if not save_kinds:
        return True  # the block saves nothing: nothing comes back
    if _UNKNOWN in kinds or _UNKNOWN in save_kinds:
        return False
    return not (kinds & save_kinds & {_SCALAR, _ENVOY})


def _fix(name: str, sites, facts: Facts) -> tuple[dict[int, cst.BaseExpression] | None, str]:
    """The values to save (`x = v` → `x = v.save()` / `x = nnsight.save(v)`), or why not."""
    if any(kind != "assign" for kind, _, _ in sites):
        return None, (f"`{name}` is also bound by a loop, a tuple or an augmented assignment; save it where "
                      "the block has its final value (`nnsight.save(...)`)")
    models = set(facts.models)
    fix = {}
    for _, _, value in sites:
        tensor = is_tensor(value, models, set()) or is_envoy_tensor(value, models) or _kind(value, facts) == _ENVOY
        fix[id(value)] = method_call(value, "save") if tensor else _nnsight_save(value)
    return fix, ""


def _nnsight_save(value: cst.BaseExpression) -> cst.Call:
    if value.lpar and type(value) is not cst.Tuple:
        value = value.with_changes(lpar=[], rpar=[])  # (an argument needs no parentheses of its own)
    return cst.Call(func=cst.Attribute(value=cst.Name("nnsight"), attr=cst.Name("save")), args=[cst.Arg(value=value)])


def uses_nnsight_save(value: cst.BaseExpression) -> bool:
    return type(value) is cst.Call and dotted_name(value.func) == "nnsight.save"


class SavesAdded(cst.CSTTransformer):
    def __init__(self, saves: dict[int, cst.BaseExpression], on_path: set[int]) -> None:
        self.saves = saves
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path and id(node) not in self.saves

    def on_leave(self, original, updated):
        return self.saves.get(id(original), updated)

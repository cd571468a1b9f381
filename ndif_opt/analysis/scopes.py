"""Where each name of a module occurs and is bound, with the scopes around it.

One walk over a version of the tree (top-level statement by statement, each statement's
part cached and shared by the versions that keep it) records every node's parent, every
Name read as a name with the statements, functions, lambdas and comprehensions around it,
and every binding site. It answers: the uses of a name under some statements that see the
same variable (not a function's own `x`, not a comprehension's), whether a name is used
outside them, how often it is assigned, and what names a new variable may not take.
Computed once per facts (:func:`scope_index`); reduction-pushdown asks it for every saved
value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import COMPREHENSIONS, NameUse, all_params, collect, comprehension_targets
from ndif_opt.syntax.walk import IS_NODE_TYPE, content_children, content_fields, find_nodes

BINDING_SITES = (cst.AssignTarget, cst.For, cst.AugAssign)  # what `_bindings_in` counted
# The only nodes inside an expression that `collect` finds a binding in.
EXPRESSION_BINDERS = (cst.NamedExpr, cst.CompFor)

@dataclass(frozen=True)
class _NodeKind:
    """What the index walk needs to know about a libcst node class."""

    fields: tuple[str, ...]  # the fields that may hold a name
    encloses: bool  # a statement, lambda or comprehension: recorded around the names inside it
    not_a_name: str | None  # the field whose Name is no name read (an attribute's, a keyword)
    binding_site: bool
    expression_binder: bool


def _node_kind(node_type: type) -> _NodeKind:
    return _NodeKind(
        fields=content_fields(node_type),
        encloses=issubclass(node_type, (cst.BaseStatement, cst.Lambda, *COMPREHENSIONS)),
        not_a_name={cst.Attribute: "attr", cst.Arg: "keyword"}.get(node_type),
        binding_site=node_type in BINDING_SITES,
        expression_binder=node_type in EXPRESSION_BINDERS,
    )


class _NodeKinds(dict):
    """Every libcst node class met, described on first sight (facts about libcst, the
    same for every script; describing all of them at import would cost ~30 ms)."""

    def __missing__(self, node_type: type) -> _NodeKind:
        kind = self[node_type] = _node_kind(node_type)
        return kind


NODE_KINDS = _NodeKinds()


def scope_index(facts: Facts) -> ScopeIndex:
    """The index of the whole module (once per version of the tree)."""
    return facts.once(_whole_index)


def known_scope_index(facts: Facts) -> ScopeIndex | None:
    """:func:`scope_index`, when something has asked for it already; else None."""
    return facts.known(_whole_index)


def _whole_index(facts: Facts) -> ScopeIndex:
    return ScopeIndex(facts, facts.module.body)


class ScopeIndex:
    """Answers about one version of the tree, from one walk over it, shared by every
    saved value the pass looks at (or about some of its top-level statements: those
    after a request, :attr:`ChainPushdown.near`).

    The walk follows the nodes' fields that may hold more than layout, in libcst's order
    (:func:`ndif_opt.syntax.walk.content_fields`): much cheaper than a libcst visitor, which
    rebuilds every node it passes, and it meets names in the order of the code. It records each node's parent, where every name occurs
    (with the statements and lambdas around it) and where names are bound. The name use
    of a statement, a function or the module is collected on first request and kept.
    The ids used as keys are those of nodes of ``facts.module``, which the index keeps.
    What each top-level statement holds is recorded once (:func:`statement_index`) and
    shared by the versions of the tree that keep the statement.
    """

    def __init__(self, facts: Facts, statements) -> None:
        # the module, not the facts: the facts keep this index (a cycle would leave every
        # version's index to the garbage collector)
        self.module = facts.module
        self.parents: dict[int, cst.CSTNode] = {}
        # name -> every Name node with that value read as a name (attribute names and
        # keywords are not), with the statements and lambdas around it, outermost first
        self.occurrences: dict[str, list[tuple[cst.Name, tuple[cst.CSTNode, ...]]]] = {}
        self.spelled: set[str] = set()  # the value of every Name node, attribute names included
        self.binding_sites: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = []
        self.expression_binders: list[cst.CSTNode] = []
        self._binding_targets: set[int] | None = None  # ids of targets with a binder inside
        self._uses: dict[int, NameUse] = {}  # id(node) -> collect(node)
        self._locals: dict[int, frozenset[str]] = {}  # id(function or lambda) -> names local to it
        self._walk(facts.module, statements)

    def _walk(self, module: cst.Module, statements) -> None:
        # the module encloses nothing (only statements and lambdas do): what a top-level
        # statement holds is the same in every version of the tree that shares it
        parents, occurrences, spelled = self.parents, self.occurrences, self.spelled
        for stmt in statements:
            part = statement_index(stmt)
            parents[id(stmt)] = module
            parents.update(part.parents)
            for name, found in part.occurrences.items():
                known = occurrences.get(name)
                if known is None:
                    occurrences[name] = list(found)
                else:
                    known.extend(found)
            spelled |= part.spelled
            self.binding_sites.extend(part.binding_sites)
            self.expression_binders.extend(part.expression_binders)

    # -- where a name occurs ---------------------------------------------------------------
    def occurrences_under(self, name: str, roots) -> dict[int, list[cst.Name]]:
        """For each of the disjoint statements ``roots`` (by id): the uses of ``name`` in
        it, in the order of the code (not those in a function or lambda inside it that
        has its own variable ``name``)."""
        wanted = {id(root) for root in roots}
        found: dict[int, list[cst.Name]] = {}
        for node, path in self.occurrences.get(name, ()):
            for position, outer in enumerate(path):
                if id(outer) in wanted:
                    if self._visible(name, node, path, position):
                        found.setdefault(id(outer), []).append(node)
                    break
        return found

    def read_outside(self, name: str, roots) -> bool:
        """Is ``name`` used anywhere in the module outside the disjoint statements
        ``roots`` (uses as :meth:`occurrences_under` counts them)?"""
        inside = {id(node) for nodes in self.occurrences_under(name, roots).values() for node in nodes}
        return any(
            id(node) not in inside and self._visible(name, node, path, 0)
            for node, path in self.occurrences.get(name, ())
        )

    def _visible(self, name: str, node: cst.Name, path: tuple[cst.CSTNode, ...], start: int) -> bool:
        """False when a function, lambda or comprehension in ``path[start:]`` has its own
        ``name`` (a comprehension's first iterable is outside it: `[x for x in x]`)."""
        for scope in path[start:]:
            if isinstance(scope, (cst.FunctionDef, cst.Lambda)):
                if name in self._local_names(scope):
                    return False
            elif isinstance(scope, COMPREHENSIONS) and name in self._local_names(scope):
                if not self._within(node, scope.for_in.iter, scope):
                    return False
        return True

    def _within(self, node: cst.CSTNode, part: cst.CSTNode, whole: cst.CSTNode) -> bool:
        """Is ``node`` inside ``part`` (itself inside ``whole``)?"""
        while node is not whole and node is not None:
            if node is part:
                return True
            node = self.parents.get(id(node))
        return False

    def _local_names(self, scope) -> frozenset[str]:
        """A lambda's parameters; a function's parameters and the names its body binds; a
        comprehension's targets."""
        names = self._locals.get(id(scope))
        if names is None:
            if isinstance(scope, COMPREHENSIONS):
                names = frozenset(comprehension_targets(scope.for_in))
            else:
                names = frozenset(p.name.value for p in all_params(scope.params))
                if isinstance(scope, cst.FunctionDef):
                    names |= frozenset(self.use_of(scope.body).binds)
            self._locals[id(scope)] = names
        return names

    # -- where a name is bound -------------------------------------------------------------
    def binding_count(self, name: str, within: cst.CSTNode | None = None) -> int:
        """How often ``name`` is assigned (`=` with the name itself as target, a `for`
        target, `+=`) in the module, or inside the statement ``within``."""
        count = 0
        for site, path in self.binding_sites:
            if within is not None and not any(outer is within for outer in path):
                continue
            if self._binds(site, name):
                count += 1
        return count

    def _binds(self, site: cst.CSTNode, name: str) -> bool:
        return _site_binds(site, name, lambda target: id(target) in self._targets_with_binders())

    def _targets_with_binders(self) -> set[int]:
        if self._binding_targets is None:
            self._binding_targets = _targets_holding_binders(self.expression_binders, self.parents)
        return self._binding_targets

    # -- names read and bound ----------------------------------------------------------------
    def use_of(self, node: cst.CSTNode) -> NameUse:
        use = self._uses.get(id(node))
        if use is None:
            use = self._uses[id(node)] = collect(node)
        return use

    def use_naming(self, name: str, stmts) -> NameUse:
        """What ``collect_all(stmts)`` says about ``name``, from the kept name uses of those
        of the disjoint statements ``stmts`` that spell it: a name is read, bound or mutated
        only where it is written."""
        wanted = {id(stmt) for stmt in stmts}
        spelling: set[int] = set()
        for _, path in self.occurrences.get(name, ()):
            for outer in path:
                if id(outer) in wanted:
                    spelling.add(id(outer))
                    break
        use = NameUse()
        for stmt in stmts:
            if id(stmt) in spelling:
                use.merge(self.use_of(stmt))
        return use

    def module_use(self) -> NameUse:
        return self.use_of(self.module)


def binding_count_in(stmt: cst.BaseStatement, name: str) -> int:
    """How often the statement ``stmt`` assigns ``name`` (as :meth:`ScopeIndex.binding_count`
    counts). A binding site (an assignment target, a `for`, a `+=`) is a statement or
    part of one, never inside an expression: the walk does not enter expressions (this
    pass's top-level statements are walked whole, and kept, only when it reads the uses
    of a name in them)."""
    count = 0

    def visit(node: cst.CSTNode) -> None:
        nonlocal count
        kind = type(node)
        if kind in BINDING_SITES and _site_binds(node, name, _holds_binder):
            count += 1
        for child in content_children(node):
            if not IS_EXPRESSION[type(child)]:
                visit(child)

    try:
        visit(stmt)
    finally:
        del visit  # it refers to itself: freed now, not left to the garbage collector
    return count


def _holds_binder(target: cst.AssignTarget) -> bool:
    return bool(find_nodes(target.target, lambda node: type(node) in EXPRESSION_BINDERS))


class _IsExpression(dict):
    def __missing__(self, node_type: type) -> bool:
        answer = self[node_type] = issubclass(node_type, cst.BaseExpression)
        return answer


IS_EXPRESSION = _IsExpression()


def _site_binds(site: cst.CSTNode, name: str, holds_binder) -> bool:
    """Does the binding site assign ``name`` (see :meth:`ScopeIndex.binding_count`)?
    ``holds_binder(target)``: is there a binder inside the assignment target?"""
    target = site.target
    if isinstance(target, cst.Name):
        return target.value == name
    # a tuple target does not count; a walrus inside a target does
    return (
        isinstance(site, cst.AssignTarget)
        and holds_binder(site)
        and name in collect(target).binds
    )


def _targets_holding_binders(binders, parents: dict[int, cst.CSTNode]) -> set[int]:
    """ids of the assignment targets that hold one of ``binders`` (a walrus or a
    comprehension), found through ``parents`` up to the statement around them."""
    found: set[int] = set()
    for binder in binders:
        node = parents.get(id(binder))
        while node is not None and not isinstance(node, cst.BaseStatement):
            if isinstance(node, cst.AssignTarget):
                found.add(id(node))
                break
            node = parents.get(id(node))
    return found


@functools.lru_cache(maxsize=4096)
def statement_index(stmt: cst.BaseStatement) -> "_StatementIndex":
    # a pure function of an immutable node (kept alive while cached, so the ids inside
    # stay its nodes'): the versions of a tree share most top-level statements
    return _StatementIndex(stmt)


class _StatementIndex:
    """What :class:`ScopeIndex` records about one top-level statement (see there), from
    one walk over the fields that may hold more than layout, in libcst's order."""

    def __init__(self, stmt: cst.BaseStatement) -> None:
        self.parents: dict[int, cst.CSTNode] = {}
        self.occurrences: dict[str, list[tuple[cst.Name, tuple[cst.CSTNode, ...]]]] = {}
        self.spelled: set[str] = set()
        self.binding_sites: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = []
        self.expression_binders: list[cst.CSTNode] = []
        self._walk(stmt)

    def _walk(self, stmt: cst.BaseStatement) -> None:
        parents, occurrences, spelled = self.parents, self.occurrences, self.spelled
        sites, binders = self.binding_sites, self.expression_binders

        def visit(node: cst.CSTNode, path: tuple[cst.CSTNode, ...]) -> None:
            kind = NODE_KINDS[type(node)]
            if kind.encloses:
                path = path + (node,)
            if kind.binding_site:
                sites.append((node, path))
            elif kind.expression_binder:
                binders.append(node)
            not_a_name = kind.not_a_name
            for field in kind.fields:
                value = getattr(node, field)
                value_type = type(value)
                if value_type is list or value_type is tuple:
                    children = value
                elif IS_NODE_TYPE[value_type]:
                    children = (value,)
                else:
                    continue
                for child in children:
                    child_type = type(child)
                    if child_type is cst.Name:
                        parents[id(child)] = node
                        spelled.add(child.value)
                        if field != not_a_name:
                            occurrences.setdefault(child.value, []).append((child, path))
                    elif IS_NODE_TYPE[child_type]:
                        parents[id(child)] = node
                        visit(child, path)

        try:
            visit(stmt, ())
        finally:
            del visit  # it refers to itself: freed now, not left to the garbage collector


class TakenNames:
    """The names a new variable may not have: those the module reads or binds, the
    reserved ones, and those given out already. The module's names are collected only
    for a candidate that is spelled somewhere in it."""

    def __init__(self, index: ScopeIndex, reserved) -> None:
        self.index = index
        self.reserved = reserved
        self.given: set[str] = set()

    def __contains__(self, name: str) -> bool:
        if name in self.given or name in self.reserved:
            return True
        if name not in self.index.spelled:
            return False
        use = self.index.module_use()
        return name in use.reads or name in use.binds

    def add(self, name: str) -> None:
        self.given.add(name)

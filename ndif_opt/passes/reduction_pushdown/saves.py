"""reduction-pushdown's saved values: which saves it sees, how the code changes them, when one may
be let go, and the edits it makes along their paths."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.analysis.names import collect, fresh_name, mutated_roots, target_names
from ndif_opt.analysis.regions import results_kept
from ndif_opt.analysis.scopes import TakenNames, binding_count_in, scope_index
from ndif_opt.analysis.vocabulary import FILLING_METHODS
from ndif_opt.passes.base import Context
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import NodeEdits, method_call, unsave
from ndif_opt.syntax.walk import all_nodes, find_nodes
from ndif_opt.types import Safety


@dataclass
class Save:
    block: Block
    stmt: cst.SimpleStatementLine  # `x = <expr>.save()` at the block's top level
    name: str


def _mutation_site(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    """What ``node`` is read through: the largest `x[...]` / `x.attr` around it."""
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, (cst.Subscript, cst.Attribute)) and parent.value is node:
            node = parent
            continue
        return node


def mutating_code(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    """The assignment or call that changes ``node``'s value in place (see changed_through)."""
    site = _mutation_site(node, parents)
    parent = parents.get(id(site))
    if isinstance(parent, cst.AssignTarget):
        return parents.get(id(parent), site)
    if isinstance(parent, (cst.AugAssign, cst.Call)):
        return parent
    return site


def changed_through(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> bool:
    """Is the value of ``node`` (a name) changed in place there: assigned through
    (`x[0] = v`, `x[0] += v`), deleted from, or given to an in-place method
    (`x.mul_(2)`, `x[0].zero_()`, `x.append(v)`)?"""
    site = _mutation_site(node, parents)
    parent = parents.get(id(site))
    if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) and parent.target is site and site is not node:
        return True
    if isinstance(parent, cst.Del) or isinstance(parents.get(id(parent)), cst.Del):
        return site is not node
    if isinstance(site, cst.Attribute) and isinstance(parents.get(id(site)), cst.Call) \
            and parents.get(id(site)).func is site:
        method = site.attr.value
        return (method.endswith("_") and not method.endswith("__")) or method in FILLING_METHODS
    return False


def changed_in_place_outside(name: str, session: Block, block: Block) -> bool:
    """Does the session's code outside ``block`` change ``name``'s value in place (or a
    name bound to it or to a view of it)?"""
    inside = {id(n) for n in all_nodes(block.node)}
    nodes = [n for n in all_nodes(session.node.body) if id(n) not in inside]
    aliases = aliases_of({name}, nodes)
    return any((changes_in_place(n) or fills_in_place(n)) and changed_roots(n) & aliases for n in nodes)


def aliases_of(names: set[str], nodes: list[cst.CSTNode], *, made_of: bool = False) -> set[str]:
    """``names`` and the names the assignments among ``nodes`` bind to them or to a view
    of them (`y = x`, `y = x[0]`, `y = x.T`), over and over; ``made_of``: to any value
    made of them (`x = h * 2`) as well."""
    aliases = set(names)
    assignments = [n for n in nodes if isinstance(n, cst.Assign)
                   and (made_of or isinstance(n.value, (cst.Name, cst.Subscript, cst.Attribute)))]
    grew = True
    while grew:
        grew = False
        for assign in assignments:
            if set(collect(assign.value).reads) & aliases:
                for target in assign.targets:
                    for bound in target_names(target.target):
                        if bound not in aliases:
                            aliases.add(bound)
                            grew = True
    return aliases


def spelled_names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in find_nodes(node, lambda n: isinstance(n, cst.Name))}


def fills_in_place(node: cst.CSTNode) -> bool:
    """A call of a method that changes a list or dict (`x.append(...)`)."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
        and node.func.attr.value in FILLING_METHODS


def changes_in_place(node: cst.CSTNode) -> bool:
    """An assignment to a subscript or attribute, an augmented assignment, or an
    in-place tensor method (`x.add_(...)`)."""
    if isinstance(node, cst.AugAssign):
        return True
    if isinstance(node, cst.Assign):
        return any(isinstance(t.target, (cst.Subscript, cst.Attribute)) for t in node.targets)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        return method.endswith("_") and not method.endswith("__")
    return False


def changed_roots(node: cst.CSTNode) -> set[str]:
    """The names whose values an in-place change changes."""
    if isinstance(node, cst.AugAssign):
        targets = [node.target]
    elif isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    else:
        targets = [node.func.value]
    roots = set()
    for target in targets:
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        if isinstance(target, cst.Name):
            roots.add(target.value)
    return roots


NOTEBOOK_REASON = (
    "in a notebook (or a `# %%` script's cells) the kernel keeps it after the last cell, where a "
    "cell you add later may read it; use --unsafe-fixes to stop downloading it"
)


RESULT_REASON = (
    "`{name}` is a result of the script: it is bound at module level and still holds this value "
    "when the script ends, where `python -i`, `%run` or an import sees it; use --unsafe-fixes to "
    "stop downloading it"
)


def letting_go_safety(save: Save, context: Context, facts: Facts, message: Callable[[], str],
                      uses: tuple[cst.CSTNode, ...] = ()) -> Safety | None:
    """How safe it is to stop downloading ``save``'s value, or None (reported, with
    ``message()`` and the client code that reads it, ``uses``) when that needs
    --unsafe-fixes: in a notebook, a value saved outside functions stays in the kernel,
    where the cells read so far are not all its readers; in a script, a result the script
    ends with (:func:`ndif_opt.analysis.regions.results_kept`) is compared like any other."""
    if save.block.stmt.function is not None:
        return Safety.SAFE
    if context.options.notebook:
        reason = NOTEBOOK_REASON
    else:
        request = save.block.outermost.stmt
        if save.name not in results_kept(facts, request.suite, request.index + 1):
            return Safety.SAFE
        reason = RESULT_REASON.format(name=save.name)
    if context.options.unsafe_fixes:
        return Safety.UNSAFE
    context.needs_unsafe(save.stmt, message(), reason, uses=uses)
    return None


def reduced_name(base: str, chain: cst.CSTNode, taken: TakenNames) -> str:
    suffix = "reduced"
    node = chain
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        suffix = node.func.attr.value
        if suffix in ("item", "tolist") and isinstance(node.func.value, cst.Call) and isinstance(node.func.value.func, cst.Attribute):
            suffix = node.func.value.func.attr.value
    elif isinstance(node, cst.Call):
        suffix = code_of(node.func).split(".")[-1]
    elif isinstance(node, cst.Subscript):
        suffix = "slice"
    elif isinstance(node, cst.BinaryOperation):
        suffix = "diff" if isinstance(node.operator, cst.Subtract) else "value"
    return fresh_name(f"{base}_{suffix}", taken, separator="")


def saved_assignment(name: str, chain: cst.BaseExpression, like: cst.SimpleStatementLine | None = None):
    saved = method_call(chain, "save")
    stmt = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], saved)])
    if like is not None:
        comments = [line for line in like.leading_lines if line.comment is not None]
        stmt = stmt.with_changes(leading_lines=comments, trailing_whitespace=like.trailing_whitespace)
    return stmt


def saves_of(facts: Facts) -> list[Save]:
    return facts.once(_find_saves)


def _find_saves(facts: Facts) -> list[Save]:
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.effective_remote is Remote.NO:
            continue
        for stmt in block.node.body.body:
            save = _save_in(block, stmt)
            if save is not None:
                found.append(save)
    return found


def _save_in(block: Block, stmt: cst.BaseStatement) -> Save | None:
    """``stmt`` as a save of one name (`x = <expr>.save()`, not of a container)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and is_save_call(small.value)
        and not _is_container(unsave(small.value))
    ):
        return Save(block, stmt, small.targets[0].target.value)
    return None


def nested_session_saves(facts: Facts) -> list[Save]:
    """Saves in the loops and conditionals of a block inside a session (trace-fusion puts
    a loop of traces inside one trace): the session reads them without `.save()` too."""
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.parent is None or block.effective_remote is Remote.NO:
            continue
        for stmt in _nested_statements(block.node.body.body):
            save = _save_in(block, stmt)
            if save is not None:
                found.append(save)
    return found


def element_saves_in_sessions(facts: Facts) -> list[Save]:
    """Saves into an element of a container in a block inside a session (`per_layer[L] =
    h.save()`), at the block's top level or in its loops and conditionals: a Save of the
    container's name (the session reads the element without `.save()`, as any value)."""
    found = []
    for block in facts.blocks:
        if block.method == "session" or block.parent is None or block.effective_remote is Remote.NO:
            continue
        for stmt in [*block.node.body.body, *_nested_statements(block.node.body.body)]:
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            if type(small) is cst.Assign and len(small.targets) == 1 \
                    and type(small.targets[0].target) is cst.Subscript \
                    and is_save_call(small.value) and not _is_container(unsave(small.value)):
                root = mutated_roots(small.targets[0].target)
                if len(root) == 1:
                    found.append(Save(block, stmt, root[0]))
    return found


_BRANCHING = (cst.For, cst.While, cst.If)


def _nested_statements(statements) -> Iterator[cst.BaseStatement]:
    """The statements in the loops and conditionals among ``statements``, at any depth, in
    the order of the code (not those of other compound statements: a nested block has
    its own saves, a function its own scope)."""
    for stmt in statements:
        if not isinstance(stmt, _BRANCHING):
            continue
        suites = [stmt.body]
        orelse = stmt.orelse
        while orelse is not None:  # `else:`, or `elif` (an If) with its own `else`
            suites.append(orelse.body)
            orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        for suite in suites:
            if isinstance(suite, cst.IndentedBlock):
                for inner in suite.body:
                    if isinstance(inner, _BRANCHING):
                        yield from _nested_statements([inner])
                    else:
                        yield inner


def _is_container(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.List, cst.Dict, cst.Tuple, cst.Set)) or (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "dict", "set", "tuple")
    )


def without_save(stmt: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`x = e.detach().cpu().save()` → `x = e`: a value that is no longer downloaded
    should stay where the server computes with it."""
    small = stmt.body[0]
    value = unsave(small.value)
    if _is_method_call(value, "cpu") and _is_method_call(value.func.value, "detach"):
        value = value.func.value.func.value
    return stmt.with_changes(body=[small.with_changes(value=value)])


def _is_method_call(expr: cst.BaseExpression, name: str) -> bool:
    return (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == name
    )


# -- what the pass asks about one version of the tree ---------------------------------------

def _session_statement(save: Save, session: Block) -> int | None:
    """The index of the statement of the session's body that holds the save's block."""
    body = session.node.body.body
    for node in (*save.block.stmt.ancestors, save.block.node):
        for index, stmt in enumerate(body):
            if stmt is node:
                return index
    return None


def later_in_session(save: Save, session: Block) -> list[cst.BaseStatement]:
    """The statements of the session's body after the one that holds the save."""
    index = _session_statement(save, session)
    return [] if index is None else list(session.node.body.body[index + 1 :])


def last_value_in_session(save: Save, session: Block, facts: Facts) -> bool:
    """Is the saved value the one the name holds when the session ends? It is when the
    session binds the name once, or when the save's block is a statement of the
    session's own body (it runs for sure), binds the name once, and nothing after it in
    the session binds the name again."""
    name = save.name
    if _binding_count_within(facts, name, session) == 1:
        return True
    if _session_statement(save, session) is None or save.block.stmt.ancestors[-1] is not session.node:
        return False
    if binding_count_in(save.block.node, name) != 1:
        return False
    return not any(name in collect(stmt).binds for stmt in later_in_session(save, session))


def _binding_count_within(facts: Facts, name: str, block: Block) -> int:
    """``scope_index(facts).binding_count(name, within=block.node)``. For a block that is a
    top-level statement, its binding sites are counted without the module's index."""
    if block.stmt.suite is not facts.module:
        return scope_index(facts).binding_count(name, within=block.node)
    return binding_count_in(block.node, name)


class EditsAlongPaths(NodeEdits):
    """NodeEdits that walks only the nodes that hold an edit somewhere below them, found
    with the index's parents: every other subtree is kept as it is, unvisited."""

    def __init__(self, parents: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.parents = parents
        self.above_edits: set[int] | None = None  # ids of the nodes above an edited node

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.above_edits is None:
            self.above_edits = self._above_edits()
        return id(node) in self.above_edits and super().on_visit(node)

    def _above_edits(self) -> set[int]:
        above: set[int] = set()
        for edited in [*self.replace, *self.remove, *self.append]:
            parent = self.parents.get(edited)
            while parent is not None and id(parent) not in above:
                above.add(id(parent))
                parent = self.parents.get(id(parent))
        return above

"""reduction-pushdown's second strategy: a container filled in a remote block whose elements are
read reduced (ElementPushdown), and the reads of a loop over saved values."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.analysis.names import COMPREHENSIONS, collect, name_assignment
from ndif_opt.analysis.regions import reads_after
from ndif_opt.analysis.scopes import scope_index, statement_index
from ndif_opt.passes.base import Context
from ndif_opt.passes.common.guards import CONDITIONAL_EXPRESSIONS
from ndif_opt.passes.common.records import RECORD_PREFIX, plain_loads
from ndif_opt.passes.reduction_pushdown.chains import ChainPushdown
from ndif_opt.passes.reduction_pushdown.saves import (
    EditsAlongPaths,
    Save,
    aliases_of,
    changed_roots,
    changed_through,
    changes_in_place,
    fills_in_place,
    letting_go_safety,
    spelled_names,
)
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import empty_container_kind, unsave
from ndif_opt.syntax.walk import all_nodes, find_nodes
from ndif_opt.types import Safety
from ndif_opt.wording import tense


@dataclass
class _Container:
    """`C = list().save()` / `C = dict().save()` at the top level of a request's block."""

    block: Block  # the request (an outermost block)
    stmt: cst.SimpleStatementLine
    name: str
    kind: str  # list | dict


def filled_containers(facts: Facts) -> list[_Container]:
    found = []
    for block in facts.blocks:
        if block.parent is not None or block.effective_remote is Remote.NO:
            continue
        for stmt in block.node.body.body:
            assigned = name_assignment(stmt)
            if assigned is None or not is_save_call(assigned[1]):
                continue
            kind = empty_container_kind(unsave(assigned[1]))
            # (a split's records hold what its replay reads, already reduced where they can be)
            if kind is not None and not assigned[0].startswith(RECORD_PREFIX):
                found.append(_Container(block, stmt, assigned[0], kind))
    return found


ELEMENT = "_ndif_element"  # stands for one element while reductions are compared
_JUMPS = (cst.Break, cst.Continue, cst.Return, cst.Raise)
_NEW_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_ITERATED_WHOLE = {"list": ("",), "dict": ("items", "values")}


@dataclass
class _ElementUse:
    """A place the code after the request reads one element of the container."""

    root: cst.CSTNode  # the element: the loop variable's name, or `C[k]`
    loop: cst.CSTNode | None  # the loop or comprehension that binds it (None: `C[k]`)


class LoopReads:
    """What a client loop over several saved values does with each one: its variable's
    reads, whether every iteration runs them, whether the variable outlives the loop."""

    def __init__(self, facts: Facts, context: Context) -> None:
        self.facts = facts
        self.context = context
        self.index = scope_index(facts)

    def _runs_whole(self, loop: cst.CSTNode, variable: str) -> bool:
        """Does every iteration of ``loop`` run all its body, with ``variable`` bound only
        by the loop?"""
        if isinstance(loop, cst.For):
            return loop.orelse is None and not find_nodes(loop.body, lambda n: isinstance(n, _JUMPS)) \
                and variable not in collect(loop.body).binds
        return not (loop.inner_for_in is not None or loop.ifs or isinstance(self.index.parents.get(id(loop)), cst.CompFor))

    def _variable_ok(self, loop: cst.CSTNode, variable: str) -> bool:
        """Does every iteration of ``loop`` run its whole body, with ``variable`` bound only
        by the loop and read by nothing after it?"""
        if not self._runs_whole(loop, variable):
            return False
        if isinstance(loop, cst.CompFor):
            return True  # (a comprehension's variable is its own)
        where = self.facts.statements.get(id(loop))
        # (the loop's variable keeps the last element)
        return where is not None and variable not in reads_after(self.facts, where.suite, where.index + 1)

    def _reads_of(self, variable: str, loop: cst.CSTNode) -> list[cst.Name] | None:
        """The loop variable's reads in the loop's body (or the comprehension's
        expression); None when a function or lambda inside mentions it."""
        if isinstance(loop, cst.For):
            scopes = [loop.body]
        else:
            comprehension = self.index.parents.get(id(loop))
            scopes = [comprehension.key, comprehension.value] if isinstance(comprehension, cst.DictComp) \
                else [comprehension.elt]
        reads = []
        for scope in scopes:
            for node in find_nodes(scope, lambda n: isinstance(n, (cst.Name, *_NEW_SCOPES))):
                if isinstance(node, _NEW_SCOPES):
                    if variable in spelled_names(node):
                        return None
                    continue
                if node.value == variable and self._is_read(node):
                    reads.append(node)
        return reads

    def _is_read(self, node: cst.Name) -> bool:
        parent = self.index.parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return False
        return not (isinstance(parent, cst.Arg) and parent.keyword is node)

    def _reduction(self, save: Save, root: cst.CSTNode, once: set[str]) -> tuple[cst.CSTNode, str] | None:
        """The reduction grown from ``root`` (one value of the loop) as the block of
        ``save`` can compute it, and its code with ELEMENT for the value; None when it
        does not narrow, changes the value in place, or reads a name of ``once`` anywhere
        but at ``root``."""
        if changed_through(root, self.index.parents):
            return None
        chain, reduced = ChainPushdown(save, self.facts, self.context)._grow(root)
        if not reduced:
            return None
        general = chain.deep_replace(root, cst.Name(ELEMENT))
        if set(collect(general).reads) & once:
            return None
        return chain, code_of(general)

    def _unconditional(self, chain: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Does the loop evaluate ``chain`` for every element: in a simple statement of
        its body (a comprehension's expression), with no condition or new scope between?"""
        stop = loop.body if isinstance(loop, cst.For) else self.index.parents.get(id(loop))
        node = self.index.parents.get(id(chain))
        while node is not None and node is not stop:
            if isinstance(node, CONDITIONAL_EXPRESSIONS) or isinstance(node, cst.BaseCompoundStatement):
                return False
            node = self.index.parents.get(id(node))
        return node is stop


class ElementPushdown(LoopReads):
    """Move the reduction client code applies to every element of a saved list or dict
    into the block that fills it, so that each element is downloaded reduced.

    Applied when the block fills the container at one place (`C.append(E)` or
    `C[k] = E`) and reads it nowhere else; the code after the request reads it only by
    iterating over it (`for x in C`, `for k, x in C.items()`, a comprehension), by
    `C[k]` (a loop over a dict's keys, or over a list's `range(len(C))`, that reads
    `C[k]` goes over every element), or through `len(C)`, `C.keys()`, `k in C`; every element it reads goes through the
    same reduction R, which a loop over the whole container applies to every element
    (no jump, no condition in front of it: R is known to work on each); and nothing in
    the request changes the element in place after it is stored. Then `C.append(R(E))`
    and the client's `R(x)` becomes `x`: the names keep the reduced values, which
    nothing else reads."""

    def __init__(self, container: _Container, facts: Facts, context: Context) -> None:
        super().__init__(facts, context)
        self.container = container
        self.request = container.block
        suite = self.request.stmt.suite
        self.after = list(suite.body[self.request.stmt.index + 1 :])

    def plan(self, edits: "EditsAlongPaths") -> None:
        """Add this container's edits to ``edits`` (shared by the run's containers)."""
        name = self.container.name
        if not any(name in statement_index(stmt).spelled for stmt in self.after):
            return None
        if self.index.binding_count(name) != 1:
            return None
        fill = self._fill()
        if fill is None:
            return None
        _, value = fill
        if self.index.read_outside(name, [self.request.node, *self.after]):
            return None
        after_use = self.index.use_naming(name, self.after)
        if name in after_use.binds or name in after_use.mutates:
            return None
        uses = self._element_uses()
        if not uses:
            return None
        found = self._reductions(uses)
        if isinstance(found, str):
            if found:
                self.context.skipped(self.container.stmt, f"the elements of `{name}` are still downloaded whole", found)
            return None
        chains, reduction = found
        why = self._changed_after_fill(value)
        if why:
            self.context.skipped(self.container.stmt, f"the elements of `{name}` are still downloaded whole", why)
            return None
        if not self.context.allows(self.container.stmt, f"the elements of `{name}` could be reduced on the server"):
            return None
        save = Save(self.request, self.container.stmt, name)
        safety = letting_go_safety(save, self.context, self.facts, lambda: (
            f"the elements of `{name}` need not be downloaded whole: `{reduction.replace(ELEMENT, code_of(unsave(value)))}` "
            "could be computed in the block for each one"), tuple(chain for chain, _ in chains))
        if safety is None:
            return None
        self._edits(edits, value, uses, chains, reduction, safety)

    # -- the block's side ------------------------------------------------------------------
    def _fill(self) -> tuple[cst.Name, cst.BaseExpression] | None:
        """The one place the request stores a value in the container: the container's
        name there and the value (`E` of `C.append(E)` or `C[k] = E`), when the request
        does nothing else with it."""
        name = self.container.name
        creation = self.container.stmt.body[0].targets[0].target
        found = self.index.occurrences_under(name, [self.request.node]).get(id(self.request.node), [])
        fills = []
        for node in found:
            if node is creation:
                continue
            value = self._stored_value(node)
            if value is None:
                return None
            fills.append((node, value))
        return fills[0] if len(fills) == 1 else None

    def _stored_value(self, node: cst.Name) -> cst.BaseExpression | None:
        parents = self.index.parents
        parent = parents.get(id(node))
        if self.container.kind == "list":
            call = parents.get(id(parent))
            if (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "append"
                    and isinstance(call, cst.Call) and call.func is parent and len(call.args) == 1
                    and call.args[0].keyword is None and not call.args[0].star
                    and isinstance(parents.get(id(call)), cst.Expr)):
                return call.args[0].value
            return None
        target = parents.get(id(parent))
        assign = parents.get(id(target))
        if (isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1
                and isinstance(target, cst.AssignTarget) and target.target is parent
                and isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            return assign.value
        return None

    def _changed_after_fill(self, value: cst.BaseExpression) -> str:
        """Why the element the client reads may differ from the value when it is stored:
        a change in place after it in the block that stores it, or, anywhere in the
        request, a change in place of a name of the value or of a name bound to a view
        of one (a later iteration would change an element stored earlier)."""
        block = self._innermost_block(value)
        nodes = all_nodes(self.request.node.body)
        read = set(collect(value).reads)
        aliases = aliases_of(read - set(self.facts.models), nodes)
        # what a change in place may reach the stored value through: its own names, a module's
        # output (any name made of the model's values: `h = layer.output`, `x = h * 2`), the
        # container and its elements
        reaching = aliases | aliases_of(set(self.facts.models), nodes, made_of=True) \
            | aliases_of({self.container.name}, nodes)
        seen = False
        for node in all_nodes(block.node.body):
            if node is value:
                seen = True
            elif seen and changes_in_place(node) and not self._is_the_fill(node) \
                    and _may_reach(changed_roots(node), reaching):
                # (`_log["story"] = story` or `seen[p] = len(p)` reaches no stored value)
                return f"`{code_of(node).strip()}` changes a value in place after the block stores it"
        # a loop of the block around the store runs what comes before it again, after it
        loop = self.index.parents.get(id(value))
        while loop is not None and loop is not block.node:
            if isinstance(loop, (cst.For, cst.While)):
                for node in all_nodes(loop.body):
                    if changes_in_place(node) and not self._is_the_fill(node):
                        return (f"`{code_of(node).strip()}` changes a value in place in the loop that stores it "
                                "(a later iteration runs it after the store)")
            loop = self.index.parents.get(id(loop))
        for node in nodes:
            if (changes_in_place(node) or fills_in_place(node)) and not self._is_the_fill(node):
                changed = changed_roots(node) & aliases
                if changed:
                    return (f"`{sorted(changed)[0]}` is changed in place in the request "
                            f"(`{code_of(node).strip()}`), and the stored value may be it or a view of it")
        return ""

    def _is_the_fill(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Assign) and any(
            isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)
            and t.target.value.value == self.container.name for t in node.targets)

    def _innermost_block(self, node: cst.CSTNode) -> Block:
        blocks = {id(b.node): b for b in self.facts.blocks}
        parent = self.index.parents.get(id(node))
        while parent is not None:
            if id(parent) in blocks:
                return blocks[id(parent)]
            parent = self.index.parents.get(id(parent))
        return self.request

    # -- the client's side -----------------------------------------------------------------
    def _element_uses(self) -> list[_ElementUse] | None:
        """Where the code after the request reads elements; None when it uses the
        container another way (whole), or no loop goes over all of it."""
        name = self.container.name
        parents = self.index.parents
        uses: list[_ElementUse] = []
        whole = False
        for stmt_nodes in self.index.occurrences_under(name, self.after).values():
            for node in stmt_nodes:
                parent = parents.get(id(node))
                if isinstance(parent, cst.Subscript) and parent.value is node:
                    uses.append(_ElementUse(parent, None))
                    whole = whole or self._keys_loop(parent) is not None
                    continue
                if isinstance(parent, cst.Arg) and self._is_len(parents.get(id(parent))):
                    continue
                iterated, holder = self._iterated(node)
                if iterated is None:
                    return None
                if holder == "keys":
                    whole = whole or self._keys_loop_here(node)
                    continue
                target = self._element_target(iterated, holder)
                if target is None:
                    return None
                uses.append(_ElementUse(target, iterated))
                whole = True
        return uses if whole else None

    def _membership(self, node: cst.Name) -> bool:
        """Is ``node`` what `k in C` / `k not in C` looks in?"""
        target = self.index.parents.get(id(node))
        return isinstance(target, cst.ComparisonTarget) and target.comparator is node \
            and isinstance(target.operator, (cst.In, cst.NotIn))

    def _keys_loop_here(self, node: cst.Name) -> bool:
        """Is ``node`` (the container) what a loop over its keys goes over?"""
        iterable = node
        parent = self.index.parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node:
            iterable = self.index.parents.get(id(parent))
        loop = self.index.parents.get(id(iterable))
        return isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is iterable

    def _keys_loop(self, subscript: cst.Subscript) -> cst.CSTNode | None:
        """The loop over the container's keys (a dict's keys, a list's `range(len(C))`)
        whose variable ``subscript`` (`C[k]`) reads, when every iteration runs its whole
        body (then it reads every element)."""
        if len(subscript.slice) != 1:
            return None
        key = subscript.slice[0].slice
        if not (isinstance(key, cst.Index) and isinstance(key.value, cst.Name)):
            return None
        node = self.index.parents.get(id(subscript))
        while node is not None and not isinstance(node, _NEW_SCOPES):
            loop = node.for_in if isinstance(node, COMPREHENSIONS) else node
            if isinstance(loop, (cst.For, cst.CompFor)) and isinstance(loop.target, cst.Name) \
                    and loop.target.value == key.value.value and self._over_keys(loop.iter):
                return loop if self._runs_whole(loop, key.value.value) else None
            node = self.index.parents.get(id(node))
        return None

    def _over_keys(self, iterable: cst.BaseExpression) -> bool:
        """`C` or `C.keys()` for a dict; `range(len(C))` for a list (the builtins)."""
        if self.container.kind == "list":
            return (isinstance(iterable, cst.Call) and code_of(iterable.func) == "range" and len(iterable.args) == 1
                    and "range" not in self.facts.bindings and self._is_len(iterable.args[0].value))
        if isinstance(iterable, cst.Call) and not iterable.args and isinstance(iterable.func, cst.Attribute) \
                and iterable.func.attr.value == "keys":
            iterable = iterable.func.value
        return isinstance(iterable, cst.Name) and iterable.value == self.container.name

    def _is_len(self, call: cst.CSTNode | None) -> bool:
        """`len(C)` (the builtin)."""
        return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "len"
                and len(call.args) == 1 and "len" not in self.facts.functions and "len" not in self.facts.bindings
                and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == self.container.name)

    def _iterated(self, node: cst.Name) -> tuple[cst.CSTNode | None, str]:
        """The `for` or comprehension `for` whose iterable is the container (or its
        `.items()`/`.values()`/`.keys()`), and which of those."""
        parents = self.index.parents
        iterable, holder = node, ""
        parent = parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if not (isinstance(call, cst.Call) and call.func is parent and not call.args):
                return None, ""
            holder = parent.attr.value
            if self.container.kind == "dict" and holder == "keys":
                return node, "keys"
            iterable = call
        elif self.container.kind == "dict" and (self._keys_loop_here(node) or self._membership(node)):
            return node, "keys"  # `for k in C`, `k in C`: its keys
        if holder not in _ITERATED_WHOLE[self.container.kind]:
            return None, ""
        loop = parents.get(id(iterable))
        if isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is iterable:
            return loop, holder
        return None, ""

    def _element_target(self, loop: cst.CSTNode, holder: str) -> cst.Name | None:
        target = loop.target
        if holder == "items":
            if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
                return None
            target = target.elements[1].value
        if not isinstance(target, cst.Name) or not self._variable_ok(loop, target.value):
            return None
        return target

    def _reductions(self, uses: list[_ElementUse]):
        """The chains that reduce each element read and the one reduction they share
        (with ELEMENT for the element); or why not, once some read reduces an element
        ("" when none does: nothing to offer)."""
        name = self.container.name
        chains: list[tuple[cst.CSTNode, _ElementUse]] = []  # (chain, the use it reduces)
        codes: dict[str, cst.CSTNode] = {}
        witnessed = False
        whole = None  # a read that takes an element whole
        for use in uses:
            reads = [use.root] if use.loop is None else self._reads_of(use.root.value, use.loop)
            if not reads:
                return "" if not chains else f"a loop over `{name}` reads its elements in a function or lambda"
            for read in reads:
                grown = self._grow(read, name if use.loop is None else use.root.value)
                if grown is None:
                    whole = whole or read
                    continue
                chains.append((grown[0], use))
                codes.setdefault(grown[1], grown[0])
                loop = use.loop if use.loop is not None else self._keys_loop(use.root)
                if loop is not None:
                    witnessed = witnessed or self._unconditional(grown[0], loop)
        if not chains:
            return ""
        if whole is not None:
            parent = self.index.parents.get(id(whole), whole)
            return f"`{code_of(parent).strip()}` uses an element whole, on your machine"
        if len(codes) != 1:
            return "its elements are reduced in different ways (" + ", ".join(
                f"`{code_of(c)}`" for c in codes.values()) + ")"
        if not witnessed:
            return ("no loop over all of it reduces every element: the reduction is not known to work on "
                    "each one (a condition or a jump stands in front of it)")
        return chains, next(iter(codes))

    def _grow(self, root: cst.CSTNode, variable: str) -> tuple[cst.CSTNode, str] | None:
        save = Save(self.request, self.container.stmt, variable)
        return self._reduction(save, root, {variable, self.container.name})

    # -- the rewrite -----------------------------------------------------------------------
    def _edits(self, edits: "EditsAlongPaths", fill: cst.BaseExpression, uses: list[_ElementUse], chains,
               reduction: str, safety: Safety) -> None:
        """The block stores R(E), and the client's reductions read what it stored. The
        container and the loops' variables keep their names and now hold the reduced
        values (nothing read them any other way): they are no longer what the script
        had, and are named so (`unreturned`). New names would be numbered by what else
        the run renamed, which a window of the file does not see."""
        name = self.container.name
        stored = unsave(fill)
        if not isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            stored = stored.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        general = cst.parse_expression(reduction)
        element = next(n for n in find_nodes(general, lambda n: isinstance(n, cst.Name) and n.value == ELEMENT))
        edits.replace[id(fill)] = general.deep_replace(element, stored)
        for chain, use in chains:
            edits.replace[id(chain)] = cst.Name(use.root.value) if use.loop is not None else use.root
            if isinstance(use.loop, cst.For):
                self.context.unreturned.add(use.root.value)
            copy = self._copy_of_container(chain, use)
            if copy is not None:
                edits.replace[id(self.index.parents[id(use.loop)])] = copy
        self.context.unreturned.add(name)
        self.context.applied(
            self.container.stmt,
            f"the elements of `{name}` {tense('are no longer', 'would no longer be')} downloaded whole: "
            f"`{reduction.replace(ELEMENT, code_of(stored))}` {tense('is now', 'would be')} computed in the block "
            f"for each one, and `{name}` {tense('holds', 'would hold')} those",
            safety,
            uses=tuple(chain for chain, _ in chains),
        )

    def _copy_of_container(self, chain: cst.CSTNode, use: _ElementUse) -> cst.Call | None:
        """`list(C)` for `[x for x in C]`, which a comprehension whose expression was the
        reduction becomes once the reduction moves into the block (`set(C)` for a set)."""
        comprehension = self.index.parents.get(id(use.loop)) if isinstance(use.loop, cst.CompFor) else None
        maker = {cst.ListComp: "list", cst.SetComp: "set"}.get(type(comprehension))
        if maker is None or comprehension.elt is not chain or self._shadowed(maker):
            return None
        loop = use.loop
        if loop.ifs or loop.inner_for_in is not None or loop.asynchronous is not None:
            return None
        if not (isinstance(loop.target, cst.Name) and loop.target.value == use.root.value):
            return None
        return cst.Call(func=cst.Name(maker), args=[cst.Arg(loop.iter)]).with_changes(
            lpar=comprehension.lpar, rpar=comprehension.rpar)

    def _shadowed(self, builtin: str) -> bool:
        """Does the file bind ``builtin`` anywhere (a parameter, a `def`, an assignment)?"""
        return self.facts.once(_binds_nowhere, builtin)


def _binds_nowhere(facts: Facts, builtin: str) -> bool:
    """Does the module leave ``builtin`` unbound everywhere (once per version of the tree)?"""
    return plain_loads(facts.module, builtin) is None


def _may_reach(roots: set[str], aliases: set[str]) -> bool:
    """May a change in place through ``roots`` reach a value made of ``aliases``? Yes when
    the roots are not known (a change through a call's result)."""
    return not roots or bool(roots & aliases)

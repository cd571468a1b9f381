"""reduction-pushdown's third strategy: a loop over a list of saved values written out in the
code (`for h in [h0, h1]:`), each reduced in its block (LiteralPushdown)."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.scopes import TakenNames, scope_index
from ndif_opt.passes.base import Context
from ndif_opt.passes.reduction_pushdown.chains import ChainPushdown
from ndif_opt.passes.reduction_pushdown.elements import ELEMENT, LoopReads
from ndif_opt.passes.reduction_pushdown.saves import (
    EditsAlongPaths,
    Save,
    changed_in_place_outside,
    last_value_in_session,
    letting_go_safety,
    reduced_name,
    saved_assignment,
    saves_of,
    without_save,
)
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.types import Safety
from ndif_opt.wording import tense


class LiteralPushdown(LoopReads):
    """Reduce the saved values a client loop goes over in a list written out in the code:
    `for name, logits in [("clean", clean), ("patched", patched)]: print(logits[0, -1].argmax())`.

    Each saved value the list holds at the loop variable's place gets its reduction
    computed in its own block (`clean_argmax = clean[0, -1].argmax().save()`, as for a
    value read through one reduction), the list holds those, and the loop's reads take
    them as they are. Applied under the conditions of the elements of a container (one
    reduction, applied unconditionally on each value, the variable read by nothing
    after the loop) and those of a saved value's own reductions (the value not bound
    again after its request, not read before it or in a function). A value that the
    code after its request also reads another way keeps its own save."""

    def __init__(self, loop: cst.CSTNode, place: int | None, saves: list[Save], facts: Facts, context: Context) -> None:
        super().__init__(facts, context)
        self.loop = loop
        self.saves = saves  # the saved value at that place of each item of the list
        target = loop.target
        self.variable = (target if place is None else target.elements[place].value).value
        # the name at that place of each item (the list's own nodes)
        self.held = _held_at(loop, place)

    @staticmethod
    def candidates(facts: Facts, context: Context) -> list["LiteralPushdown"]:
        """The loops over a list (or tuple) display whose items hold, at one place of the
        loop's target, only names bound to saved values."""
        index = scope_index(facts)
        saves = {s.name: s for s in saves_of(facts)}
        loops: dict[int, cst.CSTNode] = {}
        for name in saves:
            for node, _ in index.occurrences.get(name, ()):
                loop = _display_loop(node, index.parents)
                if loop is not None:
                    loops.setdefault(id(loop), loop)
        found = []
        for loop in loops.values():
            target = loop.target
            if isinstance(target, cst.Name):
                places = [None]
            elif isinstance(target, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in target.elements):
                places = list(range(len(target.elements)))
            else:
                continue
            for place in places:
                held = _held_at(loop, place)
                if held and all(isinstance(h, cst.Name) and h.value in saves for h in held):
                    found.append(LiteralPushdown(loop, place, [saves[h.value] for h in held], facts, context))
        return found

    def plan(self, edits: "EditsAlongPaths") -> bool:
        variable = self.variable
        names = [s.name for s in self.saves]
        if len(set(names)) != len(names) or not self._variable_ok(self.loop, variable):
            return False
        reads = self._reads_of(variable, self.loop)
        if not reads:
            return False
        chains, codes, witnessed = [], set(), False
        for read in reads:
            grown = [self._reduction(Save(save.block, save.stmt, variable), read, {variable}) for save in self.saves]
            if any(g is None for g in grown) or len({id(g[0]) for g in grown}) != 1:
                return False
            chain, code = grown[0]
            chains.append(chain)
            codes.add(code)
            witnessed = witnessed or self._unconditional(chain, self.loop)
        if len(codes) != 1 or not witnessed:
            return False
        for save in self.saves:
            pushdown = ChainPushdown(save, self.facts, self.context)
            if save.name in pushdown._after_use(save.name).binds:
                return False
            if pushdown.request is not save.block and not last_value_in_session(save, pushdown.request, self.facts):
                return False
            if pushdown.request is not save.block and changed_in_place_outside(save.name, pushdown.request, save.block):
                return False
            if self.index.read_outside(save.name, [pushdown.request.node, *pushdown.after]):
                return False
        if not self.context.allows(self.saves[0].stmt, "the values the loop goes over could be reduced on the server"):
            return False
        reduction = codes.pop()
        # a value the code after its request also reads another way keeps its own save
        whole_too = {save.name for save in self.saves if self._read_elsewhere(save)}
        safety = Safety.SAFE
        for save in self.saves:
            if save.name in whole_too:
                continue  # its own save stays: the kernel keeps what it kept
            kept = letting_go_safety(save, self.context, self.facts, lambda save=save: (
                f"`{save.name}` need not be downloaded whole for the loop over it: "
                f"`{reduction.replace(ELEMENT, save.name)}` could be computed in the block"), tuple(chains))
            if kept is None:
                return False
            if kept is Safety.UNSAFE:
                safety = Safety.UNSAFE
        self._edits_for(edits, chains, reduction, whole_too, safety)
        return True

    def _edits_for(self, edits: "EditsAlongPaths", chains, reduction: str, whole_too: set[str],
                   safety: Safety) -> None:
        taken = TakenNames(self.index, self.context.run.reserved_names)
        general = cst.parse_expression(reduction)
        element = next(n for n in find_nodes(general, lambda n: isinstance(n, cst.Name) and n.value == ELEMENT))
        reduced_names = []
        for save, name_node in zip(self.saves, self.held):
            name = reduced_name(save.name, chains[0], taken)
            taken.add(name)
            self.context.introduced.add(name)
            reduced_names.append(name)
            added = edits.append.setdefault(id(save.block.node.body), [])
            added.append(saved_assignment(name, general.deep_replace(element, cst.Name(save.name))))
            edits.replace[id(name_node)] = cst.Name(name)
            if save.name not in whole_too:
                edits.replace[id(save.stmt)] = without_save(save.stmt)
                self.context.unreturned.add(save.name)
        for chain in chains:
            edits.replace[id(chain)] = cst.Name(self.variable)
        if isinstance(self.loop, cst.For):
            self.context.unreturned.add(self.variable)
        for save, name in zip(self.saves, reduced_names):
            self.context.applied(
                save.stmt,
                f"`{save.name}` {tense('is no longer', 'would no longer be')} downloaded whole for the loop over it: "
                f"`{reduction.replace(ELEMENT, save.name)}` {tense('now computed', 'would be computed')} in the "
                f"block and saved (as `{name}`)",
                safety,
                uses=tuple(chains),
            )

    def _read_elsewhere(self, save: Save) -> bool:
        """Does the code after the request read the saved value elsewhere than in the
        loop's list?"""
        pushdown = ChainPushdown(save, self.facts, self.context)
        return any(_display_loop(node, self.index.parents) is not self.loop for node in pushdown._uses())


def _display_loop(node: cst.Name, parents: dict[int, cst.CSTNode]) -> cst.CSTNode | None:
    """The `for` (or comprehension `for`) whose iterable is a list or tuple display that
    holds ``node`` as an item, or as an item of a tuple item."""
    display = None
    current = node
    for _ in range(2):
        element = parents.get(id(current))
        holder = parents.get(id(element))
        if not (isinstance(element, cst.Element) and element.value is current
                and isinstance(holder, (cst.List, cst.Tuple))):
            break
        display, current = holder, holder
        loop = parents.get(id(display))
        if isinstance(loop, (cst.For, cst.CompFor)) and loop.iter is display:
            return loop
    return None


def _held_at(loop: cst.CSTNode, place: int | None) -> list[cst.BaseExpression | None]:
    """What each item of the loop's list display holds at ``place`` of its tuple target
    (None: the target is a name, the item itself)."""
    width = len(loop.target.elements) if place is not None else 0
    return [_item_at(item.value, place, width) for item in loop.iter.elements]


def _item_at(item: cst.BaseExpression, place: int | None, width: int) -> cst.BaseExpression | None:
    """The part of a display's item the loop binds at ``place`` of its tuple target."""
    if place is None:
        return item
    if isinstance(item, cst.Tuple) and len(item.elements) == width and \
            all(isinstance(e, cst.Element) for e in item.elements):
        return item.elements[place].value
    return None

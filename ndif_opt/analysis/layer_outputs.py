"""What `output[0]` of a decoder layer means: the old tuple's hidden states, or a batch row.

With transformers < 5 (every nnsight before 0.5, and 0.5-0.7 with an older transformers)
a decoder layer returned a tuple `(hidden, ...)`: `layer.output[0]` was the hidden states,
`[B, S, D]`. With transformers 5 (nnsight 0.8) it returns the hidden states themselves,
and the same text selects the first batch row, `[S, D]`. The text alone does not say which
the author meant, so migrate-api rewrites `output[0]` to `output` only where the code shows
the tuple was meant, and leaves it where it shows the row was meant or shows nothing.

**Sites.** `[0]` on a value that holds a decoder layer's output: `layers[i].output[0]`,
`out[0]` after `out = layer.output` (`out = out[0]` too), `get_output(model, i)[0]` where
the helper returns a layer's output. `[0]` inside `if isinstance(out, tuple)` is left alone:
it is right on every version.

**Evidence** comes from how the selected value is used, wherever it flows (names bound to it
in the same function, saves, `.clone()` and the like, a helper's `return` to its callers):
under the tuple reading it has three dimensions, under the row reading two. Indexing three
dimensions (`h[:, -1, :]`), `h.shape[2]`, `b, s, d = h.shape` say tuple; `s, d = h.shape`,
`h.t()`, `h.mm(w)` say row. A script that uses the pre-0.5 nnsight API (`.value`,
`nnsight.list()`, `scan=`) was written for transformers < 5: tuple, for every site.

**Groups.** The sites of one function (the module's own code is one), and those linked by a
helper's return, are one group: one author's reading of one model's layers. The group's
evidence is pooled; it is decided when all of it points one way, and every site of it
follows that decision — so two related lines are never migrated apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import own_returns
from ndif_opt.analysis.scopes import scope_index
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import find_nodes

TUPLE = "tuple"  # `[0]` took the hidden states out of the old `(hidden, ...)` tuple
ROW = "row"  # `[0]` takes the first batch row of the hidden states

RANK = {TUPLE: 3, ROW: 2}  # the rank of the selected value under each reading

# Methods whose result has the rank of their receiver: the value flows on through them.
RANK_KEEPING = frozenset({
    "save", "clone", "detach", "cpu", "cuda", "to", "float", "half", "bfloat16", "double",
    "contiguous", "requires_grad_", "abs", "softmax", "log_softmax", "exp", "log", "type",
})
# Methods that need a value of at most two dimensions (`.t()` raises on three).
AT_MOST_2D = frozenset({"t", "mm"})
MAX_FLOW = 4  # how many names, returns and calls a value is followed through


@dataclass(frozen=True)
class Evidence:
    meaning: str  # TUPLE | ROW
    why: str  # "`h[:, -1, :]` indexes 3 dimensions"


@dataclass(eq=False)
class Site:
    """One `[0]` on a decoder layer's output."""

    node: cst.Subscript  # the `X[0]`
    scope: cst.FunctionDef | None  # the function it is in (None: the module's own code)
    target: cst.CSTNode  # the node the migration replaces
    fix: Callable[[cst.CSTNode], cst.CSTNode | cst.RemovalSentinel]
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def what(self) -> str:
        return f"`{code_of(self.node)}`"


@dataclass(eq=False)
class Group:
    sites: list[Site]
    meaning: str | None  # TUPLE | ROW | None (undecided)
    why: str  # what decided it, or why nothing did


def layer_output_groups(facts: Facts, subscripts, is_layer: Callable[[cst.BaseExpression], bool],
                        era: Evidence | None) -> list[Group]:
    """The `[0]` sites among ``subscripts`` (every subscript of the module), grouped and
    decided. ``era``: the evidence the whole file gives (its nnsight API), if any."""
    flow = _Flow(facts, is_layer)
    sites = [site for node in subscripts if (site := flow.site(node)) is not None]
    if not sites:
        return []
    for site in sites:
        site.evidence = flow.evidence(site.node, site.scope)
    return [_decide(members, era) for members in flow.groups(sites)]


def _decide(sites: list[Site], era: Evidence | None) -> Group:
    pooled = [e for site in sites for e in site.evidence] + ([era] if era else [])
    meanings = {e.meaning for e in pooled}
    if len(meanings) == 1:
        meaning = meanings.pop()
        return Group(sites, meaning, next(e.why for e in pooled if e.meaning == meaning))
    if meanings:
        tuple_why = next(e.why for e in pooled if e.meaning == TUPLE)
        row_why = next(e.why for e in pooled if e.meaning == ROW)
        return Group(sites, None, f"its uses disagree: {tuple_why} (the old tuple's hidden states), but "
                                  f"{row_why} (a batch row)")
    return Group(sites, None, "nothing in its uses shows whether `[0]` took the hidden states out of the old "
                              "tuple (transformers < 5) or takes the first batch row (transformers 5)")


class _Flow:
    """Where decoder-layer outputs and the values selected from them go."""

    def __init__(self, facts: Facts, is_layer: Callable[[cst.BaseExpression], bool]) -> None:
        self.facts = facts
        self.is_layer = is_layer
        self.index = scope_index(facts)
        self.parents = self.index.parents
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        for node in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef):
            self.functions.setdefault(node.name.value, []).append(node)
        # scope links: a helper's return reaches its callers (union-find over scopes)
        self._links: dict[int, int] = {}

    # --- sites -------------------------------------------------------------------------
    def site(self, node: cst.Subscript) -> Site | None:
        if _index(node) != 0:
            return None
        scope = self.scope_of(node)
        if self.holds(node.value, scope, frozenset()) is None or self._tuple_guarded(node):
            return None
        target, fix = self._rewrite(node)
        return Site(node, scope, target, fix)

    def _rewrite(self, node: cst.Subscript):
        parent = self.parents.get(id(node))
        if type(parent) is cst.Subscript and parent.value is node and _index(parent) is not None:
            # `out[0][k]` → `out[k, :]`, not `out[k]`: migrated again, `out[k]` would read as
            # the old tuple's element again
            return parent, _batch_row
        line = self._self_unpack_line(node)
        if line is not None:
            alone = len(self.parents[id(line)].body) == 1
            return line, (lambda updated: cst.SimpleStatementLine([cst.Pass()])) if alone else (
                lambda updated: cst.RemovalSentinel.REMOVE)
        return node, lambda updated: updated.value

    def _self_unpack_line(self, node: cst.Subscript) -> cst.SimpleStatementLine | None:
        """The line of `out = out[0]`, if ``node`` is its value and the line holds only it."""
        assign = self.parents.get(id(node))
        if type(assign) is not cst.Assign or assign.value is not node or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if type(target) is not cst.Name or type(node.value) is not cst.Name or target.value != node.value.value:
            return None
        line = self.parents.get(id(assign))
        if type(line) is cst.SimpleStatementLine and len(line.body) == 1:
            return line
        return None

    def _tuple_guarded(self, node: cst.Subscript) -> bool:
        """`out[0] if isinstance(out, tuple) else out`, `if isinstance(out, tuple): out = out[0]`:
        right on every transformers."""
        held = code_of(node.value)
        child, parent = node, self.parents.get(id(node))
        while parent is not None and type(parent) is not cst.FunctionDef:
            test = parent.test if type(parent) in (cst.If, cst.IfExp) else None
            if test is not None and child is not test and _is_tuple_check(test, held):
                return True
            child, parent = parent, self.parents.get(id(parent))
        return False

    # --- what holds a decoder layer's output ---------------------------------------------
    def holds(self, expr: cst.BaseExpression, scope, seen: frozenset) -> frozenset | None:
        """None when ``expr`` is not known to hold a decoder layer's output (the whole
        output, before any `[0]`); else the helpers it comes through."""
        kind = type(expr)
        if kind is cst.Attribute and expr.attr.value == "output" and self.is_layer(expr.value):
            return frozenset()
        if kind is cst.Attribute and expr.attr.value == "value":
            return self.holds(expr.value, scope, seen)  # a pre-0.5 saved value: what was saved
        if kind is cst.Name:
            return self._name_holds(expr.value, scope, seen)
        if kind is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in RANK_KEEPING \
                and not expr.args and self._helper(expr) is None:
            return self.holds(expr.func.value, scope, seen)  # `layer.output.save()`, `.clone()`
        if kind is cst.Call:
            return self._call_holds(expr, seen)
        return None

    def _name_holds(self, name: str, scope, seen: frozenset) -> frozenset | None:
        if (name, id(scope)) in seen:
            return None
        seen = seen | {(name, id(scope))}
        values = [value for info, value in self.facts.bindings.get(name, ())
                  if info.function is scope and not _is_self_unpack(name, value)]
        if not values:
            return None
        helpers: frozenset = frozenset()
        for value in values:
            found = self.holds(value, scope, seen) if value is not None else None
            if found is None:
                return None
            helpers |= found
        return helpers

    def _call_holds(self, call: cst.Call, seen: frozenset) -> frozenset | None:
        helper = self._helper(call)
        if helper is None or helper in seen or len(seen) > MAX_FLOW:
            return None
        returns = [stmt.value for stmt in own_returns(helper.body)]
        if not returns or any(value is None for value in returns):
            return None
        helpers = frozenset({helper})
        for value in returns:
            found = self.holds(value, helper, seen | {helper})
            if found is None:
                return None
            helpers |= found
        return helpers

    def _helper(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function a call calls, by its name (`f(...)`, `self.f(...)`), when one
        function of the module has that name."""
        func = call.func
        name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
        found = self.functions.get(name or "", [])
        return found[0] if len(found) == 1 else None

    # --- evidence --------------------------------------------------------------------------
    def evidence(self, node: cst.BaseExpression, scope) -> list[Evidence]:
        """What the uses of the value ``node`` selects say about its rank."""
        return list(self._uses(node, scope, consumed=0, budget=MAX_FLOW))

    def _uses(self, node: cst.BaseExpression, scope, consumed: int, budget: int) -> Iterator[Evidence]:
        """``consumed``: dimensions already indexed away between the site and ``node``."""
        parents = self.parents
        shown = node
        while True:
            parent = parents.get(id(node))
            kind = type(parent)
            if kind is cst.Subscript and parent.value is node:
                taken = _dimensions_taken(parent)
                if taken is None:
                    return
                consumed += taken
                node = shown = parent
                if consumed >= 3:
                    yield Evidence(TUPLE, f"`{code_of(shown)}` indexes {consumed} dimensions")
                    return
                continue
            if kind is cst.Attribute and parent.value is node:
                yield from self._attribute_use(parent, consumed)
                call = parents.get(id(parent))
                if parent.attr.value in RANK_KEEPING and type(call) is cst.Call and call.func is parent:
                    node = call
                    continue
                return
            if kind is cst.Assign and parent.value is node:
                yield from self._bound_uses(parent, scope, consumed, budget)
                return
            if kind is cst.Return and budget > 0:
                yield from self._returned_uses(scope, consumed, budget - 1)
            return

    def _attribute_use(self, attribute: cst.Attribute, consumed: int) -> Iterator[Evidence]:
        attr = attribute.attr.value
        outer = self.parents.get(id(attribute))
        if attr == "shape":
            yield from _shape_evidence(attribute, outer, self.parents.get(id(outer)), consumed)
            return
        called = type(outer) is cst.Call and outer.func is attribute
        if attr == "size" and called and len(outer.args) == 1 and _int(outer.args[0].value) is not None:
            yield from _dimension_index_evidence(code_of(outer), _int(outer.args[0].value), consumed)
        elif attr in AT_MOST_2D and called and consumed == 0:
            yield Evidence(ROW, f"`{code_of(outer)}` needs at most 2 dimensions")

    def _bound_uses(self, assign: cst.Assign, scope, consumed: int, budget: int) -> Iterator[Evidence]:
        if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name or budget <= 0:
            return
        name = assign.targets[0].target.value
        own = assign.value.value if _is_self_unpack(name, assign.value) else None  # the `out` of `out = out[0]`
        for occurrence in self._reads_in(name, scope):
            if occurrence is own:
                continue
            yield from self._uses(occurrence, scope, consumed, budget - 1)

    def _returned_uses(self, scope, consumed: int, budget: int) -> Iterator[Evidence]:
        """A helper's return flows to its callers."""
        if scope is None:
            return
        for call in self._calls_of(scope):
            caller = self.scope_of(call)
            self.link(scope, caller)
            yield from self._uses(call, caller, consumed, budget)

    def _reads_in(self, name: str, scope) -> Iterator[cst.Name]:
        for occurrence, path in self.index.occurrences.get(name, ()):
            if _innermost_function(path) is not scope:
                continue
            parent = self.parents.get(id(occurrence))
            if type(parent) in (cst.AssignTarget, cst.For) and getattr(parent, "target", None) is occurrence:
                continue
            yield occurrence

    def _calls_of(self, function: cst.FunctionDef) -> Iterator[cst.Call]:
        name = function.name.value
        for occurrence, _ in self.index.occurrences.get(name, ()):
            call = self.parents.get(id(occurrence))
            if type(call) is cst.Call and call.func is occurrence and self._helper(call) is function:
                yield call
        for attribute in find_nodes(self.facts.module, lambda n: type(n) is cst.Attribute and n.attr.value == name):
            call = self.parents.get(id(attribute))
            if type(call) is cst.Call and call.func is attribute and self._helper(call) is function:
                yield call

    # --- scopes and groups -----------------------------------------------------------------
    def scope_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        parent = self.parents.get(id(node))
        while parent is not None:
            if type(parent) is cst.FunctionDef:
                return parent
            parent = self.parents.get(id(parent))
        return None

    def link(self, a, b) -> None:
        root_a, root_b = self._root(id(a)), self._root(id(b))
        if root_a != root_b:
            self._links[root_a] = root_b

    def _root(self, key: int) -> int:
        while key in self._links:
            key = self._links[key]
        return key

    def groups(self, sites: list[Site]) -> list[list[Site]]:
        for site in sites:  # a site reached through a helper is related to the helper's code
            for helper in self.holds(site.node.value, site.scope, frozenset()) or ():
                self.link(site.scope, helper)
        grouped: dict[int, list[Site]] = {}
        for site in sites:
            grouped.setdefault(self._root(id(site.scope)), []).append(site)
        return list(grouped.values())


# ---------------------------------------------------------------------------------------
# Small readings of the code
# ---------------------------------------------------------------------------------------


def _index(node: cst.Subscript) -> int | None:
    """The integer of `x[<int>]` (also negative), else None."""
    if len(node.slice) != 1 or type(node.slice[0].slice) is not cst.Index:
        return None
    return _int(node.slice[0].slice.value)


def _int(value: cst.BaseExpression) -> int | None:
    sign = 1
    if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
        sign, value = -1, value.expression
    if type(value) is cst.Integer:
        return sign * int(value.value, 0)
    return None


def _dimensions_taken(node: cst.Subscript) -> int | None:
    """How many dimensions `x[...]` indexes (each int, slice or index tensor takes at least
    one); None when `...` or `None` makes it unknown."""
    taken = 0
    for element in node.slice:
        inner = element.slice
        if type(inner) is cst.Index:
            value = inner.value
            if type(value) is cst.Ellipsis or (type(value) is cst.Name and value.value == "None"):
                return None
        taken += 1
    return taken


def _shape_evidence(shape: cst.Attribute, outer, outer_parent, consumed: int) -> Iterator[Evidence]:
    """`h.shape[2]`, `b, s, d = h.shape`."""
    if type(outer) is cst.Subscript and outer.value is shape and _index(outer) is not None:
        yield from _dimension_index_evidence(code_of(outer), _index(outer), consumed)
    elif type(outer) is cst.Assign and outer.value is shape and len(outer.targets) == 1:
        target = outer.targets[0].target
        if type(target) in (cst.Tuple, cst.List) and not any(type(e) is cst.StarredElement for e in target.elements):
            rank = consumed + len(target.elements)
            for meaning, expected in RANK.items():
                if rank == expected:
                    yield Evidence(meaning, f"`{code_of(outer).strip()}` unpacks {len(target.elements)} dimensions")


def _dimension_index_evidence(code: str, dim: int, consumed: int) -> Iterator[Evidence]:
    needed = consumed + (dim + 1 if dim >= 0 else -dim)  # the rank that dimension needs
    if needed >= RANK[TUPLE]:
        yield Evidence(TUPLE, f"`{code}` reads dimension {dim} of what has only 2 as a batch row")


def _is_tuple_check(test: cst.BaseExpression, held: str) -> bool:
    """`isinstance(<held>, tuple)` (or `(tuple, list)`), maybe inside `not`/`and`/`or`."""
    for call in find_nodes(test, lambda n: type(n) is cst.Call):
        func = call.func
        if type(func) is cst.Name and func.value == "isinstance" and len(call.args) == 2:
            if code_of(call.args[0].value) == held and "tuple" in code_of(call.args[1].value):
                return True
    return False


def _is_self_unpack(name: str, value: cst.BaseExpression | None) -> bool:
    """`out = out[0]`: not what `out` holds, but a site on it."""
    return (type(value) is cst.Subscript and type(value.value) is cst.Name and value.value.value == name
            and _index(value) == 0)


def _innermost_function(path) -> cst.FunctionDef | None:
    for node in reversed(path):
        if type(node) is cst.FunctionDef:
            return node
    return None



def _batch_row(updated: cst.Subscript) -> cst.Subscript:
    """`x.output[0][k]` → `x.output[k, :]` (the same rows of the hidden states)."""
    pick = updated.slice[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return updated.with_changes(value=updated.value.value,
                                slice=[pick, cst.SubscriptElement(cst.Slice(lower=None, upper=None))])

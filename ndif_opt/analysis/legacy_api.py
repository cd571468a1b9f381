"""Which nnsight API a script targets, and where it uses the pre-0.5 one.

The detector of pre-0.5 idioms (`.value` on saved values, `nnsight.list()`, `scan=`, code
after invokes that reads them, `output[0]` of a decoder layer...) and the 0.5+ ones, with
the replacement of each idiom that has a mechanical one. The pipeline asks it which API a
version of the tree targets (other passes do not run on pre-0.5 code); the migrate-api
pass applies its replacements. Computed once per facts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, opens_invoke, qualify
from ndif_opt.analysis.invoke_order import early_cross_invoke_reads
from ndif_opt.analysis.keywords import passed_keywords
from ndif_opt.analysis.generation_steps import generation_steps, is_envoy_chain, tracer_steps
from ndif_opt.analysis.layer_outputs import TUPLE, Evidence, layer_output_groups
from ndif_opt.analysis.saved_values import SavedValues
from ndif_opt.analysis.scopes import scope_index
from ndif_opt.analysis.names import collect, collect_all
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.commas import appended
from ndif_opt.syntax.rewrite import keyword_argument, method_call
from ndif_opt.syntax.walk import all_nodes, find_nodes
from ndif_opt.syntax.walk import walk as walk_tree

PRE_05 = "pre-0.5"
MODERN = "0.5+"
UNKNOWN = "unknown"

# `nnsight.<builtin>(...)` of the pre-0.5 API: traced builtins, now plain Python.
NNSIGHT_BUILTINS = frozenset(
    {"list", "dict", "set", "tuple", "int", "float", "bool", "str", "bytes", "complex", "bytearray"}
)
NNSIGHT_RENAMED = {"log": "print"}
# Pre-0.5 helpers with no mechanical 0.5+ equivalent.
NNSIGHT_UNSUPPORTED = frozenset({"cond", "iter", "local", "stop", "trace", "apply_async"})
OLD_KWARGS = frozenset({"scan", "validate"})
# Modules of nnsight < 0.5 that 0.5 removed (the graph-based tracing): importing one is
# pre-0.5 code, and the import itself fails on 0.5+.
REMOVED_MODULES = (
    "nnsight.tracing.graph", "nnsight.tracing.contexts", "nnsight.tracing.hacks", "nnsight.tracing.protocols",
    "nnsight.tracing.protocol", "nnsight.tracing.Graph", "nnsight.tracing.Node", "nnsight.tracing.Proxy",
    "nnsight.tracing.Bridge", "nnsight.tracing.backends", "nnsight.tracing.compiler",
    "nnsight.intervention.graph", "nnsight.intervention.protocols", "nnsight.intervention.contexts",
    "nnsight.contexts", "nnsight.models", "nnsight.envoy", "nnsight.fx", "nnsight.Module",
    "nnsight.alteration", "nnsight.alterations", "nnsight.edit", "nnsight.editing",
)


def removed_module(path: str) -> str | None:
    """The removed pre-0.5 module `path` (a dotted import path) lies in, if any."""
    for module in REMOVED_MODULES:
        if path == module or path.startswith(module + "."):
            return module
    return None


# Methods of pre-0.5 tracers/sessions that 0.5+ replaced by plain Python.
OLD_TRACER_METHODS = frozenset({"cond", "iter", "apply", "log", "exit"})  # apply, log: migrated


@dataclass(frozen=True)
class Legacy:
    """One use of an old idiom.

    ``kind``: value | builtin | import | layer-output | old-kwarg | after-invokes |
    unsupported. ``pre05``: evidence that the script targets the pre-0.5 nnsight API
    (a transformers < 5 idiom such as `output[0]` on a layer is not). ``fix`` builds the
    replacement of ``node`` from its updated form; None when it cannot be migrated.
    """

    kind: str
    node: cst.CSTNode
    what: str
    pre05: bool
    fix: Callable[[cst.CSTNode], cst.CSTNode] | None = None
    reason: str = ""
    move: "Move | None" = None  # statements after invokes, moved out of their trace
    evidence: str = ""  # what decided a layer output's meaning
    at: cst.CSTNode | None = None  # where its finding sits, when not at ``node`` (the node edited)
    added: frozenset[str] = frozenset()  # names the rewrite introduces

    @property
    def place(self) -> cst.CSTNode:
        """The node its finding sits at."""
        return self.at or self.node


@dataclass
class Scan:
    legacy: list[Legacy]
    modern: list[tuple[cst.CSTNode, str]]  # evidence of the 0.5+ API


def scan(facts: Facts) -> Scan:
    """The old and new idioms of a module (computed once per facts)."""
    return facts.once(_scan)


def _scan(facts: Facts) -> Scan:
    return _Scanner(facts).run() if _may_hold_idioms(facts) else Scan([], [])


def _grads_outside_backward(facts: Facts) -> list[cst.Attribute]:
    """`.grad` read in a block that calls `.backward()`, outside a `with ....backward():`."""
    found: list[cst.Attribute] = []
    for block in facts.blocks:
        body = block.node.body
        calls = find_nodes(body, lambda n: type(n) is cst.Call and type(n.func) is cst.Attribute
                           and n.func.attr.value == "backward")
        if not calls:
            continue
        backward = {id(call) for call in calls}
        inside: set[int] = set()
        for with_ in find_nodes(body, lambda n: type(n) is cst.With):
            if any(id(item.item) in backward for item in with_.items):
                inside |= {id(n) for n in all_nodes(with_.body)}
        found += [n for n in find_nodes(body, lambda n: type(n) is cst.Attribute and n.attr.value == "grad")
                  if id(n) not in inside]
    return found


#: How the detect-only run says a script is pre-0.5 (the pipeline then runs the whole file).
PRE_05_MESSAGE = "this script uses the pre-0.5 nnsight API"


def api_generation(facts: Facts) -> str:
    """Which nnsight API a script targets: "pre-0.5", "0.5+" or "unknown".

    "pre-0.5" when it uses an idiom that nnsight 0.5 removed (`.value` on saved values,
    `nnsight.list()`, code after invokes that reads them...), even if it also
    uses new ones: that code would fail on 0.5+ anyway. "0.5+" when it uses an idiom
    that only 0.5+ has (`list().save()`, `nnsight.save`, `tracer.result`, `.skip()`,
    `TransformersModel`). A decoder layer's `output[0]` says nothing about the nnsight
    version (it is a transformers < 5 idiom, valid on nnsight 0.5-0.7).
    """
    found = scan(facts)
    if any(item.pre05 for item in found.legacy):
        return PRE_05
    if found.modern:
        return MODERN
    return UNKNOWN


def unmigratable(legacy: list[Legacy]) -> list[Legacy]:
    """The idioms of a pre-0.5 script that have no safe rewrite: with one of them
    `--migrate` leaves the whole script as it is (a half-migrated script runs on no
    nnsight release). None for a 0.5+ script, whose rewrites are independent."""
    if not any(item.pre05 for item in legacy):
        return []
    return [item for item in legacy if item.fix is None and item.move is None]


def names_left_in_blocks(facts: Facts) -> frozenset[str]:
    """Module-level names a pre-0.5 script's blocks bind without saving them. nnsight < 0.5
    ran a block's Python on the client, so they stayed bound after it (a loop's variable,
    a temporary); nnsight 0.5+ runs the block as code of its own and sends back only
    saved values: after migration the script no longer has them."""
    found: set[str] = set()
    for block in facts.blocks:
        if block.parent is None and block.stmt.function is None:
            found |= set(block.names.binds) - block.saved_names
    return frozenset(found)


def legacy_summary(facts: Facts) -> str:
    """`.value` (3 uses), `nnsight.list()` — the pre-0.5 idioms, by kind, in order of
    first use. No line numbers: in a notebook they would be the joined cells', not the
    user's; the finding itself sits at the first use."""
    counts: dict[str, int] = {}
    for item in scan(facts).legacy:
        if item.pre05:
            label = _LABELS.get(item.kind, item.what)
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(label + (f" ({n} uses)" if n > 1 else "") for label, n in counts.items())


_LABELS = {
    "value": "`.value`",
    "import": "`from nnsight import <builtin>`",
    "old-kwarg": "`scan=`/`validate=`",
    "after-invokes": "code after `tracer.invoke` blocks",
    "removed-module": "an import of a module removed in nnsight 0.5",
    "next": "`model.next()`",
    "generation-length": "`generate()` without `max_new_tokens=`",
}


# ---------------------------------------------------------------------------------------
# Finding the idioms
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class Move:
    trace: Block
    start: int  # index in the trace body of the first statement to move
    wrap: bool  # a lone trace: wrap it and the moved statements in a session


def _nnsight_call(call: cst.Call, facts: Facts) -> str | None:
    """`list` for `nnsight.list(...)` (through any import alias), else None."""
    path = qualify(call.func, facts.imports)
    if path is None or not path.startswith("nnsight.") or path.count(".") != 1:
        return None
    return path.split(".", 1)[1]


def _strip_save(expr: cst.BaseExpression) -> cst.BaseExpression:
    if is_save_call(expr) and isinstance(expr.func, cst.Attribute) and not expr.args:
        return expr.func.value
    return expr


class _Scanner:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.legacy: list[Legacy] = []
        self.modern: list[tuple[cst.CSTNode, str]] = []
        self.block_nodes = {id(b.node) for b in facts.blocks}

    def run(self) -> Scan:
        facts = self.facts
        walk = _Collect(self.block_nodes)
        walk_tree(facts.module, walk)  # the only walk of the tree: everything else reads `walk`
        saved = SavedValues(facts, walk, scope_index(facts).parents,
                            lambda call: _nnsight_call(call, facts) in ("list", "dict"))
        layer_lists, layers = _layer_aliases(walk)
        self._steps()
        visitor = _Visitor(self, walk, saved, layer_lists, layers)
        visitor.run()
        self._invokes()
        self._layer_outputs(walk, layer_lists, layers)
        self._generation_lengths()
        if any(item.pre05 for item in self.legacy):
            # nnsight 0.4 served every invoke's code in the model's order; 0.5+ runs each
            # up to its first module first: no rewrite here, so no migration either
            for read in early_cross_invoke_reads(facts):
                self.legacy.append(Legacy(
                    "unsupported", read.node, f"`{read.name}` read in an invoke before a module", False, None,
                    f"an earlier invoke binds `{read.name}` at a module; nnsight 0.5+ runs this invoke's code up "
                    "to its first module before the model reaches any (NameError): ask for the module's value "
                    f"first (`h = layer.output`, then `h[:, -1] = {read.name}`)"))
            for grad in _grads_outside_backward(facts):
                self.legacy.append(Legacy(
                    "unsupported", grad, f"`{code_of(grad)}`", False, None,
                    "a gradient read outside `with loss.backward():` (nnsight 0.4 hooked it wherever it was "
                    "read); on nnsight 0.5+ read it inside the backward context: `with loss.backward(): "
                    f"g = {code_of(grad)}.save()`"))
        for model in facts.models.values():
            if model.class_path.endswith("TransformersModel"):
                self.modern.append((model.node, "TransformersModel"))
        if len(self.legacy) > 1:  # rare: pre-0.5 code; the common case needs no order
            order = _walk_order(facts.module)
            self.legacy.sort(key=lambda item: order.get(id(item.node), 0))
        return Scan(self.legacy, self.modern)

    def _layer_outputs(self, walk: "_Collect", layer_lists: set[str], layers: set[str]) -> None:
        """`output[0]` of decoder layers, migrated by group where the code shows the old
        tuple was meant (:mod:`ndif_opt.analysis.layer_outputs`); a file written for the
        pre-0.5 API was written for transformers < 5, which decides every group."""
        era = next((item for item in self.legacy if item.pre05), None)
        era_evidence = None if era is None else Evidence(
            TUPLE, f"the script uses the pre-0.5 nnsight API ({_LABELS.get(era.kind, era.what)}), "
                   "so it was written for transformers < 5")
        is_layer = functools.partial(_is_layer, lists=layer_lists, layers=layers)
        for group in layer_output_groups(self.facts, walk.subscripts, is_layer, era_evidence):
            for site in group.sites:
                if group.meaning == TUPLE:
                    self.legacy.append(Legacy("layer-output", site.target, site.what, False, site.fix,
                                              evidence=group.why))
                elif group.meaning is None:
                    self.legacy.append(Legacy("layer-output", site.node, site.what, False, None, group.why))

    def _generation_lengths(self) -> None:
        """A pre-0.5 `model.generate(...)` without `max_new_tokens=` made one new token:
        nnsight < 0.5 passed `max_new_tokens=1` to transformers' `generate` (which takes it
        over `max_length=`); 0.5+ passes nothing, and transformers generates up to the model's
        generation config (20 tokens by default). The migration writes the 1 out."""
        if not any(item.pre05 for item in self.legacy):
            return
        for block in self.facts.blocks:
            if block.method != "generate":
                continue
            passed = passed_keywords(block.call, self.facts)
            given = None if passed is None else passed.keys()
            if given is not None and "max_new_tokens" in given:
                continue
            what = f"`{code_of(block.call.func)}(...)` without `max_new_tokens=`"
            if given is None:
                self.legacy.append(Legacy(
                    "generation-length", block.call, what, False, None,
                    "nnsight < 0.5 generated one new token unless `max_new_tokens=` was given, 0.5+ generates "
                    "up to the model's generation config, and which keywords `**` passes here cannot be told "
                    "before running: write `max_new_tokens=` out"))
                continue
            self.legacy.append(Legacy("generation-length", block.call, what, False, _one_new_token))

    def _steps(self) -> None:
        """`model.next()` in generate blocks → `tracer.iter[...]` (analysis/generation_steps)."""
        self.stepped: set[int] = set()  # the `.next()` calls accounted for here
        for stepping in generation_steps(self.facts):
            for call, reason in stepping.problems:
                self.stepped.add(id(call))
                self.legacy.append(Legacy("unsupported", call, f"`{code_of(call)}`", True, None, reason))
            if stepping.calls:
                self.stepped.update(id(call) for call in stepping.calls)
                what = f"`{code_of(stepping.calls[0])}`" + (
                    f" ({len(stepping.calls)} steps)" if len(stepping.calls) > 1 else "")
                if stepping.named is not None:  # the block gets an `as` name: edited whole
                    node, fix = stepping.block, stepping.rewrite_block
                else:
                    node, fix = stepping.suite, stepping.rewrite
                self.legacy.append(Legacy("next", node, what, True, fix, at=stepping.calls[0],
                                          added=frozenset({stepping.named} - {None})))

    def _invokes(self) -> None:
        for block in self.facts.blocks:
            if block.method not in ("trace", "generate"):
                continue
            tracer = block.tracer_name
            if tracer is None:
                continue
            body = list(block.node.body.body)
            touching = set(self.facts.models) | {tracer} | {m.split(".")[0] for m in self.facts.models}
            invokes = [i for i, stmt in enumerate(body) if _holds_invokes(stmt, tracer, touching)]
            if not invokes:
                continue
            bound: set[str] = set()
            problem = None
            for index, stmt in enumerate(body[: invokes[-1] + 1]):
                if index in invokes:
                    bound |= set(collect(stmt.body).binds)
                elif bound & set(collect(stmt).reads):
                    problem = stmt
            trailing = body[invokes[-1] + 1 :]
            reads = set(collect_all(trailing).reads) if trailing else set()
            if problem is not None:
                self.legacy.append(Legacy(
                    "after-invokes", problem, "code between `tracer.invoke` blocks", True, None,
                    "in nnsight 0.5+ it runs before the invokes and cannot read their values; move it by hand",
                ))
            if not trailing or not (reads & bound):
                continue
            touches = reads & touching
            nested = self.facts.blocks_within
            if touches or any(nested(stmt) for stmt in trailing):
                self.legacy.append(Legacy(
                    "after-invokes", trailing[0], "code after the `tracer.invoke` blocks", True, None,
                    "it uses the model or the tracer; in nnsight 0.5+ it would run before the invokes",
                ))
                continue
            parent = block.parent
            if parent is None:
                wrap = True
            elif parent.method == "session" and block.stmt.suite is parent.node.body:
                wrap = False
            else:
                self.legacy.append(Legacy(
                    "after-invokes", trailing[0], "code after the `tracer.invoke` blocks", True, None,
                    "the trace is nested in a way ndif-opt does not rewrite",
                ))
                continue
            self.legacy.append(Legacy(
                "after-invokes", trailing[0], "code after the `tracer.invoke` blocks", True,
                move=Move(block, invokes[-1] + 1, wrap),
            ))


def _one_new_token(updated: cst.Call) -> cst.Call:
    """`model.generate(...)` with `max_new_tokens=1` written out (nnsight < 0.5's default)."""
    one = keyword_argument("max_new_tokens", cst.Integer("1"))
    return updated.with_changes(args=appended(updated.args, one, updated.whitespace_before_args))


def _holds_invokes(stmt: cst.BaseStatement, tracer: str, touching: set[str]) -> bool:
    """`with tracer.invoke(...)`, or a `for` loop whose body holds only invokes and code
    that reads neither the model nor the tracer (`for head in heads: with
    tracer.invoke(...)`): in every nnsight release each iteration adds an invoke, so the
    loop is one of the invokes, not code after them."""
    if opens_invoke(stmt, tracer):
        return True
    if type(stmt) is not cst.For or stmt.orelse is not None or type(stmt.body) is not cst.IndentedBlock:
        return False
    if touching & set(collect(stmt.iter).reads):
        return False
    held = False
    for inner in stmt.body.body:
        if _holds_invokes(inner, tracer, touching):
            held = True
        elif touching & set(collect_all([inner]).reads):
            return False
    return held


# ---------------------------------------------------------------------------------------
# Whether the scan can find anything: most scripts hold no idiom of either API
# ---------------------------------------------------------------------------------------

# Without a tracer (`as tracer`), which :func:`_may_hold_idioms` asks first, the idioms
# on tracers (`tracer.result`, `tracer.all()`, `tracer.iter[...]`, old tracer methods)
# cannot be there; what remains needs `.value`, `.skip(...)`, `.next()`, `list().save()`,
# `scan=`/`validate=`, a decoder layer's `.output[<int>]`, or an nnsight call or import.
_IDIOM_METHODS = frozenset({"skip", "next"})
_OLD_IMPORTS = NNSIGHT_BUILTINS | NNSIGHT_RENAMED.keys() | {"apply"}
_IDIOM_NNSIGHT_CALLS = NNSIGHT_BUILTINS | NNSIGHT_RENAMED.keys() | NNSIGHT_UNSUPPORTED | {"apply", "save"}


def _may_hold_idioms(facts: Facts) -> bool:
    """False only when the scan would find nothing, old or new: each idiom it looks for
    needs one of the nodes :class:`_IdiomHints` flags, a call that the imports may
    resolve to `nnsight.<name>`, a trace with a tracer (`as tracer`) or a
    `TransformersModel`. The hints of a top-level statement are kept by node: the
    windows of a file share their prelude."""
    if any(b.tracer_name is not None for b in facts.blocks):
        return True
    if any(m.class_path.endswith("TransformersModel") for m in facts.models.values()):
        return True
    heads: set[str] = set()
    outputs = zero_indexes = False  # `out = layer.output` in one place, `out[0]` in another
    for stmt in facts.module.body:
        flagged, call_heads, output, zero_index = _idiom_hints(stmt)
        if flagged:
            return True
        heads |= call_heads
        outputs, zero_indexes = outputs or output, zero_indexes or zero_index
        if outputs and zero_indexes:
            return True
    return any(_may_be_nnsight_call(facts.imports.get(head, head)) for head in heads)


def _may_be_nnsight_call(head_path: str) -> bool:
    """May a call of a dotted name whose first part stands for ``head_path`` be
    `nnsight.<name>(...)` for a name the scan looks at (see :func:`_nnsight_call`)?"""
    if head_path == "nnsight":
        return True
    return head_path.startswith("nnsight.") and head_path[len("nnsight."):] in _IDIOM_NNSIGHT_CALLS


@functools.lru_cache(maxsize=4096)
def _idiom_hints(stmt: cst.BaseStatement) -> tuple[bool, frozenset[str], bool, bool]:
    # a pure function of an immutable node (kept alive while cached)
    hints = _IdiomHints()
    walk_tree(stmt, hints)
    return hints.flagged, frozenset(hints.call_heads), hints.output, hints.zero_index


def _is_new_container(expr: cst.BaseExpression) -> bool:
    """`list()` / `dict()`: saved, 0.5+ evidence (:meth:`_Visitor.visit_Call`)."""
    return type(expr) is cst.Call and not expr.args and dotted_name(expr.func) in ("list", "dict")


class _IdiomHints(cst.CSTVisitor):
    """Flags the nodes without which no idiom can be found (each is a necessary part of
    one in :class:`_Visitor`), and collects the first names of the dotted names called."""

    def __init__(self) -> None:
        self.flagged = False
        self.call_heads: set[str] = set()
        self.output = False  # an `.output` (a layer's may reach a `[0]` through names)
        self.zero_index = False  # an `x[0]`

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "value":
            self.flagged = True
        elif node.attr.value == "output":
            self.output = True

    def visit_Import(self, node: cst.Import) -> None:
        if any(removed_module(dotted_name(alias.name) or "") for alias in node.names):
            self.flagged = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in _IDIOM_METHODS or (method == "save" and _is_new_container(func.value)):
                self.flagged = True
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in OLD_KWARGS:
                self.flagged = True
        name = dotted_name(func)
        if name is not None:
            self.call_heads.add(name.partition(".")[0])

    def visit_Subscript(self, node: cst.Subscript) -> None:
        base = node.value
        index = _index_value(node)
        if type(base) is cst.Attribute and base.attr.value == "output" and index is not None:
            self.flagged = True
        elif index == 0:
            self.zero_index = True

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        # `from nnsight import list`, `from nnsight.tracing.graph import Proxy` (the
        # conditions of _Visitor.visit_ImportFrom)
        if node.relative or node.module is None:
            return
        if removed_module(dotted_name(node.module) or ""):
            self.flagged = True
        if isinstance(node.names, cst.ImportStar):
            return
        if dotted_name(node.module) == "nnsight" and any(
            isinstance(a.name, cst.Name) and a.name.value in _OLD_IMPORTS for a in node.names
        ):
            self.flagged = True


class _Collect(cst.CSTVisitor):
    """One walk of the tree gathering what the scan looks at, in source order."""

    def __init__(self, block_nodes: set[int]) -> None:
        self.block_nodes = block_nodes
        self.assigns: list[cst.Assign] = []
        self.calls: list[cst.Call] = []
        self.loops: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []  # (target, iterable)
        self.for_loops: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []  # of `for` statements only
        self.functions: list[cst.FunctionDef] = []
        self.attributes: list[cst.Attribute] = []  # `.value` / `.result`
        self.subscripts: list[cst.Subscript] = []
        self.imports: list[cst.ImportFrom | cst.Import] = []
        self.targets: set[int] = set()  # nodes assigned to
        self.outside: set[str] = set()  # names used outside nnsight blocks
        self.guarded: set[int] = set()  # `.value` read only where `hasattr(x, "value")` holds
        self._depth = 0

    def visit_If(self, node: cst.If) -> None:
        self._guard(node.test, node.body)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._guard(node.test, node.body)

    def _guard(self, test: cst.BaseExpression, body: cst.CSTNode) -> None:
        """`x.value if hasattr(x, "value") else x` works on every nnsight: not pre-0.5."""
        if not (isinstance(test, cst.Call) and dotted_name(test.func) == "hasattr" and len(test.args) == 2):
            return
        attr = test.args[1].value
        if not (isinstance(attr, cst.SimpleString) and attr.evaluated_value == "value"):
            return
        base = code_of(test.args[0].value)
        for node in find_nodes(body, lambda n: isinstance(n, cst.Attribute) and n.attr.value == "value"):
            if code_of(node.value) == base:
                self.guarded.add(id(node))

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assigns.append(node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.targets.add(id(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.targets.add(id(node.target))

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_For(self, node: cst.For) -> None:
        self.loops.append((node.target, node.iter))
        self.for_loops.append((node.target, node.iter))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.loops.append((node.target, node.iter))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ("value", "result"):
            self.attributes.append(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.subscripts.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.append(node)

    def visit_With(self, node: cst.With) -> None:
        if id(node) in self.block_nodes:
            self._depth += 1

    def leave_With(self, original_node: cst.With) -> None:
        if id(original_node) in self.block_nodes:
            self._depth -= 1

    def visit_Name(self, node: cst.Name) -> None:
        if not self._depth:
            self.outside.add(node.value)


def _walk_order(module: cst.Module) -> dict[int, int]:
    """id(node) -> its position in a walk of the tree."""
    order = _Order()
    walk_tree(module, order)
    return order.positions


class _Order(cst.CSTVisitor):
    """Numbers the nodes in the order a walk meets them (a class made per call would
    leave a reference cycle per call for the garbage collector)."""

    def __init__(self) -> None:
        self.positions: dict[int, int] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.positions[id(node)] = len(self.positions)
        return True


def _layer_aliases(walk: "_Collect") -> tuple[set[str], set[str]]:
    """Names bound to a list of decoder layers (`layers = model.model.layers`) and to a
    decoder layer (`for layer in model.transformer.h`, `block = layers[3]`)."""
    lists: set[str] = set()
    layers: set[str] = set()

    def assigns() -> None:
        for node in walk.assigns:
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
                continue
            name = node.targets[0].target.value
            if _is_layer_list(node.value, lists):
                lists.add(name)
            elif _is_layer(node.value, lists, layers):
                layers.add(name)

    assigns()
    for target, iterable in walk.loops:
        if isinstance(iterable, cst.Call) and dotted_name(iterable.func) == "enumerate" and iterable.args:
            if isinstance(target, cst.Tuple) and len(target.elements) == 2:
                inner = target.elements[1].value
                if isinstance(inner, cst.Name) and _is_layer_list(iterable.args[0].value, lists):
                    layers.add(inner.value)
        elif isinstance(target, cst.Name) and _is_layer_list(iterable, lists):
            layers.add(target.value)
    assigns()  # `block = layer` after a loop over the layers
    return lists, layers


def _is_layer_list(expr, lists: set[str]) -> bool:
    if isinstance(expr, cst.Attribute):
        return expr.attr.value in LAYER_LISTS
    if isinstance(expr, cst.Name):
        return expr.value in lists
    if isinstance(expr, cst.Subscript):  # a slice of the layers
        return (
            len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Slice)
            and _is_layer_list(expr.value, lists)
        )
    return False


def _is_layer(expr, lists: set[str], layers: set[str]) -> bool:
    """`layers[3]`, `model.transformer.h[i]`, `layer` of `for layer in model.model.layers`."""
    if isinstance(expr, cst.Name):
        return expr.value in layers
    if isinstance(expr, cst.Subscript):
        return (
            len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Index)
            and _is_layer_list(expr.value, lists)
        )
    return False


def _index_value(node: cst.Subscript) -> int | None:
    """The integer of `x[<int>]` (also negative), else None."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    sign = 1
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        sign, value = -1, value.expression
    if isinstance(value, cst.Integer):
        return sign * int(value.value, 0)
    return None


class _Visitor:
    """The idioms, found in what the walk gathered."""

    def __init__(self, scanner: _Scanner, walk: _Collect, saved: SavedValues, layer_lists, layers) -> None:
        self.s = scanner
        self.facts = scanner.facts
        self.walk = walk
        self.saved = saved
        self.outside = walk.outside
        self.layer_lists = layer_lists
        self.layers = layers
        self.targets = walk.targets  # nodes being assigned to (not reads)
        self.saved_calls: set[int] = set()  # nnsight.list() calls already followed by .save()
        for node in walk.calls:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "save" and not node.args:
                if isinstance(func.value, cst.Call):
                    self.saved_calls.add(id(func.value))

    def run(self) -> None:
        for node in self.walk.attributes:
            self.visit_Attribute(node)
        for node in self.walk.calls:
            self.visit_Call(node)
        for node in self.walk.subscripts:
            self.visit_Subscript(node)
        for node in self.walk.imports:
            self.visit_ImportFrom(node)

    def add(self, *args, **kwargs) -> None:
        self.s.legacy.append(Legacy(*args, **kwargs))

    def _removed_import(self, node: cst.ImportFrom | cst.Import) -> bool:
        if isinstance(node, cst.Import):
            paths = [dotted_name(alias.name) or "" for alias in node.names]
        elif node.relative or node.module is None:
            return False
        else:
            paths = [dotted_name(node.module) or ""]
        removed = next((m for m in map(removed_module, paths) if m), None)
        if removed is None:
            return False
        self.add("removed-module", node, f"`{code_of(node)}`", True, None,
                 f"`{removed}` is gone in nnsight 0.5+ (its graph-based tracing was replaced); "
                 "rewrite what uses it by hand")
        return True

    # --- `.value` ---------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "result" and dotted_name(node.value) in self._tracer_names():
            self.s.modern.append((node, "`tracer.result`"))
        if node.attr.value != "value" or id(node) in self.targets or id(node) in self.walk.guarded:
            return
        env = self.saved.at(node)
        depths = self.saved.depth(node.value, env)
        if type(node.value) is cst.Name and depths != {0} and node.value.value not in env:
            depths = self.saved.depth_where_read(node.value)  # the binding this read sees, if one
        if depths == {0}:
            self.add("value", node, f"`{code_of(node)}`", True, lambda updated: updated.value)
        elif 0 in depths:
            self.add("value", node, f"`{code_of(node)}`", True, None,
                     f"`{code_of(node.value)}` is also bound to values that are not saved")

    # --- calls: nnsight.list(), .save(), removed helpers, scan=/validate= ---------------
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "save" and not node.args:
            inner = func.value
            if isinstance(inner, cst.Call):
                name = dotted_name(inner.func)
                if name in ("list", "dict") and not inner.args:
                    self.s.modern.append((node, f"`{name}().save()`"))
        name = _nnsight_call(node, self.facts)
        if name == "save":
            self.s.modern.append((node, "`nnsight.save()`"))
        elif name in NNSIGHT_BUILTINS:
            self._builtin(node, name)
        elif name == "apply":
            self._apply(node)
        elif name in NNSIGHT_RENAMED:
            new = NNSIGHT_RENAMED[name]
            self.add("builtin", node, f"`nnsight.{name}()`", True,
                     lambda updated, new=new: updated.with_changes(func=cst.Name(new)))
        elif name in NNSIGHT_UNSUPPORTED:
            self.add("unsupported", node, f"`nnsight.{name}()`", True, None,
                     f"`nnsight.{name}` has no direct nnsight 0.5+ equivalent; rewrite it by hand "
                     "(plain `if`/`for` work inside traces)")
        if isinstance(func, cst.Attribute):
            self._method(node, func)
        self._old_kwargs(node)

    def _builtin(self, node: cst.Call, name: str) -> None:
        needs_save = False
        if name in ("list", "dict") and id(node) not in self.saved_calls:
            needs_save = self._container_read_after(node)

        def fix(updated: cst.Call, name=name, needs_save=needs_save) -> cst.BaseExpression:
            call = updated.with_changes(func=cst.Name(name))
            if needs_save:
                return method_call(call, "save")
            return call

        self.add("builtin", node, f"`nnsight.{name}()`", True, fix)

    def _container_read_after(self, node: cst.Call) -> bool:
        for name, bindings in self.facts.bindings.items():
            if any(value is node for _, value in bindings):
                return name in self.outside
        return False

    def _apply(self, node: cst.Call, what: str = "`nnsight.apply()`") -> None:
        if not node.args or node.args[0].keyword is not None or node.args[0].star:
            self.add("unsupported", node, what, True, None, "unusual arguments")
            return

        def fix(updated: cst.Call) -> cst.BaseExpression:
            rest = list(updated.args[1:])
            if rest:
                rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return cst.Call(func=updated.args[0].value, args=rest)

        self.add("builtin", node, what, True, fix)

    def _method(self, node: cst.Call, func: cst.Attribute) -> None:
        attr = func.attr.value
        receiver = dotted_name(func.value)
        if attr == "skip" and node.args:
            self.s.modern.append((node, "`.skip()`"))
        if attr == "all" and receiver in self._tracer_names():
            self.s.modern.append((node, "`tracer.all()`"))
        if attr == "next" and not node.args and is_envoy_chain(func.value) and id(node) not in self.s.stepped:
            self.add("unsupported", node, f"`{code_of(node)}`", True, None,
                     "`.next()` of the pre-0.5 generation API is gone; ndif-opt rewrites it only in the body of "
                     "a `model.generate(...)` block or of one of its invokes; step through generation with "
                     "`for step in tracer.iter[...]:` by hand")
        tracers = self._tracer_names()
        if receiver in tracers and attr == "apply":
            self._apply(node, f"`{receiver}.apply()`")
        elif receiver in tracers and attr == "log":
            self.add("builtin", node, f"`{receiver}.log()`", True,
                     lambda updated: updated.with_changes(func=cst.Name("print")))
        elif receiver in tracers and attr in OLD_TRACER_METHODS:
            self.add("unsupported", node, f"`{receiver}.{attr}()`", True, None,
                     f"`.{attr}()` of a pre-0.5 tracer or session; use plain Python (`if`, `for`, `print`) "
                     "inside the block")

    def _tracer_names(self) -> set[str]:
        names = getattr(self, "_tracers", None)
        if names is None:
            names = {b.tracer_name for b in self.facts.blocks if b.tracer_name}
            self._tracers = names
        return names

    def _old_kwargs(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("trace", "invoke", "generate", "session"):
            return
        old = [a for a in node.args if a.keyword is not None and a.keyword.value in OLD_KWARGS]
        if not old:
            return
        names = ", ".join(f"`{a.keyword.value}=`" for a in old)

        def fix(updated: cst.Call) -> cst.Call:
            args = [a for a in updated.args if not (a.keyword is not None and a.keyword.value in OLD_KWARGS)]
            if args:  # the new last argument ends as the old last one did (trailing comma or not)
                args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
            return updated.with_changes(args=args)

        # nnsight 0.8 hands a trace's (and its invokes') to the model's forward, which ignores
        # them: there they are no evidence of the pre-0.5 API, but a migration drops them; a
        # session takes none, and transformers' generate raises on them
        method = func.attr.value
        taken = method == "trace" or (method == "invoke" and self._invoked_in("trace", func.value))
        self.add("old-kwarg", node, f"{names} of `.{method}()`", not taken, fix)

    def _invoked_in(self, method: str, tracer: cst.BaseExpression) -> bool:
        """Is ``tracer`` (of `tracer.invoke(...)`) the tracer of ``method`` blocks only?"""
        if type(tracer) is not cst.Name:
            return False
        methods = {block.method for block in self.facts.blocks if block.tracer_name == tracer.value}
        return methods == {method}

    # --- tracer.result, tracer.iter: 0.5+ evidence ---------------------------------------
    def visit_Subscript(self, node: cst.Subscript) -> None:
        base = node.value
        if tracer_steps(node, self._tracer_names()) is not None:
            self.s.modern.append((node, "`tracer.iter[...]`"))
        if not (isinstance(base, cst.Attribute) and base.attr.value == "output"):
            return
        if not _is_layer(base.value, self.layer_lists, self.layers):
            return
        index = _index_value(node)  # `[0]`: read by Scanner._layer_outputs
        layer = code_of(base)
        if index is not None and index != 0:
            self.add("layer-output", node, f"`{layer}[{index}]`", False, None,
                     "with transformers >= 5 a decoder layer returns only its hidden states (a tensor); "
                     "take attention weights or caches from the attention module instead")

    # --- `from nnsight import list`, `from nnsight.tracing.graph import Proxy` -------------
    def visit_ImportFrom(self, node: cst.ImportFrom | cst.Import) -> None:
        if self._removed_import(node):
            return
        if isinstance(node, cst.Import):
            return
        if node.relative or node.module is None or dotted_name(node.module) != "nnsight":
            return
        if isinstance(node.names, cst.ImportStar):
            return
        old = [a for a in node.names if isinstance(a.name, cst.Name) and a.name.value in _OLD_IMPORTS]
        if not old:
            return
        if len(old) == len(node.names):
            self.add("import", node, f"`{code_of(node)}`", True, None,
                     "the import would be empty; remove it by hand")
            return
        names = ", ".join(f"`{a.name.value}`" for a in old)

        def fix(updated: cst.ImportFrom) -> cst.ImportFrom:
            keep = [a for a in updated.names
                    if not (isinstance(a.name, cst.Name) and a.name.value in {o.name.value for o in old})]
            keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(names=keep)

        self.add("import", node, names, True, fix)



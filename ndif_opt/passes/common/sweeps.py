"""Sweeps: loops of traces over layers, positions or inputs, as trace-fusion, invoke-batching
and skip-insertion see them — the loop, what its traces read and write of the model, and why
their traces could not become one trace or one batch; with the node index the three passes
ask their questions of, and the helpers they build new code with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis import names
from ndif_opt.analysis.facts import Block, Facts, StmtInfo
from ndif_opt.analysis.names import (
    NameUse,
    collect,
    collect_all,
    definite_binds,
    depended_on,
    reads_before_binding,
    target_names,
)
from ndif_opt.analysis.regions import constant_item, int_value, trip_count
from ndif_opt.analysis.remote_functions import runs_in_session_of
from ndif_opt.cost_model import explain
from ndif_opt.passes.base import Context
from ndif_opt.syntax.expressions import root_name
from ndif_opt.syntax.positions import code_and_positions, code_of
from ndif_opt.syntax.walk import walk_content
from ndif_opt.types import Count, Number
from ndif_opt.wording import claim_text, count_text, counted, counted_with_loops, symbols

# ---------------------------------------------------------------------------------------
# One walk per statement and version of the tree
# ---------------------------------------------------------------------------------------
# The three sweep passes ask many questions about the same few statements (a loop body,
# its trace's body), and a libcst walk is slow. So each statement is walked at most twice:
# by `collect` for its names and by `_Indexer` for the nodes the questions look at, both
# cached by node (so shared by the versions of the tree that keep the statement). The
# answers that depend on the whole version are `Facts.once` of a sweep (one per loop and
# version: find_sweeps) or of a node.


@dataclass
class NodeIndex:
    """What one walk of a node finds, in the order a libcst visitor meets it."""

    nodes: list[cst.CSTNode]  # calls, attributes, assignments, names (not an `.attr`)
    jump: str  # the first `break`/`continue` outside a nested loop or function, or ""
    spans: dict[int, tuple[int, int]]  # id(an assigned value) -> its slice of `nodes`


INDEXED = frozenset(
    {cst.Call, cst.Attribute, cst.Name, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.AssignTarget}
)
# A `break`/`continue` inside these is not the enclosing loop's business.
OWN_JUMPS = frozenset({cst.For, cst.While, cst.FunctionDef})


class _Indexer(cst.CSTVisitor):
    def __init__(self) -> None:
        self.index = NodeIndex([], "", {})
        self.attr_names: set[int] = set()  # `.attr` names are not names in the code
        self.values: set[int] = set()  # assigned values, whose span is wanted
        self.starts: dict[int, int] = {}
        self.nesting = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        nodes = self.index.nodes
        if id(node) in self.values:
            self.starts[id(node)] = len(nodes)
        if kind in INDEXED:
            if kind is cst.Attribute:
                self.attr_names.add(id(node.attr))
            elif kind is cst.Assign or kind is cst.NamedExpr:
                self.values.add(id(node.value))
            elif kind is cst.AnnAssign and node.value is not None:
                self.values.add(id(node.value))
            if kind is not cst.Name or id(node) not in self.attr_names:
                nodes.append(node)
        elif kind in OWN_JUMPS:
            self.nesting += 1
        elif (kind is cst.Break or kind is cst.Continue) and not self.nesting and not self.index.jump:
            self.index.jump = "break" if kind is cst.Break else "continue"
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in OWN_JUMPS:
            self.nesting -= 1
        start = self.starts.pop(id(original_node), None)
        if start is not None:
            self.index.spans[id(original_node)] = (start, len(self.index.nodes))


@functools.lru_cache(maxsize=4096)
def index_of(node: cst.CSTNode) -> NodeIndex:
    """What a walk of ``node`` finds; not to be changed (it is shared). A pure function of
    an immutable node (kept alive while cached, so the ids in ``spans`` stay its nodes'):
    shared by the versions of the tree and by the passes."""
    indexer = _Indexer()
    walk_content(node, indexer)  # its hooks do nothing at layout
    return indexer.index


def calls_in(nodes) -> list[cst.Call]:
    """Every call in ``nodes``, in order."""
    return [n for node in nodes for n in index_of(node).nodes if isinstance(n, cst.Call)]


# ---------------------------------------------------------------------------------------
# Shared analysis of "sweeps" (also used by invoke-batching and skip-insertion)
# ---------------------------------------------------------------------------------------

MODULE_VALUES = frozenset({"output", "input", "inputs"})
# Modules that run after every decoder layer (and the model's own output).
AFTER_LAYERS = frozenset(
    {"lm_head", "ln_f", "norm", "final_layernorm", "final_layer_norm", "embed_out", "unembed"}
)
# Keyword arguments of a trace that do not change what the forward pass computes.
HARMLESS_TRACE_KWARGS = frozenset({"scan", "validate"})
# Keyword arguments of `.generate()` that one generate of a batch may take for all its
# invokes (when they do not change with the loop).
GENERATION_KWARGS = frozenset({"max_new_tokens", "min_new_tokens", "do_sample", "pad_token_id", "eos_token_id"})


@dataclass(eq=False)
class Sweep:
    """A ``for`` loop inside a session (or in a function every call of which is in one,
    ``runs_in_session_of``) whose body runs exactly one trace of the model (one
    per loop and version of the tree: its facts are ``Facts.once`` of it, by identity)."""

    loop: cst.For
    info: StmtInfo  # where the loop sits
    block: Block  # the trace (or generate) in the loop body
    position: int  # the trace's index in the loop body
    targets: frozenset[str]  # names bound by the loop header
    bound: frozenset[str] = frozenset()  # names bound anywhere in the body, and the targets
    # the target that takes the items of a sequence, and the sequence (walked_sequence)
    walked: tuple[str, cst.BaseExpression] | None = None
    # the trace's `remote=` is `False` wherever it runs (it runs in a session): no more
    # than a trace written in the session without one
    flag_off: bool = False

    @property
    def trace_arguments(self) -> list[cst.Arg]:
        """The trace call's arguments, without a `remote=` that is `False` wherever it runs."""
        flag = self.block.remote.expr if self.flag_off else None
        return [arg for arg in self.block.call.args if flag is None or arg.value is not flag]

    @property
    def pre(self) -> list[cst.BaseStatement]:
        return list(self.loop.body.body[: self.position])

    @property
    def post(self) -> list[cst.BaseStatement]:
        return list(self.loop.body.body[self.position + 1 :])

    @property
    def inner(self) -> list[cst.BaseStatement]:
        return list(self.block.node.body.body)

    @property
    def moved(self) -> list[cst.BaseStatement]:
        """The statements of one iteration, in order, without the trace's header."""
        return self.pre + self.inner + self.post

    @property
    def model(self) -> str:
        return self.block.model

    def trips(self, facts: Facts) -> int | None:
        return trip_count(self.loop, facts)


def moved_names(sweep: Sweep, facts: Facts) -> NameUse:
    """``collect_all(sweep.moved)``, once per version of the tree (do not change it)."""
    return facts.once(_moved_names, sweep)


def _moved_names(facts: Facts, sweep: Sweep) -> NameUse:
    return collect_all(sweep.moved)


def find_sweeps(facts: Facts) -> list[Sweep]:
    """The sweeps of this version of the tree (the three sweep passes share them)."""
    return list(facts.once(_all_sweeps))


def _all_sweeps(facts: Facts) -> tuple[Sweep, ...]:
    return tuple(_find_sweeps(facts))


def _find_sweeps(facts: Facts) -> list[Sweep]:
    found = []
    for block in facts.blocks:
        parent = block.parent
        in_helper = parent is None and runs_in_session_of(block, facts)  # (its `remote=` is `False`)
        if not in_helper and (parent is None or parent.method != "session" or parent.model != block.model):
            continue
        if block.method not in ("trace", "generate") or not block.stmt.ancestors:
            continue
        loop = block.stmt.ancestors[-1]
        if not isinstance(loop, cst.For) or block.stmt.suite is not loop.body:
            continue
        if len(facts.blocks_within(loop)) != 1:
            continue
        targets = frozenset(target_names(loop.target))
        walked = walked_sequence(loop, facts)
        index = block.stmt.index
        others = loop.body.body[:index] + loop.body.body[index + 1 :]
        # the names the body binds: the trace's own statements are walked once, as the
        # statements of `moved`, not again as part of the trace
        bound = (
            set(collect_all(others).binds)
            | set(collect_all(block.node.items).binds)
            | set(collect_all(block.node.body.body).binds)
        )
        found.append(
            Sweep(loop, facts.stmt(loop), block, index, targets, frozenset(bound) | targets, walked, in_helper)
        )
    return found


def walked_sequence(loop: cst.For, facts: Facts) -> tuple[str, cst.BaseExpression] | None:
    """The loop variable that takes the items of a sequence, and that sequence: `x` and
    `SEQ` of `for x in SEQ`, and of `for i, x in enumerate(SEQ)` (`i` only counts them);
    None for any other header (`for a, b in zip(xs, ys)`)."""
    target, iterable = loop.target, loop.iter
    if type(target) is cst.Name:
        return target.value, iterable
    if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != 2:
        return None
    counter, item = (element.value for element in target.elements)
    if type(counter) is not cst.Name or type(item) is not cst.Name or counter.value == item.value:
        return None
    if type(iterable) is not cst.Call or type(iterable.func) is not cst.Name or iterable.func.value != "enumerate":
        return None
    args = iterable.args
    if not 1 <= len(args) <= 2 or any(a.star for a in args) or args[0].keyword is not None:
        return None
    if len(args) == 2 and args[1].keyword is not None and args[1].keyword.value != "start":
        return None
    if "enumerate" in collect(facts.module).binds:
        return None  # the script's own `enumerate`, not the builtin
    return item.value, args[0].value


def structure_problem(sweep: Sweep, facts: Facts) -> str:
    """Why the loop's shape forbids moving its iterations around ("" when it does not)."""
    return facts.once(_structure_problem, sweep)


def _structure_problem(facts: Facts, sweep: Sweep) -> str:
    loop = sweep.loop
    if loop.orelse is not None:
        return "the loop has an `else:` clause"
    if loop.asynchronous is not None:
        return "the loop is asynchronous"
    # the trace is no loop: its body's jumps are those of its statements
    jump = next((j for j in (index_of(s).jump for s in sweep.moved) if j), "")
    if jump:
        return f"the loop body uses `{jump}`"
    control = moved_names(sweep, facts).control
    if control:
        return f"the loop body uses `{control[0][0]}`"
    return _trace_shape_problem(sweep)


def _trace_shape_problem(sweep: Sweep) -> str:
    """Why the loop's trace, whatever the loop's jumps, cannot be moved around ("" when it can)."""
    arguments = sweep.trace_arguments
    if not any(a.keyword is None and not a.star for a in arguments):
        return "the trace has no input of its own (it already uses invokes)"
    allowed = HARMLESS_TRACE_KWARGS | (GENERATION_KWARGS if sweep.block.method == "generate" else frozenset())
    for arg in arguments:
        if arg.star:
            return "the trace takes `*args`/`**kwargs`"
        if arg.keyword is not None and arg.keyword.value not in allowed:
            return f"the trace takes `{arg.keyword.value}=`, which applies to the whole forward pass"
    tracer = sweep.block.tracer_name
    if tracer is not None and tracer in collect_all(sweep.inner).reads:
        return f"the trace body uses its tracer `{tracer}`"
    for node in calls_in(sweep.inner):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("invoke", "stop", "next", "all", "iter"):
            return f"the trace body calls `.{node.func.attr.value}()`"
    return ""


def input_dependence(sweep: Sweep, facts: Facts) -> str:
    """How the trace's input changes between iterations ("" when it cannot)."""
    return facts.once(_input_dependence, sweep)


def _input_dependence(facts: Facts, sweep: Sweep) -> str:
    args = [a.value for a in sweep.block.call.args]
    # trace-fusion and skip-insertion evaluate the input once, before the loop
    conflict = moved_ahead(args, sweep.moved, varying=sweep.targets, facts=facts)
    if conflict is not None:
        if conflict.how == "changed":
            return f"the loop changes `{conflict.name}`, which the trace's input reads"
        return f"the trace's input depends on `{conflict.name}`, which changes every iteration"
    for arg in args:
        for call in calls_in([arg]):
            name = code_of(call.func)
            if name not in ("str", "len", "int", "list", "tuple"):
                return f"the trace's input calls `{name}` in every iteration"
    return ""


@dataclass(frozen=True)
class Conflict:
    """A def-use edge that moving code ahead of the rest of a loop body would break."""

    name: str
    # "bound": read ahead, bound by the rest (or a loop variable ahead of the loop);
    # "changed": read ahead, changed in place by the rest; "changes": changed in place
    # ahead, read by the rest
    how: str


def moved_ahead(ahead, behind, *, varying=frozenset(), facts: Facts | None = None) -> Conflict | None:
    """The one def-use test of the sweep passes' moves. ``ahead`` (statements of a loop
    body, then expressions: a trace's arguments after the statements computing them) is
    to run, for every iteration, before ``behind`` (the rest of the body) has run for the
    earlier ones: before the loop (trace-fusion, skip-insertion: the input is evaluated
    once), or in the loop ahead of the invokes, whose bodies run after the whole loop
    (invoke-batching). Order within ``ahead`` is kept. So what ``ahead`` reads before
    binding it must be neither bound nor changed in place by ``behind`` nor among
    ``varying`` (the loop variables, when ``ahead`` leaves the loop), and what it
    changes in place, but for the names it binds itself, ``behind`` must not read. With
    ``facts``, the script's functions either side calls read and change what they do
    where they are called (`prompt = make_prompt(q)` reading `state`, which the rest of
    the body changes); a model, which only interventions change, is not such a name."""
    reads = reads_before_binding(ahead)
    rest = collect_all(behind)
    rest_reads, rest_changes = set(rest.reads), set(rest.mutates)
    if facts is not None:
        reads = {**{n: None for part in ahead for n in facts.read_by_calls(part) if not facts.is_model_like(n)},
                 **reads}
        for part in behind:
            rest_reads |= facts.read_by_calls(part)
            rest_changes |= {n for n in facts.changed_by_calls(part) if not facts.is_model_like(n)}
    for name in reads:
        if name in varying or name in rest.binds:
            return Conflict(name, "bound")
        if name in rest_changes:
            return Conflict(name, "changed")
    statements = [part for part in ahead if isinstance(part, cst.BaseStatement)]
    own = set().union(*(definite_binds(s) for s in statements)) if statements else set()
    for stmt in statements:
        changed = set(collect(stmt).mutates)
        if facts is not None:
            changed |= {n for n in facts.changed_by_calls(stmt) if not facts.is_model_like(n)}
        for name in changed:
            if name not in own and (name in rest_reads or name in rest_changes):
                return Conflict(name, "changes")
    return None


def input_statements(sweep: Sweep) -> list[int]:
    """The positions in ``sweep.pre`` of the statements the trace's arguments depend on
    (:func:`ndif_opt.analysis.names.depended_on`): they must run before the input is
    evaluated, wherever the trace goes."""
    args = [a.value for a in sweep.block.call.args]
    return depended_on(sweep.pre, collect_all(args).reads)


@dataclass(frozen=True)
class Access:
    """A module value read or written in a trace: `<envoy>.output` / `.input`."""

    node: cst.Attribute
    kind: str  # output | input | inputs
    envoy: cst.BaseExpression
    layers: str | None  # `model.transformer.h` when the envoy is `<layers>[index]...`
    index: cst.BaseExpression | None
    sub: tuple[str, ...]  # attributes after the index (`mlp`, `c_fc`)
    write: bool

    @property
    def code(self) -> str:
        return code_of(self.node)

    @property
    def envoy_code(self) -> str:
        return code_of(self.envoy)

    @property
    def after_layers(self) -> bool:
        """The model's own output, or a module that runs after every decoder layer."""
        if self.layers is not None:
            return False
        if isinstance(self.envoy, cst.Name):
            return True  # `model.output`
        return isinstance(self.envoy, cst.Attribute) and self.envoy.attr.value in AFTER_LAYERS

    def indexed_by(self, name: str) -> bool:
        return isinstance(self.index, cst.Name) and self.index.value == name


@dataclass
class Accesses:
    found: list[Access] = field(default_factory=list)
    unknown: list[cst.Attribute] = field(default_factory=list)  # `.output` of non-model values
    skips: list[cst.Call] = field(default_factory=list)
    model_writes: list[cst.CSTNode] = field(default_factory=list)  # weights, attributes

    def unknown_reason(self, model: str) -> str:
        """Why the first `.output`/`.input` of a value not known to be a module blocks a
        rewrite (it may well be one — a loop variable over `model.layers` is — but which
        module, and so in what order the model reaches it, is not known before running)."""
        read = self.unknown[0]
        return (f"it reads `{code_of(read)}`, and which module of `{model}` `{code_of(read.value)}` is "
                "cannot be told before running")


def module_accesses(nodes, facts: Facts) -> Accesses:
    """Every `.output`/`.input` of a module, `.skip()` and write to the model in ``nodes``."""
    result = Accesses()
    for node in nodes:
        part = facts.once(_module_accesses, node)
        result.found += part.found
        result.unknown += part.unknown
        result.skips += part.skips
        result.model_writes += part.model_writes
    return result


def model_envoy(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> cst.BaseExpression | None:
    """``expr`` (the part before `.output`/`.input`) as a path from the model, or None when
    it is not known to be a module of one: as it is when its root is the model or an alias
    of a module of it (`model.transformer.h[l]`, `layers[l]` after `layers =
    model.transformer.h`), else with a constant in its place (`regions.constant_item`):
    `layers[l]` after `layers = CONFIG["layers"]` and `CONFIG = {"layers":
    model.transformer.h}` is `model.transformer.h[l]`, `SITES["late"]` the module that
    item holds. The indices are kept as written."""
    if depth > 8:
        return None
    root = root_name(expr)
    if root is not None and facts.is_model_like(root):
        return expr
    kind = type(expr)
    if kind is cst.Name or kind is cst.Subscript:
        item = constant_item(expr, facts)
        if item is not None and item is not expr:
            found = model_envoy(item, facts, depth + 1)
            if found is not None:
                return found
    if kind is cst.Subscript or kind is cst.Attribute:
        base = model_envoy(expr.value, facts, depth + 1)
        if base is not None:
            return expr.with_changes(value=base)
    return None


def _module_accesses(facts: Facts, node: cst.CSTNode) -> Accesses:
    result = Accesses()
    found = index_of(node).nodes
    written: set[int] = set()
    for assignment in found:
        if type(assignment) is cst.Assign:
            targets = [t.target for t in assignment.targets]
        elif type(assignment) is cst.AugAssign or type(assignment) is cst.AnnAssign:
            targets = [assignment.target]
        else:
            continue
        for target in targets:
            expr, writes_value = target, False
            while isinstance(expr, (cst.Subscript, cst.Attribute)):
                if type(expr) is cst.Attribute and expr.attr.value in MODULE_VALUES:
                    written.add(id(expr))
                    writes_value = True
                expr = expr.value
            root = root_name(target)
            if not writes_value and root is not None and facts.is_model_like(root) and target is not expr:
                result.model_writes.append(target)
    for n in found:
        if type(n) is cst.Attribute and n.attr.value in MODULE_VALUES:
            envoy = model_envoy(n.value, facts)
            if envoy is None:
                result.unknown.append(n)
                continue
            layers, index, sub = _split_envoy(envoy)
            result.found.append(Access(n, n.attr.value, envoy, layers, index, sub, id(n) in written))
        elif type(n) is cst.Call:
            func = n.func
            if type(func) is cst.Attribute and func.attr.value == "skip":
                root = root_name(func.value)
                if root is not None and facts.is_model_like(root):
                    result.skips.append(n)
    return result


def _split_envoy(expr: cst.BaseExpression):
    sub: list[str] = []
    while type(expr) is cst.Attribute:
        sub.append(expr.attr.value)
        expr = expr.value
    if (
        type(expr) is cst.Subscript
        and len(expr.slice) == 1
        and isinstance(expr.slice[0].slice, cst.Index)
    ):
        return code_of(expr.value), expr.slice[0].slice.value, tuple(reversed(sub))
    return None, None, tuple(reversed(sub))


def derived_names(nodes, accesses: Accesses) -> set[str]:
    """Names bound (in ``nodes``) to values computed from module values."""
    access_ids = {id(a.node) for a in accesses.found}
    derived: set[str] = set()
    # (the names an assignment binds, its value, whether the value reads a module value)
    assigns: list[tuple[list[cst.BaseExpression], cst.BaseExpression, bool]] = []
    for node in nodes:
        index = index_of(node)
        for n in index.nodes:
            if type(n) is cst.Assign:
                targets, value = [t.target for t in n.targets], n.value
            elif type(n) is cst.AnnAssign and n.value is not None:
                targets, value = [n.target], n.value
            elif type(n) is cst.NamedExpr:
                targets, value = [n.target], n.value
            else:
                continue
            start, end = index.spans[id(value)]
            reads_module = any(id(inside) in access_ids for inside in index.nodes[start:end])
            assigns.append((targets, value, reads_module))
    for _ in range(3):
        for targets, value, reads_module in assigns:
            if reads_module or (derived and set(collect(value).reads) & derived):
                for target in targets:
                    derived |= set(target_names(target))
    return derived


@dataclass(frozen=True)
class InPlace:
    """A place where code may change a value in place."""

    kind: str  # "method" (`x.add_(1)`), "gradient" (`.backward()`), "augmented" (`x += 1`), "write" (`x[0] = 1`)
    target: cst.BaseExpression  # what changes: `x`, `x[0]`
    method: str = ""  # for "method" and "gradient"


def in_place_changes(nodes):
    """The places in ``nodes`` that may change a value in place, in the order of the code."""
    for node in nodes:
        for n in index_of(node).nodes:
            if type(n) is cst.Call:
                if type(n.func) is cst.Attribute:
                    name = n.func.attr.value
                    if name.endswith("_") and not name.startswith("_"):
                        yield InPlace("method", n.func.value, name)
                    elif name in ("backward", "retain_grad"):
                        yield InPlace("gradient", n.func.value, name)
            elif type(n) is cst.AugAssign:
                yield InPlace("augmented", n.target)
            elif type(n) is cst.Assign:
                for target in n.targets:
                    if isinstance(target.target, (cst.Subscript, cst.Attribute)):
                        yield InPlace("write", target.target)


def in_place_problem(nodes, derived: set[str], facts: Facts) -> str:
    """An in-place change of an activation (or of a value computed from one)."""
    for change in in_place_changes(nodes):
        code = code_of(change.target)
        if change.kind == "method":
            return f"changes `{code}` in place (`.{change.method}()`)"
        if change.kind == "gradient":
            return f"calls `.{change.method}()`"
        if root_name(change.target) in derived:
            return f"changes `{code}` in place" if change.kind == "augmented" else f"writes into `{code}` in place"
    return ""


def layer_order_problem(sweep: Sweep, accesses: Accesses, facts: Facts) -> str:
    """Whether one trace can serve every iteration's reads in the model's order."""
    if accesses.unknown:
        return accesses.unknown_reason(sweep.model)
    if not accesses.found:
        return "the trace reads no module value"
    if sweep.walked is None:
        return "the loop has more than one loop variable"
    target, sequence = sweep.walked
    kinds: dict[tuple[str, ...], list[str]] = {}  # per module of the layer, what is read of it, in order
    for access in accesses.found:
        if access.layers is None or not access.indexed_by(target):
            return (
                f"every iteration reads `{access.code}`, which does not follow the loop's layer: "
                "one forward pass would have run past it after the first iteration"
            )
        kinds.setdefault(access.sub, []).append(access.kind)
    if len({access.layers for access in accesses.found}) != 1:
        return "each iteration reads layers of several lists, whose order ndif-opt cannot check"
    # Several modules of the layer (`attn`, then `mlp`): each iteration reads them in the order
    # each trace as written does, which nnsight runs in the model's order or stops at
    # (OutOfOrderError); every module of a layer runs before the next layer's
    rank = {"input": 0, "inputs": 0, "output": 1}
    for read in kinds.values():
        if any(rank[a] > rank[b] for a, b in zip(read, read[1:])):
            return "each iteration reads a layer's output before its input"
    if not strictly_ascending(sequence, facts):
        known = _order_known(sequence, facts)
        return (
            f"{'the loop does not visit' if known else 'ndif-opt cannot tell whether the loop visits'} layers in "
            f"increasing order (`{code_of(sequence)}`): one trace must read earlier layers first"
        )
    return ""


def int_sequence(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> list[int] | None:
    """The integers a literal list/tuple (or a constant that is one) holds."""
    if depth > 5:
        return None
    if isinstance(expr, (cst.Name, cst.Subscript)):
        value = constant_item(expr, facts)  # `LAYERS`, `CONFIG["layers"]`
        return None if value is None else int_sequence(value, facts, depth + 1)
    if isinstance(expr, (cst.List, cst.Tuple)):
        values = []
        for element in expr.elements:
            if isinstance(element, cst.StarredElement):
                return None
            value = int_value(element.value, facts)
            if value is None:
                return None
            values.append(value)
        return values
    return None


def range_args(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value == "range"
        and 1 <= len(expr.args) <= 3
        and all(a.keyword is None and not a.star for a in expr.args)
    ):
        return [a.value for a in expr.args]
    return None


def listed_items(expr: cst.BaseExpression, facts: Facts) -> cst.BaseExpression:
    """What a loop's sequence lists, as far as it is known before running: a constant's
    value (`LAYERS`, `CONFIG["layers"]`, a name bound once: `items = list(range(12))`),
    and the sequence a `list(...)` or `tuple(...)` of the builtin copies, followed through;
    else ``expr`` itself."""
    for _ in range(6):
        kind = type(expr)
        if kind is cst.Name or kind is cst.Subscript:
            value = constant_item(expr, facts)
            if value is None:
                return expr
            expr = value
        elif kind is cst.Call and type(expr.func) is cst.Name and expr.func.value in ("list", "tuple") \
                and expr.func.value not in facts.bindings and len(expr.args) == 1 \
                and expr.args[0].keyword is None and not expr.args[0].star:
            expr = expr.args[0].value
        else:
            return expr
    return expr


def strictly_ascending(expr: cst.BaseExpression, facts: Facts) -> bool:
    expr = listed_items(expr, facts)
    args = range_args(expr)
    if args is not None:
        if len(args) == 3:
            step = int_value(args[2], facts)
            return step is not None and step > 0
        return True
    values = int_sequence(expr, facts)
    if values is None:
        return False
    return all(v >= 0 for v in values) and all(a < b for a, b in zip(values, values[1:]))


def _order_known(expr: cst.BaseExpression, facts: Facts) -> bool:
    """Are the layers a loop visits known before it runs (whatever their order)?"""
    expr = listed_items(expr, facts)
    args = range_args(expr)
    if args is not None:
        return len(args) < 3 or int_value(args[2], facts) is not None
    return int_sequence(expr, facts) is not None


def nonnegative_ints(expr: cst.BaseExpression, facts: Facts) -> bool:
    """Does the loop iterate over integers that are all >= 0 (known statically)?"""
    expr = listed_items(expr, facts)
    args = range_args(expr)
    if args is not None:
        if len(args) == 1:
            return True
        values = [int_value(arg, facts) for arg in args]
        if len(args) == 3 and (values[2] is None or values[2] <= 0):
            # a step down ends at its smallest: `range(5, -3, -1)` reaches -2
            return None not in values and values[2] != 0 and min(range(*values), default=0) >= 0
        return values[0] is not None and values[0] >= 0
    values = int_sequence(expr, facts)
    return values is not None and all(v >= 0 for v in values)


class _Either:
    """In any of some collections (looked up where they are, not copied)."""

    def __init__(self, *collections) -> None:
        self.collections = collections

    def __contains__(self, name: str) -> bool:
        return any(name in collection for collection in self.collections)


def _generated_code(facts: Facts) -> str:
    return code_and_positions(facts.module)[0]


def fresh_name(base: str, facts: Facts, taken=frozenset()) -> str:
    """``base``, or ``base_<n>`` (:func:`ndif_opt.analysis.names.fresh_name`): a name the module of ``facts`` does not use, nor
    ``taken`` (a set, or :class:`TakenNames`)."""
    # the pipeline generated this version's code statement by statement: reuse it
    code = facts.once(_generated_code)
    if base not in code and base not in taken:
        return base  # every name the module uses is in its code: quicker than its names
    use = collect(facts.module)

    return names.fresh_name(base, _Either(use.reads, use.binds, taken), first=1)


class TakenNames:
    """The names a pass run gave out, and the reserved ones (for a window of a long
    file, every name of the file: looked up where they are, not copied on each run)."""

    def __init__(self, reserved: frozenset[str]) -> None:
        self.reserved = reserved
        self.given: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self.given or name in self.reserved

    def update(self, names) -> None:
        self.given.update(names)


def introduce(context: Context, *names: str) -> None:
    introduced = getattr(context, "introduced", None)
    if introduced is not None:
        introduced.update(names)


def passes_text(trips: int | None) -> str:
    return counted(trips, "forward pass") if trips is not None else "one forward pass per iteration"


@dataclass(frozen=True)
class Tally:
    """A sweep's counts as its messages quote them: per run of the loop, times the runs the
    cost table counts (a loop in a loop, or in a function called twice, runs more than
    once), so that a finding's numbers are its row's."""

    runs: Number | Count
    uncalled: str = ""  # the function no code here calls that holds the loop: then per call

    def count(self, per_run: Number, noun: str) -> str:
        """``20 forward passes``; ``5·N forward passes (N: …)``."""
        return counted_with_loops(per_run * self.runs, noun)[0] + self.tail(per_run)

    def number(self, per_run: Number) -> str:
        """``4``, ``N``: a total without its noun, nor what its symbols mean."""
        return count_text(per_run * self.runs)

    def change(self, before: Number, after: Number, noun: str) -> str:
        """``20 forward passes → 4``."""
        return claim_text(before * self.runs, after * self.runs, noun)[0] + self.tail(before, after)

    def labelled(self, label: str, before: Number, after: Number, tail: bool = True) -> str:
        """``layer evaluations 240 → 168`` (``tail``: with :meth:`tail`)."""
        text = f"{label} {self.number(before)} → {self.number(after)}"
        return text + (self.tail(before, after) if tail else "")

    def tail(self, *per_run: Number) -> str:
        """What the symbols of these totals mean, and that the loop's function is never
        called (then the counts are per call): `` (N: …)``, or ""."""
        meaning = symbols(*(value * self.runs for value in per_run))[1]
        note = f" each time `{self.uncalled}` runs (no code here calls it: not in the cost table)" \
            if self.uncalled else ""
        return (f" ({meaning})" if meaning else "") + note


def tally(sweep: Sweep, facts: Facts, options) -> Tally:
    """The runs of the sweep's loop as the cost table counts them (one, where its walk
    never reached the loop)."""
    found = explain(facts, options).runs_of(sweep.loop)
    if found is None:
        return Tally(1)
    runs, uncalled = found
    return Tally(runs, uncalled or "")


def walked_trips(sweep: Sweep, facts: Facts, options) -> int | None:
    """The runs of the sweep's trace in one run of its loop as the cost table counts them
    (`range(model.config.n_head)`, a list a comprehension builds; an iteration a `continue`
    ends before the trace runs none), when that is a whole number; None otherwise. For what
    a finding says, never for what a rewrite does: the analysis's own trip count decides
    that."""
    walked = explain(facts, options)
    loop, body = walked.runs_of(sweep.loop), walked.runs_of(sweep.loop.body.body[sweep.position])
    if loop is None or body is None or not isinstance(loop[0], (int, float)) or \
            not isinstance(body[0], (int, float)) or loop[0] <= 0:
        return None
    trips = body[0] / loop[0]
    return int(trips) if trips == int(trips) else None


def with_leading(stmt: cst.BaseStatement, lines) -> cst.BaseStatement:
    """``stmt`` with ``lines`` put before its own leading lines."""
    if not lines:
        return stmt
    return stmt.with_changes(leading_lines=list(lines) + list(stmt.leading_lines))


def split_leading(lines) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Leading blank lines, and the rest (comments and what follows them)."""
    lines = list(lines)
    index = 0
    while index < len(lines) and lines[index].comment is None:
        index += 1
    return lines[:index], lines[index:]




def fusion_problem(sweep: Sweep, facts: Facts) -> tuple[str, bool]:
    """Why the loop's traces cannot become one trace ("" when they can), and whether
    the loop is a fusion candidate at all (same input in every iteration).

    Asked by trace-fusion and invoke-batching of the same tree: answered once."""
    return facts.once(_fusion_problem, sweep)


def _fusion_problem(facts: Facts, sweep: Sweep) -> tuple[str, bool]:
    if sweep.block.method != "trace":
        return "it runs `.generate()`", False
    problem = structure_problem(sweep, facts)
    if problem:
        # a loop that jumps (`break`, `continue`) is still a candidate when the rest of
        # it is one: its finding says why it is not fused
        jumps = problem.startswith("the loop body uses")
        return problem, jumps and not _trace_shape_problem(sweep) and _fusion_problem_of_iterations(facts, sweep)[1]
    return _fusion_problem_of_iterations(facts, sweep)


def _fusion_problem_of_iterations(facts: Facts, sweep: Sweep) -> tuple[str, bool]:
    """:func:`fusion_problem` of a loop whose shape does not forbid it."""
    dependence = input_dependence(sweep, facts)
    if dependence:
        return dependence, False
    accesses = module_accesses(sweep.moved, facts)
    # an intervention sweep needs a forward pass per iteration: not a fusion candidate
    # (invoke-batching and skip-insertion deal with it)
    writes = [a for a in accesses.found if a.write]
    if writes:
        return (
            f"each iteration writes to `{writes[0].code}`, so each needs its own forward pass",
            False,
        )
    if accesses.skips:
        return "each iteration skips a module, so each needs its own forward pass", False
    if accesses.model_writes:
        return f"the loop changes the model (`{code_of(accesses.model_writes[0])}`)", False
    derived = derived_names(sweep.moved, accesses)
    problem = in_place_problem(sweep.moved, derived, facts)
    if problem:
        return f"each iteration {problem}", True
    problem = layer_order_problem(sweep, accesses, facts)
    if problem:
        return problem, True
    return "", True

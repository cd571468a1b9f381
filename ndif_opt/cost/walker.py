"""The cost model's walk: the script read once, in order, as an abstract interpreter.

:class:`Walker` binds client names to shapes and constants, multiplies what loops contain
by their trip counts, walks same-file functions at their calls, and turns every outermost
remote block into a :class:`RequestEstimate` (its upload, download, forward passes,
layer evaluations, compute and server time; a session's :class:`SessionProfile`). What
it counts, and why, is told in :mod:`ndif_opt.cost_model`, which totals the requests; the
numbers it uses are in :mod:`ndif_opt.cost.constants`; the shapes of values come from
:mod:`ndif_opt.cost.shapes`, evaluated once per expression and values of the names it reads
(shared by the versions of a tree the pipeline makes).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from ndif_opt.analysis.facts import (
    Block,
    Facts,
    Remote,
    RemoteFlag,
    call_remote_flag,
    config_entry,
    qualify,
)
from ndif_opt.analysis.reachability import reach
from ndif_opt.analysis.names import COMPREHENSIONS, all_params, collect, returned_name, target_names
from ndif_opt.analysis.regions import arithmetic, dict_view_length
from ndif_opt.analysis.remote_functions import (
    attribute_models,
    constructors,
    instance_names,
    self_methods,
)
from ndif_opt.analysis.retries import retry_guard, retry_wrappers, unwrapped_call
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.constants import (
    CALL_DEPTH,
    CLIENT_TENSOR_OVERHEAD,
    CODE_COMPRESSION,
    NAME_OVERHEAD,
    PY_SIZES,
    RESULT_BASE,
    SHARED_VIEW_OVERHEAD,
    TENSOR_OVERHEAD,
    TRACKED_LENGTH,
    UNROLL_BUDGET,
    UNROLL_LIMIT,
    UPLOAD_BASE,
    UPLOAD_GENERATE,
    UPLOAD_PER_LAYER,
    UPLOAD_RAW_BASE,
    UPLOAD_RAW_GENERATE,
    UPLOAD_RAW_PER_LAYER,
    setting,
    view_mode,
)
from ndif_opt.cost.library_requests import (
    LibraryRequest,
    Returns,
    batch_count,
    library_request,
    request_count,
)
from ndif_opt.cost.model_registry import ModelDims, dims_for, dims_from_hf_config, dtype_size, estimate_n_params
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.shapes import value_of
from ndif_opt.options import Options
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.literals import literal_value
from ndif_opt.syntax.loops import cst_expression_text, cst_loop_header, given_lengths
from ndif_opt.syntax.positions import code_in, code_of
from ndif_opt.syntax.rewrite import unsave
from ndif_opt.syntax.walk import content_children, find_nodes
from ndif_opt.types import Count, Number, UnknownDownload, UnknownLoop, is_known

__all__ = ["RequestEstimate", "SessionProfile", "Walker", "serialized_size"]


# methods that change a list, set or dict in place
_IN_PLACE = frozenset(
    {"append", "extend", "insert", "add", "clear", "sort", "reverse", "pop", "remove", "discard",
     "update", "setdefault", "popitem"}
)

_VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "transpose",
        "permute", "t", "narrow", "select", "expand", "expand_as", "detach", "cpu",
        "flatten", "unflatten", "movedim", "swapaxes", "swapdims", "diagonal", "as_strided",
        "__getitem__",
    }
)  # fmt: skip
_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "update", "setdefault", "add"})
_LAYER_COUNT_ATTRS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})
# modules the model runs before its first decoder layer
_BEFORE_LAYERS = frozenset({"embed_tokens", "wte", "wpe", "embed_in", "embed_positions", "rotary_emb", "drop"})


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass
class SessionProfile:
    """Where the server time of one session goes: before its last top-level loop of
    forward passes (``prefix``), per iteration of that loop, and after it (``suffix``).

    Numbers to plan with: where a loop of unknown length adds to one, it is taken at the
    walk's assumed length, and ``assumed`` names those loops (``trips`` is None when the
    last loop is one of them)."""

    loop: cst.For | None = None
    trips: int | None = None
    prefix_seconds: float = 0.0
    iteration_seconds: float = 0.0
    suffix_seconds: float = 0.0
    assumed: tuple[UnknownLoop, ...] = ()


@dataclass(eq=False)
class RequestEstimate:
    """One outermost remote block, or one call of a library function that sends its own
    requests (``library_call``, then ``block`` is None), over every time the script sends it."""

    block: Block | None
    model: str = ""  # the receiver's code, e.g. `model`
    method: str = ""  # trace | session | generate
    library_call: cst.Call | None = None
    # every number may be a Count: it depends on loops of unknown length
    count: int | Count = 0  # requests this block sends
    upload_bytes: int | Count = 0  # totals over ``count`` requests
    upload_raw_bytes: int | Count = 0
    download_bytes: int | Count = 0
    forward_passes: int | Count = 0
    layer_evaluations: int | Count = 0
    compute_flops: float | Count = 0.0
    server_seconds: float | Count = 0.0
    max_server_seconds: float | Count = 0.0  # the longest single request
    saved: dict[str, int | Count] = field(default_factory=dict)  # name -> bytes (last request)
    profile: SessionProfile | None = None
    # values of unknown size (download_bytes counts their framing), with how many times
    # they are downloaded over ``count`` requests
    unknown_downloads: dict[UnknownDownload, int | Count] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.method


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


def serialized_size(shape: Shape) -> int | None:
    """Bytes ``torch.save`` writes for a value of this shape (framing included)."""
    if shape.kind == "unknown":
        return None
    if shape.kind in ("tensor", "scalar"):
        if shape.dims is None:
            return None
        return math.prod(shape.dims) * dtype_size(shape.dtype) + TENSOR_OVERHEAD
    if shape.kind == "python":
        if shape.dtype == "str":
            return (len(shape.value) if isinstance(shape.value, str) else 16) + NAME_OVERHEAD
        if shape.dtype == "list":
            return 9 * max(math.prod(shape.dims or (1,)), 1) + 4
        if shape.dtype == "tuple":
            return 4 + 5 * (len(shape.value) if isinstance(shape.value, tuple) else 4)
        return PY_SIZES.get(shape.dtype, 9)
    if shape.kind == "container":
        total = 4
        for index, element in enumerate(shape.elements):
            size = serialized_size(element)
            if size is None:
                return None
            total += size + 1
            if index < len(shape.names) and shape.names[index]:
                total += len(shape.names[index]) + NAME_OVERHEAD
        return total
    return None


def _key_size(shape: Shape | ModuleRef | None) -> int:
    if isinstance(shape, Shape) and shape.known:
        return serialized_size(shape) or 9
    return 9


# ---------------------------------------------------------------------------------------
# Constants, lengths and trip counts
# ---------------------------------------------------------------------------------------


class _NoValue:
    pass


NO_VALUE: Any = _NoValue()


def _literal(expr: cst.BaseExpression) -> Any:
    """The Python value of a literal (strings, numbers, lists/tuples of them), or NO_VALUE."""
    return _fresh(_shared_literal(expr))


@functools.lru_cache(maxsize=8192)
def _shared_literal(expr: cst.BaseExpression) -> Any:
    # a pure function of an immutable node, cached (every version of a tree walks the
    # same literals again); its lists are shared between callers: see _fresh
    if type(expr) in (cst.SimpleString, cst.ConcatenatedString):
        value = literal_value(expr)
        return value if isinstance(value, str) else NO_VALUE
    if type(expr) is cst.Integer:
        return int(literal_value(expr))
    if type(expr) is cst.Float:
        return float(literal_value(expr))
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus:
        inner = _shared_literal(expr.expression)
        return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else NO_VALUE
    if type(expr) is cst.Name and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if type(expr) in (cst.List, cst.Tuple):
        values = []
        for element in expr.elements:
            if type(element) is cst.StarredElement:
                return NO_VALUE
            value = _shared_literal(element.value)
            if value is NO_VALUE:
                return NO_VALUE
            values.append(value)
        return tuple(values) if type(expr) is cst.Tuple else values
    return NO_VALUE


_UNBOUND: Any = _NoValue()  # a name env does not hold (a key part: hashable, unequal to any value)


@functools.lru_cache(maxsize=4096)
def _names_read(expr: cst.BaseExpression) -> tuple[str, ...]:
    """The names spelled in an expression: every key of env :func:`value_of` may read."""
    found: dict[str, None] = {}
    stack = [expr]
    while stack:  # _walk's nodes (in another order), with the leaves and attributes inline
        node = stack.pop()
        kind = type(node)
        if kind is cst.Name:
            found[node.value] = None
        elif kind is cst.Attribute:
            found[node.attr.value] = None
            if type(node.value) is cst.Name:
                found[f"{node.value.value}.{node.attr.value}"] = None  # object state (see assign)
            stack.append(node.value)
        else:
            stack.extend(content_children(node))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _expression_key(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, tuple[str, ...]]:
    """(the node to evaluate for ``expr``, the names it spells): the first node met that
    spells the same expression (a pass rebuilds the expressions of a statement it
    changes, and a script repeats its expressions: one evaluation serves every copy), or
    ``expr`` itself when it holds a kind of node :func:`_fingerprint` does not list."""
    names: dict[str, None] = {}
    try:
        fingerprint = _fingerprint(expr, names)
    except (_Unlisted, RecursionError):
        return expr, _names_read(expr)
    return _first_spelling(fingerprint, expr), tuple(names)


_FIRST_SPELLINGS: dict[Any, cst.BaseExpression] = {}
_FIRST_SPELLINGS_LIMIT = 4096


def _first_spelling(fingerprint: Any, expr: cst.BaseExpression) -> cst.BaseExpression:
    first = _FIRST_SPELLINGS.get(fingerprint)
    if first is None:
        if len(_FIRST_SPELLINGS) >= _FIRST_SPELLINGS_LIMIT:
            _FIRST_SPELLINGS.clear()  # bounded like an lru (a miss costs one evaluation)
        first = _FIRST_SPELLINGS[fingerprint] = expr
    return first


class _Unlisted(Exception):
    """An expression with a kind of node :func:`_fingerprint` does not list."""


def _fingerprint(node: cst.BaseExpression, names: dict[str, None]) -> Any:
    """What :func:`value_of` reads of an expression: its nodes' kinds, names, operators
    and literals, not its layout (whitespace, parentheses, commas), which it never reads;
    the names spelled are added to ``names``. Only the usual kinds of an nnsight value
    are listed: any other raises :class:`_Unlisted`."""
    kind = type(node)
    if kind is cst.Name:
        names[node.value] = None
        return node.value
    if kind is cst.Attribute:
        value = _fingerprint(node.value, names)
        names[node.attr.value] = None
        if type(node.value) is cst.Name:
            names[f"{node.value.value}.{node.attr.value}"] = None  # `self.clean`: object state (see assign)
        return (kind, value, node.attr.value)
    if kind is cst.Subscript:
        return (kind, _fingerprint(node.value, names), tuple([_fingerprint(e.slice, names) for e in node.slice]))
    if kind is cst.Index:
        return (kind, _fingerprint(node.value, names), node.star)
    if kind is cst.Slice:
        return (kind, *[None if part is None else _fingerprint(part, names)
                        for part in (node.lower, node.upper, node.step)])
    if kind is cst.Call:
        parts: list[Any] = [kind, _fingerprint(node.func, names)]
        for arg in node.args:
            keyword = arg.keyword
            if keyword is not None:
                names[keyword.value] = None
            parts.append((None if keyword is None else keyword.value, arg.star, _fingerprint(arg.value, names)))
        return tuple(parts)
    if kind is cst.Integer or kind is cst.Float or kind is cst.SimpleString:
        return (kind, node.value)
    if kind is cst.BinaryOperation:
        return (kind, type(node.operator), _fingerprint(node.left, names), _fingerprint(node.right, names))
    if kind is cst.UnaryOperation:
        return (kind, type(node.operator), _fingerprint(node.expression, names))
    if kind is cst.Tuple or kind is cst.List:
        parts = [kind]
        for element in node.elements:
            if type(element) is not cst.Element:
                raise _Unlisted
            parts.append(_fingerprint(element.value, names))
        return tuple(parts)
    raise _Unlisted


def _exact(value: Any) -> tuple:
    """``value`` as a key part equal only to an identical value: a Shape compares its
    Python value with ==, which holds between 1, 1.0 and True, and not its reason, which
    a value of unknown size carries into the report."""
    return (value, _types_in(value)) if isinstance(value, Shape) else (value, None)


def _types_in(shape: Shape) -> tuple:
    elements = shape.elements
    return (_value_types(shape.value), tuple([_types_in(e) for e in elements]) if elements else (),
            shape.reason if shape.kind == "unknown" else None)


def _value_types(value: Any) -> Any:
    if type(value) is tuple or type(value) is list:
        return type(value), tuple(_value_types(v) for v in value)
    if type(value) is float:
        return float, repr(value)  # -0.0 == 0.0, and NaN equals nothing
    return type(value)


@functools.lru_cache(maxsize=4096)
def _value_in(expr, dims, model_names, seq, batch, max_new_tokens, read) -> Shape | ModuleRef:
    """:func:`value_of` in an env of the names it reads (a pure function of its key, cached;
    the result is immutable; the cost model reads no Shape's notes, and a reason only of
    the expression evaluated, whose nodes and names' values are the key)."""
    env = {name: value for name, (value, _) in read if value is not _UNBOUND}
    return value_of(expr, dims, model_name=model_names, seq_len=seq, batch=batch, env=env,
                    max_new_tokens=max_new_tokens)


def _fresh(value: Any) -> Any:
    """A cached literal with new lists, so that no caller can change the cache's (a
    literal's lists and tuples are exactly those types)."""
    kind = type(value)
    if kind is list:
        return [_fresh(v) for v in value]
    if kind is tuple and any(type(v) is list or type(v) is tuple for v in value):
        return tuple(_fresh(v) for v in value)
    return value


# ---------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------


_SERIALS = itertools.count(1)


@dataclass(frozen=True)
class _Storage:
    """The module output a value is a view of: its shape, which one it is (None when the
    module is not known exactly) and how many runs of its trace the walk stands for."""

    shape: Shape
    key: tuple | None
    times: float = 1.0


@dataclass
class _Forward:
    """Shape context of the code inside one trace/generate.

    ``batch`` is the rows the code sees: inside ``tracer.invoke(...)`` the invoke's own
    rows, else every row of the trace (``rows``); ``times`` is how many times the walk of
    this trace stands for; ``skipped`` counts the ``.skip()`` calls met, over all of them."""

    dims: ModelDims
    model: str
    seq: int
    batch: int
    max_new_tokens: int | None
    rows: int = 1
    times: float = 1.0
    skipped: float = 0.0
    serial: int = field(default_factory=lambda: next(_SERIALS))


@dataclass
class Visit:
    """What the walk saw of one statement outside any request: how many times it runs
    and the requests it sends over those runs (``function``: the function no code here
    calls that holds it — then for one call of it, which the totals do not count)."""

    node: cst.BaseStatement
    runs: Number | Count
    sent: Number | Count
    function: str | None = None


class Walker:
    """Walks the script in order; client code on the client, remote blocks as requests."""

    def __init__(self, facts: Facts, options: Options) -> None:
        self.facts = facts
        self.options = options
        self.unknown_trips = max(int(setting(options, "unknown-trips")), 0)
        self.view_mode = view_mode(options)
        self.model_names = list(facts.models) or ["model"]
        self._model_key = tuple(self.model_names)
        self._seq_len = int(setting(options, "seq-len"))
        self.requests: list[RequestEstimate] = []
        self._by_block: dict[int, RequestEstimate] = {}
        self.notes: list[str] = []
        self._sent: Number | Count = 0  # requests sent so far
        self.visits: dict[int, Visit] = {}  # id(statement) -> its runs and requests
        # id(statement) -> how many times it runs over the script, inside requests too
        # (what a finding quotes of a loop in a session), and the uncalled function holding it
        self.runs: dict[int, tuple[Number | Count, str | None]] = {}
        self._request_runs: Number | Count = 1  # the runs of the request walked now (1 outside)
        # functions no code here calls, with the requests one call of each would send
        self.uncalled: dict[str, Number | Count] = {}
        self._uncalled_function: str | None = None  # the one walked now, if any
        self._loop_order: dict[tuple[str, str], int] = {}  # loops of unknown length, as met
        # lengths the configuration gives loops the walk cannot know (by header)
        self._given_trips, self._given_lengths = given_lengths(options.cost.get("trips"))
        self.env: dict[str, Shape | ModuleRef] = {}
        self.storage: dict[str, _Storage] = {}  # names bound to (views of) a module output
        self.request: _Request | None = None
        self.forward: _Forward | None = None
        self._dims: dict[str, ModelDims] = {}
        # a parameter of the function walked now bound to one of the script's models at
        # its call (`def run(lm, ...)` called as `run(model, ...)`): its blocks run that model
        self._model_aliases: dict[str, str] = {}
        self._attribute_models = attribute_models(facts)  # `self.model` -> the script's model it holds
        self._called: set[str] = set()
        self._calls_memo: dict[int, list[cst.Call]] = {}
        self._methods = self_methods(facts)  # `self.name` -> a method of the file's classes
        self._instances = instance_names(facts)  # `exp` of `exp = Patching(...)`: `exp.sweep()` is a method call
        self._constructors = constructors(facts)  # `Patching(...)` runs `Patching.__init__`
        # the key part of _calls, built once
        self._function_names = frozenset(facts.functions) | frozenset(self._methods) | frozenset(self._constructors)
        self._work_memo: dict[object, bool] = {}
        self._block_ids: set[int] | None = None  # the nnsight blocks' nodes, for _has_work
        self._code_memo: dict[int, str] = {}
        self._call_stack: list[str] = []
        # inside a request, what the functions it calls save in their own frames (name ->
        # size, as `_Request.save` takes it), and per call what the function returns of it
        self._inner_saves: dict[str, tuple[int | None, UnknownDownload | None]] = {}
        self._returned_saves: dict[int, tuple[int | None, UnknownDownload | None]] = {}
        self._unrolled = 0  # iterations unrolled so far (see UNROLL_BUDGET)
        self._guesses = 0  # how deep in code run an assumed number of times (see _guessing)
        self._default_dims = self.dims_of(self.model_names[0])
        # names imported from a library whose functions may send requests of their own
        self._library_paths = any(path.split(".")[0] == "nnterp" for path in facts.imports.values())

    # -- setup ---------------------------------------------------------------------------
    def dims_of(self, model: str) -> ModelDims:
        model = self._model_aliases.get(model) or self._attribute_models.get(model, model)
        if model in self._dims:
            return self._dims[model]
        info = self.facts.models.get(model)
        repo = info.repo_id if info is not None and info.repo_id else model
        config = self.options.cost.get("model-config")
        if isinstance(config, Mapping):
            try:
                dims = dims_from_hf_config(config, name=repo)
            except (ValueError, TypeError):
                dims = dims_for(repo)
        else:
            overrides = self.options.cost.get("models")
            dims = dims_for(repo, overrides) if overrides else dims_for(repo)
        self._dims[model] = dims
        return dims

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def run(self) -> None:
        self.suite(self.facts.module.body, 1)
        functions = self._functions()
        # a function called by another is walked at its calls; one that code here hands
        # on without calling (a callback, an entry point) runs once; one no code here
        # names (dead code, a library's API) costs nothing: what a call of it would send
        # is told in a note
        wrappers = retry_wrappers(self.facts)
        called_by_functions = set()
        for func in functions.values():
            for call, _loops in _calls(func.body, self._function_names, self._instances):
                called_by_functions.add(_called_name(call, self._instances).removeprefix("self."))
                # (and the function a retry wrapper runs)
                called_by_functions.add(_called_name(unwrapped_call(call, wrappers), self._instances))
        reached = reach(self.facts)
        for name, func in functions.items():
            if not reached.runs(func):
                if self._has_work(func.body):  # (a helper only such functions call, too)
                    self.uncalled[name] = self._one_call(name, func)
            elif name not in self._called and name not in called_by_functions:
                self._walk_function(name, func)

    def _walk_function(self, name: str, func: cst.FunctionDef) -> None:
        saved = (dict(self.env), dict(self.storage))
        self._call_stack.append(name)
        self.suite(func.body.body, 1)
        self._call_stack.pop()
        self.env, self.storage = saved

    def _one_call(self, name: str, func: cst.FunctionDef) -> Number | Count:
        """The requests one call of a function no code here calls would send: walked
        aside, so that the totals and the notes leave it out (its statements' visits are
        kept, marked with its name)."""
        kept = (self.requests, self._by_block, self._sent, self.notes)
        self.requests, self._by_block, self._sent, self.notes = [], {}, 0, []
        self._uncalled_function = name
        try:
            self._walk_function(name, func)
            return self._sent
        finally:
            self._uncalled_function = None
            self.requests, self._by_block, self._sent, self.notes = kept

    def _functions(self) -> dict[str, cst.FunctionDef]:
        found: dict[str, cst.FunctionDef] = {}
        for info in self.facts.statements.values():
            if type(info.node) is cst.FunctionDef:
                found.setdefault(info.node.name.value, info.node)
        return found

    # -- statements ------------------------------------------------------------------------
    def suite(self, statements, times: Number | Count) -> None:
        for stmt in statements:
            self._ran(stmt, times)
            if self.request is None:  # (inside a request no statement sends one)
                before = self._sent
                self.statement(stmt, times)
                self._visited(stmt, times, self._sent - before)
            else:
                self.statement(stmt, times)
            if type(stmt) is cst.SimpleStatementLine and any(type(s) in _LEAVING for s in stmt.body):
                break  # what follows `return`, `raise`, `break` or `continue` never runs

    def _ran(self, stmt: cst.BaseStatement, times: Number | Count) -> None:
        """Count ``times`` runs of ``stmt`` (of the request walked now, if any)."""
        runs = self.runs.get(id(stmt))
        total = times * self._request_runs
        self.runs[id(stmt)] = (total if runs is None else runs[0] + total, self._uncalled_function)

    def _visited(self, stmt: cst.BaseStatement, times: Number | Count, sent: Number | Count) -> None:
        visit = self.visits.get(id(stmt))
        if visit is None:
            self.visits[id(stmt)] = Visit(stmt, times, sent, self._uncalled_function)
        else:
            visit.runs += times
            visit.sent += sent

    def loop_symbol(self, loop: cst.For | cst.While | cst.CompFor) -> Number | Count:
        """The iterations of a loop whose length is not known before running: N — or the
        length the configuration gives it (``trips``)."""
        header = cst_loop_header(loop)
        if header in self._given_trips:
            return self._given_trips[header]
        function = self._call_stack[-1].removeprefix("self.") if self._call_stack else ""
        key = (header, function)
        order = self._loop_order.setdefault(key, len(self._loop_order))
        return Count.trips(UnknownLoop(*key, order=order))

    def statement(self, stmt: cst.BaseStatement, times: float) -> None:
        # the usual kinds compared with `is` (libcst's node classes are final; isinstance
        # against them is an ABC check)
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                self.small(small, times)
            return
        if kind is cst.With:
            self.with_statement(stmt, times)
            return
        if kind is cst.For:
            self.for_loop(stmt, times)
            return
        if type(stmt) is cst.While:
            trips = self.loop_symbol(stmt)
            with contextlib.nullcontext() if is_known(trips) else self._guessing():
                self.suite(stmt.body.body, times * trips)
            return
        if type(stmt) is cst.If:
            # the test is not evaluated: a branch may not run (but a script's main does)
            with contextlib.nullcontext() if _is_main_guard(stmt) else self._guessing():
                self._if_statement(stmt, times)
            return
        if type(stmt) in (cst.Try, cst.TryStar):
            # a run without failures: the body, its `else:`, its `finally:`; no handler
            self.suite(stmt.body.body, times)
            if stmt.orelse is not None:
                self.suite(stmt.orelse.body.body, times)
            if stmt.finalbody is not None:
                self.suite(stmt.finalbody.body.body, times)
            return
        if type(stmt) in (cst.FunctionDef, cst.ClassDef):
            return
        body = getattr(stmt, "body", None)
        if type(body) is cst.IndentedBlock:
            self.suite(body.body, times)

    def _if_statement(self, stmt: cst.If, times: float) -> None:
        orelse = stmt.orelse
        if orelse is not None and self._has_work(orelse) and not self._has_work(stmt.body):
            self.note(f"`if {_short(stmt.test)}` is assumed false: the branch that sends requests is counted")
            if type(orelse) is cst.If:
                self.statement(orelse, times)
            else:
                self.suite(orelse.body.body, times)
            return
        self.suite(stmt.body.body, times)
        if orelse is not None and self._has_work(orelse):
            self.note(f"`if {_short(stmt.test)}` is assumed true: its other branch is not counted")

    @contextlib.contextmanager
    def _guessing(self):
        """Code the walk runs an assumed number of times (a loop of unknown length, a
        branch whose test it does not evaluate): what it adds to a list leaves the
        list's length unknown."""
        self._guesses += 1
        try:
            yield
        finally:
            self._guesses -= 1

    def _is_remote(self, block: Block) -> bool:
        if self.facts.is_remote(block.remote.state):
            return True
        expr = block.remote.expr
        if block.remote.state.value == "maybe" and type(expr) is cst.Name:
            bound = self.env.get(expr.value)  # a parameter bound at a call
            if isinstance(bound, Shape) and bound.kind == "python" and bound.value is not None:
                return bool(bound.value)
        if block.remote.state.value == "maybe":
            # the report is about running on NDIF: a flag the analysis cannot read counts
            # as remote, and the report says so rather than print 0 requests
            self.note(f"{block.remote.reason}: counted as remote")
            return True
        return False

    def _has_work(self, node: cst.CSTNode) -> bool:
        """Does ``node`` hold an nnsight block (or call a same-file function)?"""
        known = self._work_memo.get(id(node))
        if known is not None:
            return known
        blocks = self._block_ids
        if blocks is None:
            blocks = self._block_ids = {id(b.node) for b in self.facts.blocks}
        found = False
        for n in _walk(node):
            kind = type(n)
            if kind is cst.With and id(n) in blocks:
                found = True
                break
            if kind is cst.Call and type(n.func) is cst.Name and n.func.value in self.facts.functions:
                found = True
                break
        self._work_memo[id(node)] = found
        return found

    def with_statement(self, stmt: cst.With, times: float) -> None:
        block = self.facts.block_of(stmt)
        if block is None and self.request is not None:
            block = self._unlisted_trace(stmt)
        if block is None:
            forward = self.forward
            invoke = _invoke_call(stmt)
            if forward is not None and invoke is not None:
                # inside an invoke the model's values have the invoke's rows (an invoke
                # without input sees the whole batch)
                rows, _ = self.prompt_rows(invoke, quiet=True)  # its tokens were counted already
                outer, forward.batch = forward.batch, (rows or forward.rows)
                try:
                    self.suite(stmt.body.body, times)
                finally:
                    forward.batch = outer
                return
            self.suite(stmt.body.body, times)
            return
        if self.request is None:
            if block.parent is None and self._is_remote(block):
                self.remote_block(block, times)
            else:
                self.local_block(block)
            return
        self.inner_block(block, times)

    def _unlisted_trace(self, stmt: cst.With) -> Block | None:
        """``with lm.trace(...)`` inside a request that the analysis does not list as a
        block — the model is a parameter or an attribute it cannot tell is a model, and
        inside a session the trace takes no ``remote=`` — when ``lm`` is the request's
        model or bound to a model: one of the request's traces all the same."""
        call = stmt.items[-1].item if stmt.items else None
        if type(call) is not cst.Call or type(call.func) is not cst.Attribute:
            return None
        method = call.func.attr.value
        if method not in ("trace", "generate"):
            return None
        receiver = call.func.value
        request = self.request
        if dotted_name(receiver) != request.block.model:
            bound = self.value(receiver)
            if not (isinstance(bound, ModuleRef) and not bound.path):  # the root of a model
                return None
        return Block(
            node=stmt, call=call, model=request.block.model, method=method,
            remote=RemoteFlag(Remote.NO, None, "inside a remote request"),
            stmt=self.facts.statements.get(id(stmt)), parent=request.block,
        )

    # -- loops -------------------------------------------------------------------------------
    def for_loop(self, stmt: cst.For, times: Number | Count) -> None:
        if retry_guard(stmt, self.facts) is not None:
            # attempts of one request: a run without failures sends it once
            if self._has_work(stmt):
                self.note(f"`for {code_of(stmt.target)} in {_short(stmt.iter)}` is a retry loop: counted once; "
                          "each failure costs another request")
            self._bind(target_names(stmt.target)[0], self._element_shape(stmt.iter))
            self.suite(stmt.body.body, times)
            return
        names = target_names(stmt.target)
        elements = self.elements(stmt.iter)
        if elements is not None and len(elements) <= UNROLL_LIMIT and (
            any(_has_str(e) for e in elements)
            or (self._unrolled + len(elements) <= UNROLL_BUDGET and self._varies(stmt))
        ):
            self._unrolled += len(elements)
            for element in elements:
                self._bind_target(stmt.target, element)
                self.suite(stmt.body.body, times)
            return
        trips = len(elements) if elements is not None else self.length(stmt.iter)
        assumed = trips is None
        if assumed:
            trips = self.loop_symbol(stmt)
            assumed = not is_known(trips)
        if elements:
            self._bind_target(stmt.target, elements[0], value=False)
        else:
            for name in names:
                self._bind(name, self._element_shape(stmt.iter))
        with self._guessing() if assumed else contextlib.nullcontext():
            self.suite(stmt.body.body, times * trips)

    def _varies(self, loop: cst.For) -> bool:
        """Does what an iteration costs depend on the loop variable? — a nested loop whose
        length it sets (``for i in range(layer)``: triangular sweeps, skipped prefixes),
        or a slice it bounds (``items[start : start + K]``: the last chunk is shorter),
        around nnsight work or ``.skip()`` calls."""
        known = self._work_memo.get(("varies", id(loop)))
        if known is not None:
            return known
        names = set(target_names(loop.target))
        found = False
        if names:
            nested = [n for n in _compound(loop.body) if type(n) is cst.For and names & _names_in(n.iter)]
            found = bool(nested) and (self._has_work(loop.body) or _has_skip(loop.body))
        self._work_memo[("varies", id(loop))] = found
        return found

    def _element_shape(self, iterable: cst.BaseExpression) -> Shape | ModuleRef:
        value = self.value(iterable)
        if isinstance(value, ModuleRef):
            return value.child(None)
        if isinstance(value, Shape) and value.kind == "container" and value.elements:
            return value.elements[0]
        return Shape.python("int")

    def _bind_target(self, target: cst.BaseExpression, element: Any, value: bool = True) -> None:
        if type(target) is cst.Name:
            self._bind(target.value, _python_shape(element, value))
        elif type(target) in (cst.Tuple, cst.List) and isinstance(element, (tuple, list)):
            for sub, item in zip(target.elements, element):
                self._bind_target(sub.value, item, value)
        else:
            for name in target_names(target):
                self._bind(name, Shape.unknown("unpacked loop value"))

    def _bind(self, name: str, value: Shape | ModuleRef) -> None:
        if name in self.facts.models:
            return
        self.env[name] = value
        self.storage.pop(name, None)
        request = self._frame_request()
        if request is not None:
            request.unsave(name)

    def elements(self, expr: cst.BaseExpression, depth: int = 0) -> list | None:
        """Statically known elements of an iterable (literal lists, range, enumerate, zip)."""
        if depth > 6:
            return None
        value = _literal(expr)
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            return list(value)
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape) and isinstance(bound.value, (list, tuple)):
                return list(bound.value)
            constant = self.facts.constant(expr.value)
            if constant is not None and expr.value not in self.env:
                return self.elements(constant, depth + 1)
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Multiply:
            for seq, count in ((expr.left, expr.right), (expr.right, expr.left)):
                items = self.elements(seq, depth + 1)
                n = self.integer(count, depth + 1)
                if items is not None and n is not None and len(items) * max(n, 0) <= 4 * UNROLL_LIMIT:
                    return items * max(n, 0)
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Add:
            left, right = self.elements(expr.left, depth + 1), self.elements(expr.right, depth + 1)
            return None if left is None or right is None else left + right
        if type(expr) is cst.Call:
            func = dotted_name(expr.func) or ""
            func = func.rsplit(".", 1)[-1] if func.startswith(("tqdm.", "builtins.")) else func
            args = [a.value for a in expr.args if a.keyword is None and not a.star]
            if func == "range" and 1 <= len(args) <= 3:
                values = [self.integer(a, depth + 1) for a in args]
                if any(v is None for v in values) or (len(values) == 3 and values[2] == 0):
                    return None
                rng = range(*values)
                return list(rng) if len(rng) <= 4 * UNROLL_LIMIT else None
            if func in ("enumerate",) and args:
                items = self.elements(args[0], depth + 1)
                start = self.integer(args[1], depth + 1) if len(args) > 1 else 0
                return None if items is None or start is None else [(start + i, x) for i, x in enumerate(items)]
            if func == "zip" and args:
                lists = [self.elements(a, depth + 1) for a in args]
                return None if any(x is None for x in lists) else [tuple(t) for t in zip(*lists)]
            if func in ("list", "tuple", "reversed", "sorted", "tqdm", "iter") and args:
                items = self.elements(args[0], depth + 1)
                if items is None:
                    return None
                if func == "reversed":
                    return items[::-1]
                if func == "sorted":
                    try:
                        return sorted(items)
                    except TypeError:
                        return items
                return items
            if func == "trange" and args:
                return self.elements(cst.Call(func=cst.Name("range"), args=expr.args), depth + 1)
        if type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice:
            items = self.elements(expr.value, depth + 1)
            sl = expr.slice[0].slice
            bounds = [None if b is None else self.integer(b, depth + 1) for b in (sl.lower, sl.upper, sl.step)]
            given = [b for b in (sl.lower, sl.upper, sl.step) if b is not None]
            if items is not None and all(bounds[i] is not None or x is None for i, x in
                                         enumerate((sl.lower, sl.upper, sl.step))) and given is not None:
                return items[slice(*bounds)]
        return None

    def length(self, expr: cst.BaseExpression, depth: int = 0) -> int | None:
        """Iterations of ``for _ in expr`` when known without the elements."""
        if depth > 6:
            return None
        items = self.elements(expr, depth + 1)
        if items is not None:
            return len(items)
        if self._given_lengths and type(expr) in (cst.Name, cst.Attribute):
            given = self._given_lengths.get(cst_expression_text(expr))
            if given is not None:
                return given
        entries = dict_view_length(expr, self.facts)
        if entries is not None and not (type(expr) is cst.Name and expr.value in self.env):
            return entries
        if type(expr) is cst.Call:
            func = dotted_name(expr.func) or ""
            args = [a.value for a in expr.args if a.keyword is None and not a.star]
            if func in ("range", "trange") and 1 <= len(args) <= 3:
                values = [self.integer(a, depth + 1) for a in args]
                if any(v is None for v in values) or (len(values) == 3 and values[2] == 0):
                    return None
                return len(range(*values))
            if func in ("enumerate", "list", "tuple", "reversed", "sorted", "tqdm", "tqdm.tqdm", "iter") and args:
                return self.length(args[0], depth + 1)
            if func == "zip" and args:
                lengths = [self.length(a, depth + 1) for a in args]
                return None if any(n is None for n in lengths) else min(lengths)
        if type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice:
            total = self.length(expr.value, depth + 1)
            sl = expr.slice[0].slice
            if total is not None and sl.step is None:
                lower = 0 if sl.lower is None else self.integer(sl.lower, depth + 1)
                upper = total if sl.upper is None else self.integer(sl.upper, depth + 1)
                if lower is not None and upper is not None:
                    return len(range(total)[lower:upper])
                chunk = _chunk_size(sl)
                if chunk is not None:  # XS[c:c + K]
                    value = self.integer(chunk, depth + 1)
                    return None if value is None else min(value, total)
        layers = self._module_list_length(expr)
        if layers is not None:
            return layers
        value = self.value(expr)
        if isinstance(value, Shape):
            if value.kind == "container":
                return len(value.elements)
            if value.is_tensor and value.dims:
                return value.dims[0]
            if value.kind == "python" and isinstance(value.value, (list, tuple, str)):
                return len(value.value)
        return None

    def _is_layer(self, expr: cst.BaseExpression) -> bool:
        """Is ``expr`` one decoder layer (``model.model.layers[i]``)?"""
        ref = self.value(expr)
        return (
            isinstance(ref, ModuleRef)
            and len(ref.path) >= 2
            and not isinstance(ref.path[-1], str)
            and ref.path[-2] in LAYER_LISTS
        )

    def _module_list_length(self, expr: cst.BaseExpression) -> int | None:
        """``model.model.layers`` / ``model.transformer.h``: the model's layer count."""
        value = self.value(expr)
        if isinstance(value, ModuleRef) and value.path and value.path[-1] in LAYER_LISTS:
            return self.dims_of(self._model_of(expr)).n_layers
        return None

    def _model_of(self, expr: cst.BaseExpression) -> str:
        name = dotted_name(expr) or ""
        root, dot, rest = name.partition(".")
        if root in self._model_aliases:
            name = self._model_aliases[root] + dot + rest
        for attribute, model in self._attribute_models.items():  # `self.model.layers` -> `model.layers`
            if name == attribute or name.startswith(attribute + "."):
                name = model + name[len(attribute):]
        for model in sorted(self.facts.models, key=len, reverse=True):
            if name == model or name.startswith(model + "."):
                return model
        return self.model_names[0]

    def integer(self, expr: cst.BaseExpression, depth: int = 0) -> int | None:
        if depth > 8:
            return None
        value = _literal(expr)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape):
                return bound.value if isinstance(bound.value, int) and not isinstance(bound.value, bool) else None
            constant = self.facts.constant(expr.value)
            return None if constant is None else self.integer(constant, depth + 1)
        if type(expr) is cst.Call and dotted_name(expr.func) == "len" and len(expr.args) == 1:
            return self.length(expr.args[0].value, depth + 1)
        if type(expr) is cst.Call and dotted_name(expr.func) in ("max", "min") and expr.args:
            # max(LAYERS), min(a, b): skip-insertion caches `range(max(LAYERS))`
            args = [a for a in expr.args if a.keyword is None]
            if len(args) != len(expr.args) or any(a.star for a in args):
                return None
            if len(args) == 1:
                values = self.elements(args[0].value, depth + 1)
            else:
                values = [self.integer(a.value, depth + 1) for a in args]
            if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
            return max(values) if dotted_name(expr.func) == "max" else min(values)
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name:
            # `range(self.n_layers)`: what the object was given (see assign)
            state = self.env.get(f"{expr.value.value}.{expr.attr.value}")
            if isinstance(state, Shape):
                return state.value if isinstance(state.value, int) and not isinstance(state.value, bool) else None
        if type(expr) is cst.Attribute and expr.attr.value in _LAYER_COUNT_ATTRS:
            root = dotted_name(expr) or ""
            if any(root.startswith(m + ".") for m in self.facts.models) and ".config." in f".{root}":
                return self.dims_of(self._model_of(expr)).n_layers
        if type(expr) is cst.BinaryOperation:
            return arithmetic(expr, lambda operand: self.integer(operand, depth + 1))
        return None

    # -- values ----------------------------------------------------------------------------
    def value(self, expr: cst.BaseExpression) -> Shape | ModuleRef:
        forward = self.forward
        if forward is not None:
            dims, seq, batch, new_tokens = forward.dims, forward.seq, forward.batch, forward.max_new_tokens
        else:  # client code: the request's model (or the first), a default prompt, one row
            dims = self.request.dims if self.request is not None else self._default_dims
            seq, batch, new_tokens = self._seq_len, 1, None
        env = self.env
        # value_of reads from env only the names the expression spells: with their values
        # (and the types inside them: 1 == 1.0 == True), they are the key of a value
        # shared by the versions of the tree that hold the expression
        target, names = _expression_key(expr)
        read = tuple([(name, _exact(env.get(name, _UNBOUND))) for name in names])
        try:
            return _value_in(target, dims, self._model_key, seq, batch, new_tokens, read)
        except TypeError:  # a value that does not hash (a list)
            return value_of(
                expr, dims, model_name=self.model_names, seq_len=seq, batch=batch,
                env=env, max_new_tokens=new_tokens,
            )

    def shape(self, expr: cst.BaseExpression) -> Shape:
        value = self.value(expr)
        if isinstance(value, ModuleRef):
            return Shape.unknown("a module")
        return value

    def constant_value(self, expr: cst.BaseExpression) -> Any:
        value = _literal(expr)
        if value is not NO_VALUE:
            return value
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape) and bound.kind in ("python", "container") and bound.value is not None:
                return bound.value
            if expr.value not in self.env:
                constant = self.facts.constant(expr.value)
                if constant is not None:
                    return self.constant_value(constant)
        if type(expr) in (cst.Attribute, cst.Subscript):
            # `cfg.prompt` / `CONFIG["prompt"]`: a config object spelled out in the script
            entry = config_entry(expr, self.facts)
            if entry is not None:
                return self.constant_value(entry)
        if type(expr) is cst.Subscript and len(expr.slice) == 1:
            item = expr.slice[0].slice
            if type(item) is cst.Slice:  # PROMPTS[:2]
                items = self.elements(expr)
                return items if items is not None else NO_VALUE
            if type(item) is cst.Index:  # PROMPTS[2]
                index = self.integer(item.value)
                items = self.elements(expr.value)
                if index is not None and items is not None and -len(items) <= index < len(items):
                    return items[index]
        if type(expr) is cst.FormattedString:
            return self._formatted(expr)
        return NO_VALUE

    def _formatted(self, expr: cst.FormattedString) -> Any:
        """An f-string whose fields are all known: ``f"Number {i} is"`` in an unrolled loop."""
        if "b" in expr.prefix.lower():
            return NO_VALUE
        out = []
        for part in expr.parts:
            if type(part) is cst.FormattedStringText:
                if "\\" in part.value:
                    return NO_VALUE
                out.append(part.value.replace("{{", "{").replace("}}", "}"))
                continue
            if part.format_spec or part.conversion not in (None, "s"):
                return NO_VALUE
            value = self.constant_value(part.expression)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                return NO_VALUE
            out.append(str(value))
        return "".join(out)

    def storage_of(self, expr: cst.BaseExpression) -> _Storage | None:
        """The module output a view expression shares its storage with (``storage`` mode)."""
        node = expr
        while True:
            if type(node) is cst.Subscript:
                if not all(self._basic_index(e.slice) for e in node.slice):
                    return None
                node = node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                method = node.func.attr.value
                if method == "to" and not all(
                    type(a.value) is cst.SimpleString and "cpu" in a.value.value for a in node.args
                ):
                    return None
                if method not in _VIEW_METHODS and method != "to":
                    return None
                node = node.func.value
            elif type(node) is cst.Attribute and node.attr.value in ("output", "input"):
                forward = self.forward
                if forward is None:
                    value = self.value(node)
                else:  # an invoke's value is a view of the whole batch's
                    seen, forward.batch = forward.batch, forward.rows
                    try:
                        value = self.value(node)
                    finally:
                        forward.batch = seen
                if not (isinstance(value, Shape) and value.is_tensor):
                    return None
                ref = self.value(node.value)
                key = None
                if forward is not None and isinstance(ref, ModuleRef) and None not in ref.path:
                    key = (forward.serial, ref.dotted(), node.attr.value)
                return _Storage(value, key, forward.times if forward is not None else 1.0)
            elif type(node) is cst.Attribute and node.attr.value in ("T", "mT", "data"):
                node = node.value
            elif type(node) is cst.Name:
                return self.storage.get(node.value)
            else:
                return None

    def _bound_storage(self, expr: cst.BaseExpression) -> _Storage | None:
        """What a name bound to ``expr`` is a view of, for :meth:`sent` to read later —
        which it does only in ``storage`` mode: in ``compact`` mode nothing else reads
        ``self.storage``, so the walk does not work it out (two shape evaluations)."""
        return self.storage_of(expr) if self.view_mode == "storage" else None

    def _basic_index(self, item: cst.BaseSlice) -> bool:
        if type(item) is cst.Slice:
            return True
        value = item.value
        if type(value) in (cst.Integer, cst.Ellipsis) or (
            type(value) is cst.Name and value.value == "None"
        ):
            return True
        if type(value) is cst.UnaryOperation:
            return type(value.expression) is cst.Integer
        if type(value) in (cst.Name, cst.Attribute, cst.BinaryOperation, cst.Subscript, cst.Call):
            shape = self.value(value)  # `rows[1]`, `len(prompts) - 1`: a Python int selects too
            return isinstance(shape, Shape) and shape.kind == "python" and shape.dtype in ("int", "number")
        return False

    def sent_size(self, expr: cst.BaseExpression) -> tuple[int | None, Shape]:
        """(bytes the server's torch.save writes for ``expr``, its shape)."""
        size, shape, _ = self.sent(expr)
        return size, shape

    def sent(self, expr: cst.BaseExpression) -> tuple[int | None, Shape, _Storage | None]:
        """:meth:`sent_size` and, when the size is a storage the value is a view of
        (``storage`` mode), that storage: torch.save writes a storage once per result."""
        shape = self.shape(expr)
        if shape.kind == "unknown" and type(expr) is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value == "item":  # whatever it was, .item() is a Python number
                shape = Shape.python("number")
        size = serialized_size(shape)
        if self.view_mode == "storage" and shape.is_tensor:
            storage = self.storage_of(expr)
            whole = storage.shape if storage is not None else None
            if whole is not None and whole.numel and shape.numel is not None and whole.numel > shape.numel:
                return whole.numel * dtype_size(whole.dtype) + TENSOR_OVERHEAD, shape, storage
        return size, shape, None

    # -- simple statements -----------------------------------------------------------------
    def small(self, small: cst.BaseSmallStatement, times: float) -> None:
        if self._library_paths and self.request is None:
            self._library_requests(small, times)
        self._follow_calls(small, times)
        if type(small) is cst.Assign:
            value = small.value
            for target in small.targets:
                self.assign(target.target, value, times)
        elif type(small) is cst.AnnAssign and small.value is not None:
            self.assign(small.target, small.value, times)
        elif type(small) is cst.AugAssign:
            if type(small.target) is cst.Name:
                name = small.target.value
                if name in self.env:
                    combined = cst.BinaryOperation(
                        left=small.target, operator=_binary_of(small.operator), right=small.value
                    )
                    new = self.value(combined)
                    self.env[name] = new
        elif type(small) is cst.Expr and type(small.value) is cst.Call:
            self.call_statement(small.value, times)
        elif type(small) is cst.Del:
            for name in target_names(small.target):
                self.env.pop(name, None)
                self.storage.pop(name, None)

    def _frame_request(self) -> _Request | None:
        """The current request, if the code runs in its frame (a called function's
        locals are not the request's: what it saves is not returned)."""
        request = self.request
        if request is not None and len(self._call_stack) == request.depth:
            return request
        return None

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, times: float) -> None:
        request = self._frame_request()
        if type(target) is cst.Name:
            name = target.value
            if request is None and self.request is not None and is_save_call(value):
                # saved in a called function's frame: comes back only if returned (see _follow_calls)
                size, shape = self.sent_size(unsave(value))
                self._inner_saves[name] = (size, None if size is not None else _unknown_download(name, unsave(value), shape))
            if request is not None and type(value) is cst.Call and id(value) in self._returned_saves:
                self._bind(name, self.value(value))
                request.save(name, *self._returned_saves[id(value)])
                return
            if request is not None and is_save_call(value):
                inner = unsave(value)
                if _is_empty_container(inner):
                    self._bind(name, Shape.container([]))
                    request.containers[name] = 0.0
                    return
                size, shape = self.sent_size(inner)
                self._bind(name, shape)
                storage = self._bound_storage(inner)
                if storage is not None:
                    self.storage[name] = storage
                request.save(name, size, None if size is not None else _unknown_download(name, inner, shape))
                if size is not None and shape.kind == "container" and not shape.is_tensor:
                    # a client dict of lists carried in and saved: what the request adds
                    # to its lists comes back with it
                    request.containers[name] = float(request.saved.pop(name) - 4)
                return
            if request is not None and _is_old_api_container(value):
                self._bind(name, Shape.container([]))
                request.containers[name] = 0.0
                return
            literal = _literal_shape(value)
            if literal is not None:
                self._bind(name, literal)
                return
            if type(value) is cst.Call and dotted_name(value.func) in ("list", "tuple", "sorted", "reversed"):
                items = self.elements(value)  # `items = list(range(100))`: still known
                if items is not None:
                    self._bind(name, _python_shape(items, True))
                    return
            if type(value) is cst.Call and dotted_name(value.func) in ("len", "max", "min"):
                number = self.integer(value)  # `N_LAYERS = len(model.transformer.h)`: 12, not just an int
                if number is not None:
                    self._bind(name, _python_shape(number, True))
                    return
            bound = self.value(value)
            if not _is_container(bound) and _is_display(value):
                # `templates = [lambda ...]`: its elements unknown, its length known
                bound = Shape.container([self.shape(e.value) for e in value.elements])
            elif isinstance(bound, Shape) and bound.kind == "unknown" and _copies_a_sequence(value):
                # `items = list(rows)`, rows of a given length: the copy has it too
                n = self.length(value)
                if n is not None and n <= TRACKED_LENGTH:
                    bound = Shape.container([Shape.unknown("an element of a sequence")] * n)
            storage = self._bound_storage(value)
            self._bind(name, bound)
            if storage is not None:
                self.storage[name] = storage
            return
        if type(target) in (cst.Tuple, cst.List):
            pairs = _pairwise(target, value)
            if pairs is not None:  # `prompts, labels = [], []`: each name its own value
                for sub, element in pairs:
                    self.assign(sub, element, times)
                return
            bound = self.value(value)
            for index, element in enumerate(target.elements):
                sub = element.value
                if type(sub) is cst.Name:
                    if isinstance(bound, Shape) and bound.kind == "container" and index < len(bound.elements):
                        self._bind(sub.value, bound.elements[index])
                    else:
                        self._bind(sub.value, Shape.unknown("unpacked value"))
            return
        if type(target) is cst.Attribute and type(target.value) is cst.Name:
            # `self.clean = clean`: the object's state, read as `self.clean` (see _fingerprint)
            self._bind(f"{target.value.value}.{target.attr.value}", self.value(value))
            return
        if type(target) is cst.Subscript and type(target.value) is cst.Name and request is not None:
            name = target.value.value
            if name in request.containers:
                key = target.slice[0].slice if len(target.slice) == 1 else None
                key_shape = self.value(key.value) if type(key) is cst.Index else None
                self._add_to(request, name, unsave(value), _key_size(key_shape) if key_shape is not None else 9, times)

    def call_statement(self, call: cst.Call, times: float) -> None:
        func = call.func
        if (
            self.forward is not None
            and type(func) is cst.Attribute
            and func.attr.value == "skip"
            and self._is_layer(func.value)
        ):
            self.forward.skipped += times  # one layer evaluation less
            return
        if type(func) is not cst.Attribute:
            return
        if type(func.value) is not cst.Name:
            self._nested_call(call, times)
            return
        name, method = func.value.value, func.attr.value
        if method in _IN_PLACE and _is_container(self.env.get(name)):
            self.env[name] = self._changed_container(name, self.env[name], method, call, times)
        request = self._frame_request()
        if request is None:
            return
        if name not in request.containers or method not in _CONTAINER_METHODS or not call.args:
            return
        args = [a.value for a in call.args]
        if method == "append" or method == "add":
            self._add_to(request, name, unsave(args[0]), 0, times)
        elif method == "insert" and len(args) >= 2:
            self._add_to(request, name, unsave(args[1]), 0, times)
        elif method == "setdefault" and len(args) >= 2:
            self._add_to(request, name, unsave(args[1]), _key_size(self.value(args[0])), times)
        elif method in ("extend", "update"):
            values = unsave(args[0])
            size, shape = self.sent_size(values)
            if size is None:
                request.add(name, None, 0, times, unknown=_unknown_download(name, values, shape))
            else:  # the elements of a container, without its own framing
                request.add(name, max(size - 4, 0), 0, times)

    def _nested_call(self, call: cst.Call, times: Number | Count) -> None:
        """``acts["early"].append(x)``: a list inside a saved container grows it."""
        receiver, method = call.func.value, call.func.attr.value
        while type(receiver) is cst.Subscript:
            receiver = receiver.value
        request = self._frame_request()
        if type(receiver) is not cst.Name or request is None or receiver.value not in request.containers:
            return
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if method in ("append", "add") and len(args) == 1:
            self._add_to(request, receiver.value, unsave(args[0]), 0, times)

    def _changed_container(self, name: str, bound: Shape, method: str, call: cst.Call, times: float) -> Shape:
        """What ``name`` holds after ``times`` calls ``name.<method>(...)`` that change it
        in place (``prompts = []``, then ``prompts.append(p)`` in a loop): its length
        follows what is added where the walk knows how often that runs, and its values
        where they are constants; else it is unknown, and a loop over it runs an assumed
        number of times (with a note) rather than none."""
        unknown = Shape.unknown(f"`{name}` is changed in place by code run an unknown number of times")
        if method == "clear":
            return _python_shape([], True)
        if method in ("sort", "reverse"):  # the same elements in another order
            return Shape.container(bound.elements)
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if self._guesses or not is_known(times) or len(args) != (2 if method == "insert" else 1):
            return unknown
        if method == "extend":
            added, count = self.elements(args[0]), self.length(args[0])
        elif method in ("append", "add", "insert"):
            constant = self.constant_value(args[-1])
            added, count = (None if constant is NO_VALUE else [constant]), 1
        else:  # pop, remove, update, ...: what goes is not followed
            return unknown
        if count is None or len(bound.elements) + times * count > TRACKED_LENGTH:
            return unknown
        if method != "insert" and added is not None and times == 1 and isinstance(bound.value, tuple):
            return _python_shape([*bound.value, *added], True)  # constants: `for p in prompts` unrolls them
        return Shape.container(bound.elements + self._added_shapes(method, args[-1], count) * _round(times))

    def _added_shapes(self, method: str, value: cst.BaseExpression, count: int) -> tuple[Shape, ...]:
        """The shapes of the ``count`` elements one call ``<list>.<method>(value)`` adds
        (so that the list's size is known where they are: a list saved whole)."""
        shape = self.shape(unsave(value))
        if method != "extend":
            return (shape,)
        if shape.kind == "container" and len(shape.elements) == count:
            return shape.elements
        return (Shape.unknown("an element of a value the list was extended with"),) * count

    def _add_to(self, request: _Request, name: str, value: cst.BaseExpression, key: int, times: float) -> None:
        """``times`` values of ``value`` go into the saved container ``name``."""
        size, shape, storage = self.sent(value)
        unknown = None if size is not None else _unknown_download(name, value, shape)
        request.add(name, size, key, times, storage, unknown)

    def _follow_calls(self, small: cst.CSTNode, times: float) -> None:
        """Walk same-file functions called by this statement, at the call."""
        if not self._function_names:
            return
        calls = self._calls_memo.get(id(small))
        if calls is None:
            calls = self._calls_memo[id(small)] = _calls(small, self._function_names, self._instances)
        wrappers = retry_wrappers(self.facts)
        for written, loops in calls:
            call = unwrapped_call(written, wrappers)  # `with_retries(run, x)` runs `run(x)` once when nothing fails
            name = _called_name(call, self._instances)
            bound = name in self._methods or name in self._constructors
            func = (self._methods.get(name) or self._constructors.get(name)) if bound else (
                self.facts.functions.get(name) if name else None)
            if func is None or name in self._call_stack or len(self._call_stack) >= CALL_DEPTH:
                continue
            self._called.add(func.name.value if bound else name)
            saved = (dict(self.env), dict(self.storage))
            aliases = dict(self._model_aliases)
            self._bind_arguments(func, call, bound)
            self._call_stack.append(name)
            trips = self._comprehension_trips(loops)
            outer, self._inner_saves = self._inner_saves, {}
            with contextlib.nullcontext() if is_known(trips) else self._guessing():
                self.suite(func.body.body, times * trips)
            returned = returned_name(func)
            if returned in self._inner_saves:
                # a value the function saved and returns: in the request's frame, the name
                # bound to it comes back with the request (see assign)
                self._returned_saves[id(written)] = self._inner_saves[returned]
            self._inner_saves = outer
            self._call_stack.pop()
            self._model_aliases = aliases
            if self.request is None:
                self._restore_after_call(func, *saved)

    def _comprehension_trips(self, loops: tuple[cst.CompFor, ...]) -> Number | Count:
        """How often a call inside comprehensions of ``loops`` (their ``for`` clauses)
        runs: a Count where one of their lengths is not known."""
        trips: Number | Count = 1.0
        for clause in loops:
            length = self.length(clause.iter)
            trips *= self.loop_symbol(clause) if length is None else length
        return trips

    def _restore_after_call(self, func: cst.FunctionDef, env: dict, storage: dict) -> None:
        """The caller's names again after a call of ``func``: its locals go, but a list
        of the caller's that it changed in place (``prompts.append(...)``) stays changed."""
        local = self._locals_of(func)
        for name, value in self.env.items():
            before = env.get(name)
            if value is not before and name not in local and _is_container(before):
                env[name] = value
            elif value is not before and "." in name:
                env[name] = value  # `self.clean = clean`: the object keeps what a method gave it
        self.env, self.storage = env, storage

    def _locals_of(self, func: cst.FunctionDef) -> frozenset[str]:
        known = self._work_memo.get(("locals", id(func)))
        if known is None:
            params = {p.name.value for p in all_params(func.params)}
            known = self._work_memo[("locals", id(func))] = frozenset(params | set(collect(func.body).binds))
        return known

    def _bind_arguments(self, func: cst.FunctionDef, call: cst.Call, bound: bool = False) -> None:
        params = [p for p in func.params.params][1 if bound else 0 :]  # a method's `self` is not an argument
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
        for index, param in enumerate(params):
            name = param.name.value
            arg = positional[index].value if index < len(positional) else None
            if name in keywords:
                arg = keywords[name].value
            if arg is None and param.default is not None:
                arg = param.default
            self._alias_model(name, arg)
            if arg is None:
                self.env[name] = Shape.unknown("a parameter")
                continue
            literal = self.constant_value(arg)
            self.env[name] = _python_shape(literal, True) if literal is not NO_VALUE else self.value(arg)

    def _alias_model(self, param: str, arg: cst.BaseExpression | None) -> None:
        """``param`` names the script's model ``arg`` names, when ``arg`` is one (or a
        parameter that already does); any other argument ends an older alias of it."""
        model = None
        if isinstance(arg, cst.Name):
            model = self._model_aliases.get(arg.value, arg.value if arg.value in self.facts.models else None)
        if model is not None:
            self._model_aliases[param] = model
        else:
            self._model_aliases.pop(param, None)

    # -- library functions that send requests ---------------------------------------------------
    def _library_requests(self, small: cst.CSTNode, times: float) -> None:
        """Calls of library functions that send requests of their own (nnterp's helpers),
        outside any request: each is a request estimate of its own."""
        imports = self.facts.imports
        for call in find_nodes(small, lambda node: type(node) is cst.Call):
            spec = library_request(qualify(call.func, imports))
            if spec is None:
                continue
            arguments = spec.arguments(call)
            if arguments is None or call_remote_flag(call, self.facts).state is Remote.NO:
                continue
            self._library_request(call, spec, arguments, times)

    def _library_request(self, call: cst.Call, spec: LibraryRequest, arguments: dict, times: float) -> None:
        model = dotted_name(call.args[0].value) if call.args and not call.args[0].keyword else None
        model = model if model in self.facts.models else self.model_names[0]
        dims = self.dims_of(model)
        prompts_arg = arguments.get("prompts", arguments.get("prompt"))
        prompts = self._prompt_count(prompts_arg)
        seq = self.input_rows(prompts_arg, quiet=True)[1] if prompts_arg is not None else self._seq_len
        batch_size = spec.batch_size
        if "batch_size" in arguments:
            batch_size = self.integer(arguments["batch_size"]) or batch_size
        one_session = spec.session_default
        if spec.session_flag in arguments:
            one_session = self.constant_value(arguments[spec.session_flag]) is not False
        layers = self._asked_layers(arguments.get("layers"), dims)
        requests = request_count(prompts, batch_size, one_session)
        passes = batch_count(prompts, batch_size)
        reached = max(layers) + 1 if spec.stops_after_last_layer and layers else dims.n_layers
        if spec.returns is Returns.LAST_TOKEN_ACTIVATIONS:
            result = Shape.tensor((len(layers), prompts, dims.hidden_size), dims.dtype)
        else:
            result = Shape.tensor((prompts, dims.vocab_size), dims.dtype)
        size = serialized_size(result) or 0
        entry = self._by_block.get(id(call))
        if entry is None:
            method = "session" if one_session and spec.batch_size is not None else "trace"
            entry = RequestEstimate(block=None, model=model, method=method, library_call=call)
            self._by_block[id(call)] = entry
            self.requests.append(entry)
        rows = prompts / passes
        flops, seconds = pass_cost(
            dims, rows, seq, reached / dims.n_layers, setting(self.options, "throughput"),
            setting(self.options, "memory-bandwidth"),
        )
        self._sent += _round(times * requests)
        entry.count += _round(times * requests)
        entry.download_bytes += _round(times * (RESULT_BASE * requests + size))
        entry.forward_passes += _round(times * passes)
        entry.layer_evaluations += _round(times * passes * reached)
        entry.compute_flops += times * passes * flops
        entry.server_seconds += times * passes * seconds
        entry.max_server_seconds = self._longer(entry.max_server_seconds, passes * seconds / requests)
        entry.saved = {"result": size}

    def _prompt_count(self, expr: cst.BaseExpression | None) -> int:
        value = self.constant_value(expr) if expr is not None else NO_VALUE
        if isinstance(value, str):
            return 1
        count = self.length(expr) if expr is not None else None
        if count is None:
            count = self.unknown_trips
            self.note(f"`{_short(expr) if expr is not None else 'prompts'}` has an unknown length: {count} prompts assumed")
        return max(count, 1)

    def _asked_layers(self, expr: cst.BaseExpression | None, dims: ModelDims) -> list[int]:
        """The layers a helper reads: its `layers` argument, or all of them."""
        value = self.constant_value(expr) if expr is not None else None
        if value is NO_VALUE and expr is not None and type(expr) is cst.Call:
            value = self.elements(expr)  # list(range(0, 80, 10))
        if isinstance(value, (list, tuple, range)) and value and all(isinstance(v, int) for v in value):
            return [v % dims.n_layers for v in value]
        return list(range(dims.n_layers))

    # -- blocks -------------------------------------------------------------------------------
    def local_block(self, block: Block) -> None:
        """A local trace: free, but the names it saves are bound on the client."""
        for name in block.saved_names:
            self.env[name] = Shape.unknown("saved by a local trace")

    def remote_block(self, block: Block, times: float) -> None:
        request = _Request(self, block)
        self.request = request
        self._request_runs = times
        saved_env = dict(self.env)
        try:
            if block.method == "session":
                request.profile = self._session_body(block)
            else:
                self.inner_block(block, 1)
        finally:
            self.request = None
            self.forward = None
            self._request_runs = 1
        entry = self._by_block.get(id(block.node))
        if entry is None:
            entry = RequestEstimate(block=block, model=block.model, method=block.method)
            self._by_block[id(block.node)] = entry
            self.requests.append(entry)
        upload, upload_raw = self._upload(block, saved_env)
        sizes = request.sizes()
        download = RESULT_BASE + sum(size + len(name) + NAME_OVERHEAD for name, size in sizes.items())
        count = times
        self._sent += _round(count)
        entry.count += _round(count)
        entry.upload_bytes += _round(count * upload)
        entry.upload_raw_bytes += _round(count * upload_raw)
        entry.download_bytes += _round(count * download)
        entry.forward_passes += _round(count * request.forward_passes)
        entry.layer_evaluations += _round(count * request.layer_evaluations)
        entry.compute_flops += count * request.flops
        entry.server_seconds += count * request.seconds
        entry.max_server_seconds = self._longer(entry.max_server_seconds, request.seconds)
        entry.saved = sizes
        for value, n in request.unknown.items():
            entry.unknown_downloads[value] = entry.unknown_downloads.get(value, 0) + _round(count * n)
        if request.profile is not None:
            entry.profile = request.profile
        # what comes back: saved names hold their values on the client
        env = saved_env
        for name in request.saved_names():
            env[name] = self.env.get(name, Shape.unknown("saved"))
        self.env = env
        for name in list(self.storage):
            if name not in env:
                self.storage.pop(name, None)
        if not request.forward_passes and count:
            self.note(
                f"`{_short(block.call)}` runs no trace or generate the cost model can follow (a function "
                "of another file, say): its forward passes are not counted"
            )

    def _longer(self, a: Number | Count, b: Number | Count) -> Number | Count:
        """The longer of two server times, one of which may depend on a loop of unknown
        length: compared at the walk's assumed length."""
        if is_known(a) and is_known(b):
            return max(a, b)
        return a if self.assumed(a) >= self.assumed(b) else b

    def assumed(self, value: Number | Count) -> Number:
        """``value`` with every loop of unknown length taken at the assumed length (for a
        plan that needs a number: the caller says it assumed one)."""
        return value if is_known(value) else value.at(self.unknown_trips)

    def _session_body(self, block: Block) -> SessionProfile:
        request = self.request
        body = list(block.node.body.body)
        loop_index = None
        for index in range(len(body) - 1, -1, -1):
            if type(body[index]) is cst.For and any(
                b.method in ("trace", "generate") for b in self.facts.blocks_within(body[index])
            ):
                loop_index = index
                break
        profile = SessionProfile()
        assumed: dict[UnknownLoop, None] = {}
        for index, stmt in enumerate(body):
            before = request.seconds
            self._ran(stmt, 1)
            self.statement(stmt, 1)
            spent = request.seconds - before
            if index == loop_index:
                trips = self.length(stmt.iter)
                profile.loop = stmt
                profile.trips = trips
                spent = _per_iteration(spent, trips if trips is not None else self.loop_symbol(stmt))
            if not is_known(spent):
                assumed.update(dict.fromkeys(spent.loops))
            if loop_index is None or index < loop_index:
                profile.prefix_seconds += self.assumed(spent)
            elif index == loop_index:
                profile.iteration_seconds = self.assumed(spent)
            else:
                profile.suffix_seconds += self.assumed(spent)
        profile.assumed = tuple(assumed)
        return profile

    def inner_block(self, block: Block, times: float) -> None:
        """A trace or generate inside the current request (or the request itself)."""
        request = self.request
        if block.method == "session":  # a nested session: just its body
            self.suite(block.node.body.body, times)
            return
        dims = self.dims_of(block.model)
        body = block.node.body.body
        rows, seq = self.prompt_rows(block.call)
        invoked = self._invokes(body, 1)
        if invoked[0]:
            rows = invoked[0] + (rows if rows else 0)
            seq = max(seq, invoked[1])
        rows = max(rows, 1)
        new_tokens = None
        passes = 1
        tracer = block.tracer_name
        stop = _stop_index(block.node, tracer)
        if block.method == "generate" and stop is None:
            new_tokens = self._max_new_tokens(block.call)
            passes = new_tokens
        forward = self.forward = _Forward(dims, block.model, seq, rows, new_tokens, rows=rows, times=times)
        if tracer is not None:
            self.env.pop(tracer, None)
        self.suite(body, times)
        n = dims.n_layers
        # layers one run of the trace reaches: all of them each pass, or up to the
        # furthest module read before `tracer.stop()`
        reached = passes * n if stop is None else self._reach(body[:stop] if stop >= 0 else body, n)
        self.forward = None
        evaluations = times * reached - forward.skipped
        if is_known(evaluations):
            evaluations = max(evaluations, 0.0)
        request.forward_passes += times * passes
        request.layer_evaluations += evaluations
        share = self._share(evaluations, times * passes * n) if times and n else 1.0
        request.add_passes(dims, rows, seq, passes, times, share)

    def _share(self, part: Number | Count, whole: Number | Count) -> float:
        """``part / whole``, a share (of layer evaluations): a number even where both
        depend on loops of unknown length (taken at the assumed length when the one is
        not a multiple of the other)."""
        try:
            share = part / whole
        except ValueError:
            share = self.assumed(part) / self.assumed(whole) if self.assumed(whole) else 1.0
        return share if is_known(share) else self.assumed(share)

    def _reach(self, statements, n: int) -> int:
        """Decoder layers the model evaluates before the code in ``statements`` is done
        with it: the furthest module it reads (or skips)."""
        reach = 0
        for stmt in statements:
            reach = max(reach, self._reach_node(stmt, n))
            if reach >= n:
                return n
        return reach

    def _reach_node(self, node: cst.CSTNode, n: int) -> int:
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return 0
        if type(node) is cst.For:
            best = self._reach_node(node.iter, n)
            elements = self.elements(node.iter)
            if elements is None or type(node.target) is not cst.Name:
                return max(best, self._reach_node(node.body, n))
            name = node.target.value
            ints = [e for e in elements if isinstance(e, int) and not isinstance(e, bool)]
            # the furthest module is read at an extreme of the loop variable
            candidates = list(dict.fromkeys(ints and [ints[0], ints[-1], min(ints), max(ints)]))
            if len(ints) != len(elements):
                candidates = elements[:1] + elements[-1:]
            had, value = name in self.env, self.env.get(name)
            try:
                for element in candidates:
                    self.env[name] = _python_shape(element, True)
                    best = max(best, self._reach_node(node.body, n))
            finally:
                if had:
                    self.env[name] = value
                else:
                    self.env.pop(name, None)
            return best
        best = 0
        if type(node) is cst.Attribute and node.attr.value in ("output", "input", "inputs", "skip"):
            ref = self.value(node.value)
            if isinstance(ref, ModuleRef):
                best = _layer_position(ref, node.attr.value, n)
        for child in content_children(node):
            best = max(best, self._reach_node(child, n))
            if best >= n:
                return n
        return best

    def _invokes(self, statements, times: float) -> tuple[int, int]:
        """(rows, longest prompt) of the invokes in a trace body."""
        rows, seq = 0, 0
        for stmt in statements:
            if type(stmt) is cst.With and self.facts.block_of(stmt) is None:
                item = _invoke_call(stmt)
                if item is not None:
                    r, s = self.prompt_rows(item)
                    rows += int(times * max(r, 1))
                    seq = max(seq, s)
                    continue
            if type(stmt) is cst.For:
                if not any(type(n) is cst.With and _invoke_call(n) is not None for n in _compound(stmt.body)):
                    continue  # no invoke in this loop
                elements = self.elements(stmt.iter)
                if elements is not None and len(elements) <= UNROLL_LIMIT:
                    # every invoke's own prompt (a literal, or an f-string of the loop variable)
                    saved = dict(self.env)
                    for element in elements:
                        self._bind_target(stmt.target, element)
                        r, s = self._invokes(stmt.body.body, times)
                        rows, seq = rows + r, max(seq, s)
                    self.env = saved
                    continue
                trips = len(elements) if elements is not None else self.length(stmt.iter)
                given = self.loop_symbol(stmt) if trips is None else trips
                trips = given if is_known(given) else None
                if trips is None:  # the batch's rows are a shape: a number is needed
                    trips = self.unknown_trips
                    self.note(f"the invokes of `for {code_of(stmt.target)} in {_short(stmt.iter)}`, a loop of unknown "
                              f"length in a trace, are taken as {trips} rows of its batch (its download and compute)")
                r, s = self._invokes(stmt.body.body, times * trips)
                rows, seq = rows + r, max(seq, s)
                continue
            body = getattr(stmt, "body", None)
            if type(body) is cst.IndentedBlock and type(stmt) not in (cst.FunctionDef, cst.ClassDef):
                r, s = self._invokes(body.body, times)
                rows, seq = rows + r, max(seq, s)
        return rows, seq

    def _max_new_tokens(self, call: cst.Call) -> int:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in ("max_new_tokens", "max_length"):
                value = self.integer(arg.value)
                if value is not None:
                    return max(value, 1)
        return int(setting(self.options, "max-new-tokens"))

    def prompt_rows(self, call: cst.Call, quiet: bool = False) -> tuple[int, int]:
        """(rows, tokens per row) of the input a trace/invoke call is given; (0, 0) for none.
        ``quiet``: no note for a prompt of unknown length."""
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if not args:
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in ("input_ids", "inputs", "input"):
                    args = [arg.value]
                    break
        if not args:
            return 0, 0
        return self.input_rows(args[0], quiet)

    def input_rows(self, expr: cst.BaseExpression, quiet: bool = False) -> tuple[int, int]:
        """(rows, tokens per row) of a model input: a prompt, a list of them, token ids."""
        value = self.constant_value(expr)
        if value is NO_VALUE and type(expr) is cst.Call:
            value = self.elements(expr)  # list(PROMPTS), sorted(...)
        if isinstance(value, str):
            return 1, self.tokens(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return len(value), max(self.tokens(v) for v in value)
        shape = self.value(expr)
        if isinstance(shape, Shape):
            if shape.kind == "python" and shape.dtype == "str" and isinstance(shape.value, str):
                return 1, self.tokens(shape.value)
            if shape.is_tensor and shape.dims and len(shape.dims) == 2 and shape.dtype.startswith("int"):
                return shape.dims[0], shape.dims[1]
        default = int(setting(self.options, "seq-len"))
        if not quiet:
            self.note(f"the prompt `{_short(expr)}` is not a literal string: {default} tokens assumed")
        return 1, default

    def tokens(self, text: str) -> int:
        table = self.options.cost.get("prompt-tokens")
        if isinstance(table, Mapping) and text in table:
            return int(table[text])
        if callable(table):
            return int(table(text))
        return max(1, round(len(text) / 4))

    @staticmethod
    def _client_tensors(env: dict, code: str):
        """(name, bytes) of the client tensors in ``env`` whose name ``code`` spells: the
        ones a block of that code may read (a cheap test before the walk of its names)."""
        for name, value in env.items():
            if isinstance(value, Shape) and value.kind != "python" and name in code and value.known:
                size = _tensor_bytes(value)
                if size:
                    yield name, size

    def _upload(self, block: Block, env: dict) -> tuple[int, int]:
        dims = self.dims_of(block.model)
        code = self._code_memo.get(id(block.node))
        if code is None:
            # from the code of the statement around it, which a version's code generation made
            ancestors = block.stmt.ancestors
            code = self._code_memo[id(block.node)] = code_in(
                block.node, ancestors[0] if ancestors else block.node, self.facts.module)
        tensors = 0
        for name, size in self._client_tensors(env, code):
            if name in block.names.reads:  # a name the block rebinds is still captured
                tensors += size + CLIENT_TENSOR_OVERHEAD
        code = len(code)
        generates = 1 if block.method == "generate" else 0  # measured: not inside a session
        sent = (UPLOAD_BASE + UPLOAD_PER_LAYER * dims.n_layers + CODE_COMPRESSION * code + tensors
                + UPLOAD_GENERATE * generates)
        raw = (UPLOAD_RAW_BASE + UPLOAD_RAW_PER_LAYER * dims.n_layers + code + tensors
               + UPLOAD_RAW_GENERATE * generates)
        return int(sent), int(raw)


class _Request:
    """What one request does: saves, containers, forward passes, compute, time."""

    def __init__(self, walker: Walker, block: Block) -> None:
        self.walker = walker
        self.block = block
        self.depth = len(walker._call_stack)  # calls deep the request's frame is
        self.dims = walker.dims_of(block.model)
        self.saved: dict[str, int] = {}
        self.containers: dict[str, float] = {}
        self.storages: set[tuple] = set()  # module outputs whose storage a container holds
        # values of unknown size it downloads, with how many times (one run of the request)
        self.unknown: dict[UnknownDownload, float] = {}
        self.forward_passes = 0.0
        self.layer_evaluations = 0.0
        self.flops = 0.0
        self.seconds = 0.0
        self.profile: SessionProfile | None = None
        options = walker.options
        self.throughput = setting(options, "throughput")
        self.memory_bandwidth = setting(options, "memory-bandwidth")

    def add_passes(
        self, dims: ModelDims, rows: int, seq: int, passes: int, times: float, layers: float = 1.0
    ) -> None:
        """``times`` runs of ``passes`` forward passes over ``rows`` × ``seq`` tokens, of
        which the share ``layers`` of the decoder-layer evaluations happen."""
        prefill, prefill_seconds = pass_cost(dims, rows, seq, layers, self.throughput, self.memory_bandwidth)
        step, step_seconds = pass_cost(dims, rows, 1, layers, self.throughput, self.memory_bandwidth)
        self.flops += times * (prefill + (passes - 1) * step)
        self.seconds += times * (prefill_seconds + (passes - 1) * step_seconds)

    def save(self, name: str, size: int | None, unknown: UnknownDownload | None = None) -> None:
        """``name`` comes back holding a value of ``size`` bytes; None: a size not known
        statically, of the value ``unknown`` describes (its framing is counted)."""
        self.containers.pop(name, None)
        self._forget_unknown(name)
        if size is None:
            self.unknown[unknown] = 1.0
            size = 0
        self.saved[name] = size

    def unsave(self, name: str) -> None:
        self.saved.pop(name, None)
        self.containers.pop(name, None)
        self._forget_unknown(name)

    def _forget_unknown(self, name: str) -> None:
        """``name`` is bound anew: what it held before does not come back."""
        if self.unknown:
            for value in [value for value in self.unknown if value.name == name]:
                del self.unknown[value]

    def add(
        self, name: str, size: int | None, key: int, times: float, storage: _Storage | None = None,
        unknown: UnknownDownload | None = None,
    ) -> None:
        """``times`` values of ``size`` bytes (None: not known statically, the value
        ``unknown`` describes) go into the saved container ``name``, under keys of ``key`` bytes."""
        if size is None:
            self.unknown[unknown] = self.unknown.get(unknown, 0.0) + times
            size = 0
        if storage is not None and storage.key is not None:
            # a view of one module output: its storage is written once per run of the
            # trace however many views of it the result holds (invokes' rows, positions)
            if storage.key not in self.storages:
                self.storages.add(storage.key)
                self.containers[name] += storage.times * max(size - SHARED_VIEW_OVERHEAD, 0)
            self.containers[name] += times * (SHARED_VIEW_OVERHEAD + key + 1)
            return
        self.containers[name] += times * (size + key + 1)

    def sizes(self) -> dict[str, int]:
        out = dict(self.saved)
        for name, size in self.containers.items():
            out[name] = _round(size) + 4
        return out

    def saved_names(self) -> list[str]:
        return list(self.saved) + list(self.containers)


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def pass_cost(
    dims: ModelDims, rows: float, seq: float, layers: float, throughput: float, memory_bandwidth: float
) -> tuple[float, float]:
    """(FLOPs, seconds) of one forward pass over ``rows`` × ``seq`` tokens evaluating the
    share ``layers`` of the decoder layers: the longer of its compute and of reading the
    weights once."""
    params = dims.n_params * _parameter_share(dims, layers)
    flops = 2.0 * params * rows * seq
    return flops, max(flops / throughput, params * dims.bytes_per_element / memory_bandwidth)


def _per_iteration(spent: Number | Count, trips: Number | Count) -> Number | Count:
    """What one iteration of a loop adds to ``spent``, its total over ``trips`` iterations."""
    if not trips:
        return spent
    try:
        return spent / trips
    except (ValueError, TypeError):  # not a multiple of N: the loop's time does not scale with it
        return spent


def _round(value: Number | Count) -> int | Count:
    return round(value) if not is_known(value) else int(round(value))


_LAYER_SHARES: dict[ModelDims, float] = {}


def _parameter_share(dims: ModelDims, layers: float) -> float:
    """The share of the parameters a forward pass uses when only the share ``layers`` of
    its decoder layers is evaluated (embeddings and head always run)."""
    if layers >= 1.0:
        return 1.0
    in_layers = _LAYER_SHARES.get(dims)
    if in_layers is None:
        total = estimate_n_params(dims)
        outside = estimate_n_params(replace(dims, n_layers=0))
        in_layers = _LAYER_SHARES[dims] = (total - outside) / total if total > 0 else 0.0
    return 1.0 - in_layers * (1.0 - max(layers, 0.0))


def _layer_position(ref: ModuleRef, attr: str, n: int) -> int:
    """Decoder layers evaluated once the model has reached ``ref.<attr>``: a layer's
    input comes before it, anything inside it or its output after it."""
    path = ref.path
    for index, item in enumerate(path[:-1]):
        if isinstance(item, str) and item in LAYER_LISTS and not isinstance(path[index + 1], str):
            layer = path[index + 1]
            if layer is None:
                return n
            layer = layer + n if layer < 0 else layer
            layer = min(max(layer, 0), n - 1)
            before = index + 2 == len(path) and attr in ("input", "inputs")
            return layer if before else layer + 1
    if any(isinstance(item, str) and item in _BEFORE_LAYERS for item in path):
        return 0
    return n


def _invoke_call(stmt: cst.With) -> cst.Call | None:
    """The ``tracer.invoke(...)`` call a ``with`` statement opens, if it is one."""
    item = stmt.items[0].item if stmt.items else None
    if type(item) is cst.Call and type(item.func) is cst.Attribute and item.func.attr.value == "invoke":
        return item
    return None


@functools.lru_cache(maxsize=4096)
def _stop_index(block: cst.With, tracer: str | None) -> int | None:
    """Where a trace body calls ``tracer.stop()``: the index of the top-level statement
    that does, -1 when it is deeper; None when it does not. (A pure function of an
    immutable node, cached: every version of a tree walks the blocks it did not change.)"""
    if tracer is None:
        return None
    for index, stmt in enumerate(block.body.body):
        for node in _walk(stmt):
            if (
                type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.func.attr.value == "stop"
                and type(node.func.value) is cst.Name
                and node.func.value.value == tracer
                and not node.args
            ):
                top = type(stmt) is cst.SimpleStatementLine and any(
                    type(small) is cst.Expr and small.value is node for small in stmt.body
                )
                return index if top else -1
    return None


def _compound(block: cst.BaseSuite):
    """The compound statements nested in a block (cheaper than a walk of every node)."""
    stack = list(block.body) if type(block) is cst.IndentedBlock else []
    while stack:
        stmt = stack.pop()
        kind = type(stmt)  # a simple statement line, or a compound statement
        if kind is cst.SimpleStatementLine or kind is cst.FunctionDef or kind is cst.ClassDef:
            continue
        yield stmt
        for part in (stmt.body, getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)):
            if type(part) in (cst.Else, cst.Finally):
                part = part.body
            if type(part) is cst.If:
                stack.append(part)
            elif type(part) is cst.IndentedBlock:
                stack.extend(part.body)
        for handler in getattr(stmt, "handlers", ()) or ():
            if type(handler.body) is cst.IndentedBlock:
                stack.extend(handler.body.body)


def _is_container(value: Shape | ModuleRef | None) -> bool:
    return isinstance(value, Shape) and value.kind == "container"


def _is_main_guard(stmt: cst.If) -> bool:
    """``if __name__ == "__main__":`` — the branch a script run as a script takes."""
    test = stmt.test
    return (
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is cst.Equal
        and {code_of(test.left), code_of(test.comparisons[0].comparator)} in (
            {"__name__", '"__main__"'}, {"__name__", "'__main__'"}
        )
    )


def _has_skip(node: cst.CSTNode) -> bool:
    return any(
        type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "skip"
        for n in _walk(node)
    )


def _names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in _walk(node) if type(n) is cst.Name}


def _unknown_download(name: str, expr: cst.BaseExpression, shape: Shape) -> UnknownDownload:
    """What the report says of a value ``name`` downloads whose size is not known (its
    code whole: it tells two such values apart)."""
    return UnknownDownload(name, " ".join(code_of(expr).split()), _unknown_reason(shape))


def _unknown_reason(shape: Shape) -> str:
    """Why :func:`serialized_size` has no size for ``shape``: its first part without one."""
    if shape.kind == "unknown":
        return shape.reason or "its value is not known"
    if shape.kind == "container":
        for element in shape.elements:
            if serialized_size(element) is None:
                return _unknown_reason(element)
    return "its dimensions are not known"


def _tensor_bytes(shape: Shape) -> int:
    if shape.kind in ("tensor", "scalar") and shape.dims is not None:
        return math.prod(shape.dims) * dtype_size(shape.dtype)
    if shape.kind == "container":
        return sum(_tensor_bytes(e) for e in shape.elements)
    return 0


_SHARED_SCALARS = {bool: "bool", int: "int", str: "str"}  # float: -0.0 == 0.0, and NaN equals nothing


@functools.lru_cache(maxsize=1024)
def _scalar_shape(dtype: str, value: Any) -> Shape:
    """``Shape.python(dtype, value)``, shared (a Shape is immutable; the walk binds the
    same loop values and constants in every version of a tree)."""
    return Shape.python(dtype, value)


def _python_shape(value: Any, keep: bool) -> Shape:
    dtype = _SHARED_SCALARS.get(type(value))
    if dtype is not None:
        return _scalar_shape(dtype, value if keep else None)
    if isinstance(value, bool):
        return Shape.python("bool", value if keep else None)
    if isinstance(value, int):
        return Shape.python("int", value if keep else None)
    if isinstance(value, float):
        return Shape.python("float", value if keep else None)
    if isinstance(value, str):
        return Shape.python("str", value if keep else None)
    if value is None:
        return Shape.python("none", None)
    if isinstance(value, (list, tuple)):
        # Shape.container's fields with the value (dataclasses.replace costs several times more)
        elements = tuple([_python_shape(v, keep) for v in value])
        return Shape(kind="container", elements=elements, names=(), dtype="container",
                     value=tuple(value) if keep else None)
    return Shape.unknown("a value")


def _literal_shape(expr: cst.BaseExpression) -> Shape | None:
    """What a name assigned ``expr`` is bound to when ``expr`` is a literal, else None."""
    shape = _shared_literal_shape(expr)
    if shape is _HOLDS_LISTS:
        return _python_shape(_literal(expr), True)
    return shape


_HOLDS_LISTS: Any = _NoValue()


@functools.lru_cache(maxsize=4096)
def _shared_literal_shape(expr: cst.BaseExpression) -> Any:
    # a pure function of an immutable node, cached (the prelude's constants are bound in
    # every version of every window): the Shape is shared, so not when its value would
    # hold the cached literal's lists (_HOLDS_LISTS: see _fresh)
    value = _shared_literal(expr)
    if value is NO_VALUE:
        return None
    if type(value) in (list, tuple) and any(_holds_list(v) for v in value):
        return _HOLDS_LISTS
    return _python_shape(value, True)


def _holds_list(value: Any) -> bool:
    return type(value) is list or (type(value) is tuple and any(_holds_list(v) for v in value))


def _has_str(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_str(v) for v in value)
    return False


def _copies_a_sequence(expr: cst.BaseExpression) -> bool:
    """`list(xs)`, `tuple(xs)`, `sorted(xs)`, `xs`: a value as long as ``xs``."""
    if type(expr) in (cst.Name, cst.Attribute):
        return True
    return (type(expr) is cst.Call and dotted_name(expr.func) in ("list", "tuple", "sorted")
            and len(expr.args) >= 1 and expr.args[0].keyword is None)


def _is_display(expr: cst.BaseExpression) -> bool:
    """A list or tuple display without starred elements: its length is known."""
    return type(expr) in (cst.List, cst.Tuple) and all(type(e) is cst.Element for e in expr.elements)


def _pairwise(target: cst.Tuple | cst.List, value: cst.BaseExpression):
    """(target, value) pairs of `a, b = x, y` (displays of one length, no starred part)."""
    if not _is_display(value) or len(value.elements) != len(target.elements):
        return None
    if any(type(e) is not cst.Element for e in target.elements):
        return None
    if set(target_names(target)) & _names_in(value):
        return None  # `a, b = b, a`: every value is read before any name is bound
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]


def _is_empty_container(expr: cst.BaseExpression) -> bool:
    if (type(expr) is cst.List or type(expr) is cst.Dict) and not expr.elements:
        return True
    if type(expr) is cst.Call and not expr.args:
        name = dotted_name(expr.func)
        return name in ("list", "dict", "nnsight.list", "nnsight.dict", "set")
    return False


def _is_old_api_container(expr: cst.BaseExpression) -> bool:
    """``nnsight.list()`` (pre-0.5 API): a container that comes back without ``.save()``."""
    return type(expr) is cst.Call and not expr.args and dotted_name(expr.func) in ("nnsight.list", "nnsight.dict")


def _chunk_size(sl: cst.Slice) -> cst.BaseExpression | None:
    """``K`` of a slice ``[c:c + K]`` whose lower bound is a name."""
    lower, upper = sl.lower, sl.upper
    if type(lower) is cst.Name and type(upper) is cst.BinaryOperation and type(upper.operator) is cst.Add:
        if type(upper.left) is cst.Name and upper.left.value == lower.value:
            return upper.right
        if type(upper.right) is cst.Name and upper.right.value == lower.value:
            return upper.left
    return None


def _binary_of(operator: cst.BaseAugOp) -> cst.BaseBinaryOp:
    mapping = {
        cst.AddAssign: cst.Add, cst.SubtractAssign: cst.Subtract, cst.MultiplyAssign: cst.Multiply,
        cst.DivideAssign: cst.Divide, cst.FloorDivideAssign: cst.FloorDivide, cst.ModuloAssign: cst.Modulo,
        cst.PowerAssign: cst.Power, cst.MatrixMultiplyAssign: cst.MatrixMultiply,
    }  # fmt: skip
    return mapping.get(type(operator), cst.Add)()


def _short(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(code_of(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        # whitespace, punctuation, operators: nothing the walks look for is there
        stack.extend(content_children(current))


@functools.lru_cache(maxsize=4096)
def _calls(node: cst.CSTNode, functions: frozenset[str],
           instances: frozenset[str] = frozenset()) -> tuple[tuple[cst.Call, tuple], ...]:
    """Calls of the named same-file functions in ``node`` (methods called on ``self`` or on
    one of the ``instances``), each with the ``for`` clauses of the comprehensions around
    it (a pure function of an immutable node, cached: later versions of the tree share
    most statements)."""
    found: list[tuple[cst.Call, tuple]] = []
    _find_calls(node, functions, found, (), instances)
    return tuple(found)


_LEAVING = (cst.Return, cst.Raise, cst.Break, cst.Continue)


def _called_name(call: cst.Call, instances: frozenset[str] = frozenset()) -> str | None:
    """`run` for `run(...)`, `self.run` for `self.run(...)` and for `exp.run(...)` with
    `exp` one of the ``instances``, else None."""
    func = call.func
    if type(func) is cst.Name:
        return func.value
    if type(func) is cst.Attribute and type(func.value) is cst.Name and (
            func.value.value == "self" or func.value.value in instances):
        return f"self.{func.attr.value}"
    return None


def _find_calls(node: cst.CSTNode, functions: frozenset[str], found: list, loops: tuple,
                instances: frozenset[str]) -> None:
    # in the order of a walk (a node, then its children in libcst's order), reading only
    # the fields that may hold more than layout; a lambda's body runs later, if ever
    kind = type(node)
    if kind is cst.Lambda:
        return
    if kind is cst.Call and _called_name(node, instances) in functions:
        found.append((node, loops))
    if kind in COMPREHENSIONS:
        clause, inner = node.for_in, loops
        while clause is not None:
            _find_calls(clause.iter, functions, found, inner, instances)
            inner = (*inner, clause)
            for test in clause.ifs:
                _find_calls(test, functions, found, inner, instances)
            clause = clause.inner_for_in
        for element in ((node.key, node.value) if kind is cst.DictComp else (node.elt,)):
            _find_calls(element, functions, found, inner, instances)
        return
    for child in content_children(node):
        _find_calls(child, functions, found, loops, instances)

"""What the cost walk produces and adds up: per request, its estimate.

:class:`RequestEstimate` is one outermost remote block (or one call of a library function
that sends requests of its own) over every time the script sends it; :class:`Request` what
one run of it does while the walk is inside it (saves, containers, forward passes, time);
:class:`Visit` what the walk saw of a statement outside any request. The sizes: what
``torch.save`` writes for a value of a shape (:func:`serialized_size`), and the cost of a
forward pass (:func:`pass_cost`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import libcst as cst

from ndif_opt.analysis.facts import Block
from ndif_opt.cost.constants import NAME_OVERHEAD, PY_SIZES, TENSOR_OVERHEAD
from ndif_opt.cost.model_registry import ModelDims, dtype_size, estimate_n_params
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.syntax.positions import code_of
from ndif_opt.types import Count, Number, UnknownDownload, UnknownLoop, is_known


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
    # the names your machine holds where the block is sent (last request), to their values:
    # a tensor of them the block reads travels with it (see client_tensor_bytes)
    client_env: dict = field(default_factory=dict, repr=False)
    profile: SessionProfile | None = None
    # values of unknown size (download_bytes counts their framing), with how many times
    # they are downloaded over ``count`` requests
    unknown_downloads: dict[UnknownDownload, int | Count] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.method

    def client_tensor_bytes(self, name: str) -> int | None:
        """The bytes of the tensor ``name`` holds on your machine where the block is sent
        (a block that reads it uploads it), or None when it holds none of a known size."""
        return uploaded_tensor_bytes(self.client_env.get(name)) or None


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


def key_size(shape: Shape | ModuleRef | None) -> int:
    if isinstance(shape, Shape) and shape.known:
        return serialized_size(shape) or 9
    return 9


_SERIALS = itertools.count(1)


@dataclass(frozen=True)
class Storage:
    """The module output a value is a view of: its shape, which one it is (None when the
    module is not known exactly) and how many runs of its trace the walk stands for."""

    shape: Shape
    key: tuple | None
    times: float = 1.0


@dataclass
class Forward:
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
    tracer: str | None = None  # the name `as tracer` binds (`tracer.cache()`)


@dataclass
class Visit:
    """What the walk saw of one statement outside any request: how many times it runs
    and the requests it sends over those runs (``function``: the function no code here
    calls that holds it — then for one call of it, which the totals do not count)."""

    node: cst.BaseStatement
    runs: Number | Count
    sent: Number | Count
    function: str | None = None


def pass_cost(
    dims: ModelDims, rows: float, seq: float, layers: float, throughput: float, memory_bandwidth: float
) -> tuple[float, float]:
    """(FLOPs, seconds) of one forward pass over ``rows`` × ``seq`` tokens evaluating the
    share ``layers`` of the decoder layers: the longer of its compute and of reading the
    weights once."""
    params = dims.n_params * _parameter_share(dims, layers)
    flops = 2.0 * params * rows * seq
    return flops, max(flops / throughput, params * dims.bytes_per_element / memory_bandwidth)


def per_iteration(spent: Number | Count, trips: Number | Count) -> Number | Count:
    """What one iteration of a loop adds to ``spent``, its total over ``trips`` iterations."""
    if not trips:
        return spent
    try:
        return spent / trips
    except (ValueError, TypeError):  # not a multiple of N: the loop's time does not scale with it
        return spent


def round_count(value: Number | Count) -> int | Count:
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


def unknown_download(name: str, expr: cst.BaseExpression, shape: Shape) -> UnknownDownload:
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


def uploaded_tensor_bytes(value) -> int:
    """The bytes a value the walk holds for a name of your machine uploads when a block
    reads it: a tensor (or tensors in a container) of known size; 0 for anything else."""
    if isinstance(value, Shape) and value.kind != "python" and value.known:
        return tensor_bytes(value)
    return 0


def tensor_bytes(shape: Shape) -> int:
    if shape.kind in ("tensor", "scalar") and shape.dims is not None:
        return math.prod(shape.dims) * dtype_size(shape.dtype)
    if shape.kind == "container":
        return sum(tensor_bytes(e) for e in shape.elements)
    return 0

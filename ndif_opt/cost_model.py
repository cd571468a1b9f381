"""Static cost model: requests, download bytes, forward passes and time on NDIF.

Reads the same facts as the passes. For every outermost remote block (one request),
it walks the block's statements in order, tracking which names hold which shapes
(:mod:`ndif_opt.shapes`) and what is saved: a name saved in a loop is downloaded once
(its last value), a saved container receives one element per iteration. The request
count multiplies by the trip counts of the loops around the block.

Every assumption is stated in :func:`assumptions` and can be overridden through
``Options.cost`` (``seq-len``, ``latency``, ``bandwidth``, ``throughput``).
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis import Block, Facts, is_save_call
from ndif_opt.model_registry import ModelDims, dims_for
from ndif_opt.options import Options
from ndif_opt.regions import trip_count
from ndif_opt.rewrite import unsave
from ndif_opt.types import Cost

UNKNOWN_TRIPS = 8  # iterations assumed for a loop whose length is not known statically
DEFAULTS = {
    "seq-len": 16,  # tokens in a prompt that is not a literal string
    "latency": 2.0,  # seconds of network + queue overhead per request
    "bandwidth": 50e6,  # bytes per second downloaded
    "throughput": 100e12,  # server FLOP/s
    "max-new-tokens": 20,
}


def _setting(options: Options, key: str) -> float:
    return float(options.cost.get(key, DEFAULTS[key]))


def estimate(facts: Facts, options: Options) -> Cost:
    requests = download = forward = 0
    flops = 0.0
    for block in facts.blocks:
        if block.parent is not None or not facts.is_remote(block.remote.state):
            continue
        count = _loop_multiplicity(block.stmt.loops(), facts)
        dims = _dims(block, facts, options)
        walker = _Request(facts, options, dims)
        walker.block(block, 1)
        requests += count
        download += count * walker.download()
        forward += count * walker.forward_passes
        flops += count * walker.flops
    seconds = (
        requests * _setting(options, "latency")
        + download / _setting(options, "bandwidth")
        + flops / _setting(options, "throughput")
    )
    return Cost(requests=requests, download_bytes=int(download), forward_passes=forward,
                compute_flops=flops, seconds=round(seconds, 3))


def assumptions(options: Options) -> list[str]:
    return [
        f"a loop of unknown length runs {UNKNOWN_TRIPS} times",
        f"a prompt that is not a literal string has {int(_setting(options, 'seq-len'))} tokens; "
        "a literal has about one token per 4 characters",
        f"each request costs {_setting(options, 'latency'):g} s of network and queue time",
        f"downloads run at {_setting(options, 'bandwidth') / 1e6:g} MB/s",
        f"the server computes {_setting(options, 'throughput') / 1e12:g} TFLOP/s "
        "(2 × parameters × tokens per forward pass)",
        "models not in the registry use stated default dimensions (bf16)",
    ]


def _loop_multiplicity(loops, facts: Facts) -> int:
    count = 1
    for loop in loops:
        trips = trip_count(loop, facts)
        count *= UNKNOWN_TRIPS if trips is None else trips
    return count


def _dims(block: Block, facts: Facts, options: Options) -> ModelDims:
    info = facts.models.get(block.model)
    repo = info.repo_id if info is not None and info.repo_id else block.model
    overrides = options.cost.get("models")
    return dims_for(repo, overrides) if overrides else dims_for(repo)


def prompt_tokens(call: cst.Call, facts: Facts, options: Options) -> int:
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    if not args:
        return int(_setting(options, "seq-len"))
    value = args[0]
    if isinstance(value, cst.Name):
        value = facts.constant(value.value) or value
    if isinstance(value, cst.SimpleString):
        text = value.evaluated_value
        if isinstance(text, str):
            return max(1, round(len(text) / 4))
    return int(_setting(options, "seq-len"))


class _Request:
    """Walks one request's statements, tracking shapes, saves and forward passes."""

    def __init__(self, facts: Facts, options: Options, dims: ModelDims) -> None:
        self.facts = facts
        self.options = options
        self.dims = dims
        self.env: dict = {}
        self.saved: dict[str, int] = {}  # name -> bytes of its last value
        self.containers: dict[str, int] = {}  # saved container -> accumulated bytes
        self.forward_passes = 0
        self.flops = 0.0
        self.seq_len = int(_setting(options, "seq-len"))

    def download(self) -> int:
        return sum(self.saved.values()) + sum(self.containers.values())

    def block(self, block: Block, times: int) -> None:
        if block.method in ("trace", "generate"):
            self.seq_len = prompt_tokens(block.call, self.facts, self.options)
            passes = 1
            if block.method == "generate":
                passes = self._max_new_tokens(block.call)
            self.forward_passes += times * passes
            self.flops += times * passes * 2.0 * self.dims.n_params * self.seq_len
        self.suite(block.node.body.body, times)

    def _max_new_tokens(self, call: cst.Call) -> int:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "max_new_tokens":
                if isinstance(arg.value, cst.Integer):
                    return int(arg.value.value)
        return int(_setting(self.options, "max-new-tokens"))

    def suite(self, statements, times: int) -> None:
        for stmt in statements:
            self.statement(stmt, times)

    def statement(self, stmt: cst.BaseStatement, times: int) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, times)
            return
        if isinstance(stmt, cst.With):
            block = self.facts.block_of(stmt)
            if block is not None:
                self.block(block, times)
                return
        if isinstance(stmt, (cst.For, cst.While)):
            trips = trip_count(stmt, self.facts)
            self.suite(stmt.body.body, times * (UNKNOWN_TRIPS if trips is None else trips))
            return
        body = getattr(stmt, "body", None)
        if isinstance(body, cst.IndentedBlock):
            self.suite(body.body, times)

    def small(self, small: cst.BaseSmallStatement, times: int) -> None:
        from ndif_opt.shapes import shape_of, value_of

        models = list(self.facts.models) or ["model"]
        kwargs = dict(model_name=models, seq_len=self.seq_len, env=self.env)
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            value = small.value
            if isinstance(target, cst.Name):
                if is_save_call(value):
                    inner = unsave(value)
                    if _is_container_call(inner):
                        self.containers.setdefault(target.value, 0)
                        return
                    shape = shape_of(inner, self.dims, **kwargs)
                    self.env[target.value] = shape
                    self.saved[target.value] = shape.nbytes or 0
                else:
                    self.env[target.value] = value_of(value, self.dims, **kwargs)
                    self.saved.pop(target.value, None)
            elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                name = target.value.value
                if name in self.containers:
                    shape = shape_of(unsave(value), self.dims, **kwargs)
                    self.containers[name] += times * (shape.nbytes or 0) + 8
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in ("append", "extend")
                and isinstance(func.value, cst.Name)
                and func.value.value in self.containers
                and call.args
            ):
                shape = shape_of(unsave(call.args[0].value), self.dims, **kwargs)
                self.containers[func.value.value] += times * (shape.nbytes or 0)


def _is_container_call(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.List, cst.Dict)) and not expr.elements:
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "dict")

"""The cost walk's requests: remote blocks, and what each one sends, runs and downloads.

:class:`RequestWalk` is the part of :class:`ndif_opt.cost.walker.Walker` that turns every
outermost remote block into a :class:`ndif_opt.cost.requests.RequestEstimate`: a session's
body and its profile, traces and generates with their rows, prompt tokens, forward passes
and the layers they reach, invokes, the upload, and library functions that send requests
of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, Remote, RemoteFlag, call_remote_flag, qualify
from ndif_opt.analysis.keywords import known_keywords
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.constants import (
    CLIENT_TENSOR_OVERHEAD,
    CODE_COMPRESSION,
    NAME_OVERHEAD,
    RESULT_BASE,
    SHARED_VIEW_OVERHEAD,
    UNROLL_LIMIT,
    UPLOAD_BASE,
    UPLOAD_GENERATE,
    UPLOAD_PER_LAYER,
    UPLOAD_RAW_BASE,
    UPLOAD_RAW_GENERATE,
    UPLOAD_RAW_PER_LAYER,
    generated_tokens,
    setting,
)
from ndif_opt.cost.library_requests import LibraryRequest, Returns, batch_count, library_request, request_count
from ndif_opt.cost.model_registry import ModelDims
from ndif_opt.cost.requests import (
    Forward,
    RequestEstimate,
    SessionProfile,
    Storage,
    pass_cost,
    per_iteration,
    round_count,
    serialized_size,
    uploaded_tensor_bytes,
)
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.walk_syntax import compound, invoke_call, stop_index
from ndif_opt.cost.walk_values import NO_VALUE, python_shape
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.positions import code_in, code_of
from ndif_opt.syntax.positions import short_code as short
from ndif_opt.syntax.walk import content_children, find_nodes
from ndif_opt.types import Count, Number, UnknownDownload, UnknownLoop, is_known


# modules the model runs before its first decoder layer
_BEFORE_LAYERS = frozenset({"embed_tokens", "wte", "wpe", "embed_in", "embed_positions", "rotary_emb", "drop"})


class Request:
    """What one request does: saves, containers, forward passes, compute, time."""

    def __init__(self, walker: RequestWalk, block: Block) -> None:
        self.walker = walker
        self.block = block
        self.depth = len(walker._call_stack)  # calls deep the request's frame is
        self.dims = walker.dims_of(block.model)
        self.saved: dict[str, int] = {}
        self.containers: dict[str, float] = {}
        self.storages: set[tuple] = set()  # module outputs whose storage a container holds
        # saved names whose object a saved container holds too (`acts.append(logits)`): it
        # is written once in the result, however many names and containers hold it
        self.held: set[str] = set()
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
        self.held.discard(name)
        if size is None:
            self.unknown[unknown] = 1.0
            size = 0
        self.saved[name] = size

    def unsave(self, name: str) -> None:
        self.saved.pop(name, None)
        self.containers.pop(name, None)
        self.held.discard(name)
        self._forget_unknown(name)

    def _forget_unknown(self, name: str) -> None:
        """``name`` is bound anew: what it held before does not come back."""
        if self.unknown:
            for value in [value for value in self.unknown if value.name == name]:
                del self.unknown[value]

    def add(
        self, name: str, size: int | None, key: int, times: float, storage: Storage | None = None,
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
        # (a name whose object a container holds: a reference to what the container writes)
        out = {name: (min(size, SHARED_VIEW_OVERHEAD) if name in self.held else size)
               for name, size in self.saved.items()}
        for name, size in self.containers.items():
            out[name] = round_count(size) + 4
        return out

    def saved_names(self) -> list[str]:
        return list(self.saved) + list(self.containers)


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


class RequestWalk:
    """Remote blocks, as requests."""

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
        self._sent += round_count(times * requests)
        entry.count += round_count(times * requests)
        entry.download_bytes += round_count(times * (RESULT_BASE * requests + size))
        entry.forward_passes += round_count(times * passes)
        entry.layer_evaluations += round_count(times * passes * reached)
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
            self.note(f"`{short(expr) if expr is not None else 'prompts'}` has an unknown length: {count} prompts assumed")
        return max(count, 1)

    def _asked_layers(self, expr: cst.BaseExpression | None, dims: ModelDims) -> list[int]:
        """The layers a helper reads: its `layers` argument, or all of them."""
        value = self.constant_value(expr) if expr is not None else None
        if value is NO_VALUE and expr is not None and type(expr) is cst.Call:
            value = self.elements(expr)  # list(range(0, 80, 10))
        if isinstance(value, (list, tuple, range)) and value and all(isinstance(v, int) for v in value):
            return [v % dims.n_layers for v in value]
        return list(range(dims.n_layers))

    def local_block(self, block: Block) -> None:
        """A local trace: free, but the names it saves are bound on the client."""
        for name in block.saved_names:
            self.env[name] = Shape.unknown("saved by a local trace")

    def remote_block(self, block: Block, times: float) -> None:
        request = Request(self, block)
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
        self._sent += round_count(count)
        entry.count += round_count(count)
        entry.upload_bytes += round_count(count * upload)
        entry.upload_raw_bytes += round_count(count * upload_raw)
        entry.download_bytes += round_count(count * download)
        entry.forward_passes += round_count(count * request.forward_passes)
        entry.layer_evaluations += round_count(count * request.layer_evaluations)
        entry.compute_flops += count * request.flops
        entry.server_seconds += count * request.seconds
        entry.max_server_seconds = self._longer(entry.max_server_seconds, request.seconds)
        entry.saved = sizes
        entry.client_env = saved_env
        for value, n in request.unknown.items():
            entry.unknown_downloads[value] = entry.unknown_downloads.get(value, 0) + round_count(count * n)
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
                f"`{short(block.call)}` runs no trace or generate the cost model can follow (a function "
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
                spent = per_iteration(spent, trips if trips is not None else self.loop_symbol(stmt))
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
        stop = stop_index(block.node, tracer)
        if block.method == "generate" and stop is None:
            new_tokens = generated_tokens(known_keywords(block.call, self.facts), self.integer, self.options)
            passes = new_tokens
        forward = self.forward = Forward(dims, block.model, seq, rows, new_tokens, rows=rows, times=times,
                                         tracer=tracer)
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
                    self.env[name] = python_shape(element, True)
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
                item = invoke_call(stmt)
                if item is not None:
                    r, s = self.prompt_rows(item)
                    rows += int(times * max(r, 1))
                    seq = max(seq, s)
                    continue
            if type(stmt) is cst.For:
                if not any(type(n) is cst.With and invoke_call(n) is not None for n in compound(stmt.body)):
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
                    self.note(f"the invokes of `for {code_of(stmt.target)} in {short(stmt.iter)}`, a loop of unknown "
                              f"length in a trace, are taken as {trips} rows of its batch (its download and compute)")
                r, s = self._invokes(stmt.body.body, times * trips)
                rows, seq = rows + r, max(seq, s)
                continue
            body = getattr(stmt, "body", None)
            if type(body) is cst.IndentedBlock and type(stmt) not in (cst.FunctionDef, cst.ClassDef):
                r, s = self._invokes(body.body, times)
                rows, seq = rows + r, max(seq, s)
        return rows, seq

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
            self.note(f"the prompt `{short(expr)}` is not a literal string: {default} tokens assumed")
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
            size = uploaded_tensor_bytes(value)
            if size and name in code:
                yield name, size

    def _upload(self, block: Block, env: dict) -> tuple[int, int]:
        dims = self.dims_of(block.model)
        # from the code of the statement around it, which a version's code generation made
        ancestors = block.stmt.ancestors
        code = self.facts.once(_code_in, block.node, ancestors[0] if ancestors else block.node)
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


def _code_in(facts: Facts, node: cst.CSTNode, around: cst.CSTNode) -> str:
    """:func:`code_in` of this version (once per version of the tree)."""
    return code_in(node, around, facts.module)

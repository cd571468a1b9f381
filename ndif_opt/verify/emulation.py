"""A server-faithful, in-process emulation of NDIF for nnsight 0.8.

While an :class:`EmulatedNDIF` is active, every ``remote=True`` (or
``remote="<host url>"``) trace, session or generate of an nnsight model is served
here instead of over the network, doing what the NDIF service does with it:

1. **Client**: ``pull_env()`` (local modules ship by value), then the request is
   serialized exactly as :class:`~nnsight.intervention.backends.remote.RemoteBackend`
   does — ``RequestModel.serialize`` (cloudpickle of the tracer plus the block's
   source and the names it reads), zstd level 6 when ``CONFIG.API.COMPRESS`` is on
   (the default). Upload bytes (as sent) and raw bytes are recorded.
2. **Server** (a fresh thread, so nnsight's per-thread trace depth and saved set are
   fresh as in a server worker): nnsight's process-wide source caches
   (``SOURCES``/``BLOCKS``) and the ``linecache`` entry of the client's file are
   cleared, as a fresh server process has none; the payload is deserialized with the
   user's local modules hidden (:class:`LocalSimulationBackend`'s own hiding), and the
   **deserialized** tracer is executed — its frame is a ``SerializedFrame`` whose
   locals are a plain dict, so a client-side list mutated in the block is mutated on
   the server's copy only. ``print`` output becomes LOG lines on the request record.
   The saved values (``id(value)`` in the saved set) are ``torch.save``\\ d (tensors on
   CPU; a view ships its whole storage, as ``torch.save`` does) and zstd-compressed.
3. **Client**: decompress, ``torch.load(weights_only=False)``, mark the values saved
   and push them into the caller's frame (``RemoteBackend._push``).

The server enforces what NDIF's allows a request to import and call
(:mod:`ndif_opt.verify.server_rules`): ``open(...)`` or ``import os`` inside a remote
block fail there as on NDIF, and an object of a package the server does not run cannot
be deserialized.

A nested ``remote=True`` on a trace or session that is already running on the
(emulated) server — e.g. ``model.trace(p, remote=True)`` inside
``model.session(remote=True)`` — fails the whole request with a ``RemoteError``: on
NDIF the inner call would try to open a second network request from inside the
server's worker; nnsight's own ``remote="local"`` wrongly lets it pass.

Forward passes (calls of the root torch module — ``generate`` calls it once per new
token) and decoder-layer evaluations are counted with forward pre-hooks; see
:func:`instrument` and :func:`count_calls`.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import threading
import time
import traceback
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch

from .emulation_parts import (
    Patches,
    deserialize_hidden,
    dicts_emptied,
    kind_of,
    pull_env,
    zstd_compress,
    zstd_decompress,
)
from .server_rules import ServerRules
from .tiny_models import decoder_layers, repo_id_of

__all__ = [
    "CallCounter",
    "EmulatedNDIF",
    "NestedRemoteRequestError",
    "Patches",
    "Release08",
    "RequestRecord",
    "nnsight_release",
    "count_calls",
    "instrument",
    "summarize",
    "uninstrument",
]

# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass
class RequestRecord:
    """What one emulated NDIF request cost and returned."""

    kind: str  # "trace" | "session" | "generate"
    model: str  # the repo id the model stands in for
    upload_bytes: int = 0  # request payload as sent (zstd when compression is on)
    upload_raw_bytes: int = 0  # request payload before compression
    download_bytes: int = 0  # result blob as downloaded (zstd when compression is on)
    download_raw_bytes: int = 0  # torch.save of the saved-values dict
    saved: dict[str, Any] = field(default_factory=dict)  # name -> summarize(value)
    forward_passes: int = 0  # calls of the root module while the server ran it
    layer_calls: int = 0  # decoder-layer evaluations while the server ran it
    logs: list[str] = field(default_factory=list)  # print() output on the server
    error: Optional[str] = None  # "Type: message" when the server failed
    seconds: float = 0.0  # wall time of the server side

    def to_dict(self) -> dict:
        return asdict(self)


class NestedRemoteRequestError(RuntimeError):
    """``remote=`` on a trace/session that already runs on the (emulated) server."""


def summarize(value: Any, *, _depth: int = 0, max_items: int = 32) -> dict:
    """A JSON-friendly description of a saved value: type, shape/dtype for tensors,
    recursively for lists, tuples and dicts (at most ``max_items`` children each)."""
    kind = type(value).__name__
    if isinstance(value, torch.Tensor):
        return {
            "type": "Tensor",
            "shape": list(value.shape),
            "dtype": str(value.dtype).removeprefix("torch."),
            "numel": int(value.numel()),
            "nbytes": int(value.numel() * value.element_size()),
        }
    if _depth >= 6:
        return {"type": kind}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        out = {
            "type": kind,
            "len": len(items),
            "items": [summarize(v, _depth=_depth + 1) for v in items[:max_items]],
        }
        if len(items) > max_items:
            out["truncated"] = True
        return out
    if isinstance(value, dict):
        keys = list(value)
        out = {
            "type": kind,
            "len": len(keys),
            "items": {
                str(k): summarize(value[k], _depth=_depth + 1) for k in keys[:max_items]
            },
        }
        if len(keys) > max_items:
            out["truncated"] = True
        return out
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        text = repr(value)
        return {"type": kind, "value": text if len(text) <= 80 else text[:77] + "..."}
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):  # numpy arrays and the like
        return {"type": kind, "shape": list(shape), "dtype": str(value.dtype)}
    return {"type": kind}


# ---------------------------------------------------------------------------
# Counting forward passes and layer evaluations
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class CallCounter:
    forward_passes: int = 0
    layer_calls: int = 0


_ACTIVE: list[CallCounter] = []
_COUNT_LOCK = threading.Lock()
# torch module -> hook handles (registered once per module)
_INSTRUMENTED: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()


def _bump(attribute: str) -> None:
    with _COUNT_LOCK:
        for counter in _ACTIVE:
            setattr(counter, attribute, getattr(counter, attribute) + 1)


def _root_module(model: Any) -> torch.nn.Module:
    # nnsight 0.4 keeps the torch module as `_model` (its `_module` is a weak proxy of it)
    module = vars(model).get("_model") if hasattr(model, "__dict__") else None
    if not isinstance(module, torch.nn.Module):
        module = getattr(model, "_module", model)
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"cannot instrument {type(model).__name__}: no torch module")
    return module


def _evaluation_probe(layer: torch.nn.Module) -> torch.nn.Module:
    """The submodule whose call marks a *real* evaluation of ``layer``.

    A layer replaced by ``.skip()`` still passes through ``Module.__call__`` (so a hook
    on the layer itself would fire) but never calls its children; its first norm does
    run exactly once per real evaluation.
    """
    for name in ("ln_1", "input_layernorm", "attention_norm", "norm1"):
        child = getattr(layer, name, None)
        if isinstance(child, torch.nn.Module):
            return child
    for child in layer.children():
        return child
    return layer


def instrument(model: Any) -> bool:
    """Install the counting hooks on ``model`` (a wrapper or torch module).

    Idempotent; returns True if hooks were added by this call. The hooks count into
    every active :class:`CallCounter` (see :func:`count_calls`) and cost nothing when
    none is active. Remove them with :func:`uninstrument`.
    """
    module = _root_module(model)
    if module in _INSTRUMENTED:
        return False
    handles = [module.register_forward_pre_hook(lambda *_: _bump("forward_passes"))]
    for layer in decoder_layers(module):
        probe = _evaluation_probe(layer)
        handles.append(probe.register_forward_pre_hook(lambda *_: _bump("layer_calls")))
    _INSTRUMENTED[module] = handles
    return True


def uninstrument(model: Any) -> None:
    """Remove the hooks :func:`instrument` installed (no-op if none)."""
    module = _root_module(model)
    for handle in _INSTRUMENTED.pop(module, []):
        handle.remove()


@contextlib.contextmanager
def count_calls(counter: Optional[CallCounter] = None) -> Iterator[CallCounter]:
    """Count forward passes / layer evaluations of instrumented models in the block."""
    counter = counter if counter is not None else CallCounter()
    with _COUNT_LOCK:
        _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        with _COUNT_LOCK:
            for index, active in enumerate(_ACTIVE):
                if active is counter:
                    del _ACTIVE[index]
                    break


# ---------------------------------------------------------------------------
# Which release
# ---------------------------------------------------------------------------


def nnsight_release() -> Any:
    """The request path of the installed nnsight: :class:`Release08` for 0.7 and later,
    :class:`~ndif_opt.verify.emulation_06.Release06` for 0.6,
    :class:`~ndif_opt.verify.emulation_04.Release04` (local runs only) for 0.4."""
    import nnsight

    version = str(getattr(nnsight, "__version__", ""))
    if version.startswith("0.6."):
        from .emulation_06 import Release06

        return Release06()
    if version.startswith("0.4."):
        from .emulation_04 import Release04

        return Release04()
    return Release08()


# ---------------------------------------------------------------------------
# nnsight 0.8
# ---------------------------------------------------------------------------


def _make_backend_class():
    from nnsight.intervention.backends.remote import RemoteBackend
    from nnsight.schema.request import RequestModel

    class EmulatedRemoteBackend(RemoteBackend):
        """A RemoteBackend whose transport is :class:`EmulatedNDIF` instead of HTTP."""

        def __init__(self, model: Any, emulator: "EmulatedNDIF", verbose: bool = False):
            self.model = model
            self.emulator = emulator
            self.repo_id = repo_id_of(model) or type(model).__name__
            super().__init__(
                f"ndif-opt-emulated:{self.repo_id}",
                host="http://ndif.emulated",
                env=model._remoteable_get_env(),
                blocking=True,
                verbose=verbose,
            )
            # The real backend renders a status display; the emulation has none.
            self.display.enabled = False

        def __call__(self, tracer: Any = None) -> Any:
            # Always the blocking path (non-blocking submit/poll would need a job store).
            self.meta = None
            result = self.request(
                RequestModel(model_key=self.model_key, compress=self.compress, env=self.env),
                tracer,
            )
            if isinstance(result, dict):
                self._push(result, tracer)
            return result

        def request(self, request: Any, tracer: Any) -> Any:
            from nnsight import ndif
            from nnsight.intervention.tracer import InterleavingTracer

            # == RemoteBackend._serialize: pull_env + RequestModel.serialize(tracer,
            # compress); compressing the raw payload here gives the identical bytes
            # (same zstd level) and also yields the raw size.
            pull_env(ndif)
            raw = RequestModel.serialize(tracer, compress=False)
            blob = zstd_compress(raw) if request.compress else raw
            self._log(f"payload: {len(blob):,} bytes")
            record = self.emulator.new_request(
                kind_of(tracer, InterleavingTracer), self.repo_id, len(blob), len(raw)
            )
            filename = tracer.info.frame.f_code.co_filename
            content = self.emulator.serve(
                self.model, blob, request.compress, filename, record, env=self.env
            )
            return self.finalize(content)

    return EmulatedRemoteBackend


class Release08:
    """The parts of the request path that are nnsight 0.8's own."""

    name = "0.8"
    _backend: Any = None

    def backend(self, model: Any, emulator: "EmulatedNDIF", verbose: bool = False) -> Any:
        if Release08._backend is None:
            Release08._backend = _make_backend_class()
        return Release08._backend(model, emulator, verbose=verbose)

    def install(self, patches: Patches, choose: Callable[..., Any]) -> None:
        """Route ``remote=`` through ``choose(model, remote, verbose)``: a backend, or
        None for nnsight's own (``remote="local"``: LocalSimulationBackend)."""
        from nnsight.modeling.mixins.remotable import Remotable

        original = Remotable.__dict__["_remote_backend"]

        def _remote_backend(model, remote, blocking=True, job_id=None, verbose=False):
            backend = choose(model, remote, verbose)
            return original(model, remote, blocking, job_id, verbose) if backend is None else backend

        _remote_backend.__wrapped__ = original  # type: ignore[attr-defined]
        patches.set(Remotable, "_remote_backend", _remote_backend)

    def local_only(self, patches: Patches) -> None:
        """Every ``remote=`` ignored: the block runs locally."""
        from nnsight.modeling.mixins.remotable import Remotable

        def _remote_backend(self, remote, blocking=True, job_id=None, verbose=False):
            # `if backend is None and remote: backend = self._remote_backend(...)`:
            # returning None leaves the default (local) backend in place.
            return None

        patches.set(Remotable, "_remote_backend", _remote_backend)

    def remote_error(self) -> type:
        from nnsight.intervention.backends.remote import RemoteError

        return RemoteError

    def server_caches(self) -> Any:
        """nnsight's process-wide source caches, emptied for the server side."""
        from nnsight.tracing import globals as nnsight_globals

        return dicts_emptied(nnsight_globals.SOURCES, nnsight_globals.BLOCKS)

    def deserialize(self, model: Any, payload: bytes) -> Any:
        from nnsight.intervention.backends.local import LocalSimulationBackend

        return deserialize_hidden(model, payload, LocalSimulationBackend, "_hide_local_modules", "_restore")

    def execute(self, restored: Any) -> dict:
        """Run the deserialized tracer; the saved values by name."""
        from nnsight.tracing.tracer import _saves, dec, inc

        inc()
        try:
            restored.execute(restored.info.code)
            saved_ids = _saves()
            return {
                name: value
                for name, value in restored.info.frame.f_locals.items()
                if id(value) in saved_ids
            }
        finally:
            dec()

    def env_holder(self) -> Any:
        """The module whose ``_PULLED_ENV`` says pull_env() already ran."""
        from nnsight import ndif

        return ndif

    def cache_keys(self) -> Any:
        return None

    def settled(self, namespace: dict) -> dict:
        """A run's module namespace as its values (0.8 leaves values, not proxies)."""
        return namespace

    def forget_sources(self, before: Any, belongs: Callable[[Any], bool]) -> None:
        """Drop nnsight's cached sources of the run's files."""
        from nnsight.tracing import globals as nnsight_globals

        for key in [k for k in nnsight_globals.SOURCES if belongs(k)]:
            del nnsight_globals.SOURCES[key]
        for key in [k for k in nnsight_globals.BLOCKS if belongs(k[0])]:
            del nnsight_globals.BLOCKS[key]


# ---------------------------------------------------------------------------
# The emulated service
# ---------------------------------------------------------------------------

_server = threading.local()  # .active: True while a thread runs a request server-side
#: the seed of the emulated server's random generators: any fixed value other than the
#: seeds scripts use, so that a draw moved from the client to the server shows
SERVER_SEED = 987_654_321


def _in_server() -> bool:
    return getattr(_server, "active", False)


class EmulatedNDIF:
    """Serve ``remote=True`` traces/sessions/generates in-process, as NDIF would.

    Use as a context manager; ``requests`` lists a :class:`RequestRecord` per request.
    ``remote="local"`` keeps nnsight's own LocalSimulationBackend. The release-specific
    parts (how ``remote=`` picks a backend, how the server deserializes, runs and
    collects the saves) come from :func:`nnsight_release`.
    """

    def __init__(self) -> None:
        self.requests: list[RequestRecord] = []
        self.release = nnsight_release()
        self.rules = ServerRules()
        self._patches: Optional[Patches] = None
        self._server_random: Optional[tuple[Any, Any]] = None  # the server's generator states

    # -- patching -----------------------------------------------------------

    def __enter__(self) -> "EmulatedNDIF":
        if self._patches is not None:
            raise RuntimeError("this EmulatedNDIF is already active")
        self._patches = Patches()
        self.release.install(self._patches, self.choose)
        self.rules.install(self._patches)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._patches is not None:
            self._patches.undo()
            self._patches = None

    def choose(self, model: Any, remote: Any, verbose: bool = False) -> Any:
        """The backend for ``remote=``: None for ``"local"`` (nnsight's own), else this
        emulation's; a remote call made on the emulated server fails the request."""
        if isinstance(remote, str) and remote == "local":
            return None
        if _in_server():
            raise NestedRemoteRequestError(
                f"remote={remote!r} on a trace/session that is already running on "
                "NDIF: the inner call would open a second NDIF request from inside "
                "the server. Put remote=True on the outermost session only."
            )
        return self.release.backend(model, self, verbose=verbose)

    def new_request(self, kind: str, model: str, upload: int, upload_raw: int) -> RequestRecord:
        """Record a request as it is sent."""
        record = RequestRecord(kind=kind, model=model, upload_bytes=upload, upload_raw_bytes=upload_raw)
        self.requests.append(record)
        return record

    # -- server side --------------------------------------------------------

    def serve(
        self,
        model: Any,
        blob: bytes,
        compress: bool,
        filename: str,
        record: RequestRecord,
        env: Optional[dict] = None,
    ) -> bytes:
        """Run one request on a fresh 'server' thread; return the result blob."""
        box: dict[str, Any] = {}
        worker = threading.Thread(
            target=self._server_main,
            args=(model, blob, compress, env, filename, record, box),
            name="ndif-opt-emulated-server",
            daemon=True,
        )
        worker.start()
        worker.join()
        if "error" in box:
            raise self.release.remote_error()(box["error"])
        return box["result"]

    def _server_main(
        self,
        model: Any,
        blob: bytes,
        compress: bool,
        env: Optional[dict],
        filename: str,
        record: RequestRecord,
        box: dict,
    ) -> None:
        started = time.perf_counter()
        # A fresh server process holds none of the client's source caches.
        client_lines = linecache.cache.pop(filename, None)
        logs = io.StringIO()
        counter = CallCounter()
        added_hooks = False
        _server.active = True
        try:
            with self.release.server_caches():
                added_hooks = instrument(model)
                payload = zstd_decompress(blob) if compress else blob
                with self.rules.deserializing():
                    restored = self.release.deserialize(model, payload)
                if env:
                    model._remoteable_set_env(env)
                with contextlib.redirect_stdout(logs), count_calls(counter), self.rules.executing(), \
                        self._server_generators():
                    saves = self.release.execute(restored)
            record.saved = {name: summarize(value) for name, value in saves.items()}
            buffer = io.BytesIO()
            torch.save({name: _to_cpu(value) for name, value in saves.items()}, buffer)
            raw = buffer.getvalue()
            content = zstd_compress(raw) if compress else raw
            record.download_raw_bytes = len(raw)
            record.download_bytes = len(content)
            box["result"] = content
        except BaseException as error:  # noqa: BLE001 - reported to the client
            record.error = f"{type(error).__name__}: {error}"
            box["error"] = (
                f"{type(error).__name__}: {error}\n\n"
                f"Server traceback (emulated NDIF):\n{traceback.format_exc()}"
            )
        finally:
            _server.active = False
            if added_hooks:
                uninstrument(model)
            if client_lines is not None:
                linecache.cache[filename] = client_lines
            else:
                linecache.cache.pop(filename, None)
            record.logs = logs.getvalue().splitlines()
            record.forward_passes = counter.forward_passes
            record.layer_calls = counter.layer_calls
            record.seconds = time.perf_counter() - started

    @contextlib.contextmanager
    def _server_generators(self) -> Iterator[None]:
        """The server process's own random generators (torch's and NumPy's global ones):
        a draw in a request continues the server's stream, from one request to the next,
        never the client's, and the client's seed does not apply there, as on NDIF. (The
        client waits while its request runs: swapping the process-wide states is safe.)"""
        import numpy

        client = (torch.get_rng_state(), numpy.random.get_state())
        if self._server_random is None:
            torch.manual_seed(SERVER_SEED)
            numpy.random.seed(SERVER_SEED)
        else:
            torch.set_rng_state(self._server_random[0])
            numpy.random.set_state(self._server_random[1])
        try:
            yield
        finally:
            self._server_random = (torch.get_rng_state(), numpy.random.get_state())
            torch.set_rng_state(client[0])
            numpy.random.set_state(client[1])

    # -- summaries ----------------------------------------------------------

    @property
    def upload_bytes(self) -> int:
        return sum(r.upload_bytes for r in self.requests)

    @property
    def download_bytes(self) -> int:
        return sum(r.download_bytes for r in self.requests)


def _to_cpu(value: Any) -> Any:
    """Tensors to CPU (the server's cpu pickle); containers keep their identity
    when nothing moves, so a CPU view still ships its whole storage."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.cpu()
    if isinstance(value, list):
        moved = [_to_cpu(v) for v in value]
        return value if all(a is b for a, b in zip(moved, value)) else moved
    if isinstance(value, tuple) and type(value) is tuple:
        moved = tuple(_to_cpu(v) for v in value)
        return value if all(a is b for a, b in zip(moved, value)) else moved
    if isinstance(value, dict) and type(value) is dict:
        moved = {k: _to_cpu(v) for k, v in value.items()}
        return value if all(moved[k] is v for k, v in value.items()) else moved
    return value

"""The nnsight 0.6 parts of the NDIF emulation (:mod:`ndif_opt.verify.emulation`).

nnterp 1.3.0 imports only with nnsight 0.6.3, whose request path differs from 0.8's;
:func:`~ndif_opt.verify.emulation.nnsight_release` picks :class:`Release06` when the
installed nnsight is a 0.6 release. What is the same (the server thread, records,
counting, the result's ``torch.save`` + zstd, the caches a fresh server lacks) stays in
``emulation.py`` and :mod:`~ndif_opt.verify.emulation_parts`. What 0.6.3 does its own way, read from its source:

* **Choosing the backend.** ``RemoteableMixin.trace`` / ``.session`` build
  ``RemoteBackend(self.to_model_key(), blocking=...)`` inline (0.8 has a
  ``Remotable._remote_backend`` hook); the emulation wraps those two methods and passes
  its backend as ``backend=`` (which they accept and use as is). ``model.generate`` goes
  through ``trace`` (``Envoy.__getattr__``). ``remote="local"`` keeps nnsight's own
  ``LocalSimulationBackend``.
* **Client.** The backend subclasses 0.6.3's ``RemoteBackend`` and replaces only the
  transport, ``blocking_request``: it calls the real ``RemoteBackend.request`` (the
  interventions function compiled by ``Backend.__call__``, ``pull_env()``,
  ``RequestModel(interventions=..., tracer=...).serialize(compress)``), hands the bytes
  to the emulated server, loads the answer with the real ``_decompress_and_load`` and
  calls ``tracer.push(result)`` as ``blocking_request`` does. A server error is raised as
  0.6's ``RemoteException``, which ``RemoteBackend.__call__`` wraps as it would.
* **Server.** ``RequestModel.deserialize(payload, persistent_objects)`` with the user's
  modules hidden (``LocalSimulationBackend._block_user_modules``, minus the packages the
  server has installed: nnterp travels by reference), then what NDIF's 0.6 executor does:
  ``Globals.stack = 0``, ``Globals.enter()``, ``saves = tracer.execute(interventions)``
  on the **deserialized** tracer, ``Globals.exit()``, ``Globals.saves.clear()``. The
  function's top-level ``push()`` (``Globals.stack == 1``) returns exactly the frame's
  values whose ``id`` is in ``Globals.saves``: that dict is the result, as
  ``tracer.push(result)`` on the client expects (name -> value).
  The block's frame ships as an empty ``SerializedFrame``; a client list the block
  mutates is a copy in the pickled function's globals, so the client's stays empty.

Not faithful, and why: 0.6.3's ``Globals`` (``stack``, ``saves``, the tracing cache) is
process-wide, not per thread, so the server thread shares it with the client; the
client's values are put aside while the server runs and restored after (the client is
blocked in ``blocking_request`` meanwhile, so nothing else reads them). Asynchronous
tracers (``tracer.asynchronous``) and non-blocking jobs are served blocking. The
hybrid ``STREAM`` path (``session.local()``) is not emulated. The block runs with
``tracer.info.frame = None``: 0.6's ``push()`` hands the shipped ``SerializedFrame`` to
``PyFrame_LocalsToFast`` through ctypes, which expects a real frame — undefined behaviour,
measured as an occasional segfault of the emulation (1 in about 8 verify runs of a
greedy-decoding script). With no frame, ``pull()`` has nothing to copy (as from the empty
one) and ``push()`` writes into no frame but returns the same saved values, all the server
sends back.
"""

from __future__ import annotations

import io
from typing import Any, Callable

from .tiny_models import repo_id_of

__all__ = ["Release06"]


def _make_backend_class():
    from nnsight.intervention.backends.remote import RemoteBackend
    from nnsight.intervention.tracing.tracer import InterleavingTracer

    from .emulation_parts import kind_of, pull_env, zstd_decompress

    class EmulatedRemoteBackend06(RemoteBackend):
        """0.6.3's RemoteBackend with the emulated NDIF as its transport."""

        def __init__(self, model: Any, emulator: Any, verbose: bool = False):
            self.model = model
            self.emulator = emulator
            self.repo_id = repo_id_of(model) or type(model).__name__
            # to_model_key() would ask the hub for the repo id; the key is only a header.
            super().__init__(
                f"ndif-opt-emulated:{self.repo_id}", host="http://ndif.emulated", blocking=True, verbose=verbose
            )
            # The real backend renders a status display; the emulation has none.
            self.status_display.enabled = False

        def blocking_request(self, tracer: Any) -> Any:
            from nnsight.intervention.backends import remote

            pull_env(remote)  # the request's own pull_env() then finds it done
            data, _headers = self.request(tracer)
            raw = zstd_decompress(data) if self.compress else data
            record = self.emulator.new_request(
                kind_of(tracer, InterleavingTracer), self.repo_id, len(data), len(raw)
            )
            filename = tracer.info.frame.f_code.co_filename
            content = self.emulator.serve(self.model, data, self.compress, filename, record)
            result = self._decompress_and_load(io.BytesIO(content))
            tracer.push(result)
            return result

        # No job store: a non-blocking or asynchronous request is served blocking.
        non_blocking_request = blocking_request

        async def async_request(self, tracer: Any) -> Any:
            return self.blocking_request(tracer)

    return EmulatedRemoteBackend06


class Release06:
    """The parts of the request path that are nnsight 0.6's own (see the module doc)."""

    name = "0.6"
    _backend: Any = None

    def backend(self, model: Any, emulator: Any, verbose: bool = False) -> Any:
        if Release06._backend is None:
            Release06._backend = _make_backend_class()
        return Release06._backend(model, emulator, verbose=verbose)

    def _wrap(self, patches: Any, choose: Callable[[Any, Any], Any]) -> None:
        """Wrap ``RemoteableMixin.trace`` / ``.session``: ``choose(model, remote)``
        returns the backend to pass, or None to let nnsight decide."""
        from nnsight.modeling.mixins.remoteable import RemoteableMixin

        for name in ("trace", "session"):
            original = RemoteableMixin.__dict__[name]

            def wrapper(model, *inputs, backend=None, remote=False, blocking=True, wrapped=original, **kwargs):
                if backend is None and remote:
                    chosen = choose(model, remote)
                    if chosen is not None:
                        backend = chosen
                    elif not (isinstance(remote, str) and remote == "local"):
                        remote = False
                return wrapped(model, *inputs, backend=backend, remote=remote, blocking=blocking, **kwargs)

            wrapper.__wrapped__ = original  # type: ignore[attr-defined]
            wrapper.__name__ = name
            patches.set(RemoteableMixin, name, wrapper)

    def install(self, patches: Any, choose: Callable[..., Any]) -> None:
        self._wrap(patches, lambda model, remote: choose(model, remote))

    def local_only(self, patches: Any) -> None:
        """Every ``remote=`` ignored: the block runs locally."""
        self._wrap(patches, lambda model, remote: None)

    def remote_error(self) -> type:
        from nnsight.intervention.backends.remote import RemoteException

        return RemoteException

    def server_caches(self) -> Any:
        """0.6's tracing cache (sources and compiled code, keyed by a hash of file and
        line), emptied for the server side."""
        from nnsight.intervention.tracing.globals import Globals

        from .emulation_parts import dicts_emptied

        return dicts_emptied(Globals.cache.cache, Globals.cache.code_cache)

    def deserialize(self, model: Any, payload: bytes) -> Any:
        from nnsight.intervention.backends.local_simulation import LocalSimulationBackend

        from .emulation_parts import deserialize_hidden

        return deserialize_hidden(model, payload, LocalSimulationBackend, "_block_user_modules", "_restore_modules")

    def execute(self, restored: Any) -> dict:
        """What NDIF's 0.6 executor does with a request; the saved values by name."""
        from nnsight.intervention.tracing.globals import Globals
        from nnsight.intervention.tracing.util import wrap_exception

        client_stack, client_saves = Globals.stack, set(Globals.saves)
        Globals.stack = 0
        Globals.saves.clear()
        Globals.enter()
        info = restored.tracer.info
        # no frame while it runs: the empty SerializedFrame it shipped with would reach
        # PyFrame_LocalsToFast through ctypes in push() (see the module docstring)
        shipped_frame, info.frame = info.frame, None
        try:
            try:
                saves = restored.tracer.execute(restored.interventions)
            finally:
                info.frame = shipped_frame
        except Exception as error:
            raise wrap_exception(error, restored.tracer.info) from None
        finally:
            Globals.exit()
            Globals.saves.clear()
            Globals.saves.update(client_saves)
            Globals.stack = client_stack
        return dict(saves or {})

    def env_holder(self) -> Any:
        """The module whose ``_PULLED_ENV`` says pull_env() already ran."""
        from nnsight.intervention.backends import remote

        return remote

    def cache_keys(self) -> Any:
        from nnsight.intervention.tracing.globals import Globals

        return set(Globals.cache.cache), set(Globals.cache.code_cache)

    def settled(self, namespace: dict) -> dict:
        return namespace

    def forget_sources(self, before: Any, belongs: Callable[[Any], bool]) -> None:
        """Drop what the run added to 0.6's tracing cache (its keys are hashes, so the
        run's entries are those that were not there before)."""
        from nnsight.intervention.tracing.globals import Globals

        sources, code = before
        for key in [k for k in Globals.cache.cache if k not in sources]:
            del Globals.cache.cache[key]
        for key in [k for k in Globals.cache.code_cache if k not in code]:
            del Globals.cache.code_cache[key]

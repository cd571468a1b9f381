"""What the NDIF emulation's release-specific parts share (:mod:`ndif_opt.verify.emulation`
for nnsight 0.8, :mod:`ndif_opt.verify.emulation_06` for 0.6): patching with undo, the
hiding of the user's local modules and of the packages a server has not loaded, emptied
caches, the request's kind, zstd, the client's scan for local modules."""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from typing import Any, Callable, Iterator

from .server_rules import SERVER_PACKAGES

__all__ = [
    "Patches",
    "SERVER_INSTALLED",
    "ZSTD_LEVEL",
    "deserialize_hidden",
    "dicts_emptied",
    "kind_of",
    "local_modules_hidden",
    "pull_env",
    "zstd_compress",
    "zstd_decompress",
]

ZSTD_LEVEL = 6  # what RequestModel.serialize / the NDIF server use


# ---------------------------------------------------------------------------
# Patching with undo
# ---------------------------------------------------------------------------


class Patches:
    """setattr with undo (in reverse order): the runner's and the emulator's patches."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        missing = object()
        if isinstance(owner, type):
            previous = owner.__dict__.get(name, missing)
        else:
            previous = getattr(owner, "__dict__", {}).get(name, missing)
            if previous is missing and hasattr(owner, name):
                previous = getattr(owner, name)
        setattr(owner, name, value)

        def undo() -> None:
            if previous is missing:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, previous)

        self._undo.append(undo)

    def undo(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # pragma: no cover - defensive
                pass


#: Packages an NDIF server has loaded: they travel by reference and are not hidden while a
#: request is deserialized (nnterp's envoy classes and descriptors, a pandas frame; hidden,
#: a package would be imported a second time, its classes unlike the client's own).
SERVER_INSTALLED = SERVER_PACKAGES


@contextlib.contextmanager
def local_modules_hidden(hide: Callable[[], dict], restore: Callable[[dict], None]) -> Iterator[dict]:
    """nnsight's own hiding of the user's local modules (``hide``/``restore`` are its
    backend's methods: ``{"modules": {name: module}, "paths": [...]}``), except the
    packages the server has installed (:data:`SERVER_INSTALLED`), which stay importable
    as the very module objects the client uses."""
    hidden = hide()
    for name in [n for n in hidden["modules"] if n.split(".")[0] in SERVER_INSTALLED]:
        sys.modules[name] = hidden["modules"].pop(name)
    # a server process has a `__main__` of its own, without your names (dataclasses read
    # `sys.modules[cls.__module__].__dict__` when a class of your script is rebuilt)
    stand_in = "__main__" in hidden["modules"] and "__main__" not in sys.modules
    if stand_in:
        sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield hidden
    finally:
        if stand_in:
            del sys.modules["__main__"]
        restore(hidden)


def deserialize_hidden(model: Any, payload: bytes, hider: type, hide: str, restore: str) -> Any:
    """``RequestModel.deserialize(payload, persistent objects)`` with the user's local
    modules hidden by nnsight's own simulation backend ``hider`` (its ``hide`` and
    ``restore`` methods are named differently across releases)."""
    from nnsight.schema.request import RequestModel

    backend = hider(model)
    persistent = model._remoteable_persistent_objects()
    with local_modules_hidden(getattr(backend, hide), getattr(backend, restore)):
        return RequestModel.deserialize(payload, persistent, compress=False)


@contextlib.contextmanager
def dicts_emptied(*caches: dict) -> Iterator[None]:
    """Empty process-wide caches for the block (a fresh server process has none of the
    client's) and put the client's entries back afterwards."""
    kept = [dict(cache) for cache in caches]
    for cache in caches:
        cache.clear()
    try:
        yield
    finally:
        for cache, entries in zip(caches, kept):
            cache.clear()
            cache.update(entries)


def kind_of(tracer: Any, interleaving: type) -> str:
    """``"trace"`` | ``"generate"`` | ``"session"`` (a tracer that does not interleave)."""
    if not isinstance(tracer, interleaving):
        return "session"
    fn = getattr(tracer, "fn", None)
    name = fn if isinstance(fn, str) else getattr(fn, "__name__", "")
    return "generate" if name == "generate" else "trace"


def zstd_compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)


def zstd_decompress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompress(data)


# ---------------------------------------------------------------------------
# The client's scan for local modules
# ---------------------------------------------------------------------------


def pull_env(holder: types.ModuleType) -> None:
    """nnsight's ``pull_env()``, as a fresh client process runs it (0.8 has it in
    ``nnsight.ndif``, 0.6 in its remote backend's module: ``holder``, which also holds the
    ``_PULLED_ENV`` flag, ``get_local_env`` and ``register`` it uses): every module
    ``get_local_env`` finds importable from outside site-packages (the script's own helpers)
    is registered to ship by value, once per run.

    ``get_local_env`` also reads the metadata of every installed distribution (0.1-0.2 s, a
    third of a small script's emulated run); what is installed is the same in every run of
    this process, so that part is read once. The scan for local modules runs each time, as
    ``get_local_env`` runs it: the run's directory is first on ``sys.path`` and differs per run.
    """
    import pkgutil

    if holder._PULLED_ENV:
        return
    installed = _installed_import_names(holder.get_local_env)
    site_paths = {p for p in sys.path if "site-packages" in p or "dist-packages" in p}
    for importer, name, _ in pkgutil.iter_modules():
        if name in installed or name.startswith("_") or name in sys.stdlib_module_names:
            continue
        path = getattr(importer, "path", None)
        if path is not None and not any(path.startswith(site) for site in site_paths):
            holder.register(name)
    holder._PULLED_ENV = True


@functools.lru_cache(maxsize=1)
def _installed_import_names(get_local_env: Callable[[], dict]) -> frozenset[str]:
    """The names ``get_local_env`` reports as installed packages (not ``"local"``)."""
    return frozenset(name for name, version in get_local_env()["packages"].items() if version != "local")

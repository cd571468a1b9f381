"""The nnsight 0.4 parts of the runner (:mod:`ndif_opt.verify.runner`): local runs only.

:func:`~ndif_opt.verify.emulation.nnsight_release` picks :class:`Release04` when the installed
nnsight is a 0.4 release — in the venv where :mod:`ndif_opt.verify.original_04` runs a pre-0.5
original as its author did. 0.4's remote protocol is not emulated: the original runs locally,
its migration on nnsight 0.8.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["Release04"]


class _PulledEnv:
    """nnsight 0.4 ships no local modules (no pull_env): a holder for the runner's flag."""

    _PULLED_ENV = False


class Release04:
    """What the runner needs of nnsight 0.4: running locally. (0.4's remote protocol is
    not emulated: the original runs locally, the migrated script on nnsight 0.8.)"""

    name = "0.4"
    _env = _PulledEnv()

    def local_only(self, patches: Any) -> None:
        """Every ``remote=`` ignored (0.4 builds its RemoteBackend inline in ``trace`` and
        ``session``; ``generate`` goes through ``trace``)."""
        from nnsight.modeling.mixins.remoteable import RemoteableMixin

        for name in ("trace", "session"):
            original = RemoteableMixin.__dict__[name]

            def local(model, *args, remote=False, wrapped=original, **kwargs):
                return wrapped(model, *args, **kwargs)  # `remote` dropped: the block runs here

            local.__wrapped__ = original  # type: ignore[attr-defined]
            patches.set(RemoteableMixin, name, local)

    def install(self, patches: Any, choose: Callable[..., Any]) -> None:
        raise NotImplementedError("ndif-opt emulates NDIF for nnsight 0.6 and 0.8, not 0.4")

    def env_holder(self) -> Any:
        return self._env

    def cache_keys(self) -> Any:
        return None

    def forget_sources(self, before: Any, belongs: Callable[[Any], bool]) -> None:
        """0.4 keeps no per-file source caches (it traces by running the block)."""

    def settled(self, namespace: dict) -> dict:
        """Saved proxies (also inside lists, tuples and dicts) as their values."""
        from nnsight.tracing.graph import Proxy

        def value(item: Any, depth: int = 0) -> Any:
            if isinstance(item, Proxy):
                return item.value if item.node.done else item
            if depth > 8:
                return item
            if type(item) in (list, tuple):
                return type(item)(value(v, depth + 1) for v in item)
            if type(item) is dict:
                return {k: value(v, depth + 1) for k, v in item.items()}
            return item

        return {name: value(item) for name, item in namespace.items()}

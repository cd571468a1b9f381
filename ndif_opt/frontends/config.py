"""Configuration from ``pyproject.toml``: the ``[tool.ndif-opt]`` table.

    [tool.ndif-opt]
    select = ["session-hoisting"]          # run only these passes (default: all)
    ignore = ["accumulator-relocation"]    # never run these
    unsafe-fixes = false
    assume-remote = false
    max-batch = 32

    [tool.ndif-opt.cost]                   # cost-model assumptions
    seq-len = 16                           # tokens in a prompt that is not a literal
    latency = 2.0                          # seconds of round trip + queue per request
    bandwidth = 50e6                       # bytes per second of download
    throughput = 1e14                      # FLOP per second on the server
    max-new-tokens = 20                    # tokens a generate makes when not stated
    session-limit = 3600                   # seconds NDIF allows one request
    session-margin = 0.25                  # share of the limit held back
    view-storage = "compact"               # or "storage": a saved view ships its storage
    model-config = "config.json"           # a Hugging Face config.json for every model

    [tool.ndif-opt.models."meta-llama/Llama-3.1-8B"]
    dtype = "float32"                      # model overrides (see model_registry)

:func:`find_config` finds the ``pyproject.toml`` that applies to a file;
:func:`load_options` turns it, plus command-line overrides, into :class:`Options`.
Keys may be spelled with dashes (as above) or underscores. Unknown keys and pass ids
raise :class:`ConfigError`, which names the file and the key.

Cost assumptions land in ``Options.cost`` under their TOML names — ``"seq-len"``,
``"latency"``, ``"bandwidth"``, ``"throughput"``, ``"max-new-tokens"``, as
:mod:`ndif_opt.cost_model` reads them — and the models table, as read, under
``Options.cost["models"]``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ndif_opt.options import Options

TABLE = "tool.ndif-opt"

#: Top-level keys of ``[tool.ndif-opt]`` and the Options field each sets.
TOP_KEYS = {
    "select": "select",
    "ignore": "ignore",
    "unsafe-fixes": "unsafe_fixes",
    "assume-remote": "assume_remote",
    "max-batch": "max_batch",
    "migrate": "migrate",
    "nnsight": "nnsight",
    "cost": "cost",
    "models": "models",
}

#: Keys of ``[tool.ndif-opt.cost]``: (key in Options.cost, type, description).
COST_KEYS: dict[str, tuple[str, type, str]] = {
    "seq-len": ("seq-len", int, "tokens in a prompt that is not a literal string"),
    "latency": ("latency", float, "seconds of network and queueing per request"),
    "bandwidth": ("bandwidth", float, "download bytes per second"),
    "throughput": ("throughput", float, "server FLOP per second"),
    "max-new-tokens": ("max-new-tokens", int, "tokens a generate makes when not stated"),
    "upload-bandwidth": ("upload-bandwidth", float, "upload bytes per second"),
    "memory-bandwidth": ("memory-bandwidth", float, "bytes per second the server reads weights at"),
    "unknown-trips": ("unknown-trips", int, "iterations taken for a loop of unknown length where a plan needs a "
                      "number (session-chunking); the report shows such a loop as N"),
    "trips": ("trips", dict, "the lengths of loops not known before running, by the header the report names: "
              "{\"for row in rows\" = 817}"),
    "session-limit": ("session-limit", float, "seconds after which NDIF stops a request"),
    "session-margin": ("session-margin", float, "share of the session limit held back (0 to 0.95)"),
    "view-storage": ("view-storage", str, "'compact' (GPU server) or 'storage' (views ship their storage)"),
    "model-config": ("model-config", dict, "a Hugging Face config.json applied to every model"),
}

#: Keyword arguments :func:`load_options` accepts as command-line overrides.
OVERRIDES = ("select", "ignore", "unsafe_fixes", "assume_remote", "max_batch", "cost", "migrate", "nnsight")


class ConfigError(ValueError):
    """A configuration file that cannot be read or holds a bad key or value."""

    def __init__(self, path: str | os.PathLike | None, message: str, key: str | None = None):
        self.path = str(path) if path is not None else None
        self.key = key
        self.detail = message
        parts = [self.path or "<command line>"]
        if key:
            parts.append(key)
        super().__init__(": ".join(parts + [message]))


def _has_table(path: Path) -> bool:
    try:
        data = _read(path)
    except ConfigError:
        # A broken pyproject.toml that mentions us still "is" our config: loading it
        # reports the error instead of silently skipping to a parent directory.
        try:
            return "ndif-opt" in path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    return isinstance(data.get("tool"), dict) and "ndif-opt" in data["tool"]


def find_config(path: str | os.PathLike | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.ndif-opt]`` table.

    Walks up from ``path`` (a file or a directory; None means the current directory),
    checking each directory's ``pyproject.toml``. Stops after the directory that holds
    a ``.git`` folder (the repository root) or at the filesystem root.
    """
    start = Path(path) if path is not None else Path.cwd()
    try:
        start = start.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
        start = start.absolute()
    directory = start if start.is_dir() else start.parent
    while True:
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and _has_table(candidate):
            return candidate
        if (directory / ".git").exists() or directory.parent == directory:
            return None
        directory = directory.parent


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(path, f"cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(path, f"invalid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(path, f"not UTF-8: {error}") from None


def _norm(key: str) -> str:
    return key.replace("_", "-")


def _unknown(path, key: str, known: Iterable[str], table: str) -> ConfigError:
    close = difflib.get_close_matches(_norm(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
    return ConfigError(path, f"unknown key {key!r}{hint}", f"{table}.{key}")


def _pass_ids(path, key: str, value: Any) -> frozenset[str]:
    from ndif_opt.passes import PASS_IDS

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, "must be a list of pass ids", key)
    for pass_id in value:
        if pass_id not in PASS_IDS:
            close = difflib.get_close_matches(pass_id, PASS_IDS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(PASS_IDS)}"
            raise ConfigError(path, f"unknown pass id {pass_id!r} ({hint})", key)
    return frozenset(value)


def _bool(path, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, not {value!r}", key)
    return value


def _positive(path, key: str, value: Any, kind: type) -> int | float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and (isinstance(value, int) or float(value).is_integer())
    if not ok or value <= 0 or value != value or value == float("inf"):
        noun = "a positive integer" if kind is int else "a positive number"
        raise ConfigError(path, f"must be {noun}, not {value!r}", key)
    return kind(value)


def _cost(path, table: Any) -> dict:
    key = f"{TABLE}.cost"
    if not isinstance(table, Mapping):
        raise ConfigError(path, "must be a table", key)
    cost = {}
    for raw, value in table.items():
        name = _norm(raw)
        if name not in COST_KEYS:
            raise _unknown(path, raw, COST_KEYS, key)
        field, kind, _ = COST_KEYS[name]
        cost[field] = _cost_value(path, f"{key}.{raw}", name, value, kind)
    return cost


def _cost_value(path, key: str, name: str, value: Any, kind: type) -> Any:
    """One ``[tool.ndif-opt.cost]`` value, checked (a model-config path is loaded)."""
    if name == "view-storage":
        if value not in ("compact", "storage"):
            raise ConfigError(path, f"must be 'compact' or 'storage', not {value!r}", key)
        return value
    if name == "trips":
        if not isinstance(value, Mapping):
            raise ConfigError(path, "must be a table of loop headers and their lengths", key)
        return {str(header): _positive(path, f"{key}.{header}", n, int) for header, n in value.items()}
    if name == "model-config":
        if isinstance(value, Mapping):
            return _checked_model_config(dict(value), path, key)
        if not isinstance(value, str):
            raise ConfigError(path, "must be the path of a config.json", key)
        base = Path(path).parent if path is not None else Path.cwd()
        return load_model_config(base / value)
    number = _positive(path, key, value, kind)
    if name == "session-margin" and number > 0.95:
        raise ConfigError(path, f"must be a share between 0 and 0.95, not {value!r}", key)
    return number


def load_model_config(path: str | os.PathLike) -> dict:
    """A Hugging Face ``config.json`` for ``Options.cost["model-config"]`` (the CLI's
    ``--model-config FILE``): every model of the script gets its dimensions, and its
    ``torch_dtype`` sets the dtype. Raises :class:`ConfigError` naming the file."""
    import json

    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(source, f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(source, f"not UTF-8: {error}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(source, f"invalid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(source, "must hold a JSON object (a model's config.json)")
    return _checked_model_config(config, source, None)


def _checked_model_config(config: dict, path, key: str | None) -> dict:
    from ndif_opt.cost.model_registry import dims_from_hf_config

    try:
        dims_from_hf_config(config, name=str(config.get("_name_or_path") or "model"))
    except (ValueError, TypeError) as error:
        raise ConfigError(path, f"not a usable model config: {error}", key) from None
    return config


def _models(path, table: Any) -> dict:
    key = f"{TABLE}.models"
    if not isinstance(table, Mapping):
        raise ConfigError(path, "must be a table of model tables", key)
    for name, fields in table.items():
        if not isinstance(fields, Mapping):
            raise ConfigError(path, "must be a table of fields", f'{key}."{name}"')
    try:  # validate with the model registry when it is there
        from ndif_opt.cost.model_registry import load_overrides
    except ImportError:  # pragma: no cover - registry not present
        return dict(table)
    try:
        load_overrides(table)
    except (ValueError, TypeError) as error:
        raise ConfigError(path, str(error), key) from None
    return dict(table)


def _release(path, where: str, value: Any) -> str:
    """Any nnsight 0.5+ release, as the rules it runs by (0.8's, or 0.6's for the others)."""
    from ndif_opt.analysis.releases import release_rules

    try:
        return release_rules(value)
    except ValueError as error:
        raise ConfigError(path, str(error), where) from None


def parse_table(table: Mapping, path: str | os.PathLike | None = None) -> dict:
    """Validate a ``[tool.ndif-opt]`` table; return Options keyword arguments."""
    if not isinstance(table, Mapping):
        raise ConfigError(path, "[tool.ndif-opt] must be a table")
    values: dict[str, Any] = {}
    cost: dict[str, Any] = {}
    for raw, value in table.items():
        key = _norm(raw)
        if key not in TOP_KEYS:
            raise _unknown(path, raw, TOP_KEYS, TABLE)
        if key in ("select", "ignore"):
            values[TOP_KEYS[key]] = _pass_ids(path, f"{TABLE}.{raw}", value)
        elif key in ("unsafe-fixes", "assume-remote", "migrate"):
            values[TOP_KEYS[key]] = _bool(path, f"{TABLE}.{raw}", value)
        elif key == "max-batch":
            values["max_batch"] = _positive(path, f"{TABLE}.{raw}", value, int)
        elif key == "nnsight":
            values["nnsight"] = _release(path, f"{TABLE}.{raw}", value)
        elif key == "cost":
            cost.update(_cost(path, value))
        elif key == "models":
            cost["models"] = _models(path, value)
    if cost:
        values["cost"] = cost
    return values


def load_options(
    path: str | os.PathLike | None = None,
    *,
    config: str | os.PathLike | None = None,
    **cli_overrides: Any,
) -> Options:
    """Options for a file: its ``[tool.ndif-opt]`` table with overrides on top.

    ``path`` is the file (or directory) being optimized — the configuration is found
    from there with :func:`find_config` — or, when it names a ``.toml`` file, the
    configuration file itself. ``config`` names the configuration file explicitly
    (the CLI's ``--config``) and skips the search; it must hold ``[tool.ndif-opt]``.

    ``cli_overrides`` take ``select``, ``ignore``, ``unsafe_fixes``, ``assume_remote``,
    ``max_batch`` and ``cost`` (a dict merged over the file's); a value of None —
    or an empty ``select``/``ignore`` list, which a command line cannot mean on
    purpose — leaves the file's value in place.
    """
    for key in cli_overrides:
        if key not in OVERRIDES:
            raise TypeError(f"load_options() got an unexpected override {key!r}")
    if config is not None:
        source: Path | None = Path(config)
        if not source.is_file():
            raise ConfigError(source, "no such configuration file")
        data = _read(source)
        tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
        if "ndif-opt" not in tool:
            raise ConfigError(source, "has no [tool.ndif-opt] table")
    elif path is not None and str(path).endswith(".toml") and Path(path).is_file():
        source = Path(path)
    else:
        source = find_config(path)
    values: dict[str, Any] = {}
    if source is not None:
        data = _read(source)
        tool = data.get("tool")
        if isinstance(tool, dict) and "ndif-opt" in tool:
            values = parse_table(tool["ndif-opt"], source)
    for key, value in cli_overrides.items():
        if value is None:
            continue
        if key in ("select", "ignore"):
            if isinstance(value, str):
                value = [value]
            if not value:
                continue
            values[key] = _pass_ids(None, f"--{key}", list(value))
        elif key == "cost":
            merged = dict(values.get("cost", {}))
            merged.update(value)
            values["cost"] = merged
        elif key == "max_batch":
            values[key] = _positive(None, "--max-batch", value, int)
        elif key == "nnsight":
            values[key] = _release(None, "--nnsight", value)
        else:
            values[key] = bool(value)
    return Options(**values)


__all__ = ["ConfigError", "find_config", "load_model_config", "load_options", "parse_table", "COST_KEYS"]

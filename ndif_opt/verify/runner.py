"""Run an nnsight script in-process, as a user would, against tiny models.

:func:`run_script` executes a script's source as ``__main__`` from a real file in a
fresh temporary directory (also the working directory, so files the script writes
are collected), under a fresh unique path per call (nnsight reads a block's source
through ``linecache`` and caches it per filename for the life of the process).

While the script runs, constructing a model from a repo id string —
``LanguageModel(...)``, ``TransformersModel(...)``, ``NNsight("...")``,
``nnterp.StandardizedTransformer(...)`` (when nnterp is installed),
``AutoModelForCausalLM.from_pretrained``, ``AutoTokenizer.from_pretrained`` — yields
a tiny seeded model of that family (:mod:`ndif_opt.verify.tiny_models`); loading
kwargs (``device_map``, ``dispatch``, ``torch_dtype``...) are ignored. The classes'
``__init__`` is patched in place rather than the classes replaced, so the script gets
instances of nnsight's own classes (``isinstance`` works, and a request pickles the
class by reference exactly as a real client's would). ``CONFIG.set_default_api_key``
does not write the user's config file, ``huggingface_hub.login`` is a no-op, and
``os.environ`` / ``CONFIG`` changes are undone after the run. An NDIF or Hugging Face
credential the script reads from the environment (``os.environ["NDIF_API_KEY"]``,
``os.getenv("HF_TOKEN")``) holds a placeholder when it is unset: nothing is ever sent to
either.

Each run starts from what a fresh process would have: ``logging`` without the handlers
an earlier run (or the caller) configured, no pyplot figure an earlier run left open, and the files the script writes outside
its directory as they were before the run (:class:`~.written_files.WrittenFiles`
records them, and they are reported in ``files`` by absolute path). ``workdir`` gives
several runs the same directory, so ``__file__`` and every path derived from it are
equal across them.

Modes:

``"local"``
    every ``remote=`` is ignored: blocks run locally, which is what the script's
    author *intended* it to compute.
``"emulated"``
    inside :class:`~ndif_opt.verify.emulation.EmulatedNDIF`: ``remote=True`` goes
    through a server-faithful emulation of NDIF (requests and bytes are recorded).

Nothing the script does (weights edited, hooks left, helper modules imported, cwd,
``sys.argv``, ``os.environ``, nnsight's caches and config) outlives the call.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import io
import itertools
import linecache
import logging
import os
import random
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import types
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from .compare import comparable_namespace
from .emulation import (
    CallCounter,
    EmulatedNDIF,
    Patches,
    RequestRecord,
    count_calls,
    instrument,
    nnsight_release,
    summarize,
    uninstrument,
)
from .tiny_models import TinyModelWarning, sizes_the_error_names, tiny_module, tiny_tokenizer
from .written_files import WrittenFiles

__all__ = ["RunResult", "credentials_read", "fresh_workdir", "run_script", "patched_environment"]

MODES = ("local", "emulated")
SEED = 0
_counter = itertools.count()


@dataclass
class RunResult:
    """What one run of a script did."""

    mode: str
    namespace: dict[str, Any] = field(default_factory=dict)  # comparable globals
    requests: list[RequestRecord] = field(default_factory=list)
    forward_passes: int = 0
    layer_calls: int = 0
    stdout: str = ""  # client stdout only (server prints are in requests[i].logs)
    stderr: str = ""
    # written in the run's directory (relative name) or anywhere else (absolute path)
    files: dict[str, bytes] = field(default_factory=dict)
    error: Optional[str] = None  # "Type: message" of an exception the script raised
    traceback: Optional[str] = None
    warnings: list[str] = field(default_factory=list)  # tiny-model approximations
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def upload_bytes(self) -> int:
        return sum(r.upload_bytes for r in self.requests)

    @property
    def upload_raw_bytes(self) -> int:
        return sum(r.upload_raw_bytes for r in self.requests)

    @property
    def download_bytes(self) -> int:
        return sum(r.download_bytes for r in self.requests)

    @property
    def download_raw_bytes(self) -> int:
        return sum(r.download_raw_bytes for r in self.requests)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "namespace": {k: summarize(v) for k, v in self.namespace.items()},
            "requests": [r.to_dict() for r in self.requests],
            "forward_passes": self.forward_passes,
            "layer_calls": self.layer_calls,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "files": {k: len(v) for k, v in self.files.items()},
            "error": self.error,
            "warnings": list(self.warnings),
            "seconds": self.seconds,
        }


# ---------------------------------------------------------------------------
# Model construction interception
# ---------------------------------------------------------------------------


class _RunState:
    """Models built during one run (so their hooks can be removed afterwards).

    ``gradients``: the script takes gradients (`metric.backward()`, `.grad`), so the tiny
    models' parameters require grad, as a model loaded from its repo has them. Otherwise
    they do not (tiny_models): every value would carry a ``grad_fn`` that the emulated
    download drops, and a printed tensor or a file written by ``torch.save`` would differ
    between the local and the remote run for that alone."""

    def __init__(self, gradients: bool = False) -> None:
        self.models: list[Any] = []
        self.built_models: list[Any] = []  # (kept after close: what the run's error may be about)
        self.gradients = gradients

    def built(self, model: Any) -> Any:
        module = getattr(model, "_module", None)
        if self.gradients and module is not None and hasattr(module, "requires_grad_"):
            module.requires_grad_(True)
        instrument(model)
        self.models.append(model)
        self.built_models.append(model)
        return model

    def close(self) -> None:
        for model in self.models:
            try:
                uninstrument(model)
            except Exception:  # pragma: no cover - defensive
                pass
        self.models.clear()


_STATE = threading.local()


def _state() -> Optional[_RunState]:
    return getattr(_STATE, "run", None)


def _register(model: Any) -> None:
    state = _state()
    if state is not None:
        state.built(model)


def _intercept_init(patches: "Patches", cls: type, build: Callable[..., None], *, exact: bool = False) -> None:
    """Patch ``cls.__init__`` so that ``cls(repo_id: str, **load_kwargs)`` wraps a tiny
    model instead of loading ``repo_id``; any other call is passed through.

    Patching ``__init__`` in place (rather than replacing the class in its module)
    keeps instances of nnsight's own classes and keeps the classes importable by
    name, so a request pickles them by reference exactly as a real client does.
    """
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        repo_id = args[0] if args else kwargs.get("repo_id")
        if isinstance(repo_id, str) and (not exact or type(self) is cls):
            build(original, self, repo_id, kwargs)
            _register(self)
            return
        original(self, *args, **kwargs)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    patches.set(cls, "__init__", __init__)


def _build_language_model(original: Callable, self: Any, repo_id: str, kwargs: dict) -> None:
    module = tiny_module(repo_id)
    original(
        self,
        module,
        tokenizer=tiny_tokenizer(),
        tokenizer_kwargs=kwargs.get("tokenizer_kwargs"),
    )
    _keep_config(self, module)


def _build_transformers_model(original: Callable, self: Any, repo_id: str, kwargs: dict) -> None:
    module = tiny_module(repo_id)
    original(
        self,
        module,
        tokenizer=tiny_tokenizer(),
        task=kwargs.get("task") or "text-generation",
    )
    _keep_config(self, module)


def _keep_config(model: Any, module: Any) -> None:
    """``model.config`` as a model loaded from its repo id has it. nnsight 0.6 sets it only
    when it loads the config itself, not for a module it is given (0.8 takes the module's)."""
    if getattr(model, "config", None) is None and getattr(module, "config", None) is not None:
        # the wrapper's own attribute, as 0.6 sets it while loading (its __setattr__ would
        # hand `config` to the module, which has one already)
        vars(model)["config"] = module.config


def _build_nnsight(original: Callable, self: Any, repo_id: str, kwargs: dict) -> None:
    original(self, tiny_module(repo_id))


#: StandardizedTransformer options that are nnterp's own (not loading options): passed on.
_NNTERP_OPTIONS = (
    "check_renaming", "remote", "allow_dispatch", "enable_attention_probs",
    "check_attn_probs_with_trace", "allow_multimodal", "rename_config", "rename",
)


def _build_standardized(original: Callable, self: Any, repo_id: str, kwargs: dict) -> None:
    module = tiny_module(repo_id)
    # attn_implementation="eager" (or enable_attention_probs, which implies it) loads an
    # eager model; nnterp's attention-probabilities check needs one.
    if kwargs.get("enable_attention_probs") or kwargs.get("attn_implementation") == "eager":
        module.set_attn_implementation("eager")
    options = {name: kwargs[name] for name in _NNTERP_OPTIONS if name in kwargs}
    original(self, module, tokenizer=tiny_tokenizer(), **options)


def _patch_models(patches: Patches) -> None:
    from nnsight.modeling.language import LanguageModel

    try:
        from nnsight.modeling.transformers import TransformersModel
    except ImportError:  # nnsight 0.4 has no TransformersModel
        TransformersModel = None
    try:
        from nnsight.modeling.base import NNsight
    except ImportError:  # nnsight 0.4's is nnsight.NNsight
        from nnsight import NNsight

    _intercept_init(patches, LanguageModel, _build_language_model)
    if TransformersModel is not None:
        _intercept_init(patches, TransformersModel, _build_transformers_model)
    _intercept_init(patches, NNsight, _build_nnsight, exact=True)

    try:
        import nnterp  # type: ignore
    except Exception:
        nnterp = None
    standardized = getattr(nnterp, "StandardizedTransformer", None) if nnterp else None
    if isinstance(standardized, type):
        _intercept_init(patches, standardized, _build_standardized)

    import transformers

    def _tokenizer_from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        return tiny_tokenizer()

    def _model_from_pretrained(cls: Any, name: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(name, str):
            raise TypeError("ndif-opt verify: from_pretrained needs a repo id string")
        module = tiny_module(name)
        _register(module)
        return module

    patches.set(transformers.AutoTokenizer, "from_pretrained", classmethod(_tokenizer_from_pretrained))
    for name in ("AutoModelForCausalLM", "AutoModel"):
        auto = getattr(transformers, name, None)
        if auto is not None:
            patches.set(auto, "from_pretrained", classmethod(_model_from_pretrained))


def _patch_credentials(patches: Patches) -> None:
    from nnsight import CONFIG

    # CONFIG.set_default_api_key(...) persists to ~/.config; make saving a no-op
    # (the class is Config in nnsight 0.8, ConfigModel in 0.6).
    patches.set(type(CONFIG), "save", lambda self: None)
    try:
        import huggingface_hub
    except Exception:
        return
    noop = lambda *args, **kwargs: None  # noqa: E731
    patches.set(huggingface_hub, "login", noop)
    patches.set(huggingface_hub, "notebook_login", noop)


@contextlib.contextmanager
def patched_environment(mode: str = "local") -> Iterator[Optional[EmulatedNDIF]]:
    """Model-construction stand-ins, harmless credentials and the ``mode`` backend.

    Yields the active :class:`EmulatedNDIF` in ``"emulated"`` mode, else None.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    patches = Patches()
    try:
        _patch_models(patches)
        _patch_credentials(patches)
        if mode == "local":
            nnsight_release().local_only(patches)
            yield None
        else:
            with EmulatedNDIF() as emulator:
                yield emulator
    finally:
        patches.undo()


# ---------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------

#: What an unset credential holds while a script runs (verify never contacts NDIF or the hub).
PLACEHOLDER_CREDENTIAL = "ndif-opt-verify-placeholder"

# A name read from the environment: os.environ["X"], os.environ.get("X"), os.getenv("X"),
# environ.pop("X") (after `from os import environ`).
_ENVIRONMENT_READ = re.compile(
    r"""(?:environ\s*\[|environ\s*\.\s*(?:get|pop|setdefault)\s*\(|getenv\s*\()\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
)
# Credentials of the services verify stands in for: NDIF/nnsight (NDIF_API_KEY, NNSIGHT_API_KEY,
# NDIF_API) and the Hugging Face hub (HF_TOKEN, HUGGING_FACE_HUB_TOKEN). Another service's key
# (OPENAI_API_KEY) stays unset: the script really calls that service when it has one.
_SERVICE = re.compile(r"(NDIF|NNSIGHT).*(KEY|TOKEN|API)|(^HF_|HUGGING).*(KEY|TOKEN)", re.IGNORECASE)


def credentials_read(source: str) -> list[str]:
    """The NDIF and Hugging Face credentials ``source`` reads from the environment."""
    return sorted({name for name in _ENVIRONMENT_READ.findall(source) if _SERVICE.search(name)})


def _placeholder_credentials(source: str) -> None:
    """Set each credential the script reads, when unset (the run's snapshot puts
    ``os.environ`` back afterwards)."""
    for name in credentials_read(source):
        os.environ.setdefault(name, PLACEHOLDER_CREDENTIAL)


# ---------------------------------------------------------------------------
# Process state to restore
# ---------------------------------------------------------------------------


class _LoggingState:
    """``logging`` as it was before a run; a run starts without the root handlers.

    ``logging.basicConfig`` binds its handler to the ``sys.stdout``/``sys.stderr`` of
    the moment and does nothing once the root logger has a handler: without a reset
    the first run's handler keeps catching the later runs' records, which then never
    reach their own output.
    """

    def __init__(self) -> None:
        manager = logging.Logger.manager
        self.disabled = manager.disable
        self.loggers = {
            name: self._state(logger)
            for name, logger in [("", logging.root), *manager.loggerDict.items()]
            if isinstance(logger, logging.Logger)
        }

    @staticmethod
    def _state(logger: logging.Logger) -> tuple:
        return list(logger.handlers), logger.level, logger.propagate, logger.disabled

    def fresh(self) -> None:
        """The root logger of a fresh process: no handlers, WARNING."""
        logging.root.handlers = []
        logging.root.setLevel(logging.WARNING)
        logging.disable(logging.NOTSET)

    def restore(self) -> None:
        """Every logger as it was; one made during the run (the script's, or a library's
        imported then) keeps its settings but loses its handlers, bound to the run's
        output."""
        manager = logging.Logger.manager
        for name, logger in [("", logging.root), *manager.loggerDict.items()]:
            if not isinstance(logger, logging.Logger):
                continue
            handlers, *settings = self.loggers.get(name, ([], logger.level, logger.propagate, logger.disabled))
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()  # e.g. a FileHandler the script opened
            logger.handlers = list(handlers)
            level, logger.propagate, logger.disabled = settings
            if logger.level != level:  # setLevel empties every logger's cache: a run has thousands
                logger.setLevel(level)
        logging.disable(self.disabled)


class _Snapshot:
    def __init__(self, run_dir: str) -> None:
        import torch
        from nnsight import CONFIG

        self.release = nnsight_release()
        self.run_dir = run_dir
        self.cwd = os.getcwd()
        self.argv = list(sys.argv)
        self.path = list(sys.path)
        self.modules = set(sys.modules)
        self.main = sys.modules.get("__main__")
        self.environ = dict(os.environ)
        self.stdin = sys.stdin
        self.trace = sys.gettrace()
        self.grad = torch.is_grad_enabled()
        self.dtype = torch.get_default_dtype()
        self.threads = torch.get_num_threads()
        self.config = CONFIG.model_dump()
        self.pulled = self.release.env_holder()._PULLED_ENV
        self.by_value = set(_pickled_by_value())
        self.cache_keys = self.release.cache_keys()
        self.logging = _LoggingState()
        self.figures = set(_open_figures())

    def restore(self, script_path: str) -> None:
        import torch
        from nnsight import CONFIG

        sys.settrace(self.trace)
        self.logging.restore()
        _close_figures(set(_open_figures()) - self.figures)
        os.chdir(self.cwd)
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        sys.stdin = self.stdin
        if self.main is not None:
            sys.modules["__main__"] = self.main
        run_dir = os.path.realpath(self.run_dir)
        for name in list(sys.modules):
            if name in self.modules:
                continue
            # a submodule of a package loaded before the run (ndif-opt's own, nnsight's) stays
            package_before = name.partition(".")[0] in self.modules
            location = getattr(sys.modules.get(name), "__file__", None) or ""
            if location and not package_before and _script_own(os.path.realpath(location), run_dir):
                del sys.modules[name]
        # the next run may use the same directory (``workdir``): forget its listing
        for entry in [e for e in sys.path_importer_cache if isinstance(e, str) and _belongs(e, script_path, run_dir)]:
            del sys.path_importer_cache[entry]
        importlib.invalidate_caches()
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        torch.set_grad_enabled(self.grad)
        torch.set_default_dtype(self.dtype)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        for section, values in self.config.items():
            target = getattr(CONFIG, section)
            for key, value in values.items():
                try:
                    setattr(target, key, value)
                except Exception:  # pragma: no cover - defensive
                    pass
        self.release.env_holder()._PULLED_ENV = self.pulled
        by_value = _pickled_by_value()
        by_value.clear()
        by_value.update(self.by_value)
        # nnsight's per-file caches and linecache entries for this run's files.
        self.release.forget_sources(self.cache_keys, lambda name: _belongs(name, script_path, run_dir))
        for key in [k for k in list(linecache.cache) if _belongs(k, script_path, run_dir)]:
            linecache.cache.pop(key, None)


def _takes_gradients(source: str) -> bool:
    """Does the script take gradients (a backward pass, a `.grad` read)?"""
    return re.search(r"\.backward\s*\(|\.grad\b", source) is not None


def _script_own(location: str, run_dir: str) -> bool:
    """Whether a module the run imported is the script's own: in the run's directory, or a
    Python file outside the installation (a helper module next to the script, or one a
    ``sys.path.insert`` reaches). Such a module is imported afresh by the next run, as a fresh
    process would: a list it fills must not carry one run's values into the next. Installed
    packages and compiled extensions are kept (an extension cannot be imported twice)."""
    if location.startswith(run_dir + os.sep):
        return True
    inside = any(location.startswith(path) for path in _installation())
    packaged = "site-packages" in location or "dist-packages" in location
    return location.endswith(".py") and not inside and not packaged


@functools.lru_cache(maxsize=1)
def _installation() -> tuple[str, ...]:
    """The directories of this interpreter's standard library and installed packages, each
    with its separator (the same for every module of every run: read once)."""
    paths = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(path) + os.sep for path in paths if path)


def _open_figures() -> list[int]:
    """The numbers of pyplot's open figures (none when no run imported pyplot)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    return list(pyplot.get_fignums()) if pyplot is not None else []


def _close_figures(numbers: set[int]) -> None:
    """Close the figures a run left open: pyplot's current figure is the process's, and
    the next run's `plt.plot(...)` would draw into it (a fresh process has none)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    for number in sorted(numbers) if pyplot is not None else ():
        pyplot.close(number)


def _pickled_by_value() -> set:
    """cloudpickle's modules pickled by value (pull_env registers local modules there), or an
    empty set where nnsight does not use cloudpickle (0.4)."""
    try:
        from cloudpickle.cloudpickle import _PICKLE_BY_VALUE_MODULES
    except ImportError:
        return set()
    return _PICKLE_BY_VALUE_MODULES


def _belongs(filename: Any, script_path: str, run_dir: str) -> bool:
    if not isinstance(filename, str):
        return False
    return script_path in filename or run_dir in filename


def _seed_everything(seed: int = SEED) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except Exception:  # pragma: no cover - numpy is optional
        pass


@contextlib.contextmanager
def _alarm(timeout: Optional[float]) -> Iterator[None]:
    usable = (
        timeout is not None
        and timeout > 0
        and threading.current_thread() is threading.main_thread()
        and hasattr(signal, "setitimer")
    )
    if not usable:
        yield
        return

    def _expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"script exceeded the {timeout:g} s timeout")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _collect_files(run_dir: Path, skip: dict[str, bytes]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        name = path.relative_to(run_dir).as_posix()
        try:
            data = path.read_bytes()
        except OSError:  # pragma: no cover - vanished or unreadable
            continue
        if name in skip and skip[name] == data:
            continue
        files[name] = data
    return files


# ---------------------------------------------------------------------------
# run_script
# ---------------------------------------------------------------------------


def run_script(
    source: str,
    *,
    filename: str = "script.py",
    mode: str = "local",
    argv: Optional[Sequence[str]] = None,
    timeout: Optional[float] = None,
    extra_files: Optional[dict[str, str | bytes]] = None,
    workdir: Optional[str] = None,
    notebook: bool = False,
) -> RunResult:
    """Run ``source`` as ``__main__`` in-process and report what it did.

    Args:
        source: The script's text.
        filename: Base name the script is written under (inside a fresh unique
            temporary directory, which is also the working directory and
            ``sys.path[0]``).
        mode: ``"local"`` (every ``remote=`` ignored: the intended result) or
            ``"emulated"`` (``remote=True`` served by :class:`EmulatedNDIF`).
        argv: Extra command-line arguments (``sys.argv[1:]``).
        timeout: Seconds before a ``TimeoutError`` is raised in the script (only
            when called from the main thread; POSIX).
        extra_files: Files to place next to the script first (e.g. helper modules);
            they are not reported in ``files`` unless the script changes them.
        workdir: The run's directory instead of a fresh unique one: created, and
            removed after the run (it must not hold anything else). Runs compared
            with each other share one, so that ``__file__`` is the same in each.
        notebook: The script is a notebook's cells: what a Jupyter kernel gives every
            cell is there (``display``, which prints the text a notebook shows).

    An exception raised by the script is captured in ``error`` / ``traceback``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if workdir is None:
        run_dir = Path(tempfile.mkdtemp(prefix=f"ndif_opt_run_{next(_counter)}_{uuid.uuid4().hex[:8]}_"))
    else:
        run_dir = Path(workdir)
        run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _run_in(run_dir, source, os.path.basename(filename) or "script.py", mode, argv, timeout, extra_files,
                       notebook)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def fresh_workdir() -> str:
    """A path for :func:`run_script`'s ``workdir`` that nothing else uses (not created)."""
    reserved = tempfile.mkdtemp(prefix=f"ndif_opt_run_{next(_counter)}_{uuid.uuid4().hex[:8]}_")
    os.rmdir(reserved)
    return reserved


def _run_in(
    run_dir: Path,
    source: str,
    base: str,
    mode: str,
    argv: Optional[Sequence[str]],
    timeout: Optional[float],
    extra_files: Optional[dict[str, str | bytes]],
    notebook: bool = False,
) -> RunResult:
    import torch

    script_path = str(run_dir / base)
    preexisting: dict[str, bytes] = {}
    for name, content in (extra_files or {}).items():
        target = run_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        target.write_bytes(data)
        preexisting[Path(name).as_posix()] = data
    Path(script_path).write_text(source, encoding="utf-8")
    preexisting[base] = source.encode("utf-8")

    result = RunResult(mode=mode)
    stdout, stderr = io.StringIO(), io.StringIO()
    snapshot = _Snapshot(str(run_dir))
    state = _RunState(gradients=_takes_gradients(source))
    counter = CallCounter()
    written = WrittenFiles(str(run_dir))
    recording = Patches()
    module = types.ModuleType("__main__")
    module.__dict__.update(
        {"__file__": script_path, "__builtins__": builtins, "__spec__": None,
         "__loader__": None, "__package__": None, "__cached__": None}
    )
    started = time.perf_counter()
    caught: list[warnings.WarningMessage] = []
    outside: dict[str, bytes] = {}
    try:
        nnsight_release().env_holder()._PULLED_ENV = False  # a fresh client process
        os.chdir(run_dir)
        sys.argv[:] = [script_path, *(argv or [])]
        sys.path.insert(0, str(run_dir))
        sys.modules["__main__"] = module
        sys.stdin = io.StringIO("")
        os.environ.setdefault("MPLBACKEND", "Agg")
        _placeholder_credentials(source)
        snapshot.logging.fresh()
        _seed_everything()
        # Tiny models: one intra-op thread is faster (a contended OpenMP pool can make
        # a 64-wide matmul 200x slower) and keeps local and emulated runs on the same
        # reduction order.
        torch.set_num_threads(1)
        try:
            code = compile(source, script_path, "exec")
        except SyntaxError as error:  # e.g. a notebook's `!pip` line
            code = None
            result.error = f"SyntaxError: {error}"
            result.traceback = traceback.format_exc()
        _STATE.run = state
        written.install(recording)
        if notebook and not hasattr(builtins, "display"):
            recording.set(builtins, "display", notebook_display)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", TinyModelWarning)
            with _quiet_transformers(), patched_environment(mode) as emulator, \
                    count_calls(counter), contextlib.redirect_stdout(stdout), \
                    contextlib.redirect_stderr(stderr), _alarm(timeout):
                try:
                    if code is not None:
                        exec(code, module.__dict__)
                except SystemExit as exit_:
                    if exit_.code not in (None, 0):
                        result.error = f"SystemExit: {exit_.code}"
                        result.traceback = traceback.format_exc()
                except BaseException as error:  # noqa: BLE001 - reported, not raised
                    if isinstance(error, KeyboardInterrupt):
                        raise
                    result.error = f"{type(error).__name__}: {error}"
                    result.traceback = traceback.format_exc()
                finally:
                    if emulator is not None:
                        result.requests = list(emulator.requests)
    finally:
        _STATE.run = None
        state.close()
        recording.undo()
        outside = written.collect()
        written.restore()  # the next run starts from the same files
        snapshot.restore(script_path)
        result.seconds = time.perf_counter() - started
    result.forward_passes = counter.forward_passes
    result.layer_calls = counter.layer_calls
    result.stdout = stdout.getvalue()
    result.stderr = stderr.getvalue()
    result.namespace = comparable_namespace(snapshot.release.settled(module.__dict__))
    result.warnings = sorted({str(w.message) for w in caught if issubclass(w.category, TinyModelWarning)})
    if result.error:
        result.warnings += sizes_the_error_names(result.error, state.built_models)
    result.files = {**_collect_files(run_dir, preexisting), **outside}
    return result


def notebook_display(*objects: object, **_options: object) -> None:
    """IPython's ``display`` as a notebook's text output shows it: each object's repr on a
    line of its own (a kernel makes it a builtin; ``include=``, ``raw=`` and the other
    options choose among rich outputs, which a run without a screen does not have)."""
    for value in objects:
        print(repr(value))


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    try:
        from transformers.utils import logging as hf_logging
    except Exception:  # pragma: no cover
        yield
        return
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)

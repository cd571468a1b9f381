"""What NDIF's server lets a request import and call, enforced on the emulated server.

Read from NDIF's own server source, github.com/ndif-team/ndif (the newest branch,
``caden/cpu`` of February 2026; ``main`` has the same lists less ``transformers`` and
``__future__``):

* ``src/services/ray/src/ray/nn/security/whitelist.yaml`` — the builtins, the modules
  a request may import while it runs, and the further modules allowed while it is
  deserialized;
* ``src/services/ray/src/ray/nn/security/protected_environment.py`` — ``Protector``
  replaces ``builtins.__import__`` with an ``Importer`` that returns an
  ``UnauthorizedModule`` for a module off the list (using it raises ``ImportError:
  Module X is not whitelisted``), lifts itself while an allowed module is imported,
  and with ``builtins=True`` deletes every builtin off the list from the ``builtins``
  module (``open``, ``locals``, ``input``, ``exit``... are then ``NameError``);
* ``src/services/ray/src/ray/deployments/modeling/base.py`` — ``pre()`` deserializes
  the request under ``Protector(WHITELISTED_MODULES_DESERIALIZATION)`` and
  ``execute()`` runs it under ``Protector(WHITELISTED_MODULES, builtins=True)``.

What the emulation enforces (:class:`ServerRules`, on the server thread only):

* **Running the request**: an ``import`` in the request's own code (the block, and the
  functions it ships by value) of a module off :data:`EXECUTION_MODULES` gives the
  placeholder, as on NDIF; a builtin off :data:`BUILTINS` raises ``NameError`` in any
  code that calls it. So ``open(...)``, ``import os``/``json``/``tqdm`` *inside* a
  remote block fail remotely as they do on NDIF.
* **Deserializing it**: a module off :data:`DESERIALIZATION_MODULES` that the server
  process has not loaded gives the placeholder, so an object of a package NDIF does not
  run (scikit-learn, matplotlib, IPython, datasets...) fails to arrive, while one of a
  package it has loaded (:data:`SERVER_PACKAGES`: its model stack) arrives, as pickle
  takes a loaded module from ``sys.modules`` without importing it.

Where it differs, and why: NDIF's importer also applies to the libraries' own imports
(nnsight, transformers); its lists are tuned to the releases it runs, not to the ones
installed here, so an installed module's own ``import`` is let through. Classes off the
builtins list (``ExceptionGroup``) stay. ``ProtectedModule`` (a module imported in a
block cannot be modified) and ``protect()`` (the model's modules read through a copy)
are not emulated.

Consequences worth knowing: the tokenizer is a persistent object of nnsight 0.8 (the
server's own), and ``model.tokenizer(...)`` inside a session runs there; ``pandas``,
``numpy``, ``einops``, ``math`` and ``time`` are allowed; ``tqdm`` in a session body
arrives (the server has it loaded) and runs, its progress going to the server's
stderr. Plain Python, no torch.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import threading
from typing import Any, Callable, Iterator, Optional

__all__ = [
    "BUILTINS",
    "DESERIALIZATION_MODULES",
    "EXECUTION_MODULES",
    "SERVER_PACKAGES",
    "ServerRules",
    "UnauthorizedModule",
    "allowed",
]

#: whitelist.yaml "builtins", plus compile and exec, which the Protector replaces by
#: versions that compile and run as the originals do.
BUILTINS = frozenset(
    """
    BaseExceptionGroup ArithmeticError AssertionError AttributeError BaseException BlockingIOError
    BrokenPipeError BufferError BytesWarning ChildProcessError ConnectionAbortedError ConnectionError
    ConnectionRefusedError ConnectionResetError DeprecationWarning EOFError Ellipsis EncodingWarning
    EnvironmentError Exception False FileExistsError FileNotFoundError FloatingPointError FutureWarning
    GeneratorExit IOError ImportError ImportWarning IndentationError IndexError InterruptedError
    IsADirectoryError KeyError KeyboardInterrupt LookupError MemoryError ModuleNotFoundError NameError
    None NotADirectoryError NotImplemented NotImplementedError OSError OverflowError
    PendingDeprecationWarning PermissionError ProcessLookupError RecursionError ReferenceError
    ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration StopIteration SyntaxError
    SyntaxWarning SystemError SystemExit TabError TimeoutError True TypeError UnboundLocalError
    UnicodeDecodeError UnicodeEncodeError UnicodeError UnicodeTranslateError UnicodeWarning UserWarning
    ValueError Warning ZeroDivisionError
    __doc__ __import__ __loader__ __name__ __package__ __spec__ __build_class__
    abs aiter all anext any ascii bool bytearray bytes callable chr classmethod complex copyright
    credits delattr dict dir divmod enumerate filter float format frozenset getattr hasattr hash hex
    id int isinstance issubclass iter len list map max min next object oct ord pow print property
    range repr reversed round set setattr slice sorted staticmethod str sum super tuple type vars zip
    memoryview globals eval
    compile exec
    """.split()
)

#: whitelist.yaml "modules": (name, strict) — strict: that module only; else with its
#: submodules.
EXECUTION_MODULES: tuple[tuple[str, bool], ...] = (
    ("builtins", True),
    ("torch", False),
    ("collections", False),
    ("nnsight.intervention.envoy", False),
    ("time", False),
    ("numpy", False),
    ("sympy", False),
    ("nnterp", False),
    ("math", False),
    ("einops", False),
    ("urllib3", False),
    ("typing", False),
    ("_operator", True),
    ("operator", True),
    ("pandas", False),
    ("enum", False),
    ("__future__", False),
)

#: whitelist.yaml "deserialization_modules" (whose nnsight paths are those of the release
#: NDIF runs: nnsight's own modules, of the release installed here, are allowed), then
#: the execution modules.
DESERIALIZATION_MODULES: tuple[tuple[str, bool], ...] = (
    ("pickle", False),
    ("cloudpickle", False),
    ("copyreg", False),
    ("nnsight", False),
    ("transformers", False),
    *EXECUTION_MODULES,
)

#: Packages an NDIF server process has loaded (its model stack: what importing nnsight,
#: transformers and torch and loading a checkpoint load, and pandas'/sympy's own
#: dependencies), with the allowed ones; the rest of a client's packages are hidden while
#: a request is deserialized.
SERVER_PACKAGES = frozenset(
    {
        "torch", "numpy", "transformers", "accelerate", "diffusers", "einops", "peft", "nnsight",
        "nnterp", "pandas", "sympy", "mpmath", "urllib3", "tokenizers", "huggingface_hub",
        "safetensors", "tqdm", "regex", "packaging", "filelock", "yaml", "jinja2", "markupsafe",
        "pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection",
        "psutil", "zstandard", "cloudpickle", "dateutil", "pytz", "tzdata", "six", "fsspec",
    }
)

_NOT_WHITELISTED = "Module {} is not whitelisted"


def allowed(name: str, modules: tuple[tuple[str, bool], ...]) -> bool:
    """``WhitelistedModule.check`` over a list."""
    return any(name == entry or (not strict and name.startswith(entry + ".")) for entry, strict in modules)


class UnauthorizedModule:
    """What NDIF's importer returns for a module off its list: any use raises
    ``ImportError: Module <name> is not whitelisted``."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_module_name", name)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(_NOT_WHITELISTED.format(object.__getattribute__(self, "_module_name")))

    def __getattribute__(self, name: str) -> Any:
        if name in ("_module_name", "_refuse", "__class__"):
            return object.__getattribute__(self, name)
        object.__getattribute__(self, "_refuse")()

    def __repr__(self) -> str:
        return f"<UnauthorizedModule '{object.__getattribute__(self, '_module_name')}'>"

    __setattr__ = __delattr__ = __call__ = __iter__ = __next__ = __len__ = _refuse
    __getitem__ = __setitem__ = __delitem__ = __contains__ = __bool__ = _refuse


# ---------------------------------------------------------------------------
# The rules on the server thread
# ---------------------------------------------------------------------------

_phase = threading.local()  # .modules: the list in force (None: no rules); .lifted: depth


def _modules_in_force() -> Optional[tuple[tuple[str, bool], ...]]:
    if getattr(_phase, "lifted", 0):
        return None
    return getattr(_phase, "modules", None)


def _executing() -> bool:
    return _modules_in_force() is EXECUTION_MODULES


@contextlib.contextmanager
def _lifted() -> Iterator[None]:
    """The Protector's exit while an allowed module is imported."""
    _phase.lifted = getattr(_phase, "lifted", 0) + 1
    try:
        yield
    finally:
        _phase.lifted -= 1


def _library_code(globals: Optional[dict]) -> bool:
    """Whether an import comes from an installed module's own code (its globals are the
    module's namespace), not from the request's code (the block, or a function it ships
    by value, runs on a namespace of its own)."""
    if not isinstance(globals, dict):
        return False
    module = sys.modules.get(globals.get("__name__") or "")
    return module is not None and getattr(module, "__dict__", None) is globals


class ServerRules:
    """Install with :meth:`install` (through a ``Patches``, undone with it); then
    :meth:`deserializing` and :meth:`executing` put the server thread under NDIF's rules
    for that phase. Every other thread is untouched."""

    def install(self, patches: Any) -> None:
        patches.set(builtins, "__import__", self._guarded_import(builtins.__import__))
        for name, value in list(vars(builtins).items()):
            if name not in BUILTINS and callable(value) and not isinstance(value, type) and not name.startswith("__"):
                patches.set(builtins, name, _refused_builtin(name, value))

    @contextlib.contextmanager
    def deserializing(self) -> Iterator[None]:
        with _rules(DESERIALIZATION_MODULES):
            yield

    @contextlib.contextmanager
    def executing(self) -> Iterator[None]:
        with _rules(EXECUTION_MODULES):
            yield

    @staticmethod
    def _guarded_import(original: Callable) -> Callable:
        def __import__(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:  # noqa: A002
            modules = _modules_in_force()
            if modules is None:
                return original(name, globals, locals, fromlist, level)
            if level > 0 or _library_code(globals) or allowed(name, modules):
                with _lifted():
                    module = original(name, globals, locals, fromlist, level)
                if level > 0 and not _library_code(globals) and not allowed(module.__name__, modules):
                    return UnauthorizedModule(module.__name__)
                return module
            if modules is DESERIALIZATION_MODULES and name in sys.modules:
                # pickle takes a loaded module from sys.modules without importing it;
                # a library's own import while objects are rebuilt is let through too
                return original(name, globals, locals, fromlist, level)
            return UnauthorizedModule(name)

        __import__.__wrapped__ = original  # type: ignore[attr-defined]
        return __import__


@contextlib.contextmanager
def _rules(modules: tuple[tuple[str, bool], ...]) -> Iterator[None]:
    previous = getattr(_phase, "modules", None)
    _phase.modules = modules
    try:
        yield
    finally:
        _phase.modules = previous


def _refused_builtin(name: str, original: Callable) -> Callable:
    """``original``, except while a request runs on the server thread: then the
    ``NameError`` of a builtin NDIF deletes."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        if _executing():
            raise NameError(f"name '{name}' is not defined")
        if name == "locals":  # the caller's locals, not this function's
            return sys._getframe(1).f_locals
        return original(*args, **kwargs)

    refused.__wrapped__ = original  # type: ignore[attr-defined]
    refused.__name__ = name
    return refused

"""The cost model's walk: the script read once, in order, as an abstract interpreter.

:class:`Walker` binds client names to shapes and constants, multiplies what loops contain
by their trip counts, walks same-file functions at their calls, and turns every outermost
remote block into a :class:`RequestEstimate` (its upload, download, forward passes,
layer evaluations, compute and server time; a session's :class:`SessionProfile`). What
it counts, and why, is told in :mod:`ndif_opt.cost_model`, which totals the requests; the
numbers it uses are in :mod:`ndif_opt.cost.constants`; the shapes of values come from
:mod:`ndif_opt.cost.shapes`, evaluated once per expression and values of the names it reads
(shared by the versions of a tree the pipeline makes).

The walker is one object in parts, each a module (mypy's checker and checkexpr are the
model): :mod:`ndif_opt.cost.walk_statements` walks statements,
:mod:`ndif_opt.cost.walk_expressions` evaluates expressions,
:mod:`ndif_opt.cost.walk_requests` turns remote blocks into requests, and
:mod:`ndif_opt.cost.requests` holds what they produce and the sizes they add up.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.reachability import reach
from ndif_opt.analysis.opaque import closures
from ndif_opt.analysis.classes import constructors, instance_names, self_methods
from ndif_opt.analysis.remote_functions import attribute_models
from ndif_opt.analysis.retries import retry_wrappers, unwrapped_call
from ndif_opt.cost.constants import setting, view_mode
from ndif_opt.cost.model_registry import ModelDims, dims_for, dims_from_hf_config
from ndif_opt.cost.script_models import script_model_dims
from ndif_opt.cost.requests import Forward, RequestEstimate, Storage, Visit
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.walk_expressions import ExpressionWalk
from ndif_opt.cost.walk_requests import Request, RequestWalk
from ndif_opt.cost.walk_statements import StatementWalk
from ndif_opt.cost.walk_syntax import called_name, same_file_calls
from ndif_opt.options import Options
from ndif_opt.syntax.loops import given_lengths
from ndif_opt.types import Count, Number, UnknownDownload

__all__ = ["Walker"]


class Walker(StatementWalk, ExpressionWalk, RequestWalk):
    """Walks the script in order; client code on the client, remote blocks as requests."""

    def __init__(self, facts: Facts, options: Options) -> None:
        self.facts = facts
        self.options = options
        self.unknown_trips = max(int(setting(options, "unknown-trips")), 0)
        self.view_mode = view_mode(options)
        self.model_names = list(facts.models) or ["model"]
        self._model_key = tuple(self.model_names)
        self._seq_len = int(setting(options, "seq-len"))
        self.requests: list[RequestEstimate] = []
        self._by_block: dict[int, RequestEstimate] = {}
        self.notes: list[str] = []
        self._sent: Number | Count = 0  # requests sent so far
        self.visits: dict[int, Visit] = {}  # id(statement) -> its runs and requests
        # id(statement) -> how many times it runs over the script, inside requests too
        # (what a finding quotes of a loop in a session), and the uncalled function holding it
        self.runs: dict[int, tuple[Number | Count, str | None]] = {}
        self._request_runs: Number | Count = 1  # the runs of the request walked now (1 outside)
        # functions no code here calls, with the requests one call of each would send
        self.uncalled: dict[str, Number | Count] = {}
        self._uncalled_function: str | None = None  # the one walked now, if any
        self._loop_order: dict[tuple[str, str], int] = {}  # loops of unknown length, as met
        # lengths the configuration gives loops the walk cannot know (by header)
        self._given_trips, self._given_lengths = given_lengths(options.cost.get("trips"))
        self.env: dict[str, Shape | ModuleRef] = {}
        self.storage: dict[str, Storage] = {}  # names bound to (views of) a module output
        self.request: Request | None = None
        self.forward: Forward | None = None
        self._dims: dict[str, ModelDims] = {}
        # a parameter of the function walked now bound to one of the script's models at
        # its call (`def run(lm, ...)` called as `run(model, ...)`): its blocks run that model
        self._model_aliases: dict[str, str] = {}
        self._config_models: dict[str, str] = {}  # `cfg = model.config` -> the model (see integer)
        self._attribute_models = attribute_models(facts)  # `self.model` -> the script's model it holds
        self._called: set[str] = set()
        self._methods = self_methods(facts)  # `self.name` -> a method of the file's classes
        self._instances = instance_names(facts)  # `exp` of `exp = Patching(...)`: `exp.sweep()` is a method call
        self._constructors = constructors(facts)  # `Patching(...)` runs `Patching.__init__`
        # `run` of `run = make_runner(remote=True)`: a call of it runs the nested function the
        # factory returns (analysis/opaque.py)
        made = closures(facts)
        self._closures = {name: c.func for name, c in made.items()}
        self._partial_args = {name: c.bound for name, c in made.items() if c.bound}  # `functools.partial`
        # the key part of same_file_calls, built once
        # the `def` of each name that the module's code has run so far, as the walk goes: a
        # call runs the one above it (a name defined twice is none of facts.functions)
        self._reaching_defs: dict[str, cst.FunctionDef] = {}
        module_defs = {stmt.name.value for stmt in facts.module.body if type(stmt) is cst.FunctionDef}
        self._function_names = (frozenset(facts.functions) | frozenset(self._methods) | frozenset(module_defs)
                                | frozenset(self._constructors) | frozenset(self._closures)
                                | facts.once(_nested_defs))
        self._call_stack: list[str] = []
        # inside a request, what the functions it calls save in their own frames (name ->
        # size, as `Request.save` takes it), and per call what the function returns of it
        self._inner_saves: dict[str, tuple[int | None, UnknownDownload | None]] = {}
        self._returned_saves: dict[int, tuple[int | None, UnknownDownload | None]] = {}
        self._unrolled = 0  # iterations unrolled so far (see UNROLL_BUDGET)
        self._guesses = 0  # how deep in code run an assumed number of times (see _guessing)
        # in an iteration of an unrolled loop (and in no branch whose test the walk does not
        # know, no loop walked once for all its iterations): a `break` or `continue` the
        # walk meets is the one that runs; then _leaving says which, until its loop takes it
        self._exits = False
        self._leaving: str | None = None
        self._elements: set[str] = set()  # names an unrolled loop binds to its element now
        # a same-file function cached by `functools.lru_cache` / `cache` -> the argument
        # keys of the calls it has seen, oldest first (a call with one of them sends nothing)
        self._cached_calls: dict[str, dict] = {}
        self._default_dims = self.dims_of(self.model_names[0])
        # names imported from a library whose functions may send requests of their own
        self._library_paths = any(path.split(".")[0] == "nnterp" for path in facts.imports.values())

    def dims_of(self, model: str) -> ModelDims:
        model = self._model_aliases.get(model) or self._attribute_models.get(model, model)
        if model in self._dims:
            return self._dims[model]
        info = self.facts.models.get(model)
        repo = info.repo_id if info is not None and info.repo_id else model
        config = self.options.cost.get("model-config")
        if isinstance(config, Mapping):
            try:
                dims = dims_from_hf_config(config, name=repo)
            except (ValueError, TypeError):
                dims = dims_for(repo)
        else:
            overrides = self.options.cost.get("models")
            dims = dims_for(repo, overrides) if overrides else script_model_dims(self.facts, model)
        self._dims[model] = dims
        return dims

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def run(self) -> None:
        self.suite(self.facts.module.body, 1)
        functions = self._functions()
        # a function called by another is walked at its calls; one that code here hands
        # on without calling (a callback, an entry point) runs once; one no code here
        # names (dead code, a library's API) costs nothing: what a call of it would send
        # is told in a note
        wrappers = retry_wrappers(self.facts)
        called_by_functions = set()
        for func in functions.values():
            for call, _loops in same_file_calls(func.body, self._function_names, self._instances):
                called_by_functions.add(called_name(call, self._instances).removeprefix("self."))
                # (and the function a retry wrapper runs)
                called_by_functions.add(called_name(unwrapped_call(call, wrappers), self._instances))
        reached = reach(self.facts)
        for name, func in functions.items():
            if not reached.runs(func):
                if self._has_work(func.body):  # (a helper only such functions call, too)
                    self.uncalled[name] = self._one_call(name, func)
            elif name not in self._called and name not in called_by_functions:
                self._walk_function(name, func)

    def _walk_function(self, name: str, func: cst.FunctionDef) -> None:
        saved = (dict(self.env), dict(self.storage))
        self._call_stack.append(name)
        self.suite(func.body.body, 1)
        self._call_stack.pop()
        self.env, self.storage = saved

    def _one_call(self, name: str, func: cst.FunctionDef) -> Number | Count:
        """The requests one call of a function no code here calls would send: walked
        aside, so that the totals and the notes leave it out (its statements' visits are
        kept, marked with its name)."""
        kept = (self.requests, self._by_block, self._sent, self.notes)
        self.requests, self._by_block, self._sent, self.notes = [], {}, 0, []
        self._uncalled_function = name
        try:
            self._walk_function(name, func)
            return self._sent
        finally:
            self._uncalled_function = None
            self.requests, self._by_block, self._sent, self.notes = kept

    def _functions(self) -> dict[str, cst.FunctionDef]:
        found: dict[str, cst.FunctionDef] = {}
        for info in self.facts.statements.values():
            if type(info.node) is cst.FunctionDef:
                found.setdefault(info.node.name.value, info.node)
        return found


def _nested_defs(facts: Facts) -> frozenset[str]:
    """The names of the functions defined in a function's body (a call after the `def`, in
    that body, runs it: the walk records it as it goes, see StatementWalk)."""
    return frozenset(info.node.name.value for info in facts.statements.values()
                     if type(info.node) is cst.FunctionDef and info.function is not None)

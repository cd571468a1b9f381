"""May this code run on an NDIF server instead of the user's machine?

Code that moves into a session runs on the server. NDIF only allows imports from a
whitelist, forbids `open`, and anything the code does to the user's machine — writing
files, plotting, progress bars, logging, asking for input — would happen on the server
instead, or not at all. :func:`server_problems` lists why a piece of code must stay on
the client, in words a researcher understands; an empty list means it may move.
"""

from __future__ import annotations

import builtins
import functools
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ndif_opt.analysis.classes import class_methods, classes_made, library_class_made, self_change
from ndif_opt.analysis.facts import (
    Facts,
    Remote,
    call_remote_flag,
    grad_mode_context,
    line_facts,
    qualify,
    qualify_dotted,
)
from ndif_opt.analysis.names import (
    BODY_KINDS,
    all_params,
    bound_in_any_scope,
    collect,
    function_locals,
    is_generator_function,
    mutated_roots,
    target_names,
)
from ndif_opt.analysis.retries import retry_guard
from ndif_opt.analysis.vocabulary import ADVANCING_BUILTINS, MODEL_CHANGING_METHODS, RANDOM_DRAWS, READING_METHODS
from ndif_opt.syntax.expressions import dotted_name, root_name
from ndif_opt.syntax.positions import code_of, short_code
from ndif_opt.syntax.walk import find_nodes, paths_to, walk

# Roots of modules whose code the NDIF server runs (../shared/NNSIGHT_NOTES.md).
SERVER_MODULES = frozenset(
    {
        "torch", "numpy", "einops", "collections", "math", "time", "sympy", "typing",
        "operator", "enum", "pandas", "nnterp", "nnsight", "builtins", "functools",
        "itertools",
    }
)
# Builtins that read or change the names of the scope they are called in (`vars` and `dir`
# without an argument): in a session, the server's names, not those of your machine.
NAMESPACE_BUILTINS = frozenset({"globals", "locals", "vars", "dir"})
# Builtins that touch the machine or the interpreter itself.
FORBIDDEN_BUILTINS = frozenset(
    {"open", "input", "exec", "eval", "compile", "breakpoint", "help", "__import__", "exit", "quit"}
)
# File functions of allowed modules that read: the call stays on the client, its result
# (an array, a tensor, a table) is data that may travel.
LOADING_FUNCTIONS = frozenset(
    {
        "torch.load", "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile",
        "pandas.read_csv", "pandas.read_json", "pandas.read_parquet", "pandas.read_pickle",
        "pandas.read_excel",
    }
)
# Functions of allowed modules that still act on the client's files.
FILE_FUNCTIONS = LOADING_FUNCTIONS | frozenset(
    {"torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt"}
)
# Calls of modules NDIF does not allow whose result is plain data (lists, dicts,
# numbers, strings): the call stays on the client, but what it returns may travel.
VALUE_FUNCTIONS = frozenset(
    {
        "json.load", "json.loads", "json.dumps", "pickle.load", "pickle.loads", "yaml.safe_load",
        "ast.literal_eval", "copy.copy", "copy.deepcopy", "random.sample", "random.choice",
        "random.random", "random.randint", "random.uniform", "os.getenv", "os.environ.get",
        "os.path.join", "os.path.basename", "os.path.dirname", "os.path.exists",
    }
)
# Modules every function of which gives plain values (numbers, lists of them) from plain values.
VALUE_MODULES = frozenset({"statistics"})
# Draws from (or seeds) a process-wide random generator: on the server the draw comes
# from NDIF's generator, where the client's seed does not apply (a seeded run would no
# longer be reproducible, nor equal to the script run locally): they stay on the client.
# `numpy.random.*` and `torch.nn.init.*` count whole (RANDOM_MODULES).
RANDOM_FUNCTIONS = frozenset(
    {
        "torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.rand_like",
        "torch.randn_like", "torch.randint_like", "torch.normal", "torch.bernoulli",
        "torch.multinomial", "torch.poisson", "torch.manual_seed", "torch.seed",
        "torch.set_rng_state", "torch.random.manual_seed", "torch.random.seed",
        "torch.nn.functional.dropout", "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d",
        "torch.nn.functional.dropout3d", "torch.nn.functional.alpha_dropout",
        "torch.nn.functional.feature_alpha_dropout", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
    }
)
RANDOM_MODULES = ("numpy.random.", "torch.nn.init.")
# Tensor methods that fill a tensor with random draws in place.
RANDOM_METHODS = frozenset(
    {"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_"}
)


def draws_randomness(path: str) -> bool:
    """Does a call of ``path`` (a qualified name) draw from, or seed, a process-wide
    random generator?"""
    return path in RANDOM_FUNCTIONS or path.startswith(RANDOM_MODULES)


def _random_message(what: str) -> str:
    return (f"calls `{what}`, which draws from your machine's random generator: on the server it would draw "
            "from NDIF's, where your seed does not apply")


# Methods that write files or draw: on an unknown object they mean a client effect.
EFFECT_METHODS = frozenset(
    {
        "write", "writelines", "savefig", "show", "to_csv", "to_json", "to_parquet",
        "to_pickle", "to_excel", "to_html", "flush", "close", "set_description",
        "set_postfix", "refresh",
    }
)
# Methods of a path (pathlib) that read or change the file system: on the server, the
# server's files, not those of your machine.
PATH_METHODS = frozenset(
    {
        "read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file", "is_dir", "iterdir",
        "glob", "rglob", "stat", "mkdir", "unlink", "touch", "rmdir", "rename", "replace", "symlink_to",
    }
)  # fmt: skip
# Path methods whose names other types share: a Path's takes one positional argument
# (the target), `str.replace(old, new)` two, `DataFrame.rename(columns=...)` keywords
ONE_TARGET_PATH_METHODS = frozenset({"replace", "rename"})


def _not_a_path_call(method: str, call: cst.Call) -> bool:
    """Is the call, by its arguments, surely not the Path method of that name?"""
    if method not in ONE_TARGET_PATH_METHODS:
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return len(positional) != 1 or len(positional) != len(call.args)


# Reads of the clock of the machine the code runs on: around a request it measures the
# request; in a session the requests are one, and the read would measure something else.
CLOCK_FUNCTIONS = frozenset(
    {
        "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
        "time.monotonic_ns", "time.process_time", "time.process_time_ns", "timeit.default_timer",
        "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today", "datetime.date.today",
    }
)
PROGRESS_BARS = frozenset({"tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.trange", "tqdm.auto.trange", "trange"})


@dataclass(frozen=True)
class Problem:
    """Why a piece of code must stay on the client."""

    kind: str  # effect | print | progress | forbidden | module | control | client-object | request
    message: str
    node: cst.CSTNode


class ServerCheck:
    """Answers 'may this code run on the server?' for one module, memoized."""

    def __init__(self, facts: Facts, local_modules: dict[str, str] | None = None) -> None:
        self.facts = facts
        self._functions: dict[str, list[Problem]] = {}
        self._looking_at: dict[str, set[str]] = {}  # functions in progress -> placeholders used
        # the user's own modules next to the script (name -> source), read by the CLI
        self.local_modules = dict(local_modules or {})
        self._module_checks: dict[str, "ServerCheck | None"] = {}
        # answers of this check, as `_functions` (a check's answers, not facts of the tree)
        self._changed_parameters: dict[str, frozenset[str]] = {}
        self._opaque_callables: dict[str, str] = {}
        self._methods: dict[tuple[str, str], list[Problem]] = {}  # (class, method) -> its body's problems

    def shipped_module(self, module: str) -> "ServerCheck | None":
        """A check for one of the user's modules that a remote request ships by value:
        nnsight registers local modules imported before the first request (`pull_env`),
        or those passed to `nnsight.register`. None when it would not be shipped."""
        if module in self._module_checks:
            return self._module_checks[module]
        check = None
        source = self.local_modules.get(module)
        if source is not None and (_imported_before_first_request(self.facts, module) or _registered(self.facts, module)):
            from ndif_opt.analysis.facts import analyze

            try:
                check = ServerCheck(analyze(cst.parse_module(source)))
            except cst.ParserSyntaxError:
                check = None
        self._module_checks[module] = check
        return check

    def problems(self, node: cst.CSTNode, *, skip: tuple[cst.CSTNode, ...] = (),
                 local: frozenset[str] = frozenset()) -> list[Problem]:
        """Why ``node`` cannot run on the server; nnsight blocks in ``skip`` are not inspected.
        ``local``: the names of the function ``node`` is the body of (its parameters and
        what it binds), which are not the client's objects of the same name."""
        if all(type(s) in BODY_KINDS for s in skip):
            # one walk over content, no per-node hook: the suites to skip are refused
            # by their own visit methods
            visitor = _Checker(self, skip, local)
        else:
            visitor = _HookedChecker(self, skip, local)
            # the walk enters only the subtrees that hold a node that may object, and so
            # finds the same problems in the same order
            visitor.enter = paths_to(node, visitor.may_object, skip={id(s) for s in skip}, kinds=_MAY_OBJECT)
        walk(node, visitor)
        return visitor.problems

    def function_problems(self, name: str) -> list[Problem]:
        """Problems of a same-file function's body and of what it calls.

        A call back into a function still being looked at counts as safe for now (its
        own problems are found where it is looked at); an answer that relied on that is
        not remembered, since it lacks those problems: with `f` (printing) and `g`
        calling each other, `g` asked after `f` must still report the print."""
        if name in self._functions:
            return self._functions[name]
        if name in self._looking_at:
            for frame in self._looking_at.values():
                frame.add(name)  # every answer in progress relies on `name`'s placeholder
            return []
        self._looking_at[name] = set()
        func = self.facts.functions[name]
        # the function's own nnsight blocks run on the server already
        own = tuple(b.node.body for b in self.facts.blocks if b.stmt.function is func)
        try:
            found = self._sent_by_name(func)
            found += [p for p in self.problems(func.body, skip=own, local=function_locals(func)) if p.kind != "control"]
            found += self.changes_outside(func, skip=own)
        finally:
            relied_on = self._looking_at.pop(name) - {name}
        if not relied_on:
            self._functions[name] = found
        return found

    def _sent_by_name(self, func: cst.FunctionDef) -> list[Problem]:
        """A function of the script goes to the server by value (its code), unless a
        decorator made it another object (`@functools.cache`, `@lru_cache(...)`): that goes
        by its name in your script, which the server's `__main__` does not have (`Can't get
        attribute ...`), and its state (a cache) would be the server's copy. A decorator of
        the script itself returns the script's code, and a grad-mode one (`@torch.no_grad()`)
        a function: both go by value; any other is not known to."""
        for decorator in func.decorators:
            expr = decorator.decorator
            target = expr.func if isinstance(expr, cst.Call) else expr
            if type(target) is cst.Name and target.value in self.facts.functions:
                continue
            if grad_mode_context(expr, self.facts) is not None:
                continue
            return [Problem("client-object", f"is decorated with `@{code_of(expr)}`, which makes it an object "
                            "NDIF would get by its name in your script, not by its code", decorator)]
        return []

    def method_problems(self, classes: frozenset[str], method: str) -> list[Problem]:
        """Why a call of ``method`` on an object of your machine made by one of the file's
        ``classes`` (`rec.record(x)`; `scorer(x)` runs `__call__`) cannot run on the server:
        its body's problems, and a change of `self` (`self.rows.append(x)`, `self.n += 1`,
        or a call of a method that changes it), which in a session would change the
        server's copy of the object, not yours. A method with nnsight blocks of its own is a
        remote helper, whose calls the session check reads: none here. A method none of the
        classes defines (another module's base) is not known: none."""
        found: list[Problem] = []
        for cls in sorted(classes):
            func = class_methods(self.facts).get(cls, {}).get(method)
            if func is None or self._holds_blocks(func):
                continue
            found += self._body_problems(cls, func)
            changed = self_change(self.facts, cls, method)
            if changed is not None:
                found.append(Problem("effect", f"changes `self` in place (`{short_code(changed, 50)}`): on the "
                                     "server a copy of the object would change, not yours", changed))
        return found

    def _holds_blocks(self, func: cst.FunctionDef) -> bool:
        return any(b.stmt.function is func for b in self.facts.blocks)

    def _body_problems(self, cls: str, func: cst.FunctionDef) -> list[Problem]:
        """A method's own problems and those of the methods of `self` it calls (what they
        change of `self` is :func:`self_change`'s, said once by :meth:`method_problems`)."""
        key = (cls, func.name.value)
        if key not in self._methods:
            self._methods[key] = []  # (a method calling itself: what it does is said once)
            found = [p for p in self.problems(func.body, local=function_locals(func)) if p.kind != "control"]
            found += self.changes_outside(func)
            for call in find_nodes(func.body, lambda n: type(n) is cst.Call and type(n.func) is cst.Attribute
                                   and type(n.func.value) is cst.Name and n.func.value.value == "self"):
                callee = class_methods(self.facts)[cls].get(call.func.attr.value)
                if callee is not None and not self._holds_blocks(callee):
                    found += [Problem(p.kind, f"calls `{code_of(call.func)}`, which {p.message}", call)
                              for p in self._body_problems(cls, callee)]
            self._methods[key] = found
        return self._methods[key]

    def changes_outside(self, func: cst.FunctionDef | cst.Lambda, skip: tuple[cst.CSTNode, ...] = ()) -> list[Problem]:
        """What a function (or lambda) changes in place that is not its own: an object of
        the module or of an enclosing function (`history.append(v)`, a closure's
        `out.append(x)`), or a parameter's default object (`def record(v, store=history)`).
        Run in a session, it would change the server's copy of that object, and the
        client's would stay as it was. Changes made through the model are interventions."""
        body = func.body
        use = collect(body, skip=skip) if skip else collect(body)
        params = {p.name.value: p for p in all_params(func.params)}
        own = function_locals(func) if isinstance(func, cst.FunctionDef) else frozenset(params)
        found = []
        for name, node in use.mutates.items():
            if not self.facts.changes_a_module(name, node) or self.facts.is_model_like(name):
                continue
            if name in params:
                default = params[name].default
                if default is not None and not (type(default) is cst.Name and default.value == "None"):
                    found.append(Problem("effect", f"changes `{name}`, whose default value `{code_of(default)}` is "
                                         "an object of your machine: on the server a copy of it would change", node))
            elif name not in own:
                found.append(Problem("effect", f"changes `{name}`, which lives on your machine: on the server a "
                                     "copy of it would change", node))
        # `global total` / `nonlocal best`, then `total = ...`: it binds a name of the module
        # or of an enclosing function, which on the server would be a copy's
        for kind, statement in use.control:
            if kind not in ("global", "nonlocal"):
                continue
            for declared in statement.names:
                name = declared.name.value
                if name in use.binds and not self.facts.is_model_like(name):
                    found.append(Problem("effect", f"binds `{name}` (`{kind} {name}`), a name of your machine: on "
                                         "the server a copy of it would change", use.binds[name]))
        return found

    def changed_parameters(self, name: str) -> frozenset[str]:
        """The parameters a same-file function without nnsight blocks changes in place."""
        def compute() -> frozenset[str]:
            func = self.facts.functions[name]
            if any(b.stmt.function is func for b in self.facts.blocks):
                return frozenset()
            use = collect(func.body)
            return frozenset(p.name.value for p in all_params(func.params)
                             if p.name.value in use.mutates and p.name.value not in use.binds
                             and self.facts.changes_a_module(p.name.value, use.mutates[p.name.value]))
        if name not in self._changed_parameters:
            self._changed_parameters[name] = compute()
        return self._changed_parameters[name]

    def opaque_callable(self, name: str) -> str:
        """Why a call of ``name`` may change an object of your machine that no reading of
        the call shows, or "": a name bound to a bound method (`add = history.append`),
        to what a call returned (`push = functools.partial(list.append, results)`), or to
        a `def` or `lambda` inside a function that changes what it closes over."""
        if name not in self._opaque_callables:
            self._opaque_callables[name] = self._opaque_callable(name)
        return self._opaque_callables[name]

    def _opaque_callable(self, name: str) -> str:
        facts = self.facts
        for _info, value in facts.bindings.get(name, ()):
            if type(value) is cst.Lambda:
                for problem in self.changes_outside(value):
                    return problem.message
                continue
            if isinstance(value, (cst.Name, cst.Attribute)) and root_name(value) in facts.imports:
                continue  # a function of a module under another name
            if type(value) is cst.Name and (value.value in facts.functions or value.value in _BUILTIN_NAMES):
                continue
            if type(value) is cst.Attribute and facts.is_model_like(root_name(value) or ""):
                continue  # the model's own (`model.tokenizer`): the server has the model too
            if isinstance(value, (cst.Attribute, cst.Call)):
                return (f"is `{code_of(value)}`, a callable that holds objects of your machine: on the server "
                        "it would change copies of them")
        if name in facts.functions:
            return ""
        for func in _inner_functions(facts.module, name):
            for problem in self.changes_outside(func):
                return problem.message
        return ""

    @cached_property
    def asking_order_matters(self) -> bool:
        """May an answer depend on which questions were asked before? Only when the
        script's functions call each other in a cycle (:meth:`function_problems` breaks
        a cycle where it is entered first, and remembers what it found), or when the
        user's own modules are checked too. Otherwise questions may be skipped freely."""
        if self.local_modules:
            return True
        names = self.facts.functions
        calls = {
            name: {called for called in _names_called(func) if called in names and called != name}
            for name, func in names.items()
        }
        for name in names:
            reached, todo = set(), list(calls[name])
            while todo:
                other = todo.pop()
                if other == name:
                    return True
                if other not in reached:
                    reached.add(other)
                    todo.extend(calls[other])
        return False

    def is_client_object(self, name: str) -> bool:
        return name in self._client_objects

    def is_iterator(self, name: str) -> bool:
        """Is ``name`` bound (by some statement) to an iterator a builtin or ``itertools``
        makes (`it = iter(prompts)`, `pairs = zip(xs, ys)`)? Walking it changes it: a loop
        or ``next`` that walks it in a session advances the server's copy, not yours."""
        return name in self._iterators

    def walking(self, iterable: cst.BaseExpression, local: frozenset[str] = frozenset()) -> list[Problem]:
        """Why a loop or comprehension over ``iterable`` cannot run on the server when
        ``iterable`` names an iterator of your machine (`for p in it`): walking it advances
        it, and on the server a copy would advance. (A generator is an object only you have:
        its name is a problem wherever it is read.)"""
        if type(iterable) is not cst.Name or iterable.value in local:
            return []
        name = iterable.value
        if not self.is_iterator(name) or self.is_client_object(name):
            return []
        return [Problem("client-object", f"walks `{name}`, an iterator of your machine: on the server a copy of "
                        "it would advance, and yours would stay where it was", iterable)]

    @cached_property
    def _iterators(self) -> frozenset[str]:
        found: set[str] = set()
        for info in self.facts.statements.values():
            for func, names in _names_bound_to_calls(info.node):
                path = qualify_dotted(func, self.facts.imports)
                builtin = func in _ITERATORS and path == func and func not in self.facts.functions
                if builtin or path.startswith("itertools."):
                    found.update(names)
        return frozenset(found)

    @cached_property
    def _client_objects(self) -> set[str]:
        """Names bound to things that only exist on the client: files, figures, bars.

        Only statements bind such names (`f = open(...)`, `with open(...) as f`), so
        the statement table suffices. (Found on first use: many versions never ask.)"""
        found: set[str] = set()
        for info in self.facts.statements.values():
            for func, names in _names_bound_to_calls(info.node):
                if self._dotted_call_is_client(func) or self._makes_a_generator(func):
                    found.update(names)
        found |= self._generators(found)
        # a name the code opens nnsight blocks on is a model, whatever made it (a helper of
        # the user's `lm = setup_model()` returns one): it exists on the server too
        return found - {block.model.split(".")[0] for block in self.facts.blocks}

    def _generators(self, made: set[str]) -> set[str]:
        """Names bound to a generator, or to an iterator over one (`zip(xs, (f(x) for x in
        xs))`, `map(f, gen)`): its state is your machine's, and a copy cannot be sent. Those
        in ``made`` (bound to a generator function's call) count as generators too."""
        generators = set(made)
        changed = True
        while changed:  # (a name bound to an iterator over a name bound to a generator...)
            changed = False
            for name, values in self.facts.bindings.items():
                if name not in generators and any(_holds_a_generator(value, generators) for _info, value in values):
                    generators.add(name)
                    changed = True
        return generators - made

    def _makes_a_generator(self, func: str) -> bool:
        """Is ``func`` a generator function of the script (`prompts = batches(xs)`)? The
        generator's state is on your machine: a copy cannot be sent to the server."""
        function = self.facts.functions.get(func)
        return function is not None and is_generator_function(function)

    def _dotted_call_is_client(self, func: str) -> bool:
        """Does a call of the dotted name ``func`` give something only the client has?"""
        path = qualify_dotted(func, self.facts.imports)
        if path in VALUE_FUNCTIONS or path in LOADING_FUNCTIONS or path.split(".")[0] in VALUE_MODULES:
            return False
        if path in FORBIDDEN_BUILTINS or path in PROGRESS_BARS or path in FILE_FUNCTIONS:
            return True
        root = path.split(".")[0]
        head = func.split(".")[0]
        return head in self.facts.imports and root not in SERVER_MODULES


_BUILTIN_NAMES = frozenset(dir(builtins))
# Builtins that make an iterator over their arguments: one over a generator holds it.
_ITERATORS = frozenset({"zip", "map", "filter", "enumerate", "reversed", "iter"})


def changed_models(stmt: cst.CSTNode, facts: Facts) -> frozenset[str]:
    """The models a statement outside their blocks changes as objects of your machine:
    `model.clear_edits()`, `model.to(...)` (vocabulary.MODEL_CHANGING_METHODS). Code that
    uses the model after it sees the change: it cannot run before it in a session."""
    return frozenset(model for call in find_nodes(stmt, lambda n: type(n) is cst.Call)
                     if (model := _model_changed_by(call, facts)) is not None)


def _model_changed_by(call: cst.Call, facts: Facts) -> str | None:
    """The model `model.clear_edits()` (a method of MODEL_CHANGING_METHODS called on the
    model object itself) changes, or None."""
    func = call.func
    if type(func) is cst.Attribute and func.attr.value in MODEL_CHANGING_METHODS and type(func.value) is cst.Name \
            and facts.is_model_like(func.value.value):
        return func.value.value
    return None


def _holds_a_generator(value: cst.BaseExpression, generators: set[str]) -> bool:
    """A generator expression, a name in ``generators``, or an iterator builtin over one."""
    if type(value) is cst.GeneratorExp or (type(value) is cst.Name and value.value in generators):
        return True
    return (type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in _ITERATORS
            and any(_holds_a_generator(arg.value, generators) for arg in value.args))


@functools.lru_cache(maxsize=1024)
def _inner_functions(module: cst.Module, name: str) -> tuple[cst.FunctionDef, ...]:
    """The `def name` statements inside functions and classes of ``module``."""
    found = find_nodes(module, lambda n: type(n) is cst.FunctionDef and n.name.value == name)
    top = {id(s) for s in module.body}
    return tuple(f for f in found if id(f) not in top)


@functools.lru_cache(maxsize=8192)
def _names_bound_to_calls(stmt: cst.BaseStatement) -> tuple[tuple[str, list[str]], ...]:
    """(the dotted function name, the names bound) of each `x = f(...)` and
    `with f(...) as x` of the statement: a pure function of the (immutable) statement,
    read in every version of the tree that shares it."""
    found = []
    if type(stmt) is cst.SimpleStatementLine:
        for small, call, func in line_facts(stmt).assigned_calls:
            if type(small) is cst.Assign:
                found.append((func, [name for target in small.targets for name in target_names(target.target)]))
    elif isinstance(stmt, cst.With):
        for item in stmt.items:
            if item.asname is not None and isinstance(item.item, cst.Call):
                func = dotted_name(item.item.func)
                if func is not None:
                    found.append((func, target_names(item.asname.name)))
    return tuple(found)


@functools.lru_cache(maxsize=1024)
def _names_called(func: cst.FunctionDef) -> frozenset[str]:
    """The plain names `f` that ``func``'s body calls as `f(...)`: a pure function of
    the (immutable) function, asked in every version of the tree, and in every window of
    a long file for the functions of its shared prelude."""
    calls = find_nodes(func.body, lambda n: type(n) is cst.Call and type(n.func) is cst.Name)
    return frozenset(node.func.value for node in calls)


def _imported_before_first_request(facts: Facts, module: str) -> bool:
    """Is `module` imported at the top level before the first remote block starts?"""
    first = min(
        (facts.stmt(b.stmt.ancestors[0] if b.stmt.ancestors else b.node).index for b in facts.blocks),
        default=None,
    )
    for index, stmt in enumerate(facts.module.body):
        if first is not None and index >= first:
            return False
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                    if dotted_name(small.module) == module:
                        return True
                if isinstance(small, cst.Import) and any(dotted_name(a.name) == module for a in small.names):
                    return True
    return False


def _registered(facts: Facts, module: str) -> bool:
    """`nnsight.register(module)` somewhere in the script."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            if qualify(node.func, facts.imports) == "nnsight.register" and node.args:
                arg = node.args[0].value
                found = found or (qualify(arg, facts.imports) == module)

    walk(facts.module, Finder())
    return found


# statements and expressions whose visit_* adds a problem (nearly) whatever they hold
_OBJECTING = frozenset(
    {cst.Global, cst.Nonlocal, cst.Return, cst.Yield, cst.Await, cst.Try, cst.Import, cst.ImportFrom, cst.FunctionDef,
     cst.Raise}
)


# the node classes that _Checker.may_object may accept
_MAY_OBJECT = _OBJECTING | {cst.Name, cst.Call, cst.AssignTarget, cst.AugAssign, cst.For, cst.CompFor}


class _Checker(cst.CSTVisitor):
    """Finds the problems of the code it walks, but inside the suites in ``skip``
    (which must be of :data:`ndif_opt.analysis.names.BODY_KINDS`: their visit methods refuse them)."""

    def __init__(self, check: ServerCheck, skip: tuple[cst.CSTNode, ...], local: frozenset[str] = frozenset()) -> None:
        self.check = check
        self.facts = check.facts
        self.skip = skip
        self.local = local  # a function's own names: not the client's objects of that name
        self.problems: list[Problem] = []
        self.handling = 0  # `except` handlers around the node visited

    def _client_object(self, name: str) -> bool:
        return name not in self.local and self.check.is_client_object(name)

    def _add(self, kind: str, message: str, node: cst.CSTNode) -> None:
        self.problems.append(Problem(kind, message, node))

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return not any(node is s for s in self.skip)

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
        return not any(node is s for s in self.skip)

    def may_object(self, node: cst.CSTNode) -> bool:
        """Could the visit of ``node`` itself add a problem? Never False when it would.
        Calls of the script's own functions (or of a module of the user's) are not tried:
        their checks recurse, and are remembered in the order they are first asked."""
        kind = type(node)
        if kind is cst.Name:
            return self._client_object(node.value)
        if kind is cst.Call:
            name = dotted_name(node.func)
            if (name in self.facts.functions) or self.check.local_modules:
                return True
            trial = _Checker(self.check, (), self.local)
            trial.visit_Call(node)
            return bool(trial.problems)
        if kind is cst.AssignTarget or kind is cst.AugAssign:
            return self._model_attribute(node.target) is not None
        if kind is cst.For or kind is cst.CompFor:
            return bool(self.check.walking(node.iter, self.local))
        return kind in _OBJECTING

    def _model_attribute(self, target: cst.BaseExpression) -> str | None:
        """`model.tokenizer.padding_side` of `model.tokenizer.padding_side = v`: an attribute
        or item reached from a model, set outside its blocks (inside one it would be an
        intervention, which the checks skip); None for anything else."""
        if type(target) not in (cst.Attribute, cst.Subscript):
            return None
        roots = mutated_roots(target)
        return code_of(target) if roots and self.facts.is_model_like(roots[0]) and roots[0] not in self.local else None

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._set_model_attribute(node.target, node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._set_model_attribute(node.target, node)

    def _set_model_attribute(self, target: cst.BaseExpression, node: cst.CSTNode) -> None:
        what = self._model_attribute(target)
        if what is not None:
            self._add("effect", f"sets `{what}`, which belongs to the model object on your machine: in a session "
                      "it would set the server's", node)

    def visit_Call(self, node: cst.Call) -> bool | None:
        func = node.func
        path = qualify(func, self.facts.imports)
        name = dotted_name(func)
        if name == "range" and path == "range" and name not in self.facts.functions:
            self._check_range_arguments(node)
            return False
        if name is not None and "." not in name:
            self._check_plain_call(name, path, node)
            return
        if isinstance(func, cst.Attribute):
            self._check_attribute_call(func, path, node)

    def _check_range_arguments(self, node: cst.Call) -> None:
        """The builtin `range()`: what it accepts is an integer (a value with
        `__index__`: int, a NumPy or 0-d torch integer), which a session sends as it is,
        so a name bound on your machine is no problem as its argument itself."""
        for arg in node.args:
            value = arg.value
            if not (type(value) is cst.Name and not arg.star and self._client_object(value.value)):
                walk(value, self)

    def _check_plain_call(self, name: str, path: str | None, node: cst.Call) -> None:
        if name in ADVANCING_BUILTINS and path == name and name not in self.facts.functions and node.args \
                and type(node.args[0].value) is cst.Name and node.args[0].value.value not in self.local \
                and not self.facts.is_model_like(node.args[0].value.value):
            # `next(ids)`: it advances an iterator of yours; on the server a copy would advance
            self._add("module", f"calls `{code_of(node)}`, which advances an iterator of your machine: on the "
                      "server a copy of it would advance", node)
            return
        if name == "print":
            self._add("print", "calls `print`, which would print on the server, not on your machine", node)
        elif name in NAMESPACE_BUILTINS and path == name and name not in self.facts.functions \
                and name not in self.local and (name in ("globals", "locals") or not node.args):
            # (not replayed after the session either: by then other names are bound)
            self._add("namespace", f"calls `{name}()`, which reads or changes the names of your machine: on the "
                      "server they would be the server's", node)
        elif name in FORBIDDEN_BUILTINS:
            self._add("forbidden", f"calls `{name}`, which NDIF does not allow", node)
        elif path in PROGRESS_BARS or name in PROGRESS_BARS:
            self._add("progress", f"shows a progress bar (`{name}`) on your machine", node)
        elif name in self.facts.functions:
            for problem in self.check.function_problems(name):
                self._add(
                    problem.kind,
                    f"calls `{name}`, which {problem.message}",
                    node,
                )
            self._check_changed_arguments(name, node)
        elif path is not None and path != name:  # imported: `from x import f`
            self._check_module_path(path, node)
        elif self._client_object(name):
            self._add("client-object", f"calls `{name}`, which exists only on your machine", node)
        elif self._never_bound(name):
            # `display(...)` in a notebook: the kernel's, as are names set up before the script
            self._add("client-object", f"calls `{name}`, which this file never defines: it exists only where the "
                      "script runs (a notebook kernel's, or set up before it), not on the server", node)
        elif name not in self.local and (made := classes_made(self.facts, name)) \
                and all(type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in made
                        for _info, value in self.facts.bindings.get(name, ())):
            # an object of a class of the file, called: it runs the class's `__call__`
            for problem in self.check.method_problems(made, "__call__"):
                self._add(problem.kind, f"calls `{name}` (`{name}.__call__`), which {problem.message}", node)
        elif name not in self.local and name not in _BUILTIN_NAMES:
            why = self.check.opaque_callable(name)
            if why:
                self._add("effect", f"calls `{name}`, which {why}", node)

    def _never_bound(self, name: str) -> bool:
        """Is ``name`` bound in no scope of the module, and no builtin of Python's?"""
        facts = self.facts
        if name in self.local or name in _BUILTIN_NAMES or name in facts.imports or name in facts.functions \
                or name in collect(facts.module).binds:
            return False
        bound = bound_in_any_scope(facts.module)
        return bound is not None and name not in bound

    def _check_changed_arguments(self, name: str, node: cst.Call) -> None:
        """A same-file function without nnsight blocks of its own that changes a parameter
        in place, handed an object of the code around it: in a session it would change the
        server's copy. (A function that traces is a remote helper: the session takes over
        the containers it fills.)"""
        changed = self.check.changed_parameters(name)
        if not changed:
            return
        func = self.facts.functions[name]
        params = [p.name.value for p in func.params.posonly_params] + [p.name.value for p in func.params.params]
        for index, arg in enumerate(node.args):
            if arg.star:
                param = next(iter(changed))  # which one it fills is not known: any
            elif arg.keyword is not None:
                param = arg.keyword.value
            else:
                param = params[index] if index < len(params) else None
            if param not in changed:
                continue
            roots = [r for r in mutated_roots(arg.value) if r not in self.local and not self.facts.is_model_like(r)]
            if roots:
                self._add("effect", f"calls `{name}`, which changes its argument `{code_of(arg.value)}` in place: "
                          "on the server a copy of it would change", node)
                return

    def _check_attribute_call(self, func: cst.Attribute, path: str | None, node: cst.Call) -> None:
        if func.attr.value in RANDOM_METHODS and type(func.value) not in (cst.Name, cst.Attribute):
            # a tensor made by a call, filled with draws (`torch.empty(4).normal_()`)
            self._add("module", _random_message(f".{func.attr.value}()"), node)
            return
        root = root_name(func)
        if root is not None and root in self.facts.imports:
            self._check_module_path(path or self.facts.imports[root], node)
            return
        if root is not None and self._client_object(root):
            self._add("client-object", f"uses `{root}`, which exists only on your machine", node)
            return
        if type(func.value) is cst.Name and root not in self.local and not self.facts.is_model_like(root):
            made = classes_made(self.facts, root)
            if made:  # an object of a class of the file: what its method does
                for problem in self.check.method_problems(made, func.attr.value):
                    self._add(problem.kind, f"calls `{code_of(func)}`, which {problem.message}", node)
        if root is not None and func.attr.value in RANDOM_DRAWS:
            # a generator object of yours (`rng = np.random.default_rng(0)`): a draw advances
            # it, as one from the global generator does; on the server a copy would advance
            self._add("module", _random_message(f"{code_of(func)}()"), node)
            return
        if (changed := _model_changed_by(node, self.facts)) is not None and changed not in self.local:
            self._add("effect", f"calls `{code_of(func)}()`, which changes the model object on your machine: in "
                      "a session it would change the server's", node)
        elif func.attr.value in EFFECT_METHODS:
            self._add("effect", f"calls `.{func.attr.value}()`, which acts on your machine", node)
        elif (func.attr.value in PATH_METHODS and not (root is not None and self.facts.is_model_like(root))
              and not _not_a_path_call(func.attr.value, node)):
            self._add("effect", f"calls `.{func.attr.value}()`, which reads or writes files on your machine", node)
        elif func.attr.value in RANDOM_METHODS:
            self._add("module", _random_message(f".{func.attr.value}()"), node)
        elif type(func.value) is cst.Name and root not in self.local and func.attr.value not in READING_METHODS \
                and not self.facts.is_model_like(root) and (made := library_class_made(self.facts, root)):
            self._add("effect", f"calls `{code_of(func)}()`, which may change `{root}` (`{made}(...)`), an object of "
                      "your machine: on the server a copy of it would change", node)

    def _check_module_path(self, path: str, node: cst.Call) -> None:
        if draws_randomness(path):
            self._add("module", _random_message(path), node)
            return
        if path in CLOCK_FUNCTIONS:
            self._add("clock", f"reads your machine's clock (`{path}()`)", node)
            return
        root = path.split(".")[0]
        module, _, function = path.rpartition(".")
        shipped = self.check.shipped_module(module) if module else None
        if shipped is not None and function in shipped.facts.functions:
            for problem in shipped.function_problems(function):
                self._add(problem.kind, f"calls `{path}`, which {problem.message}", node)
            return
        flag = call_remote_flag(node, self.facts)
        if flag.state is not Remote.NO:
            # nnterp's `run_prompts(..., remote=True)` and the like open their own request:
            # on the server that would be a request sent from inside a request
            self._add(
                "request",
                f"calls `{path}` with `remote={flag.code or '...'}`, which sends a request of its own: "
                "inside a session it would run on the server, where it cannot send one",
                node,
            )
        elif path in FILE_FUNCTIONS:
            self._add("effect", f"calls `{path}`, which reads or writes files on your machine", node)
        elif path == "time.sleep":
            # a pause between requests (rate limiting): it belongs with the client's code
            self._add("effect", "waits with `time.sleep` between requests, on your machine", node)
        elif path in PROGRESS_BARS:
            self._add("progress", f"shows a progress bar (`{path}`) on your machine", node)
        elif root not in SERVER_MODULES:
            self._add(
                "module",
                f"calls `{path}`; `{root}` is not among the modules NDIF allows, so it must run on your machine",
                node,
            )

    def visit_Name(self, node: cst.Name) -> None:
        if self._client_object(node.value):
            self._add("client-object", f"uses `{node.value}`, which exists only on your machine", node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Global(self, node: cst.Global) -> None:
        self._add("control", "declares a `global`", node)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._add("control", "declares a `nonlocal`", node)

    def visit_Return(self, node: cst.Return) -> None:
        self._add("control", "returns from the function", node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self._add("control", "yields", node)

    def visit_Await(self, node: cst.Await) -> None:
        self._add("control", "awaits", node)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handling += 1

    def leave_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handling -= 1

    def visit_Raise(self, node: cst.Raise) -> None:
        # (a handler's `raise` runs when the work it guards failed: the session had failed too)
        if not self.handling:
            self._add("control", "raises an exception: in one session it would end the whole request, "
                      "and nothing computed before it would come back", node)

    def visit_For(self, node: cst.For) -> bool:
        self._check_walked(node.iter)
        guard = retry_guard(node, self.facts)
        if guard is None:
            return True
        # a retry: in a run where the request succeeds its handlers never run, and the
        # rewrite puts the same retry around the session
        walk(node.iter, self)
        walk(guard.guarded.body, self)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._check_walked(node.iter)

    def _check_walked(self, iterable: cst.BaseExpression) -> None:
        self.problems += self.check.walking(iterable, self.local)

    def visit_Try(self, node: cst.Try) -> None:
        if not node.handlers and not _leaves(node.finalbody):
            # (it handles no failure: said as what it is, not as a catch)
            self._add("control", "has a `try` with a `finally:` clause: in one session a failure would end the "
                      "whole request, and the clause would not run on your machine after it", node)
            return
        self._add(
            "control",
            "catches exceptions: in one session a failure would end the whole request, where here each "
            "failure is handled on its own",
            node,
        )

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            root = (dotted_name(alias.name) or "").split(".")[0]
            if root not in SERVER_MODULES:
                self._add("module", f"imports `{root}`, which NDIF does not allow", node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        root = (dotted_name(node.module) or "").split(".")[0] if node.module else ""
        if node.relative or root not in SERVER_MODULES:
            self._add("module", f"imports from `{root or '.'}`, which NDIF does not allow", node)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        # a function defined inside moving code moves with it; its body must obey the
        # same rules but may return
        inner = self.check.problems(node.body, local=self.local | function_locals(node))
        self.problems.extend(p for p in inner if p.kind != "control")
        return False


class _HookedChecker(_Checker):
    """:class:`_Checker` for any nodes to skip, entering only the nodes in ``enter``."""

    def __init__(self, check: ServerCheck, skip: tuple[cst.CSTNode, ...], local: frozenset[str] = frozenset()) -> None:
        super().__init__(check, skip, local)
        self.enter: set[int] | None = None  # ids of the nodes worth entering; None: all

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.enter is not None and id(node) not in self.enter:
            return False
        if any(node is s for s in self.skip):
            return False
        return super().on_visit(node)


def _leaves(finally_: cst.Finally | None) -> bool:
    """Does a `finally:` body `return`, `break` or `continue` (which drops the failure it
    runs after: the `try` then handles every failure)?"""
    if finally_ is None:
        return False
    return bool(find_nodes(finally_.body, lambda n: type(n) in (cst.Return, cst.Break, cst.Continue)))


"""Same-file functions that run remote traces: `def run(prompt): with model.trace(...)`.

Real scripts put the trace in a helper and call it from a loop. Such a call can move
into a session like an inline trace, provided the helper is called there with remote
disabled (its trace then joins the session's request) and its own code may run on the
server. This module finds those helpers and says, per call, which session flag the call
implies.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.classes import instance_names, self_methods
from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import Block, Facts, Remote, grad_mode_context
from ndif_opt.analysis.names import all_params, collect, function_locals
from ndif_opt.analysis.retries import RetryGuard, RetryWrapper, function_guard, retry_wrappers, unwrapped_call
from ndif_opt.syntax.commas import appended
from ndif_opt.syntax.positions import code_of, short_code
from ndif_opt.syntax.rewrite import keyword_argument
from ndif_opt.syntax.walk import all_nodes, children, find_nodes, walk

FLAG_PARAMETER = "remote"


@dataclass
class RemoteHelper:
    name: str
    func: cst.FunctionDef
    blocks: list[Block]
    model: str
    flag_param: str | None  # the parameter the blocks use as their flag, if any
    flag_code: str  # the blocks' flag expression
    problems: list[str] = field(default_factory=list)  # why calls cannot move (empty: they can)
    context_decorators: list[cst.BaseExpression] = field(default_factory=list)  # as `with` items
    retry: RetryGuard | None = None  # the retry around its trace, if any
    model_param: str | None = None  # the parameter that holds the model, when it is one
    self_stores: tuple[str, ...] = ()  # a method's `self.x = ...` attributes (outside its blocks)
    mutated_params: dict[str, int | None] = field(default_factory=dict)  # name -> position
    bound: bool = False  # a method of a same-file class, called as `self.name(...)`
    # a module name its flag reads is assigned again after the function is defined (a
    # later cell sets `REMOTE = True`): a default would freeze the first value
    flag_changes_later: bool = False
    wrappers: dict[str, RetryWrapper] = field(default_factory=dict)  # the file's retry wrappers
    # names that hold an object of the method's class (`exp = Probe(model)`): `exp.name(...)`
    # calls it with `exp` as its `self` (see instance_names)
    instances: frozenset[str] = frozenset()

    def positions(self) -> dict[str, int | None]:
        """The parameters a call's arguments fill, by position (`self` is not among them)."""
        found = _positions(self.func)
        if not self.bound:
            return found
        return {n: (None if i is None else i - 1) for n, i in found.items() if i != 0}

    def receiver(self, call: cst.Call) -> str | None:
        """The instance a call of a method runs on, when not the caller's own `self`
        (`exp` of `exp.name(...)`, `scorer` of `scorer(...)` for `__call__`); None for a
        function, or a call on `self`."""
        func = self.direct(call).func
        if not self.bound:
            return None
        if type(func) is cst.Name:  # (a method called by the object's own name is its `__call__`)
            return func.value if func.value in self.instances else None
        if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
            return None
        return None if func.value.value == "self" else func.value.value

    def spelled(self, call: cst.Call) -> str:
        """The function as the call names it: `run`, `self.run`, `exp.run`."""
        return code_of(self.direct(call).func)

    def at_call(self, code: str, call: cst.Call) -> str:
        """``code`` of the method (its flag, its model) as the call site reads it: `self`
        is the call's receiver (`self.remote` → `exp.remote` for `exp.name(...)`)."""
        receiver = self.receiver(call)
        if receiver is None:
            return code
        return code_of(cst.parse_expression(code).visit(_Renamed("self", receiver)))

    def direct(self, call: cst.Call) -> cst.Call:
        """The call as made without a retry wrapper: `with_retries(run, x)` → `run(x)`."""
        return unwrapped_call(call, self.wrappers)

    def flag_reads(self) -> set[str]:
        """The names its flag expression reads."""
        return set(collect(cst.parse_expression(self.flag_code)).reads)

    def flag_locals(self, reads: set[str] | None = None) -> set[str]:
        """The names of the function itself (parameters, locals) that its flag reads:
        `self` in `remote=self.remote`, `remote` after `remote = config.remote`."""
        reads = self.flag_reads() if reads is None else reads
        return reads & (set(_positions(self.func)) | set(collect(self.func.body).binds))

    def call_model(self, call: cst.Call) -> str | None:
        """The model this call traces, as a name at the call site; None if not a plain name."""
        if self.model_param is None:
            return self.at_call(self.model, call)
        value = self.argument(call, self.model_param)
        return value.value if isinstance(value, cst.Name) else None

    def wrapper_of(self, call: cst.Call) -> RetryWrapper | None:
        return self.wrappers.get(call.func.value) if isinstance(call.func, cst.Name) else None

    def call_flag(self, call: cst.Call) -> str | None:
        """The remote flag this call runs the helper with, as code; None if unknown (or
        computed inside the helper: `remote = config.remote` means nothing at the call)."""
        if self.flag_param is None:
            inside = self.flag_locals()
            if self.bound:
                inside.discard("self")  # called as `self.name(...)` (the caller's `self`) or on an instance
            return None if inside else self.at_call(self.flag_code, call)
        value = self.argument(call, self.flag_param)
        if value is not None:
            return code_of(value)
        default = _param(self.func, self.flag_param)
        return None if default is None or default.default is None else code_of(default.default)

    def argument(self, call: cst.Call, name: str) -> cst.BaseExpression | None:
        return _argument(self.direct(call), name, self.positions().get(name))

    @property
    def new_parameter(self) -> str:
        """The flag parameter to add when the blocks use a literal or a global flag."""
        if self.flag_param is not None:
            return self.flag_param
        taken = set(collect(self.func.body).binds) | set(_positions(self.func)) | set(collect(self.func.body).reads)
        return FLAG_PARAMETER if FLAG_PARAMETER not in taken else "ndif_remote"


def remote_helpers(facts: Facts, server: ServerCheck) -> dict[str, RemoteHelper]:
    helpers: dict[str, RemoteHelper] = {}
    wrappers = retry_wrappers(facts)
    shadowed = facts.once(_function_locals)
    for name, func in facts.functions.items():
        if name in shadowed:
            continue  # a function of the file binds the name for itself: its calls may mean that
        blocks = [
            b for b in facts.blocks
            if b.parent is None and b.stmt.function is func and b.remote.state is not Remote.NO
        ]
        if blocks:
            helpers[name] = _describe(name, func, blocks, facts, server)
            helpers[name].wrappers = wrappers
            helpers[name].flag_changes_later = _rebound_after(helpers[name], facts)
    for name, func in nested_functions(facts).items():
        blocks = [
            b for b in facts.blocks
            if b.parent is None and b.stmt.function is func and b.remote.state is not Remote.NO
        ]
        if blocks and name not in helpers:
            helpers[name] = _describe(name, func, blocks, facts, server)
            helpers[name].wrappers = wrappers
    for name, method in self_methods(facts).items():
        blocks = [
            b for b in facts.blocks
            if b.parent is None and b.stmt.function is method and b.remote.state is not Remote.NO
        ]
        if blocks:
            helpers[name] = _describe(name, method, blocks, facts, server, bound=True)
            helpers[name].wrappers = wrappers
            helpers[name].instances = instance_names(facts)
    for helper in helpers.values():
        _calls_outside_its_blocks(helper, helpers)
    return helpers


def _calls_outside_its_blocks(helper: RemoteHelper, helpers: dict[str, RemoteHelper]) -> None:
    """A helper that also calls a helper outside its own blocks sends that request whatever
    flag it is called with: called with `remote=False` in a session, the inner call would
    send a request from inside one (`if first_only: return [top(p) ...]` beside a session)."""
    inside = {id(node) for block in helper.blocks for node in all_nodes(block.node)}
    for call, other in helper_calls(helper.func.body, helpers):
        if id(call) not in inside:
            what = "itself" if other is helper else f"`{other.spelled(call)}`"  # (with the flag's default)
            helper.problems.append(f"`{helper.name}` also calls {what} outside its traces, which sends a request "
                                   "of its own whatever flag it is given")
            return


def _nested_functions(facts: Facts) -> dict[str, cst.FunctionDef]:
    """Functions defined in a function's body (`def run(...): def hidden_at(p): ...`) that
    a call by their name can only mean: the body binds the name with that `def` alone, it
    is none of its parameters nor a module function, and the name is spelled nowhere
    outside that function (once per version of the tree)."""
    found: dict[str, cst.FunctionDef] = {}
    for outer in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef):
        params = {p.name.value for p in all_params(outer.params)}
        for stmt in outer.body.body:
            if type(stmt) is not cst.FunctionDef:
                continue
            name = stmt.name.value
            if name in facts.functions or name in params or any(
                    other is not stmt and name in collect(other).binds for other in outer.body.body):
                continue
            inside = {id(n) for n in find_nodes(outer.body, lambda n: type(n) is cst.Name and n.value == name)}
            spelled = find_nodes(facts.module, lambda n: type(n) is cst.Name and n.value == name)
            if all(id(n) in inside for n in spelled):
                found[name] = stmt
    return found


def _function_locals(facts: Facts) -> frozenset[str]:
    """The names some function of the file binds for itself (its parameters, assignments,
    nested `def`s): a call by such a name in it is not the module's function."""
    return frozenset(name for func in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef)
                     for name in function_locals(func))


def nested_functions(facts: Facts) -> dict[str, cst.FunctionDef]:
    """:func:`_nested_functions`, once per version of the tree."""
    return facts.once(_nested_functions)


def runs_in_session_of(block: Block, facts: Facts) -> bool:
    """Does ``block``, a trace of a module function outside any session of its own, run
    inside a session of its model wherever the script runs it? Yes when every use of the
    function's name is a call written inside a `with <model>.session(...):` (not in a
    function or lambda defined there) that gives the block's flag `False` (its parameter
    `remote=False`, or a block without a flag): each call's trace is then one of the
    session's traces, as a trace written in the session is."""
    func = block.stmt.function
    if block.parent is not None or func is None:
        return False
    return facts.once(_session_callees).get(id(func)) == block.model and _off_in_every_call(block, func, facts)


def _session_callees(facts: Facts) -> dict[int, str]:
    """id(function) -> the model of the sessions every use of its name is a call in."""
    functions = {name: func for name, func in facts.functions.items() if name not in facts.once(_function_locals)}
    sessions = [b for b in facts.blocks if b.method == "session"]
    if not functions or not sessions:
        return {}
    defined = {id(func.name) for func in functions.values()}
    uses = Counter(n.value for n in find_nodes(facts.module, lambda n: type(n) is cst.Name and n.value in functions)
                   if id(n) not in defined)
    calls: dict[str, set[str]] = {}
    counted: Counter = Counter()
    for session in sessions:
        for call in _calls_in_body(session.node.body, functions):
            calls.setdefault(call.func.value, set()).add(session.model)
            counted[call.func.value] += 1
    return {id(functions[name]): next(iter(models)) for name, models in calls.items()
            if len(models) == 1 and counted[name] == uses[name]}


def _calls_in_body(body: cst.CSTNode, functions: dict[str, cst.FunctionDef]) -> list[cst.Call]:
    """Calls by a plain name of one of ``functions`` in ``body``, outside the functions and
    lambdas defined there (a call there may run after the session)."""
    deferred = {id(n) for inner in find_nodes(body, lambda n: type(n) in (cst.FunctionDef, cst.Lambda))
                for n in all_nodes(inner)}
    return find_nodes(body, lambda n: type(n) is cst.Call and type(n.func) is cst.Name
                      and n.func.value in functions and id(n) not in deferred)


def _off_in_every_call(block: Block, func: cst.FunctionDef, facts: Facts) -> bool:
    """Is the block's flag `False` in every call of ``func`` (a parameter every call sets
    to `False`, by keyword, position or default), or is the block without one?"""
    flag = block.remote.expr
    if flag is None:
        return not block.remote.via_kwargs
    if type(flag) is not cst.Name:
        return False
    name = flag.value
    param = _param(func, name)
    if param is None or name in collect(func.body).binds:
        return False
    position = _positions(func).get(name)
    for call in find_nodes(facts.module, lambda n: type(n) is cst.Call and type(n.func) is cst.Name
                           and n.func.value == func.name.value):
        if any(arg.star for arg in call.args):
            return False  # (`*args`, `**kw` may hold it)
        value = _argument(call, name, position) or param.default
        if type(value) is not cst.Name or value.value != "False":
            return False
    return True


def _argument(call: cst.Call, name: str, position: int | None) -> cst.BaseExpression | None:
    """The argument ``call`` gives the parameter ``name`` (at ``position``), if it names it."""
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
        if arg.keyword is None and not arg.star and position is not None and index == position:
            return arg.value
    return None


def _rebound_after(helper: RemoteHelper, facts: Facts) -> bool:
    """Is a module name the helper's flag reads assigned after the helper's `def` (or
    declared `global` in a function, which may assign it at any time)?"""
    try:
        reads = helper.flag_reads()
    except cst.ParserSyntaxError:
        return True
    names = reads - helper.flag_locals(reads)
    if not names:
        return False
    info = facts.stmt(helper.func)
    top = facts.stmt(info.ancestors[0]).index if info.ancestors else info.index  # its top-level statement
    if any(names & set(collect(stmt).binds) for stmt in facts.module.body[top + 1:]):
        return True
    return any(names & {n.name.value for n in g.names}
               for g in find_nodes(facts.module, lambda n: type(n) is cst.Global))


def attribute_models(facts: Facts) -> dict[str, str]:
    """`self.attr` -> the script's model it holds: a class of the file whose `__init__`
    stores a parameter on `self` (`self.model = model`), where every construction of the
    class in the file passes the same model of the script for it (once per version of
    the tree)."""
    return facts.once(_attribute_models)


def _attribute_models(facts: Facts) -> dict[str, str]:
    found: dict[str, str | None] = {}
    for stmt in facts.module.body:
        if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
            continue
        init = next((m for m in stmt.body.body if isinstance(m, cst.FunctionDef) and m.name.value == "__init__"), None)
        if init is None or not isinstance(init.body, cst.IndentedBlock):
            continue
        params = [p.name.value for p in init.params.params][1:]  # after `self`
        stored = _stored_parameters(init, set(params))
        if not stored:
            continue
        constructions = find_nodes(facts.module, lambda n, name=stmt.name.value: (
            type(n) is cst.Call and type(n.func) is cst.Name and n.func.value == name))
        for attr, param in stored.items():
            models = {_model_argument(call, params.index(param), param, facts) for call in constructions}
            model = models.pop() if len(models) == 1 else None
            key = f"self.{attr}"
            found[key] = model if key not in found else None  # two classes: either could be meant
    return {key: model for key, model in found.items() if model is not None}


def _stored_parameters(init: cst.FunctionDef, params: set[str]) -> dict[str, str]:
    """`self.attr = param` statements at the top of ``init``'s body: attr -> param."""
    stored: dict[str, str] = {}
    for line in init.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.value, cst.Name) and small.value.value in params):
                target = small.targets[0].target
                if (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                        and target.value.value == "self"):
                    stored[target.attr.value] = small.value.value
    return stored


def _model_argument(call: cst.Call, position: int, name: str, facts: Facts) -> str | None:
    """The script's model the call passes for parameter ``name`` (at ``position``), if any."""
    if any(arg.star for arg in call.args):
        return None
    keyword = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    positional = [a.value for a in call.args if a.keyword is None]
    value = keyword if keyword is not None else positional[position] if position < len(positional) else None
    return value.value if isinstance(value, cst.Name) and value.value in facts.models else None


def called_helper(call: cst.Call, helpers: dict[str, RemoteHelper]) -> RemoteHelper | None:
    """The helper a call runs: `run(x)`, or `run` through a retry wrapper: `with_retries(run, x)`."""
    # exact classes (libcst's have no subclasses): this runs for every call of a statement,
    # and an ABC isinstance costs more than the answer
    func = call.func
    kind = type(func)
    if kind is cst.Attribute:
        if type(func.value) is not cst.Name:
            return None
        helper = helpers.get(f"self.{func.attr.value}")
        if helper is None or func.value.value == "self" or func.value.value in helper.instances:
            return helper
        return None
    if kind is not cst.Name:
        return None
    helper = helpers.get(func.value)
    if helper is not None or not helpers:
        return helper
    called = helpers.get("self.__call__")  # `scorer(p)`: an instance of a class of the file called
    if called is not None and func.value in called.instances:
        return called
    direct = unwrapped_call(call, next(iter(helpers.values())).wrappers)  # (every helper holds them)
    return helpers.get(direct.func.value) if direct is not call else None


def _describe(name, func, blocks, facts: Facts, server: ServerCheck, bound: bool = False) -> RemoteHelper:
    first = blocks[0]
    flag_code = first.remote.code
    params = _positions(func)
    helper = RemoteHelper(
        name=name,
        func=func,
        blocks=blocks,
        model=first.model,
        flag_param=flag_code if flag_code in params else None,
        flag_code=flag_code or "True",
        bound=bound,
    )
    # a helper that opens its own session joins the caller's like one that traces: called
    # with `remote=False` its session runs inside the caller's (measured: a local session
    # nested in a remote one runs on the server)
    if len({b.model for b in blocks}) != 1 or len({b.remote.code for b in blocks}) != 1:
        helper.problems.append(f"`{name}` mixes models or remote flags")
    if any(b.remote.via_kwargs for b in blocks):
        helper.problems.append(f"`{name}` passes `remote=` inside `**kwargs`")
    if first.model in params and not (bound and first.model == "self"):
        helper.model_param = first.model  # the caller hands the model over
    elif bound and first.model.startswith("self."):
        pass  # the instance's model: the caller's `self` holds the same one
    elif first.model not in facts.models:
        helper.problems.append(f"`{name}` traces `{first.model}`, which is not a model defined in this file")
    contexts = [grad_mode_context(d.decorator, facts) for d in func.decorators]
    if None in contexts:
        # measured: the copy of a decorated function that a request carries runs without
        # the names of its module (NameError on the model) inside a session
        other = func.decorators[contexts.index(None)].decorator
        helper.problems.append(
            f"`{name}` is decorated (`@{code_of(other)}`), and the copy of it that a "
            "session carries to NDIF cannot see this file's names"
        )
    else:
        helper.context_decorators = contexts
    helper.retry = function_guard(func, facts)
    use = collect(func.body)
    # what the function changes outside its blocks (inside them it intervenes on the model);
    # a method's plain `self.x = value` is a store the session can bring back
    blank = _BlankBlocks({id(b.node) for b in blocks}, self_stores=bound)
    outside = collect(func.body.visit(blank))
    helper.self_stores = tuple(sorted(set(blank.stores)))
    for kind, _node in use.control:
        if kind in ("global", "nonlocal", "yield", "await"):
            helper.problems.append(f"`{name}` uses `{kind}`")
    for problem in server.problems(func.body, skip=tuple(b.node.body for b in blocks)):
        if problem.kind != "control":
            helper.problems.append(f"`{name}` {problem.message}")
    for mutated, node in outside.mutates.items():
        if not facts.changes_a_module(mutated, node):
            continue  # `torch.sort(x)`: a function of a module, not a list's sort
        if bound and mutated == "self":
            helper.problems.append(
                f"`{name}` changes `self` in place (`{_change_of_self(node, func)}`: not a plain "
                "`self.x = ...`), and in a session the change would happen to the server's copy of it"
            )
        elif mutated in params:
            helper.mutated_params[mutated] = params[mutated]
        elif mutated not in use.binds and mutated not in facts.models:
            helper.problems.append(f"`{name}` changes `{mutated}`, which lives on your machine")
    return helper


class _Renamed(cst.CSTTransformer):
    """Every name ``old`` read in an expression said as ``new``."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if updated.value == self.old else updated

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return False  # the value only (below): `x.self` is no read of `self`

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(value=original.value.visit(self))


def _change_of_self(node: cst.CSTNode, func: cst.FunctionDef) -> str:
    """The code of the change of `self` at ``node`` (`self.n += 1` is noted at its target)."""
    target = code_of(node)
    change = next((n for n in find_nodes(func.body, lambda n: type(n) is cst.AugAssign)
                   if code_of(n.target) == target), node) if type(node) is cst.Attribute else node
    return short_code(change, 50)


class _BlankBlocks(cst.CSTTransformer):
    """The code with the bodies of the given blocks emptied; with ``self_stores``, each
    `self.x = value` said as `value` alone, and `x` noted in ``stores``."""

    def __init__(self, blocks: set[int], self_stores: bool = False) -> None:
        super().__init__()
        self.blocks = blocks
        self.self_stores = self_stores
        self.stores: list[str] = []

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.BaseSmallStatement:
        if not self.self_stores or len(updated.targets) != 1:
            return updated
        target = updated.targets[0].target
        if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
            self.stores.append(target.attr.value)
            return cst.Expr(value=updated.value)
        return updated

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        if id(original) not in self.blocks:
            return updated
        return updated.with_changes(body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]))


def _positions(func: cst.FunctionDef) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for index, param in enumerate(list(func.params.posonly_params) + list(func.params.params)):
        found[param.name.value] = index
    for param in func.params.kwonly_params:
        found[param.name.value] = None
    return found


def _param(func: cst.FunctionDef, name: str) -> cst.Param | None:
    for param in list(func.params.posonly_params) + list(func.params.params) + list(func.params.kwonly_params):
        if param.name.value == name:
            return param
    return None


def helper_calls(node: cst.CSTNode, helpers: dict[str, RemoteHelper]) -> list[tuple[cst.Call, RemoteHelper]]:
    if not helpers:
        return []  # most scripts have none: no need to walk the tree
    finder = _HelperCallFinder(helpers)
    walk(node, finder)
    return finder.found


class _HelperCallFinder(cst.CSTVisitor):
    """The calls of the given helpers, outside nested functions (a class of its own, not
    one per call: a walk learns a visitor class's methods once)."""

    def __init__(self, helpers: dict[str, RemoteHelper]) -> None:
        self.helpers = helpers
        self.found: list[tuple[cst.Call, RemoteHelper]] = []

    def visit_Call(self, call: cst.Call) -> None:
        helper = called_helper(call, self.helpers)
        if helper is not None:
            self.found.append((call, helper))

    def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
        return False


def call_multiplicity(stmts, helpers: dict[str, RemoteHelper], facts: Facts, unknown: int) -> int:
    """Remote requests the helper calls in ``stmts`` issue, loops counted."""
    from ndif_opt.analysis.regions import trip_count

    total = 0
    for stmt in stmts:
        if isinstance(stmt, (cst.For, cst.While)):
            trips = trip_count(stmt, facts)
            runs = unknown if trips is None else trips
            inner = call_multiplicity(stmt.body.body, helpers, facts, unknown)
            total += runs * inner
            if isinstance(stmt, cst.For):  # the iterable is made once
                total += _calls_in_expressions(stmt.iter, helpers, facts, unknown)
            else:  # the test runs before each iteration and once more to end the loop
                total += (runs + 1) * _calls_in_expressions(stmt.test, helpers, facts, unknown)
        elif isinstance(stmt, cst.SimpleStatementLine):
            total += _calls_in_expressions(stmt, helpers, facts, unknown)
        elif isinstance(stmt, cst.If):
            # the test runs whichever branch follows (`if top_at(prompt, layer) == 5:`); then
            # one branch: the one that sends more
            other = stmt.orelse
            rest = [other] if isinstance(other, cst.If) else other.body.body if other is not None else []
            total += _calls_in_expressions(stmt.test, helpers, facts, unknown) + max(
                call_multiplicity(stmt.body.body, helpers, facts, unknown), call_multiplicity(rest, helpers, facts, unknown))
        else:
            body = getattr(stmt, "body", None)
            if isinstance(body, cst.IndentedBlock):
                total += call_multiplicity(body.body, helpers, facts, unknown)
    return total


def _calls_in_expressions(node: cst.CSTNode, helpers: dict[str, RemoteHelper], facts: Facts, unknown: int) -> int:
    """Requests of the helper calls in ``node``; a call inside a comprehension counts once
    per element (`[run(p) for p in prompts]` is a loop too)."""
    from ndif_opt.analysis.regions import iterable_length

    if not helpers:
        return 0
    kind = type(node)
    if kind is cst.Call:
        helper = called_helper(node, helpers)
        own = len(helper.blocks) if helper is not None else 0
        return own + sum(_calls_in_expressions(c, helpers, facts, unknown) for c in children(node))
    if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
        trips, clause, header = 1, node.for_in, 0
        while clause is not None:
            header += _calls_in_expressions(clause.iter, helpers, facts, unknown) * trips
            length = iterable_length(clause.iter, facts)
            trips *= unknown if length is None else length
            clause = clause.inner_for_in
        elements = (node.key, node.value) if kind is cst.DictComp else (node.elt,)
        return header + trips * sum(_calls_in_expressions(e, helpers, facts, unknown) for e in elements)
    return sum(_calls_in_expressions(c, helpers, facts, unknown) for c in children(node))


class CallWithRemoteOff(cst.CSTTransformer):
    """`helper(x)` → `helper(x, remote=False)` for the given calls (by identity). A flag
    the call passes is set where it stands; one it leaves out is added as the other calls
    pass it: by position where they do and the call can (`helper(x, False)` next to the
    user's `helper(y, True)`), else by keyword."""

    def __init__(self, calls: list[tuple[cst.Call, RemoteHelper]]) -> None:
        self.calls = {id(call): helper for call, helper in calls}
        # the helpers some of these calls pass the flag to by position
        self._positional = {id(helper) for call, helper in calls if _flag_by_position(call, helper)}

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        helper = self.calls.get(id(original))
        if helper is None:
            return updated
        updated = helper.direct(updated)  # inside the session, the retry goes around it
        name = helper.new_parameter
        off = cst.Name("False")
        args = list(updated.args)
        position = helper.positions().get(name)
        for index, arg in enumerate(args):
            if (arg.keyword is not None and arg.keyword.value == name) or (
                arg.keyword is None and not arg.star and position is not None and index == position
            ):
                args[index] = arg.with_changes(value=off)
                return updated.with_changes(args=args)
        by_position = id(helper) in self._positional and len(args) == position and all(
            a.keyword is None and not a.star for a in args)
        added = cst.Arg(value=off) if by_position else keyword_argument(name, off)
        return updated.with_changes(args=appended(args, added, updated.whitespace_before_args))


def _flag_by_position(call: cst.Call, helper: RemoteHelper) -> bool:
    """Does the call pass the helper's flag by position?"""
    position = helper.positions().get(helper.new_parameter)
    return position is not None and len(call.args) > position and all(
        a.keyword is None and not a.star for a in call.args[: position + 1])


def rewritten_helper(helper: RemoteHelper) -> cst.FunctionDef:
    """The helper as a session can call it: with a flag parameter, and with its grad-mode
    decorators said as a `with` around its body (the copy of a decorated function that a
    session carries cannot see the module's names)."""
    func = with_flag_parameter(helper)
    if not helper.context_decorators:
        return func
    body = func.body
    statements = list(body.body)
    docstring = statements[:1] if statements and _is_docstring(statements[0]) else []
    inner = statements[len(docstring):] or [cst.SimpleStatementLine([cst.Pass()])]
    wrapped = cst.With(
        items=[cst.WithItem(item=c) for c in helper.context_decorators],
        body=cst.IndentedBlock(body=inner),
    )
    return func.with_changes(
        decorators=[],
        leading_lines=[*func.decorators[0].leading_lines, *func.leading_lines],
        body=body.with_changes(body=[*docstring, wrapped]),
    )


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def with_flag_parameter(helper: RemoteHelper) -> cst.FunctionDef:
    """The helper with a flag parameter (default: its old flag) that its blocks use."""
    if helper.flag_param is not None:
        return helper.func
    name = helper.new_parameter
    default = cst.parse_expression(helper.flag_code)
    flag: cst.BaseExpression = cst.Name(name)
    if helper.flag_locals() or helper.flag_changes_later:
        # `remote=self.remote`: a default cannot read `self` (it is evaluated when the
        # function is defined), nor a module flag set again later (it would keep the
        # first value), so the blocks take `remote and self.remote`: the old flag, read
        # when the call runs, for every call that does not pass `remote=False`
        flag = cst.parse_expression(f"{name} and {helper.flag_code}")
        default = cst.Name("True")
    param = cst.Param(
        name=cst.Name(name),
        default=default,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    params = helper.func.params
    if isinstance(params.star_arg, cst.Param) or params.kwonly_params or isinstance(params.star_kwarg, cst.Param):
        star = params.star_arg if isinstance(params.star_arg, (cst.Param, cst.ParamStar)) else cst.ParamStar()
        # (one change: a `*` without keyword-only parameters after it is no valid node)
        params = params.with_changes(star_arg=star, kwonly_params=[*params.kwonly_params, param])
    else:
        params = params.with_changes(params=appended(params.params, param, helper.func.whitespace_before_params))
    targets = {id(b.node) for b in helper.blocks}
    return helper.func.with_changes(params=params).visit(_FlagInBlocks(targets, flag))


class _FlagInBlocks(cst.CSTTransformer):
    """Sets ``remote=<name>`` in the target blocks (a class per call would be a reference
    cycle each time, left to the garbage collector)."""

    def __init__(self, targets: set[int], flag: cst.BaseExpression) -> None:
        super().__init__()
        self.targets = targets
        self.flag = flag

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        if id(original) not in self.targets:
            return updated
        item = updated.items[-1]  # the block's call (grad-mode contexts come before it)
        call = item.item
        args = [
            a.with_changes(value=self.flag) if a.keyword is not None and a.keyword.value == "remote" else a
            for a in call.args
        ]
        return updated.with_changes(items=[*updated.items[:-1], item.with_changes(item=call.with_changes(args=args))])


def with_keyword_parameters(func: cst.FunctionDef, names: tuple[str, ...]) -> cst.FunctionDef:
    """`def f(x):` → `def f(x, *, vec):` — keyword-only parameters without defaults, for
    module names a session computes and hands the function at each call."""
    params = func.params
    added = [cst.Param(name=cst.Name(n)) for n in names]
    star = params.star_arg if isinstance(params.star_arg, (cst.Param, cst.ParamStar)) else cst.ParamStar()
    return func.with_changes(params=params.with_changes(star_arg=star, kwonly_params=[*params.kwonly_params, *added]))


def with_keyword_arguments(call: cst.Call, names: tuple[str, ...]) -> cst.Call:
    """`f(x)` → `f(x, vec=vec)`."""
    args = list(call.args)
    for name in names:
        args = appended(args, keyword_argument(name, cst.Name(name)), call.whitespace_before_args)
    return call.with_changes(args=args)

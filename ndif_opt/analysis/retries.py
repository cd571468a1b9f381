"""Retry guards: the `for attempt in range(3): try: ... except: sleep` around a request.

A retry guard protects one remote request against transient failures (a dropped
connection, a busy queue). In a run where the request succeeds, the guard is the body of
its `try` run once: its handler never runs. So a session may take the guarded work in,
provided the same retry then wraps the whole session.

Two shapes are recognised, each with the guard as data:

- a loop over attempts whose body is one `try`; the `try` ends with `break` (or, in a
  function, with `return`), and its handlers only report, wait and re-raise; the loop's
  `else:` (run when every attempt failed), if it has one, only reports and then raises;
- a retry wrapper: a function `def with_retries(fn, *args, ...)` whose guard's `try` is
  `return fn(*args)`. A call `with_retries(run, x)` is then `run(x)` with a retry around it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import all_params, collect, collect_all, target_names
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import find_nodes, walk

# what a handler may do and stay a retry: report the failure, wait, and re-raise
REPORTING_FUNCTIONS = frozenset({"print"})
REPORTING_PATHS = frozenset(
    {"time.sleep", "traceback.print_exc", "warnings.warn", "logging.info", "logging.warning",
     "logging.error", "logging.exception", "logging.debug"}
)
REPORTING_METHODS = frozenset({"info", "warning", "error", "exception", "debug", "write"})


@dataclass(frozen=True)
class RetryGuard:
    loop: cst.For  # `for attempt in range(3):`
    attempt: str  # the loop's variable
    guarded: cst.Try  # its one statement
    exit: str  # "break" or "return": how the `try` ends when the request succeeds
    # a `return` retry's function gives up with what follows the loop in it, when that reports
    # and raises (`raise RuntimeError("all retries failed")`): those statements
    after: tuple[cst.BaseStatement, ...] = ()

    @property
    def gives_up(self) -> bool:
        """The loop has an `else:` (one that raises: `retry_guard` takes no other), or its
        function raises after it, which, not the handlers, gives up after the last attempt."""
        return self.loop.orelse is not None or bool(self.after)

    @property
    def header(self) -> str:
        return f"for {code_of(self.loop.target)} in {code_of(self.loop.iter)}"


@dataclass(frozen=True)
class RetryWrapper:
    name: str  # the function: `with_retries`
    func: cst.FunctionDef
    guard: RetryGuard


def retry_guard(loop: cst.CSTNode, facts: Facts) -> RetryGuard | None:
    """The guard ``loop`` is, or None when it is any other loop."""
    if type(loop) is not cst.For or loop.asynchronous is not None:
        return None
    if loop.orelse is not None and not _gives_up(_statements(loop.orelse.body), facts):
        return None
    body = loop.body.body
    if len(body) != 1 or type(body[0]) is not cst.Try:
        return None
    guarded = body[0]
    names = target_names(loop.target)
    if len(names) != 1 or guarded.orelse is not None or guarded.finalbody is not None:
        return None
    exit_kind = _success_exit(guarded.body.body)
    if exit_kind is None or names[0] in collect(guarded.body).reads:
        return None  # the work depends on the attempt: not the same request each time
    if not all(_only_reports(_statements(h.body), facts) for h in guarded.handlers):
        return None
    for handler in guarded.handlers:
        binds = set(collect(handler.body).binds)
        if binds:
            return None  # the handler computes something (an error record): not a retry
    return RetryGuard(loop=loop, attempt=names[0], guarded=guarded, exit=exit_kind)


def retried_until_success(loop: cst.CSTNode) -> bool:
    """Does the loop's body, in a run without failures, leave the loop in its first
    iteration through a `try` at its own level whose body ends the loop (`while True: try:
    ...; break except ...: wait`)? Then it runs once, and each failure another time:
    attempts of one piece of work, whatever its handlers do (:func:`retry_guard` is the
    shape a session can take)."""
    if type(loop) not in (cst.For, cst.While) or type(loop.body) is not cst.IndentedBlock:
        return False
    return any(
        type(stmt) in (cst.Try, cst.TryStar) and any(
            type(line) is cst.SimpleStatementLine and any(type(s) in (cst.Break, cst.Return) for s in line.body)
            for line in stmt.body.body)
        for stmt in loop.body.body
    )


def _gives_up(statements, facts: Facts) -> bool:
    """A loop's `else:` that reports and then raises (any exception): the retry's giving up."""
    if not statements or type(statements[-1]) is not cst.SimpleStatementLine:
        return False
    end = statements[-1].body[-1]
    if type(end) is not cst.Raise or end.exc is None:
        return False
    before = [*statements[:-1], statements[-1].with_changes(body=statements[-1].body[:-1])]
    return _only_reports([s for s in before if not (type(s) is cst.SimpleStatementLine and not s.body)], facts)


def _success_exit(statements) -> str | None:
    """`break` or `return` when the `try` body ends with it and never moves on to the
    next attempt by itself."""
    if not statements or type(statements[-1]) is not cst.SimpleStatementLine:
        return None
    last = statements[-1].body[-1]
    kind = "break" if type(last) is cst.Break else "return" if type(last) is cst.Return else None
    if kind is None:
        return None
    finder = _ExitFinder()
    for stmt in statements[:-1]:
        walk(stmt, finder)
    return None if finder.found else kind


class _ExitFinder(cst.CSTVisitor):
    """Finds a `continue` of the attempts loop (an early `break` or `return` leaves it
    as the last statement does; nested loops and functions keep their own)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Continue(self, node: cst.Continue) -> None:
        self.found = True  # the next attempt would run the work again

    def visit_Yield(self, node: cst.Yield) -> None:
        self.found = True

    def visit_For(self, node: cst.For) -> bool:
        walk(node.iter, self)
        for stmt in (node.orelse.body.body if node.orelse is not None else ()):
            walk(stmt, self)
        return False  # its body's break and continue are its own

    def visit_While(self, node: cst.While) -> bool:
        walk(node.test, self)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _only_reports(statements, facts: Facts) -> bool:
    for stmt in statements:
        if type(stmt) is cst.If:
            branches = [_statements(stmt.body)]
            orelse = stmt.orelse
            while orelse is not None:
                branches.append(_statements(orelse.body))
                orelse = orelse.orelse if type(orelse) is cst.If else None
            if not all(_only_reports(b, facts) for b in branches):
                return False
            continue
        if type(stmt) is not cst.SimpleStatementLine:
            return False
        for small in stmt.body:
            kind = type(small)
            if kind in (cst.Pass, cst.Continue):
                continue
            if kind is cst.Raise and small.exc is None:
                continue  # a bare `raise`: the original error goes on
            if kind is cst.Expr and type(small.value) is cst.Call and _reports(small.value, facts):
                continue
            return False
    return True


def _statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """A suite's statements; `if x: a; b` on one line counts as one line of them."""
    if type(suite) is cst.SimpleStatementSuite:
        return [cst.SimpleStatementLine(body=suite.body)]
    return list(suite.body)


def _reports(call: cst.Call, facts: Facts) -> bool:
    func = call.func
    if type(func) is cst.Name and func.value in REPORTING_FUNCTIONS:
        return True
    path = qualify(func, facts.imports)
    if path in REPORTING_PATHS:
        return True
    return type(func) is cst.Attribute and func.attr.value in REPORTING_METHODS and _is_logger(func.value)


def _is_logger(expr: cst.BaseExpression) -> bool:
    name = code_of(expr)
    return name in ("logger", "log", "logging", "sys.stderr", "sys.stdout")


def unwrapped_call(call: cst.Call, wrappers: dict[str, RetryWrapper]) -> cst.Call:
    """The call a retry wrapper makes when nothing fails: `with_retries(run, x)` → `run(x)`;
    any other call as it is."""
    func = call.func
    if type(func) is cst.Name and func.value in wrappers and call.args:
        first = call.args[0]
        if first.keyword is None and not first.star and type(first.value) is cst.Name:
            return call.with_changes(func=first.value, args=call.args[1:])
    return call


def retry_wrappers(facts: Facts) -> dict[str, RetryWrapper]:
    """Same-file functions `def f(fn, *args, ...)` that call `fn(*args)` under a retry guard."""
    return facts.once(_find_wrappers)


def _find_wrappers(facts: Facts) -> dict[str, RetryWrapper]:
    found: dict[str, RetryWrapper] = {}
    for name, func in facts.functions.items():
        params = func.params
        star = params.star_arg
        if not params.params or not isinstance(star, cst.Param):
            continue
        fn, args = params.params[0].name.value, star.name.value
        loops = [s for s in func.body.body if type(s) is cst.For]
        guard = retry_guard(loops[0], facts) if len(loops) == 1 else None
        if guard is None or guard.exit != "return" or not _calls_through(guard.guarded, fn, args):
            continue
        found[name] = RetryWrapper(name=name, func=func, guard=_giving_up_after(guard, func, facts))
    return found


def _giving_up_after(guard: RetryGuard, func: cst.FunctionDef, facts: Facts) -> RetryGuard:
    """``guard`` with what its function does after its loop when that gives up (reports,
    then raises): the loop runs out only when every attempt failed (each success returns)."""
    body = list(func.body.body)
    if guard.exit != "return" or guard.loop.orelse is not None or guard.loop not in body:
        return guard
    after = body[body.index(guard.loop) + 1:]
    if not _gives_up(after, facts):
        return guard
    return dataclasses.replace(guard, after=tuple(after))


def _calls_through(guarded: cst.Try, fn: str, args: str) -> bool:
    """Is the `try` body exactly `return fn(*args)`?"""
    body = guarded.body.body
    if len(body) != 1 or type(body[0]) is not cst.SimpleStatementLine:
        return False
    ret = body[0].body[0]
    call = ret.value if type(ret) is cst.Return else None
    return (
        type(call) is cst.Call
        and type(call.func) is cst.Name
        and call.func.value == fn
        and len(call.args) == 1
        and call.args[0].star == "*"
        and type(call.args[0].value) is cst.Name
        and call.args[0].value.value == args
    )


def function_guard(func: cst.FunctionDef, facts: Facts) -> RetryGuard | None:
    """The retry guard at the top level of a function's body, if there is one."""
    for stmt in func.body.body:
        guard = retry_guard(stmt, facts)
        if guard is not None:
            return _giving_up_after(guard, func, facts)
    return None


RETRY_COMMENT = "# the requests' retry, now around the whole session"


@dataclass(frozen=True)
class PortableRetry:
    """A guard rewritten to stand at a session's place: the function's parameters it read
    replaced by the values the call gave them, its attempt variable renamed."""

    guard: RetryGuard
    attempt: str
    iter: cst.BaseExpression
    handlers: tuple[cst.ExceptHandler, ...]
    last: str | None  # the code of the last attempt's value (`2`, `MAX_ATTEMPTS - 1`), when it has one
    giving_up: cst.Else | None = None  # the loop's `else:`, its names replaced as the handlers' are

    def around(self, session: cst.BaseStatement) -> cst.For:
        """``session`` under this retry: the next attempt runs it again from the start.
        The original gave up on a request after its last attempt and went on; here every
        handler that may go on after the last attempt raises the last failure itself (`if
        attempt == last: raise`), so the loop never ends without the session having run: the code
        after it (a replay of what the session recorded, or the code as written should the
        session fail) always sees a session that ran, or the error."""
        handlers = tuple(
            _giving_up(h, self.attempt, self.last)
            if not self.guard.gives_up and _needs_give_up(h, self.attempt, self.last) else h
            for h in self.handlers
        )
        guarded = self.guard.guarded.with_changes(
            body=cst.IndentedBlock(body=[session.with_changes(leading_lines=[]), cst.parse_statement("break\n")]),
            handlers=handlers,
        )
        said = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(RETRY_COMMENT))
        return self.guard.loop.with_changes(
            target=cst.Name(self.attempt),
            iter=self.iter,
            body=self.guard.loop.body.with_changes(body=[guarded], header=said),
            orelse=self.giving_up,
            leading_lines=session.leading_lines,
        )


def portable_retry(
    guard: RetryGuard,
    func: cst.FunctionDef | None,
    passed: dict[str, cst.BaseExpression],
    available: set[str],
    attempt: str,
    changing: Changing | None = None,
) -> PortableRetry | str:
    """The guard as it can stand around a session, or why it cannot. ``func`` is the
    function the guard is in (None: the guard is in the moved code itself); ``passed``
    holds the arguments the call gave its parameters; ``available`` the names the
    session's place can read; ``changing`` what the code the retry goes around may
    rebind (its last attempt is computed again after that code ran). A handler line
    that reads anything else (the prompt of the failed request, say) is left out: the
    session has no single request to name."""
    params = {} if func is None else _parameters(func)
    exception_names = {h.name.name.value for h in guard.guarded.handlers
                       if h.name is not None and isinstance(h.name.name, cst.Name)}
    values: dict[str, cst.BaseExpression] = {guard.attempt: cst.Name(attempt)}
    missing: set[str] = set()
    used = set(collect(guard.loop.iter).reads)
    for handler in guard.guarded.handlers:
        used |= set(collect(handler).reads)
    if guard.loop.orelse is not None:
        unreadable = sorted(set(collect(guard.loop.orelse).reads) - _BUILTINS - available - set(values))
        if unreadable:
            return (f"the retry gives up (its `else:`) with a line that reads `{unreadable[0]}`, which the "
                    "session's place cannot read")
    if guard.after and any(_unreadable(name, func, params, available)
                           for name in set(collect_all(guard.after).reads) - _BUILTINS - set(values)):
        # (a parameter, `text` of the failed request, has no single value around the session)
        guard = dataclasses.replace(guard, after=())  # its handlers give up instead (the last failure)
    for name in sorted(used - exception_names - {guard.attempt}):
        value = passed.get(name, params.get(name)) if name in params else None
        if value is not None and not collect(value).reads:
            values[name] = value  # a parameter with a constant value: `tries=3`
        elif name in params or name not in available and name not in _BUILTINS:
            missing.add(name)
        elif func is not None and name in collect(func.body).binds:
            missing.add(name)
    if missing & set(collect(guard.loop.iter).reads):
        where = f" in `{func.name.value}`" if func is not None else ""
        return f"the retry{where} counts its attempts with `{sorted(missing)[0]}`, which the session's place cannot read"
    handlers = []
    for handler in guard.guarded.handlers:
        lines = _statements(handler.body)
        kept = [stmt for stmt in lines if not (set(collect(stmt).reads) & missing)]
        dropped = [stmt for stmt in lines if set(collect(stmt).reads) & missing]
        if any(_raises(stmt) for stmt in dropped):
            return f"the retry gives up with a line that reads `{sorted(missing)[0]}`, which the session's place cannot read"
        if dropped:
            error = handler.name.name.value if handler.name is not None else None
            said = f"attempt {{{attempt}}} of the session failed" + (f": {{{error}!r}}" if error else "")
            kept.insert(0, cst.parse_statement(f'print(f"{said}")\n'))
        handlers.append(handler.with_changes(body=cst.IndentedBlock(body=kept or [cst.parse_statement("pass\n")])))
    iterable = guard.loop.iter.visit(_Substitute(values))
    handlers = tuple(h.visit(_Substitute(values)) for h in handlers)
    last = last_of_range(iterable, changing or Changing())
    if last is None and not guard.gives_up and any(_needs_give_up(h, attempt, None) for h in handlers):
        return (
            f"the retry (`{guard.header}`) gives up after an attempt whose number cannot be computed again "
            f"when the session fails (`{code_of(iterable)}` is not `range(stop)` or `range(start, stop)` "
            "with a `stop` that is a constant, or a name or attribute the loop leaves alone): around the "
            "session it would never give up; count the attempts with such a `range` to have it hoisted"
        )
    giving_up = None if guard.loop.orelse is None else guard.loop.orelse.visit(_Substitute(values))
    if guard.after:  # the function's giving up, as the loop's `else:` around the session
        giving_up = cst.Else(body=cst.IndentedBlock(body=[stmt.with_changes(leading_lines=[]) for stmt in guard.after]))
    return PortableRetry(guard=guard, attempt=attempt, iter=iterable, handlers=handlers, last=last,
                         giving_up=giving_up)


def _unreadable(name: str, func: cst.FunctionDef | None, params: dict, available: set[str]) -> bool:
    """Can the session's place not read ``name`` as the guard's function meant it (a
    parameter of it, a name it binds, or a name the place does not have)?"""
    return name in params or name not in available or (func is not None and name in collect(func.body).binds)


@dataclass(frozen=True)
class Changing:
    """What the code a retry goes around may change: names it binds (and names functions
    declare `global`), and attributes it assigns (`x.tries = 5`, by attribute name)."""

    names: frozenset[str] = frozenset()
    attributes: frozenset[str] = frozenset()


def code_changing(statements, functions) -> Changing:
    """What ``statements`` may change when they run, with any of ``functions`` they may
    call: the names they bind or declare `global`/`nonlocal`, and the attributes any of
    them assigns."""
    names: set[str] = set()
    attributes: set[str] = set()
    own = {id(stmt) for stmt in statements}
    for node in [*statements, *functions]:
        if id(node) in own:
            names |= set(collect(node).binds)
        for declared in find_nodes(node, lambda n: type(n) in (cst.Global, cst.Nonlocal)):
            names |= {item.name.value for item in declared.names}
        for target in find_nodes(node, lambda n: type(n) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
            if type(target.target) is cst.Attribute:
                attributes.add(target.target.attr.value)
    return Changing(frozenset(names), frozenset(attributes))


_BUILTINS = frozenset(dir(__import__("builtins")))


def _parameters(func: cst.FunctionDef) -> dict[str, cst.BaseExpression | None]:
    """Each parameter's default (None for none, and for `*args` and `**kwargs`)."""
    return {p.name.value: p.default for p in all_params(func.params)}


def _raises(node: cst.CSTNode) -> bool:
    return bool(find_nodes(node, lambda n: type(n) is cst.Raise))


def _needs_give_up(handler: cst.ExceptHandler, attempt: str, last: str | None) -> bool:
    """May the handler go on after the last attempt failed? Not when it ends by raising
    (and never `continue`s), nor when the last attempt is a number and, with the attempt
    at that number, its own branches surely raise (`if attempt < 2: sleep(5) else: raise`)."""
    body = _statements(handler.body)
    end = body[-1] if body else None
    if not _continues(body) and type(end) is cst.SimpleStatementLine and type(end.body[-1]) is cst.Raise:
        return False
    value = _constant(cst.parse_expression(last)) if last is not None else None
    return value is None or not _raises_at(body, attempt, value)


def _raises_at(statements, attempt: str, value: int) -> bool:
    """Do ``statements``, run with ``attempt`` equal to ``value``, surely raise before
    they end or `continue`? (A test they cannot decide: not shown.)"""
    for stmt in statements:
        if type(stmt) is cst.If:
            branch = _branch_taken(stmt, attempt, value)
            if branch is None:  # either way: it raises, or goes on to what follows unless it may `continue`
                if _continues([stmt]):
                    return False
                continue
            if _raises_at(branch, attempt, value):
                return True
            if _continues(branch):
                return False
            continue
        if type(stmt) is not cst.SimpleStatementLine:
            return False
        for small in stmt.body:
            if type(small) is cst.Raise:
                return True
            if type(small) is cst.Continue:
                return False
    return False


def _continues(statements) -> bool:
    return any(find_nodes(stmt, lambda n: type(n) is cst.Continue) for stmt in statements)


def _branch_taken(stmt: cst.If, attempt: str, value: int) -> list[cst.BaseStatement] | None:
    """The statements of the branch of ``stmt`` that runs with ``attempt`` equal to
    ``value``; None when a test cannot be decided."""
    truth = _truth(stmt.test, attempt, value)
    if truth is None:
        return None
    if truth:
        return _statements(stmt.body)
    orelse = stmt.orelse
    if orelse is None:
        return []
    if type(orelse) is cst.If:
        return _branch_taken(orelse, attempt, value)
    return _statements(orelse.body)


_COMPARISONS = {
    cst.LessThan: lambda a, b: a < b, cst.LessThanEqual: lambda a, b: a <= b,
    cst.GreaterThan: lambda a, b: a > b, cst.GreaterThanEqual: lambda a, b: a >= b,
    cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b,
}


def _truth(test: cst.BaseExpression, attempt: str, value: int) -> bool | None:
    """``test`` with ``attempt`` equal to ``value``: comparisons of integer arithmetic of
    the attempt and constants, with `and`, `or`, `not`; None for anything else."""
    kind = type(test)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _truth(test.expression, attempt, value)
        return None if inner is None else not inner
    if kind is cst.BooleanOperation:
        left, right = _truth(test.left, attempt, value), _truth(test.right, attempt, value)
        if left is None or right is None:
            return None
        return (left and right) if type(test.operator) is cst.And else (left or right)
    if kind is not cst.Comparison:
        return None
    left = _constant(test.left, {attempt: value})
    for target in test.comparisons:
        compare = _COMPARISONS.get(type(target.operator))
        right = _constant(target.comparator, {attempt: value})
        if compare is None or left is None or right is None:
            return None
        if not compare(left, right):
            return False
        left = right
    return True


def _giving_up(handler: cst.ExceptHandler, attempt: str, last: str) -> cst.ExceptHandler:
    """``handler`` raising the failure on the last attempt: at its end, or first when it
    may `continue` (the lines after a `continue` would not run)."""
    give_up = cst.parse_statement(f"if {attempt} == {last}:\n    raise\n")
    body = _statements(handler.body)
    body = [give_up, *body] if _continues(body) else [*body, give_up]
    if type(handler.body) is cst.IndentedBlock:
        return handler.with_changes(body=handler.body.with_changes(body=body))
    return handler.with_changes(body=cst.IndentedBlock(body=body))


_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)


def last_of_range(expr: cst.BaseExpression, changing: Changing) -> str | None:
    """The code of the last value `range(...)` takes, to compare an attempt with after the
    code ``changing`` describes ran: the number when the arguments are constants
    (`range(1, 3 + 1)` → `3`); else, for `range(stop)` and `range(start, stop)` (step 1),
    `stop - 1` when `stop` gives the same value again — built of constants, names and
    their attributes that code leaves alone (`range(MAX_ATTEMPTS)` → `MAX_ATTEMPTS - 1`,
    `range(1, cfg.tries + 1)` → `cfg.tries`). None otherwise, and for an empty range."""
    if not (type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "range"):
        return None
    args = expr.args
    if not 1 <= len(args) <= 3 or any(a.keyword is not None or a.star for a in args):
        return None
    constants = [_constant(a.value) for a in args]
    if all(value is not None for value in constants):
        try:
            values = range(*constants)
        except (TypeError, ValueError):
            return None
        return str(values[-1]) if len(values) else None
    if len(args) == 3 and constants[2] != 1:
        return None
    stop = args[0].value if len(args) == 1 else args[1].value
    if not _same_again(stop, changing):
        return None
    if type(stop) is cst.BinaryOperation and not stop.lpar and type(stop.operator) is cst.Add:
        step = _constant(stop.right)
        if step == 1:
            return code_of(stop.left)  # `range(1, n + 1)`: `n`
        if step is not None:
            return f"{code_of(stop.left)} + {step - 1}"
    return f"{code_of(stop)} - 1"


def _constant(expr: cst.BaseExpression, names: dict[str, int] | None = None) -> int | None:
    """The value of an integer expression of literals (`3`, `2 * 4 + 1`, `-1`), and of
    the ``names`` given a value."""
    kind = type(expr)
    if kind is cst.Integer:
        return int(expr.evaluated_value)
    if kind is cst.Name:
        return (names or {}).get(expr.value)
    if kind is cst.UnaryOperation and type(expr.operator) is cst.Minus:
        value = _constant(expr.expression, names)
        return None if value is None else -value
    if kind is cst.BinaryOperation and type(expr.operator) in _ARITHMETIC:
        left, right = _constant(expr.left, names), _constant(expr.right, names)
        if left is None or right is None:
            return None
        if type(expr.operator) is cst.FloorDivide:
            return None if right == 0 else left // right
        return {cst.Add: left + right, cst.Subtract: left - right, cst.Multiply: left * right}[type(expr.operator)]
    return None


def _same_again(expr: cst.BaseExpression, changing: Changing) -> bool:
    """Does ``expr`` give the same value when evaluated again after the code ``changing``
    describes ran? Constants, names it does not rebind, their attributes it does not
    assign, and arithmetic of those (no call, no subscript: either may read what changed)."""
    kind = type(expr)
    if kind is cst.Integer:
        return True
    if kind is cst.Name:
        return expr.value not in changing.names
    if kind is cst.Attribute:
        return expr.attr.value not in changing.attributes and _same_again(expr.value, changing)
    if kind is cst.UnaryOperation:
        return type(expr.operator) in (cst.Minus, cst.Plus) and _same_again(expr.expression, changing)
    if kind is cst.BinaryOperation:
        return type(expr.operator) in _ARITHMETIC and _same_again(expr.left, changing) and \
            _same_again(expr.right, changing)
    return False


class _Substitute(cst.CSTTransformer):
    """Replaces names that are read (not attributes, not keywords) by the given values."""

    def __init__(self, values: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.values = values

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return True

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # `x.name` keeps its attribute

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_FormattedStringExpression(self, original: cst.FormattedStringExpression,
                                        updated: cst.FormattedStringExpression):
        """`f"{tries}"` with `tries=3` → `f"3"`, not `f"{3}"`: a number formatted plainly
        is its text."""
        value = updated.expression
        plain = original.conversion is None and original.format_spec is None and original.equal is None
        if plain and type(original.expression) is cst.Name and isinstance(value, (cst.Integer, cst.Float)):
            return cst.FormattedStringText(str(value.evaluated_value))
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        value = self.values.get(original.value)
        if value is None:
            return updated
        if isinstance(value, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation)):
            return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return value

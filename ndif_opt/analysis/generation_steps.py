"""Stepping through generation with `model.next()` (nnsight < 0.5), in nnsight 0.5+ terms.

In a pre-0.5 `model.generate(...)` block, `model.next()` moves every module on to the next
generated token: the module reads and interventions after it apply to that step. nnsight
0.5+ has no `.next()`: a step is chosen with `tracer.iter[...]`, which runs its body at
the steps of its index and yields the step's number. So, in one invoke (or a generate
without invokes), with ``s`` the number of `model.next()` calls run so far:

- `model.next()` alone: removed (``s`` grows by one);
- `for i in range(K): <body>; model.next()`: `for i in tracer.iter[s:s + K]: <body>`
  (removed when the body is only the `model.next()`); ``s`` grows by K;
- a statement that reads the model's modules while ``s`` is not 0: inside
  `for _ in tracer.iter[s]:` (consecutive ones in one loop); `model.generator`,
  `model.tokenizer` and `model.config` do not change with the step.

Anything else holding a `.next()` — one on a single module, one inside an `if`, a loop whose
variable the body reads while ``s`` is not 0 (it would count from ``s``) — has no rewrite
here, and says why. Computed on the facts of one tree; the migrate-api pass applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, opens_invoke
from ndif_opt.analysis.names import collect, fresh_name
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import find_nodes

#: attributes of a model that are the same at every generation step
STEP_INVARIANT_ATTRIBUTES = frozenset({"generator", "tokenizer", "config"})


@dataclass
class Stepping:
    """How one suite (an invoke's body, or a generate's) steps through generation.

    ``suite`` is the IndentedBlock rewritten as a whole by :meth:`rewrite` (its statements
    keep their places in the updated tree); ``calls`` are the `.next()` calls it
    accounts for; ``problems`` the `.next()` calls it cannot rewrite, with the reason."""

    suite: cst.IndentedBlock
    tracer: str
    calls: list[cst.Call] = field(default_factory=list)
    problems: list[tuple[cst.Call, str]] = field(default_factory=list)
    # per statement index: ("keep",) | ("drop",) | ("iter", start, end) | ("at", step, count)
    plan: dict[int, tuple] = field(default_factory=dict)
    # the `as` name given to a generate block that had none (its steps need a tracer)
    named: str | None = None
    block: cst.With | None = None

    def rewrite_block(self, updated: cst.With) -> cst.With:
        """The updated generate block, named ``as <named>``, its body rewritten."""
        first = updated.items[0].with_changes(asname=cst.AsName(name=cst.Name(self.named)))
        return updated.with_changes(items=[first, *updated.items[1:]], body=self.rewrite(updated.body))

    def rewrite(self, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        """The updated suite with the plan applied (statements matched by index)."""
        old = list(updated.body)
        new: list[cst.BaseStatement] = []
        index = 0
        while index < len(old):
            step = self.plan.get(index, ("keep",))
            stmt = old[index]
            if step[0] == "drop":
                index += 1
                continue
            if step[0] == "iter":
                body = list(stmt.body.body)[:-1]
                new.append(stmt.with_changes(
                    iter=cst.parse_expression(f"{self.tracer}.iter[{step[1]}:{step[2]}]"),
                    body=stmt.body.with_changes(body=body)))
            elif step[0] == "at":
                group = old[index:index + step[2]]
                loop = cst.parse_statement(f"for _ in {self.tracer}.iter[{step[1]}]:\n    pass\n")
                first = group[0]
                new.append(loop.with_changes(
                    body=loop.body.with_changes(body=[first.with_changes(leading_lines=()), *group[1:]]),
                    leading_lines=first.leading_lines))
                index += step[2]
                continue
            else:
                new.append(stmt)
            index += 1
        if not new:  # every statement was a `.next()`: the suite still needs one
            new = [cst.SimpleStatementLine([cst.Pass()])]
        return updated.with_changes(body=new)


def generation_steps(facts: Facts) -> list[Stepping]:
    """The suites of the generate blocks that call `.next()`, each with its plan (a block
    with no `as` name gets one: its steps need a tracer; it has no invokes then)."""
    found = []
    for block in facts.blocks:
        if block.method != "generate" or not _next_calls(block.node.body):
            continue
        body = block.node.body
        if block.tracer_name is None:
            use = collect(facts.module)
            named = fresh_name("tracer", use.reads.keys() | use.binds.keys())
            stepping = _plan(body, block, named)
            stepping.named, stepping.block = named, block.node
            found.append(stepping)
            continue
        invokes = [s for s in body.body if opens_invoke(s, block.tracer_name)]
        suites = [invoke.body for invoke in invokes] if invokes else [body]
        for suite in suites:
            if _next_calls(suite):
                found.append(_plan(suite, block, block.tracer_name))
    return found


def _plan(suite: cst.IndentedBlock, block: Block, tracer: str) -> Stepping:
    stepping = Stepping(suite, tracer)
    if "_" in collect(block.node).reads:
        stepping.problems = [(call, "the block reads `_`, the name its steps would bind")
                             for call in _next_calls(suite)]
        return stepping
    terms: list[str] = []  # the step so far, as a sum
    reading: list[int] = []  # the run of statements reading the model at this step
    stmts = list(suite.body)

    def close_run() -> None:
        if reading:
            # one loop takes the run: two loops at one step would wait for it twice
            stepping.plan[reading[0]] = ("at", _sum(terms), len(reading))
            reading.clear()

    for index, stmt in enumerate(stmts):
        calls = _next_calls(stmt)
        if not calls:
            if terms and _reads_steps(stmt, block.model):
                reading.append(index)
            else:
                close_run()
            continue
        close_run()
        if _is_next_statement(stmt, block.model):
            stepping.calls += calls
            stepping.plan[index] = ("drop",)
            terms.append("1")
            continue
        count, why = _stepping_loop(stmt, block.model, bool(terms))
        if count is None:
            stepping.problems += [(call, why) for call in calls]
            continue
        stepping.calls += calls
        if len(stmt.body.body) == 1:
            stepping.plan[index] = ("drop",)
        else:
            stepping.plan[index] = ("iter", _sum(terms), _sum([*terms, count]))
        terms.append(count)
    close_run()
    return stepping


def _stepping_loop(stmt: cst.BaseStatement, model: str, stepped: bool) -> tuple[str | None, str]:
    """K for `for v in range(K): ...; model.next()` with no other `.next()`, else the reason."""
    shape = ("a `.next()` that is not `model.next()` as a statement of its own, nor the last statement "
             "of a `for ... in range(K):` loop; step through generation with `for step in tracer.iter[...]:` "
             "by hand")
    if type(stmt) is not cst.For or stmt.orelse is not None or type(stmt.body) is not cst.IndentedBlock:
        return None, shape
    body = list(stmt.body.body)
    if not _is_next_statement(body[-1], model) or any(_next_calls(s) for s in body[:-1]):
        return None, shape
    call = stmt.iter
    if not (type(call) is cst.Call and dotted_name(call.func) == "range" and len(call.args) == 1
            and call.args[0].keyword is None and not call.args[0].star):
        return None, "a loop of `.next()` over something other than `range(K)`"
    target = stmt.target
    if type(target) is not cst.Name:
        return None, shape
    if stepped and target.value in collect(stmt.body).reads:
        return None, (f"the loop reads `{target.value}`, which `tracer.iter` would count from the step "
                      "the loop starts at, not from 0")
    return _term(call.args[0].value), ""


def _is_next_statement(stmt: cst.BaseStatement, model: str) -> bool:
    """`model.next()` as a statement of its own."""
    if type(stmt) is not cst.SimpleStatementLine or len(stmt.body) != 1:
        return False
    expr = stmt.body[0]
    if type(expr) is not cst.Expr or type(expr.value) is not cst.Call:
        return False
    call = expr.value
    return (type(call.func) is cst.Attribute and call.func.attr.value == "next" and not call.args
            and dotted_name(call.func.value) == model)


def _next_calls(node: cst.CSTNode) -> list[cst.Call]:
    """The `.next()` calls (no arguments) on an attribute chain in ``node``."""
    return [call for call in find_nodes(node, lambda n: type(n) is cst.Call)
            if type(call.func) is cst.Attribute and call.func.attr.value == "next" and not call.args
            and is_envoy_chain(call.func.value)]


def tracer_steps(expr: cst.BaseExpression, tracers) -> cst.BaseSlice | None:
    """The index of `tracer.iter[...]` (one of ``tracers``), the steps of generation a loop
    over it runs at (`[2]`: a `cst.Index`, `[0:4]`, `[:]`: a `cst.Slice`); None for any
    other expression."""
    if type(expr) is not cst.Subscript or len(expr.slice) != 1:
        return None
    base = expr.value
    if type(base) is not cst.Attribute or base.attr.value != "iter" or dotted_name(base.value) not in tracers:
        return None
    return expr.slice[0].slice


def is_envoy_chain(expr) -> bool:
    """`model.transformer.h[0]`, `model.lm_head` — an attribute chain, maybe indexed."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _reads_steps(stmt: cst.BaseStatement, model: str) -> bool:
    """Does ``stmt`` read something of the model that changes with the step (its modules)?"""
    if model not in collect(stmt).reads and model.split(".")[0] not in collect(stmt).reads:
        return False
    for name in find_nodes(stmt, lambda n: type(n) is cst.Attribute):
        if dotted_name(name.value) == model and name.attr.value not in STEP_INVARIANT_ATTRIBUTES:
            return True
    # the model itself handed to a function, or read some other way: it may read any module
    return any(dotted_name(n) == model for n in _bare_uses(stmt, model))


def _bare_uses(stmt: cst.BaseStatement, model: str) -> list[cst.BaseExpression]:
    """Reads of the model that are not the start of an attribute chain (`f(model)`)."""
    heads = {id(a.value) for a in find_nodes(stmt, lambda n: type(n) is cst.Attribute)}
    return [n for n in find_nodes(stmt, lambda n: type(n) in (cst.Name, cst.Attribute))
            if id(n) not in heads and dotted_name(n) == model]


def _term(expr: cst.BaseExpression) -> str:
    code = code_of(expr).strip()
    if type(expr) in (cst.Name, cst.Integer, cst.Attribute, cst.Call, cst.Subscript):
        return code
    return f"({code})"


def _sum(terms: list[str]) -> str:
    """`2`, `n`, `n + 1`: the terms added, the integers folded."""
    number = sum(int(t) for t in terms if t.isdigit())
    rest = [t for t in terms if not t.isdigit()]
    if number or not rest:
        rest.append(str(number))
    return " + ".join(rest)

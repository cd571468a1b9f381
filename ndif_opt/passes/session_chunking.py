"""session-chunking: keep every request under NDIF's one-hour limit.

## What it does
Estimates the server time of every remote request (the cost model: forward passes of
the model the script names, at its size). A session whose estimate exceeds NDIF's limit
— one hour, less a safety margin — and that ends in a loop is split into back-to-back
sessions of ``K`` iterations each, ``K`` chosen so that each session fits::

    for _ndif_chunk in range(0, len(XS), K):
        with model.session(remote=True):
            ...                              # what came before the loop, once per session
            for x in XS[_ndif_chunk:_ndif_chunk + K]:
                ...

A saved list or dict the loop fills is created in each session and merged into one on
your machine after it, under its own name. A request that cannot be split is reported
with its estimate.

## Why is this bad?
NDIF stops a request — a whole session included — after one hour, and everything it
computed is lost. A sweep that fits in one session on a small model can take hours on
Llama-3.1-405B. Several shorter sessions cost a few seconds of queueing each.

## Example
```python
with model.session(remote=True):
    results = list().save()
    for layer in range(126):
        for scale in SCALES:   # 64 scales: 8,064 forward passes of a 405B model
            with model.trace(prompt):
                ...
                results.append(...)
```

## Use instead
```python
_ndif_results = []
for _ndif_chunk in range(0, 126, 63):
    with model.session(remote=True):
        results = list().save()
        for layer in range(126)[_ndif_chunk:_ndif_chunk + 63]:
            for scale in SCALES:
                with model.trace(prompt):
                    ...
                    results.append(...)
    _ndif_results.extend(results)
    del results  # the next session would upload it
results = _ndif_results
```

## Fix safety
Safe: the iterations run in the same order with the same values, and the merged list or
dict equals the one a single session would return. Code before the loop runs once per
session (its forward passes are counted in the chunk size). Not applied when the loop is
followed by more code in the session, has a ``break`` or an ``else:``, carries a value
from one iteration to the next (a running total, an object it changes other than the
saved list or dict it fills, or that it reads back), iterates something that cannot be
iterated again or whose length is unknown, or when a single iteration alone is over the
limit. The estimate assumes the model's registry dimensions and the cost model's
throughput (``[tool.ndif-opt.cost]``: ``session-limit``, ``session-margin``,
``throughput``, ``memory-bandwidth``).
"""

from __future__ import annotations

import math

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts
from ndif_opt.analysis.names import collect, collect_all, fresh_name, name_assignment, target_names
from ndif_opt.cost_model import RequestEstimate, explain, session_budget
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import SuitePlan, empty_container_kind
from ndif_opt.syntax.walk import walk
from ndif_opt.types import is_known
from ndif_opt.wording import counted, tense

# how the loop may fill a saved container so that per-session copies merge exactly:
# appended/extended in order (lists), keys set or updated (dicts; a later key wins, as a
# later iteration would). `insert`, `setdefault(...).append` or `lst[i] = v` would not.
FILL_METHODS = {"list": frozenset({"append", "extend"}), "dict": frozenset({"update"})}
CHUNK = "_ndif_chunk"


class SessionChunking(Pass):
    __doc__ = __doc__
    fix_safety = "safe"
    adds_requests = True  # one request NDIF would stop becomes several it runs

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        options = context.options
        budget = session_budget(options)
        estimate = explain(facts, options)
        # a library function's own session (nnterp's helpers) is not the script's to split;
        # a loop of unknown length in one is taken at the assumed length (and said so)
        over = [r for r in estimate.requests if estimate.longest_seconds(r)[0] > budget and r.block is not None]
        if not over:
            return module
        plan = SuitePlan()
        for request in over:
            block = request.block
            message = _over_message(request, options, *estimate.longest_seconds(request), estimate.assumed_trips)
            if not context.allows(block.node, message):
                continue
            built, reason = _plan(request, facts, budget, module, context.run.reserved_names)
            if built is None:
                context.skipped(block.node, message, reason)
                continue
            replacement, chunks, size = built
            context.introduced |= _new_names(replacement, module)
            info = block.stmt
            plan.replace(info.suite, info.index, info.index + 1, lambda _old, new=replacement: new)
            context.applied(
                block.node,
                f"{message}: {tense('split', 'would be split')} into {counted(chunks, 'back-to-back session')} "
                f"of {counted(size, 'iteration')} "
                f"(about {_seconds(request.profile.prefix_seconds + size * request.profile.iteration_seconds)} each)",
            )
        return plan.apply(module, facts) if plan else module


def _over_message(request: RequestEstimate, options, seconds: float, assumed: tuple, trips: int) -> str:
    """Why the request is over the limit; ``assumed``: the loops of unknown length taken
    at ``trips`` iterations to get its ``seconds``."""
    from ndif_opt.cost_model import DEFAULTS

    limit = float(options.cost.get("session-limit", DEFAULTS["session-limit"]))
    what = "this session" if request.kind == "session" else f"this remote {request.kind}"
    estimate = _seconds(seconds)
    if assumed:
        loops = ", ".join(loop.named for loop in assumed)
        estimate += f" (assuming {counted(trips, 'iteration')} of {loops}, whose length is not known before running)"
    if seconds > limit:
        where = f"over NDIF's limit of {_seconds(limit)} per request"
    else:
        margin = float(options.cost.get("session-margin", DEFAULTS["session-margin"]))
        where = f"too close to NDIF's limit of {_seconds(limit)} per request (a {margin:.0%} margin is kept)"
    return f"{what} is estimated at {estimate} of server time on `{request.model}`, {where}"


def _seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 100 else f"{value:.3g} s"


# ---------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------


def _plan(request: RequestEstimate, facts: Facts, budget: float, module: cst.Module, reserved=frozenset()):
    """((replacement statement, chunks, iterations per chunk), "") or (None, reason)."""
    block = request.block
    profile = request.profile
    if block.method != "session":
        return None, (
            "one trace cannot be split into sessions; run fewer or shorter forward passes per "
            "request (fewer invokes, fewer new tokens)"
        )
    if not is_known(request.count) or request.count > 1:
        return None, "the session itself runs in a loop; split that loop into smaller runs"
    loop = profile.loop if profile is not None else None
    body = list(block.node.body.body)
    if loop is None or not body or body[-1] is not loop:
        if loop is None:
            return None, "the session does not end in a loop of traces that could be split"
        return None, "code after the loop in the session reads what the loop built"
    if loop.orelse is not None:
        return None, "the loop has an `else:` clause"
    if profile.trips is None:
        return None, "the number of iterations of the loop is not known before running"
    if _has(loop.body, (cst.Break, cst.Return, cst.Yield, cst.Global, cst.Nonlocal)):
        return None, "the loop can stop early (`break`/`return`)"
    prefix = body[:-1]
    room = budget - profile.prefix_seconds
    if profile.iteration_seconds <= 0 or room < profile.iteration_seconds:
        return None, (
            f"one iteration alone (with the code before the loop) is estimated at "
            f"{_seconds(profile.prefix_seconds + profile.iteration_seconds)}; split the work inside an iteration"
        )
    per_chunk = max(int(room // profile.iteration_seconds), 1)
    trips = profile.trips
    if per_chunk >= trips:
        return None, "the loop's iterations fit in one session; the time is spent outside the loop"
    chunks = math.ceil(trips / per_chunk)
    per_chunk = math.ceil(trips / chunks)

    accumulators, reason = _accumulators(prefix, loop, facts)
    if reason:
        return None, reason
    reason = _carried(loop, accumulators, facts)
    if reason:
        return None, reason
    iterable, length = _slicing(loop.iter, facts, trips)
    if iterable is None:
        return None, length
    chunk = _unused_name(module, CHUNK, reserved)
    return (_build(block, prefix, loop, accumulators, iterable, length, per_chunk, chunk), chunks, per_chunk), ""


def _accumulators(prefix, loop: cst.For, facts: Facts) -> tuple[dict[str, str], str]:
    """Lists/dicts created before the loop that the loop fills: name -> kind ("list" or
    "dict" for a saved one, merged on your machine; ``LEFT`` + kind for one not saved:
    nothing reads what it holds after the loop, the last thing in the session, so each
    session fills its own)."""
    created: dict[str, str] = {}
    for stmt in prefix:
        kind = _saved_container(stmt) or _unsaved_container(stmt)
        if kind is not None:
            created[kind[0]] = kind[1]
    prefix_use = collect_all(prefix)
    loop_use = collect(loop.body)
    for name in loop_use.mutates:
        if name in created or facts.is_model_like(name):
            continue
        if name in loop_use.binds:
            continue  # created inside each iteration
        return {}, f"the loop changes `{name}` from one iteration to the next"
    filled = {}
    for name, kind in created.items():
        if kind.startswith(LEFT):
            if name not in loop_use.mutates:
                continue  # (made again by each session's copy of the code before the loop)
            if name in prefix_use.reads:
                # another name may hold it, and what that one holds is seen
                return {}, f"the loop changes `{name}`, which the code before it also reads"
        if name in prefix_use.mutates:
            return {}, f"`{name}` is filled before the loop too, which each session would repeat"
        if name in loop_use.mutates or name in loop_use.reads:
            if not _only_filled(loop.body, name, kind.removeprefix(LEFT)):
                return {}, f"the loop reads `{name}` while filling it, or fills it out of order"
            filled[name] = kind
    return filled, ""


LEFT = "left "  # before the kind of a container no session downloads


def _unsaved_container(stmt) -> tuple[str, str] | None:
    """`name = []` / `name = dict()` (not saved) → (name, "left list" | "left dict")."""
    found = name_assignment(stmt)
    kind = empty_container_kind(found[1]) if found is not None else None
    return (found[0], LEFT + kind) if kind else None


def _saved_container(stmt) -> tuple[str, str] | None:
    """`name = list().save()` / `dict().save()` → (name, "list" | "dict")."""
    found = name_assignment(stmt)
    if found is None:
        return None
    name, value = found
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "save" and not value.args):
        return None
    kind = empty_container_kind(value.func.value)
    return (name, kind) if kind else None


def _only_filled(node: cst.CSTNode, name: str, kind: str) -> bool:
    """Is ``name`` only filled: ``name.append/extend(...)`` for a list, ``name[k] = v`` or
    ``name.update(...)`` for a dict?"""
    allowed: set[int] = set()
    seen: list[cst.Name] = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == name
                and func.attr.value in FILL_METHODS[kind]
            ):
                allowed.add(id(func.value))

        def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
            t = target.target
            if (
                kind == "dict"
                and isinstance(t, cst.Subscript)
                and isinstance(t.value, cst.Name)
                and t.value.value == name
            ):
                allowed.add(id(t.value))

        def visit_Name(self, node_: cst.Name) -> None:
            if node_.value == name:
                seen.append(node_)

    walk(node, Finder())
    return all(id(n) in allowed for n in seen)


def _carried(loop: cst.For, accumulators: dict[str, str], facts: Facts) -> str:
    """Why a value would flow from one iteration to the next, or ""."""
    targets = set(target_names(loop.target))
    body_use = collect(loop.body)
    bound = set(body_use.binds) - targets

    def undefined(node: cst.CSTNode, defined: set[str]) -> str:
        for name in collect(node).reads:
            if name in bound and name not in defined and name not in accumulators:
                return name
        return ""

    def scan(statements, defined: set[str]) -> str:
        """The first name read before this iteration binds it (straight-line order;
        a name bound only inside a nested loop or branch is not bound after it)."""
        for stmt in statements:
            if isinstance(stmt, cst.With):
                for item in stmt.items:
                    found = undefined(item.item, defined)
                    if found:
                        return found
                    if item.asname is not None:
                        defined |= set(collect(item.asname).binds)
                found = scan(stmt.body.body, defined)  # a with body runs straight through
            elif isinstance(stmt, cst.For):
                found = undefined(stmt.iter, defined) or scan(stmt.body.body, defined | set(target_names(stmt.target)))
            elif isinstance(stmt, cst.While):
                found = undefined(stmt.test, defined) or scan(stmt.body.body, set(defined))
            elif isinstance(stmt, cst.If):
                found = undefined(stmt.test, defined) or scan(stmt.body.body, set(defined))
                orelse = stmt.orelse
                while not found and orelse is not None:
                    if isinstance(orelse, cst.If):
                        found = undefined(orelse.test, defined) or scan(orelse.body.body, set(defined))
                        orelse = orelse.orelse
                    else:
                        found = scan(orelse.body.body, set(defined))
                        orelse = None
            elif isinstance(stmt, cst.SimpleStatementLine):
                found = undefined(stmt, defined)
                if not found:
                    for small in stmt.body:
                        defined |= set(collect(small).binds)
            else:
                found = undefined(stmt, defined)
            if found:
                return found
        return ""

    name = scan(loop.body.body, set())
    if name:
        return f"`{name}` carries a value from one iteration of the loop to the next"
    return ""


def _slicing(iterable: cst.BaseExpression, facts: Facts, trips: int):
    """(code of the iterable to slice, code of its length) or (None, reason)."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range":
        return code_of(iterable), str(trips)
    if _reiterable(iterable, facts):
        code = code_of(iterable)
        return code, f"len({code})"
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name):
        if iterable.func.value in ("enumerate", "zip", "reversed", "sorted") and all(
            _reiterable(a.value, facts) for a in iterable.args if a.keyword is None
        ):
            return f"list({code_of(iterable)})", str(trips)
    return None, (
        f"the loop iterates `{code_of(iterable)}`, which may not be iterable a second time "
        "(make it a list or a range)"
    )


def _reiterable(expr: cst.BaseExpression, facts: Facts, depth: int = 0) -> bool:
    if depth > 4:
        return False
    if isinstance(expr, (cst.List, cst.Tuple, cst.SimpleString, cst.Integer, cst.ListComp)):
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in (
        "range", "list", "tuple", "sorted",
    ):
        return True  # a sequence, built once
    if isinstance(expr, cst.BinaryOperation):
        return _reiterable(expr.left, facts, depth + 1) and _reiterable(expr.right, facts, depth + 1)
    if isinstance(expr, cst.Name):
        value = facts.constant(expr.value)
        return value is not None and _reiterable(value, facts, depth + 1)
    if isinstance(expr, cst.Subscript):  # a slice of a list or range
        return all(isinstance(e.slice, cst.Slice) for e in expr.slice) and _reiterable(expr.value, facts, depth + 1)
    return False


def _new_names(statements: list[cst.BaseStatement], module: cst.Module) -> set[str]:
    """The names the replacement binds that the script had not: the chunk counter and the
    merged containers (the execution check leaves them out of its comparison)."""
    before = collect(module)
    return set(collect_all(statements).binds) - set(before.binds) - set(before.reads)


def _unused_name(module: cst.Module, base: str, reserved=frozenset()) -> str:
    use = collect(module)
    return fresh_name(base, set(use.binds) | set(use.reads) | set(reserved), separator="")


def _build(block: Block, prefix, loop: cst.For, accumulators, iterable: str, length: str, size: int, chunk: str):
    """The statements that replace the session: merged containers, the chunk loop."""
    session = block.node
    # what each session fills and nothing reads after stays there: nothing to merge
    accumulators = {name: kind for name, kind in accumulators.items() if not kind.startswith(LEFT)}
    sliced = cst.parse_expression(f"{_paren(iterable)}[{chunk}:{chunk} + {size}]")
    new_loop = loop.with_changes(iter=sliced)
    inner = session.with_changes(
        body=session.body.with_changes(body=[*prefix, new_loop]),
        leading_lines=[],
    )
    # (a container the tool made is already `_ndif_`-named: `_ndif_rows` → `_ndif_rows_all`)
    merged = {name: f"{name}_all" if name.startswith("_ndif_") else f"_ndif_{name}" for name in accumulators}
    lines = [f"{merged[n]} = {'[]' if k == 'list' else '{}'}  # what every session fills, merged\n"
             for n, k in accumulators.items()]
    header = f"for {chunk} in range(0, {length}, {size}):  # sessions of {size} iterations each\n    pass\n"
    # merge, then drop the chunk's copy: a name the next session's code mentions would
    # otherwise be uploaded with it
    merge = [
        f"{merged[n]}.{'extend' if k == 'list' else 'update'}({n})\n" for n, k in accumulators.items()
    ]
    if accumulators:
        merge.append(f"del {', '.join(accumulators)}\n")
    outer = cst.parse_statement(header)
    body_stmts = [_indent(inner)] + [cst.parse_statement(m) for m in merge]
    outer = outer.with_changes(body=outer.body.with_changes(body=body_stmts))
    after = [cst.parse_statement(f"{n} = {merged[n]}\n") for n in accumulators]
    statements = [cst.parse_statement(line) for line in lines] + [outer] + after
    statements[0] = statements[0].with_changes(leading_lines=session.leading_lines)
    return statements


def _indent(stmt: cst.BaseStatement) -> cst.BaseStatement:
    from ndif_opt.syntax.rewrite import reindentable

    return reindentable(stmt)


def _paren(code: str) -> str:
    expr = cst.parse_expression(code)
    if isinstance(expr, (cst.Name, cst.Call, cst.List, cst.Tuple, cst.Subscript, cst.Attribute)):
        return code
    return f"({code})"


def _has(node: cst.CSTNode, kinds: tuple[type, ...]) -> bool:
    """A node of these kinds in ``node``, outside nested loops (for break) and functions."""
    found = False

    class Finder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.loops = 0

        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(n, (cst.For, cst.While)):
                self.loops += 1
            if isinstance(n, kinds) and not (isinstance(n, cst.Break) and self.loops):
                found = True
            return True

        def on_leave(self, n: cst.CSTNode) -> None:
            if isinstance(n, (cst.For, cst.While)):
                self.loops -= 1

    walk(node, Finder())
    return found


_SWEEP = """\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
PROMPT = "The Eiffel Tower is in the city of"
SCALES = [0.25 * i for i in range(64)]
with model.session(remote=True):
    top = list().save()
    for layer in range(126):
        for scale in SCALES:
            with model.trace(PROMPT):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                top.append(model.lm_head.output[0, -1].argmax().item())
"""

SessionChunking.cases = (
    Case(
        name="a 405B sweep over an hour is split",
        before=_SWEEP,
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
PROMPT = "The Eiffel Tower is in the city of"
SCALES = [0.25 * i for i in range(64)]
_ndif_top = []  # what every session fills, merged
for _ndif_chunk in range(0, 126, 63):  # sessions of 63 iterations each
    with model.session(remote=True):
        top = list().save()
        for layer in range(126)[_ndif_chunk:_ndif_chunk + 63]:
            for scale in SCALES:
                with model.trace(PROMPT):
                    model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                    top.append(model.lm_head.output[0, -1].argmax().item())
    _ndif_top.extend(top)
    del top
top = _ndif_top
""",
    ),
    Case(
        name="a list the session fills and nothing reads is made again by each session, not merged",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
SCALES = [0.25 * i for i in range(64)]
with model.session(remote=True):
    top = list().save()
    norms = []
    for layer in range(126):
        for scale in SCALES:
            with model.trace("Hello"):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                logits = model.lm_head.output[0, -1]
            norms.append(logits.norm())
            top.append(logits.argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
SCALES = [0.25 * i for i in range(64)]
_ndif_top = []  # what every session fills, merged
for _ndif_chunk in range(0, 126, 63):  # sessions of 63 iterations each
    with model.session(remote=True):
        top = list().save()
        norms = []
        for layer in range(126)[_ndif_chunk:_ndif_chunk + 63]:
            for scale in SCALES:
                with model.trace("Hello"):
                    model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                    logits = model.lm_head.output[0, -1]
                norms.append(logits.norm())
                top.append(logits.argmax().item())
    _ndif_top.extend(top)
    del top
top = _ndif_top
""",
    ),
    Case(
        name="a list the loop fills that another name holds is reported, not split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
SCALES = [0.25 * i for i in range(64)]
with model.session(remote=True):
    norms = []
    seen = {"norms": norms}.save()
    for layer in range(126):
        for scale in SCALES:
            with model.trace("Hello"):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                norms.append(model.lm_head.output[0, -1].norm())
""",
        reason="the loop changes `norms`, which the code before it also reads",
    ),
    Case(
        name="a short session is left alone",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    out = list().save()
    for layer in range(32):
        with model.trace("Hello"):
            out.append(model.model.layers[layer].output[:, -1])
""",
    ),
    Case(
        name="a loop that carries a value is reported, not split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
SCALES = [0.25 * i for i in range(64)]
with model.session(remote=True):
    total = 0.0
    for layer in range(126):
        for scale in SCALES:
            with model.trace("Hello"):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                p = model.lm_head.output[0, -1].softmax(-1).max()
            total = total + p
""",
        reason="`total` carries a value from one iteration of the loop to the next",
    ),
    Case(
        name="code after the loop is reported, not split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
SCALES = [0.25 * i for i in range(64)]
with model.session(remote=True):
    probs = list().save()
    for layer in range(126):
        for scale in SCALES:
            with model.trace("Hello"):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                probs.append(model.lm_head.output[0, -1].softmax(-1).max())
    best = max(probs).save()
""",
        reason="code after the loop",
    ),
    Case(
        name="one long trace cannot be split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
with model.generate("Once upon a time", max_new_tokens=8000, remote=True):
    story = model.generator.output.save()
""",
        reason="one trace cannot be split into sessions",
    ),
)

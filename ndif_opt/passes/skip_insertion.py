"""skip-insertion: compute the layers before a patched layer once, then `.skip()` them.

## What it does
Inside a session, a loop whose iterations each trace the *same* input and first touch
the model at one decoder layer ``L`` — the loop variable (activation patching layer by
layer) or a fixed layer (a steering sweep) — gets one extra trace before the loop that
keeps the outputs of layers ``0..L-1`` (stopping the forward pass there), and every
iteration replaces those layers by their kept outputs with
``<layers>[i].skip(cache[i])`` instead of computing them again.

## Why is this bad?
Before the patched layer nothing differs between iterations: each iteration computes
the same layers ``0..L-1`` from scratch. Patching each of the 32 layers of a model in
turn evaluates 32 × 32 = 1024 layers; with the prefix computed once it is
32 + 528 = 560.

## Example
```python
with model.session(remote=True):
    diffs = list().save()
    for layer in range(32):
        with model.trace(CORRUPT):
            model.model.layers[layer].output[:, -1] = clean[layer]
            diffs.append(model.lm_head.output[0, -1, target].item())
```

## Use instead
```python
with model.session(remote=True):
    diffs = list().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace(CORRUPT) as _ndif_tracer:
        for _ndif_i in range(32):
            _ndif_cache.append(model.model.layers[_ndif_i].output)
        _ndif_tracer.stop()
    for layer in range(32):
        with model.trace(CORRUPT):
            for _ndif_i in range(layer):
                model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.model.layers[layer].output[:, -1] = clean[layer]
            diffs.append(model.lm_head.output[0, -1, target].item())
```

## Fix safety
Safe: a skipped layer returns exactly the tensor the caching trace computed for the
same input, so every later layer sees the same values, bit for bit. Applied only when
the trace's input does not depend on the loop, the loop runs traces (not generation)
without arguments that change the forward pass, and the trace body reads or writes
only the patched layer (its ``.output``; its ``.input`` is read-only, because that is
the cached output of the layer before), modules after every layer (``lm_head``, the
final norm, ``model.output.logits``) and nothing before the patched layer — no
embeddings, no earlier layer, no weights, no in-place change of a cached value. It is
not applied when the saved layer evaluations would not pay for the caching trace.
Forward passes go up by one (the caching trace, cut short); layer evaluations go down.
"""

from __future__ import annotations

import functools

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import collect
from ndif_opt.analysis.regions import constant_break, int_value, iterable_length, jumps_of_loop
from ndif_opt.cost.model_registry import dims_for
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.passes.common.sweeps import (
    HARMLESS_TRACE_KWARGS,
    Accesses,
    Sweep,
    TakenNames,
    Tally,
    calls_in,
    derived_names,
    find_sweeps,
    fresh_name,
    in_place_changes,
    index_of,
    input_dependence,
    int_sequence,
    introduce,
    module_accesses,
    nonnegative_ints,
    range_args,
    split_leading,
    tally,
)
from ndif_opt.syntax.expressions import root_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import SuitePlan, dotted_expression
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.wording import tense

CACHE = "_ndif_cache"
# what a candidate loop does, said of loops that patch a layer and of loops that only read one
RECOMPUTED = "every iteration of this loop recomputes the same layers before the first layer it reads or patches"


class SkipInsertion(Pass):
    __doc__ = __doc__
    fix_safety = "safe, exact"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        taken = TakenNames(context.run.reserved_names)
        for sweep in find_sweeps(facts):
            trips = sweep.trips(facts)
            if trips is not None and trips < 2:
                continue
            found = _analyse(sweep, facts)
            if found is None:
                continue
            if isinstance(found, str):
                context.skipped(
                    sweep.loop,
                    RECOMPUTED,
                    f"no `.skip()` inserted: {found}",
                )
                continue
            layers, index, stop = found
            saving = _layer_evaluations(sweep, index, stop, facts)
            counts = tally(sweep, facts, context.options)  # over the script, as the cost table counts
            if saving is not None and saving[0] - saving[1] < max(2, saving[2] / 4):
                context.skipped(
                    sweep.loop,
                    RECOMPUTED,
                    f"no `.skip()` inserted: caching would not pay off "
                    f"({counts.labelled('layer evaluations', saving[0], saving[1], tail=False)}, plus "
                    f"{counts.count(1, 'forward pass')})",
                )
                continue
            names = tuple(fresh_name(base, facts, taken) for base in (CACHE, "_ndif_i", "_ndif_tracer"))
            taken.update(names)
            introduce(context, *names)  # the loop counter and the tracer too: module names when at top level
            self._plan(sweep, layers, index, stop, names, plan, facts)
            context.applied(sweep.loop, _message(sweep, index, facts, saving, counts))
        return plan.apply(module, facts) if plan else module

    def _plan(self, sweep: Sweep, layers: str, index, stop: str, names, plan: SuitePlan, facts: Facts) -> None:
        prompt = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in sweep.block.call.args]
        create, cache_trace, skip = new_statements(sweep.model, prompt, layers, stop, code_of(index), names)
        created = [create, cache_trace]
        blanks, comments = split_leading(sweep.loop.leading_lines)
        note = cst.EmptyLine(comment=cst.Comment(f"# layers before the {_touched(sweep, facts)} one are the "
                                                 "same in every iteration: compute them once"))
        created[0] = created[0].with_changes(leading_lines=blanks + [note])

        def before(stmts):
            # the loop as rewritten inside (its trace body gains the skips)
            return created + [stmts[0].with_changes(leading_lines=comments)]

        plan.replace(sweep.info.suite, sweep.info.index, sweep.info.index + 1, before)
        body = sweep.block.node.body
        plan.replace(body, 0, 0, lambda _stmts: [skip])


def new_statements(model: str, prompt: list[str], layers: str, stop: str, index: str, names):
    """The statements of this code (``names``: cache, i, tracer; ``prompt``: the code of
    the trace's arguments), the first two before the loop, the last at the start of its
    trace::

        cache = list()
        with <model>.trace(<prompt>) as tracer:
            for i in range(<stop>):
                cache.append(<layers>[i].output)
            tracer.stop()

        for i in range(<index>):
            <layers>[i].skip(cache[i])

    Built, not parsed: a parse costs ~10 µs a node, a build a fraction of it. Only the
    script's own code is parsed, when it is more than a name or a number, inside the
    same brackets (the layers, a primary expression, on their own): the nodes are those
    the parse of the code gives (tests/passes/skip_insertion/ checks it). Code that spans lines
    is parsed in place, as its whitespace depends on the indentation around it.

    The statements are shared: those of the windows of a long file that cache the same
    layers under the same names are the same nodes (immutable), and so are the answers
    kept by node about them (their code, their names)."""
    return _new_statements(model, tuple(prompt), layers, stop, index, tuple(names))


@functools.lru_cache(maxsize=256)
def _new_statements(model: str, prompt: tuple[str, ...], layers: str, stop: str, index: str, names):
    cache, i, tracer = names
    if any("\n" in code or "\r" in code for code in (model, *prompt, layers, stop, index)):
        return _parsed_new_statements(model, ", ".join(prompt), layers, stop, index, names)

    def item(of: cst.BaseExpression) -> cst.Subscript:  # `<of>[i]`
        return cst.Subscript(value=of, slice=[cst.SubscriptElement(slice=cst.Index(cst.Name(i)))])

    def method_call(owner: cst.BaseExpression, method: str, *args: cst.BaseExpression) -> cst.Call:
        return cst.Call(func=cst.Attribute(value=owner, attr=cst.Name(method)), args=[cst.Arg(a) for a in args])

    def line(expr: cst.BaseExpression) -> cst.SimpleStatementLine:
        return cst.SimpleStatementLine(body=[cst.Expr(expr)])

    def loop(stop: str, body: cst.BaseExpression) -> cst.For:  # `for i in range(<stop>):`
        plain = _plain_expression(stop)
        over = cst.parse_expression(f"range({stop})") if plain is None else cst.Call(func=cst.Name("range"), args=[cst.Arg(plain)])
        return cst.For(target=cst.Name(i), iter=over, body=cst.IndentedBlock(body=[line(body)]))

    def layer_list() -> cst.BaseExpression:
        return _plain_expression(layers) or cst.parse_expression(layers)

    create = cst.SimpleStatementLine(
        body=[cst.Assign(targets=[cst.AssignTarget(target=cst.Name(cache))], value=cst.Call(func=cst.Name("list")))]
    )
    fill = loop(stop, method_call(cst.Name(cache), "append", cst.Attribute(value=item(layer_list()), attr=cst.Name("output"))))
    cache_trace = cst.With(
        items=[cst.WithItem(item=_trace_call(model, prompt), asname=cst.AsName(name=cst.Name(tracer)))],
        body=cst.IndentedBlock(body=[fill, line(method_call(cst.Name(tracer), "stop"))]),
    )
    skips = loop(index, method_call(item(layer_list()), "skip", item(cst.Name(cache))))
    return create, cache_trace, skips


def _trace_call(model: str, prompt: list[str]) -> cst.Call:
    """`<model>.trace(<prompt>)`, the arguments separated by ", "."""
    receiver = _plain_expression(model)
    values = [_plain_expression(code) for code in prompt]
    if receiver is None or None in values:
        return cst.parse_expression(f"{model}.trace({', '.join(prompt)})")
    after = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    args = [cst.Arg(value, comma=after) for value in values[:-1]] + [cst.Arg(v) for v in values[-1:]]
    return cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name("trace")), args=args)


def _plain_expression(code: str) -> cst.BaseExpression | None:
    """What ``code`` parses to when it is a name, a dotted name or a decimal integer."""
    if code.isascii() and code.isdigit() and (code == "0" or code[0] != "0"):
        return cst.Integer(code)
    return dotted_expression(code)


def _parsed_new_statements(model: str, prompt: str, layers: str, stop: str, index: str, names):
    cache, i, tracer = names
    cache_code = (
        f"{cache} = list()\n"
        f"with {model}.trace({prompt}) as {tracer}:\n"
        f"    for {i} in range({stop}):\n"
        f"        {cache}.append({layers}[{i}].output)\n"
        f"    {tracer}.stop()\n"
    )
    skip_code = f"for {i} in range({index}):\n    {layers}[{i}].skip({cache}[{i}])\n"
    return (*cst.parse_module(cache_code).body, cst.parse_statement(skip_code))


def _analyse(sweep: Sweep, facts: Facts):
    """None (not a candidate), a reason (a candidate that cannot be changed), or the
    layer list's code, the patched index and the code of how many layers to cache."""
    if sweep.block.method != "trace":
        return None
    call = sweep.block.call
    if not any(a.keyword is None and not a.star for a in call.args):
        return None
    if input_dependence(sweep, facts):
        return None
    moved = sweep.moved
    accesses = module_accesses(moved, facts)
    if any(_is_ours(s) for s in accesses.skips):
        return None
    layer_accesses = [a for a in accesses.found if a.layers is not None]
    if not layer_accesses:
        return None
    first = layer_accesses[0]
    layers, index = first.layers, first.index
    if all(int_value(access.index, facts) == 0 for access in layer_accesses):
        return None  # it touches only the first layer: no layer before it is recomputed
    reason = _trace_problem(sweep, facts)
    if reason:
        return reason
    if accesses.unknown:
        return accesses.unknown_reason(sweep.model)
    if accesses.skips:
        return "the trace already skips modules"
    if accesses.model_writes:
        return f"the loop changes the model (`{code_of(accesses.model_writes[0])}`)"
    for access in accesses.found:
        if access.layers is not None:
            if access.layers != layers or code_of(access.index) != code_of(index):
                return (
                    f"it reads or writes `{access.code}` as well as `{first.code}`: ndif-opt inserts a skip "
                    "only where every intervention of the trace is at the patched layer"
                )
            if access.write and access.kind != "output":
                return (
                    f"it writes to `{access.code}`, which is the cached output of the layer "
                    "before"
                )
        elif not access.after_layers:
            return f"it intervenes at `{access.code}`, before the patched layer"
        elif isinstance(access.envoy, cst.Name) and not _followed_by_logits(access, moved, facts):
            return (
                f"it reads `{access.code}` as a whole, which includes per-layer state the "
                "skipped layers would not fill; read `.logits`"
            )
    problem = _in_place_on_cache(moved, facts, accesses) or _early_stop(sweep, facts)
    if problem:
        return problem
    if isinstance(index, cst.Name) and index.value in sweep.targets:
        sequence = _layer_sequence(sweep, index)
        if sequence is None:
            return "the loop has more than one loop variable"
        if not nonnegative_ints(sequence, facts):
            return (f"ndif-opt cannot tell before running that the layer numbers in `{code_of(sequence)}` are "
                    "all 0 or more (a negative one counts from the last layer: the cached prefix would be the "
                    "wrong one)")
        args = range_args(sequence)
        if args is not None and (len(args) < 3 or (int_value(args[2], facts) or 0) > 0):
            stop = code_of(args[0] if len(args) == 1 else args[1])  # (an increasing range stays below it)
        else:
            # (items not known to be there: none, no layer to cache, where `max` would raise)
            default = "" if int_sequence(sequence, facts) else ", default=0"
            stop = f"max({code_of(sequence)}{default})"
        return layers, index, stop
    if set(collect(index).reads) & sweep.bound:
        return f"the patched layer `{code_of(index)}` changes in a way ndif-opt cannot follow"
    value = int_value(index, facts)
    if value is None or value < 1:
        return f"the patched layer `{code_of(index)}` is not known to have layers before it"
    return layers, index, code_of(index)


def _trace_problem(sweep: Sweep, facts: Facts) -> str:
    for arg in sweep.trace_arguments:
        if arg.star:
            return "the trace takes `*args`/`**kwargs`"
        if arg.keyword is not None and arg.keyword.value not in HARMLESS_TRACE_KWARGS:
            return f"the trace takes `{arg.keyword.value}=`, which may need every layer"
    for call in calls_in(sweep.moved):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("invoke", "backward"):
            return f"the trace calls `.{call.func.attr.value}()`"
    return ""


def _early_stop(sweep: Sweep, facts: Facts) -> str:
    """The caching trace runs every layer the loop would read, before the loop: where the
    loop may stop early on what its traces return (`break`, `return`), it would pay for
    layers of iterations that never run (a loop that stops at its first layer would make
    two forward passes instead of one). A `break` at an item known before running is not
    such a stop."""
    loop = sweep.loop
    if "break" in jumps_of_loop(loop.body) and constant_break(loop, facts) is None:
        jump = "break"
    elif find_nodes(loop.body, lambda n: type(n) is cst.Return):
        jump = "return"
    else:
        return ""
    return (f"the loop may stop early (`{jump}`): the caching trace would compute, before the loop, every "
            "layer the loop reads, also for iterations that never run")


def _in_place_on_cache(moved, facts: Facts, accesses) -> str:
    """An in-place change of a module's input (a cached value) or of the model."""
    inputs = [a for a in accesses.found if a.kind != "output"]
    derived = derived_names(moved, Accesses(found=inputs))
    for change in in_place_changes(moved):
        code, root = code_of(change.target), root_name(change.target)
        if change.kind == "method":
            if root is not None and (root in derived or facts.is_model_like(root)):
                return f"it changes `{code}` in place"
        elif change.kind == "augmented" and root in derived:
            return f"it changes `{code}` in place, a cached value"
        elif change.kind == "write" and root in derived:
            return f"it writes into `{code}`, a cached value"
    return ""


def _followed_by_logits(access, moved, facts: Facts) -> bool:
    """Every use of `model.output` in ``moved`` is `model.output.logits`."""
    total = used = 0
    for node in moved:
        for n in index_of(node).nodes:
            if isinstance(n, cst.Attribute):
                if n.attr.value == "output" and code_of(n) == access.code:
                    total += 1
                if n.attr.value == "logits" and code_of(n.value) == access.code:
                    used += 1
    return total == used


def _is_ours(call: cst.Call) -> bool:
    return any(code_of(a.value).startswith(CACHE) for a in call.args)


def _layer_sequence(sweep: Sweep, index: cst.Name) -> cst.BaseExpression | None:
    """The sequence whose items the loop variable ``index`` takes (None: another target of
    the header, as `i` of `for i, layer in enumerate(LAYERS)`)."""
    walked = sweep.walked
    return walked[1] if walked is not None and walked[0] == index.value else None


def _indices(sweep: Sweep, index, facts: Facts) -> list[int] | None:
    """The patched layer of every iteration that runs the trace, when known statically
    (up to a `break` that stops the loop at an item known before running)."""
    indices = _all_indices(sweep, index, facts)
    stop = constant_break(sweep.loop, facts)
    if indices is None or stop is None:
        return indices
    item, where = stop
    return indices[: item + (0 if where < sweep.position else 1)]


def _all_indices(sweep: Sweep, index, facts: Facts) -> list[int] | None:
    if isinstance(index, cst.Name) and index.value in sweep.targets:
        sequence = _layer_sequence(sweep, index)
        if sequence is None:
            return None
        args = range_args(sequence)
        if args is not None:
            values = [int_value(a, facts) for a in args]
            return None if any(v is None for v in values) else list(range(*values))
        return int_sequence(sequence, facts)
    value = int_value(index, facts)
    trips = iterable_length(sweep.loop.iter, facts)
    return None if value is None or trips is None else [value] * trips


def _layer_evaluations(sweep: Sweep, index, stop: str, facts: Facts) -> tuple[int, int, int] | None:
    """Layer evaluations of the loop before and after, and the model's layer count,
    when known statically. The caching trace evaluates the layers it keeps, then stops."""
    info = facts.models.get(sweep.model)
    dims = dims_for(info.repo_id if info is not None and info.repo_id else sweep.model)
    indices = _indices(sweep, index, facts)
    if not dims.known or not indices:
        return None
    n = dims.n_layers
    kept = _stop_value(sweep, index, facts)
    cached = min(n, kept if kept is not None else max(indices))
    return len(indices) * n, cached + sum(n - min(i, n) for i in indices), n


def _stop_value(sweep: Sweep, index, facts: Facts) -> int | None:
    if isinstance(index, cst.Name) and index.value in sweep.targets:
        sequence = _layer_sequence(sweep, index)
        if sequence is None:
            return None
        args = range_args(sequence)
        if args is not None:
            return int_value(args[0] if len(args) == 1 else args[1], facts)
        values = int_sequence(sequence, facts)
        return max(values) if values else None
    return int_value(index, facts)


def _touched(sweep: Sweep, facts: Facts) -> str:
    """What each iteration does at its layer, in the comment the rewrite adds."""
    return "patched" if any(access.write for access in module_accesses(sweep.moved, facts).found) else "read"


def _message(sweep: Sweep, index, facts: Facts, saving, counts: Tally) -> str:
    """Its counts over the script, as the cost table counts them (``counts``)."""
    trips = sweep.trips(facts)
    passes = (
        f"{counts.labelled('forward passes', trips, trips + 1, tail=False)}, the extra one cut short"
        if trips is not None
        else "one more forward pass, cut short"
    )
    text = (
        f"layers before `{code_of(index)}` {tense('are', 'would be')} computed once in a caching trace and "
        "skipped in every iteration"
    )
    if saving is not None:
        text += f": {counts.labelled('layer evaluations', saving[0], saving[1], tail=False)}"
    return f"{text} ({passes}){counts.tail(*(saving[:2] if saving else ()), *((trips,) if trips else ()))}"


SkipInsertion.cases = (
    Case(
        name="activation patching layer by layer",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CORRUPT = "The Colosseum is in the city of"
with model.session(remote=True):
    with model.trace("The Eiffel Tower is in the city of"):
        clean = [model.transformer.h[i].output[:, -1] for i in range(12)]
    diffs = list().save()
    # patch one layer at a time
    for layer in range(12):
        with model.trace(CORRUPT):
            model.transformer.h[layer].output[:, -1] = clean[layer]
            logits = model.lm_head.output
        diffs.append(logits[0, -1].max().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CORRUPT = "The Colosseum is in the city of"
with model.session(remote=True):
    with model.trace("The Eiffel Tower is in the city of"):
        clean = [model.transformer.h[i].output[:, -1] for i in range(12)]
    diffs = list().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace(CORRUPT) as _ndif_tracer:
        for _ndif_i in range(12):
            _ndif_cache.append(model.transformer.h[_ndif_i].output)
        _ndif_tracer.stop()
    # patch one layer at a time
    for layer in range(12):
        with model.trace(CORRUPT):
            for _ndif_i in range(layer):
                model.transformer.h[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.transformer.h[layer].output[:, -1] = clean[layer]
            logits = model.lm_head.output
        diffs.append(logits[0, -1].max().item())
""",
    ),
    Case(
        name="steering sweep at a fixed layer",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
LAYER = 16
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[LAYER].output.mean(dim=1)
    scores = dict().save()
    for alpha in [1.0, 2.0, 4.0, 8.0]:
        with model.trace("I think this movie is"):
            model.model.layers[LAYER].output = model.model.layers[LAYER].output + alpha * steer
            scores[alpha] = model.lm_head.output[0, -1].softmax(dim=-1).max().item()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
LAYER = 16
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[LAYER].output.mean(dim=1)
    scores = dict().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace("I think this movie is") as _ndif_tracer:
        for _ndif_i in range(LAYER):
            _ndif_cache.append(model.model.layers[_ndif_i].output)
        _ndif_tracer.stop()
    for alpha in [1.0, 2.0, 4.0, 8.0]:
        with model.trace("I think this movie is"):
            for _ndif_i in range(LAYER):
                model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.model.layers[LAYER].output = model.model.layers[LAYER].output + alpha * steer
            scores[alpha] = model.lm_head.output[0, -1].softmax(dim=-1).max().item()
""",
    ),
    Case(
        name="layers listed from a range",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
SWEEP = list(range(4, 12))
with model.session(remote=True):
    drops = dict().save()
    for layer in SWEEP:
        with model.trace("The Eiffel Tower is in"):
            model.transformer.h[layer].mlp.output[:] = 0
            drops[layer] = model.lm_head.output[0, -1].max().item()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
SWEEP = list(range(4, 12))
with model.session(remote=True):
    drops = dict().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace("The Eiffel Tower is in") as _ndif_tracer:
        for _ndif_i in range(max(SWEEP, default=0)):
            _ndif_cache.append(model.transformer.h[_ndif_i].output)
        _ndif_tracer.stop()
    for layer in SWEEP:
        with model.trace("The Eiffel Tower is in"):
            for _ndif_i in range(layer):
                model.transformer.h[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.transformer.h[layer].mlp.output[:] = 0
            drops[layer] = model.lm_head.output[0, -1].max().item()
""",
    ),
    Case(
        name="intervention before the patched layer",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    diffs = list().save()
    for layer in range(12):
        with model.trace("hello world"):
            model.transformer.wte.output[:] = 0
            model.transformer.h[layer].output[:, -1] = 0
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
        reason="before the patched layer",
    ),
    Case(
        name="an earlier layer read in every iteration",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    diffs = list().save()
    for layer in range(1, 12):
        with model.trace("hello world"):
            base = model.transformer.h[0].output[:, -1]
            model.transformer.h[layer].output[:, -1] = base
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
        reason="every intervention of the trace is at the patched layer",
    ),
    Case(
        name="writing the patched layer's input would change a cached value",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    diffs = list().save()
    for layer in range(12):
        with model.trace("hello world"):
            model.transformer.h[layer].input[:, -1] = 0
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
        reason="the cached output of the layer before",
    ),
    Case(
        name="a different input in every iteration",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    diffs = list().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            model.transformer.h[6].output[:, -1] = 0
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
    ),
    Case(
        name="a loop that may stop at its first layer",
        before="""\
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("One, two, three,"):
        final = model.lm_head.output[0, -1].argmax()
    first = None
    for layer in range(12):
        with model.trace("One, two, three,"):
            h = model.transformer.h[layer].output
            pred = model.lm_head(model.transformer.ln_f(h))[0, -1].argmax()
        if pred.item() == final.item():  # the caching trace would run every layer first
            first = layer
            break
    first = nnsight.save(first)
""",
        reason="the loop may stop early (`break`)",
    ),
    Case(
        name="the first layer patched: no layer before it is recomputed",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    effects = list().save()
    for head in range(12):
        with model.trace("hello world"):
            model.transformer.h[0].attn.c_proj.input[:, :, head * 64:(head + 1) * 64] = 0
            effects.append(model.lm_head.output[0, -1].max().item())
""",
    ),
    Case(
        name="too few iterations to pay for the cache",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    diffs = list().save()
    for layer in [1, 2]:
        with model.trace("hello world"):
            model.transformer.h[layer].output[:, -1] = 0
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
        reason="would not pay off",
    ),
    Case(
        name="layers chosen at run time, which may count from the last",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
chosen = [int(x) for x in open("layers.txt").read().split()]
with model.session(remote=True):
    diffs = list().save()
    for layer in chosen:
        with model.trace("hello world"):
            model.transformer.h[layer].output[:, -1] = 0
            diffs.append(model.lm_head.output[0, -1].max().item())
""",
        reason="are all 0 or more",
    ),
)

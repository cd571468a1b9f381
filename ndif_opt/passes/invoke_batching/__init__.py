"""invoke-batching: the iterations of a loop of traces as invokes of one trace.

## What it does
Inside a session, a loop whose iterations each run one trace of the model — a prompt
loop, a steering-coefficient sweep, a patching sweep — becomes one
``with model.trace() as tracer:`` with the loop inside and each iteration's trace turned
into ``with tracer.invoke(<its input>):``. The statements of the loop body that the
input depends on (building the prompt, tokenizing it, taking a dataset row: found by
def-use, transitively) run before the invoke, in the loop; the rest of the body around
the trace (``results[p] = logits[0, -1].argmax().item()``) moves into the invoke with
it. A loop of ``.generate()`` calls becomes one ``model.generate(<its keywords>)`` with
an invoke per prompt. Loops longer than ``max-batch`` (32 by default), or of unknown
length, run in chunks of that many invokes.

## Why is this bad?
Every trace is a forward pass with a batch of one. Invokes of one trace run as one
batched forward pass: eight prompts cost about as much as one on a GPU.

## Example
```python
with model.session(remote=True):
    top = dict().save()
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
```

## Use instead
```python
with model.session(remote=True):
    top = dict().save()
    with model.trace() as tracer:
        for prompt in PROMPTS:
            with tracer.invoke(prompt):
                logits = model.lm_head.output
                top[prompt] = logits[0, -1].argmax().item()
```

## Fix safety
Unsafe, applied only with ``--unsafe-fixes``: a batched forward pass pads prompts on the
left and uses batched kernels, so results differ in the last bits (measured up to
~4e-7 in fp32, ~4e-3 in bf16). The invokes' inputs are all computed while the trace
runs the loop, before any invoke body (measured on nnsight 0.8.1: each invoke still sees
its own iteration's values), so it is not applied when the input, or a statement it
depends on, needs what the trace or the code after it sets or changes (a prompt grown
from the last answer, a list of prompts the loop appends to). Nor when an iteration uses
a value an earlier iteration computed (other than filling a list or dict), reads inside
the invoke a container the loop fills, changes the model or an object the iterations
share, uses ``.skip()``, fills a container before its last module read (the invokes
would fill it in the model's order, not the loop's), binds a name read after the loop
(only one invoke's value would be left), or — when the inputs differ — reads token
positions counted from the start, a slice or reduction over positions, or otherwise
keeps padded positions (saving, storing or passing a whole activation). An invoke sees
its own rows at the padded length (measured), so sizes other than the token count
(``h.shape[-1]``, ``h.size(0)``, ``h.dtype``) are read as they were, and the token count
(``print(h.shape)``, ``h.shape[1]``) is refused. A module reached through constants
(``layers = CONFIG["layers"]``, ``layers[CONFIG["layer"]]``) is that module. A generation
is batched when its keywords do not change with the loop, it does not sample, and its
tokens are read only by their last ``k <= max_new_tokens`` positions of a generation of
full length (``min_new_tokens`` at least ``max_new_tokens``): measured, a generation that
stops early at an end-of-sequence token is padded after it in a batch, so its last
tokens differ. (Without ``do_sample=`` the model's generation config decides; one that
samples draws other random numbers batched, as a rerun of the loop would.) Loops that
only read layers of the same input are left to trace-fusion, which is exact.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.releases import NNSIGHT_06
from ndif_opt.cost_model import tokens_generated_in
from ndif_opt.passes.base import Context, Pass
from ndif_opt.passes.common.sweeps import (
    Sweep,
    TakenNames,
    find_sweeps,
    fresh_name,
    fusion_problem,
    input_dependence,
    introduce,
    module_accesses,
    moved_names,
    passes_text,
    tally,
    walked_trips,
    structure_problem,
)
from ndif_opt.passes.invoke_batching.cases import CASES
from ndif_opt.passes.invoke_batching.iterations import (
    carried_problem,
    fill_order,
    input_problem,
    is_skip_insertion,
    iteration_split,
    live_after,
    saved_names_in,
    shared_objects,
)
from ndif_opt.passes.invoke_batching.padding import Generation, Padding
from ndif_opt.passes.invoke_batching.rewrite import batched_loop
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import SuitePlan
from ndif_opt.types import Safety
from ndif_opt.wording import counted, per, tense


UNSAFE_REASON = (
    "batching changes results in the last bits (left padding and batched kernels: "
    "~1e-7 in fp32, ~1e-3 in bf16); use --unsafe-fixes to accept"
)


# measured on nnsight 0.6.3 (tests/nnterp_env): examples/batched_prompts.py, batched, gives other values
NOT_ON_06 = (
    "on nnsight 0.6 (the release nnterp 1.3.0 needs) invokes of one trace do not each read their own row "
    "as on 0.8: batched, the same read-out gives other values"
)


class InvokeBatching(Pass):
    __doc__ = __doc__
    fix_safety = "unsafe (batching changes floats by ~1e-7)"
    float_tolerance = (1e-5, 1e-5)  # ~1e-7 measured in float32 (left padding, batched kernels)
    cases = CASES

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        taken = TakenNames(context.run.reserved_names)
        batch = max(1, int(context.options.max_batch))
        for sweep in find_sweeps(facts):
            if not fusion_problem(sweep, facts)[0]:
                continue  # trace-fusion makes it one forward pass, exactly
            trips = sweep.trips(facts)
            if trips is not None and trips < 2:
                continue
            found = _problem(sweep, facts, context.options.unsafe_fixes)
            if found is None:
                continue
            problem, unsaved = found
            counts = tally(sweep, facts, context.options)  # over the script, as the cost table counts
            # a generate runs a forward pass per token, batched or not (as the cost table counts)
            steps = tokens_generated_in(sweep.block, facts) or 1
            # what runs (an iteration a `continue` ends before the trace runs no forward pass)
            walked = walked_trips(sweep, facts, context.options)
            shown = walked if walked is not None else trips
            if shown is None:  # "one forward pass per iteration → one per 32 iterations"
                before, after = passes_text(trips), _after(trips, batch)
                if steps > 1:
                    before = f"{steps} forward passes per iteration (a generate of {steps} tokens)"
                    after = f"{steps} per {per(batch, 'iteration').removeprefix('one per ')} (--max-batch {batch})"
                change = f"{before} → {after}"
            else:
                each = ", one per iteration" if steps == 1 else \
                    f", {steps} per iteration (a generate of {steps} tokens)"
                if trips is not None and shown != trips:
                    each = f" in its {counted(trips, 'iteration')}" + (f" (a generate of {steps} tokens each)"
                                                                        if steps > 1 else "")
                before = counts.count(shown * steps, "forward pass") + each
                after = counts.number(_batches(shown, batch) * steps)
                change = counts.change(shown * steps, _batches(shown, batch) * steps, "forward pass")
            message = f"this loop runs {before}; as invokes of one trace it would run {after}"
            if problem:
                context.skipped(sweep.loop, message, f"not batched: {problem}")
                continue
            if context.run.release == NNSIGHT_06:
                context.skipped(sweep.loop, message, f"not batched: {NOT_ON_06}")
                continue
            if not context.options.unsafe_fixes:
                context.needs_unsafe(sweep.loop, message, UNSAFE_REASON)
                continue
            chunked = trips is None or trips > batch
            tracer = fresh_name("tracer", facts, taken)
            taken.update([tracer])  # the other two are not given out yet when asked for
            names = [tracer]
            if chunked:
                names += [fresh_name(n, facts, taken) for n in ("_ndif_items", "_ndif_start")]
                introduce(context, *names[1:])
            taken.update(names)
            plan.replace(
                sweep.info.suite,
                sweep.info.index,
                sweep.info.index + 1,
                batched_loop(sweep, names, batch if chunked else None, unsaved, facts),
            )
            context.unreturned |= unsaved
            text = f"the iterations of this loop {tense('now run', 'would run')} as invokes of one trace: {change}"
            if chunked:
                text += f" (in chunks of {counted(batch, 'invoke')})"
            context.applied(sweep.loop, text, Safety.UNSAFE)
        return plan.apply(module, facts) if plan else module


def _after(trips: int | None, batch: int) -> str:
    if trips is None:  # the 32 is a setting the reader did not choose: name it
        return f"{per(batch, 'iteration')} (--max-batch {batch})"
    return str(_batches(trips, batch))


def _batches(trips: int, batch: int) -> int:
    """The traces of ``trips`` iterations as invokes, ``batch`` a trace."""
    return -(-trips // batch)


def _problem(sweep: Sweep, facts: Facts, unsafe: bool):
    """None when the loop is no candidate; else (why it cannot be batched or "", the
    saved names to stop saving)."""
    if not any(a.keyword is None and not a.star for a in sweep.block.call.args):
        return None  # already invokes of one trace
    problem = structure_problem(sweep, facts)
    if problem:
        return problem, set()
    generation = None
    if sweep.block.method == "generate":
        generation = Generation(sweep, facts)
        if generation.problem:
            return generation.problem, set()
    else:
        keywords = [a.keyword.value for a in sweep.trace_arguments if a.keyword is not None]
        if keywords:
            return f"the trace takes `{keywords[0]}=`, which an invoke does not", set()
    moved = sweep.moved
    accesses = module_accesses(moved, facts)
    # skip-insertion cached this loop's prefix in an earlier round: the skips are never
    # batched, but the loop's own reasons still hold or not, and are reported either way
    cached_prefix = any(is_skip_insertion(call) for call in accesses.skips)
    if accesses.skips and not cached_prefix:
        return "each iteration skips modules, and a batched `.skip()` must cover every invoke", set()
    if accesses.model_writes:
        return f"the loop changes the model (`{code_of(accesses.model_writes[0])}`), which every invoke shares", set()
    if accesses.unknown:
        return accesses.unknown_reason(sweep.model), set()
    if not accesses.found:
        return None
    if facts.grows_its_iterable(sweep.loop):
        return (f"the loop adds to `{code_of(sweep.loop.iter)}`, the list it walks: batched, the invokes would "
                "be the items it holds before the loop"), set()
    problem = (
        carried_problem(sweep, facts)
        or input_problem(sweep, facts)
        or shared_objects(sweep, facts)
        or fill_order(sweep, facts)
    )
    if problem:
        return problem, set()
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    read_later = sorted(live_after(sweep, facts, bound))
    if read_later:
        return (
            f"`{read_later[0]}` is read after the loop: batched, it would hold one invoke's "
            "value only",
            set(),
        )
    if input_dependence(sweep, facts) or generation is not None:
        problem = Padding(facts, generation).check(iteration_split(sweep, facts).invoked)
        if problem:
            if not input_dependence(sweep, facts):  # the generated tokens only
                return f"batched, each invoke's generated tokens are padded: it {problem}", set()
            return f"the inputs differ in length and each invoke sees left-padded rows: it {problem}", set()
    if cached_prefix:
        # batching the original loop would save more than the cache does: offered without
        # --unsafe-fixes; with them the batching came first, so nothing is left to do here
        return None if unsafe else ("", set())
    # saved names nothing reads later: one invoke's value would come back, so stop saving
    return "", set(sweep.block.saved_names) | saved_names_in(sweep.pre + sweep.post)

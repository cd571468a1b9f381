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

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import collect, collect_all, exposed_reads
from ndif_opt.analysis.regions import int_value, reads_after, results_kept
from ndif_opt.analysis.releases import NNSIGHT_06
from ndif_opt.analysis.tensors import TENSOR_MODULES
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.passes.common.sweeps import (
    MODULE_VALUES,
    Sweep,
    TakenNames,
    find_sweeps,
    fresh_name,
    fusion_problem,
    in_place_changes,
    index_of,
    input_dependence,
    input_statements,
    introduce,
    model_envoy,
    module_accesses,
    moved_ahead,
    moved_names,
    passes_text,
    tally,
    structure_problem,
    with_leading,
)
from ndif_opt.syntax.expressions import dotted_name, root_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import DropElementSaves, SuitePlan, reindentable
from ndif_opt.syntax.walk import children
from ndif_opt.types import Safety
from ndif_opt.wording import counted, per, tense

# How a loop may fill a container made before it.
FILLING_METHODS = frozenset({"append", "extend", "update", "add", "insert"})
# Methods that act on every element alike: they keep padded positions where they are.
ELEMENTWISE = frozenset(
    {
        "clone", "detach", "cpu", "cuda", "to", "float", "half", "double", "bfloat16", "abs",
        "exp", "log", "sigmoid", "tanh", "relu", "neg", "contiguous", "sqrt", "square", "sign",
        "long", "int", "type",
    }
)
# Methods that are per position when taken over the last dimension.
LAST_DIM = frozenset({"softmax", "log_softmax", "argmax", "argmin"})
LAST_DIM_FUNCTIONS = frozenset(
    {
        "torch.softmax", "torch.log_softmax", "torch.argmax", "torch.argmin",
        "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
    }
)
# Attributes of a tensor that left padding does not change.
PADDING_FREE_ATTRIBUTES = frozenset({"ndim", "dtype", "device", "is_cuda", "requires_grad", "layout"})
TOKEN_COUNT = "in a batch it is the longest input's (each invoke sees its own rows, at the padded length)"
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

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        taken = TakenNames(context.options.reserved_names)
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
            if trips is None:  # "one forward pass per iteration → one per 32 iterations"
                before, after = passes_text(trips), _after(trips, batch)
                change = f"{before} → {after}"
            else:
                before = counts.count(trips, "forward pass") + ", one per iteration"
                after = counts.number(_batches(trips, batch))
                change = counts.change(trips, _batches(trips, batch), "forward pass")
            message = f"this loop runs {before}; as invokes of one trace it would run {after}"
            if problem:
                context.skipped(sweep.loop, message, f"not batched: {problem}")
                continue
            if context.options.nnsight == NNSIGHT_06:
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
                _batched(sweep, names, batch if chunked else None, unsaved, facts),
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
        generation = _Generation(sweep, facts)
        if generation.problem:
            return generation.problem, set()
    else:
        keywords = [a.keyword.value for a in sweep.block.call.args if a.keyword is not None]
        if keywords:
            return f"the trace takes `{keywords[0]}=`, which an invoke does not", set()
    moved = sweep.moved
    accesses = module_accesses(moved, facts)
    # skip-insertion cached this loop's prefix in an earlier round: the skips are never
    # batched, but the loop's own reasons still hold or not, and are reported either way
    cached_prefix = any(_is_skip_insertion(call) for call in accesses.skips)
    if accesses.skips and not cached_prefix:
        return "each iteration skips modules, and a batched `.skip()` must cover every invoke", set()
    if accesses.model_writes:
        return f"the loop changes the model (`{code_of(accesses.model_writes[0])}`), which every invoke shares", set()
    if accesses.unknown:
        return accesses.unknown_reason(sweep.model), set()
    if not accesses.found:
        return None
    problem = (
        _carried(sweep, facts)
        or _input_problem(sweep, facts)
        or _shared_objects(sweep, facts)
        or _fill_order(sweep, facts)
    )
    if problem:
        return problem, set()
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    read_later = sorted(_live_after(sweep, facts, bound))
    if read_later:
        return (
            f"`{read_later[0]}` is read after the loop: batched, it would hold one invoke's "
            "value only",
            set(),
        )
    if input_dependence(sweep, facts) or generation is not None:
        problem = _Padding(facts, generation).check(_split(sweep, facts).invoked)
        if problem:
            if not input_dependence(sweep, facts):  # the generated tokens only
                return f"batched, each invoke's generated tokens are padded: it {problem}", set()
            return f"the inputs differ in length and each invoke sees left-padded rows: it {problem}", set()
    if cached_prefix:
        # batching the original loop would save more than the cache does: offered without
        # --unsafe-fixes; with them the batching came first, so nothing is left to do here
        return None if unsafe else ("", set())
    # saved names nothing reads later: one invoke's value would come back, so stop saving
    return "", set(sweep.block.saved_names) | _saved_names(sweep.pre + sweep.post)


class _Generation:
    """A loop of `.generate()` calls as one generate of the batch: its keyword arguments
    go to that generate (``keywords``), so they must not change with the loop.

    Measured on nnsight 0.8.1 (tiny GPT-2 and Llama, greedy): in a batch each invoke's
    ``model.generator.output`` is its row left-padded to the longest prompt, and its last
    ``max_new_tokens`` tokens equal the separate generation's — unless a generation stops
    early at an end-of-sequence token: batched, its row goes on with padding after it,
    while alone it ends there, so its last tokens differ. So the generated tokens may be
    read by their last positions only when every generation has its full length
    (``min_new_tokens`` at least ``max_new_tokens``)."""

    def __init__(self, sweep: Sweep, facts: Facts) -> None:
        self.keywords = [a for a in sweep.block.call.args if a.keyword is not None]
        values = {a.keyword.value: a.value for a in self.keywords}
        self.problem = ""
        sampled = values.get("do_sample")
        if sampled is not None and not (isinstance(sampled, cst.Name) and sampled.value == "False"):
            self.problem = (
                f"it samples (`do_sample={code_of(sampled)}`): batched, the invokes would draw other "
                "random numbers"
            )
            return
        conflict = moved_ahead(list(values.values()), sweep.moved, varying=sweep.targets)
        if conflict is not None:
            name = next(k for k, v in values.items() if conflict.name in collect(v).reads)
            how = (
                "a loop variable" if conflict.name in sweep.targets
                else "which the loop body sets" if conflict.how == "bound"
                else "which the loop body changes"
            )
            self.problem = (
                f"the generation's `{name}=` reads `{conflict.name}`, {how}: one generate before "
                "the loop would take it for every invoke"
            )
            return
        self.max_new = int_value(values["max_new_tokens"], facts) if "max_new_tokens" in values else None
        least = int_value(values["min_new_tokens"], facts) if "min_new_tokens" in values else None
        self.full_length = self.max_new is not None and least is not None and least >= self.max_new

    def tokens_read(self, read: cst.CSTNode, count: int) -> None:
        """``read`` takes the last ``count`` generated positions (`out[0, -count:]`, or one
        of them, `out[0, -count]`)."""
        if self.max_new is None:
            raise _Refuse(
                f"reads `{code_of(read)}` of the generated tokens, and how many each invoke "
                "generates is not known (no constant `max_new_tokens=`)"
            )
        if count > self.max_new:
            raise _Refuse(
                f"reads `{code_of(read)}`, which reaches past the {self.max_new} generated tokens "
                "into the prompt's left-padded positions"
            )
        if not self.full_length:
            raise _Refuse(
                f"reads `{code_of(read)}` of the generated tokens, and a generation that stops "
                "early (end of sequence) is padded after it in a batch, so its last tokens "
                "differ (measured); with `min_new_tokens=` equal to `max_new_tokens=` it would be batched"
            )


def _live_after(sweep: Sweep, facts: Facts, names: set[str]) -> set[str]:
    """Which of ``names`` the code after the loop may read before binding them again.

    Follows every way execution can continue after the loop — the rest of its suite,
    then of each enclosing statement; around an enclosing loop also back to the start
    of its body — and flags a name read before it is bound again on that path. Inside
    a function, any later read counts, as in :func:`reads_after`."""
    later = reads_after(facts, sweep.info.suite, sweep.info.index + 1)
    candidates = {n for n in names if n in later}
    if not candidates:
        return set()
    for func in facts.functions.values():
        if set(collect(func.body).reads) & candidates:
            return candidates
    paths = _continuations(sweep.info, facts)
    if paths is None:
        return candidates
    # the script's results are read when it ends, after every path
    flagged: set[str] = candidates & results_kept(facts, sweep.info.suite, sweep.info.index + 1)
    for path in paths:
        flagged |= candidates & exposed_reads(path).keys()
    return flagged


def _continuations(info, facts: Facts):
    """The statement sequences that may run after ``info``'s statement (None inside
    a function or class)."""
    rest = list(info.suite.body[info.index + 1 :])
    if not info.ancestors:
        return [rest]
    owner = info.ancestors[-1]
    if isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
        return None
    outer = _continuations(facts.stmt(owner), facts)
    if outer is None:
        return None
    paths = [rest + path for path in outer]
    if isinstance(owner, (cst.For, cst.While)) and info.suite is owner.body:
        # the next iteration of the enclosing loop, up to this statement again
        paths.append(rest + list(owner.body.body[: info.index]))
    return paths


def _is_skip_insertion(call: cst.Call) -> bool:
    return any(code_of(a.value).startswith("_ndif_cache") for a in call.args)


def _saved_names(stmts) -> set[str]:
    from ndif_opt.analysis.facts import is_saved_expr

    found = set()
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and is_saved_expr(small.value):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            found.add(target.target.value)
    return found


# -- iterations must not feed each other ----------------------------------------------


def _carried(sweep: Sweep, facts: Facts) -> str:
    bound = moved_names(sweep, facts).binds
    for name in exposed_reads(sweep.moved):
        if name in bound and name not in sweep.targets:
            return (
                f"`{name}` is read before the iteration sets it: an earlier "
                "iteration's value would be used"
            )
    return ""


class _Split:
    """An iteration as batched: the statements before the trace that its arguments
    depend on run before ``with tracer.invoke(...)`` (``ahead``), in their order; the
    rest of the iteration runs inside it (``invoked``)."""

    def __init__(self, sweep: Sweep) -> None:
        chosen = set(input_statements(sweep))
        args = [a.value for a in sweep.block.call.args]
        if len(chosen) < len(sweep.pre) and moved_ahead(sweep.pre + args, sweep.inner + sweep.post) is None:
            # the code before the trace needs nothing the invokes do: it stays before
            # them, in loop order (a progress record, a counter), as the loop wrote it
            chosen = set(range(len(sweep.pre)))
        self.ahead = [s for i, s in enumerate(sweep.pre) if i in chosen]
        self.rest_of_pre = [s for i, s in enumerate(sweep.pre) if i not in chosen]
        self.invoked = self.rest_of_pre + sweep.inner + sweep.post


def _split(sweep: Sweep, facts: Facts) -> _Split:
    return facts.once_for("invoke-batching:split", sweep.loop, lambda _loop: _Split(sweep))


def _input_problem(sweep: Sweep, facts: Facts) -> str:
    """The invokes' inputs are all evaluated while the trace's body runs the loop, before
    any invoke body runs (measured on nnsight 0.8.1: code of the loop before an invoke
    runs then, in loop order, and each invoke sees its own iteration's values). So the
    input, and the statements it depends on, must not need what the invoke bodies do."""
    split = _split(sweep, facts)
    args = [a.value for a in sweep.block.call.args]
    conflict = moved_ahead(split.ahead + args, split.invoked)
    if conflict is None:
        return ""
    name = conflict.name
    if conflict.how == "changes":
        return (
            f"computing the trace's input changes `{name}`, which the rest of the iteration "
            "reads: batched, every iteration's input is computed before any invoke runs"
        )
    what = "sets" if conflict.how == "bound" else "changes"
    return (
        f"the trace's input depends on `{name}`, which the iteration {what} after its trace: "
        "batched, every iteration's input is computed before any invoke runs"
    )


def _shared_objects(sweep: Sweep, facts: Facts) -> str:
    """Objects made before the loop may only be filled (append, item assignment) inside
    the invokes. (The statements run before the invoke, in loop order, may use them:
    :func:`_input_problem` checks that the invokes do not.)"""
    moved = _split(sweep, facts).invoked
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    shared = [n for n in collect_all(moved).mutates if n not in bound and not facts.is_model_like(n)]
    found = [n for stmt in moved for n in index_of(stmt).nodes]
    # the receivers of filling calls and item assignments: `acts.append(...)`, `top[p] = ...`
    allowed: set[int] = set()
    for node in found:
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in FILLING_METHODS:
                if isinstance(func.value, cst.Name):
                    allowed.add(id(func.value))
        elif isinstance(node, cst.AssignTarget):
            target = node.target
            if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                allowed.add(id(target.value))
    uses = [node for node in found if isinstance(node, cst.Name)]
    for name in shared:
        for node in uses:
            if node.value == name and id(node) not in allowed:
                return (
                    f"it reads or changes `{name}`, which earlier iterations fill: batched, "
                    "the iterations would not see each other's changes in order"
                )
    for change in in_place_changes(moved):
        if change.kind == "method" and root_name(change.target) not in bound:
            return f"it changes `{code_of(change.target)}` in place, which every iteration shares"
        if change.kind == "gradient":
            return f"it calls `.{change.method}()`"
    return ""


def _fill_order(sweep: Sweep, facts: Facts) -> str:
    """Containers must be filled after the iteration's last module read, and that read
    must be the same module in every iteration: invokes waiting at one module are
    served in loop order."""
    moved = _split(sweep, facts).invoked
    bound = set(moved_names(sweep, facts).binds) | set(sweep.targets)
    shared = {n for n in collect_all(moved).mutates if n not in bound and not facts.is_model_like(n)}
    if not shared:
        return ""
    last_read = -1
    last_access = None
    for position, stmt in enumerate(moved):
        found = module_accesses([stmt], facts).found
        if found:
            last_read, last_access = position, found[-1]
    for position, stmt in enumerate(moved):
        filled = shared & set(collect(stmt).mutates)
        if filled and position < last_read:
            name = sorted(filled)[0]
            return (
                f"it fills `{name}` before its last module read: batched, the invokes would "
                "fill it in the model's order, not the loop's"
            )
    if last_access is not None:
        varying = set(collect(last_access.node).reads) & bound
        if varying:
            return (
                f"it fills `{sorted(shared)[0]}` after reading `{last_access.code}`, which "
                "changes with the loop: batched, the invokes would fill it in the model's "
                "order, not the loop's"
            )
    return ""


# -- left padding ------------------------------------------------------------------------


class _Refuse(Exception):
    pass


class _Padding:
    """Follows where a module value's token dimension is, and refuses any use that
    would see padded positions: a position counted from the start, a slice or a
    reduction over positions, or a whole activation leaving the invoke."""

    def __init__(self, facts: Facts, generation: _Generation | None = None) -> None:
        self.facts = facts
        self.generation = generation
        self.env: dict[str, int | None] = {}
        self.ndims: dict[str, int | None] = {}  # of the names in env, when known
        self.generated: set[str] = set()  # names holding generated tokens (or a part)

    def check(self, stmts) -> str:
        try:
            for stmt in stmts:
                self.statement(stmt)
        except _Refuse as refusal:
            return str(refusal)
        return ""

    # statements
    def statement(self, stmt: cst.BaseStatement) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                self.plain(item.item)
            self.suite(stmt.body)
        elif isinstance(stmt, cst.For):
            self.plain(stmt.iter)
            for name in collect(stmt.target).binds:
                self.env[name] = None
            self.suite(stmt.body)
        elif isinstance(stmt, (cst.If, cst.While)):
            self.plain(stmt.test)
            self.suite(stmt.body)
            orelse = stmt.orelse
            if isinstance(orelse, cst.If):
                self.statement(orelse)
            elif orelse is not None:
                self.suite(orelse.body)
        else:
            raise _Refuse(f"uses a `{type(stmt).__name__.lower()}` statement I cannot check")

    def suite(self, block) -> None:
        for stmt in getattr(block, "body", ()):
            if isinstance(stmt, cst.BaseStatement):
                self.statement(stmt)
            else:
                self.small(stmt)

    def small(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            state = self.value(small.value)
            for target in small.targets:
                self.assign(target.target, state)
                if isinstance(target.target, cst.Name):
                    self.ndims[target.target.value] = self.ndim(small.value) if state is not None else None
                    if state is not None and self._generated(small.value):
                        self.generated.add(target.target.value)
                    else:
                        self.generated.discard(target.target.value)
        elif isinstance(small, cst.AnnAssign):
            state = self.value(small.value) if small.value is not None else None
            self.assign(small.target, state)
        elif isinstance(small, cst.AugAssign):
            state = self.value(small.value)
            if isinstance(small.target, cst.Name):
                self.env[small.target.value] = self.combine(self.value(small.target), state, small)
            else:
                self.assign(small.target, state)
        elif isinstance(small, cst.Expr):
            self.value(small.value)
        elif isinstance(small, (cst.Pass, cst.Import, cst.ImportFrom)):
            return
        else:
            for child in children(small):
                if isinstance(child, cst.BaseExpression):
                    self.plain(child)

    def assign(self, target: cst.BaseExpression, state: int | None) -> None:
        if isinstance(target, cst.Name):
            self.env[target.value] = state
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            if state is not None:
                raise _Refuse("unpacks an activation")
            for element in target.elements:
                self.assign(element.value, None)
            return
        if self._writes_module(target):
            self.value(target)  # its positions are checked like a read
            return
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self.value(target.value)
        if isinstance(target, cst.Subscript):
            for element in target.slice:
                self._index_expressions(element)
        if state is not None:
            raise _Refuse(f"stores a whole activation in `{code_of(target)}`, padded positions included")

    def _writes_module(self, target: cst.BaseExpression) -> bool:
        expr = target
        while isinstance(expr, (cst.Subscript, cst.Attribute)):
            if isinstance(expr, cst.Attribute) and expr.attr.value in MODULE_VALUES:
                return True
            expr = expr.value
        return False

    # expressions: the position of the token dimension, or None for other values
    def plain(self, expr: cst.BaseExpression) -> None:
        if self.value(expr) is not None:
            raise _Refuse(f"uses `{code_of(expr)}`, an activation with padded positions, as a whole")

    def combine(self, a: int | None, b: int | None, node) -> int | None:
        if a is not None and b is not None and a != b:
            raise _Refuse(f"combines activations whose token positions differ in `{code_of(node)}`")
        return a if a is not None else b

    def value(self, expr: cst.BaseExpression) -> int | None:
        if isinstance(expr, cst.Name):
            return self.env.get(expr.value)
        if isinstance(expr, cst.Attribute):
            return self.attribute(expr)
        if isinstance(expr, cst.Subscript):
            return self.subscript(expr)
        if isinstance(expr, cst.Call):
            return self.call(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self.combine(self.value(expr.left), self.value(expr.right), expr)
        if isinstance(expr, cst.UnaryOperation):
            return self.value(expr.expression)
        if isinstance(expr, cst.Comparison):
            state = self.value(expr.left)
            for target in expr.comparisons:
                state = self.combine(state, self.value(target.comparator), expr)
            return state
        if isinstance(expr, (cst.BaseNumber, cst.SimpleString, cst.Ellipsis)):
            return None
        for child in children(expr):
            if isinstance(child, cst.BaseExpression):
                self.plain(child)
            else:
                self._children(child)
        return None

    def _children(self, node: cst.CSTNode) -> None:
        for child in children(node):
            if isinstance(child, cst.BaseExpression):
                self.plain(child)
            else:
                self._children(child)

    def attribute(self, expr: cst.Attribute) -> int | None:
        if expr.attr.value in MODULE_VALUES:
            envoy = model_envoy(expr.value, self.facts)
            if envoy is not None:
                self._index_expressions_of_envoy(expr.value)
                return self._layout(envoy, expr)
        base = self.value(expr.value)
        if base is None:
            return None
        if expr.attr.value in ("logits", "last_hidden_state"):
            return base
        if expr.attr.value in PADDING_FREE_ATTRIBUTES:
            return None
        if expr.attr.value == "shape":
            raise _Refuse(_token_count(expr))
        raise _Refuse(f"reads `{code_of(expr)}` of an activation with padded positions")

    def ndim(self, expr: cst.BaseExpression) -> int | None:
        """How many dimensions a value with a token dimension has, when known."""
        if isinstance(expr, cst.Name):
            return self.ndims.get(expr.value)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in ("output", "input"):
                envoy = model_envoy(expr.value, self.facts)
                if envoy is not None:
                    return 2 if self._generator(envoy) else 3  # as _layout
            if expr.attr.value in ("logits", "last_hidden_state"):
                return self.ndim(expr.value)
            return None
        if isinstance(expr, cst.Subscript):
            base = self.ndim(expr.value)
            if base is None:
                return None
            for element in expr.slice:
                if isinstance(element.slice, cst.Index):
                    index = element.slice.value
                    if element.slice.star is not None or isinstance(index, cst.Ellipsis):
                        return None
                    if isinstance(index, cst.Name) and index.value == "None":
                        base += 1
                    elif _int_literal(index) is not None:
                        base -= 1
                    else:
                        return None
            return base
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            name = expr.func.attr.value
            if name in ELEMENTWISE or name in ("softmax", "log_softmax"):
                return self.ndim(expr.func.value)
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)):
            parts = [expr.left, expr.right] if isinstance(expr, cst.BinaryOperation) else [expr.expression]
            known = [self.ndim(part) for part in parts if self.value(part) is not None]
            return known[0] if len(known) == 1 else None
        return None

    def dimension(self, of: cst.BaseExpression, index: cst.BaseExpression, read: cst.CSTNode) -> None:
        """``read`` takes the size of dimension ``index`` of ``of`` (`h.shape[-1]`,
        `h.size(0)`): measured on nnsight 0.8.1, an invoke sees its own rows (the batch
        size is its own) at the padded length (the token count is the longest input's)."""
        position = self.value(of)
        if position is None:
            self.plain(index)
            return
        number = _int_literal(index)
        if number is not None and number < 0:
            ndim = self.ndim(of)
            number = None if ndim is None else number + ndim
        if number is None or number < 0:
            raise _Refuse(f"reads `{code_of(read)}`, which may be the token count: {TOKEN_COUNT}")
        if number == position:
            raise _Refuse(f"reads the token count `{code_of(read)}`: {TOKEN_COUNT}")

    def _generated(self, expr: cst.BaseExpression) -> bool:
        """Is ``expr`` the generated tokens, or a part of them that keeps positions?"""
        while True:
            if isinstance(expr, cst.Name):
                return expr.value in self.generated
            if isinstance(expr, cst.Attribute) and expr.attr.value in MODULE_VALUES:
                return self._generator(model_envoy(expr.value, self.facts))
            if isinstance(expr, cst.Subscript):
                expr = expr.value
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ELEMENTWISE:
                expr = expr.func.value
            else:
                return False

    def _generator(self, envoy: cst.BaseExpression | None) -> bool:
        return (
            self.generation is not None
            and isinstance(envoy, cst.Attribute)
            and envoy.attr.value == "generator"
        )

    def _layout(self, envoy: cst.BaseExpression, read: cst.Attribute) -> int:
        """Where the token dimension is in ``read``, a value of the module ``envoy`` (a
        path from the model, :func:`model_envoy`)."""
        if self._generator(envoy):
            return 1  # model.generator.output: (batch, positions)
        if isinstance(envoy, cst.Name):
            return 1  # model.output (logits: batch, positions, vocabulary)
        if isinstance(envoy, cst.Subscript):
            return 1  # a decoder layer: a tensor (batch, positions, hidden)
        if isinstance(envoy, cst.Attribute) and envoy.attr.value in TENSOR_MODULES:
            return 1
        raise _Refuse(f"reads `{code_of(read)}`, whose layout I do not know")

    def _index_expressions_of_envoy(self, envoy: cst.BaseExpression) -> None:
        while isinstance(envoy, (cst.Attribute, cst.Subscript)):
            if isinstance(envoy, cst.Subscript):
                for element in envoy.slice:
                    self._index_expressions(element)
            envoy = envoy.value

    def _index_expressions(self, element: cst.SubscriptElement) -> None:
        inner = element.slice
        if isinstance(inner, cst.Index):
            self.plain(inner.value)
        else:
            for part in (inner.lower, inner.upper, inner.step):
                if part is not None:
                    self.plain(part)

    def subscript(self, expr: cst.Subscript) -> int | None:
        shape = expr.value
        if (
            isinstance(shape, cst.Attribute)
            and shape.attr.value == "shape"
            and len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Index)
        ):
            self.dimension(shape.value, expr.slice[0].slice.value, expr)
            return None
        base = self.value(expr.value)
        for element in expr.slice:
            self._index_expressions(element)
        if base is None:
            return None
        generated = self._generated(expr.value)
        position, dim, keeps = base, 0, True
        for element in expr.slice:
            inner = element.slice
            if isinstance(inner, cst.Index):
                index = inner.value
                if inner.star is not None or isinstance(index, cst.Ellipsis):
                    raise _Refuse(f"indexes `{code_of(expr)}` in a way I cannot follow")
                if isinstance(index, cst.Name) and index.value == "None":
                    raise _Refuse(f"adds a dimension in `{code_of(expr)}`")
                if dim == base:
                    number = _int_literal(index)
                    if number is None:
                        raise _Refuse(
                            f"indexes the token position with `{code_of(index)}` in "
                            f"`{code_of(expr)}`, not known to count from the end"
                        )
                    if number >= 0:
                        raise _Refuse(
                            f"indexes the token position {number} in `{code_of(expr)}`: "
                            "positive position indices are wrong under left padding"
                        )
                    if generated:
                        self.generation.tokens_read(expr, -number)
                    keeps = False
                elif dim < base:
                    position -= 1
            else:
                if dim == base and (inner.lower is not None or inner.upper is not None or inner.step is not None):
                    last = self._last_positions(inner) if generated else None
                    if last is None:
                        raise _Refuse(f"slices the token positions in `{code_of(expr)}`")
                    # the last generated tokens: no padded position is left
                    self.generation.tokens_read(expr, last)
                    keeps = False
            dim += 1
        return position if keeps else None

    def _last_positions(self, part: cst.Slice) -> int | None:
        """k for `[-k:]` (k a constant), else None."""
        if part.upper is not None or part.step is not None or part.lower is None:
            return None
        lower = int_value(part.lower, self.facts)
        return -lower if lower is not None and lower < 0 else None

    def call(self, expr: cst.Call) -> int | None:
        func = expr.func
        args = [a.value for a in expr.args]
        if isinstance(func, cst.Attribute):
            root = root_name(func.value)
            path = dotted_name(func)
            module_call = (
                path is not None and func.attr.value not in MODULE_VALUES and ".tokenizer." not in f".{path}."
            )
            if module_call and root is not None and self.facts.is_model_like(root):
                # a module called as a function (`model.lm_head(h)`): per position
                state = None
                for arg in args:
                    state = self.combine(state, self.value(arg), expr)
                return state
            receiver = self.value(func.value)
            if receiver is not None:
                name = func.attr.value
                if name == "size":
                    if len(args) != 1:
                        raise _Refuse(_token_count(expr))
                    self.dimension(func.value, args[0], expr)
                    return None
                if name in ("dim", "ndimension") and not args:
                    return None
                if name in ELEMENTWISE:
                    for arg in args:
                        self.plain(arg)
                    return receiver
                if name in LAST_DIM and _last_dim(expr):
                    return receiver
                if name == "save":
                    raise _Refuse(f"saves `{code_of(func.value)}`, padded positions included")
                raise _Refuse(
                    f"calls `.{name}()` on `{code_of(func.value)}`, which has padded positions"
                )
        elif not isinstance(func, cst.Name):
            self.plain(func)
        path = qualify(func, self.facts.imports)
        if path == "len" and len(args) == 1 and self.value(args[0]) is not None:
            # the size of the first dimension: an invoke's own batch rows, or its token count
            self.dimension(args[0], cst.Integer("0"), expr)
            return None
        states = [self.value(arg) for arg in args]
        if any(s is not None for s in states):
            if path in LAST_DIM_FUNCTIONS and _last_dim(expr, positional=1):
                return next(s for s in states if s is not None)
            raise _Refuse(f"passes an activation with padded positions to `{code_of(func)}`")
        return None


def _token_count(read: cst.CSTNode) -> str:
    return f"reads `{code_of(read)}`, which holds the token count: {TOKEN_COUNT}"


def _int_literal(expr: cst.BaseExpression) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = _int_literal(expr.expression)
        return None if inner is None else -inner
    return None


def _last_dim(call: cst.Call, positional: int = 0) -> bool:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dim":
            return _int_literal(arg.value) == -1
    plain = [a.value for a in call.args if a.keyword is None]
    return len(plain) > positional and _int_literal(plain[positional]) == -1


# -- the rewrite --------------------------------------------------------------------------


def _rebinds(stmt: cst.BaseStatement, names: set[str], facts: Facts) -> bool:
    """Does ``stmt`` assign one of ``names`` alone (`x = ...`), anywhere inside?"""
    for node in index_of(stmt).nodes:
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Name) and target.value in names:
                return True
    return False


def _batched(sweep: Sweep, names: list[str], chunk: int | None, unsaved: set[str], facts: Facts):
    loop, trace = sweep.loop, sweep.block.node
    tracer = names[0]

    split = _split(sweep, facts)

    def build(_stmts):
        drop = DropElementSaves(set(), rebinds=unsaved)

        def moved(stmts):
            # `drop` only changes `x = ....save()` for the unsaved names: skip the others
            return [reindentable(s.visit(drop) if _rebinds(s, unsaved, facts) else s) for s in stmts]

        inner = list(sweep.inner)
        if split.rest_of_pre:
            inner[0] = with_leading(inner[0], trace.leading_lines)
        body = moved(split.rest_of_pre + inner + sweep.post)
        # the inputs go to the invoke, a generation's keywords to the one generate
        inputs = [a for a in sweep.block.call.args if a.keyword is None]
        if len(inputs) < len(sweep.block.call.args):  # (else as written, comments kept)
            inputs[-1] = inputs[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        call = cst.Call(
            func=cst.Attribute(value=cst.Name(tracer), attr=cst.Name("invoke")),
            args=inputs,
        )
        item = trace.items[0].with_changes(item=call, asname=None)
        invoke = trace.with_changes(
            items=[item],
            leading_lines=[] if split.rest_of_pre else trace.leading_lines,
            body=trace.body.with_changes(body=body, footer=list(trace.body.footer)),
        )
        # the statements the input depends on run first, in the loop (_Split)
        loop_body = moved(split.ahead) + [invoke]
        changes = dict(leading_lines=[], body=loop.body.with_changes(body=loop_body))
        if chunk is not None:
            items, start = names[1], names[2]
            changes["iter"] = cst.parse_expression(f"{items}[{start} : {start} + {chunk}]")
        inner_loop = loop.with_changes(**changes)
        keywords = ", ".join(
            code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            for a in sweep.block.call.args
            if a.keyword is not None
        )
        method = sweep.block.method
        outer = cst.parse_statement(f"with {sweep.model}.{method}({keywords}) as {tracer}:\n    pass\n")
        outer = outer.with_changes(body=outer.body.with_changes(body=[inner_loop]))
        if chunk is None:
            return [outer.with_changes(leading_lines=loop.leading_lines)]
        items, start = names[1], names[2]
        listing = cst.parse_statement(
            f"{items} = list({code_of(loop.iter)})  # the inputs, listed once: one trace takes {chunk} at a time\n")
        chunks = cst.parse_statement(f"for {start} in range(0, len({items}), {chunk}):\n    pass\n")
        chunks = chunks.with_changes(body=chunks.body.with_changes(body=[outer]))
        return [listing.with_changes(leading_lines=loop.leading_lines), chunks]

    return build


InvokeBatching.cases = (
    Case(
        name="prompt loop, reported without --unsafe-fixes",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        reason="3 forward passes, one per iteration; as invokes of one trace it would run 1",
    ),
    Case(
        name="prompt loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    # one prediction per prompt
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        # the most likely next token
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    # one prediction per prompt
    with model.trace() as tracer:
        for prompt in PROMPTS:
            with tracer.invoke(prompt):
                logits = model.lm_head.output
                # the most likely next token
                top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
    ),
    Case(
        name="steering sweep, with code before the trace",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[8].output.mean(dim=1)
    scores = list().save()
    for alpha in [0.0, 2.0, 4.0]:
        scale = alpha / 2
        with model.trace("I think this movie is"):
            model.model.layers[8].output = model.model.layers[8].output + scale * steer
            scores.append(model.lm_head.output[0, -1].softmax(dim=-1).max().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[8].output.mean(dim=1)
    scores = list().save()
    with model.trace() as tracer:
        for alpha in [0.0, 2.0, 4.0]:
            scale = alpha / 2
            with tracer.invoke("I think this movie is"):
                model.model.layers[8].output = model.model.layers[8].output + scale * steer
                scores.append(model.lm_head.output[0, -1].softmax(dim=-1).max().item())
""",
    ),
    Case(
        name="a prompt built and tokenized in the loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
NAMES = ["Mary", "John", "Christopher"]
with model.session(remote=True):
    tops = list().save()
    for name in NAMES:
        prompt = f"{name} went to the store and bought"
        ids = model.tokenizer(prompt, return_tensors="pt")["input_ids"]
        weight = len(name)
        # one trace per name
        with model.trace(ids):
            logits = model.lm_head.output
        tops.append((weight, logits[0, -1].argmax().item()))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
NAMES = ["Mary", "John", "Christopher"]
with model.session(remote=True):
    tops = list().save()
    with model.trace() as tracer:
        for name in NAMES:
            prompt = f"{name} went to the store and bought"
            ids = model.tokenizer(prompt, return_tensors="pt")["input_ids"]
            weight = len(name)
            # one trace per name
            with tracer.invoke(ids):
                logits = model.lm_head.output
                tops.append((weight, logits[0, -1].argmax().item()))
""",
    ),
    Case(
        name="an input the loop feeds",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    prompts = ["The weather today is"]
    tops = list().save()
    for step in range(3):
        with model.trace(prompts[-1]):
            tops.append(model.lm_head.output[0, -1].argmax().item())
        prompts.append(prompts[0] + " very" * (step + 1))
""",
        reason="every iteration's input is computed before any invoke runs",
    ),
    Case(
        name="a layer list from a config dict",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "probe": {"mid": 6}}
layers = CONFIG["layers"]
with model.session(remote=True):
    norms = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            norms.append(layers[CONFIG["probe"]["mid"]].output[0, -1].norm().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "probe": {"mid": 6}}
layers = CONFIG["layers"]
with model.session(remote=True):
    norms = list().save()
    with model.trace() as tracer:
        for prompt in ["The cat sat on the", "Hello"]:
            with tracer.invoke(prompt):
                norms.append(layers[CONFIG["probe"]["mid"]].output[0, -1].norm().item())
""",
    ),
    Case(
        name="sizes an invoke reads of its own rows",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "layer": 6}
layers = CONFIG["layers"]
with model.session(remote=True):
    widths = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            hidden = layers[CONFIG["layer"]].output
            width = hidden.shape[-1]
            widths.append((width, hidden[0, -1].norm().item()))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "layer": 6}
layers = CONFIG["layers"]
with model.session(remote=True):
    widths = list().save()
    with model.trace() as tracer:
        for prompt in ["The cat sat on the", "Hello"]:
            with tracer.invoke(prompt):
                hidden = layers[CONFIG["layer"]].output
                width = hidden.shape[-1]
                widths.append((width, hidden[0, -1].norm().item()))
""",
    ),
    Case(
        name="the token count read under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    lengths = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            lengths.append(model.transformer.h[3].output.shape[1])
""",
        reason="reads the token count `model.transformer.h[3].output.shape[1]`",
    ),
    Case(
        name="generations of full length read by their last tokens",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    for prompt in ["The capital of France is", "Hi"]:
        with model.generate(prompt, max_new_tokens=4, min_new_tokens=4):
            answers.append(model.generator.output[0, -4:])
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    with model.generate(max_new_tokens=4, min_new_tokens=4) as tracer:
        for prompt in ["The capital of France is", "Hi"]:
            with tracer.invoke(prompt):
                answers.append(model.generator.output[0, -4:])
""",
    ),
    Case(
        name="a generation that may stop early",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    for prompt in ["The capital of France is", "Hi"]:
        with model.generate(prompt, max_new_tokens=4):
            answers.append(model.generator.output[0, -4:])
""",
        reason="a generation that stops early (end of sequence) is padded after it in a batch",
    ),
    Case(
        name="the inner loop of nested sweeps",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "Hello"]
with model.session(remote=True):
    res = dict().save()
    for layer in range(3):
        for prompt in PROMPTS:
            with model.trace(prompt):
                model.transformer.h[layer].output[:, -1] = 0
                top = model.lm_head.output[0, -1].argmax()
            res[(layer, prompt)] = top.item()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "Hello"]
with model.session(remote=True):
    res = dict().save()
    for layer in range(3):
        with model.trace() as tracer:
            for prompt in PROMPTS:
                with tracer.invoke(prompt):
                    model.transformer.h[layer].output[:, -1] = 0
                    top = model.lm_head.output[0, -1].argmax()
                    res[(layer, prompt)] = top.item()
""",
    ),
    Case(
        name="long loops run in chunks",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    for i in range(100):
        with model.trace(f"Number {i} is"):
            tops.append(model.lm_head.output[0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    _ndif_items = list(range(100))  # the inputs, listed once: one trace takes 32 at a time
    for _ndif_start in range(0, len(_ndif_items), 32):
        with model.trace() as tracer:
            for i in _ndif_items[_ndif_start : _ndif_start + 32]:
                with tracer.invoke(f"Number {i} is"):
                    tops.append(model.lm_head.output[0, -1].argmax().item())
""",
    ),
    Case(
        name="dependent iterations",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    carry = 0
    for prompt in ["a b", "c d", "e f"]:
        with model.trace(prompt):
            model.transformer.h[0].output[:, -1] += carry
            carry = model.transformer.h[0].output[:, -1].clone()
            tops.append(model.lm_head.output[0, -1].argmax().item())
""",
        reason="`carry` is read before the iteration sets it",
    ),
    Case(
        name="positive position index under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    firsts = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            firsts.append(model.lm_head.output[0, 0].argmax().item())
""",
        reason="positive position indices are wrong under left padding",
    ),
    Case(
        name="a whole activation saved under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    hidden = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            hidden.append(model.transformer.h[3].output.mean(dim=1))
""",
        reason="has padded positions",
    ),
    Case(
        name="a name read after the loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            last = model.lm_head.output[0, -1].argmax().save()
print(last)
""",
        reason="`last` is read after the loop",
    ),
    Case(
        name="filled in layer order",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    seen = list().save()
    for layer in [5, 2]:
        with model.trace("hello world"):
            model.transformer.h[layer].output[:] = 0
            seen.append(model.transformer.h[layer].output[0, -1])
""",
        reason="which changes with the loop",
    ),
)

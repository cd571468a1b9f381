"""nnsight-05-failures: code that fails on nnsight 0.5 and later, reported in every mode.

## What it does
A check: it runs once, first, on the code as written, whatever else runs (unless
`--ignore`d; also on scripts for the pre-0.5 API, and when other passes are selected), and
reports eight ways a script fails on nnsight 0.5+, each with the error nnsight 0.8.1 gives
(measured on tiny GPT-2 and Llama models, locally and through an emulated NDIF, where the
error comes back inside a `RemoteError`):

- `return` or `yield` in the body of a trace, session or generate block:
  `SyntaxError: 'return' outside function`;
- a block or an invoke whose body starts with `try:`: `ValueError: A traced `with` block
  cannot start with `try:` ...`;
- a module's `.output` or `.input` read, within one invoke (or one trace without
  invokes), after a module the model runs later: the LM head or the final norm before a
  layer, a later layer before an earlier one (a loop over the layers backwards, a layer
  read again after a loop over all of them), a layer's output before its input or before
  the output of its attention or MLP: `OutOfOrderError: '...' was requested but the model
  already ran past it`. The order is the architecture's (embeddings, the decoder layers in
  index order, the final norm, the LM head; in a layer its attention before its MLP), and
  only reads that surely come out of order when both run are reported (conditions that
  read the same names, branches of one `if`, a `try` inside the block that catches the
  error, steps of generation, backward passes: not);
- `tracer.stop()` in the code of a trace that has invokes, outside the invokes: that code
  runs before them, so the trace stops before any invoke runs: `EarlyStopException`;
- code after `with tracer.all():`, or after `tracer.iter[...]` over a slice with no end
  (`[:]`, `[k:]`; in a `with` or a `for` header) in the same body: each steps through the
  generation to its end, and nnsight 0.5+ moves past it only when generation is over, so
  that code never runs (what it binds is unbound after the block: `NameError`);
- a name bound in the outermost block (remote or not) and read after it without
  `.save()`: only the values marked with `.save()` leave it, so the name is unbound there
  (`NameError`, or `UnboundLocalError` in a function) or still holds its value from
  before the block (a wrong result, silently). Names read only inside the block (a later
  trace of the same session) are fine, and so is a name whose value nnsight sends back
  anyway (nnsight sends back every name whose value *is* a saved object: an alias of one,
  a cached small int equal to a saved one, a value a helper of yours may have saved).
- a name an invoke reads before it asks for any module's value, which an earlier invoke of
  the trace binds at a module (`layer.output[:, -1] = h_of_the_first_invoke`: Python
  evaluates the right side first): each invoke's code runs up to its first module before
  the model reaches any, so the name is not bound yet (`NameError`);
- `remote=` on a trace or generate inside a session that runs on NDIF (a trace copied into
  a session): the inner call would open a second request from inside the server, which
  NDIF refuses (`remote=True` goes on the outermost session only).

Three it fixes: lines of a forward pass that read modules out of the model's order are
moved into it, when the lines only compute with the model's values (no print, no helper,
no write) and the lines they move past neither bind nor read what they use (nnsight 0.4 ran
a forward pass's reads in the model's order, whatever the code's order: so a migrated
script computes what it computed); the inner `remote=` is dropped where it repeats the
session's flag (`remote=True`, or the same expression); the block saves the value where it
binds the name (`.save()` on a tensor, `nnsight.save(...)` on anything else).

## Why is this bad?
nnsight 0.5 runs a block's body as code of its own, in a worker that waits at each
module for the model to get there, and sends back only the values marked with
`.save()`. Code written for 0.4 (which recorded a graph and ran it afterwards) or by
habit of plain Python fails there: at once, after a full remote request, or — a name
that still holds its old value — silently.

## Example
```python
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output[0, -1].save()
    n_tokens = model.lm_head.output.shape[1]
print(logits.argmax(), n_tokens)
```

## Use instead
```python
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output[0, -1].save()
    n_tokens = nnsight.save(model.lm_head.output.shape[1])
print(logits.argmax(), n_tokens)
```

## Fix safety
The save is added only where every binding of the name in the block is a plain
assignment `name = value`. Safe where the name is unbound before the block and the read
after it is not in a `try`: the original stops there with `NameError`, so no result of it
changes; the download grows by the value (a later pass may still reduce it). Unsafe where
the name held a value before the block (the original goes on with that value, and the
fix changes what the script computes, to what its author meant) or the read is in a
`try` that may handle its failure. Moving lines is safe: the code as written
stops at the OutOfOrderError, and lines that share no name give the same values in either
order. On a script for the pre-0.5 API the save is added and lines are moved only with
`--migrate` (migrated in the same run, it is 0.5+ code). The other failures are reported
only: how to repair them is the author's choice.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts
from ndif_opt.analysis.legacy_api import PRE_05, api_generation, scan, unmigratable
from ndif_opt.passes.base import Context, Pass
from ndif_opt.passes.nnsight_05_failures.cases import CASES
from ndif_opt.passes.nnsight_05_failures.exits import report_leading_try, report_returns, traced_bodies
from ndif_opt.passes.nnsight_05_failures.invokes import report_early_cross_invoke_reads
from ndif_opt.passes.nnsight_05_failures.nested import FlagsDropped, inner_remote_flags
from ndif_opt.passes.nnsight_05_failures.order import forward_scopes
from ndif_opt.passes.nnsight_05_failures.order_moves import StatementsMoved, report_out_of_order
from ndif_opt.passes.nnsight_05_failures.steps import report_code_after_every_step
from ndif_opt.passes.nnsight_05_failures.stops import report_stop_outside_invokes
from ndif_opt.passes.nnsight_05_failures.unsaved import SavesAdded, unsaved_names, uses_nnsight_save
from ndif_opt.syntax.rewrite import with_module_import
from ndif_opt.syntax.walk import paths_to, transform
from ndif_opt.types import Safety
from ndif_opt.wording import tense


class Nnsight05Failures(Pass):
    __doc__ = __doc__

    fix_safety = ("safe where the name is unbound before the block, and for lines moved into the model's "
                  "order; unsafe where the name held a value (the fix changes what the script computes)")
    reports_when_off = True  # not selected (and not ignored): it still reports
    checks_as_written = True  # once, first, on the code as written, pre-0.5 code included
    cases = CASES

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        for block in facts.blocks:
            report_returns(block, context)
            report_stop_outside_invokes(block, context)
        tracers = {b.tracer_name for b in facts.blocks if b.method == "generate" and b.tracer_name}
        for scope, label in traced_bodies(facts):
            report_leading_try(scope, label, context)
            if tracers:
                report_code_after_every_step(scope, label, tracers, context)
        pre05 = api_generation(facts) == PRE_05
        may_move = not self.report_only and (not pre05 or (
            context.options.wants("migrate-api", True) and not unmigratable(scan(facts).legacy)))
        moves: dict[int, tuple[cst.BaseStatement, ...]] = {}
        if not pre05:  # (a pre-0.5 script: migrate-api leaves it as written)
            report_early_cross_invoke_reads(facts, context)
        for scope in forward_scopes(facts):
            ordered = report_out_of_order(scope, facts, context, may_move)
            if ordered is not None:
                moves[id(scope.body)] = ordered
        if moves:  # first: the saves below find their nodes in the moved statements
            module = transform(module, StatementsMoved(moves, paths_to(module, lambda n: id(n) in moves)))
        dropped = inner_remote_flags(facts, context)
        module = self._saved(module, facts, context, pre05)
        if dropped and not self.report_only:
            # (the calls of blocks are not on the paths to the saves: the walk keeps them)
            module = module.visit(FlagsDropped(dropped))
        return module

    def _saved(self, module: cst.Module, facts: Facts, context: Context, pre05: bool) -> cst.Module:
        """The module with the saves of names read after their block (reported)."""
        saves: dict[int, cst.BaseExpression] = {}
        for block in facts.blocks:
            if block.parent is None:
                saves.update(self._unsaved(block, facts, context, pre05))
        if not saves:
            return module
        on_path = paths_to(module, lambda node: id(node) in saves)
        module = transform(module, SavesAdded(saves, on_path))
        if any(uses_nnsight_save(value) for value in saves.values()):
            module = with_module_import(module, "nnsight")
        return module

    def _unsaved(self, block: Block, facts: Facts, context: Context, pre05: bool) -> dict[int, cst.BaseExpression]:
        fixes: dict[int, cst.BaseExpression] = {}
        for item in unsaved_names(block, facts, pre05):
            name = item.name
            where = f"`{block.model}.{block.method}(...)`"
            if item.unbound:
                error = (f"UnboundLocalError: cannot access local variable '{name}' where it is not associated "
                         "with a value" if item.in_function else f"NameError: name '{name}' is not defined")
                outcome = f"the read raises {error}"
            elif item.stale:
                outcome = f"`{name}` still holds the value it had before the block (no error: a wrong result)"
            else:
                outcome = f"`{name}` is unbound there or holds a value from before the block"
            message = (f"`{name}` is bound in {where} and read after it without `.save()`: nnsight 0.5+ sends back "
                       f"only saved values (locally too), so {outcome}")
            node = item.bindings[0]
            uses = (item.read,)
            if not context.allows(node, message):
                continue
            if pre05 and not context.options.wants("migrate-api", True):
                reason = "the script uses the pre-0.5 nnsight API: migrate it first (--migrate), then save it"
            elif pre05 and unmigratable(scan(facts).legacy):
                # --migrate leaves the script as written: a save in it would be 0.5+ code in 0.4 code
                reason = ("the script uses the pre-0.5 nnsight API, and --migrate cannot migrate it (the findings of "
                          "migrate-api say why): rewrite those by hand, then save it")
            elif item.fix is None:
                reason = item.why_not
            elif self.report_only:
                reason = f"{self.id} is not selected; select it to add the save"
            else:
                reason = ""
            if reason:
                context.skipped(node, message, reason)
                context.findings[-1].uses = uses
                continue
            wrapped = any(uses_nnsight_save(v) for v in item.fix.values())
            how = "`nnsight.save(...)`" if wrapped else "`.save()`"
            saved = f"{tense('saved', 'would save')} `{name}` where the block binds it ({how}): {message}"
            # (a later pass may take the wrap away: a session that reads the value itself)
            evidence = "nnsight.save(" if wrapped else None
            if item.unbound and not item.caught:
                fixes.update(item.fix)
                context.applied(node, saved, uses=uses, evidence=evidence)
            elif context.options.unsafe_fixes:
                fixes.update(item.fix)
                context.applied(node, saved, Safety.UNSAFE, uses=uses, evidence=evidence)
            else:
                why = ("the read is in a `try` that may handle its failure" if item.unbound else
                       "saving it changes what the script computes from here on (to the block's value)")
                context.needs_unsafe(node, message, f"{why}; use --unsafe-fixes to add the save", uses=uses)
        return fixes

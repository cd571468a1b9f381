"""reduction-pushdown: download the reduced value, not the tensor it came from.

## What it does
For every value saved in a remote block, looks at how the code after the request
uses it. When every use reads only a reduced form of it — an index or slice, an
``argmax``/``max``/``topk``/``sum``/``mean``/``norm``, a softmax followed by indexing,
``.item()`` (or ``float(x)``, ``int(x)``), arithmetic with values the server has, a same-file function that NDIF can
run — that reduced form is computed inside the block and saved instead (under a new
name, or under the name of the assignment that computed it), and the full value is no
longer saved. Inside a session, a value that only code in the session reads is not
saved at all: the session's code can read an inner trace's values without it.

The same holds for the elements of a saved list or dict that a loop of traces fills
(`logits_by_prompt.append(model.lm_head.output)`): when the code after the request reads
every element through one reduction (`[l[0, -1].argmax().item() for l in
logits_by_prompt]`, `for layer, logits in ablated.items(): ...`), each element is reduced
where the block stores it, and the client's loop reads the reduced values (the container
and the loop's variable now hold those). A loop over saved values written out in a list
(`for name, logits in [("clean", clean), ("patched", patched)]`) is treated alike: each
value's reduction is computed and saved in its own block, and the list holds those.

## Why is this bad?
Every ``.save()`` is a download. Full logits of a 70B-class model are
``seq × 128,256 × 2`` bytes per prompt; the argmax you take from them is 8 bytes.

## Example
```python
with model.trace(prompt, remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
```

## Use instead
```python
with model.trace(prompt, remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()
```

## Fix safety
Safe: the client reads the same names with the same values. Not applied when any use
needs the full value (it is plotted, written to disk, returned, passed to a function
NDIF cannot run), when the reduction reads a value the client changes after the
request, when the client or the rest of the session changes the saved value in place
(`logits[0, -1] = 0`, `logits.mul_(2)`: the reductions read what it becomes), when
the saved name is bound more than once, or when the client computes a reduction only
sometimes (under an `if`, in a `try` whose handler may catch what it raises, in a loop
or after a `return`): computed in the block it would run every time, and could fail
(an index past a short prompt's end) where the client code does not run it. For the elements of a list or
dict, the container and the loop's variable hold the reduced values after the change:
nothing read them but through these reductions. Not applied when the block fills the container
at more than one place or reads it, when the client reads the elements in different
ways, when no loop over the whole container applies the reduction to every element
unconditionally (with a condition or a jump in front of it the reduction is not known to
work on each element), or when the request changes the stored value in place after
storing it.

Unsafe in a notebook, applied only with ``--unsafe-fixes``, for a value saved outside a
function: the kernel keeps it after the last cell, and a cell added later may read it
(the cells in the file are not all its readers). Without the flag it stays downloaded
and the finding says what dropping it would save.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import aliases, containers_holding, definite_binds, name_assignment
from ndif_opt.analysis.regions import reads_after, results_kept
from ndif_opt.analysis.scopes import scope_index
from ndif_opt.cost_model import saved_shape
from ndif_opt.passes.base import Context, Pass
from ndif_opt.passes.common.records import RECORD_PREFIX
from ndif_opt.passes.reduction_pushdown.cases import CASES
from ndif_opt.passes.reduction_pushdown.chains import ChainPushdown
from ndif_opt.passes.reduction_pushdown.elements import ElementPushdown, filled_containers
from ndif_opt.passes.reduction_pushdown.saves import (
    EditsAlongPaths,
    Save,
    element_saves_in_sessions,
    later_in_session,
    letting_go_safety,
    nested_session_saves,
    saves_of,
    without_save,
)
from ndif_opt.passes.reduction_pushdown.written_lists import LiteralPushdown
from ndif_opt.syntax.positions import short_code
from ndif_opt.syntax.rewrite import SuitePlan, unsave
from ndif_opt.syntax.walk import transform
from ndif_opt.wording import tense


class ReductionPushdown(Pass):
    __doc__ = __doc__
    fix_safety = "safe"
    cases = CASES

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        saves = saves_of(facts)
        nested = facts.once(nested_session_saves) + facts.once(element_saves_in_sessions)
        for save in saves + nested:
            self._unneeded_in_session(save, facts, context, plan)
        if plan:
            return plan.apply(module, facts)
        # one saved value per run: each push changes what the next one sees, and the
        # pipeline runs the passes again until nothing changes
        for save in saves:
            edits = ChainPushdown(save, facts, context).plan()
            if edits:
                return transform(module, edits)
        # the containers' edits touch nodes of their own: all of them in one run
        edits = EditsAlongPaths(scope_index(facts).parents)
        for container in filled_containers(facts):
            ElementPushdown(container, facts, context).plan(edits)
        if edits:
            return transform(module, edits)
        # loops over lists of saved values written out in the code: those that share no
        # saved value, in one run
        taken: set[str] = set()
        for literal in LiteralPushdown.candidates(facts, context):
            names = {save.name for save in literal.saves}
            if not names & taken and literal.plan(edits):
                taken |= names
        if edits:
            return transform(module, edits)
        return module

    def _unneeded_in_session(self, save: Save, facts: Facts, context: Context, plan: SuitePlan) -> None:
        """Inside a session, a save that nothing after the session reads is dropped."""
        session = save.block.outermost
        if session is save.block or session.method != "session":
            return
        # nothing after the session reads this value: the name is not read there, or the
        # session binds it again for sure before it ends; the session's code reads each
        # value where it is bound, saved or not
        # (`act = h.save()` keeps the object `h` names too: `h` comes back as well)
        inner = unsave(save.stmt.body[0].value)
        kept = [save.name] + ([inner.value] if type(inner) is cst.Name else [])
        later = reads_after(facts, session.stmt.suite, session.stmt.index + 1)
        if any(name in later and not any(name in definite_binds(stmt) for stmt in later_in_session(save, session))
               for name in kept):
            return
        # nor through another name the session binds to it (`y = x`, a loop's `for k, v in
        # d.items()`): a saved object comes back under every name that holds it
        others = aliases(session.node.body.body, kept) - set(kept)
        if others & (later.keys() | results_kept(facts, session.stmt.suite, session.stmt.index + 1)):
            return
        if not context.allows(save.stmt, f"`{save.name}` need not be downloaded"):
            return
        full = saved_shape(unsave(save.stmt.body[0].value), save.block, facts)
        value = f"`{short_code(save.stmt.body[0].targets[0].target)}`{f' ({full})' if full else ''}"
        safety = letting_go_safety(save, context, facts,
                                lambda: f"{value} need not be downloaded: only code inside the session reads it")
        if safety is None:
            return
        where = facts.statements[id(save.stmt)]
        bare = without_save(save.stmt)
        # `acts = nnsight.save(acts)` without its save is `acts = acts`: no line at all (unless
        # it is its suite's only line)
        itself = _binds_itself(bare) and len(where.suite.body) > 1
        plan.replace(where.suite, where.index, where.index + 1, lambda stmts: [] if itself else [bare])
        context.unreturned.update(kept)
        holders = sorted(containers_holding(session.node.body.body, set(kept) | others))
        if holders:  # (`results[layer] = out`: its values still come back, in the container)
            # (a split's record of the values the code after the session reads is none of yours)
            held = [f"`{name}`" for name in holders if not name.startswith(RECORD_PREFIX)]
            where_else = f"in {', '.join(held)}" if held else "with the values the code after the session reads"
            gone = f"downloaded on its own: it also comes back {where_else}"
        else:
            gone = "downloaded: only code inside the session reads it"
        context.applied(
            save.stmt,
            f"{value} {tense('is no longer', 'would no longer be')} {gone}, and the session sees it without `.save()`",
            safety,
        )


def _binds_itself(stmt: cst.SimpleStatementLine) -> bool:
    """`x = x`: a line that changes nothing."""
    assigned = name_assignment(stmt)
    return assigned is not None and type(assigned[1]) is cst.Name and assigned[1].value == assigned[0]

"""nnsight-05-failures: code that fails on nnsight 0.5 and later, reported in every mode.

## What it does
A check: it runs once, first, on the code as written, whatever else runs (unless
`--ignore`d; also on scripts for the pre-0.5 API, and when other passes are selected), and
reports four ways a script fails on nnsight 0.5+, each with the error nnsight 0.8.1 gives
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
- a name bound in the outermost block (remote or not) and read after it without
  `.save()`: only the values marked with `.save()` leave it, so the name is unbound there
  (`NameError`, or `UnboundLocalError` in a function) or still holds its value from
  before the block (a wrong result, silently). Names read only inside the block (a later
  trace of the same session) are fine, and so is a name whose value nnsight sends back
  anyway (nnsight sends back every name whose value *is* a saved object: an alias of one,
  a cached small int equal to a saved one, a value a helper of yours may have saved).

The last one it fixes: the block saves the value where it binds the name (`.save()` on a
tensor, `nnsight.save(...)` on anything else).

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
`try` that may handle its failure. On a script for the pre-0.5 API the save is added only
with `--migrate` (migrated in the same run, it is 0.5+ code). The other three failures
are reported only: how to repair them is the author's choice.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, StmtInfo, opens_invoke, qualify
from ndif_opt.analysis.legacy_api import PRE_05, api_generation, scan, unmigratable
from ndif_opt.analysis.names import (
    COMPREHENSIONS,
    all_params,
    collect,
    function_locals,
    target_names,
)
from ndif_opt.analysis.regions import bound_before
from ndif_opt.analysis.tensors import TENSOR_METHODS, is_envoy_tensor, is_tensor
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.model_registry import dims_for
from ndif_opt.cost.module_values import INPUT, OUTPUT, forward_order
from ndif_opt.passes.base import Case, Context, Pass, RawFinding
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import method_call, unsave, with_module_import
from ndif_opt.syntax.walk import children, find_nodes, paths_to, transform
from ndif_opt.types import Safety, Status
from ndif_opt.wording import tense

#: the errors nnsight 0.8.1 gives (measured on tiny GPT-2 and Llama models, locally and
#: through the emulated NDIF, where they come back as a RemoteError with the same text)
TRY_ERROR = ("ValueError: A traced `with` block cannot start with `try:`; nnsight intercepts the body "
             "at its first line")
OUT_OF_ORDER = "OutOfOrderError: '{where}' was requested but the model already ran past it"


class Nnsight05Failures(Pass):
    __doc__ = __doc__

    fix_safety = ("safe where the name is unbound before the block; unsafe where it held a value "
                  "(the fix changes what the script computes)")
    reports_when_off = True  # not selected (and not ignored): it still reports
    checks_as_written = True  # once, first, on the code as written, pre-0.5 code included

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        for block in facts.blocks:
            _report_returns(block, context)
        for scope, label in _traced_bodies(facts):
            _report_leading_try(scope, label, context)
        for scope in _forward_scopes(facts):
            _report_out_of_order(scope, facts, context)
        pre05 = api_generation(facts) == PRE_05
        saves: dict[int, cst.BaseExpression] = {}
        for block in facts.blocks:
            if block.parent is None:
                saves.update(self._unsaved(block, facts, context, pre05))
        if not saves:
            return module
        on_path = paths_to(module, lambda node: id(node) in saves)
        module = transform(module, _Saves(saves, on_path))
        if any(_uses_nnsight_save(value) for value in saves.values()):
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
            how = "`nnsight.save(...)`" if any(_uses_nnsight_save(v) for v in item.fix.values()) else "`.save()`"
            saved = f"{tense('saved', 'would save')} `{name}` where the block binds it ({how}): {message}"
            if item.unbound and not item.caught:
                fixes.update(item.fix)
                context.applied(node, saved, uses=uses)
            elif context.options.unsafe_fixes:
                fixes.update(item.fix)
                context.applied(node, saved, Safety.UNSAFE, uses=uses)
            else:
                why = ("the read is in a `try` that may handle its failure" if item.unbound else
                       "saving it changes what the script computes from here on (to the block's value)")
                context.needs_unsafe(node, message, f"{why}; use --unsafe-fixes to add the save", uses=uses)
        return fixes


def _report(context: Context, node: cst.CSTNode, message: str, reason: str,
            uses: tuple[cst.CSTNode, ...] = ()) -> None:
    """A failure the check reports (unless a suppression comment covers it)."""
    if context.allows(node, message):
        context.findings.append(RawFinding(node, message, Status.SKIPPED, Safety.SAFE, reason, uses=uses))


# ---------------------------------------------------------------------------------------
# `return` / `yield` in a block, a body that starts with `try:`
# ---------------------------------------------------------------------------------------


def _label(block: Block) -> str:
    return f"`{block.model}.{block.method}(...)`"


def _report_returns(block: Block, context: Context) -> None:
    if block.parent is not None:
        return  # its body is part of the outermost block's: reported there
    for node, kind in _own_exits(block.node.body):
        message = (f"`{kind}` in the body of {_label(block)}: nnsight 0.5+ runs the body as code of its own, where "
                   f"it is SyntaxError: '{kind}' outside function")
        reason = ("move it after the block (save what it returns)" if kind == "return" else
                  "collect the values in a saved list and yield them after the block")
        _report(context, node, message, reason)


def _own_exits(node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, str]]:
    """`return` statements and `yield` expressions of the body itself (not of functions,
    lambdas or classes defined in it), in the order of the code."""
    for child in children(node):
        kind = type(child)
        if kind is cst.Return:
            yield child, "return"
        elif kind is cst.Yield:
            yield child, "yield"
        if kind not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            yield from _own_exits(child)


def _traced_bodies(facts: Facts) -> Iterator[tuple[cst.With, str]]:
    """Every `with` whose body nnsight captures: the blocks, and the invokes in them."""
    for block in facts.blocks:
        yield block.node, _label(block)
        if block.method != "session":
            for invoke in _invokes(block):
                yield invoke, f"`{code_of(invoke.items[0].item.func)}(...)`"


def _report_leading_try(node: cst.With, label: str, context: Context) -> None:
    body = node.body
    if type(body) is not cst.IndentedBlock or not body.body:
        return
    first = body.body[0]
    if type(first) in (cst.Try, cst.TryStar):
        _report(context, first, f"the body of {label} starts with `try:`: nnsight 0.5+ refuses it with {TRY_ERROR}",
                "put any statement above the `try`, or move the `try` outside the block")


def _invokes(block: Block) -> list[cst.With]:
    tracer = block.tracer_name
    return [node for node in find_nodes(block.node.body, lambda n: opens_invoke(n, tracer))
            if isinstance(node, cst.With)]


# ---------------------------------------------------------------------------------------
# Module values read out of the model's order
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    """Statements that one forward pass serves in order: an invoke's body, or the body of
    a trace or generate block without invokes."""

    block: Block
    statements: tuple[cst.BaseStatement, ...]


def _forward_scopes(facts: Facts) -> Iterator[_Scope]:
    for block in facts.blocks:
        if block.method == "session" or _steps(block.node.body) or _nnterp(block, facts):
            continue
        invokes = _invokes(block)
        if invokes:
            for invoke in invokes:
                if type(invoke.body) is cst.IndentedBlock:
                    yield _Scope(block, tuple(invoke.body.body))
        elif type(block.node.body) is cst.IndentedBlock:
            yield _Scope(block, tuple(block.node.body.body))


def _steps(body: cst.CSTNode) -> bool:
    """Does the body step through generation (`tracer.iter`, `.all()`, `.next()`), where
    every step runs the modules again?"""
    return bool(find_nodes(body, lambda n: type(n) is cst.Attribute and n.attr.value in ("iter", "all", "next")))


def _nnterp(block: Block, facts: Facts) -> bool:
    info = facts.models.get(block.model)
    return info is not None and info.class_path.startswith("nnterp")


# Index values in a module path while walking: a literal, an element (or the count) of a
# loop of the scope, or code whose value is not known (the same only as itself).
@dataclass(frozen=True)
class _Lit:
    value: int


@dataclass(frozen=True)
class _Var:
    loop: "_Loop"
    offset: int = 0
    count: bool = False  # enumerate's count, not the element


@dataclass(frozen=True)
class _Opaque:
    serial: int  # an index nobody can order: equal only to itself
    code: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"<{self.code}>" if self.code else "<i>"


@dataclass(eq=False)
class _Loop:
    node: cst.CSTNode = field(repr=False)
    domain: Callable[[int], list[int]] | None  # N layers -> the elements; None: not known
    irregular: bool  # break / continue / return / raise in its body: iterations may stop early
    names: frozenset[str]  # what its iterable reads (a condition when its domain is unknown)


@dataclass(frozen=True)
class _Branch:
    node_id: int
    arm: int
    names: frozenset[str]


@dataclass(eq=False)
class _Site:
    node: cst.CSTNode = field(repr=False)
    path: tuple
    hook: int
    frames: tuple  # _Loop / _Branch, outermost first
    caught: bool  # inside a `try` of the scope that has handlers
    order: int


_HOOKS = {"output": OUTPUT, "input": INPUT, "inputs": INPUT}
_TERMINAL = (cst.Return, cst.Raise, cst.Break, cst.Continue)


class _Walk:
    """The module reads of a scope, in the order Python evaluates them, with the loops and
    conditions around each."""

    def __init__(self, scope: _Scope, facts: Facts) -> None:
        self.root = scope.block.model
        self.facts = facts
        self.sites: list[_Site] = []
        self.env: dict[str, tuple] = {}  # name -> ("path", path) | ("index", value)
        self.frames: list = []
        self.caught = 0
        self.serial = itertools.count()
        self.stopped = False
        self.aliases = _aliases(scope.block, facts)

    # -- statements ------------------------------------------------------------------
    def statements(self, statements) -> None:
        for stmt in statements:
            if self.stopped:
                return
            self.statement(stmt)
            if isinstance(stmt, cst.SimpleStatementLine) and any(type(s) in _TERMINAL for s in stmt.body):
                return  # the rest of the suite does not run

    def statement(self, stmt: cst.BaseStatement) -> None:
        if _backward(stmt):
            self.stopped = True  # from here on the order may be the backward pass's
            return
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                self.small(small)
                if _stops(small):
                    self.stopped = True
                    return
        elif kind is cst.If:
            self.if_chain(stmt)
        elif kind is cst.For:
            self.for_loop(stmt)
        elif kind is cst.While:
            self.expr(stmt.test)
            loop = _Loop(stmt, None, True, _reads(stmt.test))
            self.in_frame(loop, lambda: self.statements(stmt.body.body))
            self.forget(collect(stmt.body).binds)
        elif kind is cst.With:
            for item in stmt.items:
                self.expr(item.item)
            if not opens_invoke(stmt):
                self.statements(stmt.body.body)
            self.forget(collect(stmt).binds)
        elif kind in (cst.Try, cst.TryStar):
            self.try_statement(stmt)
        elif kind in (cst.FunctionDef, cst.ClassDef):
            self.forget({stmt.name.value})
        else:  # match and anything else: its reads are not ordered here
            self.forget(collect(stmt).binds)

    def if_chain(self, stmt: cst.If) -> None:
        names: set[str] = set()
        arm = 0
        node: cst.CSTNode | None = stmt
        before = dict(self.env)
        bound: set[str] = set()
        while node is not None:
            test = None
            if isinstance(node, cst.If):
                test = node.test
                if arm == 0:
                    self.expr(test)
                    before = dict(self.env)
                names |= _reads(test)
                body, node = node.body, node.orelse
            else:  # Else
                body, node = node.body, None
            self.env = dict(before)

            def run(b=body, t=test, first=arm == 0) -> None:
                if t is not None and not first:  # an elif's test runs on the way to its arm
                    self.expr(t)
                self.statements(b.body)

            self.in_frame(_Branch(id(stmt), arm, frozenset(names)), run)
            bound |= set(collect(body).binds)
            arm += 1
        self.env = before
        self.forget(bound)

    def for_loop(self, stmt: cst.For) -> None:
        self.expr(stmt.iter)
        loop, targets = self.loop_of(stmt.iter, stmt.target, stmt, stmt.body)
        before = dict(self.env)
        self.env.update(targets)
        self.in_frame(loop, lambda: self.statements(stmt.body.body))
        self.env = before
        self.forget(set(collect(stmt.body).binds) | set(target_names(stmt.target)))
        if stmt.orelse is not None:
            self.in_frame(_Branch(id(stmt), 1, frozenset({f"#loop{id(stmt)}"})),
                          lambda: self.statements(stmt.orelse.body.body))

    def try_statement(self, stmt) -> None:
        handled = bool(stmt.handlers)
        self.caught += handled
        self.statements(stmt.body.body)
        self.caught -= handled
        guard = frozenset({f"#try{id(stmt)}"})
        for arm, handler in enumerate(stmt.handlers):
            self.in_frame(_Branch(id(stmt), arm, guard), lambda h=handler: self.statements(h.body.body))
        if stmt.orelse is not None:
            self.in_frame(_Branch(id(stmt), len(stmt.handlers), guard),
                          lambda: self.statements(stmt.orelse.body.body))
        self.forget(collect(stmt).binds)
        if stmt.finalbody is not None:
            self.statements(stmt.finalbody.body.body)

    def in_frame(self, frame, run: Callable[[], None]) -> None:
        self.frames.append(frame)
        try:
            run()
        finally:
            self.frames.pop()

    def small(self, small: cst.BaseSmallStatement) -> None:
        kind = type(small)
        if kind is cst.Assign:
            self.expr(small.value)
            for target in small.targets:
                self.target(target.target)
            value = self.module_value(small.value)
            for target in small.targets:
                if type(target.target) is cst.Name and value is not None:
                    self.env[target.target.value] = value
        elif kind is cst.AugAssign:
            self.target(small.target, load=True)
            self.expr(small.value)
            if type(small.target) is cst.Name:
                self.forget({small.target.value})
        elif kind is cst.AnnAssign:
            if small.value is not None:
                self.expr(small.value)
            self.target(small.target)
        elif kind in (cst.Expr, cst.Return):
            if small.value is not None:
                self.expr(small.value)
        else:
            for child in children(small):
                if isinstance(child, cst.BaseExpression):
                    self.expr(child)
            self.forget(collect(small).binds)

    def target(self, target: cst.BaseExpression, load: bool = False) -> None:
        """An assignment target: its receiver and index are read, then a module value is
        written (`layers[3].output[:] = ...`, `layer.output = ...`)."""
        kind = type(target)
        if kind is cst.Name:
            if not load:
                self.forget({target.value})
            return
        if kind in (cst.Tuple, cst.List):
            for element in target.elements:
                self.target(element.value, load)
            return
        if kind is cst.StarredElement:
            self.target(target.value, load)
            return
        if kind is cst.Attribute and target.attr.value in _HOOKS:
            self.expr(target.value)
            self.site(target)
            return
        self.expr(target)

    # -- expressions ------------------------------------------------------------------
    def expr(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind is cst.Attribute:
            self.expr(node.value)
            if node.attr.value in _HOOKS:
                self.site(node)
        elif kind is cst.Call:
            self.expr(node.func)
            for arg in node.args:
                self.expr(arg.value)
        elif kind is cst.IfExp:
            self.expr(node.test)
            names = frozenset(_reads(node.test))
            self.in_frame(_Branch(id(node), 0, names), lambda: self.expr(node.body))
            self.in_frame(_Branch(id(node), 1, names), lambda: self.expr(node.orelse))
        elif kind is cst.BooleanOperation:
            self.expr(node.left)
            self.in_frame(_Branch(id(node), 0, frozenset(_reads(node.left))), lambda: self.expr(node.right))
        elif kind in COMPREHENSIONS:
            self.comprehension(node)
        elif kind is cst.Lambda:
            return  # runs when called, if ever
        elif kind is cst.NamedExpr:
            self.expr(node.value)
            self.forget({code_of(node.target)})
        else:
            for child in children(node):
                self.expr(child)

    def comprehension(self, node) -> None:
        comp = node.for_in
        self.expr(comp.iter)
        if comp.inner_for_in is not None or comp.asynchronous is not None:
            return  # nested clauses: not ordered here
        loop, targets = self.loop_of(comp.iter, comp.target, node, None)
        before = dict(self.env)
        self.env.update(targets)
        elements = (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)

        def body() -> None:
            for condition in comp.ifs:
                self.expr(condition.test)
            names = frozenset().union(*(_reads(c.test) for c in comp.ifs)) if comp.ifs else None
            for element in elements:
                if names is None:
                    self.expr(element)
                else:
                    self.in_frame(_Branch(id(node), 0, names), lambda e=element: self.expr(e))

        self.in_frame(loop, body)
        self.env = before

    def site(self, node: cst.Attribute) -> None:
        path = self.path(node.value)
        if path is None:
            return
        self.sites.append(_Site(node, path, _HOOKS[node.attr.value], tuple(self.frames), self.caught > 0,
                                len(self.sites)))

    # -- values -------------------------------------------------------------------------
    def path(self, expr: cst.BaseExpression) -> tuple | None:
        """The module ``expr`` is, as a path from the model root; None if not a module."""
        kind = type(expr)
        name = dotted_name(expr)
        if name is not None and name == self.root:
            return ()
        if kind is cst.Name:
            value = self.env.get(expr.value) or self.aliases.get(expr.value)
            return value[1] if value is not None and value[0] == "path" else None
        if kind is cst.Attribute:
            if expr.attr.value in _HOOKS or expr.attr.value in ("source", "_module"):
                return None
            base = self.path(expr.value)
            return None if base is None else base + (expr.attr.value,)
        if kind is cst.Subscript:
            base = self.path(expr.value)
            if base is None or not base or base[-1] not in LAYER_LISTS or len(expr.slice) != 1:
                return None
            item = expr.slice[0].slice
            if not isinstance(item, cst.Index):
                return None
            return base + (self.index(item.value),)
        return None

    def index(self, expr: cst.BaseExpression):
        literal = _int_literal(expr)
        if literal is not None:
            return _Lit(literal)
        if type(expr) is cst.Name:
            value = self.env.get(expr.value)
            if value is not None and value[0] == "index":
                return value[1]
        if type(expr) is cst.BinaryOperation and type(expr.left) is cst.Name:
            offset = _int_literal(expr.right)
            value = self.env.get(expr.left.value)
            if offset is not None and value is not None and value[0] == "index" and isinstance(value[1], _Var):
                sign = {cst.Add: 1, cst.Subtract: -1}.get(type(expr.operator))
                if sign is not None:
                    var = value[1]
                    return _Var(var.loop, var.offset + sign * offset, var.count)
        return self.opaque_of(expr)

    def opaque_of(self, expr: cst.BaseExpression):
        """The same code means the same index while none of its names is bound again."""
        key = ("code", code_of(expr))
        value = self.env.get(key)
        if value is None:
            value = self.env[key] = ("index", _Opaque(next(self.serial), code_of(expr)), frozenset(_reads(expr)))
        return value[1]

    def module_value(self, expr: cst.BaseExpression) -> tuple | None:
        path = self.path(expr)
        return None if path is None else ("path", path)

    def forget(self, names) -> None:
        """``names`` are bound anew: what was known of them (and of code reading them) goes."""
        names = set(names)
        if not names:
            return
        for key in list(self.env):
            if isinstance(key, tuple) and self.env[key][2] & names:
                del self.env[key]
        for name in names:
            self.env[name] = ("gone", None)  # (not the alias of that name outside the block)

    def loop_of(self, iterable, target, node, body) -> tuple[_Loop, dict]:
        """The loop over ``iterable`` and what its target names are in each iteration."""
        irregular = body is not None and bool(find_nodes(body, lambda n: type(n) in _TERMINAL))
        names = frozenset(_reads(iterable))
        start = 0
        element = iterable
        count_name = None
        if (type(iterable) is cst.Call and dotted_name(iterable.func) == "enumerate" and iterable.args
                and type(target) is cst.Tuple and len(target.elements) == 2):
            element = iterable.args[0].value
            for arg in iterable.args[1:]:
                value = _int_literal(arg.value)
                if value is None:
                    element = None
                else:
                    start = value
            count_name = target.elements[0].value
            target = target.elements[1].value
        domain, layer_list = self.domain(element) if element is not None else (None, None)
        loop = _Loop(node, domain, irregular, names)
        targets: dict = {}
        if domain is None:
            for name in target_names(target) + (target_names(count_name) if count_name is not None else []):
                targets[name] = ("index", _Opaque(next(self.serial), name))  # each iteration: not known
            layers = self.path(element.value if type(element) is cst.Subscript else element) \
                if element is not None else None
            if type(target) is cst.Name and layers and layers[-1] in LAYER_LISTS:  # some of the layers
                targets[target.value] = ("path", layers + (_Opaque(next(self.serial), target.value),))
            return loop, targets
        if count_name is not None and type(count_name) is cst.Name:
            targets[count_name.value] = ("index", _Var(loop, start, count=True))
        if type(target) is cst.Name:
            if layer_list is not None:
                targets[target.value] = ("path", layer_list + (_Var(loop),))
            else:
                targets[target.value] = ("index", _Var(loop))
        return loop, targets

    def domain(self, expr) -> tuple[Callable[[int], list[int]] | None, tuple | None]:
        """The values a loop over ``expr`` takes (a function of the layer count) and, for a
        loop over decoder layers, the path of their list."""
        kind = type(expr)
        if kind is cst.Call and dotted_name(expr.func) == "range" and 1 <= len(expr.args) <= 3:
            if any(arg.keyword is not None or arg.star for arg in expr.args):
                return None, None
            bounds = [self.count(arg.value) for arg in expr.args]
            if any(b is None for b in bounds) or (len(bounds) == 3 and bounds[2](2) == 0):
                return None, None
            return (lambda n, bounds=bounds: list(range(*[b(n) for b in bounds]))), None
        if kind is cst.Call and dotted_name(expr.func) == "reversed" and len(expr.args) == 1:
            inner, layer_list = self.domain(expr.args[0].value)
            return (None, None) if inner is None else ((lambda n: inner(n)[::-1]), layer_list)
        if kind in (cst.List, cst.Tuple):
            values = [_int_literal(e.value) if type(e) is cst.Element else None for e in expr.elements]
            if not values or any(v is None for v in values):
                return None, None
            return (lambda n, values=values: list(values)), None
        path = self.path(expr)
        if path is not None and path and path[-1] in LAYER_LISTS:
            return (lambda n: list(range(n))), path
        if kind is cst.Subscript and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice):
            path = self.path(expr.value)
            if path is None or not path or path[-1] not in LAYER_LISTS:
                return None, None
            part = expr.slice[0].slice
            bounds = [None if b is None else self.count(b) for b in (part.lower, part.upper, part.step)]
            given = [b for b, x in zip(bounds, (part.lower, part.upper, part.step)) if x is not None]
            if any(b is None for b in given) or (bounds[2] is not None and bounds[2](2) == 0):
                return None, None
            return (lambda n, b=bounds: list(range(n))[slice(*[x(n) if x else None for x in b])]), path
        return None, None

    def count(self, expr) -> Callable[[int], int] | None:
        """An integer as a function of the layer count: literals, `len(<layers>)`,
        `<model>.config.num_hidden_layers`, and sums and differences of those."""
        literal = _int_literal(expr)
        if literal is not None:
            return lambda n: literal
        kind = type(expr)
        if kind is cst.Call and dotted_name(expr.func) == "len" and len(expr.args) == 1:
            path = self.path(expr.args[0].value)
            if path and path[-1] in LAYER_LISTS:
                return lambda n: n
            return None
        name = dotted_name(expr)
        if name is not None and name.startswith(self.root + ".config.") and \
                name.rpartition(".")[2] in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
            return lambda n: n
        if kind is cst.BinaryOperation and type(expr.operator) in (cst.Add, cst.Subtract):
            left, right = self.count(expr.left), self.count(expr.right)
            if left is None or right is None:
                return None
            sign = 1 if type(expr.operator) is cst.Add else -1
            return lambda n: left(n) + sign * right(n)
        return None


def _aliases(block: Block, facts: Facts) -> dict[str, tuple]:
    """Names bound once to one of the model's modules, at module level or in the
    function of the block, before it (`layers = model.model.layers`)."""
    found: dict[str, tuple] = {}
    function = block.stmt.function
    own = function_locals(function) if function is not None else frozenset()
    root = block.model
    for name, bindings in facts.bindings.items():
        if len(bindings) != 1:
            continue
        info, value = bindings[0]
        if info.function is not function and (info.ancestors or name in own):
            continue  # bound in another function, or a local of this one that shadows it
        path = _plain_path(value, root)
        if path is not None and path:
            found[name] = ("path", path)
    return found


def _plain_path(expr, root: str) -> tuple | None:
    if dotted_name(expr) == root:
        return ()
    if type(expr) is cst.Attribute:
        base = _plain_path(expr.value, root)
        return None if base is None else base + (expr.attr.value,)
    if type(expr) is cst.Subscript and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        base = _plain_path(expr.value, root)
        index = _int_literal(expr.slice[0].slice.value)
        if base and base[-1] in LAYER_LISTS and index is not None:
            return base + (_Lit(index),)
    return None


def _int_literal(expr) -> int | None:
    if type(expr) is cst.Integer:
        return int(expr.value, 0)
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and type(expr.expression) is cst.Integer:
        return -int(expr.expression.value, 0)
    return None


def _reads(node: cst.CSTNode) -> set[str]:
    return set(collect(node).reads)


def _backward(stmt: cst.CSTNode) -> bool:
    return bool(find_nodes(stmt, lambda n: type(n) is cst.Attribute and n.attr.value == "backward"))


def _stops(small: cst.BaseSmallStatement) -> bool:
    """`tracer.stop()`: the forward pass ends there."""
    return (type(small) is cst.Expr and type(small.value) is cst.Call and type(small.value.func) is cst.Attribute
            and small.value.func.attr.value == "stop")


# -- the pairs ----------------------------------------------------------------------------

_LAYER_COUNTS = (2, 3, 4, 5, 7, 12, 32)  # of a model whose layer count is not known
_MAX_EVALUATIONS = 4096


@dataclass
class _Finding:
    early: _Site
    late: _Site
    where: str  # nnsight's name of the hook it asked for too late
    certain: bool  # both reads run whenever the scope does
    next_iteration: bool  # ``late`` runs in the iteration after ``early``'s


def _report_out_of_order(scope: _Scope, facts: Facts, context: Context) -> None:
    walk = _Walk(scope, facts)
    walk.statements(scope.statements)
    sites = _known_sites(walk.sites, scope.block, facts)
    if not sites:
        return
    counts = _layer_counts(scope.block, facts)
    found: list[_Finding] = []
    seen: set[int] = set()
    for late in sites:
        if late.caught:
            continue  # the scope catches the error itself
        for early in sites:
            if early is late and not any(isinstance(f, _Loop) for f in late.frames):
                continue
            witness = _out_of_order(early, late, counts)
            if witness is not None and id(late) not in seen:
                seen.add(id(late))
                found.append(_Finding(early, late, witness[0], witness[1], early is late or early.order > late.order))
                break
    if not found:
        return
    first, others = found[0], found[1:]
    late, early = code_of(first.late.node), code_of(first.early.node)
    when = "" if first.certain else " (when both run)"
    more = f" (and {len(others)} more read{'s' if len(others) != 1 else ''} like it in this forward pass)" \
        if others else ""
    if first.next_iteration:
        reading = f"`{late}` of the loop's next iteration is read after `{early}` of this one"
    else:
        reading = f"`{late}` is read after `{early}`"
    message = (f"{reading} in one forward pass, but the model computes it first{when}{more}: "
               f"nnsight 0.5+ raises {OUT_OF_ORDER.format(where=first.where)}")
    _report(context, first.late.node, message,
            "read the modules in the order the model runs them (or in another invoke or trace)",
            uses=(first.early.node,))


def _known_sites(sites: list[_Site], block: Block, facts: Facts) -> list[_Site]:
    """The reads of modules the architecture orders, on paths this model has."""
    info = facts.models.get(block.model)
    layout = None
    if info is not None and info.repo_id:
        dims = dims_for(info.repo_id)
        if dims.family != "unknown":
            layout = tuple(dims.module_paths.layers.split("."))
    kept = []
    for site in sites:
        if layout is not None and len(site.path) >= 2 and site.path[0] != layout[0] and \
                isinstance(site.path[1], str) and site.path[1] in LAYER_LISTS:
            continue  # `transformer.h` of a Llama: an AttributeError, not a read
        if layout is not None and len(site.path) >= 2 and site.path[0] == layout[0] and \
                isinstance(site.path[1], str) and site.path[1] in LAYER_LISTS and site.path[1] != layout[1]:
            continue
        kept.append(site)
    return kept


def _layer_counts(block: Block, facts: Facts) -> tuple[int, ...]:
    info = facts.models.get(block.model)
    if info is not None and info.repo_id:
        dims = dims_for(info.repo_id)
        if dims.known:
            return (dims.n_layers,)
    return _LAYER_COUNTS


def _out_of_order(early: _Site, late: _Site, counts: tuple[int, ...]) -> tuple[str, bool] | None:
    """(nnsight's name of the hook ``late`` asks for, whether both reads run whenever the
    scope does) when ``late`` — read after ``early`` (later in the code, or in the next
    iteration of a loop around both) — asks for a hook the model passed when it served
    ``early``, for every layer count the model may have; else None."""
    shared = 0
    while shared < min(len(early.frames), len(late.frames)) and _same(early.frames[shared], late.frames[shared]):
        shared += 1
    carried = None
    if early is late or early.order > late.order:  # only in a later iteration of a loop around both
        carried = next((f for f in reversed(early.frames[:shared]) if isinstance(f, _Loop)), None)
        if carried is None or carried.domain is None or carried.irregular:
            return None
        if not (_runs_each_iteration(early, carried) and _runs_each_iteration(late, carried)):
            return None
    elif shared < len(early.frames) and shared < len(late.frames):
        a, b = early.frames[shared], late.frames[shared]
        if isinstance(a, _Branch) and isinstance(b, _Branch) and a.node_id == b.node_id:
            return None  # two arms of one condition
    if _guard_names(early.frames[shared:]) & _guard_names(late.frames[shared:]):
        return None  # conditions that may depend on each other
    certain = not _guard_names(early.frames) and not _guard_names(late.frames)
    shared_loops = [f for f in early.frames[:shared] if isinstance(f, _Loop)]
    early_loops = [f for f in early.frames[shared:] if isinstance(f, _Loop)]
    late_loops = [f for f in late.frames[shared:] if isinstance(f, _Loop)]
    verdicts = []
    for n in counts:
        verdict = _decide(early, late, n, shared_loops, early_loops, late_loops, carried)
        if verdict is None:
            continue  # a model of n layers cannot run this code (an index out of range)
        if verdict is False:
            return None
        verdicts.append(verdict)
    if not verdicts:
        return None
    where = verdicts[0] if len(set(verdicts)) == 1 else _generic_where(verdicts[0])
    return where, certain


def _same(a, b) -> bool:
    return a is b or (isinstance(a, _Branch) and a == b)


def _guard_names(frames) -> frozenset[str]:
    """What the conditions among ``frames`` read (a loop of unknown length is one)."""
    names: set[str] = set()
    for frame in frames:
        if isinstance(frame, _Branch):
            names |= frame.names
        elif frame.domain is None:
            names |= frame.names | {f"#loop{id(frame)}"}
    return frozenset(names)


def _uses(site: _Site, loop: _Loop) -> bool:
    return any(isinstance(item, _Var) and item.loop is loop for item in site.path)


def _decide(early: _Site, late: _Site, n: int, shared: list[_Loop], early_only: list[_Loop],
            late_only: list[_Loop], carried: _Loop | None):
    """For a model of ``n`` layers: the hook's name when ``late`` is surely out of order,
    False when not, None when such a model cannot run this code.

    A loop whose every iteration runs the read counts if one iteration puts it out of
    order; a loop that may skip it in some iterations, only if all do."""
    domains = {}
    for loop in shared + early_only + late_only:
        if loop.domain is not None:
            values = loop.domain(n)
            if not values:
                return False  # the loop does not run
            domains[id(loop)] = values
    if carried is not None and len(domains[id(carried)]) < 2:
        return False

    def quantifier(loop: _Loop, sites) -> str:
        every = not loop.irregular and all(_runs_each_iteration(site, loop) for site in sites)
        return "any" if every else "all"

    axes = []  # (loop, the reads whose iteration it is, quantifier)
    for loop in shared:
        if loop.domain is not None and (loop is carried or _uses(early, loop) or _uses(late, loop)):
            axes.append((loop, "both", "any" if loop is carried else quantifier(loop, (early, late))))
    for loop in early_only:
        if loop.domain is not None and _uses(early, loop):
            axes.append((loop, "early", quantifier(loop, (early,))))
    for loop in late_only:
        if loop.domain is not None and _uses(late, loop):
            axes.append((loop, "late", quantifier(loop, (late,))))
    ranges = [range(len(domains[id(loop)]) - (1 if loop is carried else 0)) for loop, _, _ in axes]
    total = 1
    for r in ranges:
        total *= len(r)
    if total > _MAX_EVALUATIONS:
        return False
    alls = [i for i, axis in enumerate(axes) if axis[2] == "all"]
    anys = [i for i, axis in enumerate(axes) if axis[2] == "any"]
    witness = None
    for outer in itertools.product(*[ranges[i] for i in alls]):
        found = None
        for inner in itertools.product(*[ranges[i] for i in anys]):
            positions = dict(zip(alls, outer)) | dict(zip(anys, inner))
            result = _compare(early, late, n, axes, positions, domains, carried)
            if result is None:
                return None
            if result is not False:
                found = result
                break
        if found is None:
            return False
        witness = witness or found
    return witness


def _runs_each_iteration(site: _Site, loop: _Loop) -> bool:
    """Does every iteration of ``loop`` run ``site`` (no condition between them)?"""
    index = next(i for i, f in enumerate(site.frames) if f is loop)
    return not any(isinstance(f, _Branch) or (isinstance(f, _Loop) and (f.domain is None or f.irregular))
                   for f in site.frames[index + 1:])


def _compare(early: _Site, late: _Site, n: int, axes, positions: dict, domains: dict, carried):
    """The hook's name when ``late`` comes before ``early`` for these iterations; False when
    not; None when an index is out of range for ``n`` layers."""
    values_early: dict[int, tuple[int, int]] = {}
    values_late: dict[int, tuple[int, int]] = {}
    for i, (loop, which, _) in enumerate(axes):
        p = positions[i]
        if which in ("both", "early"):
            values_early[id(loop)] = (p, domains[id(loop)][p])
        if which in ("both", "late"):
            q = p + 1 if loop is carried else p
            values_late[id(loop)] = (q, domains[id(loop)][q])
    a = _concrete(early.path, n, values_early)
    b = _concrete(late.path, n, values_late)
    if a is None or b is None:
        return None
    order = forward_order(b, late.hook, a, early.hook)
    if order is None or order >= 0:
        return False
    name = "model" + "".join(f".{item}" for item in b)
    return f"{name}.{'output' if late.hook == OUTPUT else 'input'}.i0"


def _concrete(path: tuple, n: int, values: dict) -> tuple | None:
    out = []
    for i, item in enumerate(path):
        if isinstance(item, (_Lit, _Var)):
            if isinstance(item, _Lit):
                value = item.value
            else:
                chosen = values.get(id(item.loop))
                if chosen is None:
                    out.append(("var", id(item.loop)))  # same loop, same iteration: the same index
                    continue
                value = (chosen[0] if item.count else chosen[1]) + item.offset
            in_list = i > 0 and path[i - 1] in LAYER_LISTS
            if in_list:
                if value < 0:
                    value += n
                if not 0 <= value < n:
                    return None
            out.append(value)
        else:
            out.append(item)
    return tuple(out)


def _generic_where(where: str) -> str:
    """The hook's name with its layer number left out (it depends on the layer count)."""
    parts = where.split(".")
    return ".".join("<i>" if part.isdigit() else part for part in parts)


# ---------------------------------------------------------------------------------------
# Names bound in a block and read after it without a save
# ---------------------------------------------------------------------------------------


@dataclass
class Unsaved:
    """A name the outermost block binds and code after it reads, unsaved."""

    name: str
    bindings: list[cst.CSTNode]  # where the block binds it (a statement or a `for` target)
    read: cst.CSTNode  # the first read after the block
    unbound: bool  # nothing binds it outside the block: the read raises
    in_function: bool  # the read is a function's own (not in a block): UnboundLocalError
    caught: bool = False  # the read is in a `try`: the script may mean to handle its failure
    stale: bool = False  # surely bound before the block: the read gets that value
    fix: dict[int, cst.BaseExpression] | None = None  # id(value) -> the value saved
    why_not: str = ""


# kinds of values, for "may the block save this very object?"
_FRESH, _SCALAR, _ENVOY, _UNKNOWN = "fresh", "scalar", "envoy", "unknown"
_SCALAR_CALLS = frozenset({"len", "int", "float", "bool", "round", "abs", "str", "repr", "hash", "ord", "chr"})
_FRESH_CALLS = frozenset({"list", "dict", "set", "sorted", "torch.zeros", "torch.ones", "torch.tensor",
                          "torch.stack", "torch.cat", "torch.empty", "torch.zeros_like", "torch.ones_like",
                          "torch.arange", "torch.randn", "torch.rand", "defaultdict", "collections.defaultdict"})
_SIZES = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"})
# tensor methods that may return the tensor itself (then a save of the result saves it)
_SELF_RETURNING = frozenset({"to", "cpu", "cuda", "float", "half", "double", "bfloat16", "long", "int", "bool",
                             "type", "contiguous", "type_as", "save", "requires_grad_", "retain_grad",
                             "numpy", "flatten", "view_as", "expand_as"})


def unsaved_names(block: Block, facts: Facts, pre05: bool = False) -> list[Unsaved]:
    """The names ``block`` (outermost) binds and the code after it reads though no saved
    value of the block can be theirs: after the block they are unbound, or hold what they
    held before it."""
    scope = _scope_of(block, facts)
    if scope is None:
        return []
    after = _after(block, facts)
    if not after:
        return []
    bindings = _bindings(block.node.body)
    if not bindings:
        return []
    nnsight_withs = frozenset(id(b.node) for b in facts.blocks) | frozenset(
        id(w) for b in facts.blocks for w in _invokes(b))
    reads = _reads_after(after, set(bindings), nnsight_withs)
    if not reads:
        return []
    saves = [unsave(call) for call in find_nodes(block.node.body, is_save_call)]
    saved_names = set(block.saved_names) | {s.value for s in saves if type(s) is cst.Name}
    tensors = _tensor_names(bindings, facts)
    save_kinds = {_kind_of_saved(s, block, bindings, tensors, facts) for s in saves}
    if _calls_saving_helpers(block, facts):
        save_kinds.add(_UNKNOWN)
    declared = _declared(block.node.body)
    outside, star = _bound_outside(block, scope, facts)
    found = []
    for name, sites in bindings.items():
        if name not in reads or name in saved_names or name in declared:
            continue
        if any(kind not in ("assign", "for", "aug", "target") for kind, _, _ in sites):
            continue  # imports, definitions, `with ... as`, `except ... as`: left alone
        if pre05 and _migrate_reports(name, sites, after):
            continue  # migrate-api speaks of it
        kinds = {_binding_kind(kind, value, facts) for kind, _, value in sites}
        if not _surely_unsaved(kinds, save_kinds):
            continue
        read, caught, in_block = reads[name]
        unbound = not star and name not in outside and not hasattr(builtins, name)
        # (a block's code is compiled on its own: a local it reads is looked up as a global)
        local = isinstance(scope, cst.FunctionDef) and not in_block
        item = Unsaved(name, [node for _, node, _ in sites], read, unbound, local, caught,
                       stale=not unbound and bound_before(facts, block.stmt, name))
        item.fix, item.why_not = _fix(name, sites, facts)
        found.append(item)
    return found


def _scope_of(block: Block, facts: Facts) -> cst.CSTNode | None:
    """The function (or module) whose names the block binds; None in a class body."""
    for node in reversed(block.stmt.ancestors):
        if isinstance(node, cst.FunctionDef):
            return node
        if isinstance(node, cst.ClassDef):
            return None
    return facts.module


def _after(block: Block, facts: Facts) -> list[cst.BaseStatement]:
    """The statements that run after the block, in order, up to the end of its function
    (or module): the rest of its suite, then of each enclosing statement's (a `try`'s
    `else` and `finally`, a loop's `else` included)."""
    out: list[cst.BaseStatement] = []
    info: StmtInfo | None = block.stmt
    while info is not None:
        out.extend(info.suite.body[info.index + 1:])
        if not info.ancestors:
            break
        parent = info.ancestors[-1]
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(parent, (cst.Try, cst.TryStar)):
            for part in (parent.orelse, parent.finalbody):
                if part is not None:
                    out.extend(part.body.body)
        elif isinstance(parent, (cst.For, cst.While)) and parent.orelse is not None:
            out.extend(parent.orelse.body.body)
        info = facts.statements.get(id(parent))
    return out


def _bindings(body: cst.CSTNode) -> dict[str, list[tuple[str, cst.CSTNode, cst.BaseExpression | None]]]:
    """name -> (kind, the binding statement or target, the value bound) for each place the
    block binds it: "assign" (`x = v`, `x: T = v`), "aug" (`x += v`), "for" (a loop
    target), "target" (a name inside a tuple target or a walrus: its value is not known),
    "other" (imports, definitions, `with`/`except ... as`, `del`, `global`)."""
    found: dict[str, list] = {}
    _visit_bindings(body, found)
    return found


def _visit_bindings(node: cst.CSTNode, found: dict[str, list]) -> None:
    """:func:`_bindings`' walk (a function of its own: a nested recursive one is a
    reference cycle per call, left to the garbage collector)."""

    def add(name, kind, node, value=None):
        found.setdefault(name, []).append((kind, node, value))

    kind = type(node)
    if kind in (cst.FunctionDef, cst.ClassDef):
        add(node.name.value, "other", node)
        return
    if kind is cst.Lambda:
        return
    if kind in COMPREHENSIONS:
        for walrus in find_nodes(node, lambda n: type(n) is cst.NamedExpr):
            for name in target_names(walrus.target):
                add(name, "target", walrus)
        return
    if kind is cst.Assign:
        for target in node.targets:
            if type(target.target) is cst.Name and len(node.targets) == 1:
                add(target.target.value, "assign", node, node.value)
            else:
                for name in target_names(target.target):
                    add(name, "target", node)
    elif kind is cst.AnnAssign and node.value is not None and type(node.target) is cst.Name:
        add(node.target.value, "assign", node, node.value)
    elif kind is cst.AugAssign and type(node.target) is cst.Name:
        add(node.target.value, "aug", node)
    elif kind is cst.For:
        for name in target_names(node.target):
            add(name, "for" if type(node.target) is cst.Name else "target", node.target, node.iter)
    elif kind is cst.NamedExpr:
        for name in target_names(node.target):
            add(name, "target", node)
    elif kind in (cst.Import, cst.ImportFrom, cst.Del):
        for name in collect(node).binds:
            add(name, "other", node)
    elif kind is cst.WithItem and node.asname is not None:
        for name in target_names(node.asname.name):
            add(name, "other", node)
    elif kind is cst.ExceptHandler and node.name is not None:
        for name in target_names(node.name.name):
            add(name, "other", node)
    for child in children(node):
        _visit_bindings(child, found)


def _declared(body: cst.CSTNode) -> set[str]:
    return {name.name.value for node in find_nodes(body, lambda n: type(n) in (cst.Global, cst.Nonlocal))
            for name in node.names}


def _reads_after(after: list[cst.BaseStatement], names: set[str],
                 blocks: frozenset[int]) -> dict[str, tuple[cst.CSTNode, bool, bool]]:
    """name -> (its first read, whether a `try` around it catches errors, whether it is in
    an nnsight block of ``blocks`` (ids)) for the names of ``names`` that the statements
    read on some path before anything may bind them again. Reads in functions, lambdas and
    classes defined there do not count (they run when called, if ever); a statement the
    walk does not follow (`match`) ends it."""
    found: dict[str, tuple[cst.CSTNode, bool, bool]] = {}
    _sequence(after, set(names), (False, False, blocks), found)
    return found


def _sequence(statements, live: set[str], where: tuple, found: dict) -> bool:
    """Reads of ``live`` names in ``statements``, in order, into ``found``; False when the
    walk stopped at a statement it does not follow."""
    live = set(live)
    for stmt in statements:
        if not live - set(found):
            return True
        if not _statement_reads(stmt, live, where, found):
            return False
        live -= set(collect(stmt).binds) if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) \
            else {stmt.name.value}
    return True


def _statement_reads(stmt, live: set[str], where: tuple, found: dict) -> bool:
    """``where``: (in a `try` with handlers, in an nnsight block, the ids of the blocks)."""
    kind = type(stmt)
    caught, in_block, blocks = where

    def read(node: cst.CSTNode, shadow: set[str] = frozenset()) -> None:
        for name, at in collect(node).reads.items():
            if name in live and name not in shadow and name not in found and not _in_lambda(node, at):
                found[name] = (at, caught, in_block)

    def suite(body, names=live, catching=caught) -> bool:
        inside = (catching, in_block or id(stmt) in blocks, blocks)
        return _sequence(body.body if hasattr(body, "body") else body, names, inside, found)

    if kind is cst.SimpleStatementLine:
        names = set(live)
        for small in stmt.body:
            read(small, live - names)
            names -= set(collect(small).binds)
        return True
    if kind in (cst.FunctionDef, cst.ClassDef):
        return True
    if kind is cst.If:
        read(stmt.test)
        if not suite(stmt.body):
            return False
        other = stmt.orelse
        if type(other) is cst.If:
            return _statement_reads(other, live, where, found)
        return other is None or suite(other.body)
    if kind in (cst.For, cst.While):
        read(stmt.iter if kind is cst.For else stmt.test)
        names = live - set(target_names(stmt.target)) if kind is cst.For else live
        if not suite(stmt.body, names):
            return False
        return stmt.orelse is None or suite(stmt.orelse.body)
    if kind is cst.With:
        bound: set[str] = set()
        for item in stmt.items:
            read(item.item)
            if item.asname is not None:
                bound |= set(target_names(item.asname.name))
        return suite(stmt.body, live - bound)
    if kind in (cst.Try, cst.TryStar):
        if not suite(stmt.body, live, caught or bool(stmt.handlers)):
            return False
        for handler in stmt.handlers:
            if handler.type is not None:
                read(handler.type)
            own = set(target_names(handler.name.name)) if handler.name is not None else set()
            if not suite(handler.body, live - own):
                return False
        for part in (stmt.orelse, stmt.finalbody):
            if part is not None and not suite(part.body):
                return False
        return True
    return False  # `match` and anything else: not followed


def _in_lambda(statement: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is ``node`` inside a lambda (or a function or class defined) in ``statement``?"""
    for holder in find_nodes(statement, lambda n: type(n) in (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
        if find_nodes(holder, lambda n: n is node):
            return True
    return False


def _bound_outside(block: Block, scope: cst.CSTNode, facts: Facts) -> tuple[set[str], bool]:
    """Names bound in ``scope`` outside the block (parameters and `global` names included),
    and whether a star import may bind any."""
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    holder = _statement_holding(block, scope, facts)
    # the scope's statements one by one (their names are cached per statement), the one
    # holding the block without the block's body: as collect(body, skip=...) would find
    names: set[str] = set()
    for stmt in body.body:
        use = collect(stmt, skip=(block.node.body,)) if stmt is holder else collect(stmt)
        names.update(use.binds)
    if isinstance(scope, cst.FunctionDef):
        names |= {p.name.value for p in all_params(scope.params)}
        names |= {n.name.value for g in find_nodes(body, lambda n: type(n) in (cst.Global, cst.Nonlocal))
                  for n in g.names}
    else:  # functions that assign a module name
        names |= facts.once("05:global names", lambda: frozenset(
            n.name.value for g in find_nodes(facts.module, lambda n: type(n) is cst.Global) for n in g.names))
    return names, facts.once("05:star import", lambda: bool(find_nodes(facts.module, lambda n: type(n) is cst.ImportStar)))


def _statement_holding(block: Block, scope: cst.CSTNode, facts: Facts) -> cst.CSTNode:
    """The statement of ``scope``'s own body that holds the block (the block itself, or
    its outermost enclosing statement below the scope)."""
    chain = (*facts.stmt(block.node).ancestors, block.node)
    if isinstance(scope, cst.FunctionDef):
        chain = chain[chain.index(scope) + 1:]
    return chain[0]


def _migrate_reports(name: str, sites, after) -> bool:
    """Pre-0.5 idioms migrate-api reports: `name.value` after the block, a name bound to
    `nnsight.list()` and its kin."""
    for stmt in after:
        if find_nodes(stmt, lambda n: type(n) is cst.Attribute and n.attr.value == "value"
                      and type(n.value) is cst.Name and n.value.value == name):
            return True
    for kind, _, value in sites:
        if type(value) is cst.Call and (dotted_name(value.func) or "").startswith("nnsight."):
            return True
    return False


def _kind(expr: cst.BaseExpression, facts: Facts) -> str:
    """What ``expr`` evaluates to, for identity: a new object (a container, a new tensor),
    a Python scalar (which may be a shared cached object: small ints, short strings), a
    module's value itself, or anything."""
    models = set(facts.models)
    kind = type(expr)
    if kind in (cst.List, cst.Dict, cst.Set, *COMPREHENSIONS):
        return _FRESH
    if kind in (cst.Tuple, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                cst.FormattedString, cst.Comparison):
        return _SCALAR
    if kind is cst.Name and expr.value in ("True", "False", "None"):
        return _SCALAR
    if kind is cst.UnaryOperation:
        return _SCALAR if type(expr.operator) is cst.Not else _UNKNOWN
    if kind is cst.Attribute and expr.attr.value in _HOOKS:
        return _ENVOY
    if kind is cst.Attribute and expr.attr.value in _SIZES:
        return _SCALAR
    if kind is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":
        return _SCALAR  # an int
    if kind is cst.Subscript and is_envoy_tensor(expr, models):
        return _FRESH  # a view: a new tensor object
    if kind is cst.Subscript and _module_value_part(expr):
        return _ENVOY  # an item of a module's value: maybe an object it holds
    if kind is cst.BinaryOperation:
        if is_tensor(expr.left, models, set()) or is_tensor(expr.right, models, set()):
            return _FRESH  # a new tensor
        operands = {_kind(expr.left, facts), _kind(expr.right, facts)}
        if operands == {_SCALAR}:
            return _SCALAR
        if operands <= {_SCALAR, _FRESH}:
            return _FRESH  # (lists, tensors: a new one)
        return _ENVOY if operands <= {_SCALAR, _FRESH, _ENVOY} else _UNKNOWN  # (`t * 1` may be `t`)
    if kind is cst.Call:
        func = expr.func
        name = qualify(func, facts.imports) or ""
        if name in _SCALAR_CALLS:
            return _SCALAR
        if name in _FRESH_CALLS or code_of(func) in _FRESH_CALLS:
            return _FRESH
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in ("item", "size", "dim", "numel", "nelement", "element_size"):
                return _SCALAR
            if method == "tolist":
                return _FRESH
            if method not in _SELF_RETURNING and (is_tensor(expr, models, set()) or (
                    method in TENSOR_METHODS and _kind(func.value, facts) in (_ENVOY, _FRESH))):
                return _FRESH  # a new tensor
    return _UNKNOWN


def _module_value_part(expr: cst.BaseExpression) -> bool:
    while type(expr) is cst.Subscript:
        expr = expr.value
    return type(expr) is cst.Attribute and expr.attr.value in _HOOKS


def _binding_kind(kind: str, value, facts: Facts) -> str:
    if kind == "assign":
        return _kind(value, facts)
    if kind == "for" and type(value) is cst.Call and dotted_name(value.func) == "range":
        return _SCALAR  # an int
    if kind == "for" and _layer_list(value, facts):
        return _FRESH  # a module of the model: no value the block saves
    return _UNKNOWN  # an element of some container, a part of a tuple: may be any object


def _layer_list(expr: cst.BaseExpression, facts: Facts) -> bool:
    """`model.model.layers`, an alias of it, or either `reversed` or sliced."""
    if type(expr) is cst.Call and dotted_name(expr.func) == "reversed" and len(expr.args) == 1:
        expr = expr.args[0].value
    if type(expr) is cst.Subscript and all(isinstance(e.slice, cst.Slice) for e in expr.slice):
        expr = expr.value
    name = dotted_name(expr)
    if name is not None and "." not in name:
        value = facts.constant(name)
        name = dotted_name(value) if value is not None else None
    if name is None or name.rpartition(".")[2] not in LAYER_LISTS:
        return False
    head = name.split(".")[0]
    return head in facts.models or any(block.model.split(".")[0] == head for block in facts.blocks)


def _kind_of_saved(saved: cst.BaseExpression, block: Block, bindings, tensors: set[str], facts: Facts) -> str:
    """The kind of a saved value; a saved name takes the kinds the block binds it to.
    ``tensors``: the names the block binds only to tensors (:func:`_tensor_names`)."""
    if type(saved) is cst.Name:
        sites = bindings.get(saved.value, [])
        kinds = {_binding_kind(kind, value, facts) for kind, _, value in sites}
        if len(kinds) == 1:
            return kinds.pop()
        return _UNKNOWN
    if _new_tensor(saved, tensors, facts):
        return _FRESH
    return _kind(saved, facts)


def _tensor_names(bindings, facts: Facts) -> set[str]:
    """The names the block binds only to tensors (`logits = model.lm_head.output[:, -1]`)."""
    models = set(facts.models)
    return {name for name, sites in bindings.items()
            if all(kind == "assign" and is_tensor(value, models, set()) for kind, _, value in sites)}


def _new_tensor(expr: cst.BaseExpression, tensors: set[str], facts: Facts) -> bool:
    """An item of a tensor (a view), or what a tensor method that never returns the tensor
    itself gives: a new tensor object, which no name can already hold."""
    models = set(facts.models)
    if type(expr) is cst.Subscript:
        return is_tensor(expr.value, models, tensors)
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        method = expr.func.attr.value
        return method in TENSOR_METHODS and method not in _SELF_RETURNING and is_tensor(expr.func.value, models, tensors)
    return False


#: libraries whose functions save nothing in a block (nnterp's helpers may: not among them)
_SAVE_FREE_LIBRARIES = frozenset({
    "torch", "numpy", "math", "einops", "nnsight", "transformers", "collections", "itertools", "functools",
    "operator", "random", "time", "typing", "pandas", "json", "os", "re", "string", "tqdm", "builtins",
})


def _calls_saving_helpers(block: Block, facts: Facts) -> bool:
    """May a call in the block save a value out of sight: a function or method of this file
    that saves, a function of a module of yours (or of nnterp), or a function the code
    does not define at all (a parameter, a star import)?"""
    functions = {fn.name.value: fn for fn in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef)}
    savers = {name for name, fn in functions.items() if find_nodes(fn, is_save_call)}
    for call in find_nodes(block.node.body, lambda n: type(n) is cst.Call):
        func = call.func
        if is_save_call(call):
            continue
        name = dotted_name(func)
        root = name.split(".")[0] if name is not None else None
        if type(func) is cst.Name:
            if name in savers:
                return True
            if name in functions or name in facts.models or hasattr(builtins, name):
                continue
            if root in facts.imports and facts.imports[root].split(".")[0] in _SAVE_FREE_LIBRARIES:
                continue
            return True  # a function of your modules, or one the file does not define
        if type(func) is cst.Attribute:
            if func.attr.value in savers:
                return True
            if root in facts.imports and facts.imports[root].split(".")[0] not in _SAVE_FREE_LIBRARIES:
                return True  # `helpers.grab(...)`
    return False


def _surely_unsaved(kinds: set[str], save_kinds: set[str]) -> bool:
    """Can no value the block saves be the object the name is bound to? (nnsight sends
    back every name whose value *is* a saved object.) A new object (a container, a new
    tensor) is none of them: what the block saves is either made by another expression
    or reached through a name, an item or a call, which counts as anything. A Python
    scalar may be a shared object (a small int, a short string) and so may be a saved
    scalar; a module's value read twice is one tensor."""
    if not save_kinds:
        return True  # the block saves nothing: nothing comes back
    if _UNKNOWN in kinds or _UNKNOWN in save_kinds:
        return False
    return not (kinds & save_kinds & {_SCALAR, _ENVOY})


def _fix(name: str, sites, facts: Facts) -> tuple[dict[int, cst.BaseExpression] | None, str]:
    """The values to save (`x = v` → `x = v.save()` / `x = nnsight.save(v)`), or why not."""
    if any(kind != "assign" for kind, _, _ in sites):
        return None, (f"`{name}` is also bound by a loop, a tuple or an augmented assignment; save it where "
                      "the block has its final value (`nnsight.save(...)`)")
    models = set(facts.models)
    fix = {}
    for _, _, value in sites:
        tensor = is_tensor(value, models, set()) or is_envoy_tensor(value, models) or _kind(value, facts) == _ENVOY
        fix[id(value)] = method_call(value, "save") if tensor else _nnsight_save(value)
    return fix, ""


def _nnsight_save(value: cst.BaseExpression) -> cst.Call:
    if value.lpar and type(value) is not cst.Tuple:
        value = value.with_changes(lpar=[], rpar=[])  # (an argument needs no parentheses of its own)
    return cst.Call(func=cst.Attribute(value=cst.Name("nnsight"), attr=cst.Name("save")), args=[cst.Arg(value=value)])


def _uses_nnsight_save(value: cst.BaseExpression) -> bool:
    return type(value) is cst.Call and dotted_name(value.func) == "nnsight.save"


class _Saves(cst.CSTTransformer):
    def __init__(self, saves: dict[int, cst.BaseExpression], on_path: set[int]) -> None:
        self.saves = saves
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path and id(node) not in self.saves

    def on_leave(self, original, updated):
        return self.saves.get(id(original), updated)


Nnsight05Failures.cases = (
    Case(
        name="a name read after the block is saved where the block binds it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    hidden = model.transformer.h[5].output[0, -1] * 2
    n_tokens = model.lm_head.output.shape[1]
print(hidden.norm(), n_tokens)
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    hidden = (model.transformer.h[5].output[0, -1] * 2).save()
    n_tokens = nnsight.save(model.lm_head.output.shape[1])
print(hidden.norm(), n_tokens)
""",
    ),
    Case(
        name="a name that held a value before the block (with --unsafe-fixes)",
        unsafe_fixes=True,
        before="""\
import nnsight
from nnsight import LanguageModel


def top_token(model, prompt):
    token = -1
    with model.trace(prompt, remote=True):
        token = model.lm_head.output[0, -1].argmax().item()
    return token


model = LanguageModel("meta-llama/Llama-3.1-8B")
print(top_token(model, "The Eiffel Tower is in"))
""",
        after="""\
import nnsight
from nnsight import LanguageModel


def top_token(model, prompt):
    token = -1
    with model.trace(prompt, remote=True):
        token = nnsight.save(model.lm_head.output[0, -1].argmax().item())
    return token


model = LanguageModel("meta-llama/Llama-3.1-8B")
print(top_token(model, "The Eiffel Tower is in"))
""",
    ),
    Case(
        name="a name that held a value before the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
pattern = "unknown"
with model.trace("hello", remote=True):
    hidden = model.transformer.h[0].output.save()
    pattern = "transformer.h"
print(pattern, hidden.shape)
""",
        reason="still holds the value it had before the block",
    ),
    Case(
        name="a loop variable of the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    norms = list().save()
    for layer in model.transformer.h:
        norms.append(layer.output.norm())
print(len(norms), layer)
""",
        reason="save it where the block has its final value",
    ),
    Case(
        name="`return` in the body of a trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def last_logits(prompt):
    with model.trace(prompt, remote=True):
        return model.lm_head.output[0, -1].save()
""",
        reason="SyntaxError: 'return' outside function",
    ),
    Case(
        name="a body that starts with `try:`",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    try:
        hidden = model.transformer.h[0].output.save()
    except AttributeError:
        hidden = model.model.layers[0].output.save()
""",
        reason="ValueError: A traced `with` block cannot start with `try:`",
    ),
    Case(
        name="the LM head read before a layer",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output[0, -1].save()
    hidden = model.model.layers[16].output[0, -1].save()
""",
        reason="OutOfOrderError: 'model.model.layers.16.output.i0' was requested but the model already ran past it",
    ),
    Case(
        name="the layers read backwards",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    hiddens = [layer.output[0, -1].save() for layer in reversed(model.model.layers)]
""",
        reason="OutOfOrderError: 'model.model.layers.30.output.i0'",
    ),
    Case(
        name="a layer's output read before its input",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    updates = list().save()
    for layer in model.transformer.h:
        updates.append((layer.output - layer.input).norm())
""",
        reason="OutOfOrderError: 'model.transformer.h.0.input.i0'",
    ),
    Case(
        name="reads in the model's order, reads in other invokes, saved names",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
layers = model.model.layers
with model.session(remote=True):
    with model.trace() as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            logits = model.lm_head.output[0, -1]
        with tracer.invoke("The Colosseum is in"):
            first = model.model.embed_tokens.output[0, -1]
            for layer in layers:
                norm = layer.input.norm() + layer.self_attn.output[0].norm() + layer.mlp.output.norm()
            last = layers[-1].output[0, -1]
            final = model.model.norm.output
            other = model.lm_head.output[0, -1]
    difference = (logits - other).norm().save()
print(difference)
""",
    ),
)

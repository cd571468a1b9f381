"""The cost walk's statements: the script run in order on the client.

:class:`StatementWalk` is the part of :class:`ndif_opt.cost.walker.Walker` that walks
statements (as mypy's checker does, its expressions left to
:class:`ndif_opt.cost.walk_expressions.ExpressionWalk`): suites, branches, loops with their
trip counts, assignments that bind names to shapes, containers filled inside a request, and
same-file functions walked at their calls.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import all_params, collect, returned_name, target_names
from ndif_opt.analysis.regions import constant_break, jumps_of_loop
from ndif_opt.analysis.retries import retried_until_success, retry_guard, retry_wrappers, unwrapped_call
from ndif_opt.cost.constants import (
    CALL_DEPTH, GENERATION_LENGTH_KEYWORDS, TRACKED_LENGTH, UNROLL_BUDGET, UNROLL_LIMIT,
)
from ndif_opt.cost.requests import Visit, key_size, round_count, serialized_size, unknown_download
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.walk_requests import Request
from ndif_opt.cost.walk_syntax import (
    LEAVING,
    called_name,
    calls_stop,
    compound,
    has_skip,
    invoke_call,
    is_main_guard,
    names_in,
    same_file_calls,
    walk_nodes,
)
from ndif_opt.cost.walk_values import NO_VALUE, UNBOUND, has_str, is_container, literal_shape, python_shape
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.loops import cst_loop_header, recursion_header
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.positions import short_code as short
from ndif_opt.syntax.rewrite import unsave
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.types import Count, Number, UnknownDownload, UnknownLoop, is_known


# methods that change a list, set or dict in place
_IN_PLACE = frozenset(
    {"append", "extend", "insert", "add", "clear", "sort", "reverse", "pop", "remove", "discard",
     "update", "setdefault", "popitem"}
)


_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "update", "setdefault", "add"})


def _copies_a_sequence(expr: cst.BaseExpression) -> bool:
    """`list(xs)`, `tuple(xs)`, `sorted(xs)`, `xs`: a value as long as ``xs``."""
    if type(expr) in (cst.Name, cst.Attribute):
        return True
    return (type(expr) is cst.Call and dotted_name(expr.func) in ("list", "tuple", "sorted")
            and len(expr.args) >= 1 and expr.args[0].keyword is None)


def _is_display(expr: cst.BaseExpression) -> bool:
    """A list or tuple display without starred elements: its length is known."""
    return type(expr) in (cst.List, cst.Tuple) and all(type(e) is cst.Element for e in expr.elements)


def _pairwise(target: cst.Tuple | cst.List, value: cst.BaseExpression):
    """(target, value) pairs of `a, b = x, y` (displays of one length, no starred part)."""
    if not _is_display(value) or len(value.elements) != len(target.elements):
        return None
    if any(type(e) is not cst.Element for e in target.elements):
        return None
    if set(target_names(target)) & names_in(value):
        return None  # `a, b = b, a`: every value is read before any name is bound
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]


def _is_empty_container(expr: cst.BaseExpression) -> bool:
    if (type(expr) is cst.List or type(expr) is cst.Dict) and not expr.elements:
        return True
    if type(expr) is cst.Call and not expr.args:
        name = dotted_name(expr.func)
        return name in ("list", "dict", "nnsight.list", "nnsight.dict", "set")
    return False


def _is_old_api_container(expr: cst.BaseExpression) -> bool:
    """``nnsight.list()`` (pre-0.5 API): a container that comes back without ``.save()``."""
    return type(expr) is cst.Call and not expr.args and dotted_name(expr.func) in ("nnsight.list", "nnsight.dict")


def _leaves_in_its_first_iteration(loop: cst.For) -> bool:
    """Does the loop's body leave the loop at its own level (`break`, `return`, `raise`
    not under a branch)? Then, unless it raises before, only its first iteration runs."""
    return any(
        type(stmt) is cst.SimpleStatementLine and any(type(s) in (cst.Break, cst.Return, cst.Raise) for s in stmt.body)
        for stmt in loop.body.body
    )


def _binary_of(operator: cst.BaseAugOp) -> cst.BaseBinaryOp:
    mapping = {
        cst.AddAssign: cst.Add, cst.SubtractAssign: cst.Subtract, cst.MultiplyAssign: cst.Multiply,
        cst.DivideAssign: cst.Divide, cst.FloorDivideAssign: cst.FloorDivide, cst.ModuloAssign: cst.Modulo,
        cst.PowerAssign: cst.Power, cst.MatrixMultiplyAssign: cst.MatrixMultiply,
    }  # fmt: skip
    return mapping.get(type(operator), cst.Add)()


class StatementWalk:
    """Statements, walked in order (the walker's state: see Walker.__init__)."""

    def suite(self, statements, times: Number | Count) -> None:
        if self._leaving is not None:
            return  # a `break` or `continue` ran: nothing more of this iteration runs
        for stmt in statements:
            self._ran(stmt, times)
            if self.request is None:  # (inside a request no statement sends one)
                before = self._sent
                self.statement(stmt, times)
                self._visited(stmt, times, self._sent - before)
            else:
                self.statement(stmt, times)
            if self._leaving is not None:
                break  # a `break` or `continue` ran in a branch: the rest of the body does not
            if type(stmt) is cst.SimpleStatementLine and any(type(s) in LEAVING for s in stmt.body):
                if self._exits:
                    exit = next((type(s) for s in stmt.body if type(s) in (cst.Break, cst.Continue)), None)
                    self._leaving = None if exit is None else "break" if exit is cst.Break else "continue"
                break  # what follows `return`, `raise`, `break` or `continue` never runs

    @contextlib.contextmanager
    def _loop_body(self, unrolled: bool):
        """The walk of a loop's body: in an unrolled iteration the `break` or `continue` it
        meets is known (see _exits); whichever it was, it ends with the loop."""
        saved, self._exits = self._exits, unrolled
        try:
            yield
        finally:
            self._exits = saved
            self._leaving = None

    @contextlib.contextmanager
    def _unknown_branch(self):
        """A branch whose test the walk does not know: a `break` in it may not run."""
        saved, self._exits = self._exits, False
        try:
            yield
        finally:
            self._exits = saved

    def _ran(self, stmt: cst.BaseStatement, times: Number | Count) -> None:
        """Count ``times`` runs of ``stmt`` (of the request walked now, if any)."""
        runs = self.runs.get(id(stmt))
        total = times * self._request_runs
        self.runs[id(stmt)] = (total if runs is None else runs[0] + total, self._uncalled_function)

    def _visited(self, stmt: cst.BaseStatement, times: Number | Count, sent: Number | Count) -> None:
        visit = self.visits.get(id(stmt))
        if visit is None:
            self.visits[id(stmt)] = Visit(stmt, times, sent, self._uncalled_function)
        else:
            visit.runs += times
            visit.sent += sent

    def loop_symbol(self, loop: cst.For | cst.While | cst.CompFor) -> Number | Count:
        """The iterations of a loop whose length is not known before running: N — or the
        length the configuration gives it (``trips``)."""
        function = self._call_stack[-1].removeprefix("self.") if self._call_stack else ""
        return self._trips_symbol(cst_loop_header(loop), function)

    def _trips_symbol(self, header: str, function: str, recursion: bool = False) -> Number | Count:
        """N for the loop (or recursion) named ``header`` in ``function``, numbered in the order
        the walk meets them — or the length the configuration gives that header."""
        if header in self._given_trips:
            return self._given_trips[header]
        order = self._loop_order.setdefault((header, function), len(self._loop_order))
        return Count.trips(UnknownLoop(header, function, order=order, recursion=recursion))

    def statement(self, stmt: cst.BaseStatement, times: float) -> None:
        # the usual kinds compared with `is` (libcst's node classes are final; isinstance
        # against them is an ABC check)
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                self.small(small, times)
            return
        if kind is cst.With:
            self.with_statement(stmt, times)
            return
        if kind is cst.For:
            self.for_loop(stmt, times)
            return
        if type(stmt) is cst.While and retried_until_success(stmt):
            # attempts until one succeeds: a run without failures runs the body once
            self._retry_note(stmt, f"while {short(stmt.test)}")
            with self._loop_body(False):
                self.suite(stmt.body.body, times)
            return
        if type(stmt) is cst.While:
            trips = self.loop_symbol(stmt)
            with contextlib.nullcontext() if is_known(trips) else self._guessing(), self._loop_body(False):
                # the test runs before every iteration (`while (x := step(x)) != ".":`)
                self._follow_calls(stmt.test, times * trips)
                self.suite(stmt.body.body, times * trips)
            return
        if type(stmt) is cst.If:
            # the test runs whichever branch follows (`if top_at(prompt, layer) == 5:`)
            self._follow_calls(stmt.test, times)
            # a test on the element of an unrolled loop (`if prompt == "skip":`) is decided
            # for each element; any other is not evaluated (see _if_statement)
            truth = self.truth(stmt.test) if self._elements & names_in(stmt.test) else None
            if truth is not None:
                if truth:
                    self.suite(stmt.body.body, times)
                elif type(stmt.orelse) is cst.If:
                    self.statement(stmt.orelse, times)
                elif stmt.orelse is not None:
                    self.suite(stmt.orelse.body.body, times)
                return
            # the test is not evaluated: a branch may not run (but a script's main does)
            with contextlib.nullcontext() if is_main_guard(stmt) else self._guessing(), self._unknown_branch():
                self._if_statement(stmt, times)
            return
        if type(stmt) in (cst.Try, cst.TryStar):
            # a run without failures: the body, its `else:`, its `finally:`; no handler
            self.suite(stmt.body.body, times)
            if stmt.orelse is not None:
                self.suite(stmt.orelse.body.body, times)  # (not after a `break` or `continue`)
            if stmt.finalbody is not None:
                leaving, self._leaving = self._leaving, None  # `finally:` runs on the way out
                self.suite(stmt.finalbody.body.body, times)
                self._leaving = self._leaving or leaving
            return
        if type(stmt) is cst.FunctionDef:
            # the calls after it run it: a `def` of the module's code, or of a function's
            # (its own, until the call returns: see _follow_calls)
            self._reaching_defs[stmt.name.value] = stmt
            return
        if type(stmt) is cst.ClassDef:
            return
        body = getattr(stmt, "body", None)
        if type(body) is cst.IndentedBlock:
            self.suite(body.body, times)

    def _if_statement(self, stmt: cst.If, times: float) -> None:
        orelse = stmt.orelse
        if orelse is not None and self._has_work(orelse) and not self._has_work(stmt.body):
            self.note(f"`if {short(stmt.test)}` is assumed false: the branch that sends requests is counted")
            if type(orelse) is cst.If:
                self.statement(orelse, times)
            else:
                self.suite(orelse.body.body, times)
            return
        self.suite(stmt.body.body, times)
        if orelse is not None and self._has_work(orelse):
            self.note(f"`if {short(stmt.test)}` is assumed true: its other branch is not counted")

    @contextlib.contextmanager
    def _guessing(self):
        """Code the walk runs an assumed number of times (a loop of unknown length, a
        branch whose test it does not evaluate): what it adds to a list leaves the
        list's length unknown."""
        self._guesses += 1
        try:
            yield
        finally:
            self._guesses -= 1

    def _has_work(self, node: cst.CSTNode) -> bool:
        """Does ``node`` hold an nnsight block (or call a same-file function)?"""
        return self.facts.once(_holds_work, node)

    def with_statement(self, stmt: cst.With, times: float) -> None:
        block = self.facts.block_of(stmt)
        if block is None and self.request is not None:
            block = self._unlisted_trace(stmt)
        if block is None:
            self._alias_edited_copies(stmt)
            forward = self.forward
            invoke = invoke_call(stmt)
            if forward is not None and invoke is not None:
                # inside an invoke the model's values have the invoke's rows (an invoke
                # without input sees the whole batch)
                rows, _ = self.prompt_rows(invoke, quiet=True)  # its tokens were counted already
                outer, forward.batch = forward.batch, (rows or forward.rows)
                try:
                    self.suite(stmt.body.body, times)
                finally:
                    forward.batch = outer
                return
            self.suite(stmt.body.body, times)
            return
        if self.request is None:
            if block.parent is None and self._is_remote(block):
                self.remote_block(block, times)
            else:
                self.local_block(block)
            return
        self.inner_block(block, times)

    def _alias_edited_copies(self, stmt: cst.With) -> None:
        """`with model.edit() as (tracer, edited)`: `edited` is a copy of the model, with its
        dimensions (nnsight's edit yields the copy second when it does not edit in place)."""
        for item in stmt.items:
            call, target = item.item, item.asname.name if item.asname is not None else None
            if not (isinstance(target, cst.Tuple) and len(target.elements) == 2 and type(call) is cst.Call
                    and type(call.func) is cst.Attribute and call.func.attr.value == "edit"):
                continue
            model, copy = dotted_name(call.func.value), target.elements[1].value
            model = self._model_aliases.get(model, model)
            if type(copy) is cst.Name and model in self.facts.models:
                self._model_aliases[copy.value] = model
                self.env[copy.value] = ModuleRef()

    def for_loop(self, stmt: cst.For, times: Number | Count) -> None:
        if retry_guard(stmt, self.facts) is not None or (
                retried_until_success(stmt) and self.length(stmt.iter) != 0):
            # attempts of one request: a run without failures sends it once
            self._retry_note(stmt, f"for {code_of(stmt.target)} in {short(stmt.iter)}")
            for name in target_names(stmt.target):
                self._bind(name, self._element_shape(stmt.iter))
            with self._loop_body(False):
                self.suite(stmt.body.body, times)
            return
        names = target_names(stmt.target)
        grown = self.facts.grows_its_iterable(stmt)
        elements = None if grown else self.elements(stmt.iter)
        stop = self.facts.once(_constant_break, stmt) if elements else None
        if stop is not None and stop[0] < len(elements):
            # `if layer > 3: break`: the items after the one that breaks are never reached
            elements = elements[: stop[0] + 1]
        if _leaves_in_its_first_iteration(stmt) and (elements or (elements is None and self.length(stmt.iter) != 0)):
            # the body ends in `break` (or `return`, `raise`) whatever happens: one iteration
            if elements:
                self._bind_target(stmt.target, elements[0])
            else:
                for name in names:
                    self._bind(name, self._element_shape(stmt.iter))
            with self._loop_body(bool(elements)):
                self.suite(stmt.body.body, times)
            return
        if elements is not None and len(elements) <= UNROLL_LIMIT and (
            any(has_str(e) for e in elements)
            or (self._unrolled + len(elements) <= UNROLL_BUDGET
                and (self._varies(stmt) or self.facts.once(_leaves_by_element, stmt)
                     or self.facts.once(_calls_a_cache_by_element, stmt)))
        ):
            self._unrolled_loop(stmt, names, elements, self._bind_target, times)
            return
        displayed = None if elements is not None or grown else self._models_displayed(stmt.iter)
        if displayed is not None:
            # `for name, m in [("small", small), ("medium", medium)]`: each iteration's `m`
            # is one of the script's models, whose layers and sizes its traces have
            self._unrolled_loop(stmt, names, displayed, self._bind_displayed, times)
            return
        trips = len(elements) if elements is not None else None if grown else self.length(stmt.iter)
        if stop is not None and elements is not None and stop[0] < len(elements):
            trips = stop[0]  # the iterations that run the whole body
        assumed = trips is None
        if assumed:
            trips = self.loop_symbol(stmt)
            assumed = not is_known(trips)
        if elements:
            self._bind_target(stmt.target, elements[0], value=False)
        else:
            for name in names:
                self._bind(name, self._element_shape(stmt.iter))
        with self._guessing() if assumed else contextlib.nullcontext(), self._loop_body(False):
            self.suite(stmt.body.body, times * trips)

    def _unrolled_loop(self, stmt: cst.For, names: list[str], items: list, bind, times: Number | Count) -> None:
        """The loop walked iteration by iteration, ``bind`` binding its target to each item."""
        self._unrolled += len(items)
        outer, self._elements = self._elements, self._elements | set(names)
        try:
            for item in items:
                bind(stmt.target, item)
                with self._loop_body(True):
                    self.suite(stmt.body.body, times)
                    left = self._leaving
                if left == "break":
                    break
        finally:
            self._elements = outer

    def _models_displayed(self, iterable: cst.BaseExpression) -> list[cst.BaseExpression] | None:
        """The items of a list or tuple display that names one of the script's models in an
        item (or in a tuple an item is), within the unroll budget; else None."""
        if type(iterable) not in (cst.List, cst.Tuple) or not iterable.elements \
                or len(iterable.elements) > UNROLL_LIMIT or self._unrolled + len(iterable.elements) > UNROLL_BUDGET:
            return None
        if any(type(e) is cst.StarredElement for e in iterable.elements):
            return None
        items = [e.value for e in iterable.elements]
        return items if any(self._names_a_model(item) for item in items) else None

    def _names_a_model(self, expr: cst.BaseExpression) -> bool:
        if type(expr) is cst.Name:
            return expr.value in self.facts.models or expr.value in self._model_aliases
        return type(expr) is cst.Tuple and any(self._names_a_model(e.value) for e in expr.elements)

    def _bind_item(self, target: cst.BaseExpression, item: Any) -> None:
        """A target bound to an element the walk knows (a value), or to an item of a
        display that names a model (its expression: :meth:`_models_displayed`)."""
        if isinstance(item, cst.BaseExpression):
            self._bind_displayed(target, item)
        else:
            self._bind_target(target, item)

    def _bind_displayed(self, target: cst.BaseExpression, item: cst.BaseExpression) -> None:
        """A loop target bound to an item of a display: a model's name aliases that model."""
        if type(target) is cst.Name:
            self._alias_model(target.value, item)
            if self._model_aliases.get(target.value) is not None:
                self.env[target.value] = ModuleRef()
            else:
                self._bind(target.value, self.value(item))
        elif type(target) in (cst.Tuple, cst.List) and type(item) in (cst.Tuple, cst.List) \
                and len(target.elements) == len(item.elements) \
                and not any(type(e) is cst.StarredElement for e in (*target.elements, *item.elements)):
            for sub, part in zip(target.elements, item.elements):
                self._bind_displayed(sub.value, part.value)
        else:
            for name in target_names(target):
                self._bind(name, Shape.unknown("unpacked loop value"))

    def _varies(self, loop: cst.For) -> bool:
        """Does what an iteration costs depend on the loop variable? — a nested loop whose
        length it sets (``for i in range(layer)``: triangular sweeps, skipped prefixes),
        or a slice it bounds (``items[start : start + K]``: the last chunk is shorter),
        around nnsight work or ``.skip()`` calls."""
        return self.facts.once(_varies, loop)

    def _element_shape(self, iterable: cst.BaseExpression) -> Shape | ModuleRef:
        value = self.value(iterable)
        if isinstance(value, ModuleRef):
            return value.child(None)
        if isinstance(value, Shape) and value.kind == "container" and value.elements:
            return value.elements[0]
        return Shape.python("int")

    def _bind_target(self, target: cst.BaseExpression, element: Any, value: bool = True) -> None:
        if type(target) is cst.Name:
            self._bind(target.value, python_shape(element, value))
        elif type(target) in (cst.Tuple, cst.List) and isinstance(element, (tuple, list)):
            for sub, item in zip(target.elements, element):
                self._bind_target(sub.value, item, value)
        else:
            for name in target_names(target):
                self._bind(name, Shape.unknown("unpacked loop value"))

    def _bind(self, name: str, value: Shape | ModuleRef) -> None:
        if name in self.facts.models:
            return
        self.env[name] = value
        self._config_models.pop(name, None)
        self.storage.pop(name, None)
        request = self._frame_request()
        if request is not None:
            request.unsave(name)

    def small(self, small: cst.BaseSmallStatement, times: float) -> None:
        if self._library_paths and self.request is None:
            self._library_requests(small, times)
        self._follow_calls(small, times)
        if type(small) is cst.Assign:
            value = small.value
            for target in small.targets:
                self.assign(target.target, value, times)
        elif type(small) is cst.AnnAssign and small.value is not None:
            self.assign(small.target, small.value, times)
        elif type(small) is cst.AugAssign:
            if type(small.target) is cst.Name:
                name = small.target.value
                if name in self.env:
                    combined = cst.BinaryOperation(
                        left=small.target, operator=_binary_of(small.operator), right=small.value
                    )
                    new = self.value(combined)
                    self.env[name] = new
        elif type(small) is cst.Expr and type(small.value) is cst.Call:
            self.call_statement(small.value, times)
        elif type(small) is cst.Del:
            for name in target_names(small.target):
                self.env.pop(name, None)
                self.storage.pop(name, None)

    def _caches(self, value: cst.BaseExpression) -> bool:
        """Is ``value`` `tracer.cache(...)` of the trace the walk is in?"""
        forward = self.forward
        return (forward is not None and forward.tracer is not None and type(value) is cst.Call
                and type(value.func) is cst.Attribute and value.func.attr.value == "cache"
                and type(value.func.value) is cst.Name and value.func.value.value == forward.tracer)

    def _cache_size(self, call: cst.Call) -> tuple[int | None, str]:
        """Bytes of what `tracer.cache(modules=[...])` records: each module's output; None,
        and why, for every module, their inputs, or modules not known."""
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        modules = keywords.get("modules", positional[0] if positional else None)
        if modules is None and not any(a.star for a in call.args):
            return None, "it records every module of the model"
        unknown = None, "which modules it records is not known"
        inputs = keywords.get("include_inputs")
        if modules is None or (inputs is not None and self.truth(inputs) is not False) or any(
                a.star for a in call.args) or "dtype" in keywords:
            return unknown
        if type(modules) in (cst.List, cst.Tuple):
            items = [e.value for e in modules.elements if type(e) is not cst.StarredElement]
            if len(items) != len(modules.elements):
                return unknown
            sizes = [self.sent_size(cst.Attribute(item, cst.Name("output")))[0] for item in items]
            return unknown if any(s is None for s in sizes) else (sum(sizes), "")
        if type(modules) is cst.ListComp and modules.for_in.inner_for_in is None and not modules.for_in.ifs:
            clause = modules.for_in
            elements = self.elements(clause.iter)
            if not elements:
                return unknown
            with self._names_kept([clause.target]):  # (one element's output: each layer's is alike)
                self._bind_target(clause.target, elements[0])
                size = self.sent_size(cst.Attribute(modules.elt, cst.Name("output")))[0]
            return unknown if size is None else (size * len(elements), "")
        return unknown

    def _frame_request(self) -> Request | None:
        """The current request, if the code runs in its frame (a called function's
        locals are not the request's: what it saves is not returned)."""
        request = self.request
        if request is not None and len(self._call_stack) == request.depth:
            return request
        return None

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, times: float) -> None:
        request = self._frame_request()
        if type(target) is cst.Name:
            name = target.value
            if request is None and self.request is not None and is_save_call(value):
                # saved in a called function's frame: comes back only if returned (see _follow_calls)
                size, shape = self.sent_size(unsave(value))
                self._inner_saves[name] = (size, None if size is not None else unknown_download(name, unsave(value), shape))
            if request is not None and type(value) is cst.Call and id(value) in self._returned_saves:
                self._bind(name, self.value(value))
                request.save(name, *self._returned_saves[id(value)])
                return
            if request is not None and self._caches(value):
                # `cache = tracer.cache(modules=[...])`: what it records comes back with the request
                self._bind(name, Shape.unknown("a cache of module values"))
                size, unknown = self._cache_size(value)
                request.save(name, size, None if size is not None else UnknownDownload(
                    name, " ".join(code_of(value).split()), unknown))
                return
            if request is not None and is_save_call(value):
                inner = unsave(value)
                if _is_empty_container(inner):
                    self._bind(name, Shape.container([]))
                    request.containers[name] = 0.0
                    return
                size, shape = self.sent_size(inner)
                self._bind(name, shape)
                storage = self._bound_storage(inner)
                if storage is not None:
                    self.storage[name] = storage
                request.save(name, size, None if size is not None else unknown_download(name, inner, shape))
                if size is not None and shape.kind == "container" and not shape.is_tensor:
                    # a client dict of lists carried in and saved: what the request adds
                    # to its lists comes back with it
                    request.containers[name] = float(request.saved.pop(name) - 4)
                return
            if request is not None and _is_old_api_container(value):
                self._bind(name, Shape.container([]))
                request.containers[name] = 0.0
                return
            literal = literal_shape(value)
            if literal is not None:
                self._bind(name, literal)
                return
            if type(value) is cst.BinaryOperation:
                text = self._joined_text(value)  # `doc = "lorem ipsum " * 3000`: a prompt's length
                if isinstance(text, str):
                    self._bind(name, python_shape(text, True))
                    return
            if type(value) is cst.Call and dotted_name(value.func) in ("list", "tuple", "sorted", "reversed", "range"):
                items = self.elements(value)  # `items = list(range(100))`, `range(0, 12, 4)`: still known
                if items is not None:
                    self._bind(name, python_shape(items, True))
                    return
            if type(value) is cst.Call and dotted_name(value.func) in ("len", "max", "min"):
                number = self.integer(value)  # `N_LAYERS = len(model.transformer.h)`: 12, not just an int
                if number is not None:
                    self._bind(name, python_shape(number, True))
                    return
            bound = self.value(value)
            if not is_container(bound) and _is_display(value):
                # `templates = [lambda ...]`: its elements unknown, its length known
                bound = Shape.container([self.shape(e.value) for e in value.elements])
            elif isinstance(bound, Shape) and bound.kind == "unknown" and _copies_a_sequence(value):
                # `items = list(rows)`, rows of a given length: the copy has it too
                n = self.length(value)
                if n is not None and n <= TRACKED_LENGTH:
                    bound = Shape.container([Shape.unknown("an element of a sequence")] * n)
            storage = self._bound_storage(value)
            self._bind(name, bound)
            if storage is not None:
                self.storage[name] = storage
            if bound == ModuleRef(("config",)):  # `cfg = model.config`: `cfg.n_head` is the model's
                self._config_models[name] = self._model_of(value)
            return
        if type(target) in (cst.Tuple, cst.List):
            pairs = _pairwise(target, value)
            if pairs is not None:  # `prompts, labels = [], []`: each name its own value
                for sub, element in pairs:
                    self.assign(sub, element, times)
                return
            bound = self.value(value)
            for index, element in enumerate(target.elements):
                sub = element.value
                if type(sub) is cst.Name:
                    if isinstance(bound, Shape) and bound.kind == "container" and index < len(bound.elements):
                        self._bind(sub.value, bound.elements[index])
                    else:
                        self._bind(sub.value, Shape.unknown("unpacked value"))
            return
        if type(target) is cst.Attribute and type(target.value) is cst.Name:
            # `self.clean = clean`: the object's state, read as `self.clean` (see _fingerprint)
            self._bind(f"{target.value.value}.{target.attr.value}", self.value(value))
            return
        if type(target) is cst.Subscript and type(target.value) is cst.Name and request is not None:
            name = target.value.value
            if name in request.containers:
                key = target.slice[0].slice if len(target.slice) == 1 else None
                key_shape = self.value(key.value) if type(key) is cst.Index else None
                self._add_to(request, name, unsave(value), key_size(key_shape) if key_shape is not None else 9, times)

    def call_statement(self, call: cst.Call, times: float) -> None:
        func = call.func
        if (
            self.forward is not None
            and type(func) is cst.Attribute
            and func.attr.value == "skip"
            and self._is_layer(func.value)
        ):
            self.forward.skipped += times  # one layer evaluation less
            return
        if type(func) is not cst.Attribute:
            return
        if type(func.value) is not cst.Name:
            self._nested_call(call, times)
            return
        name, method = func.value.value, func.attr.value
        if method in _IN_PLACE and is_container(self.env.get(name)):
            self.env[name] = self._changed_container(name, self.env[name], method, call, times)
        request = self._frame_request()
        if request is None:
            return
        if name not in request.containers or method not in _CONTAINER_METHODS or not call.args:
            return
        args = [a.value for a in call.args]
        if method == "append" or method == "add":
            self._add_to(request, name, unsave(args[0]), 0, times)
        elif method == "insert" and len(args) >= 2:
            self._add_to(request, name, unsave(args[1]), 0, times)
        elif method == "setdefault" and len(args) >= 2:
            self._add_to(request, name, unsave(args[1]), key_size(self.value(args[0])), times)
        elif method in ("extend", "update"):
            values = unsave(args[0])
            size, shape = self.sent_size(values)
            if size is None:
                request.add(name, None, 0, times, unknown=unknown_download(name, values, shape))
            else:  # the elements of a container, without its own framing
                request.add(name, max(size - 4, 0), 0, times)

    def _nested_call(self, call: cst.Call, times: Number | Count) -> None:
        """``acts["early"].append(x)``: a list inside a saved container grows it."""
        receiver, method = call.func.value, call.func.attr.value
        while type(receiver) is cst.Subscript:
            receiver = receiver.value
        request = self._frame_request()
        if type(receiver) is not cst.Name or request is None or receiver.value not in request.containers:
            return
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if method in ("append", "add") and len(args) == 1:
            self._add_to(request, receiver.value, unsave(args[0]), 0, times)

    def _changed_container(self, name: str, bound: Shape, method: str, call: cst.Call, times: float) -> Shape:
        """What ``name`` holds after ``times`` calls ``name.<method>(...)`` that change it
        in place (``prompts = []``, then ``prompts.append(p)`` in a loop): its length
        follows what is added where the walk knows how often that runs, and its values
        where they are constants; else it is unknown, and a loop over it runs an assumed
        number of times (with a note) rather than none."""
        unknown = Shape.unknown(f"`{name}` is changed in place by code run an unknown number of times")
        if method == "clear":
            return python_shape([], True)
        if method in ("sort", "reverse"):  # the same elements in another order
            return Shape.container(bound.elements)
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if self._guesses or not is_known(times) or len(args) != (2 if method == "insert" else 1):
            return unknown
        if method == "extend":
            added, count = self.elements(args[0]), self.length(args[0])
        elif method in ("append", "add", "insert"):
            constant = self.constant_value(args[-1])
            added, count = (None if constant is NO_VALUE else [constant]), 1
        else:  # pop, remove, update, ...: what goes is not followed
            return unknown
        if count is None or len(bound.elements) + times * count > TRACKED_LENGTH:
            return unknown
        if method != "insert" and added is not None and times == 1 and isinstance(bound.value, tuple):
            return python_shape([*bound.value, *added], True)  # constants: `for p in prompts` unrolls them
        return Shape.container(bound.elements + self._added_shapes(method, args[-1], count) * round_count(times))

    def _added_shapes(self, method: str, value: cst.BaseExpression, count: int) -> tuple[Shape, ...]:
        """The shapes of the ``count`` elements one call ``<list>.<method>(value)`` adds
        (so that the list's size is known where they are: a list saved whole)."""
        shape = self.shape(unsave(value))
        if method != "extend":
            return (shape,)
        if shape.kind == "container" and len(shape.elements) == count:
            return shape.elements
        return (Shape.unknown("an element of a value the list was extended with"),) * count

    def _retry_note(self, loop: cst.For | cst.While, header: str) -> None:
        if self._has_work(loop):
            self.note(f"`{header}` is a retry loop: counted once; each failure costs another request")

    def _add_to(self, request: Request, name: str, value: cst.BaseExpression, key: int, times: float) -> None:
        """``times`` values of ``value`` go into the saved container ``name``."""
        size, shape, storage = self.sent(value)
        if type(value) is cst.Name and size is not None and size >= request.saved.get(value.value, 0) > 0:
            # the container counts the object a saved name holds too: it is written once
            request.held.add(value.value)
        unknown = None if size is not None else unknown_download(name, value, shape)
        if size is not None and storage is None and self.view_mode == "storage":
            # a record `(i, row)` of views: each view's storage is written once, as a view alone's
            for element in _literal_elements(value):
                element_size, element_shape, element_storage = self.sent(element)
                if element_storage is not None and element_size is not None:
                    request.add(name, element_size, 0, times, element_storage)
                    size -= (serialized_size(element_shape) or 0) + 1
        request.add(name, size, key, times, storage, unknown)

    def _follow_calls(self, small: cst.CSTNode, times: float) -> None:
        """Walk same-file functions called by this statement, at the call."""
        if not self._function_names:
            return
        calls = self.facts.once(_calls_in, small, self._function_names, self._instances)
        wrappers = retry_wrappers(self.facts)
        for written, loops in calls:
            call = unwrapped_call(written, wrappers)  # `with_retries(run, x)` runs `run(x)` once when nothing fails
            name = called_name(call, self._instances)
            if name in self._partial_args:  # `top3(p)` of `top3 = functools.partial(top_token, k=3)`
                given = self._partial_args[name]
                call = call.with_changes(args=[*(a for a in given if a.keyword is None),
                                               *(a for a in call.args if a.keyword is None),
                                               *(a for a in given if a.keyword is not None),
                                               *(a for a in call.args if a.keyword is not None)])
            bound = name in self._methods or name in self._constructors
            func = (self._methods.get(name) or self._constructors.get(name)) if bound else (
                (self._reaching_defs.get(name) or self.facts.functions.get(name) or self._closures.get(name))
                if name else None)
            if func is None or name in self._call_stack or len(self._call_stack) >= CALL_DEPTH:
                continue
            self._called.add(func.name.value if bound or name in self._closures else name)
            cache = None if bound else self.facts.once(_cache_size, func)
            elements = self._unrolled_comprehension(loops, func)
            if cache is not None and elements is None:
                key = self._cache_key(call, loops)
                if not self._cache_misses(name, func, cache, key):
                    continue  # `@lru_cache`: a call with arguments it has seen sends nothing
                if key is not None:
                    times, loops = 1, ()  # every run of this call has these arguments: one miss
            saved = (dict(self.env), dict(self.storage))
            aliases, defs, configs = dict(self._model_aliases), dict(self._reaching_defs), dict(self._config_models)
            if elements is None:
                self._bind_arguments(func, call, bound)
            self._call_stack.append(name)
            trips = self._comprehension_trips(loops)
            recursion = 1.0 if bound else self._recursion(func)
            outer, self._inner_saves = self._inner_saves, {}
            if elements is not None:
                # `[top_token(p) for p in PROMPTS]`: a call per prompt, each with its own
                # argument (as a loop over strings is unrolled)
                targets = [clause.target for clause in loops]
                with self._names_kept(targets):  # the comprehension's variables are its own
                    for bindings in elements:
                        for target, element in zip(targets, bindings):
                            self._bind_item(target, element)
                        if any(self.truth(test.test) is False for clause in loops for test in clause.ifs):
                            continue  # `[f(w) for w in words if w.startswith("c")]`: no call for "dog"
                        if cache is not None and not self._cache_misses(name, func, cache,
                                                                        self._element_key(call, targets)):
                            continue  # `[cached(p) for p in DATA]`: a prompt seen before sends nothing
                        self._bind_arguments(func, call, bound)
                        self._unrolled += 1
                        with contextlib.nullcontext() if is_known(recursion) else self._guessing():
                            self.suite(func.body.body, times * recursion)
            else:
                with contextlib.nullcontext() if is_known(trips * recursion) else self._guessing():
                    self.suite(func.body.body, times * trips * recursion)
            returned = returned_name(func)
            if returned in self._inner_saves:
                # a value the function saved and returns: in the request's frame, the name
                # bound to it comes back with the request (see assign)
                self._returned_saves[id(written)] = self._inner_saves[returned]
            self._inner_saves = outer
            self._call_stack.pop()
            self._model_aliases, self._reaching_defs, self._config_models = aliases, defs, configs
            if self.request is None:
                self._restore_after_call(func, *saved)

    def _recursion(self, func: cst.FunctionDef) -> Number | Count:
        """How often ``func`` runs per call from outside it: once, or, when it calls itself
        (through the script's other functions too), as often as a loop of unknown length
        (how deep it goes depends on the data): N — or what the configuration gives
        ``def NAME``. The walk follows one run of it (it does not follow the calls it makes
        of itself)."""
        if not self.facts.once(_calls_itself, func):
            return 1.0
        return self._trips_symbol(recursion_header(func.name.value), func.name.value, recursion=True)

    def _cache_key(self, call: cst.Call, loops: tuple[cst.CompFor, ...]):
        """The key a cached function's ``call`` is looked up by, when its arguments are
        the same every time this call runs, and known: literals, constants of the script,
        elements of an unrolled loop (not a comprehension's variable, nor a name bound
        in code walked once for many runs); else None."""
        local = set().union(*(target_names(clause.target) for clause in loops)) if loops else set()
        positional, keywords = [], []
        for arg in call.args:
            if arg.star:
                return None
            names = names_in(arg.value)
            if names & local or any(n not in self._elements and self.facts.constant(n) is None for n in names):
                return None
            value = self.constant_value(arg.value)
            if value is NO_VALUE or not _hashable(value):
                return None
            if arg.keyword is None:
                positional.append(value)
            else:
                keywords.append((arg.keyword.value, value))
        return tuple(positional), tuple(keywords)

    def _element_key(self, call: cst.Call, targets: list[cst.BaseExpression]):
        """:meth:`_cache_key` of a call in an unrolled comprehension, for the elements its
        variables are bound to now."""
        outer, self._elements = self._elements, self._elements.union(*(target_names(t) for t in targets))
        try:
            return self._cache_key(call, ())
        finally:
            self._elements = outer

    def _cache_misses(self, name: str, func: cst.FunctionDef, size: int, key) -> bool:
        """Does this call of the cached function ``name`` (its cache of ``size`` entries,
        0: unbounded) miss (``key``: its arguments, None when not known)? A miss adds
        its key; a call whose arguments are not known is counted as a miss, and may have
        put out of a bounded cache any key seen so far."""
        seen = self._cached_calls.setdefault(name, {})
        if key is None:
            self.note(f"`{func.name.value}` is cached (`@{code_of(func.decorators[0].decorator)}`): a call "
                      "whose arguments are not known before running is counted as sending its requests")
            if size:
                seen.clear()
            return True
        if key in seen:
            seen[key] = seen.pop(key)  # (the most recently used)
            return False
        seen[key] = None
        if size and len(seen) > size:
            del seen[next(iter(seen))]
        return True

    def _unrolled_comprehension(self, loops: tuple[cst.CompFor, ...], func: cst.FunctionDef) -> list | None:
        """The elements of the ``for`` clauses around a call of ``func`` that it is made
        for, a tuple (one element per clause) for each call, when every clause walks known
        elements and the calls differ by them: one clause whose elements hold strings
        (prompts: as :meth:`for_loop` unrolls a loop), or, within the walk's unrolling budget,
        a clause that filters (`if w.startswith("c")`: a test decided for an element leaves
        its call out), nested clauses over strings, or a ``func`` that cuts its traces short
        (`tracer.stop()`: the layers evaluated follow its arguments). Else None (the call is
        walked once for all)."""
        if not loops:
            return None
        bindings = self._clause_bindings(loops)
        if not bindings:
            return None
        strings = any(has_str(e) for row in bindings for e in row)
        models = any(isinstance(e, cst.BaseExpression) for row in bindings for e in row)  # (_models_displayed)
        if len(loops) == 1 and not loops[0].ifs and (strings or models):
            return bindings
        if self._unrolled + len(bindings) > UNROLL_BUDGET:
            return None
        filtered = any(clause.ifs for clause in loops)
        return bindings if strings or filtered or self.facts.once(_stops_in, func.body) else None

    def _clause_bindings(self, loops: tuple[cst.CompFor, ...]) -> list[tuple] | None:
        """Every combination of elements the ``for`` clauses bind, outermost first (an inner
        clause may walk what an outer one binds: `for L in range(len(p))`), at most
        UNROLL_LIMIT of them; None when a clause's elements are not known."""
        clause, rest = loops[0], loops[1:]
        elements = self.elements(clause.iter)
        if elements is None:
            elements = self._models_displayed(clause.iter)  # `for name, m in [("small", small), ...]`
        if elements is None or len(elements) > UNROLL_LIMIT:
            return None
        if not rest:
            return [(element,) for element in elements]
        found: list[tuple] = []
        with self._names_kept([clause.target]):
            for element in elements:
                self._bind_item(clause.target, element)
                inner = self._clause_bindings(rest)
                if inner is None or len(found) + len(inner) > UNROLL_LIMIT:
                    return None
                found += [(element, *row) for row in inner]
        return found

    @contextlib.contextmanager
    def _names_kept(self, targets: list[cst.BaseExpression]):
        """The walk's values of the names ``targets`` bind, put back after the block (a
        comprehension's variables are its own)."""
        names = [n for target in targets for n in target_names(target)]
        held = {n: self.env.get(n, UNBOUND) for n in names}
        aliases = {n: self._model_aliases.get(n, UNBOUND) for n in names}  # (a model each element names)
        try:
            yield
        finally:
            for kept, now in ((held, self.env), (aliases, self._model_aliases)):
                for n, value in kept.items():
                    if value is UNBOUND:
                        now.pop(n, None)
                    else:
                        now[n] = value

    def _comprehension_trips(self, loops: tuple[cst.CompFor, ...]) -> Number | Count:
        """How often a call inside comprehensions of ``loops`` (their ``for`` clauses)
        runs: a Count where one of their lengths is not known."""
        trips: Number | Count = 1.0
        for clause in loops:
            length = self.length(clause.iter)
            trips *= self.loop_symbol(clause) if length is None else length
        return trips

    def _restore_after_call(self, func: cst.FunctionDef, env: dict, storage: dict) -> None:
        """The caller's names again after a call of ``func``: its locals go, but a list
        of the caller's that it changed in place (``prompts.append(...)``) stays changed."""
        local = self._locals_of(func)
        for name, value in self.env.items():
            before = env.get(name)
            if value is not before and name not in local and is_container(before):
                env[name] = value
            elif value is not before and "." in name:
                env[name] = value  # `self.clean = clean`: the object keeps what a method gave it
        self.env, self.storage = env, storage

    def _locals_of(self, func: cst.FunctionDef) -> frozenset[str]:
        return _locals_of(func)

    def _bind_arguments(self, func: cst.FunctionDef, call: cst.Call, bound: bool = False) -> None:
        params = [p for p in func.params.params][1 if bound else 0 :]  # a method's `self` is not an argument
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
        for index, param in enumerate(params):
            name = param.name.value
            arg = positional[index].value if index < len(positional) else None
            if name in keywords:
                arg = keywords[name].value
            if arg is None and param.default is not None:
                arg = param.default
            self._alias_model(name, arg)
            if arg is None:
                self.env[name] = Shape.unknown("a parameter")
                continue
            literal = self.constant_value(arg)
            self.env[name] = python_shape(literal, True) if literal is not NO_VALUE else self.value(arg)

    def _alias_model(self, param: str, arg: cst.BaseExpression | None) -> None:
        """``param`` names the script's model ``arg`` names, when ``arg`` is one (or a
        parameter that already does); any other argument ends an older alias of it."""
        model = None
        if isinstance(arg, cst.Name):
            model = self._model_aliases.get(arg.value, arg.value if arg.value in self.facts.models else None)
        if model is not None:
            self._model_aliases[param] = model
        else:
            self._model_aliases.pop(param, None)


# Facts of a version of the tree the walk asks again and again (Facts.once: a later walk of
# the same version, for other options, asks them too).


def _holds_work(facts: Facts, node: cst.CSTNode) -> bool:
    """Does ``node`` hold an nnsight block (or call a same-file function)?"""
    blocks = facts.once(_block_nodes)
    for n in walk_nodes(node):
        kind = type(n)
        if kind is cst.With and id(n) in blocks:
            return True
        if kind is cst.Call and type(n.func) is cst.Name and n.func.value in facts.functions:
            return True
    return False


def _block_nodes(facts: Facts) -> frozenset[int]:
    """The ids of the nnsight blocks' nodes."""
    return frozenset(id(b.node) for b in facts.blocks)


def _varies(facts: Facts, loop: cst.For) -> bool:
    """See StatementWalk._varies."""
    names = set(target_names(loop.target))
    if not names:
        return False
    nested = [n for n in compound(loop.body) if type(n) is cst.For and names & names_in(n.iter)]
    if nested and (facts.once(_holds_work, loop.body) or has_skip(loop.body)):
        return True
    # a generate's length it sets (`max_new_tokens=n_new`): each iteration its own tokens
    if any(type(call.func) is cst.Attribute and call.func.attr.value == "generate" and any(
            arg.keyword is not None and arg.keyword.value in GENERATION_LENGTH_KEYWORDS
            and names & names_in(arg.value) for arg in call.args)
           for call in find_nodes(loop.body, lambda n: type(n) is cst.Call)):
        return True
    # a trace cut short by `tracer.stop()` evaluates the layers up to the one it reads last,
    # which the loop variable may choose (`h[layer].output`, here or in a function it calls)
    return _stops_in(facts, loop.body) and bool(names & names_in(loop.body))


def _stops_in(facts: Facts, body: cst.CSTNode) -> bool:
    """Does ``body``, or a function of the script it calls, cut a trace short (`<name>.stop()`)?"""
    if calls_stop(body):
        return True
    if not any(calls_stop(func.body) for func in facts.functions.values()):
        return False  # (no function of the script stops a trace: no need to find those called)
    return any(calls_stop(func.body) for func in facts.functions_called(body))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


_CACHES = {"functools.lru_cache": 128, "functools.cache": 0}


def _cache_size(facts: Facts, func: cst.FunctionDef) -> int | None:
    """The entries a function's cache holds when its outermost decorator is
    `functools.lru_cache` (128 by default, 0: `maxsize=None`, unbounded) or
    `functools.cache` (0); None when it is not cached so."""
    if not func.decorators:
        return None
    decorator = func.decorators[0].decorator
    called = type(decorator) is cst.Call
    size = _CACHES.get(qualify(decorator.func if called else decorator, facts.imports) or "")
    if size is None or (called and size == 0):
        return None
    if not called:
        return size
    args = [a for a in decorator.args if a.keyword is None or a.keyword.value == "maxsize"]
    if any(a.star for a in decorator.args) or len(args) > 1:
        return None
    if not args:
        return size
    given = args[0].value
    if type(given) is cst.Name and given.value == "None":
        return 0
    if type(given) is cst.Integer and int(given.value, 0) > 0:
        return int(given.value, 0)
    return None  # (`maxsize=0` caches nothing; a size not spelled out is not known)


def _calls_a_cache_by_element(facts: Facts, loop: cst.For) -> bool:
    """Does the loop's body call a cached same-file function (`@lru_cache`) with an
    argument that reads the loop variable? Then whether an iteration sends its requests
    depends on its element: the loop is unrolled, each call's arguments known."""
    names = set(target_names(loop.target))
    functions = frozenset(name for name, func in facts.functions.items() if facts.once(_cache_size, func) is not None)
    if not names or not functions:
        return False
    return any(names & set().union(*(names_in(a.value) for a in call.args))
               for call, _loops in same_file_calls(loop.body, functions) if call.args)


def _constant_break(facts: Facts, loop: cst.For) -> tuple[int, int] | None:
    """See analysis.regions.constant_break."""
    return constant_break(loop, facts)


def _leaves_by_element(facts: Facts, loop: cst.For) -> bool:
    """Does the loop's body hold nnsight work and an `if` whose test reads the loop
    variable (and names the body does not bind) and that leaves the iteration or the
    loop (`if layer > MAX_LAYER: break`, `if len(p.split()) < 3: continue`)? Then what an
    iteration costs depends on its element: the loop is unrolled, each test decided."""
    names = set(target_names(loop.target))
    if not names or not facts.once(_holds_work, loop.body):
        return False
    bound = set(collect(loop.body).binds) - names
    for node in compound(loop.body, into_loops=False):  # the loop's own `if`s, nested ones too
        if type(node) is not cst.If:
            continue
        read = names_in(node.test)
        if read & names and not read & bound and jumps_of_loop(node.body) | (
                jumps_of_loop(node.orelse) if node.orelse is not None else set()):
            return True
    return False


def _calls_in(facts: Facts, small: cst.CSTNode, functions: frozenset[str],
              instances: frozenset[str]) -> tuple[tuple[cst.Call, tuple], ...]:
    """:func:`same_file_calls` for this version (whose cache, bounded, a long script's walk
    would cycle through)."""
    return same_file_calls(small, functions, instances)


def _calls_itself(facts: Facts, func: cst.FunctionDef) -> bool:
    """Does the script's function ``func`` call itself, directly or through the others?"""
    return any(called is func for called in facts.functions_called(func.body))


@functools.lru_cache(maxsize=1024)
def _locals_of(func: cst.FunctionDef) -> frozenset[str]:
    """The names local to ``func``: its parameters and what its body binds (a fact of the
    node alone)."""
    params = {p.name.value for p in all_params(func.params)}
    return frozenset(params | set(collect(func.body).binds))


def _literal_elements(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a tuple, list or dict display holds (`(i, row)`, `{"row": row}`)."""
    if type(value) in (cst.Tuple, cst.List):
        return [e.value for e in value.elements if type(e) is cst.Element]
    if type(value) is cst.Dict:
        return [e.value for e in value.elements if type(e) is cst.DictElement]
    return []

"""invoke-batching: left padding (what reads of a batched value stay per invoke) and a loop of
`.generate()` calls as one generate of the batch."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import collect
from ndif_opt.analysis.regions import int_value
from ndif_opt.analysis.tensors import TENSOR_MODULES
from ndif_opt.passes.common.sweeps import MODULE_VALUES, Sweep, model_envoy, moved_ahead
from ndif_opt.syntax.expressions import dotted_name, root_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children


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


class Generation:
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
        conflict = moved_ahead(list(values.values()), sweep.moved, varying=sweep.targets, facts=facts)
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


# -- left padding ------------------------------------------------------------------------


class _Refuse(Exception):
    pass


class Padding:
    """Follows where a module value's token dimension is, and refuses any use that
    would see padded positions: a position counted from the start, a slice or a
    reduction over positions, or a whole activation leaving the invoke."""

    def __init__(self, facts: Facts, generation: Generation | None = None) -> None:
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
            raise _Refuse(f"uses a `{type(stmt).__name__.lower()}` statement ndif-opt cannot check")

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
        raise _Refuse(f"reads `{code_of(read)}`, whose layout (where its token dimension is) is not known")

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
                    raise _Refuse(f"indexes `{code_of(expr)}` in a way ndif-opt cannot follow")
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
            # (a method of a module's value, `model.lm_head.output.log_softmax(-1)`, is a
            # tensor's: the path goes through `.output`)
            module_call = (
                path is not None and func.attr.value not in MODULE_VALUES and ".tokenizer." not in f".{path}."
                and not self._writes_module(func.value)
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

"""The cost walk's expressions: what a name or an expression holds where the walk stands.

:class:`ExpressionWalk` is the part of :class:`ndif_opt.cost.walker.Walker` that evaluates
(as mypy's checkexpr does for its checker): shapes and values from
:mod:`ndif_opt.cost.shapes` in the walk's environment, constants, the elements and lengths
of iterables, integers, the storage a view shares, and the bytes a saved value sends back.
"""

from __future__ import annotations

import importlib
import itertools
import math
import operator
from typing import Any

import libcst as cst

from ndif_opt.analysis.effects import VALUE_MODULES
from ndif_opt.analysis.facts import config_entry, qualify, qualify_dotted
from ndif_opt.analysis.generation_steps import tracer_steps
from ndif_opt.analysis.regions import arithmetic, constant_item, dict_view_length
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.constants import TENSOR_OVERHEAD, UNROLL_LIMIT
from ndif_opt.cost.model_registry import CONFIG_NUMBERS, config_number, dtype_size
from ndif_opt.cost.requests import Storage, serialized_size
from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.shapes import value_of
from ndif_opt.cost.walk_values import NO_VALUE, UNBOUND, exact, expression_key, python_literal, value_in
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.loops import cst_expression_text


_VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "transpose",
        "permute", "t", "narrow", "select", "expand", "expand_as", "detach", "cpu",
        "flatten", "unflatten", "movedim", "swapaxes", "swapdims", "diagonal", "as_strided",
        "__getitem__",
    }
)  # fmt: skip


_STRING_METHODS = frozenset(
    {"lower", "upper", "strip", "lstrip", "rstrip", "title", "capitalize", "casefold", "swapcase",
     "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "istitle", "isnumeric", "isdecimal"}
)
#: String methods computed from text arguments (`w.startswith("c")` decides a filter)
_STRING_METHODS_OF_TEXT = frozenset(
    {"startswith", "endswith", "count", "find", "replace", "removeprefix", "removesuffix"}
)


_COMPARISONS = {
    cst.Equal: operator.eq, cst.NotEqual: operator.ne, cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le, cst.GreaterThan: operator.gt, cst.GreaterThanEqual: operator.ge,
    cst.In: lambda a, b: a in b, cst.NotIn: lambda a, b: a not in b,
}


# builtins that give a plain value of plain values: the walk computes them of values it
# knows (as it does any function of effects.VALUE_MODULES: `statistics.median(scores)`)
_VALUE_BUILTINS = {"min": min, "max": max, "sum": sum, "round": round, "abs": abs}
#: the longest text the walk makes by `+` and `*` (a prompt of ~250,000 tokens)
LONGEST_TEXT = 1_000_000


def _plain(value: Any) -> bool:
    """A value a test may be decided on: a literal's (not NO_VALUE, not an object)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _chunk_size(sl: cst.Slice) -> cst.BaseExpression | None:
    """``K`` of a slice ``[c:c + K]`` whose lower bound is a name."""
    lower, upper = sl.lower, sl.upper
    if type(lower) is cst.Name and type(upper) is cst.BinaryOperation and type(upper.operator) is cst.Add:
        if type(upper.left) is cst.Name and upper.left.value == lower.value:
            return upper.right
        if type(upper.right) is cst.Name and upper.right.value == lower.value:
            return upper.left
    return None


def _repeat(call: cst.Call, walk: "ExpressionWalk", depth: int) -> int | None:
    """`repeat=` of `itertools.product(...)` (1 when not given), None when not known;
    the call takes no other keyword."""
    keywords = [a for a in call.args if a.keyword is not None or a.star]
    if not keywords:
        return 1
    if len(keywords) == 1 and keywords[0].keyword is not None and keywords[0].keyword.value == "repeat":
        value = walk.integer(keywords[0].value, depth + 1)
        return value if value is not None and value >= 0 else None
    return None


class ExpressionWalk:
    """Expressions, evaluated where the walk stands."""

    def elements(self, expr: cst.BaseExpression, depth: int = 0) -> list | None:
        """Statically known elements of an iterable (literal lists, range, enumerate, zip)."""
        if depth > 6:
            return None
        value = python_literal(expr)
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            return list(value)
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape) and isinstance(bound.value, (list, tuple)):
                return list(bound.value)
            constant = self.facts.constant(expr.value)
            if constant is not None and expr.value not in self.env:
                return self.elements(constant, depth + 1)
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Multiply:
            for seq, count in ((expr.left, expr.right), (expr.right, expr.left)):
                items = self.elements(seq, depth + 1)
                n = self.integer(count, depth + 1)
                if items is not None and n is not None and len(items) * max(n, 0) <= 4 * UNROLL_LIMIT:
                    return items * max(n, 0)
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Add:
            left, right = self.elements(expr.left, depth + 1), self.elements(expr.right, depth + 1)
            return None if left is None or right is None else left + right
        if type(expr) is cst.Call:
            func = dotted_name(expr.func) or ""
            func = func.rsplit(".", 1)[-1] if func.startswith(("tqdm.", "builtins.")) else func
            args = [a.value for a in expr.args if a.keyword is None and not a.star]
            if func == "range" and 1 <= len(args) <= 3:
                values = [self.integer(a, depth + 1) for a in args]
                if any(v is None for v in values) or (len(values) == 3 and values[2] == 0):
                    return None
                rng = range(*values)
                return list(rng) if len(rng) <= 4 * UNROLL_LIMIT else None
            if func in ("enumerate",) and args:
                items = self.elements(args[0], depth + 1)
                start = self.integer(args[1], depth + 1) if len(args) > 1 else 0
                return None if items is None or start is None else [(start + i, x) for i, x in enumerate(items)]
            if func == "zip" and args:
                lists = [self.elements(a, depth + 1) for a in args]
                return None if any(x is None for x in lists) else [tuple(t) for t in zip(*lists)]
            if args and qualify(expr.func, self.facts.imports) == "itertools.product":
                lists = [self.elements(a, depth + 1) for a in args] * (_repeat(expr, self, depth) or 0)
                if not lists or any(x is None for x in lists) or math.prod(map(len, lists)) > 4 * UNROLL_LIMIT:
                    return None
                return [tuple(t) for t in itertools.product(*lists)]
            if func in ("list", "tuple", "reversed", "sorted", "tqdm", "iter") and args:
                items = self.elements(args[0], depth + 1)
                if items is None:
                    return None
                if func == "reversed":
                    return items[::-1]
                if func == "sorted":
                    try:
                        return sorted(items)
                    except TypeError:
                        return items
                return items
            if func == "trange" and args:
                return self.elements(cst.Call(func=cst.Name("range"), args=expr.args), depth + 1)
        if type(expr) in (cst.Tuple, cst.List) and all(type(e) is cst.Element for e in expr.elements):
            # a literal holding names (`(("pos", POS), ("neg", NEG))`): the values known
            # (an unknown one stays NO_VALUE); a literal of values none of which is known
            # is left to the shapes of its elements
            values = [self.constant_value(e.value) for e in expr.elements]
            return values if any(v is not NO_VALUE for v in values) else None
        item = self._constant_item(expr)
        if item is not None:  # `CONFIG["sweep"]`
            return self.elements(item, depth + 1)
        if type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice:
            items = self.elements(expr.value, depth + 1)
            sl = expr.slice[0].slice
            bounds = [None if b is None else self.integer(b, depth + 1) for b in (sl.lower, sl.upper, sl.step)]
            given = [b for b in (sl.lower, sl.upper, sl.step) if b is not None]
            if items is not None and all(bounds[i] is not None or x is None for i, x in
                                         enumerate((sl.lower, sl.upper, sl.step))) and given is not None:
                return items[slice(*bounds)]
        return None

    def _generation_steps(self, expr: cst.BaseExpression, depth: int) -> int | None:
        """The steps `for _ in tracer.iter[...]` runs its body at: one for `[s]`, `b - a` for
        `[a:b]` with both known (an open end depends on when generation stops: unknown)."""
        if type(expr) is not cst.Subscript:  # (asked of every loop's iterable: the set only here)
            return None
        index = tracer_steps(expr, {b.tracer_name for b in self.facts.blocks if b.tracer_name})
        if index is None:
            return None
        if type(index) is cst.Index:
            return 1
        if index.step is not None or index.upper is None:
            return None
        lower = 0 if index.lower is None else self.integer(index.lower, depth + 1)
        upper = self.integer(index.upper, depth + 1)
        return None if lower is None or upper is None else max(upper - lower, 0)

    def length(self, expr: cst.BaseExpression, depth: int = 0) -> int | None:
        """Iterations of ``for _ in expr`` when known without the elements."""
        if depth > 6:
            return None
        items = self.elements(expr, depth + 1)
        if items is not None:
            return len(items)
        if type(expr) in (cst.List, cst.Tuple) and not any(type(e) is cst.StarredElement for e in expr.elements):
            return len(expr.elements)  # `[("small", small), ("medium", medium)]`: items not known, their number is
        if self._given_lengths and type(expr) in (cst.Name, cst.Attribute):
            given = self._given_lengths.get(cst_expression_text(expr))
            if given is not None:
                return given
        entries = dict_view_length(expr, self.facts)
        if entries is not None and not (type(expr) is cst.Name and expr.value in self.env):
            return entries
        if type(expr) is cst.Call:
            func = dotted_name(expr.func) or ""
            args = [a.value for a in expr.args if a.keyword is None and not a.star]
            if func in ("range", "trange") and 1 <= len(args) <= 3:
                values = [self.integer(a, depth + 1) for a in args]
                if any(v is None for v in values) or (len(values) == 3 and values[2] == 0):
                    return None
                return len(range(*values))
            if func in ("enumerate", "list", "tuple", "reversed", "sorted", "tqdm", "tqdm.tqdm", "iter") and args:
                return self.length(args[0], depth + 1)
            if func == "zip" and args:
                lengths = [self.length(a, depth + 1) for a in args]
                return None if any(n is None for n in lengths) else min(lengths)
            if args and qualify(expr.func, self.facts.imports) == "itertools.product":
                lengths = [self.length(a, depth + 1) for a in args] * (_repeat(expr, self, depth) or 0)
                return None if not lengths or any(n is None for n in lengths) else math.prod(lengths)
        steps = self._generation_steps(expr, depth)
        if steps is not None:
            return steps
        if type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice:
            total = self.length(expr.value, depth + 1)
            sl = expr.slice[0].slice
            if total is not None and sl.step is None:
                lower = 0 if sl.lower is None else self.integer(sl.lower, depth + 1)
                upper = total if sl.upper is None else self.integer(sl.upper, depth + 1)
                if lower is not None and upper is not None:
                    return len(range(total)[lower:upper])
                chunk = _chunk_size(sl)
                if chunk is not None:  # XS[c:c + K]
                    value = self.integer(chunk, depth + 1)
                    return None if value is None else min(value, total)
        layers = self._module_list_length(expr)
        if layers is not None:
            return layers
        value = self.value(expr)
        if isinstance(value, Shape):
            if value.kind == "container":
                return len(value.elements)
            if value.is_tensor and value.dims:
                return value.dims[0]
            if value.kind == "python" and isinstance(value.value, (list, tuple, str)):
                return len(value.value)
        if type(expr) is cst.Name:
            wrapped = self.facts.constant(expr.value)
            if type(wrapped) is cst.Call:  # `pbar = tqdm(range(6))`, then `for layer in pbar:`
                return self.length(wrapped, depth + 1)
        return None

    def _is_layer(self, expr: cst.BaseExpression) -> bool:
        """Is ``expr`` one decoder layer (``model.model.layers[i]``)?"""
        ref = self.value(expr)
        return (
            isinstance(ref, ModuleRef)
            and len(ref.path) >= 2
            and not isinstance(ref.path[-1], str)
            and ref.path[-2] in LAYER_LISTS
        )

    def _module_list_length(self, expr: cst.BaseExpression) -> int | None:
        """``model.model.layers`` / ``model.transformer.h``: the model's layer count."""
        value = self.value(expr)
        if isinstance(value, ModuleRef) and value.path and value.path[-1] in LAYER_LISTS:
            return self.dims_of(self._model_of(expr)).n_layers
        return None

    def _model_of(self, expr: cst.BaseExpression) -> str:
        name = dotted_name(expr) or ""
        root, dot, rest = name.partition(".")
        if root in self._model_aliases:
            name = self._model_aliases[root] + dot + rest
        for attribute, model in self._attribute_models.items():  # `self.model.layers` -> `model.layers`
            if name == attribute or name.startswith(attribute + "."):
                name = model + name[len(attribute):]
        for model in sorted(self.facts.models, key=len, reverse=True):
            if name == model or name.startswith(model + "."):
                return model
        return self.model_names[0]

    def integer(self, expr: cst.BaseExpression, depth: int = 0) -> int | None:
        if depth > 8:
            return None
        value = python_literal(expr)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape):
                return bound.value if isinstance(bound.value, int) and not isinstance(bound.value, bool) else None
            constant = self.facts.constant(expr.value)
            return None if constant is None else self.integer(constant, depth + 1)
        if type(expr) is cst.Call and dotted_name(expr.func) == "len" and len(expr.args) == 1:
            return self.length(expr.args[0].value, depth + 1)
        if type(expr) is cst.Call and dotted_name(expr.func) in ("max", "min") and expr.args \
                and self._not_rebound(expr.func.value):
            # max(LAYERS), min(a, b): skip-insertion caches `range(max(LAYERS))` (with
            # `default=0` where the list may be empty)
            args = [a for a in expr.args if a.keyword is None]
            keywords = [a for a in expr.args if a.keyword is not None]
            if any(a.star for a in expr.args) or keywords and (
                    len(args) != 1 or len(keywords) != 1 or keywords[0].keyword.value != "default"):
                return None
            if len(args) == 1:
                values = self.elements(args[0].value, depth + 1)
            else:
                values = [self.integer(a.value, depth + 1) for a in args]
            if values == [] and keywords:
                return self.integer(keywords[0].value, depth + 1)
            if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
            return max(values) if dotted_name(expr.func) == "max" else min(values)
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name:
            # `range(self.n_layers)`: what the object was given (see assign)
            state = self.env.get(f"{expr.value.value}.{expr.attr.value}")
            if isinstance(state, Shape):
                return state.value if isinstance(state.value, int) and not isinstance(state.value, bool) else None
        if type(expr) is cst.Attribute and expr.attr.value in CONFIG_NUMBERS:
            root = dotted_name(expr) or ""
            if any(root.startswith(m + ".") for m in self.facts.models) and ".config." in f".{root}":
                return config_number(self.dims_of(self._model_of(expr)), expr.attr.value)
            config = self._config_models.get(expr.value.value) if type(expr.value) is cst.Name else None
            if config is not None:
                return config_number(self.dims_of(config), expr.attr.value)
        if type(expr) is cst.BinaryOperation:
            return arithmetic(expr, lambda operand: self.integer(operand, depth + 1))
        return None

    def _constant_item(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """What an item of a dict, list or tuple the script spells out stands for
        (`CONFIG["layers"]`, `CONFIG["probe"]["mid"]`: the analysis's `constant_item`),
        when the walk has not bound its container's name to a value of its own."""
        if type(expr) is not cst.Subscript or len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
            return None
        root = expr.value
        while type(root) is cst.Subscript:
            root = root.value
        if type(root) is not cst.Name:
            return None
        bound = self.env.get(root.value)
        if isinstance(bound, Shape) and bound.value is not None:
            return None  # a value the walk knows (a loop's element, a list it filled)
        return constant_item(expr, self.facts)

    def _through_constant_items(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """``expr`` with the constant item its chain of attributes, indexes and calls
        starts from spelled out (`CONFIG["layers"][i].output` → `model.layers[i].output`),
        or None when there is none."""
        item = self._constant_item(expr)
        if item is not None:
            return item
        kind = type(expr)
        if kind is cst.Attribute or kind is cst.Subscript:
            inner = self._through_constant_items(expr.value)
            return None if inner is None else expr.with_changes(value=inner)
        if kind is cst.Call and type(expr.func) is cst.Attribute:
            inner = self._through_constant_items(expr.func)
            return None if inner is None else expr.with_changes(func=inner)
        return None

    def _tokenized(self, call: cst.Call) -> Shape | None:
        """``model.tokenizer(text, return_tensors="pt")`` of a text (or list of texts) the
        walk knows: its ``input_ids`` and ``attention_mask``, int64 ``[texts, tokens]``
        (the longest text's tokens: a batch of tensors is padded to it)."""
        if type(call.func) is not cst.Attribute or call.func.attr.value != "tokenizer" and not (
            call.func.attr.value == "__call__" and type(call.func.value) is cst.Attribute
            and call.func.value.attr.value == "tokenizer"
        ):
            return None
        owner = call.func.value if call.func.attr.value == "tokenizer" else call.func.value.value
        if self.value(owner) != ModuleRef():
            return None  # not a model's tokenizer
        if not any(a.keyword is not None and a.keyword.value == "return_tensors" for a in call.args):
            return None  # lists of ids, not tensors
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(args) != 1:
            return None
        text = self.constant_value(args[0])
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) for t in texts):
            return None
        ids = Shape.tensor((len(texts), max(self.tokens(t) for t in texts)), "int64")
        return Shape.container([ids, ids], ("input_ids", "attention_mask"))

    def value(self, expr: cst.BaseExpression) -> Shape | ModuleRef:
        kind = type(expr)
        if kind is cst.Subscript or kind is cst.Attribute or kind is cst.Call:
            spelled = self._through_constant_items(expr)
            if spelled is not None:  # `layers = CONFIG["layers"]`: a module, not an unknown item
                return self.value(spelled)
        if kind is cst.Call:
            tokenized = self._tokenized(expr)
            if tokenized is not None:
                return tokenized
            text = self._string_method(expr)
            if isinstance(text, str):  # `text.lower()`: the string it gives
                return Shape.python("str", text)
            computed = self._computed(expr)
            if computed is not NO_VALUE:  # `statistics.median(scores)` of scores the walk knows
                return Shape.python(type(computed).__name__, computed)
        forward = self.forward
        if forward is not None:
            dims, seq, batch, new_tokens = forward.dims, forward.seq, forward.batch, forward.max_new_tokens
        else:  # client code: the request's model (or the first), a default prompt, one row
            dims = self.request.dims if self.request is not None else self._default_dims
            seq, batch, new_tokens = self._seq_len, 1, None
        env = self.env
        # value_of reads from env only the names the expression spells: with their values
        # (and the types inside them: 1 == 1.0 == True), they are the key of a value
        # shared by the versions of the tree that hold the expression
        target, names = expression_key(expr)
        read = tuple([(name, exact(env.get(name, UNBOUND))) for name in names])
        try:
            return value_in(target, dims, self._model_key, seq, batch, new_tokens, read)
        except TypeError:  # a value that does not hash (a list)
            return value_of(
                expr, dims, model_name=self.model_names, seq_len=seq, batch=batch,
                env=env, max_new_tokens=new_tokens,
            )

    def shape(self, expr: cst.BaseExpression) -> Shape:
        value = self.value(expr)
        if isinstance(value, ModuleRef):
            return Shape.unknown("a module")
        return value

    def constant_value(self, expr: cst.BaseExpression) -> Any:
        value = python_literal(expr)
        if value is not NO_VALUE:
            return value
        if type(expr) is cst.Name:
            bound = self.env.get(expr.value)
            if isinstance(bound, Shape) and bound.kind in ("python", "container") and bound.value is not None:
                return bound.value
            if expr.value not in self.env:
                constant = self.facts.constant(expr.value)
                if constant is not None:
                    return self.constant_value(constant)
        if type(expr) in (cst.Attribute, cst.Subscript):
            # `cfg.prompt` / `CONFIG["prompt"]`: a config object spelled out in the script
            entry = config_entry(expr, self.facts)
            if entry is not None:
                return self.constant_value(entry)
        if type(expr) is cst.Subscript and len(expr.slice) == 1:
            item = expr.slice[0].slice
            if type(item) is cst.Slice:  # PROMPTS[:2]
                items = self.elements(expr)
                return items if items is not None else NO_VALUE
            if type(item) is cst.Index:  # PROMPTS[2]
                index = self.integer(item.value)
                items = self.elements(expr.value)
                if index is not None and items is not None and -len(items) <= index < len(items):
                    return items[index]
                found = self.value(expr)  # `example["text"]` of a record the walk holds
                if isinstance(found, Shape) and found.kind == "python" and _plain(found.value) \
                        and found.value is not None:
                    return found.value
        if type(expr) in (cst.Tuple, cst.List):  # `("pos", POS)`
            items = self.elements(expr)
            if items is not None and not any(item is NO_VALUE for item in items):
                return tuple(items) if type(expr) is cst.Tuple else items
            return NO_VALUE
        if type(expr) is cst.FormattedString:
            return self._formatted(expr)
        if type(expr) is cst.BinaryOperation:  # `layer + 1` of a known layer
            number = self.integer(expr)
            return self._joined_text(expr) if number is None else number
        if type(expr) is cst.Call:
            text = self._string_method(expr)
            if text is not None:
                return text
            computed = self._computed(expr)
            if computed is not NO_VALUE:
                return computed
            if dotted_name(expr.func) == "len" and len(expr.args) == 1 and expr.args[0].keyword is None \
                    and not expr.args[0].star and "len" not in self.facts.functions:
                # `len(prompt.split())` of a string the walk knows
                sized = self.constant_value(expr.args[0].value)
                if isinstance(sized, (str, list, tuple)) and _plain(sized):
                    return len(sized)
        return NO_VALUE

    def _joined_text(self, expr: cst.BinaryOperation) -> Any:
        """`"lorem ipsum " * 3000`, `PREFIX + doc`: text the walk knows made longer (a prompt's
        tokens decide a request's time, and whether a session must be split), up to
        :data:`LONGEST_TEXT` characters."""
        operator = type(expr.operator)
        if operator is not cst.Multiply and operator is not cst.Add:
            return NO_VALUE
        left, right = self.constant_value(expr.left), self.constant_value(expr.right)
        if operator is cst.Add:
            joined = isinstance(left, str) and isinstance(right, str) and len(left) + len(right) <= LONGEST_TEXT
            return left + right if joined else NO_VALUE
        text, times = (left, right) if isinstance(left, str) else (right, left)
        if isinstance(text, str) and type(times) is int and len(text) * max(times, 0) <= LONGEST_TEXT:
            return text * times
        return NO_VALUE

    def truth(self, test: cst.BaseExpression) -> bool | None:
        """The value of an `if` test the walk knows before running (`prompt == "skip"` in
        an unrolled loop, `not DEBUG`, `MODE in ("fast", "all")`), else None."""
        kind = type(test)
        if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self.truth(test.expression)
            return None if inner is None else not inner
        if kind is cst.BooleanOperation:
            left, right = self.truth(test.left), self.truth(test.right)
            if type(test.operator) is cst.And:
                return False if left is False or right is False else None if left is None or right is None else True
            return True if left is True or right is True else None if left is None or right is None else False
        if kind is cst.Comparison and len(test.comparisons) == 1:
            operator = type(test.comparisons[0].operator)
            compare = _COMPARISONS.get(operator)
            if compare is None:
                return None
            left, right = self.constant_value(test.left), self.constant_value(test.comparisons[0].comparator)
            if not (_plain(left) and _plain(right)):
                return None
            try:
                return bool(compare(left, right))
            except TypeError:
                return None
        value = self.constant_value(test)
        return bool(value) if _plain(value) else None

    def _not_rebound(self, name: str) -> bool:
        """Is ``name`` neither a function of the script nor a name the walk has bound (the
        builtin `max` or an imported module, not the script's own)?"""
        return name not in self.facts.functions and name not in self.env

    def _computed(self, call: cst.Call) -> Any:
        """What a call of a function that gives a plain value of plain values returns (a
        builtin of _VALUE_BUILTINS the script does not rebind, a function of a module of
        VALUE_MODULES), computed when the walk knows every argument; else NO_VALUE."""
        name = dotted_name(call.func)
        if name is None or not call.args or any(a.keyword is not None or a.star for a in call.args):
            return NO_VALUE
        head = name.split(".")[0]
        if not self._not_rebound(head):
            return NO_VALUE  # the script's own `max`, a variable named `statistics`
        function = _VALUE_BUILTINS.get(name) if head not in self.facts.imports else None
        if function is None and head in self.facts.imports:
            module, _, attribute = qualify_dotted(name, self.facts.imports).rpartition(".")
            if module in VALUE_MODULES:
                function = getattr(importlib.import_module(module), attribute, None)
        if not callable(function):
            return NO_VALUE
        args = [self.constant_value(a.value) for a in call.args]
        if not all(_plain(a) and a is not None for a in args):
            return NO_VALUE
        try:
            found = function(*args)
        except Exception:  # noqa: BLE001 - what the call raises, the script finds when it runs
            return NO_VALUE
        return found if isinstance(found, (bool, int, float, str)) else NO_VALUE

    def _string_method(self, call: cst.Call) -> str | list | bool | int | None:
        """What a string method that takes no argument (`text.lower()`, `.isdigit()`) gives
        of a string the walk knows; `text.split()`, `text.split(sep)` of a known `sep`; and
        `text.startswith(...)`, `.replace(...)` and the others of known text arguments."""
        if type(call.func) is not cst.Attribute:
            return None
        method = call.func.attr.value
        if method == "split" and len(call.args) <= 1 and all(a.keyword is None and not a.star for a in call.args):
            text = self.constant_value(call.func.value)
            sep = self.constant_value(call.args[0].value) if call.args else None
            if isinstance(text, str) and (sep is None or (isinstance(sep, str) and sep)):
                return text.split(sep)
            return None
        if method in _STRING_METHODS_OF_TEXT and call.args and all(a.keyword is None and not a.star for a in call.args):
            text = self.constant_value(call.func.value)
            args = [self.constant_value(a.value) for a in call.args]
            texts = all(isinstance(a, str) or (isinstance(a, tuple) and all(isinstance(t, str) for t in a))
                        for a in args)
            if not isinstance(text, str) or not texts:
                return None
            try:
                return getattr(text, method)(*args)
            except (TypeError, ValueError):
                return None
        if call.args or method not in _STRING_METHODS:
            return None
        text = self.constant_value(call.func.value)
        return getattr(text, method)() if isinstance(text, str) else None

    def _formatted(self, expr: cst.FormattedString) -> Any:
        """An f-string whose fields are all known: ``f"Number {i} is"`` in an unrolled loop."""
        if "b" in expr.prefix.lower():
            return NO_VALUE
        out = []
        for part in expr.parts:
            if type(part) is cst.FormattedStringText:
                if "\\" in part.value:
                    return NO_VALUE
                out.append(part.value.replace("{{", "{").replace("}}", "}"))
                continue
            if part.format_spec or part.conversion not in (None, "s"):
                return NO_VALUE
            value = self.constant_value(part.expression)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                return NO_VALUE
            out.append(str(value))
        return "".join(out)

    def storage_of(self, expr: cst.BaseExpression) -> Storage | None:
        """The module output a view expression shares its storage with (``storage`` mode)."""
        node = expr
        while True:
            if type(node) is cst.Subscript:
                if not all(self._basic_index(e.slice) for e in node.slice):
                    return None
                node = node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                method = node.func.attr.value
                if method == "to" and not all(
                    type(a.value) is cst.SimpleString and "cpu" in a.value.value for a in node.args
                ):
                    return self._new_storage(node)
                if method not in _VIEW_METHODS and method != "to":
                    return self._new_storage(node)
                node = node.func.value
            elif type(node) is cst.Attribute and node.attr.value in ("output", "input"):
                forward = self.forward
                if forward is None:
                    value = self.value(node)
                else:  # an invoke's value is a view of the whole batch's
                    seen, forward.batch = forward.batch, forward.rows
                    try:
                        value = self.value(node)
                    finally:
                        forward.batch = seen
                if not (isinstance(value, Shape) and value.is_tensor):
                    return None
                ref = self.value(node.value)
                key = None
                if forward is not None and isinstance(ref, ModuleRef) and None not in ref.path:
                    key = (forward.serial, ref.dotted(), node.attr.value)
                return Storage(value, key, forward.times if forward is not None else 1.0)
            elif type(node) is cst.Attribute and node.attr.value in ("T", "mT", "data"):
                node = node.value
            elif type(node) is cst.Name:
                return self.storage.get(node.value)
            else:
                return self._new_storage(node)

    def _new_storage(self, node: cst.BaseExpression) -> Storage | None:
        """A tensor computed here (``logits.log_softmax(-1)``, ``a + b``): a storage of its
        own, which a view of it ships whole."""
        if type(node) not in (cst.Call, cst.BinaryOperation, cst.UnaryOperation):
            return None
        value = self.value(node)
        if isinstance(value, Shape) and value.is_tensor and value.known:
            return Storage(value, None, 1.0)
        return None

    def _bound_storage(self, expr: cst.BaseExpression) -> Storage | None:
        """What a name bound to ``expr`` is a view of, for :meth:`sent` to read later —
        which it does only in ``storage`` mode: in ``compact`` mode nothing else reads
        ``self.storage``, so the walk does not work it out (two shape evaluations)."""
        return self.storage_of(expr) if self.view_mode == "storage" else None

    def _basic_index(self, item: cst.BaseSlice) -> bool:
        if type(item) is cst.Slice:
            return True
        value = item.value
        if type(value) in (cst.Integer, cst.Ellipsis) or (
            type(value) is cst.Name and value.value == "None"
        ):
            return True
        if type(value) is cst.UnaryOperation:
            return type(value.expression) is cst.Integer
        if type(value) in (cst.Name, cst.Attribute, cst.BinaryOperation, cst.Subscript, cst.Call):
            shape = self.value(value)  # `rows[1]`, `len(prompts) - 1`: a Python int selects too
            return isinstance(shape, Shape) and shape.kind == "python" and shape.dtype in ("int", "number")
        return False

    def sent_size(self, expr: cst.BaseExpression) -> tuple[int | None, Shape]:
        """(bytes the server's torch.save writes for ``expr``, its shape)."""
        size, shape, _ = self.sent(expr)
        return size, shape

    def sent(self, expr: cst.BaseExpression) -> tuple[int | None, Shape, Storage | None]:
        """:meth:`sent_size` and, when the size is a storage the value is a view of
        (``storage`` mode), that storage: torch.save writes a storage once per result."""
        shape = self.shape(expr)
        if shape.kind == "unknown" and type(expr) is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value == "item":  # whatever it was, .item() is a Python number
                shape = Shape.python("number")
        size = serialized_size(shape)
        if self.view_mode == "storage" and shape.is_tensor:
            storage = self.storage_of(expr)
            whole = storage.shape if storage is not None else None
            if whole is not None and whole.numel and shape.numel is not None and whole.numel > shape.numel:
                return whole.numel * dtype_size(whole.dtype) + TENSOR_OVERHEAD, shape, storage
        return size, shape, None

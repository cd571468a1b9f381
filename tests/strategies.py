"""Hypothesis strategies: naive nnsight scripts built from a grammar of real patterns.

:func:`scripts` draws a whole script the way people write them before optimizing:

* a model — GPT-2 (``openai-community/gpt2``, ``model.transformer.h[i]``, 12 layers)
  or Llama (``meta-llama/Llama-3.1-8B``, ``model.model.layers[i]``, 32 layers);
* ``remote=True`` spelled as a literal or through a module-level ``REMOTE`` constant;
* one to three *segments*, each a real pattern: a loop over layers / prompts /
  steering coefficients, nested loops, a list or dict accumulator (filled after the
  trace, or — the classic bug — inside it), consecutive traces, one trace with a
  loop inside, then reductions after the trace (``argmax``/``item``/indexing/``sum``);
* helper functions defined in the file and used by the reductions;
* client-side effects between and after the traces (``print``, appending to a file);
* comments in odd places: own lines inside loops and blocks, trailing comments after
  statements and after a ``with ...:`` header, inside a multi-line ``trace(...)`` call,
  between segments, after the last statement of an indented block;
* optionally everything under ``if __name__ == "__main__":``.

Every script runs on the execution check's tiny models (layer indices stay below the
real layer count, loops are short, every value is defined before it is read), so the
same strategy feeds both the static properties and the execution property.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st


@dataclass(frozen=True)
class Family:
    repo: str
    n_layers: int
    layers: str  # the layer list's path, e.g. model.transformer.h


GPT2 = Family("openai-community/gpt2", 12, "model.transformer.h")
LLAMA = Family("meta-llama/Llama-3.1-8B", 32, "model.model.layers")

PROMPT_POOL = (
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "The cat sat on the",
    "Hello, my name is",
    "Water boils at a temperature of",
)
COMMENT_WORDS = (
    "keep this", "TODO: batch these", "one request per layer (slow)", "see notebook",
    "résumé of the run", "NB: remote", "x = 1  # not code", "layer loop", "sum later",
    "α·β steering", "",
)


@dataclass
class Script:
    """A generated script; its repr is the source, so failing examples read well."""

    source: str
    family: Family
    remote_constant: bool
    segments: tuple[str, ...] = field(default_factory=tuple)
    # the original fills a client list/dict inside a remote trace: it is wrong on NDIF
    # (the container stays empty) and the fix legitimately downloads more
    client_bug: bool = False

    def __repr__(self) -> str:
        kinds = ", ".join(self.segments)
        return f"Script({self.family.repo}, [{kinds}]):\n{self.source}"


class _Writer:
    """Lines of a script, with numbered comments drawn at the places asked for."""

    def __init__(self, draw, comment_rate: float) -> None:
        self.draw = draw
        self.lines: list[str] = []
        self.count = 0
        self.comment_rate = comment_rate

    def _wants_comment(self) -> bool:
        if self.comment_rate <= 0:
            return False
        return self.draw(st.integers(0, 99)) < int(self.comment_rate * 100)

    def _comment(self) -> str:
        self.count += 1
        word = self.draw(st.sampled_from(COMMENT_WORDS))
        return f"# note {self.count}" + (f": {word}" if word else "")

    def trailing(self) -> str:
        return f"  {self._comment()}" if self._wants_comment() else ""

    def line(self, indent: int, text: str, *, trailing: bool = True) -> None:
        self.lines.append("    " * indent + text + (self.trailing() if trailing else ""))

    def maybe_comment(self, indent: int) -> None:
        if self._wants_comment():
            self.lines.append("    " * indent + self._comment())

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def text(self) -> str:
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


@dataclass
class _Context:
    family: Family
    remote: str  # `True` or `REMOTE`
    prompts: list[str]
    layer_iter: str  # e.g. `range(N_LAYERS)` or `LAYERS`
    layer_list: list[int]
    fixed_layer: int
    coefficients: list[float]
    helpers: bool
    multiline_trace: bool
    call_comments: bool = False  # comments inside a multi-line `trace(...)` call
    client_bug: bool = False
    counter: int = 0
    names: list[tuple[str, str]] = field(default_factory=list)  # (name, kind) to report

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}_{self.counter}"


def _trace(w: _Writer, ctx: _Context, indent: int, prompt: str) -> None:
    """`with model.trace(prompt, remote=...):`, sometimes spread over lines with comments."""
    if ctx.multiline_trace and w.draw(st.booleans()):
        w.line(indent, "with model.trace(", trailing=False)
        w.line(indent + 1, f"{prompt},", trailing=ctx.call_comments)
        w.line(indent + 1, f"remote={ctx.remote},", trailing=ctx.call_comments)
        w.line(indent, "):")
    else:
        w.line(indent, f"with model.trace({prompt}, remote={ctx.remote}):")


def _reduce_hidden(draw, ctx: _Context, var: str) -> tuple[str, str]:
    """A reduction of a saved hidden state `[1, seq, d]`: (code, tensor|number)."""
    options = [
        (f"{var}[0, -1]", "tensor"),
        (f"{var}.norm().item()", "number"),
        (f"{var}.sum().item()", "number"),
        (f"{var}[0, -1].argmax().item()", "number"),
        (f"{var}[:, -1].mean().item()", "number"),
    ]
    if ctx.helpers:
        options.append((f"last_token({var})", "tensor"))
    return draw(st.sampled_from(options))


def _reduce_logits(draw, ctx: _Context, var: str) -> str:
    options = [
        f"{var}[0, -1].argmax().item()",
        f"int({var}[0, -1].argmax())",
        f"{var}[0, -1].softmax(dim=-1).max().item()",
        f"{var}[0, -1, 0].item()",
        f"{var}.sum().item()",
    ]
    if ctx.helpers:
        options.append(f"top_token({var})")
    return draw(st.sampled_from(options))


def _after(draw, acc: str, kind: str, element: str) -> str:
    """A reduction after the loop of a filled accumulator."""
    if kind == "list" and element == "tensor":
        return draw(st.sampled_from([
            f"[round(float(a.sum()), 4) for a in {acc}]",
            f"len({acc})",
            f"{acc}[-1].argmax().item()",
            f"sum(a.norm().item() for a in {acc})",
        ]))
    if kind == "list":
        return draw(st.sampled_from([f"sum({acc})", f"max({acc})", f"{acc}[0]", f"len({acc})"]))
    if element == "tensor":
        return draw(st.sampled_from([
            f"sorted({acc})",
            f"len({acc})",
            f"[round(v.sum().item(), 4) for v in {acc}.values()]",
        ]))
    return draw(st.sampled_from([
        f"max({acc}, key={acc}.get)",
        f"sorted({acc}.items())",
        f"len({acc})",
        f"list({acc}.values())",
    ]))


def _client_effect(draw, w: _Writer, indent: int, text_expr: str) -> None:
    """`print(...)` or an append to a file: code that must stay on the client."""
    if draw(st.booleans()):
        w.line(indent, f"print({text_expr})")
    else:
        w.line(indent, 'with open("results.txt", "a") as handle:')
        w.line(indent + 1, f'handle.write(str({text_expr}) + "\\n")')


# -- segments --------------------------------------------------------------------------


def _layer_loop(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    acc = ctx.fresh("acts")
    layers = ctx.family.layers
    w.maybe_comment(indent)
    w.line(indent, f"{acc} = []")
    w.line(indent, f"for layer in {ctx.layer_iter}:")
    w.maybe_comment(indent + 1)
    _trace(w, ctx, indent + 1, "PROMPT")
    w.maybe_comment(indent + 2)
    inside = draw(st.booleans())
    if inside:  # the classic bug: a client list appended inside a remote trace
        w.line(indent + 2, f"{acc}.append({layers}[layer].output[:, -1].save())")
        element = "tensor"
        ctx.client_bug = True
    else:
        w.line(indent + 2, f"hidden = {layers}[layer].output.save()")
        code, element = _reduce_hidden(draw, ctx, "hidden")
        w.maybe_comment(indent + 1)
        w.line(indent + 1, f"{acc}.append({code})")
    if draw(st.integers(0, 3)) == 0:
        _client_effect(draw, w, indent + 1, f"(layer, len({acc}))")
    w.maybe_comment(indent + 1)  # a comment after the last statement of the loop body
    result = ctx.fresh("summary")
    w.line(indent, f"{result} = {_after(draw, acc, 'list', element)}")
    ctx.names.append((result, "value"))


def _prompt_loop(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    acc = ctx.fresh("top")
    enumerated = draw(st.booleans())
    w.maybe_comment(indent)
    w.line(indent, f"{acc} = {draw(st.sampled_from(['{}', 'dict()']))}")
    header = "for i, prompt in enumerate(PROMPTS):" if enumerated else "for prompt in PROMPTS:"
    w.line(indent, header)
    _trace(w, ctx, indent + 1, "prompt")
    sliced = draw(st.booleans())
    w.line(indent + 2, "logits = model.lm_head.output" + ("[:, -1:].save()" if sliced else ".save()"))
    w.maybe_comment(indent + 1)
    key = "i" if enumerated else "prompt"
    w.line(indent + 1, f"{acc}[{key}] = {_reduce_logits(draw, ctx, 'logits')}")
    if draw(st.integers(0, 2)) == 0:
        _client_effect(draw, w, indent + 1, f"({key}, {acc}[{key}])")
    result = ctx.fresh("best")
    w.line(indent, f"{result} = {_after(draw, acc, 'dict', 'number')}")
    ctx.names.append((result, "value"))


def _coefficient_sweep(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    acc = ctx.fresh("probs")
    layer = f"{ctx.family.layers}[{ctx.fixed_layer}]"
    op = draw(st.sampled_from(["*", "+"]))
    w.maybe_comment(indent)
    w.line(indent, f"{acc} = {{}}")
    w.line(indent, "for coefficient in COEFFICIENTS:")
    w.maybe_comment(indent + 1)
    _trace(w, ctx, indent + 1, "PROMPT")
    w.line(indent + 2, f"{layer}.output = {layer}.output {op} coefficient")
    w.maybe_comment(indent + 2)
    w.line(indent + 2, "logits = model.lm_head.output.save()")
    w.line(indent + 1, f"{acc}[coefficient] = {_reduce_logits(draw, ctx, 'logits')}")
    ctx.names.append((acc, "dict"))


def _nested_loops(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    acc = ctx.fresh("grid")
    as_list = draw(st.booleans())
    w.maybe_comment(indent)
    w.line(indent, f"{acc} = " + ("[]" if as_list else "{}"))
    w.line(indent, "for prompt in PROMPTS:")
    w.maybe_comment(indent + 1)
    w.line(indent + 1, f"for layer in {ctx.layer_iter}:")
    _trace(w, ctx, indent + 2, "prompt")
    w.line(indent + 3, f"hidden = {ctx.family.layers}[layer].output.save()")
    code, element = _reduce_hidden(draw, ctx, "hidden")
    if as_list:
        w.line(indent + 2, f"{acc}.append({code})")
    else:
        w.line(indent + 2, f"{acc}[(prompt, layer)] = {code}")
    w.maybe_comment(indent + 2)
    result = ctx.fresh("summary")
    w.line(indent, f"{result} = {_after(draw, acc, 'list' if as_list else 'dict', element)}")
    ctx.names.append((result, "value"))


def _inner_loop(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    acc = ctx.fresh("per_layer")
    dict_acc = draw(st.booleans())
    w.maybe_comment(indent)
    w.line(indent, f"{acc} = " + ("{}" if dict_acc else "[]"))
    _trace(w, ctx, indent, "PROMPT")
    w.maybe_comment(indent + 1)
    w.line(indent + 1, f"for layer in {ctx.layer_iter}:")
    value = f"{ctx.family.layers}[layer].output[0, -1].save()"
    w.line(indent + 2, f"{acc}[layer] = {value}" if dict_acc else f"{acc}.append({value})")
    ctx.client_bug = True
    result = ctx.fresh("summary")
    w.line(indent, f"{result} = {_after(draw, acc, 'dict' if dict_acc else 'list', 'tensor')}")
    ctx.names.append((result, "value"))


def _consecutive(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    first, second = ctx.fresh("clean"), ctx.fresh("patched")
    layer = f"{ctx.family.layers}[{ctx.fixed_layer}]"
    w.maybe_comment(indent)
    _trace(w, ctx, indent, "PROMPTS[0]")
    w.line(indent + 1, f"{first} = {layer}.output.mean(dim=1).save()")
    w.maybe_comment(indent)  # between the two blocks
    logits = "model.lm_head.output"
    between = draw(st.sampled_from(["", "int", "tuple"]))  # a client value the second reads
    if between:
        value = ctx.fresh("scale" if between == "int" else "rows")
        w.line(indent, f"{value} = 2" if between == "int" else f"{value} = 0, -1")
        logits = f"({logits} * {value})" if between == "int" else f"{logits}[{value}[0]:]"
        ctx.names.append((value, "value"))
    _trace(w, ctx, indent, "PROMPTS[-1]")
    w.line(indent + 1, f"{second} = {logits}.save()")
    result = ctx.fresh("score")
    w.line(indent, f"{result} = {first}.norm().item() + {_reduce_logits(draw, ctx, second)}")
    ctx.names.append((result, "value"))


def _single_trace(draw, w: _Writer, ctx: _Context, indent: int) -> None:
    var = ctx.fresh("logits")
    w.maybe_comment(indent)
    _trace(w, ctx, indent, "PROMPT")
    w.line(indent + 1, f"{var} = model.lm_head.output.save()")
    result = ctx.fresh("prediction")
    w.line(indent, f"{result} = {_reduce_logits(draw, ctx, var)}")
    ctx.names.append((result, "value"))


SEGMENTS = {
    "layer-loop": _layer_loop,
    "prompt-loop": _prompt_loop,
    "coefficient-sweep": _coefficient_sweep,
    "nested-loops": _nested_loops,
    "inner-loop": _inner_loop,
    "consecutive": _consecutive,
    "single-trace": _single_trace,
}

HELPERS = '''\
def last_token(hidden):
    """The last position's vector of the first prompt."""
    return hidden[0, -1]


def top_token(logits):
    # the most likely next token
    return logits[0, -1].argmax().item()
'''


@st.composite
def scripts(draw, max_segments: int = 3, comments: bool = True, call_comments: bool = True) -> Script:
    """A naive script; ``call_comments`` also puts comments inside multi-line calls."""
    family = draw(st.sampled_from([GPT2, LLAMA]))
    remote_constant = draw(st.booleans())
    n_layers = draw(st.integers(1, 3))
    layer_list = sorted(draw(st.sets(st.integers(0, family.n_layers - 1), min_size=1, max_size=3)))
    layer_style = draw(st.sampled_from(["range-constant", "range-literal", "list-constant"]))
    layer_iter = {
        "range-constant": "range(N_LAYERS)",
        "range-literal": f"range({n_layers})",
        "list-constant": "LAYERS",
    }[layer_style]
    prompts = list(draw(st.lists(st.sampled_from(PROMPT_POOL), min_size=1, max_size=3, unique=True)))
    ctx = _Context(
        family=family,
        remote="REMOTE" if remote_constant else "True",
        prompts=prompts,
        layer_iter=layer_iter,
        layer_list=layer_list,
        fixed_layer=draw(st.integers(0, family.n_layers - 1)),
        coefficients=draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]), min_size=1, max_size=3, unique=True)),
        helpers=draw(st.booleans()),
        multiline_trace=draw(st.booleans()),
        call_comments=call_comments,
    )
    w = _Writer(draw, draw(st.sampled_from([0.0, 0.3, 0.6])) if comments else 0.0)
    if draw(st.booleans()):
        w.line(0, '"""A naive experiment, one request per step."""', trailing=False)
    w.maybe_comment(0)
    if draw(st.booleans()):
        w.line(0, "import json")
    w.line(0, "from nnsight import LanguageModel")
    w.blank()
    w.line(0, f'model = LanguageModel("{family.repo}")')
    if remote_constant:
        w.line(0, "REMOTE = True")
    w.line(0, f"PROMPT = {prompts[0]!r}")
    w.line(0, f"PROMPTS = {prompts!r}")
    if layer_style == "range-constant":
        w.line(0, f"N_LAYERS = {n_layers}")
    if layer_style == "list-constant":
        w.line(0, f"LAYERS = {layer_list!r}")
    w.line(0, f"COEFFICIENTS = {ctx.coefficients!r}")
    w.blank()
    if ctx.helpers:
        w.lines.extend(HELPERS.splitlines())
        w.blank()
    main_guard = draw(st.integers(0, 5)) == 0
    indent = 0
    if main_guard:
        w.line(0, 'if __name__ == "__main__":')
        indent = 1
    kinds = draw(st.lists(st.sampled_from(sorted(SEGMENTS)), min_size=1, max_size=max_segments))
    for number, kind in enumerate(kinds):
        if number and draw(st.booleans()):
            w.blank()
        SEGMENTS[kind](draw, w, ctx, indent)
        if draw(st.integers(0, 3)) == 0 and ctx.names:  # a client effect between segments
            _client_effect(draw, w, indent, ctx.names[-1][0])
    w.maybe_comment(indent)
    shown = ", ".join(name for name, _ in ctx.names)
    if shown:
        if draw(st.booleans()) or "json" not in "\n".join(w.lines):
            w.line(indent, f"print({shown})")
        else:
            w.line(indent, 'with open("summary.json", "w") as out:')
            w.line(indent + 1, f"json.dump(str(({shown},)), out)")
    return Script(w.text(), family, remote_constant, tuple(kinds), ctx.client_bug)


__all__ = ["Family", "GPT2", "LLAMA", "Script", "scripts", "SEGMENTS"]

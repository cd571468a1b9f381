"""Loops by their headers: how the cost model names a loop of unknown length
(``for row in rows``), and where a source holds the loops of a name.

A header is spelled by ``ast.unparse`` — whitespace, comments and line breaks of the
source do not change it — so the name the walk gives a loop of one version of the tree
is the name the report finds it by in the source as written (a pass that moves a loop
into a session leaves its header as it was), and a loop of a window is found in its file.
"""

from __future__ import annotations

import ast
import functools

import libcst as cst

from ndif_opt.syntax.positions import code_of

__all__ = ["cst_expression_text", "cst_loop_header", "given_lengths", "header_of_text", "loop_header", "loop_lines",
           "recursion_header"]


def loop_header(node: ast.For | ast.AsyncFor | ast.While | ast.comprehension) -> str:
    """``for i, row in enumerate(rows)`` / ``while not done``; a progress bar around the
    iterable is left out (``tqdm(rows, desc=...)`` is ``rows``: a pass that keeps the bar
    on your machine takes it off the loop)."""
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}"
    target = node.target
    if isinstance(target, ast.Tuple) and target.elts:
        names = ", ".join(ast.unparse(e) for e in target.elts)
    else:
        names = ast.unparse(target)
    return f"for {names} in {ast.unparse(_without_progress(node.iter))}"


_BARS = frozenset({"tqdm", "tqdm_notebook"})


def _without_progress(expr: ast.expr) -> ast.expr:
    if not isinstance(expr, ast.Call):
        return expr
    func = expr.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    positional = [a for a in expr.args if not isinstance(a, ast.Starred)]
    if name in _BARS and positional:
        return _without_progress(positional[0])
    if name == "trange":
        return ast.Call(func=ast.Name("range"), args=positional, keywords=[])
    return ast.Call(func=expr.func, args=[_without_progress(a) for a in expr.args], keywords=expr.keywords)


@functools.lru_cache(maxsize=1024)
def cst_loop_header(node: cst.For | cst.While | cst.CompFor) -> str:
    """:func:`loop_header` of a libcst loop (a pure function of an immutable node, cached)."""
    if type(node) is cst.While:
        header = f"while ({code_of(node.test)}): pass"
    else:
        header = f"for ({code_of(node.target)}) in ({code_of(node.iter)}): pass"
    try:
        return loop_header(ast.parse(header).body[0])
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(header.removesuffix(": pass").split())


@functools.lru_cache(maxsize=4096)
def cst_expression_text(expr: cst.BaseExpression) -> str:
    """An expression as ``ast.unparse`` spells it (``rows``, ``df.iterrows()``)."""
    code = code_of(expr).strip()
    try:
        return ast.unparse(ast.parse(f"({code})", mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(code.split())


def given_lengths(trips) -> tuple[dict[str, int], dict[str, int]]:
    """The loop lengths a configuration gives (``{"for row in rows" = 817}``): (header ->
    length, iterable -> length). A header names its loop; its iterable, when it is a plain
    name or attribute (``rows``), has that length wherever the script measures or copies it."""
    headers, iterables = {}, {}
    for text, n in (trips or {}).items():
        header = header_of_text(str(text))
        headers[header] = int(n)
        try:
            node = ast.parse(header + ": pass").body[0]
        except (SyntaxError, ValueError, RecursionError, IndexError):
            continue
        if isinstance(node, ast.For) and isinstance(node.iter, (ast.Name, ast.Attribute)):
            iterables[ast.unparse(node.iter)] = int(n)
    return headers, iterables


def header_of_text(text: str) -> str:
    """:func:`loop_header` of a header as someone wrote it (``for row  in rows``, with or
    without the colon): the name the report gives that loop; the text itself when it is
    not one."""
    try:
        node = ast.parse(text.strip().removesuffix(":") + ": pass").body[0]
    except (SyntaxError, ValueError, RecursionError, IndexError):
        return text.strip()
    return loop_header(node) if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else text.strip()


def recursion_header(function: str) -> str:
    """The header a function's recursion is named by, as a loop is by its own: ``def search``."""
    return f"def {function}"


def loop_lines(source: str) -> dict[tuple[str, str], list[int]]:
    """(header, the function holding the loop or "") -> the 1-based lines of such loops
    in ``source`` (for a comprehension, the line of its expression); empty when the
    source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    found: dict[tuple[str, str], list[int]] = {}
    stack: list[tuple[ast.AST, str, int]] = [(tree, "", 1)]
    while stack:
        node, function, line = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
            # the recursion of a function that calls itself is counted as a loop of its own
            found.setdefault((recursion_header(function), function), []).append(node.lineno)
        line = getattr(node, "lineno", line)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.comprehension)):
            found.setdefault((loop_header(node), function), []).append(line)
        stack.extend((child, function, line) for child in ast.iter_child_nodes(node))
    for lines in found.values():
        lines.sort()
    return found


@functools.lru_cache(maxsize=1024)
def map_as_comprehension(call: cst.Call) -> tuple[cst.CompFor, cst.BaseExpression] | None:
    """A call that applies a function to each item of an iterable, read as a comprehension:
    `map(f, xs)` (and `filter(f, xs)`) as `[f(x) for x in xs]`, `map(lambda p: E, xs)` as
    `[E for p in xs]`, `sorted(xs, key=f)` (`min`, `max`, `xs.sort(key=f)`) as
    `[f(x) for x in xs]`: the comprehension's ``for`` clause and its element (built once per
    call: the walks key what they learn by node), or None for any other call (several
    iterables, a lambda of other parameters)."""
    found = _applied_per_item(call)
    if found is None:
        return None
    function, iterable = found
    if type(function) is cst.Lambda:
        params = function.params
        if len(params.params) != 1 or params.star_arg is not cst.MaybeSentinel.DEFAULT and params.star_arg \
                or params.kwonly_params or params.star_kwarg or params.posonly_params:
            return None
        target: cst.BaseAssignTargetExpression = params.params[0].name
        element = function.body
    elif type(function) is cst.Name:
        target = cst.Name(MAPPED_ITEM)
        element = cst.Call(func=function, args=(cst.Arg(cst.Name(MAPPED_ITEM)),))
    else:
        return None
    return cst.CompFor(target=target, iter=iterable), element


#: builtins that call their `key=` function once per item of their one iterable
_KEYED = frozenset({"sorted", "min", "max"})
_APPLYING = _KEYED | {"map", "filter"}  # by name; `xs.sort(key=f)` as a method


def _applied_per_item(call: cst.Call) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(the function, the iterable) of a call that applies the function to each item."""
    func = call.func
    # (asked of every call the walks meet: the callee decides before the arguments are read)
    if type(func) is cst.Name and func.value in _APPLYING:
        name = func.value
    elif type(func) is cst.Attribute and func.attr.value == "sort":
        name = "sort"
    else:
        return None
    if any(arg.star for arg in call.args):
        return None
    positional = [arg.value for arg in call.args if arg.keyword is None]
    keys = [arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "key"]
    if name in ("map", "filter"):
        return (positional[0], positional[1]) if len(positional) == 2 == len(call.args) else None
    if name in _KEYED and len(positional) == 1 and keys:
        return keys[0], positional[0]
    if name == "sort" and not positional and keys:
        return keys[0], func.value
    return None


MAPPED_ITEM = "_ndif_mapped_item"  # the element `map(f, xs)` hands `f`, as a comprehension's variable

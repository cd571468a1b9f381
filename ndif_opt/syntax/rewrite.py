"""Small libcst building blocks shared by the passes.

Rewrites are planned as replacements of statement ranges inside a suite (the body of
the module or of an indented block), identified by the original suite node, and then
applied in one transform. Everything not replaced keeps its exact text.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from keyword import iskeyword

import libcst as cst

from ndif_opt.syntax.expressions import is_save_call, remote_arg, root_name
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import all_nodes, find_nodes, transform

Statements = list[cst.BaseStatement]


@dataclass
class SuitePlan:
    """Replacements of ``[start, end)`` statement ranges in suites, by suite identity."""

    edits: dict[int, list[tuple[int, int, Callable[[Statements], Statements] | _Removal]]] = field(
        default_factory=dict
    )

    def replace(self, suite: cst.CSTNode, start: int, end: int, build) -> None:
        self.edits.setdefault(id(suite), []).append((start, end, build))

    def remove(self, suite: cst.CSTNode, index: int) -> None:
        """Delete one statement; its blank lines pass to the statement after it."""
        self.edits.setdefault(id(suite), []).append((index, index + 1, REMOVED))

    def __bool__(self) -> bool:
        return bool(self.edits)

    def apply(self, module: cst.Module, facts=None) -> cst.Module:
        """The rewritten module. With the module's ``facts``, only the statements that
        enclose a rewritten suite are walked, and only the nodes above a rewritten suite are
        rebuilt (the rest is kept as it is, unvisited)."""
        enclosing = self._enclosing(facts)
        if enclosing is None:
            return module.visit(_SuiteRewriter(self))
        return transform(module, _SuiteRewriter(self, enclosing))

    def _enclosing(self, facts) -> set[int] | None:
        """ids of the compound statements around the rewritten suites; None: unknown."""
        if facts is None:
            return None
        keep: set[int] = set()
        found: set[int] = set()
        for info in facts.statements.values():
            if id(info.suite) in self.edits:
                found.add(id(info.suite))
                keep.update(id(a) for a in info.ancestors)
        return keep if found == set(self.edits) else None


# the nodes other than statements that may hold an indented block (from libcst's field
# annotations): a walk to the rewritten suites passes only these and statements
_MAY_HOLD_SUITES = frozenset(
    {cst.Module, cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase}
)


# every statement class (libcst's node classes are final: a type test is exact)
_STATEMENT_KINDS = frozenset(
    kind for kind in vars(cst).values()
    if isinstance(kind, type) and issubclass(kind, cst.BaseStatement) and not kind.__name__.startswith("Base")
)


class _SuiteRewriter(cst.CSTTransformer):
    def __init__(self, plan: SuitePlan, enclosing: set[int] | None = None) -> None:
        self.plan = plan
        self.enclosing = enclosing

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.enclosing is not None:
            kind = type(node)
            if kind in _MAY_HOLD_SUITES:
                return True
            if kind in _STATEMENT_KINDS:
                return id(node) in self.enclosing  # nothing to rewrite inside
            return False  # an expression, a decorator, layout: no statement inside
        return True  # (no visit_ methods)

    def on_leave(self, original, updated):
        # only suites are rewritten: the other nodes need not look for a leave_ method
        kind = type(original)
        if kind is cst.Module or kind is cst.IndentedBlock:
            return self._rewrite(original, updated)
        return updated

    def _rewrite(self, original, updated):
        edits = self.plan.edits.get(id(original))
        if not edits:
            return updated
        body = list(updated.body)
        # apply from the end so earlier indices stay valid
        for start, end, build in sorted(edits, key=lambda e: e[0], reverse=True):
            if build is REMOVED:
                removed = body[start]
                blanks = _leading_blank_lines(removed)
                del body[start:end]
                if start < len(body) and opens_a_cell(removed):
                    # the cell's marker (and the comments around it) stay where the cell starts
                    body[start] = body[start].with_changes(
                        leading_lines=list(removed.leading_lines) + list(body[start].leading_lines)
                    )
                elif start < len(body) and blanks and not _leading_blank_lines(body[start]):
                    body[start] = body[start].with_changes(
                        leading_lines=blanks + list(body[start].leading_lines)
                    )
            else:
                body[start:end] = build(body[start:end])
        return updated.with_changes(body=body)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return self._rewrite(original, updated)

    def leave_IndentedBlock(self, original, updated):
        return self._rewrite(original, updated)


class _Removal:
    """What :meth:`SuitePlan.remove` puts where a build function goes: the statement is
    deleted and its blank lines pass to the statement after it."""

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED = _Removal()


def _leading_blank_lines(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    blanks = []
    for line in stmt.leading_lines:
        if line.comment is not None:
            break
        blanks.append(line)
    return blanks


class _UnindentBlankLines(cst.CSTTransformer):
    """Blank lines that move into a deeper block must stay empty (no indentation)."""

    def leave_EmptyLine(self, original: cst.EmptyLine, updated: cst.EmptyLine) -> cst.EmptyLine:
        if updated.comment is None and updated.indent:
            return updated.with_changes(indent=False, whitespace=cst.SimpleWhitespace(""))
        return updated


def reindentable(stmt: cst.BaseStatement) -> cst.BaseStatement:
    """The statement ready to be nested one level deeper."""
    # rebuilding the statement costs far more than looking: most have no such line
    return stmt.visit(_UnindentBlankLines()) if _holds_indented_blank_line(stmt) else stmt


def _holds_indented_blank_line(root: cst.CSTNode) -> bool:
    """Does ``root`` hold a blank line (no comment) marked as indented? What a walk over
    every node finds, reading only the fields that may lead to an ``EmptyLine`` and
    stopping at the first (a moved statement is asked once: a cache would not help)."""
    todo = [root]
    # (locals: the loop meets thousands of nodes)
    pop, push, push_all = todo.pop, todo.append, todo.extend
    fields_of, leaves, empty_line = _BLANK_LINE_FIELDS, _HOLD_NO_BLANK_LINE, cst.EmptyLine
    while todo:
        node = pop()
        kind = type(node)
        if kind is empty_line:
            if node.comment is None and node.indent:
                return True
            continue
        for name in fields_of[kind]:
            value = getattr(node, name)
            held = type(value)
            if held is tuple or held is list:
                push_all(value)
            elif held not in leaves:
                push(value)
    return False


# the values that hold no EmptyLine (libcst's node classes are final: a type test is exact)
_NO_BLANK_LINE_CLASSES = (
    type(None), str, bool, int, cst.MaybeSentinel, cst.SimpleWhitespace, cst.Newline, cst.Comment, cst.TrailingWhitespace,
)
_HOLD_NO_BLANK_LINE = frozenset(_NO_BLANK_LINE_CLASSES)


def _may_hold_blank_line(annotation) -> bool:
    """Can a field so annotated lead to an ``EmptyLine``? (True when unsure.)"""
    if isinstance(annotation, type):
        return not issubclass(annotation, _NO_BLANK_LINE_CLASSES)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return False
    if origin is None:
        return True
    return any(_may_hold_blank_line(arg) for arg in typing.get_args(annotation))


class _BlankLineFields(dict):
    """Per node class (read from libcst's field annotations on first meeting it): the
    fields that may lead to an ``EmptyLine`` — not text, flags, plain whitespace,
    newlines or comments. Another value, a leaf, has none."""

    def __missing__(self, kind: type) -> tuple[str, ...]:
        if not dataclasses.is_dataclass(kind):
            fields: tuple[str, ...] = ()
        else:
            try:
                hints = typing.get_type_hints(kind)
            except Exception:  # an annotation that does not resolve: read every field
                hints = {}
            fields = tuple(
                f.name for f in dataclasses.fields(kind) if f.name not in hints or _may_hold_blank_line(hints[f.name])
            )
        self[kind] = fields
        return fields


_BLANK_LINE_FIELDS = _BlankLineFields()  # a fact about the installed libcst


def without_remote(call: cst.Call) -> cst.Call:
    """The call with its `remote=` argument removed (and a dangling comma fixed)."""
    arg = remote_arg(call)
    if arg is None:
        return call
    index = list(call.args).index(arg)
    args = [a for a in call.args if a is not arg]
    comment = _comment_after(arg)
    if index > 0:
        previous = args[index - 1]
        spacing = previous.comma.whitespace_after if isinstance(previous.comma, cst.Comma) else None
        if isinstance(spacing, cst.ParenthesizedWhitespace):
            if comment is not None:  # keep `remote=True,  # on NDIF`'s comment on a line of its own
                removed = arg.comma.whitespace_after
                spacing = spacing.with_changes(
                    empty_lines=[
                        *spacing.empty_lines,
                        cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(spacing.last_line.value), comment=comment),
                    ],
                    last_line=removed.last_line if call.args[-1] is arg else spacing.last_line,
                )
                args[index - 1] = previous.with_changes(comma=previous.comma.with_changes(whitespace_after=spacing))
        elif call.args[-1] is arg:
            args[-1] = previous.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def _comment_after(arg: cst.Arg) -> cst.Comment | None:
    comma = arg.comma
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        return comma.whitespace_after.first_line.comment
    return None


class StripRemote(cst.CSTTransformer):
    """Remove `remote=` from the with-items of the given blocks (by identity)."""

    def __init__(self, blocks: Sequence[cst.With]) -> None:
        self.targets = {id(b) for b in blocks}

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        if id(original) not in self.targets:
            return updated
        # (a grad-mode context before the block's call has no `remote=` to remove)
        return updated.with_changes(items=[i.with_changes(item=without_remote(i.item)) for i in updated.items])


class DropElementSaves(cst.CSTTransformer):
    """`acc.append(x.save())` → `acc.append(x)` and `acc[k] = x.save()` → `acc[k] = x`
    for relocated accumulators: the saved container brings its elements home."""

    def __init__(self, names: set[str], rebinds: set[str] = frozenset()) -> None:
        self.names = names
        self.rebinds = rebinds  # `x = e.save()` → `x = e` for these names
        self.unsaved_names: set[str] = set()  # `acc.append(x.save())`: `x` no longer comes back itself

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in ("append", "insert", "__setitem__", "setdefault")
            and root_name(func.value) in self.names
        ):
            for arg in updated.args:
                if is_save_call(arg.value) and isinstance(arg.value.func, cst.Attribute):
                    if isinstance(arg.value.func.value, cst.Name):
                        self.unsaved_names.add(arg.value.func.value.value)
            return updated.with_changes(
                args=[a.with_changes(value=unsave(a.value)) for a in updated.args]
            )
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        targets = updated.targets
        if len(targets) == 1 and isinstance(targets[0].target, cst.Name) and targets[0].target.value in self.rebinds:
            return updated.with_changes(value=unsave(updated.value))
        if len(targets) == 1 and isinstance(targets[0].target, cst.Subscript):
            if root_name(targets[0].target) in self.names:
                return updated.with_changes(value=unsave(updated.value))
        return updated


# expressions that can be the receiver of `.method()` as they are: anything else is wrapped
# in parentheses first (`3.save()` does not parse, `a, b.save()` saves only `b`,
# `await x.save()` saves before awaiting)
_RECEIVERS = (
    cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Dict, cst.Set,
    cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.SimpleString,
    cst.ConcatenatedString, cst.FormattedString, cst.Float, cst.Imaginary, cst.Ellipsis,
)


def method_call(receiver: cst.BaseExpression, method: str) -> cst.Call:
    """``receiver.method()``, the receiver parenthesized where Python would otherwise
    read the call as part of it (or not read it at all)."""
    if not isinstance(receiver, _RECEIVERS) and not receiver.lpar:
        receiver = receiver.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name(method)))


def unsave(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`x.save()` → `x`; `nnsight.save(x)` → `x`; anything else unchanged."""
    if not is_save_call(expr):
        return expr
    func = expr.func
    if isinstance(func, cst.Attribute) and func.attr.value == "save" and not expr.args:
        return func.value
    return expr.args[0].value


def empty_container_kind(expr: cst.BaseExpression | None) -> str | None:
    """"list" for `[]`/`list()`, "dict" for `{}`/`dict()`, else None."""
    if isinstance(expr, cst.List) and not expr.elements:
        return "list"
    if isinstance(expr, cst.Dict) and not expr.elements:
        return "dict"
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value in ("list", "dict")
        and not expr.args
    ):
        return expr.func.value
    return None


def saved_container(name: str, kind: str, like: cst.SimpleStatementLine | None = None):
    """`name = list().save()`, carrying over the comments of the statement it replaces."""
    # built, not parsed: what parsing the line gives, for a fraction of the cost
    value = method_call(cst.Call(func=cst.Name(kind)), "save")
    stmt = cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(target=_dotted(name))], value=value)])
    if like is not None:
        stmt = stmt.with_changes(leading_lines=comments_carried(like), trailing_whitespace=like.trailing_whitespace)
    return stmt


CELL_MARKER = re.compile(r"#\s*%%")  # a `# %%` cell marker: a notebook cell of a script starts here


def opens_a_cell(stmt: cst.BaseStatement) -> bool:
    """A `# %%` cell marker is among the comment lines above ``stmt``."""
    return any(line.comment is not None and CELL_MARKER.match(line.comment.value) for line in stmt.leading_lines)


def comments_carried(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The comment lines that go with ``stmt`` when it moves: none when a cell marker is
    among them (they stay where the cell starts: :meth:`SuitePlan.remove`)."""
    if opens_a_cell(stmt):
        return []
    return [line for line in stmt.leading_lines if line.comment is not None]


def keyword_argument(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, as black writes a keyword argument (no spaces around `=`)."""
    tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(value=value, keyword=cst.Name(name), equal=tight)


def session_statement(
    model: str,
    flag: cst.BaseExpression | None,
    body: Statements,
    leading_lines: Sequence[cst.EmptyLine] = (),
) -> cst.With:
    """`with <model>.session(remote=<flag>):` around ``body``."""
    # built, not parsed: the same nodes that parsing the header gives, far cheaper
    flag = cst.Name("True") if flag is None else _copy_of(flag)
    call = cst.Call(func=cst.Attribute(value=_dotted(model), attr=cst.Name("session")),
                    args=[keyword_argument("remote", flag)])
    body = [reindentable(stmt) for stmt in body]
    return cst.With(items=[cst.WithItem(item=call)], body=cst.IndentedBlock(body=body), leading_lines=list(leading_lines))


FALLBACK_COMMENT = "# the session failed: run the code as written, each failure handled on its own"


def opening(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``body`` as a block's new body: its first statement without the blank lines that set
    it off from the statements it followed where it stood (its comments stay)."""
    if not body or not any(line.comment is None for line in body[0].leading_lines):
        return body
    lines = list(body[0].leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return [body[0].with_changes(leading_lines=lines), *body[1:]]


def with_fallback(
    attempt: cst.BaseStatement,
    fallback: Statements,
    then: Statements,
    leading_lines: Sequence[cst.EmptyLine] = (),
) -> cst.Try:
    """`try: <attempt> except Exception: <fallback> else: <then>`: the session, the code
    as written should it fail, and the replay of its results when it does not."""
    def block(body: Statements, comment: str = "") -> cst.IndentedBlock:
        header = cst.TrailingWhitespace()
        if comment:
            header = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(comment))
        return cst.IndentedBlock(body=[reindentable(stmt) for stmt in body], header=header)

    return cst.Try(
        body=block([attempt]),
        handlers=[cst.ExceptHandler(body=block(fallback, FALLBACK_COMMENT), type=cst.Name("Exception"))],
        orelse=cst.Else(body=block(opening(list(then)))) if then else None,
        leading_lines=list(leading_lines),
    )


def _dotted(name: str) -> cst.BaseExpression:
    """The expression `a.b.c` (as parsed) for a dotted name."""
    return dotted_expression(name) or cst.parse_expression(name)


def dotted_expression(code: str) -> cst.BaseExpression | None:
    """What ``code`` parses to when it is a name or a dotted name (`a.b.c`), built (a
    parse costs several times more); None for any other code."""
    parts = code.split(".")
    if not all(part.isidentifier() and not iskeyword(part) for part in parts):
        return None
    expr: cst.BaseExpression = cst.Name(parts[0])
    for part in parts[1:]:
        expr = cst.Attribute(value=expr, attr=cst.Name(part))
    return expr


def _copy_of(expr: cst.BaseExpression) -> cst.BaseExpression:
    """A fresh copy of ``expr`` as its code parses (a node is never in two places)."""
    if type(expr) is cst.Name and not expr.lpar:
        return cst.Name(expr.value)
    return cst.parse_expression(code_of(expr))


def without_leading_blank_lines(stmt: cst.BaseStatement) -> cst.BaseStatement:
    lines = list(stmt.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return stmt.with_changes(leading_lines=lines)


class NodeEdits(cst.CSTTransformer):
    """Edits by node identity, applied in one walk: replace expressions or statements,
    remove statements (their blank lines pass on), append statements to suites."""

    def __init__(self) -> None:
        self.replace: dict[int, cst.CSTNode] = {}
        self.remove: set[int] = set()
        self.append: dict[int, list[cst.BaseStatement]] = {}

    def __bool__(self) -> bool:
        return bool(self.replace or self.remove or self.append)

    def on_leave(self, original, updated):
        if id(original) in self.replace:
            return self.replace[id(original)]
        if isinstance(original, (cst.Module, cst.IndentedBlock)):
            body: list[cst.BaseStatement] = []
            carried: list[cst.EmptyLine] = []
            for old, new in zip(original.body, updated.body):
                if id(old) in self.remove:
                    carried = carried or _leading_blank_lines(new)
                    continue
                if carried and not _leading_blank_lines(new):
                    new = new.with_changes(leading_lines=carried + list(new.leading_lines))
                carried = []
                body.append(new)
            body.extend(self.append.get(id(original), []))
            if not body and isinstance(original, cst.IndentedBlock):
                body = [cst.SimpleStatementLine([cst.Pass()])]
            return updated.with_changes(body=body)
        return updated


def _does_nothing(small: cst.BaseSmallStatement) -> bool:
    """A string statement (a docstring) or a `global` declaration: at a module's top level
    neither does anything."""
    return type(small) is cst.Global or (
        type(small) is cst.Expr and type(small.value) in (cst.SimpleString, cst.ConcatenatedString))


def _ipython_line(small: cst.BaseSmallStatement) -> bool:
    """`get_ipython().<method>(...)`: a magic or shell line, as IPython (and the masking
    of engine/ipython_lines.py) writes it."""
    if type(small) is not cst.Expr or type(small.value) is not cst.Call:
        return False
    func = small.value.func
    return (type(func) is cst.Attribute and type(func.value) is cst.Call
            and type(func.value.func) is cst.Name and func.value.func.value == "get_ipython")


def imports_module(module: cst.Module, name: str) -> bool:
    """Does a top-level statement of ``module`` `import name` (without `as`)?"""
    return any(_import_of(stmt, name) for stmt in module.body)


def _import_of(stmt: cst.BaseStatement, name: str) -> bool:
    return (type(stmt) is cst.SimpleStatementLine and len(stmt.body) == 1 and type(stmt.body[0]) is cst.Import
            and len(stmt.body[0].names) == 1 and stmt.body[0].names[0].asname is None
            and code_of(stmt.body[0].names[0].name) == name)


def without_unused_import(module: cst.Module, name: str) -> cst.Module:
    """``module`` without its `import name` lines when no other code of it reads ``name``
    (the import :func:`with_module_import` added for a use a later rewrite took away)."""
    imports = [stmt for stmt in module.body if _import_of(stmt, name)]
    if not imports:
        return module
    rest = [stmt for stmt in module.body if not _import_of(stmt, name)]
    if any(_spells(stmt, name) for stmt in rest):
        return module
    return module.with_changes(body=rest)


def _spells(stmt: cst.BaseStatement, name: str) -> bool:
    """Does ``stmt`` spell ``name`` outside its imports (`from name import x` binds no `name`)?"""
    imports = {id(n) for i in find_nodes(stmt, lambda n: type(n) in (cst.Import, cst.ImportFrom)) for n in all_nodes(i)}
    return bool(find_nodes(stmt, lambda n: type(n) is cst.Name and n.value == name and id(n) not in imports))


def with_module_import(module: cst.Module, name: str) -> cst.Module:
    """``module`` with `import name` among its first imports (after the docstring, the
    imports and the statements that do nothing which open the file), unless one of those
    imports it already."""
    body = list(module.body)
    position = 0
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            break
        small = stmt.body[0]
        if isinstance(small, cst.Import) and any(code_of(a.name) == name and a.asname is None for a in small.names):
            return module
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            position = index + 1
        elif _does_nothing(small) or _ipython_line(small):
            # the docstring, and statements that do nothing at module level among the opening
            # imports: a notebook's cells joined into one module each start with one, and
            # the import goes among the first imports, not above a header cell's comments;
            # an IPython line there (`!pip install nnsight`, masked as a `get_ipython()`
            # call) installs what the imports need: the import goes after it
            position = index + 1
        else:
            break
    body.insert(position, cst.parse_statement(f"import {name}\n"))
    return module.with_changes(body=body)

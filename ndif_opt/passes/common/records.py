"""The records a split session keeps for its replay, and how the replay reads them back.

A statement replayed after the session (see session_hoisting/split.py) reads values the session
computed; the session records them, and the replay reads each where the statement read
it. A record is shaped for whoever reads the code:

- one value: the value itself, bound by the replay to a name that says what it is
  (`for out_shape in _ndif_rows:`);
- two to four of the session's own names, read whole: a tuple the replay unpacks into
  the same names (`for layer, diff in _ndif_rows:`), so the replayed lines read as written;
- anything else: a dict keyed by names that say what each value is, each distinct
  expression once (`{"label": review["label"], "margin": margin}`); the replayed lines
  read `_ndif_row["label"]` where they read `review["label"]`.

A name read whole is bound from a dict record under its own name (`x = _ndif_row["x"]`),
as a tuple's unpacking would bind it: the replay leaves every name it binds with the
value the code as written left it with.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.names import fresh_name
from ndif_opt.syntax.walk import walk

# The prefix of the names of a split's records (`_ndif_rows`); reduction-pushdown leaves them alone.
RECORD_PREFIX = "_ndif_"
# A record of more values than this, or of values that are not the session's names, is a dict.
MOST_UNPACKED = 4
# A dict record longer than this is written one key a line (the line it stands on starts
# with `_ndif_rows.append(`, indented).
LONGEST_DICT = 60


@dataclass
class Recorded:
    """One value a replayed statement reads from the session."""

    code: str  # the session's code for it (`logits.shape`, `margin`)
    nodes: tuple[cst.CSTNode, ...]  # where the statement reads it (a plain name: its loads)
    hint: str  # what to call it in a record
    name: str = ""  # a plain value: the session's name, read whole under that name
    unread: bool = False  # plain: the statement reads it only inside other values it records
    var_hint: str = ""  # the base of a name of its own, when the replay needs one (else ``hint``)
    key: str = ""  # its key in the record, once placed


class Keys:
    """The keys of one record, whose values are all taken at one point: one key for each
    distinct expression (`review['id']` and `review["id"]` are one), a plain name's key
    the name itself (``reserved``: the names no other value may take as its key)."""

    def __init__(self, reserved: set[str] = frozenset()) -> None:
        self.codes: dict[str, str] = {}  # key -> the session's code, in order
        self.plain: set[str] = set()  # the keys of the session's names, read whole
        self.var_hints: dict[str, str] = {}  # key -> the base of a name of its own
        self._by_code: dict[str, str] = {}
        self._reserved = set(reserved)

    def place(self, value: Recorded) -> str:
        canonical = _canonical(value.code)
        key = self._by_code.get(canonical)
        if key is None:
            taken = self.codes.keys() | (self._reserved - {value.name})
            key = fresh_name(value.hint, taken)
            self._by_code[canonical] = key
            self.codes[key] = value.code
            self.var_hints[key] = value.var_hint or value.hint
        if value.name:
            self.plain.add(key)
        value.key = key
        return key


class LogKeys:
    """The keys of a run's record (`_ndif_log`), a dict the session fills where each
    replayed statement stands. A name read whole is one key wherever it is read (it holds
    one value from there to the end); any other value has a key of its own at each place
    (the same expression may mean another value later), one for each distinct expression
    of one statement. ``reserved``: the names no other value may take as its key."""

    def __init__(self, reserved: set[str]) -> None:
        self.codes: dict[str, str] = {}  # key -> the session's code, in order
        self._names: dict[str, str] = {}  # a name read whole -> its key
        self._reserved = set(reserved)

    def place(self, values: list[Recorded]) -> list[tuple[str, str]]:
        """Give one statement's ``values`` their keys; the new entries, (key, code)."""
        here: dict[str, str] = {}  # canonical code -> key, in this statement
        new: list[tuple[str, str]] = []
        for value in values:
            key = self._names.get(value.name) if value.name else None
            if key is None:
                canonical = _canonical(value.code)
                key = here.get(canonical)
                if key is None:
                    key = fresh_name(value.hint, self.codes.keys() | (self._reserved - {value.name}))
                    here[canonical] = key
                    self.codes[key] = value.code
                    new.append((key, value.code))
                if value.name:
                    self._names[value.name] = key
            value.key = key
        return new

    def carried(self, name: str) -> tuple[str, bool]:
        """The key of ``name``'s value at the end of the session, and whether it is new (a
        name already read whole holds that value already)."""
        if name in self._names:
            return self._names[name], False
        key = fresh_name(name, self.codes)
        self.codes[key] = name
        self._names[name] = key
        return key, True


def _canonical(code: str) -> str:
    """The code as Python reads it (one spelling for `x['k']` and `x["k"]`). (ast.unparse,
    not ast.dump: dump's closures would leave reference cycles behind each call.)"""
    try:
        return ast.unparse(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return code


@dataclass
class Shape:
    """How one record is written in the session and read in the replay."""

    value: str  # the expression the session records (`None`, `x`, `(a, b)`, `{"k": v}`)
    target: str  # what the replay binds the record to
    var: str = ""  # a dict record: the name the replay reads its keys through
    names: dict[str, str] = field(default_factory=dict)  # bare or tuple: key -> the replay's name for it


def shape(keys: Keys, row: str, fresh) -> Shape:
    """The shape of a record of ``keys``; ``row``: the replay's name for a dict record;
    ``fresh(base)``: a fresh name, for a value the replay reads under a name of its own."""
    codes = keys.codes
    if not codes:
        return Shape("None", row)
    if len(codes) == 1:
        [(key, code)] = codes.items()
        name = code if key in keys.plain else fresh(keys.var_hints[key])
        return Shape(code, name, names={key: name})
    if len(codes) <= MOST_UNPACKED and set(codes) <= keys.plain:
        return Shape("(" + ", ".join(codes.values()) + ")", ", ".join(codes.values()),
                     names={key: code for key, code in codes.items()})
    return Shape(dict_code(codes), row, var=row)


def dict_code(codes: dict[str, str]) -> str:
    """`{"k": v, ...}` on one line, or one key a line when that is long."""
    entries = [f'"{key}": {code}' for key, code in codes.items()]
    one_line = "{" + ", ".join(entries) + "}"
    if len(one_line) <= LONGEST_DICT:
        return one_line
    return "{\n" + "".join(f"    {entry},\n" for entry in entries) + "}"


@dataclass
class Reader:
    """How the replayed statements of one scope (a loop's body, one statement of a run)
    read a record. A name read whole is bound from it first, under its own name, as the
    code as written had it (`margin = _ndif_row["margin"]`): the replay leaves each name
    with the value the code as written left it with. Any other value is read in place
    (`_ndif_row["review_label"]`), or, where that would change what the line prints (in
    `f"{x=}"`, or inside f-strings of both quotes), under a fresh name.
    ``fresh(base)``: a fresh name; ``bindings`` collects the lines that bind names."""

    shape: Shape
    fresh: object
    bindings: list[cst.BaseStatement] = field(default_factory=list)
    named: list[tuple[str, cst.BaseStatement]] = field(default_factory=list)  # (a name read whole, its line)
    _bound: dict[str, str] = field(default_factory=dict)  # key -> the name bound to it

    def read(self, stmt: cst.BaseStatement, values: list[Recorded]) -> cst.BaseStatement:
        """``stmt`` reading ``values`` through the record."""
        replacements: dict[int, cst.CSTNode] = {}
        contexts = _contexts(stmt, {id(node) for value in values for node in value.nodes})
        for value in values:
            if self.shape.var:
                self._read_from_dict(value, contexts, replacements)
            else:
                name = self.shape.names[value.key]
                if name != value.name:
                    replacements.update((id(node), cst.Name(name)) for node in value.nodes)
        return stmt.visit(_Replace(replacements)) if replacements else stmt

    def _read_from_dict(self, value: Recorded, contexts, replacements: dict) -> None:
        var = self.shape.var
        quotes = set().union(*(contexts[id(node)][0] for node in value.nodes))
        documenting = any(contexts[id(node)][1] for node in value.nodes)
        if not value.name and not documenting and len(quotes) < 2:
            quote = "'" if '"' in quotes else '"'
            replacements.update((id(node), _subscript(var, value.key, quote)) for node in value.nodes)
            return
        name = self._bound.get(value.key)
        if name is None:
            name = value.name or self.fresh(value.var_hint or value.hint)
            self._bound[value.key] = name
            self.bindings.append(cst.parse_statement(f'{name} = {var}["{value.key}"]\n'))
            if value.name:
                self.named.append((name, self.bindings[-1]))
        if name != value.name:
            replacements.update((id(node), cst.Name(name)) for node in value.nodes)


def _subscript(var: str, key: str, quote: str) -> cst.Subscript:
    return cst.Subscript(
        value=cst.Name(var),
        slice=[cst.SubscriptElement(slice=cst.Index(value=cst.SimpleString(f"{quote}{key}{quote}")))],
    )


def _contexts(stmt: cst.CSTNode, targets: set[int]) -> dict[int, tuple[frozenset[str], bool]]:
    """For each target node: the quote characters of the f-strings around it, and whether
    it is inside a self-documenting expression (`f"{x=}"`, which prints its own text)."""
    finder = _Contexts(targets)
    walk(stmt, finder)
    return finder.found


class _Contexts(cst.CSTVisitor):
    def __init__(self, targets: set[int]) -> None:
        self.targets = targets
        self.quotes: list[str] = []
        self.documenting = 0
        self.found: dict[int, tuple[frozenset[str], bool]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.targets:
            self.found[id(node)] = (frozenset(self.quotes), self.documenting > 0)
        if type(node) is cst.FormattedString:
            self.quotes.append(node.start[-1])
        elif type(node) is cst.FormattedStringExpression and node.equal is not None:
            self.documenting += 1
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) is cst.FormattedString:
            self.quotes.pop()
        elif type(original_node) is cst.FormattedStringExpression and original_node.equal is not None:
            self.documenting -= 1


class _Replace(cst.CSTTransformer):
    """Replaces nodes by identity (id(original) -> new node), in one walk."""

    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original, updated):
        return self.replacements.get(id(original), updated)


def plain_loads(stmt: cst.CSTNode, name: str) -> list[cst.Name] | None:
    """The nodes where ``stmt`` reads ``name``, when it reads nothing else under that name:
    None when the statement binds it anywhere (a target, a parameter, a comprehension's
    variable, `global`), where a read may be of another value."""
    finder = _Loads(name)
    walk(stmt, finder)
    return None if finder.binds else finder.found


class _Loads(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found: list[cst.Name] = []
        self.binds = False

    def _bound(self, *names) -> None:
        if any(isinstance(n, cst.Name) and n.value == self.name for n in names):
            self.binds = True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)  # `x.name` reads `x`, not `name`
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)  # `f(name=...)`: a keyword, not a read
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.found.append(node)

    # any place that binds a name: the reads around it may be of that binding
    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._targets(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._targets(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._targets(node.name)

    def visit_Del(self, node: cst.Del) -> None:
        self._targets(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        self._bound(node.name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bound(node.name)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bound(node.name)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        self._bound(node.name)

    def visit_Global(self, node: cst.Global) -> None:
        self._bound(*(item.name for item in node.names))

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._bound(*(item.name for item in node.names))

    def _targets(self, target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self._bound(target)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._targets(element.value)
        elif isinstance(target, cst.StarredElement):
            self._targets(target.value)

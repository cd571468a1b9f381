"""Independent windows of a module, so the pipeline's work grows linearly with its size.

A long script is mostly independent experiments one after another: each binds its own
names, reads the shared setup (imports, the model, constants, plain helper functions)
and nothing else. The passes only ever need one experiment at a time plus that setup.
This module cuts the top level of a module into

* **context** chunks: definitions that every experiment may read and none changes —
  imports, functions and classes without nnsight code that read only context, and
  names bound exactly once, never mutated, with no nnsight code;
* **shared helpers**: a function with nnsight code (a remote trace) that experiments
  call by name and that reads only context: read like context, so calling it does not
  tie its callers into one window;
* **windows**: maximal contiguous runs of the other chunks that are linked by def-use.
  Two chunks are linked when one reads a name whose value may come from the other (the
  reaching bindings of a top-level read, back to the nearest binding that certainly
  happens: one an nnsight block makes without saving it may not), or when a function
  defined in one reads or declares ``global`` a name the other binds (a function runs
  when called, so every binding counts).

Each window is optimized as a module of its own: the context and shared helpers it reads
(its *prelude*), then the window's text. Nothing outside a window reads a value the
window binds, so what the passes decide about liveness inside the window holds for the
whole file.

The analysis is on :mod:`ast` (fast) and conservative: a construct it does not model
makes its names read and bound; when the plan is in doubt (star imports, ``exec``,
``globals()`` and other names made of strings, lines that ``ast`` and the text disagree
about) there is one window.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import re
from dataclasses import dataclass, field

from ndif_opt.analysis.vocabulary import BLOCK_METHODS, MUTATING_METHODS, SAVE_METHODS

#: Text that marks nnsight code: a chunk containing any of these is never context.
NNSIGHT_MARKERS = (
    "nnsight", "nnterp", "remote", ".trace(", ".session(", ".generate(", ".invoke(",
    ".scan(", ".edit(", ".save(", ".skip(", ".iter", ".all(", ".next(", ".stop(",
)
_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__builtins__", "__spec__"}
_DYNAMIC_NAMES = re.compile(r"\b(?:globals|locals|vars|exec|eval|__import__|setattr|delattr)\s*\(|__dict__|sys\.modules")
#: Words one of which every match of _DYNAMIC_NAMES holds: looking for them is ten times faster.
_DYNAMIC_WORDS = ("globals", "locals", "vars", "exec", "eval", "__import__", "setattr", "delattr", "__dict__",
                  "sys.modules")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@dataclass
class Chunk:
    """Whole lines ``[start, end)`` of the source holding top-level statements."""

    start: int
    end: int
    statements: list[ast.stmt]
    text: str = ""
    nnsight: bool = False
    reads: set[str] = field(default_factory=set)  # top-level reads not preceded by a binding here
    may_bind: set[str] = field(default_factory=set)
    definite: set[str] = field(default_factory=set)
    deferred: set[str] = field(default_factory=set)  # read when a function defined here runs
    globals_: set[str] = field(default_factory=set)  # declared `global` in a function here
    mutated: set[str] = field(default_factory=set)  # receivers of mutating calls / item stores
    mutated_in_blocks: set[str] = field(default_factory=set)  # the same, inside nnsight blocks
    receivers: set[str] = field(default_factory=set)  # `x` of `x.trace(...)` and friends: models
    names: set[str] = field(default_factory=set)  # every identifier mentioned
    active: bool = False  # opens an nnsight block or saves: something for the passes
    imports: dict[str, str] = field(default_factory=dict)  # name -> what an import binds it to
    functions: dict[str, set[str]] = field(default_factory=dict)  # top-level def -> its free names
    called: set[str] = field(default_factory=set)  # `f` of `f(...)` in top-level code
    escaping: set[str] = field(default_factory=set)  # other uses of names: as values, in bodies


@dataclass(frozen=True)
class Window:
    """A run of chunks optimized on its own, after the context chunks it reads."""

    start: int  # first line (0-based) in the source
    end: int  # one past the last line
    prelude: tuple[int, ...]  # indices of context chunks, in source order
    active: bool = True  # has nnsight code the passes could change
    helpers: tuple[int, ...] = ()  # those of the prelude that are shared helpers


@dataclass(frozen=True)
class Plan:
    lines: tuple[str, ...]  # the source's lines, line endings kept
    chunks: tuple[Chunk, ...]
    windows: tuple[Window, ...]

    @property
    def names(self) -> frozenset[str]:
        """Every identifier of the file."""
        return frozenset().union(*(c.names for c in self.chunks))

    def names_in(self, window: "Window") -> frozenset[str]:
        """Every identifier of the window's chunks and of its prelude."""
        first = bisect.bisect_left(self.chunks, window.start, key=lambda c: c.start)  # (chunks in source order)
        last = bisect.bisect_left(self.chunks, window.end, key=lambda c: c.start)
        inside = self.chunks[first:last]
        return frozenset().union(*(c.names for c in inside), *(self.chunks[i].names for i in window.prelude))

    def text(self, start: int, end: int) -> str:
        return "".join(self.lines[start:end])

    def prelude_text(self, window: Window) -> str:
        return "".join(self._prelude_parts(window))

    def helper_lines(self, window: Window) -> list[tuple[int, int, int]]:
        """Where the shared helpers of the window's prelude stand: (first line, end line)
        in the window's module, and the first line in the source, for each."""
        found, line = [], 0
        for index, text in zip(window.prelude, self._prelude_parts(window)):
            lines = text.count("\n")
            if index in window.helpers:
                found.append((line, line + lines, self.chunks[index].start))
            line += lines
        return found

    def after_prelude(self, window: Window, code: str) -> tuple[str, dict[int, str]] | None:
        """The new code of the window's module (its prelude, then its text) cut after the
        prelude: the window's new text, and the new text of each shared helper of the
        prelude the passes rewrote (session-hoisting gives one a `remote` parameter for the
        session's calls), by chunk index. None when they changed other context, or the
        code does not show where a rewritten helper ends."""
        parts = self._prelude_parts(window)
        prelude = "".join(parts)
        if code.startswith(prelude):
            return code[len(prelude):], {}
        if not window.helpers:
            return None
        try:
            statements = ast.parse(code).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        line_ends = [match.end() for match in re.finditer("\n", code)]  # the offset after each line
        offset, count, rewritten = 0, 0, {}
        for index, part in zip(window.prelude, parts):
            chunk = self.chunks[index]
            if index in window.helpers:
                new = statements[count] if count < len(statements) else None
                old = chunk.statements[0]
                if type(new) is not type(old) or new.name != old.name or old.end_lineno != chunk.end \
                        or len(line_ends) < new.end_lineno:
                    return None  # (a helper chunk ends where its `def` does, unless it ends the file)
                end = line_ends[new.end_lineno - 1]
                if code[offset:end] != part:
                    rewritten[index] = code[offset:end]
                offset = end
            elif code.startswith(part, offset):
                offset += len(part)
            else:
                return None
            count += len(chunk.statements)
        return code[offset:], rewritten

    def _prelude_parts(self, window: Window) -> list[str]:
        parts = []
        for index in window.prelude:
            text = self.chunks[index].text
            parts.append(text if text.endswith(("\n", "\r")) else text + "\n")
        return parts


def plan(source: str, tree: ast.Module) -> Plan | None:
    """Windows of ``source``, or None when one run over the whole module is needed."""
    if "\r" in source and re.search(r"\r(?!\n)", source):
        return None  # a lone carriage return: leave line counting to one parser
    if any(word in source for word in _DYNAMIC_WORDS) and _DYNAMIC_NAMES.search(source):
        return None  # names bound or read by strings: no def-use to see
    lines = tuple(_LINE.findall(source))
    if "".join(lines) != source or not tree.body:
        return None
    if any(isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names) for s in tree.body):
        return None  # a star import binds names nobody can see
    chunks = _chunks(lines, tree)
    if chunks is None or len(chunks) < 2:
        return None
    shaped = []  # which chunks are definitions, asked while their statements are in the cache
    for chunk in chunks:
        _describe(chunk)
        shaped.append(_definition_shaped(chunk))
    # assignments to a model inside its blocks are interventions, not changes of the object
    models = set().union(*(c.receivers for c in chunks))
    for chunk in chunks:
        chunk.mutated |= chunk.mutated_in_blocks - models
    free_of = _attach_calls(chunks)
    context, is_context = _context(chunks, shaped)
    helpers = _shared_helpers(chunks, context, is_context, free_of)
    while True:
        groups = _link(chunks, context | helpers.keys(), is_context)
        groups = _link_adjacent_experiments(chunks, is_context, groups, set(helpers.values()))
        windows = _windows(chunks, is_context, groups, context, helpers)
        alone = {name: index for name, index in helpers.items() if _has_own_window(chunks[index], windows)}
        if alone == helpers:
            break
        helpers = alone  # one linked with other code by what it binds or where it stands: as before
    if len(windows) < 2:
        return None
    return Plan(lines, tuple(chunks), tuple(windows))


# -- chunks ---------------------------------------------------------------------------------


_DECORATED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_DECORATED_KINDS = frozenset(_DECORATED)  # (ast makes no subclasses of them)
#: Any of NNSIGHT_MARKERS: one search instead of one per marker.
_NNSIGHT_MARKER = re.compile("|".join(re.escape(marker) for marker in NNSIGHT_MARKERS))


def _first_line(stmt: ast.stmt) -> int:
    if not isinstance(stmt, _DECORATED) or not stmt.decorator_list:
        return stmt.lineno  # (asking any statement for its decorators costs an exception)
    return min([stmt.lineno] + [d.lineno for d in stmt.decorator_list])


def _chunks(lines: tuple[str, ...], tree: ast.Module) -> list[Chunk] | None:
    """Group statements sharing lines; each chunk owns the comments and blanks before it."""
    groups: list[list[ast.stmt]] = []
    ends: list[int] = []  # the last line of each group's statements
    last_end = 0
    for stmt in tree.body:
        first = _first_line(stmt) if type(stmt) in _DECORATED_KINDS else stmt.lineno
        end = stmt.end_lineno or stmt.lineno
        if groups and first <= last_end:
            groups[-1].append(stmt)
            if end > last_end:
                last_end = ends[-1] = end
        else:  # (the statement starts after every earlier one ends, so it ends after them too)
            groups.append([stmt])
            ends.append(end)
            last_end = end
    if last_end > len(lines):
        return None  # ast and the text disagree about lines (form feeds, odd line breaks)
    ends[-1] = len(lines)  # trailing comments belong to the last chunk
    chunks: list[Chunk] = []
    start = 0
    search_marker = _NNSIGHT_MARKER.search
    for group, end in zip(groups, ends):
        chunk = Chunk(start, end, group)
        chunk.text = text = "".join(lines[start:end])
        chunk.nnsight = search_marker(text) is not None
        chunks.append(chunk)
        start = end
    return chunks


# -- what a chunk reads and binds -------------------------------------------------------------


def _describe(chunk: Chunk) -> None:
    """The flow's walk also gathers what the uses walk (:func:`_empty_stacks`) needs from the statements and
    expressions it knows; it leaves the rest on the uses walk's stacks (one walk instead of two
    over most of the code)."""
    flow = _Flow(chunk)
    bound: set[str] = set()
    for stmt in chunk.statements:
        bound = flow.statement(stmt, bound)
    chunk.definite = bound
    if flow.outside_later or flow.inside_later:
        _empty_stacks(chunk, {
            (False, False): flow.outside_later, (True, False): flow.inside_later, (False, True): [], (True, True): [],
        })


_AST = ast.AST
# the node classes the walks below test for most, by identity (ast makes no subclasses of them)
_Name, _Attribute, _Call, _Constant, _Subscript, _keyword, _Assign, _Load = (
    ast.Name, ast.Attribute, ast.Call, ast.Constant, ast.Subscript, ast.keyword, ast.Assign, ast.Load)
_Expr, _Tuple, _UnaryOp, _BinOp, _withitem, _For = ast.Expr, ast.Tuple, ast.UnaryOp, ast.BinOp, ast.withitem, ast.For
_With, _Dict = ast.With, ast.Dict
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node class -> the fields that may hold nodes
# fields that never hold a node, in any class (identifiers, numbers, flags), a name's context
# and the operator of an operation (empty nodes that no walk here looks at)
_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "arg", "name", "asname", "module", "level", "kind",
                          "type_comment", "is_async", "conversion", "rest", "op", "ops"})


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, without the Load/Store/Del context of a
    name and the operator of an operation (leaves that no walk here looks at): the walks
    below spend most of their time listing children, and a name's context is a third of
    the nodes."""
    kind = type(node)
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(
            f for f in kind._fields if f not in _LEAF_FIELDS and not (kind is ast.Constant and f == "value")
        )
    found = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, _AST):
            found.append(value)
        elif type(value) is list:
            found.extend([item for item in value if isinstance(item, _AST)])
    return found


#: The node classes the uses walk looks at (ast makes no subclasses of them); it only walks through others.
_USES_KINDS = frozenset({
    ast.Name, ast.Call, ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
    ast.arg, ast.alias, ast.Global, ast.Nonlocal, ast.ExceptHandler, ast.Assign, ast.AugAssign,
    ast.AnnAssign, ast.Delete, ast.Lambda, ast.GeneratorExp,
})


def _empty_stacks(chunk: Chunk, stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """The uses walk over what the flow left: every name the code mentions, the receivers
    of model methods, what it changes in place (inside nnsight blocks or not), and which
    names it calls directly from top-level code (any other use of a name, including a
    call from a function body or a generator, lets it escape). The stacks are keyed by
    (inside an nnsight block, in a body that runs later); what the walk gathers are sets,
    so the order it looks in does not matter."""
    while any(stacks.values()):
        for (inside, in_body), stack in stacks.items():
            if stack:
                _walk_uses(chunk, stack, inside, in_body, stacks)


def _walk_uses(chunk: Chunk, stack: list[ast.AST], inside: bool, in_body: bool,
               stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """Empty one stack of the uses walk (:func:`_empty_stacks`). The node classes most code is made of are handled
    here, inline (most of the plan's time is this walk); the rarer classes of
    :data:`_USES_KINDS` by :func:`_use`, and every other class by listing its children."""
    names, escaping = chunk.names, chunk.escaping
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        if kind is _Name:
            names.add(current.id)
            escaping.add(current.id)
        elif kind is _Attribute:
            push(current.value)
        elif kind is _Constant:
            pass
        elif kind is _Call:
            func = current.func
            _note_remote_argument(chunk, current)
            if type(func) is _Name and not in_body:
                names.add(func.id)
                chunk.called.add(func.id)
            else:
                if type(func) is _Attribute:
                    _method_call(chunk, current, inside)
                push(func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
        elif kind is _Subscript:
            push(current.value)
            push(current.slice)
        elif kind is _keyword or kind is _Expr:
            push(current.value)
        elif kind is _Tuple:
            extend(current.elts)
        elif kind is _UnaryOp:
            push(current.operand)
        elif kind is _withitem:
            push(current.context_expr)
            if current.optional_vars is not None:
                push(current.optional_vars)
        elif kind is _For:
            push(current.target)
            push(current.iter)
            extend(current.body)
            extend(current.orelse)
        elif kind is _BinOp:
            push(current.left)
            push(current.right)
        elif kind is _Assign:
            for target in current.targets:
                if type(target) is not _Name:
                    _stored_into(chunk, target, inside)
            extend(current.targets)
            push(current.value)
        elif kind in _USES_KINDS:
            _use(chunk, current, inside, in_body, stacks)
        else:  # most other nodes: only their children matter here
            extend(_children(current))


#: The methods whose calls tell _method_call something (and those ending in ``_``).
_TELLING_METHODS = BLOCK_METHODS | SAVE_METHODS | MUTATING_METHODS


def _method_call(chunk: Chunk, call: ast.Call, inside: bool) -> None:
    """``x.trace(...)``, ``x.save()``, ``x.append(...)``: what a method call tells the uses walk (:func:`_empty_stacks`)."""
    method = call.func.attr
    opens_block = method in BLOCK_METHODS
    if opens_block or method in SAVE_METHODS:
        chunk.active = True
    elif method not in MUTATING_METHODS and not method.endswith("_"):
        return  # (most calls: no need for the receiver's root)
    root = _root(call.func.value)
    if root and opens_block:
        chunk.receivers.add(root)
    if root and (method in MUTATING_METHODS or method.endswith("_")):
        (chunk.mutated_in_blocks if inside else chunk.mutated).add(root)


def _stored_into(chunk: Chunk, target: ast.AST, inside: bool) -> None:
    """``x.a = ...``, ``x[i] = ...``, ``del x[i]``: the root ``x`` is changed in place."""
    for element in _flatten(target):
        root = _root(element) if isinstance(element, (ast.Attribute, ast.Subscript)) else None
        if root:
            (chunk.mutated_in_blocks if inside else chunk.mutated).add(root)


def _use(chunk: Chunk, current: ast.AST, inside: bool, in_body: bool,
         stacks: dict[tuple[bool, bool], list[ast.AST]]) -> None:
    """What one node of :data:`_USES_KINDS` tells the uses walk (:func:`_empty_stacks`); its children to look at
    go on the stack of their flags."""
    if isinstance(current, ast.Name):
        chunk.names.add(current.id)
        chunk.escaping.add(current.id)
        return
    if isinstance(current, ast.Call):
        _note_remote_argument(chunk, current)
    if isinstance(current, ast.Call) and isinstance(current.func, ast.Name) and not in_body:
        chunk.names.add(current.func.id)
        chunk.called.add(current.func.id)
        stacks[inside, in_body].extend([*current.args, *current.keywords])
        return
    if isinstance(current, (ast.With, ast.AsyncWith)) and any(
        _block_call(item.context_expr) for item in current.items
    ):
        stacks[inside, in_body].extend(current.items)
        stacks[True, in_body].extend(current.body)
        return
    if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        chunk.names.add(current.name)
    elif isinstance(current, ast.arg):
        chunk.names.add(current.arg)
    elif isinstance(current, ast.alias):
        chunk.names.add((current.asname or current.name).split(".")[0])
    elif isinstance(current, (ast.Global, ast.Nonlocal)):
        chunk.names.update(current.names)
    elif isinstance(current, ast.ExceptHandler) and current.name:
        chunk.names.add(current.name)
    elif isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
        _method_call(chunk, current, inside)
    elif isinstance(current, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = current.targets if isinstance(current, (ast.Assign, ast.Delete)) else [current.target]
        for target in targets:
            _stored_into(chunk, target, inside)
    # bodies run later, and so does a generator expression
    later = in_body or isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                            ast.GeneratorExp))
    stacks[inside, later].extend(_children(current))


def _attach_calls(chunks: list[Chunk]) -> dict[str, set[str]]:
    """A function only ever called by name from top-level code reads its globals where it
    is called: those reads become the caller's. Any other use (passed as a value, called
    from another function, decorated, bound twice) and they count wherever it could run.
    Returns the free names of the functions of the first kind, by name."""
    defined: dict[str, int] = {}
    for chunk in chunks:
        for name in chunk.may_bind:
            defined[name] = defined.get(name, 0) + 1
    escaping = set().union(*(c.escaping for c in chunks))
    free_of: dict[str, set[str]] = {}
    for chunk in chunks:
        for name, free in chunk.functions.items():
            if name in escaping or defined.get(name) != 1:
                chunk.deferred |= free
            else:
                free_of[name] = free
    for chunk in chunks:
        for name in chunk.called & free_of.keys():
            chunk.reads |= free_of[name]
    return free_of


def _note_remote_argument(chunk: Chunk, call: ast.Call) -> None:
    """``f(..., remote=...)``: a function that may send requests of its own (nnterp's
    ``run_prompts``): the cost model counts them, so the chunk is one for the passes."""
    if call.keywords and any(keyword.arg == "remote" for keyword in call.keywords):
        chunk.active = True


def _block_call(node: ast.AST) -> bool:
    """``x.trace(...)``, ``x.session(...)``, ...: a call that opens an nnsight block."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BLOCK_METHODS


class _Flow:
    """Names read before being bound, in execution order, through one chunk; on the way,
    what the uses walk (:func:`_empty_stacks`) gathers from the same top-level code. What is not top-level code
    (function and class definitions) or is rare goes on the uses walk's stacks instead, with the
    flag saying whether it is inside an nnsight block."""

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.inside = False  # in the body of a `with` opening an nnsight block
        # what the flow leaves to the uses walk, outside and inside nnsight blocks (top-level code)
        self.outside_later: list[ast.AST] = []
        self.inside_later: list[ast.AST] = []
        self.later_stack = self.outside_later  # the one of the code being walked

    def read(self, node: ast.AST | None, bound: set[str]) -> None:
        """Top-level code read now: for the flow and for the uses walk."""
        if node is not None:  # (walrus targets are bound)
            _gather_names_and_uses(node, bound, self.chunk, self.inside, self.later_stack)

    def read_only(self, node: ast.AST | None, bound: set[str]) -> None:
        """For the flow only (the uses walk takes the statement itself, as a body that runs later)."""
        if node is not None:
            _gather_names(node, bound, self.chunk.reads, self.chunk.may_bind, self.chunk.deferred)

    def later(self, node: ast.AST) -> None:
        """Leave ``node`` to the uses walk."""
        self.later_stack.append(node)

    def bind(self, target: ast.AST, bound: set[str]) -> set[str]:
        chunk = self.chunk
        if type(target) is _Name:  # most targets
            name = target.id
            chunk.may_bind.add(name)
            chunk.names.add(name)  # (what the uses walk gathers from a name bound)
            chunk.escaping.add(name)
            return bound if name in bound else bound | {name}  # (the flow never changes a bound set)
        names = set()
        for element in _flatten(target):
            if type(element) is _Name:
                names.add(element.id)
            else:  # x.a = ..., x[i] = ...: reads x (and what the index reads)
                self.read(element, bound)
        chunk.may_bind |= names
        chunk.names |= names
        chunk.escaping |= names
        return bound | names

    def body(self, statements: list[ast.stmt], bound: set[str]) -> set[str]:
        for stmt in statements:
            bound = self.statement(stmt, bound)
        return bound

    def with_statement(self, stmt: ast.With | ast.AsyncWith, bound: set[str]) -> set[str]:
        """Its items in order, then its body: inside an nnsight block if an item opens one."""
        opens_block = False
        for item in stmt.items:
            expr = item.context_expr
            _gather_names_and_uses(expr, bound, self.chunk, self.inside, self.later_stack)
            if type(expr) is _Call and type(expr.func) is _Attribute and expr.func.attr in BLOCK_METHODS:
                opens_block = True  # (what _block_call says)
            target = item.optional_vars
            if target is not None:
                bound = self.bind(target, bound)
        if self.inside or not opens_block:
            return self.body(stmt.body, bound)
        self.inside, self.later_stack = True, self.inside_later
        inner = self.body(stmt.body, bound)
        self.inside, self.later_stack = False, self.outside_later
        # what the block binds without saving it stays unbound after it (nnsight 0.5+), or
        # keeps what it held: a read after it may see a binding from before it
        return bound | (inner & _saved_in(stmt.body))

    def statement(self, stmt: ast.stmt, bound: set[str]) -> set[str]:  # noqa: C901 - one case per statement kind
        kind = type(stmt)
        if kind is _Assign:
            _gather_names_and_uses(stmt.value, bound, self.chunk, self.inside, self.later_stack)
            for target in stmt.targets:
                bound = self.bind(target, bound)
                if type(target) is not _Name:  # x.a = ..., x[i] = ...: x changed in place
                    _stored_into(self.chunk, target, self.inside)
            return bound
        if kind is _Expr:
            _gather_names_and_uses(stmt.value, bound, self.chunk, self.inside, self.later_stack)
            return bound
        if kind is _With:
            return self.with_statement(stmt, bound)
        if isinstance(stmt, ast.AugAssign):
            self.read(stmt.value, bound)
            self.read(_as_load(stmt.target), bound)
            _stored_into(self.chunk, stmt.target, self.inside)
            return self.bind(stmt.target, bound)
        if isinstance(stmt, ast.AnnAssign):
            self.read(stmt.value, bound)
            self.read(stmt.annotation, bound)
            _stored_into(self.chunk, stmt.target, self.inside)
            if stmt.value is None:
                self.later(stmt.target)  # not bound: only the uses walk looks at it
                return bound
            return self.bind(stmt.target, bound)
        if kind is _For or kind is ast.AsyncFor:
            self.read(stmt.iter, bound)
            inner = self.bind(stmt.target, bound)
            self.body(stmt.body, inner)
            self.body(stmt.orelse, bound)
            return bound  # the loop may not run
        if isinstance(stmt, ast.While):
            self.read(stmt.test, bound)
            self.body(stmt.body, bound)
            self.body(stmt.orelse, bound)
            return bound
        if isinstance(stmt, ast.If):
            self.read(stmt.test, bound)
            return self.body(stmt.body, bound) & self.body(stmt.orelse, bound)
        if kind is ast.AsyncWith:
            return self.with_statement(stmt, bound)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.later(stmt)
            for decorator in stmt.decorator_list:
                self.read_only(decorator, bound)
            if isinstance(stmt, ast.ClassDef):
                for base in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                    self.read_only(base, bound)
            else:
                self.read_only(_defaults(stmt.args), bound)
            free, globals_ = _function_names(stmt)
            if stmt in self.chunk.statements and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and not stmt.decorator_list:
                self.chunk.functions[stmt.name] = free  # where it is called decides
            else:
                self.chunk.deferred |= free
            self.chunk.globals_ |= globals_
            self.chunk.may_bind |= {stmt.name}
            return bound | {stmt.name}
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = set()
            for alias in stmt.names:
                name = (alias.asname or alias.name).split(".")[0]
                names.add(name)
                origin = alias.name if isinstance(stmt, ast.Import) else f"{'.' * stmt.level}{stmt.module}:{alias.name}"
                self.chunk.imports[name] = origin if alias.asname or isinstance(stmt, ast.ImportFrom) else name
            self.chunk.may_bind |= names
            self.chunk.names |= names  # (what the uses walk gathers from an import)
            return bound | names
        if isinstance(stmt, (ast.Expr, ast.Return, ast.Raise, ast.Assert)):
            for child in _children(stmt):
                self.read(child, bound)
            return bound
        if isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            return bound
        # try, match, del, global, ...: every name read, every name possibly bound
        self.later(stmt)
        _gather_names(stmt, bound, self.chunk.reads, self.chunk.may_bind, self.chunk.deferred)
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.chunk.may_bind.add(node.name)
                self.chunk.globals_ |= _function_names(node)[1]
        return bound


def _saved_in(body: list[ast.stmt]) -> set[str]:
    """The names that statements of ``body`` (blocks nested in it included) bind to a saved
    value only: `x = ....save()`, `x = nnsight.save(...)`, and no other binding of `x`."""
    saved: set[str] = set()
    targets: set[int] = set()  # the names those statements bind
    stores: set[str] = set()  # names bound otherwise
    for stmt in body:
        for node in ast.walk(stmt):
            kind = type(node)
            if kind is _Assign and len(node.targets) == 1 and type(node.targets[0]) is _Name \
                    and type(node.value) is _Call and _is_save(node.value.func):
                saved.add(node.targets[0].id)
                targets.add(id(node.targets[0]))
            elif kind is _Name and type(node.ctx) is not _Load and id(node) not in targets:
                stores.add(node.id)
    return saved - stores


def _is_save(func: ast.AST) -> bool:
    return (type(func) is _Attribute and func.attr == "save") or (type(func) is _Name and func.id == "save")


def _as_load(target: ast.AST) -> ast.AST:
    return ast.Name(id=target.id, ctx=ast.Load()) if isinstance(target, ast.Name) else target


def _defaults(args: ast.arguments) -> ast.AST:
    values = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    annotations = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.annotation]
    return ast.Tuple(elts=values + annotations, ctx=ast.Load())


def _flatten(target: ast.AST):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _root(node: ast.AST) -> str | None:
    kind = type(node)
    while kind is _Attribute or kind is _Subscript or kind is _Call:
        node = node.func if kind is _Call else node.value
        kind = type(node)
    return node.id if kind is _Name else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


#: The node classes _expression_names looks at; it only walks through others.
_NAME_KINDS = frozenset({ast.Name, ast.NamedExpr, *_SCOPES})


def _expression_names(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names read now, names bound by `:=`, names read later by a function defined here)."""
    free: set[str] = set()
    stores: set[str] = set()
    deferred: set[str] = set()
    _gather_names(node, _NOTHING_BOUND, free, stores, deferred)
    return free, stores, deferred


_NOTHING_BOUND: frozenset[str] = frozenset()


def _gather_names(node: ast.AST, bound: set[str] | frozenset[str], free: set[str], stores: set[str],
                  deferred: set[str]) -> None:
    """:func:`_expression_names` added into the caller's sets (the flow's walk calls it for
    every expression: no sets of its own to make and merge), leaving out of ``free`` the
    names in ``bound``."""
    stack = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        # the classes most code is made of first, inline: this walk is much of the plan's time
        if kind is _Name:
            if type(current.ctx) is not _Load:
                stores.add(current.id)
            elif current.id not in bound:
                free.add(current.id)
            continue
        if kind is _Attribute:
            push(current.value)
            continue
        if kind is _Call:
            push(current.func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
            continue
        if kind is _Constant:
            continue
        if kind is _Subscript:
            push(current.value)
            push(current.slice)
            continue
        if kind is _Tuple:
            extend(current.elts)
            continue
        if kind is _UnaryOp:
            push(current.operand)
            continue
        if kind is _BinOp:
            push(current.left)
            push(current.right)
            continue
        if kind not in _NAME_KINDS:  # most other nodes: only their children matter here
            extend(_children(current))
            continue
        if isinstance(current, ast.NamedExpr):
            stores.add(current.target.id)
            stack.append(current.value)
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner, comp_stores = _comprehension_names(current)
            free |= inner - bound
            stores |= comp_stores
            continue
        if isinstance(current, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner, _ = _function_names(current)
            free |= inner - bound  # a lambda may run at once
            deferred |= inner
            continue
        stack.extend(_children(current))


#: The node classes that either walk looks at, beyond names and calls: _gather_names_and_uses
#: leaves them to the two walks (comprehensions, lambdas, `:=`: rare in top-level code).
_EITHER_KINDS = (_NAME_KINDS | _USES_KINDS) - {ast.Name, ast.Call}


def _gather_names_and_uses(node: ast.AST, bound: set[str], chunk: Chunk, inside: bool,
                           uses_stack: list[ast.AST]) -> None:
    """:func:`_gather_names` into the chunk's reads, and what :func:`_walk_uses` gathers,
    in one walk over an expression of top-level code (``inside`` an nnsight block or not).
    Subtrees of :data:`_EITHER_KINDS` go to both walks: to _gather_names now, and on
    ``uses_stack`` for the uses walk."""
    free, stores, deferred = chunk.reads, chunk.may_bind, chunk.deferred
    names, escaping, called = chunk.names, chunk.escaping, chunk.called
    stack = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        kind = type(current)
        while kind is _Attribute:  # (only its object matters to either walk)
            current = current.value
            kind = type(current)
        if kind is _Name:
            name = current.id
            names.add(name)
            escaping.add(name)
            if type(current.ctx) is not _Load:
                stores.add(name)
            elif name not in bound:
                free.add(name)
        elif kind is _Constant:
            pass
        elif kind is _Call:
            func = current.func
            _note_remote_argument(chunk, current)
            if type(func) is _Name:  # called from top-level code: not escaping
                name = func.id
                names.add(name)
                called.add(name)
                if name not in bound:
                    free.add(name)
            elif type(func) is _Attribute:
                method = func.attr
                if method in _TELLING_METHODS or method.endswith("_"):
                    _method_call(chunk, current, inside)
                push(func.value)
            else:
                push(func)
            extend(current.args)
            for keyword in current.keywords:
                push(keyword.value)
        elif kind is _Subscript:
            push(current.value)
            push(current.slice)
        elif kind is _Tuple:
            extend(current.elts)
        elif kind is _UnaryOp:
            push(current.operand)
        elif kind is _BinOp:
            push(current.left)
            push(current.right)
        elif kind is _Dict:
            extend(current.values)
            extend([key for key in current.keys if key is not None])  # (None: a `**mapping`)
        elif kind in _EITHER_KINDS:
            _gather_names(current, bound, free, stores, deferred)
            uses_stack.append(current)
        else:  # most other nodes: only their children matter to either walk
            extend(_children(current))


def _comprehension_names(node) -> tuple[set[str], set[str]]:
    """(free names, names bound by `:=`); the first iterable is read in the enclosing scope."""
    targets: set[str] = set()
    for generator in node.generators:
        targets |= {e.id for e in _flatten(generator.target) if isinstance(e, ast.Name)}
    outer, stores, _ = _expression_names(node.generators[0].iter)
    free = set(outer)
    parts = [*node.generators[0].ifs]
    for generator in node.generators[1:]:
        parts += [generator.iter, *generator.ifs]
    parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    for part in parts:
        inner, inner_stores, _ = _expression_names(part)
        free |= inner - targets
        stores |= inner_stores  # `:=` in a comprehension binds in the enclosing scope
    return free, stores


def _function_names(node) -> tuple[set[str], set[str]]:
    """(free names a function or class body reads, names it declares ``global``).

    Over-approximates the free names: only names bound at the function's own level
    (parameters, assignments, imports, nested definitions) are local."""
    globals_: set[str] = set()
    local: set[str] = set()
    loads: set[str] = set()
    if isinstance(node, ast.Lambda):
        body: list[ast.AST] = [node.body]
    else:
        body = list(node.body)
    if not isinstance(node, ast.ClassDef):
        args = node.args
        local |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    stack = list(body)
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Global):
            globals_ |= set(current.names)
            continue
        if isinstance(current, ast.Name):
            if isinstance(current.ctx, ast.Load):
                loads.add(current.id)
            else:
                local.add(current.id)
            continue
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.add(current.name)
            inner, inner_globals = _function_names(current)
            loads |= inner
            globals_ |= inner_globals
            for decorator in current.decorator_list:
                stack.append(decorator)
            continue
        if isinstance(current, ast.Lambda):
            loads |= _function_names(current)[0]
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner, inner_stores = _comprehension_names(current)
            loads |= inner
            local |= inner_stores
            continue
        if isinstance(current, (ast.Import, ast.ImportFrom)):
            local |= {(a.asname or a.name).split(".")[0] for a in current.names}
            continue
        if isinstance(current, ast.ExceptHandler) and current.name:
            local.add(current.name)
        stack.extend(_children(current))
    return (loads - (local - globals_)) | globals_, globals_


# -- context ----------------------------------------------------------------------------------


def _context_names(chunks: list[Chunk], shaped: list[bool]) -> set[str]:
    """Names bound once, by a chunk without nnsight code, and never changed elsewhere
    (a setup chunk such as ``model.tokenizer.padding_side = "left"`` may change them)."""
    binders: dict[str, list[int]] = {}
    mutators: dict[str, list[int]] = {}
    for index, chunk in enumerate(chunks):
        for name in chunk.may_bind:
            binders.setdefault(name, []).append(index)
        for name in chunk.mutated:
            mutators.setdefault(name, []).append(index)
    global_names = set().union(*(c.globals_ for c in chunks))
    candidates = {
        name for name, where in binders.items()
        if (len(where) == 1 or _same_import(chunks, where, name))
        and name not in global_names and all(shaped[i] for i in where)
        and not set(where) & set(mutators.get(name, ()))
    }
    while True:
        context = {
            name for name in candidates
            if all(_stays_context(chunks[i], candidates) for i in binders[name])
            and all(_is_setup_chunk(chunks[i], candidates) for i in mutators.get(name, ()))
        }
        if context == candidates:
            return context
        candidates = context


def _context(chunks: list[Chunk], shaped: list[bool]) -> tuple[set[str], list[bool]]:
    """The context names, and which chunks are context: a name is context only if a context
    chunk binds it. (``from itertools import count, islice`` where ``count`` is bound again
    later binds a context name, ``islice``, but is not a context chunk itself: a window that
    reads ``islice`` then has no prelude chunk to take it from, so it is not context; and
    chunks that read it are then not context either, until nothing changes.)"""
    context = _context_names(chunks, shaped)
    while True:
        is_context = [_is_context_chunk(chunk, context) for chunk in chunks]
        bound = set().union(*(c.may_bind for c, yes in zip(chunks, is_context) if yes))
        if context <= bound:
            return context, is_context
        context &= bound


def _same_import(chunks: list[Chunk], where: list[int], name: str) -> bool:
    """``import torch`` in several cells of a notebook binds the same thing each time."""
    targets = {chunks[i].imports.get(name) for i in where}
    return len(targets) == 1 and None not in targets


def _definition_shaped(chunk: Chunk) -> bool:
    """Imports, and functions, classes and assignments of names without nnsight blocks.

    (Whether the passes leave a context chunk alone is also checked after the run: a
    window whose prelude came back changed is redone with the whole module.)"""
    for stmt in chunk.statements:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if chunk.nnsight:
                return False
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if not chunk.active and all(
                type(t) is _Name or all(isinstance(e, ast.Name) for e in _flatten(t)) for t in targets
            ):
                continue
        return False
    return True





def _stays_context(chunk: Chunk, candidates: set[str]) -> bool:
    """A binding chunk reads nothing but context and builtins."""
    reads = (chunk.reads | chunk.deferred) - _BUILTINS
    return reads <= candidates and not chunk.globals_


def _is_setup_chunk(chunk: Chunk, context: set[str]) -> bool:
    """``model.tokenizer.padding_side = "left"``: setup of a context object, itself context."""
    if chunk.active or chunk.may_bind or chunk.globals_ or chunk.deferred:
        return False
    if not all(isinstance(s, ast.Assign) for s in chunk.statements):
        return False
    return (chunk.reads - _BUILTINS) <= context and chunk.mutated <= context


def _is_context_chunk(chunk: Chunk, context: set[str]) -> bool:
    if chunk.may_bind:
        return chunk.may_bind <= context and _stays_context(chunk, context)
    return _is_setup_chunk(chunk, context) and bool(chunk.mutated)


# -- shared helpers ---------------------------------------------------------------------------


def _shared_helpers(chunks: list[Chunk], context: set[str], is_context: list[bool],
                    free_of: dict[str, set[str]]) -> dict[str, int]:
    """Functions with nnsight code that many experiments call, by name, with the index of
    their chunk: a chunk that is one undecorated ``def``, called, and only ever by name from
    top-level code, reading nothing but context (when it is defined and when it runs),
    declaring nothing ``global``. Its callers read it as they read context: it opens the
    prelude of each window that mentions it, so calling it does not tie the callers into
    one window. The passes see it there, with its calls; what they say about it is said
    where it stands, once, and a window whose prelude they changed is redone with the
    whole module (as for any context)."""
    helpers = {}
    called = set().union(*(c.called for c in chunks))
    global_names = set().union(*(c.globals_ for c in chunks))  # (a function may bind it again)
    for index, chunk in enumerate(chunks):
        if is_context[index] or not chunk.nnsight or len(chunk.statements) != 1 or len(chunk.functions) != 1:
            continue
        (name, free), = chunk.functions.items()
        if free_of.get(name) is not free or name not in called or name in global_names:
            continue
        # it reads only context and changes nothing of the module's (what it changes in place
        # would not be context: no chunk but a setup of context changes context)
        if (free | chunk.reads) - _BUILTINS <= context and not (chunk.mutated or chunk.globals_ or chunk.deferred):
            helpers[name] = index
    return helpers


def _has_own_window(chunk: Chunk, windows: list[Window]) -> bool:
    """Is the chunk a window of its own (not part of a longer one)?"""
    return any(w.start == chunk.start and w.end == chunk.end for w in windows)


# -- linking ----------------------------------------------------------------------------------


def _link(chunks: list[Chunk], context: set[str], is_context: list[bool]) -> list[int]:
    """Union-find over chunks: the group each chunk belongs to."""
    parent = list(range(len(chunks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    # one pass in source order for the reads (only earlier bindings reach a read), which
    # also lists the chunks binding each name; then the chunks with functions or globals
    binders: dict[str, list[int]] = {}
    later: list[int] = []
    for index, chunk in enumerate(chunks):
        if is_context[index]:
            continue
        for name in chunk.reads - context:
            for binder in reversed(binders.get(name, ())):
                union(index, binder)
                if name in chunks[binder].definite:
                    break
        for name in chunk.may_bind - context:
            binders.setdefault(name, []).append(index)
        if chunk.deferred or chunk.globals_:
            later.append(index)
    touchers = _touchers(chunks, context, is_context) if later else {}
    for index in later:
        chunk = chunks[index]
        # a function runs when it is called: every binding of what it reads counts
        for name in chunk.deferred - context:
            for binder in binders.get(name, ()):
                union(index, binder)
        for name in chunk.globals_:
            for toucher in touchers.get(name, ()):
                union(index, toucher)
    return [find(i) for i in range(len(chunks))]


#: Code that acts on the user's machine (stdout, files, progress bars, logs): two
#: experiments with such code in or between them are not one session's work.
_CLIENT_EFFECT = re.compile(
    r"\b(?:print|open|input|tqdm|trange|display)\s*\(|\.(?:write|writelines|savefig|show|dump|to_csv|info|warning)\s*\("
    r"|\b(?:torch|np|numpy)\.save|\blogging\b|\bplt\."
)


def _link_adjacent_experiments(chunks: list[Chunk], is_context: list[bool], groups: list[int],
                               helpers: set[int] = frozenset()) -> list[int]:
    """Experiments in a row on the same model, with nothing in or between them that acts
    on the user's machine, are one window: session-hoisting makes them one session, as
    it does when it sees the whole file. (The passes treat a window's edges as the edges
    of the file, so what links here decides what may become one request.) A shared
    helper (``helpers``: chunk indices) is not an experiment: it links nothing."""
    parent: dict[int, int] = {}

    def find(group: int) -> int:
        while parent.get(group, group) != group:
            group = parent[group]
        return group

    previous = None  # the last active chunk, while nothing has broken the row
    for index, chunk in enumerate(chunks):
        if is_context[index] or _CLIENT_EFFECT.search(chunk.text):
            previous = None
            continue
        if not chunk.active or index in helpers:
            continue
        if previous is not None and chunk.receivers & chunks[previous].receivers:
            parent[find(groups[index])] = find(groups[previous])
        previous = index
    return [find(g) for g in groups] if parent else groups


def _touchers(chunks: list[Chunk], context: set[str], is_context: list[bool]) -> dict[str, list[int]]:
    """The chunks (not context) that mention or bind each name some function declares
    ``global``: only those names are looked up (listing every name was most of _link)."""
    declared = set().union(*(c.globals_ for c, yes in zip(chunks, is_context) if not yes)) - context
    touchers: dict[str, list[int]] = {}
    if declared:
        for index, chunk in enumerate(chunks):
            if not is_context[index]:
                for name in (chunk.names | chunk.may_bind) & declared:
                    touchers.setdefault(name, []).append(index)
    return touchers


def _windows(chunks: list[Chunk], is_context: list[bool], groups: list[int], context: set[str],
             helpers: dict[str, int] | None = None) -> list[Window]:
    """Contiguous spans of linked chunks; context chunks between them stay where they are.
    A window's prelude holds the context it reads and the shared helpers (``helpers``) it
    mentions, with the context they read."""
    spans: dict[int, list[int]] = {}
    for index, group in enumerate(groups):
        if not is_context[index]:
            span = spans.setdefault(group, [index, index])
            span[0], span[1] = min(span[0], index), max(span[1], index)
    merged: list[list[int]] = []
    for first, last in sorted(spans.values()):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    binder_of: dict[str, int] = {}
    for index, chunk in enumerate(chunks):
        if is_context[index]:
            for name in chunk.may_bind:
                binder_of.setdefault(name, index)  # an import repeated later: the first
    setups = [i for i, c in enumerate(chunks) if is_context[i] and not c.may_bind]
    futures = [i for i, c in enumerate(chunks) if is_context[i] and _is_future_import(c)]
    windows = []
    closures: dict[str, set[str]] = {}
    for first, last in merged:
        inside = chunks[first:last + 1]
        read = [i for name, i in (helpers or {}).items() if not first <= i <= last
                and any(name in c.names or name in c.deferred for c in inside)]  # the shared helpers it reads
        needed = _needed_context(inside + [chunks[i] for i in read], chunks, binder_of, context, closures)
        prelude = set(futures) | set(read)
        for name in needed:
            prelude.add(binder_of[name])
        prelude |= {i for i in setups if i < first and chunks[i].mutated & needed}
        # context inside the span is the window's own text already (a `def` between its
        # experiments): in the prelude too, its statements would be analysed twice
        prelude = {i for i in prelude if not first <= i <= last}
        if first == last and first in (helpers or {}).values():
            active = False  # a shared helper: the windows that call it optimize it
        else:
            active = bool(read) or any(c.active for c in inside)  # (a helper's call sends requests)
        windows.append(Window(chunks[first].start, chunks[last].end, tuple(sorted(prelude)), active,
                              tuple(sorted(read))))
    return windows


def _needed_context(window: list[Chunk], chunks: list[Chunk], binder_of: dict[str, int], context: set[str],
                    closures: dict[str, set[str]]) -> set[str]:
    """The context names a window reads, and those their binders read, and so on."""
    read: set[str] = set()
    for chunk in window:
        read |= chunk.names & context
        read |= chunk.deferred & context
    needed: set[str] = set()
    for name in read:
        if name not in needed:
            closure = closures.get(name)
            if closure is None:
                closure = closures[name] = _context_closure(name, chunks, binder_of, context)
            needed |= closure
    return needed


def _context_closure(name: str, chunks: list[Chunk], binder_of: dict[str, int], context: set[str]) -> set[str]:
    """``name`` and the context names its binder reads, and those their binders read, ...
    (the same for every window: worked out once per name)."""
    needed: set[str] = set()
    todo = {name}
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        binder = chunks[binder_of[name]]
        todo |= binder.names & context
        todo |= binder.deferred & context
    return needed


#: import_line's answer when the import is there already
IMPORTED = -1


def import_line(tree: ast.Module, name: str) -> int | None:
    """Where ``syntax.rewrite.with_module_import`` puts `import name` in the module ``tree``
    is parsed from: the line (0-based) it goes before, after the docstring, the imports and
    the statements that do nothing (strings, `global`) that open the file; :data:`IMPORTED`
    when one of those imports it already; None when the line cannot be told from ``tree``
    (it would go before the first statement, after comments that libcst may keep in the
    module's header)."""
    position = 0  # the end line of the last statement of the opening imports (1-based)
    statements = tree.body
    index = 0
    while index < len(statements):
        first = statements[index]
        line = [first]  # the statements of one line (`import a; import b`): one to libcst
        while index + len(line) < len(statements) and statements[index + len(line)].lineno == line[-1].end_lineno:
            line.append(statements[index + len(line)])
        if not isinstance(first, _SIMPLE_STATEMENTS):
            break
        if isinstance(first, ast.Import) and any(a.name == name and a.asname is None for a in first.names):
            return IMPORTED
        string = isinstance(first, ast.Expr) and type(first.value) in (ast.Constant, ast.JoinedStr)
        if string and type(first.value) is ast.JoinedStr:
            return None  # an f-string, or one concatenated with a string: libcst tells them apart
        # (with_module_import passes a string statement, the docstring, and a `global` too)
        nothing = isinstance(first, ast.Global) or (string and isinstance(first.value.value, (str, bytes)))
        if not (isinstance(first, (ast.Import, ast.ImportFrom)) or nothing):
            break
        position = max(s.end_lineno for s in line)
        index += len(line)
    if position:
        return position
    return 0 if statements and _first_line(statements[0]) == 1 else None


#: The statements libcst keeps on a line of their own (a SimpleStatementLine): not compound ones.
_SIMPLE_STATEMENTS = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.Pass, ast.Break,
    ast.Continue, ast.Return, ast.Raise, ast.Assert, ast.Delete, ast.Global, ast.Nonlocal,
)


def _is_future_import(chunk: Chunk) -> bool:
    return any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in chunk.statements)


__all__ = ["IMPORTED", "Plan", "Window", "import_line", "plan"]

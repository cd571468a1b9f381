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
from dataclasses import dataclass

from ndif_opt.engine.chunk_names import ANY_FLAG, Chunk, attach_calls, describe_chunk, flattened


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
        describe_chunk(chunk)
        shaped.append(_definition_shaped(chunk))
    # assignments to a model inside its blocks are interventions, not changes of the object
    models = set().union(*(c.receivers for c in chunks))
    for chunk in chunks:
        chunk.mutated |= chunk.mutated_in_blocks - models
    free_of = attach_calls(chunks)
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
                type(t) is ast.Name or all(isinstance(e, ast.Name) for e in flattened(t)) for t in targets
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


def _link_adjacent_experiments(chunks: list[Chunk], is_context: list[bool], groups: list[int],
                               helpers: set[int] = frozenset()) -> list[int]:
    """Experiments in a row that may share a session are one window: session-hoisting
    may make them one session, as it may when it sees the whole file — code between them
    that acts on your machine (a print, a file written) included: the session replays it
    after itself. (The passes treat a window's edges as the edges of the file, so what
    links here decides what may become one request: a row goes on past a print, and ends
    at another model or another `remote=`.) A shared helper (``helpers``: chunk indices)
    is not an experiment: it links nothing.

    Not yet equal to the whole file's run: a row also ends at context (a definition
    between experiments, which a session moves out of its way) and skips a call of a
    shared helper (which a session takes), where session-hoisting over the whole module
    goes on (tests/engine/test_windows.py, the xfail on a realistic script)."""
    parent: dict[int, int] = {}

    def find(group: int) -> int:
        while parent.get(group, group) != group:
            group = parent[group]
        return group

    previous = None  # the last active chunk, while nothing has broken the row
    for index, chunk in enumerate(chunks):
        if is_context[index]:
            previous = None
            continue
        if not chunk.active or index in helpers:
            continue
        if previous is not None and _one_session_may_hold(chunks[previous], chunk):
            parent[find(groups[index])] = find(groups[previous])
        previous = index
    return [find(g) for g in groups] if parent else groups


def _one_session_may_hold(first: Chunk, second: Chunk) -> bool:
    """May one session hold work of both chunks: a model and a remote flag in common (a
    flag in ``**kwargs`` may be any)?"""
    if not first.receivers & second.receivers:
        return False
    return bool(first.flags & second.flags) or ANY_FLAG in first.flags | second.flags


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
        if not (isinstance(first, (ast.Import, ast.ImportFrom)) or nothing or _ipython_line(first)):
            break
        position = max(s.end_lineno for s in line)
        index += len(line)
    if position:
        return position
    return 0 if statements and _first_line(statements[0]) == 1 else None


def _ipython_line(statement: ast.stmt) -> bool:
    """`get_ipython().<method>(...)`, a masked `!pip install`: the import goes after it (as
    syntax.rewrite.with_module_import puts it)."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call)
            and isinstance(call.func.value.func, ast.Name) and call.func.value.func.id == "get_ipython")


#: The statements libcst keeps on a line of their own (a SimpleStatementLine): not compound ones.
_SIMPLE_STATEMENTS = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.Pass, ast.Break,
    ast.Continue, ast.Return, ast.Raise, ast.Assert, ast.Delete, ast.Global, ast.Nonlocal,
)


def _is_future_import(chunk: Chunk) -> bool:
    return any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in chunk.statements)


__all__ = ["IMPORTED", "Plan", "Window", "import_line", "plan"]

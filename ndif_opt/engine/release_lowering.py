"""A rewrite lowered for nnsight 0.6: a remote block that reads a local before binding it.

On nnsight 0.6 a remote block's code runs on the server as a function that sees your
variables only as read-only copies: a name the block binds is a local of that function,
unbound until the block binds it (``analysis/releases.py``). So a block that reads ``ids``
and then binds it again (``ids = torch.cat([ids, ...])`` in a decoding loop the session
took in) fails there. :func:`lower_for_06` gives each such name a copy of its own in the
block: ``ids_2 = ids`` first, ``ids_2`` wherever the block said ``ids``, and, when the
block sends that value back (it saves it), ``ids = ids_2`` after the block on your
machine. The block then reads ``ids`` once, before binding anything of that name, as 0.6
allows; every other line does what it did.

A name that may be unbound before the block (a loop variable read after a loop that may
not run) is copied only if it is bound (``try: ids_2 = ids`` / ``except NameError: pass``),
and assigned back the same way: unbound exactly where the script's own name would be. Such
a copy never opens the block: nnsight 0.6 cannot trace a block whose first statement is a
``try``, so it follows the plain copies or the block's first statement, which must then be
a simple one that does not touch the names.

A name is lowered only when that is plainly the same program: the block neither declares
it ``global``/``nonlocal``, imports it, nor reads its names dynamically (``locals()``,
``eval``...). Otherwise :func:`lower_for_06` gives up and the caller leaves the rewrite out.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts
from ndif_opt.analysis.names import collect, fresh_name
from ndif_opt.analysis.regions import bound_before
from ndif_opt.analysis.releases import outermost_remote_blocks, read_before_bound
from ndif_opt.syntax.expressions import dotted_name, is_save_call
from ndif_opt.syntax.rewrite import unsave
from ndif_opt.syntax.walk import find_nodes

# calls that read a scope's names by string: a renamed local would not be found
_DYNAMIC = frozenset({"locals", "vars", "globals", "eval", "exec", "dir"})


def lower_for_06(module: cst.Module, facts: Facts,
                 reserved: frozenset[str] = frozenset()) -> tuple[cst.Module, frozenset[str]] | None:
    """``module`` with every outermost remote block's read-before-bound locals copied (see
    the module docstring), and the names of the copies; ``module`` itself when there are
    none; None when one cannot be."""
    taken = set(reserved) | {node.value for node in find_nodes(module, lambda n: type(n) is cst.Name)}
    plans: dict[int, tuple[dict[str, str], set[str], list[str]]] = {}
    for block in outermost_remote_blocks(facts):
        names = read_before_bound(block)
        if not names:
            continue
        if not _lowerable(block, names):
            return None
        bound = {name for name in names if bound_before(facts, block.stmt, name)}
        sent_back = sorted(names & _saved_names(block))
        if not bound and not _opens_plainly(block, names):
            return None  # nothing may come before the guarded copies (see _copies)
        renames = {}
        for name in sorted(names):
            renames[name] = fresh_name(name, taken)
            taken.add(renames[name])
        plans[id(block.node)] = (renames, bound, sent_back)
    if not plans:
        return module, frozenset()
    copies = frozenset(new for renames, _, _ in plans.values() for new in renames.values())
    return module.visit(_Lowering(plans)), copies


def _lowerable(block: Block, names: set[str]) -> bool:
    body = block.node.body
    for node in find_nodes(body, lambda n: type(n) in (cst.Global, cst.Nonlocal, cst.Import, cst.ImportFrom, cst.Call)):
        kind = type(node)
        if kind in (cst.Global, cst.Nonlocal) and any(item.name.value in names for item in node.names):
            return False
        if kind in (cst.Import, cst.ImportFrom) and names & set(collect(node).binds):
            return False
        if kind is cst.Call and dotted_name(node.func) in _DYNAMIC:
            return False
    return True


def _saved_names(block: Block) -> set[str]:
    """Names whose values the block saves, so that they come back under those names."""
    found = set(block.saved_names)
    for call in find_nodes(block.node.body, is_save_call):  # `ids.save()`, `nnsight.save(ids)`
        saved = unsave(call)
        if type(saved) is cst.Name:
            found.add(saved.value)
    return found


class _Lowering(cst.CSTTransformer):
    def __init__(self, plans: dict[int, tuple[dict[str, str], set[str], list[str]]]) -> None:
        self.plans = plans

    def leave_With(self, original: cst.With, updated: cst.With):
        plan = self.plans.get(id(original))
        if plan is None:
            return updated
        renames, bound, sent_back = plan
        body = updated.body.visit(_Renaming(renames))
        lowered = updated.with_changes(body=body.with_changes(body=_copies(renames, bound, list(body.body))))
        # a copy that may be unbound comes back only if the block bound it: `ids` is then
        # bound, or left as it was, as the script's own name would be
        after = [_copy(renames[name], name, name in bound) for name in sent_back]
        return cst.FlattenSentinel([lowered, *after]) if after else lowered


def _opens_plainly(block: Block, names: set[str]) -> bool:
    """Does the block begin with a simple statement that neither reads nor binds ``names``?"""
    first = block.node.body.body[0] if block.node.body.body else None
    if type(first) is not cst.SimpleStatementLine:
        return False
    use = collect(first)
    return not (names & (set(use.reads) | set(use.binds)))


def _copies(renames: dict[str, str], bound: set[str], body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The block's statements with the copies in front; the guarded ones (a `try`) after the
    plain copies, or after the block's first statement: nnsight 0.6 cannot trace a block
    whose first statement is a `try` (ExitTracingException, locally too)."""
    plain = [_copy(old, new, True) for old, new in renames.items() if old in bound]
    guarded = [_copy(old, new, False) for old, new in renames.items() if old not in bound]
    if plain or not guarded:
        return [*plain, *guarded, *body]
    return [body[0], *guarded, *body[1:]]


def _copy(name: str, copy: str, bound: bool) -> cst.BaseStatement:
    """`ids_2 = ids`; for a name that may be unbound (a loop variable read after a loop that
    may not run), only when it is bound, as the script's first read of it would."""
    if bound:
        return cst.parse_statement(f"{copy} = {name}\n")
    return cst.parse_statement(f"try:\n    {copy} = {name}\nexcept NameError:\n    pass\n")


class _Renaming(cst.CSTTransformer):
    """Every use of the names in the block, but attribute and keyword-argument names."""

    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.renames.get(updated.value)
        return updated.with_changes(value=new) if new else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # `x.ids` names no variable

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # `f(ids=...)` neither

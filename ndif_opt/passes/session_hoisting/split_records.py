"""The split's records (see split.py): what each client statement reads from the session, and
when a record could not hold what the statement would have seen."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.vocabulary import MUTATING_METHODS, WIDENING_CONVERSIONS
from ndif_opt.analysis.names import collect, describing_name, exposed_reads, name_assignment, target_names
from ndif_opt.analysis.tensors import augmented_values, holds_only_scalars
from ndif_opt.analysis.wire import wire_problem
from ndif_opt.passes.common.guards import guard_of
from ndif_opt.passes.common.records import Recorded, plain_loads
from ndif_opt.passes.session_hoisting.split_items import (
    Item,
    Part,
    Refused,
    Splitter,
    attribute_chain,
    changed_under,
    first_code_line,
    path_of,
)
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children, find_nodes


def plan_records(items: list[Item], defined: set[str], mutated: set[str], splitter: Splitter,
                 loop: Item | None = None) -> None:
    """Decide what each client item records and check that a record taken where the
    row is appended still holds what the statement would have read. In a loop with
    ``events`` each client item records itself where it stands."""
    events = loop is not None and loop.events
    last = max((i for i, item in enumerate(items) if item.role is not Part.SERVER), default=-1)
    for index, item in enumerate(items):
        if item.role is Part.SERVER:
            continue
        if item.role is Part.IF:
            plan_records(item.body, defined, mutated, splitter, loop)
            plan_records(item.orelse, defined, mutated, splitter, loop)
            continue
        if item.role is Part.MIXED:
            item.rows, item.row = splitter.fresh("rows"), splitter.fresh("row")
            if item.events:
                item.it_name, item.items_name = splitter.fresh("it"), splitter.fresh("items")
            plan_records(item.body, defined, mutated, splitter, item)
            continue
        # what the statement reads before binding it itself (a `for i in ...` of its own
        # reads no earlier `i`)
        exposed = exposed_reads([item.stmt])
        names = [n for n in exposed if n in defined]
        # the row is appended right after the statement (region level) or after the
        # iteration's last client statement (in a loop): nothing in between may change it
        between = items[index + 1 : last + 1] if loop is not None and not events else []
        later_use = splitter.uses(between, Part.SERVER)
        server_after = splitter.uses(items[index + 1 :], Part.SERVER)
        changed_after = server_after.mutates if loop is None else {}
        changing = {n for n in names if _still_changing(n, index, items, loop, mutated, changed_after, splitter.facts)}
        # what a recorded part may read besides its own value: names that hold the same value
        # where the record is taken as where the line stands, and that the session can read
        steady = (set(exposed) - changing) & splitter.readable
        # reads in `f"{x=}"` print their own text: they are read under their own names
        documenting = _documenting(item.stmt)
        for name in names:
            if name in later_use.binds or name in later_use.mutates:
                raise Refused(
                    f"`{name}` changes between the line that must run on your machine and the end of the "
                    "iteration, so a record of it taken for that line would be wrong"
                )
            still_changing = name in changing
            reduced = None if still_changing else _reduced_reads(item.stmt, name, splitter, steady)
            if reduced and not any(id(node) in documenting for node, _code in reduced):
                # the line reads only parts of it (`logits.shape`, `x[0].argmax()`): the
                # session records those parts, where the line stood, not the whole value
                item.reduced.add(name)
                item.records += [Recorded(code, (node,), describing_name(node)) for node, code in reduced]
                continue
            problem = wire_problem(name, splitter.statements, splitter.facts)
            if problem:
                raise Refused(f"{problem}, and `{first_code_line(item.stmt)}` must run on your machine and reads it")
            if not still_changing and name in server_after.binds:
                # the remote part binds the name again later: the replay reads the record
                # in place or under a name of its own, so the name ends with the value it had
                # at the end
                loads = plain_loads(item.stmt, name)
                if loads is None:
                    raise Refused(
                        f"`{name}` is read and bound again by a line that must run on your machine, while the "
                        "remote part binds it once more after that line"
                    )
                _check_not_documenting(loads, documenting, name)
                item.records.append(Recorded(name, tuple(loads), name, var_hint=f"{name}_then"))
                continue
            if not still_changing:
                loads = plain_loads(item.stmt, name)
                item.records.append(Recorded(name, tuple(loads or ()), name, name=name))
                continue
            # the object keeps changing: record what the line reads of it, a snapshot
            for node, code in _snapshots(item.stmt, name, splitter):
                _check_not_documenting([node], documenting, name)
                item.records.append(Recorded(code, (node,), describing_name(node)))
        _mark_unread(item.records)


def _documenting(stmt: cst.CSTNode) -> set[int]:
    """The nodes inside self-documenting f-string expressions (`f"{x.shape=}"` prints the
    text `x.shape=` too): the replay must read them under the same text."""
    found: set[int] = set()
    for part in find_nodes(stmt, lambda n: type(n) is cst.FormattedStringExpression and n.equal is not None):
        found |= {id(node) for node in find_nodes(part.expression, lambda n: True)}
    return found


def _check_not_documenting(nodes, documenting: set[int], name: str) -> None:
    if any(id(node) in documenting for node in nodes):
        raise Refused(
            f"`{name}` is read in a self-documenting f-string (`{{...=}}`) by a line that must run on your "
            "machine, and the value it reads there is not the one the name holds at the end"
        )


def _mark_unread(records: list[Recorded]) -> None:
    """Mark the names a statement reads only inside recorded parts of other values (`n` in
    `tokens[0][-n:]`): they need no record of their own (see :func:`drop_unread`)."""
    inside: set[int] = set()
    for record in records:
        if not record.name:
            for node in record.nodes:
                inside |= {id(name) for name in find_nodes(node, lambda n: type(n) is cst.Name)}
    for record in records:
        if record.name and record.nodes and all(id(node) in inside for node in record.nodes):
            record.unread = True


def drop_unread(items: list[Item], splitter: Splitter) -> None:
    """Drop the records of names no replayed line reads whole, unless the replay binds the
    name elsewhere: a binding left out there would leave it with an older value."""
    clients = list(_clients(items))
    bound = {r.name for item in clients for r in item.records if r.name and not r.unread}
    bound |= set(splitter.uses(items, Part.CLIENT).binds)
    for item in clients:
        item.records = [r for r in item.records if not (r.unread and r.name not in bound)]


def _clients(items: list[Item]):
    for item in items:
        if item.role is Part.CLIENT:
            yield item
        elif item.role in (Part.MIXED, Part.IF):
            yield from _clients(item.body + item.orelse)


def _still_changing(name: str, index: int, items: list[Item], loop: Item | None, mutated: set[str],
                    changed_after, facts: Facts) -> bool:
    """May ``name`` hold another value when the record of item ``index`` is taken than when the
    line reads it?"""
    if loop is None:  # recorded where it stands: only later changes matter
        return name in changed_after
    # recorded at the iteration's end: later iterations may change it too
    return name in mutated and not _fresh_in_iteration(name, items[:index], loop, facts)


# Methods whose result is a new object, a snapshot of what they are called on.
SNAPSHOT_METHODS = frozenset({"tolist", "item", "clone", "copy"})
# Builtins whose result is a new object or an immutable value made from their arguments.
SNAPSHOT_FUNCTIONS = frozenset(
    {"len", "sum", "min", "max", "sorted", "list", "tuple", "dict", "set", "frozenset", "str", "repr",
     "round", "abs", "any", "all"}
)


def _snapshots(stmt: cst.BaseStatement, name: str, splitter: "Splitter") -> list[tuple[cst.CSTNode, str]]:
    """The parts of ``name`` that ``stmt`` reads, each as a value that later changes
    to ``name`` leave alone: `x[k].tolist()`, `x.item()`; or `x[k]` of a plain list or
    dict that is only ever grown or assigned by key. Refused when there is none."""
    found: list[cst.CSTNode] = []
    _find_snapshots(stmt, name, splitter, found)
    return [(node, code_of(node)) for node in found]


def _find_snapshots(node: cst.CSTNode, name: str, splitter: "Splitter", found: list) -> None:
    if (
        _is_snapshot_builtin(node, splitter.taken_functions)
        and name in collect(node).reads
        and not splitter.server_check.problems(node)
    ):
        found.append(node)  # `len(x)`, `sorted(x["k"])`: a new value, whatever `x` becomes
        return
    chain = attribute_chain(node) if isinstance(node, cst.BaseExpression) else []
    if chain and isinstance(chain[-1], cst.Name) and chain[-1].value == name:
        found.append(_snapshot_of(chain, name, splitter))
        return
    for child in children(node):
        _find_snapshots(child, name, splitter, found)


# Methods whose result is a live view of the object (`dict_items`), which cannot be pickled.
_VIEW_METHODS = frozenset({"items", "keys", "values"})


def _reduced_reads(stmt: cst.BaseStatement, name: str, splitter: "Splitter",
                   steady: set[str]) -> list[tuple[cst.CSTNode, str]] | None:
    """The parts of ``name`` that ``stmt`` reads, when it reads nothing of it but those
    parts and each is computed by code the server may run from ``name`` and names in
    ``steady`` (the same value where the record is taken as where the line stands, readable
    by the session): the outermost attribute, index and method chains (`logits.shape`,
    `x[0, -1].argmax()`, `probs[0, top].item()` with `top` computed in the session)."""
    found: list[cst.CSTNode] = []
    _outermost_chains(stmt, name, found, splitter.taken_functions)
    if not found or len(found) != len(_loads_of(stmt, name)):
        return None  # `name` is also read whole somewhere
    for node in found:
        if any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
               and (n.func.attr.value.endswith("_") or n.func.attr.value in MUTATING_METHODS)
               for n in attribute_chain(node)):
            return None  # an in-place method (`add_`, `append`) changes it: not a read
        if guard_of(stmt, node) is not None:
            return None  # the line computes it only sometimes: recorded, it would run every time
        if type(node) is cst.Call and type(node.func) is cst.Attribute and not node.args \
                and node.func.attr.value in _VIEW_METHODS:
            return None  # `d.items()`: a view of the dict, which cannot travel; the dict can
        # (a builtin of `name` alone reads nothing else)
        others = () if _builtin_of(node, name, splitter.taken_functions) else set(collect(node).reads) - {name}
        if any(other not in steady for other in others) or splitter.server_check.problems(node):
            return None
    # a part ending in a conversion that widens it (`x[0].tolist()`) is recorded before it:
    # the replay converts, and the download is the tensor's
    found = [_before_widening(node) for node in found]
    if any(type(node) is cst.Name for node in found):
        return None  # `x.tolist()`: the whole value is recorded
    return [(node, code_of(node)) for node in found]


def _before_widening(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without the widening conversions it ends with: `x[0, -1].float().tolist()` →
    `x[0, -1]`."""
    while (type(node) is cst.Call and type(node.func) is cst.Attribute and not node.args
           and node.func.attr.value in WIDENING_CONVERSIONS):
        node = node.func.value
    return node


def _outermost_chains(node: cst.CSTNode, name: str, found: list, taken: set[str]) -> None:
    chain = attribute_chain(node) if isinstance(node, cst.BaseExpression) else []
    if len(chain) > 1 and isinstance(chain[-1], cst.Name) and chain[-1].value == name:
        found.append(node)
        return
    if _builtin_of(node, name, taken):
        found.append(node)  # `len(x)`, `max(x)`: a new value made of `x` alone
        return
    if isinstance(node, cst.Attribute):
        _outermost_chains(node.value, name, found, taken)  # (its attribute name is not a read)
        return
    for child in children(node):
        _outermost_chains(child, name, found, taken)


def _builtin_of(node: cst.CSTNode, name: str, taken: set[str]) -> bool:
    """Is ``node`` a call of a builtin that makes a new value of ``name`` alone
    (`len(x)`), the builtin not shadowed by a same-file function?"""
    return (
        _is_snapshot_builtin(node, taken) and len(node.args) == 1 and not node.args[0].star
        and node.args[0].keyword is None and isinstance(node.args[0].value, cst.Name)
        and node.args[0].value.value == name
    )


def _is_snapshot_builtin(node: cst.CSTNode, taken: set[str]) -> bool:
    """Is ``node`` a call of a builtin whose result is a new value (`len(...)`), not of a
    same-file function of that name?"""
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in SNAPSHOT_FUNCTIONS
        and node.func.value not in taken
    )


def _snapshot_of(chain: list[cst.BaseExpression], name: str, splitter: "Splitter") -> cst.BaseExpression:
    """The part of a chain read from a changing object that a record can hold: the
    chain up to a call that copies (`.tolist()`, `.item()`), or the first element of a
    plain container under which nothing is changed (`results['kl'][-1]` when only
    `results['kl']` grows)."""
    inner_first = list(reversed(chain))
    for link in inner_first[1:]:
        if isinstance(link, cst.Call) and link.func.attr.value in SNAPSHOT_METHODS:
            return link
    if name in splitter.containers:
        for link in inner_first[1:]:
            if not isinstance(link, cst.Subscript):
                break
            if not changed_under(path_of(link), splitter.changed_paths):
                return link
    raise Refused(
        f"`{name}` is read by code that must run on your machine while the remote part still changes it in "
        "place; a record of it would hold its final state, not the one that line sees"
    )


def _loads_of(stmt: cst.BaseStatement, name: str) -> list[cst.Name]:
    """The `Name` nodes of ``stmt`` that read ``name``; refused when ``stmt`` binds it too
    (a target, or a comprehension's variable: a read there may be of another value)."""
    loads = plain_loads(stmt, name)
    if loads is None or name in collect(stmt).binds:
        raise Refused(
            f"`{name}` is read and bound again by a line that must run on your machine, while the remote part "
            "binds it once more after that line"
        )
    return loads


def _fresh_in_iteration(name: str, before: list[Item], loop: Item | None, facts: Facts) -> bool:
    """Is ``name`` bound anew in each iteration before it is read (a new object each time)?"""
    if loop is None:
        return False
    if name in target_names(loop.stmt.target):
        return True
    return any(item.role is Part.SERVER and name in collect(item.stmt).binds and _binds_anew(item.stmt, name, facts)
               for item in before)


def _binds_anew(stmt: cst.CSTNode, name: str, facts: Facts) -> bool:
    """Does ``stmt`` bind ``name`` to another object somewhere (not only `name =
    nnsight.save(name)`, which binds it again to the same object, nor `name += [x]`, which
    changes a list, dict, array or tensor in place)?"""
    lines = find_nodes(stmt, lambda n: type(n) is cst.SimpleStatementLine and name in collect(n).binds)
    compound = name in collect(stmt, skip=tuple(lines)).binds if type(stmt) is not cst.SimpleStatementLine else False
    return compound or not lines or any(not _keeps_the_object(line, name, facts) for line in lines)


def _keeps_the_object(stmt: cst.CSTNode, name: str, facts: Facts) -> bool:
    """`name = nnsight.save(name)`, `name = name.save()`: bound again, to the same object; and
    `name += v` unless `name` holds plain scalars wherever it is bound (a number's `+=` makes a
    new number; a list's, dict's, array's or tensor's changes the object in place)."""
    if augmented_values(stmt, name):
        return not holds_only_scalars(facts, name)
    found = name_assignment(stmt)
    if found is None or found[0] != name:
        return False
    value = found[1]
    if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "save":
        argument = value.args[0].value if len(value.args) == 1 else value.func.value
        return type(argument) is cst.Name and argument.value == name
    return type(value) is cst.Name and value.value == name

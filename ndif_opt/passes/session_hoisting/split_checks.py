"""What refuses a split (see split.py): client code that feeds the server part, paths the replay
would read changed, code before the session that would act."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts, qualify
from ndif_opt.analysis.names import NameUse, collect, collect_all, exposed_reads, target_names
from ndif_opt.analysis.vocabulary import CONTAINER_MUTATORS, MODEL_BLOCK_METHODS
from ndif_opt.passes.session_hoisting.split_items import (
    Item,
    Part,
    Refused,
    Splitter,
    first_code_line,
    overlaps,
    path_of,
    progress_call,
    reads_a_file,
    unwrap_progress,
)
from ndif_opt.syntax.walk import find_nodes, walk


def check_kept_paths(items: list[Item], splitter: Splitter) -> None:
    """No part of the session may read what the replay changes in an object that stays
    on your machine: in a loop, a later iteration would have seen the change."""
    for item in items:
        if item.role is Part.SERVER:
            parts = [item.stmt]
        elif item.role is Part.MIXED:
            parts = [item.stmt.iter]
            check_kept_paths(item.body, splitter)
        elif item.role is Part.IF:
            parts = [item.stmt.test]
            check_kept_paths(item.body + item.orelse, splitter)
        else:
            continue
        for part in parts:
            for root, attr in splitter._paths_read(part):
                if overlaps((root, attr), splitter.client_paths):
                    what = root if attr == "*" else root + attr
                    raise Refused(
                        f"the remote part reads `{what}`, which code that must run on your machine changes as the "
                        "loop goes on"
                    )


def check_replayed_bars(items: list[Item], statements, splitter: Splitter) -> None:
    """A progress bar is replayed after the session, around the rows of its loop: what its
    other arguments read (`desc=prompt[:8]`) must hold there what it held where the loop
    stood, so nothing the region binds or changes (an outer loop's variable has its last
    value after the session, or none)."""
    changed = collect_all(statements)
    _bars_reading(items, set(changed.binds) | set(changed.mutates), splitter.facts)


def _bars_reading(items: list[Item], moving: set[str], facts: Facts) -> None:
    for item in items:
        if item.role is Part.IF:
            _bars_reading(item.body + item.orelse, moving, facts)
        if item.role is not Part.MIXED:
            continue
        bar = progress_call(item.stmt.iter, facts)
        if bar is not None:
            first = next((a for a in bar.args if a.keyword is None and not a.star), None)
            read = set().union(*(collect(a.value).reads for a in bar.args if a is not first))
            found = sorted(read & moving)
            if found:
                raise Refused(
                    f"the progress bar `{first_code_line(bar)}` reads `{found[0]}`, which the loop changes: replayed "
                    "after the session, it would show something else"
                )
        _bars_reading(item.body, moving, facts)


def check_prelude(items: list[Item], splitter: Splitter) -> set[str]:
    """Refuse the split unless each prepared statement computes before the session what
    it computed where it stood: nothing else in the region binds or changes what it
    reads, and nothing else uses the modules and objects of yours it calls (a random
    generator drawn from in another order). The names others read of what it binds."""
    parts = [_unprepared_uses(item, splitter) for item in items]
    everything = NameUse()
    for part in parts:
        everything.merge(part)
    needed = set(everything.reads) | splitter.later
    changed = set(everything.binds) | set(everything.mutates)
    server = splitter.uses(items, Part.SERVER)
    earlier = NameUse()  # what the items before the current one use
    for item, part in zip(items, parts):
        if item.role is Part.PRE:
            _check_prepared(item, set(), set(earlier.binds) | set(earlier.mutates), set(earlier.reads), splitter,
                            server)
        elif item.role is Part.MIXED and any(child.role is Part.PRE for child in item.body):
            iterable = set(collect(unwrap_progress(item.stmt.iter, splitter.facts)).reads)
            moved = iterable & (set(earlier.binds) | set(earlier.mutates))
            if moved:
                raise Refused(
                    f"the loop goes over `{sorted(moved)[0]}`, which the remote part computes, and code that must "
                    "run on your machine before it needs each item"
                )
            known = set(target_names(item.stmt.target))
            for child in item.body:
                if child.role is Part.PRE:
                    _check_prepared(child, known, changed, set(), splitter, server)
                    known |= set(collect(child.stmt).binds)
        earlier.merge(part)
    if any(find_nodes(item.stmt, reads_a_file) for item in splitter.pre):
        writes = _writes_files(items, splitter)
        if writes is not None:
            raise Refused(
                f"a file is read before the session, where it was read in the loop, and `{first_code_line(writes)}` "
                "acts on files on your machine in the same loop"
            )
    for item in splitter.pre:
        used = _yours(item, splitter) & set(everything.reads)
        if used:
            raise Refused(
                f"`{sorted(used)[0]}` is used on your machine both by code the remote part needs first and by code "
                "after it; run in another order, it could give other values"
            )
    return needed


def _writes_files(items: list[Item], splitter: Splitter) -> cst.CSTNode | None:
    """The first statement of the region, other than the prepared ones, that acts on
    files (writes one, sleeps...), or None."""
    for item in items:
        if item.role in (Part.MIXED, Part.IF):
            found = _writes_files(item.body + item.orelse, splitter)
            if found is not None:
                return found
        elif item.role is Part.CLIENT:
            problems = splitter.server_check.problems(item.stmt)
            if any(p.kind == "effect" or p.kind == "forbidden" for p in problems):
                return item.stmt
    return None


def _check_prepared(item: Item, known: set[str], changed: set[str], read_before: set[str], splitter,
                    server: NameUse) -> None:
    """``server``: what the remote part binds and changes (the rest of ``changed``: code
    replayed after the session)."""
    reads = set(exposed_reads([item.stmt])) - known
    moved = {name for name in reads & changed if not _only_intervened_on(name, splitter)}
    if moved:
        name = sorted(moved)[0]
        if name in server.mutates or name in server.binds:
            # (`emb_dim = model.config.n_embd` in the region is computed by the session, not changed)
            where = "the remote part " + ("changes" if name in server.mutates else "computes")
        else:
            where = "code replayed on your machine after the session changes"
        raise Refused(
            f"`{first_code_line(item.stmt)}` must run on your machine, the remote part needs what it computes, and it "
            f"reads `{name}`, which {where}"
        )
    early = set(collect(item.stmt).binds) & read_before
    if early:
        raise Refused(
            f"`{first_code_line(item.stmt)}` must run on your machine before the remote part, which needs what it "
            f"computes, and it binds `{sorted(early)[0]}`, which code before it reads"
        )


def _only_intervened_on(name: str, splitter: Splitter) -> bool:
    """Is ``name`` a model that the region changes only inside its nnsight blocks
    (`model.layers[0].output[:] = 0`)? Such a write is an intervention on one forward
    pass, not a change of the object the client reads (`model.config.n_embd`)."""
    facts = splitter.facts
    if name not in facts.models:
        return False
    bodies = tuple(block.node.body for block in facts.blocks)
    return not any(name in collect(stmt, skip=bodies).mutates for stmt in splitter.statements)


def _yours(item: Item, splitter: Splitter) -> set[str]:
    """The modules and objects only your machine has that the statement uses."""
    reads = set(collect(item.stmt).reads)
    return {n for n in reads if n in splitter.facts.imports or splitter.server_check.is_client_object(n)}


def _unprepared_uses(item: Item, splitter: Splitter) -> NameUse:
    """Names used by the item's parts that are not prepared: its server and client parts."""
    found = splitter.uses([item], Part.SERVER)
    found.merge(splitter.uses([item], Part.CLIENT))
    return found


def mixed_items(items: list[Item]):
    for item in items:
        if item.role is Part.MIXED:
            yield item
            yield from mixed_items(item.body)


def shallow_containers(items: list[Item], splitter: "Splitter", facts: Facts) -> tuple[set[str], set]:
    """Plain lists and dicts the server part changes in place, and the access paths
    it changes (`results['kl']` for `results['kl'].append(v)`): an element of a plain
    container under none of those paths is a snapshot once recorded."""
    mutations = _Mutations()
    for item in _server_statements(items):
        walk(item.stmt, mutations)
    mutated = splitter.uses(items, Part.SERVER).mutates
    aliased = {e.value for e in mutations.stored if isinstance(e, cst.Name) and e.value in mutated}
    containers = set()
    for name in mutated:
        bindings = [v for _stmt, v in facts.bindings.get(name, ())]
        if bindings and all(_plain_container(v, facts) for v in bindings) and name not in aliased:
            containers.add(name)
    return containers, mutations.paths


def _plain_container(value: cst.BaseExpression, facts: Facts) -> bool:
    if isinstance(value, (cst.List, cst.Dict, cst.ListComp, cst.DictComp)):
        return True
    if isinstance(value, cst.Call):
        path = qualify(value.func, facts.imports) or ""
        return path in ("list", "dict", "collections.defaultdict", "collections.OrderedDict")
    return False


class _Mutations(cst.CSTVisitor):
    """The access paths the code changes in place (`x` for `x.append(v)` and `x[k] = v`,
    `x[k]` too for `x[k] += v`, which may change the element itself), and the values
    it stores into containers."""

    def __init__(self) -> None:
        self.paths: set[tuple[str, ...]] = set()
        self.stored: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in CONTAINER_MUTATORS:
            self.paths.add(path_of(func.value))
            self.stored.extend(a.value for a in node.args)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, (cst.Subscript, cst.Attribute)):
            self.paths.add(path_of(node.target.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        self.stored.append(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        target = node.target
        self.paths.add(path_of(target))
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self.paths.add(path_of(target.value))


def _server_statements(items: list[Item]):
    for item in items:
        if item.role is Part.SERVER:
            yield item
        elif item.role is Part.MIXED:
            yield from _server_statements(item.body)


def _client_items(items: list[Item]):
    for item in items:
        if item.role is Part.CLIENT:
            yield item
        yield from _client_items(item.body)
        yield from _client_items(item.orelse)


def origin_of(items: list[Item], name: str) -> str:
    """Where the local code that computes or changes ``name`` comes from: the local
    statement furthest up its chain of reads whose own code must run on your machine
    (`: it comes from `x = capped(logits)`, whose code calls `capped`, ...`), or nothing."""
    local = list(_client_items(items))
    wanted, seen, furthest = [name], set(), None
    while wanted:  # breadth first: the last statement found with a reason is the furthest up
        current = wanted.pop(0)
        if current in seen:
            continue
        seen.add(current)
        for item in local:
            use = collect(item.stmt)
            if current in use.binds or current in use.mutates:
                furthest = item if item.why else furthest
                wanted += [read for read in use.reads if read not in seen]
    return f": it comes from `{first_code_line(furthest.stmt)}`, whose code {furthest.why}" if furthest else ""


def check_independence(server: NameUse, client: NameUse, server_exposed, later: set[str],
                       kept: frozenset[str] = frozenset(), origin=lambda name: "") -> None:
    """The replay runs after the session: nothing the client part computes or changes
    may be read or changed by the server part. A name both parts bind is fine when the
    server part always binds it before reading it and nothing after the region reads it.
    ``origin(name)``: where the local code behind a refused name comes from, said after it."""
    for name in client.binds:
        if name in server.mutates or name in server_exposed or (
            name in later and (name in server.binds or name in server.reads)
        ):
            raise Refused(
                f"`{name}` is computed by code that must run on your machine and is also used by the remote "
                f"part{origin(name)}"
            )
    for name in client.mutates:
        if name in kept:
            continue  # an object that stays here: its paths were checked as the code was split
        if name in set(server.reads) | set(server.mutates):
            raise Refused(
                f"`{name}` is changed by code that must run on your machine and is also used by the remote "
                f"part{origin(name)}"
            )


def check_no_remote_left(stmts: list[cst.BaseStatement], facts: Facts, remote_work) -> None:
    """The split's own check of what it wrote: the code that runs on your machine (before
    the session, and its replay after it) sends no request. A model's block or a call of a
    function that runs one left there would send each request the session was meant to
    take, again, after it (and the pipeline's next round would wrap it in a session of its
    own). ``remote_work``: the pass's question, for the calls of functions that trace."""
    for stmt in stmts:
        blocks = find_nodes(stmt, lambda n: type(n) is cst.With and any(_opens_a_block(i.item, facts) for i in n.items))
        if blocks or remote_work(stmt)[0]:
            raise Refused(
                f"`{first_code_line(blocks[0] if blocks else stmt)}` would stay on your machine, after the session, "
                "where it would send its requests again (ndif-opt could not split this code: please report it)"
            )


def _opens_a_block(expr: cst.BaseExpression, facts: Facts) -> bool:
    """`model.trace(...)`, `model.generate(...)`, `model.session(...)` of a model of the file."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in MODEL_BLOCK_METHODS):
        return False
    root = expr.func.value
    while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
        root = root.func if isinstance(root, cst.Call) else root.value
    return isinstance(root, cst.Name) and facts.is_model_like(root.value)

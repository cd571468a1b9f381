"""The client/server split of a region that session-hoisting moves into one session.

A region's statements are of three kinds:

- *server* statements: remote blocks and code NDIF may run (torch ops, arithmetic,
  `.item()`, list and dict updates, same-file helpers that obey the same rules);
- *client* statements: code without remote work that must run on your machine
  (`print`, tqdm, file writes, `json`, plotting, decoding with a module NDIF does not
  allow), and that feeds nothing the server part reads;
- *mixed* `for` loops: loops whose body holds both, split recursively.

The session runs the server statements in their order. Each client statement leaves a
*record* of the values it reads where it stood (a row appended to a saved list), and
after the session a *replay* runs the client statements in their order over those
records: a loop becomes a loop over its rows, a nested loop a loop over the rows its
iteration recorded. stdout and files come out identical; only their timing changes.

    with model.session(remote=...):
        _ndif_rows = list().save()
        for layer in range(n):
            with model.trace(prompt): ...
            diff = metric(logits)
            _ndif_rows.append((layer, diff))
    for layer, diff in _ndif_rows:
        print(layer, diff)

A split is refused, with the reason, when a record could not hold the value the client
statement would have seen: the value is changed in place later (a list still growing,
a tensor written into), or the client part computes something the server part reads.
"""

from __future__ import annotations

from dataclasses import replace

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import exposed_reads
from ndif_opt.passes.session_hoisting.split_checks import (
    check_independence,
    check_kept_paths,
    check_no_remote_left,
    check_replayed_bars,
    mixed_items,
    origin_of,
    shallow_containers,
)
from ndif_opt.passes.session_hoisting.split_items import Part, Split, Splitter
from ndif_opt.passes.session_hoisting.split_records import drop_unread, plan_records
from ndif_opt.passes.session_hoisting.split_replay import build_split, needs_log, prelude_statements


def split_region(statements, facts: Facts, server_check, remote_work, taken: set[str],
                 carry: list[str] = (), later: set[str] = frozenset(), is_model=lambda name: False,
                 drop_bars: bool = False, client_roots: frozenset[str] = frozenset()) -> Split:
    """Split ``statements``; ``carry``: names read after the region that the server part
    computes and nothing else brings back (the replay ends by binding them to their
    values at the end of the session)."""
    splitter = Splitter(facts, server_check, remote_work, taken, drop_bars)
    splitter.statements = list(statements)
    splitter.client_roots = frozenset(client_roots)
    splitter.anchor = statements[0] if statements else None
    splitter.later = set(later) | set(carry)
    items = splitter.classify(statements)
    check_replayed_bars(items, statements, splitter)
    if splitter.client_paths:
        check_kept_paths(items, splitter)
    prelude = prelude_statements(items, splitter, facts) if splitter.pre else []
    server = splitter.uses(items, Part.SERVER)
    client = splitter.uses(items, Part.CLIENT)
    server_items = [item.stmt for item in items if item.role is not Part.CLIENT]
    server_exposed = exposed_reads(server_items)
    for stmt in server_items:  # a function the server part calls reads the module's names as they are then
        for name in facts.read_by_calls(stmt):
            server_exposed.setdefault(name, stmt)
    check_independence(server, client, server_exposed, splitter.later, splitter.client_roots,
                        origin=lambda name: origin_of(items, name))
    # a model is changed in place only by interventions inside traces: not a value to record
    defined = {n for n in set(server.binds) | set(server.mutates) if not is_model(n)}
    splitter.containers, splitter.changed_paths = shallow_containers(items, splitter, facts)
    # names a recorded part may read besides its own value: the session's, or ones the region
    # leaves alone (a module constant); never one the client statements bind
    splitter.readable = (defined | (set(server_exposed) - set(server.binds))) - set(client.binds)
    plan_records(items, defined, {n for n in server.mutates if n in defined}, splitter)
    drop_unread(items, splitter)
    carry = [n for n in carry if n not in client.binds]
    log = splitter.fresh("log") if needs_log(items) or carry else ""
    record = Split([], [], 0)
    server_stmts, replay = build_split(items, log, splitter, facts, carry, record)
    check_no_remote_left([*prelude, *replay], facts, remote_work)
    unsaved = set().union(*(i.unsaved for i in mixed_items(items)))
    return replace(record, server=server_stmts, replay=replay, deferred=splitter.deferred, carried=carry,
                   record_names=splitter.record_names, partial=splitter.partial, unsaved=unsaved, dropped_bars=splitter.dropped_bars,
                   fallback=splitter.handled_failures > 0, prelude=prelude, prepared=len(splitter.pre))

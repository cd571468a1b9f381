"""The split's code (see split.py): what runs before the session, the session's records and
the replay after it."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.names import collect, collect_all, definite_binds
from ndif_opt.analysis.regions import bound_before, jumps_of_loop, leaves_its_iteration
from ndif_opt.passes.common.records import Keys, LogKeys, Reader, Recorded, Shape, shape
from ndif_opt.passes.session_hoisting.split_checks import check_prelude
from ndif_opt.passes.session_hoisting.split_items import (
    Item,
    Part,
    Split,
    Splitter,
    is_jump,
    progress_call,
    unwrap_progress,
)
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.rewrite import opening
from ndif_opt.syntax.walk import transform


def prelude_statements(items: list[Item], splitter: Splitter, facts: Facts) -> list[cst.BaseStatement]:
    """The code that runs before the session: the region's prepared statements, and for
    a loop with prepared statements a loop over the same items that runs them and
    keeps their values (`_ndif_inputs`), which the session's loop takes in turn
    (`next(_ndif_feed)`) where each statement stood."""
    needed = check_prelude(items, splitter)
    prelude: list[cst.BaseStatement] = []
    kept: list[Item] = []
    for item in items:
        if item.role is Part.PRE:
            prelude.append(item.stmt)
        elif item.role is Part.MIXED and any(child.role is Part.PRE for child in item.body):
            before, feed = _loop_prelude(item, needed, splitter, facts)
            prelude += before
            kept += [feed, item]
        else:
            kept.append(item)
    items[:] = kept
    return prelude


def _loop_prelude(item: Item, needed: set[str], splitter: Splitter, facts: Facts):
    loop: cst.For = item.stmt
    listed, inputs, feed = splitter.fresh("items"), splitter.fresh("inputs"), splitter.fresh("feed")
    body: list[cst.BaseStatement] = []
    children: list[Item] = []
    for child in item.body:
        if child.role is not Part.PRE:
            children.append(child)
            continue
        body.append(child.stmt.with_changes(leading_lines=[]))
        fed = [n for n in collect(child.stmt).binds if n in needed]
        if fed:
            body.append(cst.parse_statement(f"{inputs}.append({_tuple_code(fed)})\n"))
            taken = cst.parse_statement(f"{_target_code(fed)} = next({feed})\n")
            children.append(Item(taken, Part.SERVER, depth=child.depth))
    item.body = children
    item.session_iter = cst.Name(listed)
    # the items are listed once: the prelude and the session go over the same ones
    iterable = code_of(unwrap_progress(loop.iter, facts))
    before = [
        _statement(f"{listed} = list({iterable})", "# the loop's items, listed once: both loops go over them"),
        _statement(f"{inputs} = []", "# what the session needs from your machine, in the order it needs it"),
        cst.For(target=loop.target, iter=cst.Name(listed), body=cst.IndentedBlock(body=body)),
    ]
    return before, Item(_statement(f"{feed} = iter({inputs})", "# taken in turn where each was computed"), Part.SERVER)


# What each generated helper name holds, said where it is made.
ROWS_COMMENT = "# one record per iteration, replayed after the session"
INNER_ROWS_COMMENT = "# one record per iteration of the loop below"
LOG_COMMENT = "# the values the replay after the session reads, by name"
UNBOUND_COMMENT = "# not bound on every path: left unbound, as the loop would leave it"
EVENTS_COMMENT = "# this iteration's records, and which way its branches went, in order"
TAKEN_COMMENT = "# taken in the order the session recorded them"
RECORD_COMMENT = "# what the session recorded for the statement below"


def _statement(code: str, comment: str = "") -> cst.BaseStatement:
    return cst.parse_statement(f"{code}  {comment}\n" if comment else f"{code}\n")


def needs_log(items: list[Item]) -> bool:
    return any(item.role is Part.CLIENT and item.records for item in items)


def build_split(items: list[Item], log: str, splitter: Splitter, facts: Facts, carry: list[str], record: Split):
    """The session's statements and the replay's; ``record`` gets the section headers
    that move onto server statements and what the run's record holds."""
    comments = record.comments
    server: list[cst.BaseStatement] = []
    replay: list[cst.BaseStatement] = []
    reserved = {v.name for item in items if item.role is Part.CLIENT for v in item.records if v.name}
    keys = LogKeys(reserved | set(carry))
    headers = _section_headers(items)
    moved_to = {target: items[source].stmt.leading_lines for source, target in headers.items()}
    for index, item in enumerate(items):
        header = _header_lines(moved_to.get(index, ()))
        if item.role is Part.SERVER:
            server.append(item.stmt)
            if header:
                comments[id(item.stmt)] = header
        elif item.role is Part.CLIENT:
            entries = keys.place(item.records)
            plain = {value.key: value.name for value in item.records if value.name}
            for key, code in entries:
                entry = cst.parse_statement(f'{log}["{key}"] = {code}\n')
                server.append(entry)
                record.log_entries.add(id(entry))
                if key in plain:
                    record.named_records.setdefault(plain[key], []).append(entry)
            reader = Reader(Shape("", log, var=log), splitter.fresh_plain)
            replayed = reader.read(item.stmt, item.records)
            if index == 0:  # (its comments stand above the session, where the region starts)
                replayed = _without_comments(replayed)
            elif index in headers:  # a section's header goes with the section's remote work
                replayed = replayed.with_changes(leading_lines=_after_header(replayed.leading_lines))
            lines = _bound_first([*reader.bindings, replayed])
            placed = {id(binding): line for binding, line in zip(reader.bindings, lines)}
            for name, binding in reader.named:
                record.named_records.setdefault(name, []).append(placed[id(binding)])
            replay += lines
        elif _silent(item, facts):
            server.append(_server_loop(item, facts))
        else:
            loop, client_loop = _split_loop(item, facts, splitter)
            # (the loop's comments and blank lines go above its record list, made just before it)
            rows = _statement(f"{item.rows} = list().save()", ROWS_COMMENT)
            server.append(rows.with_changes(leading_lines=[*header, *loop.leading_lines]) if header else
                          rows.with_changes(leading_lines=loop.leading_lines))
            server.append(loop.with_changes(leading_lines=[]))
            replay.append(client_loop)
    bound = set().union(*(definite_binds(stmt) for stmt in server)) if carry else set()
    start = facts.statements.get(id(splitter.anchor)) if splitter.anchor is not None else None
    for name in carry:  # the values the code after the region reads, as the session ends
        key, new = keys.carried(name)
        # bound on some paths only (and not before the region): unbound, it stays unbound
        sometimes = name not in bound and not bound_before(facts, start, name)
        if new:
            entry = cst.parse_statement(
                f'try:\n    {log}["{key}"] = {name}\nexcept NameError:  {UNBOUND_COMMENT}\n    pass\n'
                if sometimes else f'{log}["{key}"] = {name}\n')
            server.append(entry)
            record.log_entries.add(id(entry))
        replay.append(cst.parse_statement(
            f'if "{key}" in {log}:\n    {name} = {log}["{key}"]\n' if sometimes and new
            else f'{name} = {log}["{key}"]\n'))
    if log:
        record.log = _statement(f"{log} = dict().save()", LOG_COMMENT)
        server.insert(0, record.log)
    return server, replay


def _section_headers(items: list[Item]) -> dict[int, int]:
    """Where section headers move: a comment block above a replayed statement, set off
    from it by a blank line, heads the code up to the next comment (`# ── RUN 3: restore
    one position ──` above a print and the sweep that follows). The replay is only the
    section's local part: the header goes with the section's first remote statement.
    Item index -> the index of the item it moves to."""
    moves: dict[int, int] = {}
    for index, item in enumerate(items):
        if index == 0 or item.role is not Part.CLIENT or not _header_lines(item.stmt.leading_lines):
            continue
        for later in range(index + 1, len(items)):
            if any(line.comment is not None for line in items[later].stmt.leading_lines):
                break  # the next section
            if items[later].role in (Part.SERVER, Part.MIXED):
                moves[index] = later
                break
    return moves


def _header_lines(lines) -> list[cst.EmptyLine]:
    """The lines of a section header among a statement's leading lines: up to the last
    comment, when a blank line sets it off from the statement; else none."""
    comments = [i for i, line in enumerate(lines) if line.comment is not None]
    if not comments or comments[-1] == len(lines) - 1:
        return []
    return list(lines[: comments[-1] + 1])


def _after_header(lines) -> list[cst.EmptyLine]:
    return list(lines[len(_header_lines(lines)):])


def _without_comments(stmt: cst.BaseStatement) -> cst.BaseStatement:
    blank = [line for line in stmt.leading_lines if line.comment is None]
    return stmt.with_changes(leading_lines=blank) if len(blank) != len(stmt.leading_lines) else stmt


def _bound_first(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The replayed statement after the lines that bind its names, its blank lines and
    comments above them all."""
    if len(stmts) < 2 or not stmts[-1].leading_lines:
        return stmts
    last = stmts[-1]
    return [stmts[0].with_changes(leading_lines=last.leading_lines), *stmts[1:-1], last.with_changes(leading_lines=[])]


def _silent(item: Item, facts: Facts) -> bool:
    """A split loop with nothing to replay: a `try` split around its remote work left
    only server statements, and no progress bar shows the iterations."""
    return (
        item.role is Part.MIXED
        and progress_call(item.stmt.iter, facts) is None
        and all(child.role is Part.SERVER or _silent(child, facts) for child in item.body)
    )


def _server_loop(item: Item, facts: Facts) -> cst.For:
    """The server half of a silent loop: its body's server statements, in order."""
    body = [child.stmt if child.role is Part.SERVER else _server_loop(child, facts) for child in item.body]
    loop = item.stmt.with_changes(body=item.stmt.body.with_changes(body=body))
    return loop.with_changes(iter=item.session_iter) if item.session_iter is not None else loop


def _loop_record(item: Item, facts: Facts, splitter: Splitter) -> tuple[Shape, Reader]:
    """One iteration's record: every value the iteration's replayed statements read (one
    key for each distinct expression: the record is taken once, at the iteration's last
    replayed statement) and the records of its inner loops; how the replay reads it."""
    clients = [child for child in item.body if child.role is Part.CLIENT]
    keys = Keys({value.name for child in clients for value in child.records if value.name})
    inner = [child for child in item.body if child.role is Part.MIXED and not _silent(child, facts)]
    for child in item.body:
        if child.role is Part.CLIENT:
            for value in child.records:
                keys.place(value)
        elif child in inner:
            child.rows_key = keys.place(Recorded(child.rows, (), "rows", name=child.rows))
    record = shape(keys, item.row, splitter.fresh_plain)
    for child in inner:  # an inner loop's records, read through this one's
        child.rows_read = f'{record.var}["{child.rows_key}"]' if record.var else record.names[child.rows_key]
    # a value the row carries home needs no `.save()` of its own (it would download twice)
    later = splitter.later
    item.unsaved = {keys.codes[key] for key in keys.plain if keys.codes[key] not in later}
    # ... and one whose parts the rows carry home, when nothing reads it whole
    whole = set(keys.codes.values())
    item.unsaved |= {n for child in item.body for n in child.reduced if n not in later and n not in whole}
    return record, Reader(record, splitter.fresh_plain)


def _split_loop(item: Item, facts: Facts, splitter: Splitter):
    """The server loop (records a row per iteration) and the client loop over the rows."""
    if item.events:
        return _split_loop_events(item, facts, splitter)
    loop: cst.For = item.stmt
    record, reader = _loop_record(item, facts, splitter)
    # a loop whose only local part is its progress bar records one empty row an iteration
    last = max((i for i, child in enumerate(item.body) if child.role is not Part.SERVER), default=len(item.body) - 1)
    server_body: list[cst.BaseStatement] = []
    client_body: list[cst.BaseStatement] = []
    for index, child in enumerate(item.body):
        if child.role is Part.SERVER:
            server_body.append(child.stmt)
        elif child.role is Part.CLIENT:
            child.replayed = reader.read(child.stmt, child.records)
            client_body.append(child.replayed)
        elif _silent(child, facts):
            server_body.append(_server_loop(child, facts))
        else:
            server_body.append(_statement(f"{child.rows} = list()", INNER_ROWS_COMMENT))
            inner, inner_client = _split_loop(child, facts, splitter)
            server_body.append(inner)
            client_body.append(inner_client)
        if index == last:
            server_body.append(cst.parse_statement(f"{item.rows}.append({record.value})\n"))
    # the loop's comments say what it does: they stay with its work, in the session
    server_loop = loop.with_changes(
        iter=item.session_iter or unwrap_progress(loop.iter, facts),
        body=loop.body.with_changes(body=opening(server_body)),
    )
    rows = item.rows_read or item.rows
    header = cst.parse_statement(f"for {record.target} in {_replayed_iter(loop.iter, rows, facts)}:\n    pass\n")
    body = opening([*reader.bindings, *client_body]) or [cst.SimpleStatementLine([cst.Pass()])]
    client_loop = _without_comments(header.with_changes(body=loop.body.with_changes(body=body),
                                                        leading_lines=loop.leading_lines))
    return server_loop, client_loop


def _split_loop_events(item: Item, facts: Facts, splitter: Splitter):
    """A loop whose body branches or jumps: each iteration records a list, each local
    statement appends its values to it where it stands, each branch the way it went;
    the replay walks the same branches and jumps, taking the records in turn."""
    loop: cst.For = item.stmt
    it, items = item.it_name, item.items_name
    server_body = [
        _statement(f"{it} = list()", EVENTS_COMMENT),
        cst.parse_statement(f"{item.rows}.append({it})\n"),
    ]
    events = _Events(it, items, item.row, facts, splitter)
    body, client_body = events.parts(item.body)
    server_loop = loop.with_changes(
        iter=item.session_iter or unwrap_progress(loop.iter, facts),
        body=loop.body.with_changes(body=opening(server_body + body)),
    )
    rows = item.rows_read or item.rows
    header = cst.parse_statement(f"for {it} in {_replayed_iter(loop.iter, rows, facts)}:\n    pass\n")
    client_loop = _without_comments(header.with_changes(
        body=loop.body.with_changes(body=[_statement(f"{items} = iter({it})", TAKEN_COMMENT), *client_body]),
        leading_lines=loop.leading_lines,
    ))
    # an iteration binds what its records hold only where it reaches them: after the replay
    # such a name may hold an earlier iteration's value, not the last one the loop bound
    # (not one every iteration binds before anything may end it)
    sure: set[str] = set()
    for stmt in client_body:
        if leaves_its_iteration(stmt):
            break
        sure |= definite_binds(stmt)
    splitter.partial |= set(collect_all([client_loop]).binds) - sure - splitter.record_names
    return server_loop, client_loop


@dataclass
class _Events:
    """The parts of a loop body whose statements record themselves where they stand."""

    it: str  # the iteration's list of records
    items: str  # the replay's iterator over it
    row: str  # the replay's name for a record that is a dict
    facts: Facts
    splitter: Splitter

    def parts(self, children: list[Item]):
        server: list[cst.BaseStatement] = []
        client: list[cst.BaseStatement] = []
        for child in children:
            if child.role is Part.SERVER and (is_jump(child.stmt) or not leaves_its_iteration(child.stmt)):
                server.append(child.stmt)
                if is_jump(child.stmt):  # a bare `break`/`continue`: the replay jumps too
                    client.append(child.stmt)
            elif child.role is Part.SERVER:
                # a statement that may end the iteration (a `try` whose handler says
                # `continue`): the session records whether it did, the replay jumps where
                # it did; the statement itself (remote work) runs only in the session
                server += [_recording_jumps(child.stmt, self.it),
                           cst.parse_statement(f"{self.it}.append(False)\n")]
                jump = next(iter(jumps_of_loop(child.stmt)))
                client.append(cst.parse_statement(f"if next({self.items}):\n    {jump}\n"))
            elif child.role is Part.CLIENT:
                keys = Keys({value.name for value in child.records if value.name})
                for value in child.records:
                    keys.place(value)
                record = shape(keys, self.row, self.splitter.fresh_plain)
                reader = Reader(record, self.splitter.fresh_plain)
                child.replayed = reader.read(child.stmt, child.records)
                server.append(cst.parse_statement(f"{self.it}.append({record.value})\n"))
                # (a name of the tool's own says what it holds; the user's names need no word)
                comment = RECORD_COMMENT if record.target.startswith("_ndif_") else ""
                taken = (_statement(f"{record.target} = next({self.items})", comment) if keys.codes
                         else cst.parse_statement(f"next({self.items})\n"))
                client += [taken, *reader.bindings, child.replayed]
            elif child.role is Part.MIXED and _silent(child, self.facts):
                server.append(_server_loop(child, self.facts))
            elif child.role is Part.MIXED:
                server.append(_statement(f"{child.rows} = list()", INNER_ROWS_COMMENT))
                server.append(cst.parse_statement(f"{self.it}.append({child.rows})\n"))
                inner, inner_client = _split_loop(child, self.facts, self.splitter)
                server.append(inner)
                client.append(cst.parse_statement(f"{child.rows} = next({self.items})\n"))
                client.append(inner_client)
            else:  # a branch: record which way it went
                server_if, client_if = self.branch(child.stmt, child)
                server.append(server_if)
                client.append(client_if)
        return server, client

    def branch(self, stmt: cst.If, item: Item):
        took = cst.parse_statement(f"{self.it}.append(True)\n")
        body, client_body = self.parts(item.body)
        other = stmt.orelse
        if isinstance(other, cst.If):
            inner_server, inner_client = self.branch(other, item.orelse[0])
            server_else, client_else = [inner_server], [inner_client]
        else:
            server_else, client_else = self.parts(item.orelse)
        server_else = [cst.parse_statement(f"{self.it}.append(False)\n"), *server_else]
        pass_ = cst.SimpleStatementLine([cst.Pass()])
        server_if = stmt.with_changes(
            body=stmt.body.with_changes(body=[took, *body]),
            orelse=cst.Else(body=cst.IndentedBlock(body=server_else)),
        )
        client_if = stmt.with_changes(
            test=cst.parse_expression(f"next({self.items})"),
            body=stmt.body.with_changes(body=client_body or [pass_]),
            orelse=cst.Else(body=cst.IndentedBlock(body=client_else)) if client_else else None,
            leading_lines=[],
        )
        return server_if, client_if

def _recording_jumps(stmt: cst.BaseStatement, it: str) -> cst.BaseStatement:
    """``stmt`` with `it.append(True)` before each `break`/`continue` of the loop around it
    (not those of loops or functions inside it); the nodes it does not change are kept (the
    session's rewrite finds its blocks by them)."""
    return transform(stmt, _RecordJumps(it))


class _RecordJumps(cst.CSTTransformer):
    def __init__(self, it: str) -> None:
        self.record = cst.parse_statement(f"{it}.append(True)\n")

    def on_visit(self, node: cst.CSTNode) -> bool:
        return type(node) not in (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)

    def leave_IndentedBlock(self, original, updated):
        if not any(is_jump(line) for line in updated.body):
            return updated
        body = []
        for line in updated.body:
            if is_jump(line):  # a line of its own before the jump's, the jump's comments above both
                body += [self.record.with_changes(leading_lines=line.leading_lines), line.with_changes(leading_lines=[])]
            else:
                body.append(line)
        return updated.with_changes(body=body)

    def leave_SimpleStatementSuite(self, original, updated):
        """`except Exception: continue`: the record before the jump, on its line."""
        if not any(type(small) in (cst.Break, cst.Continue) for small in updated.body):
            return updated
        body = []
        for small in updated.body:
            if type(small) in (cst.Break, cst.Continue):
                body.append(self.record.body[0])
            body.append(small)
        return updated.with_changes(body=body)

    def leave_SimpleStatementLine(self, original, updated):
        # (a jump alone on its line gets a line of its own before it: see leave_IndentedBlock)
        return updated if is_jump(updated) else self.leave_SimpleStatementSuite(original, updated)


def _tuple_code(names: list[str]) -> str:
    if not names:
        return ""
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _target_code(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names)


def _replayed_iter(expr: cst.BaseExpression, rows: str, facts: Facts) -> str:
    """The rows, behind the same progress bar as the original loop, if it had one."""
    bar = progress_call(expr, facts)
    if bar is None:
        return rows
    args = list(bar.args)
    first = next(i for i, a in enumerate(args) if a.keyword is None and not a.star)
    args[first] = args[first].with_changes(value=cst.Name(rows))
    return code_of(bar.with_changes(args=args))

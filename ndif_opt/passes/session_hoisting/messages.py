"""session-hoisting's words: its findings' messages, notes and refusals."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.effects import Problem
from ndif_opt.analysis.facts import Block, Facts, Remote, qualify
from ndif_opt.analysis.names import COMPREHENSIONS, all_params, collect, collect_all, target_names
from ndif_opt.analysis.opaque import (
    blocks_through_names,
    callback_loops,
    closure_loops,
    code_strings,
    mapped_remote_calls,
)
from ndif_opt.analysis.regions import client_objects_filled, intermediates, jumps_of_loop
from ndif_opt.analysis.retries import PortableRetry, retried_until_success, retry_guard
from ndif_opt.cost_model import RegionRequests
from ndif_opt.passes.base import Context
from ndif_opt.passes.session_hoisting.region import Region
from ndif_opt.passes.session_hoisting.split_items import Split
from ndif_opt.syntax.loops import map_as_comprehension
from ndif_opt.syntax.rewrite import code_of
from ndif_opt.syntax.walk import all_nodes, find_nodes
from ndif_opt.types import Status
from ndif_opt.wording import claim_text, counted_with_loops, symbols, tense


def drop_nested_repeats(findings: list, mark: int) -> None:
    """One finding per construct left as it is: a loop refused inside a loop (or run)
    refused for the same reason says nothing its enclosing finding does not — the
    reason that stops the outer one stops it too — so only the outermost stays."""
    refused = [f for f in findings[mark:] if f.status is Status.SKIPPED and f.reason]
    if len(refused) < 2:
        return
    nested: set[int] = set()
    for outer in refused:
        same = {id(f.node): f for f in refused if f is not outer and f.reason == outer.reason}
        if same:
            nested.update(id(same[id(n)]) for n in find_nodes(outer.node, lambda n: id(n) in same))
    findings[mark:] = [f for f in findings[mark:] if id(f) not in nested]


def name_the_unseen(facts: Facts, context: Context, helpers: dict, planned: list[Region]) -> None:
    """A finding for each construct whose requests no reading of the file can see
    (analysis/opaque.py): a loop calling a callback handed the model, or a closure a
    same-file factory made, nnsight code in a string, a block opened through a name; and
    for each `map(...)` of a function that sends requests (``helpers``), which the pass
    does not hoist (a comprehension it may) — unless a session of this run (``planned``)
    takes the statement it is in as a whole."""
    in_sessions = {id(stmt) for region in planned for stmt in region.statements}
    for stmt, call, helper_call in mapped_remote_calls(facts, helpers):
        if any(id(node) in in_sessions for node in (stmt, *facts.stmt(stmt).ancestors)):
            continue
        clause, _element = map_as_comprehension(call)
        name = code_of(helper_call.func)
        applier = code_of(call.func)
        context.skipped(
            call,
            f"this `{applier}(...)` calls `{name}`, which sends a remote request, once per element of "
            f"`{code_of(clause.iter)}`",
            f"not hoisted: ndif-opt bundles the requests of `for` loops and comprehensions, not of `{applier}`: "
            f"write it as a comprehension (`[... for ... in {code_of(clause.iter)}]`) or a `for` loop",
        )
    for found in callback_loops(facts):
        context.skipped(
            found.loop,
            f"this loop calls `{found.callback}`, a function `{found.function}` takes as a parameter, with the "
            "model: each call may send remote requests",
            f"not hoisted: which requests `{found.callback}` sends is decided by the caller of "
            f"`{found.function}` (a callback), so ndif-opt cannot count or bundle them; open one "
            "`model.session(remote=...)` around the loop yourself, or call a function of this file",
        )
    for found in closure_loops(facts):
        kind = 'loop' if isinstance(found.loop, (cst.For, cst.While)) else 'comprehension'
        if found.factory in ("", "functools.partial"):
            how = "another name of" if not found.factory else "a `functools.partial` of"
            given = " with the arguments the partial gives" if found.factory else ""
            context.skipped(
                found.loop,
                f"this {kind} calls `{found.name}`, {how} `{found.function}`, which opens a remote block: each "
                "call sends a remote request",
                f"not hoisted: ndif-opt bundles the calls of this file's functions made by their own names: call "
                f"`{found.function}(...)` in the {kind}{given}, or open one `model.session(remote=...)` around "
                "it yourself",
            )
            continue
        context.skipped(
            found.loop,
            f"this {kind} calls "
            f"`{found.name}`, the function `{found.factory}(...)` returns (a closure that opens "
            "a remote block): each call may send a remote request",
            f"not hoisted: `{found.name}` is made when the script runs, by `{found.factory}(...)`, so ndif-opt "
            "cannot bundle its requests (their remote flag and model are the closure's); open one "
            f"`model.session(remote=...)` around the loop yourself, or make the closure a function of this "
            "file that takes its flag as a parameter",
        )
    told = {id(finding.node) for finding in context.findings}  # (a closure a factory made, named above)
    for loop, name in _loops_calling_untied_functions(facts, helpers):
        if id(loop) in in_sessions or id(loop) in told:
            continue
        kind = "loop" if isinstance(loop, (cst.For, cst.While)) else "comprehension"
        context.skipped(
            loop,
            f"this {kind} calls `{name}`, a function of this file that opens a remote block: each call may send "
            "a remote request",
            f"not hoisted: `{name}` is defined in a loop or a branch, more than once, or under a name other code "
            "binds too, so ndif-opt cannot tie its calls to one `def`; define it once, in the body of a module "
            "or function",
        )
    for found in blocks_through_names(facts):
        context.skipped(
            found.stmt,
            f"`with {found.name}:` opens `{first_line(found.call)}` through the name `{found.name}`: "
            "the requests it sends are not counted, bundled or checked",
            "not optimized: ndif-opt reads the nnsight blocks written in a `with` statement; write "
            f"`with {first_line(found.call)}:` there (an `if` around two `with` statements keeps a choice)",
        )
    for stmt, line in code_strings(facts):
        context.skipped(
            stmt,
            f"nnsight code written as a string (`{line}`): the requests it sends are not in this file's code",
            "not optimized: ndif-opt reads the code, not the code it writes; a session it could count and "
            "bundle must be written as code",
        )


def _loops_calling_untied_functions(facts: Facts, helpers: dict) -> list[tuple[cst.CSTNode, str]]:
    """The outermost loops and comprehensions that call, by name, a function of the file that
    opens a remote block but is no helper (``helpers``): one its name cannot be tied to."""
    classes = find_nodes(facts.module, lambda n: type(n) is cst.ClassDef)
    methods = {id(stmt) for cls in classes for stmt in cls.body.body}
    sending = {stmt.name.value for stmt in find_nodes(facts.module, lambda n: type(n) is cst.FunctionDef)
               if id(stmt) not in methods  # (a method is called through its object)
               and any(b.stmt.function is stmt and b.remote.state is not Remote.NO for b in facts.blocks)}
    untied = sending - set(helpers)
    if not untied:
        return []
    found: list[tuple[cst.CSTNode, str]] = []
    # (a loop in a session already runs its calls in it)
    taken = {id(n) for b in facts.blocks if b.method == "session" for n in all_nodes(b.node)}
    for loop in find_nodes(facts.module, lambda n: type(n) in (cst.For, cst.While, *COMPREHENSIONS)):
        if id(loop) in taken:
            continue
        called = [c.func.value for c in find_nodes(loop, lambda n: type(n) is cst.Call and type(n.func) is cst.Name
                                                   and n.func.value in untied)]
        if called:
            found.append((loop, called[0]))
            taken |= {id(n) for n in find_nodes(loop, lambda n: type(n) in (cst.For, cst.While, *COMPREHENSIONS))}
    return found


def stopped_by_mixing(sends: list[tuple[str, str, str]]) -> tuple[str, str]:
    """Why a loop whose traces (or calls of functions that trace) are of two models, or
    take two remote flags, is not one session: (what it sends to, the reason); ``sends``
    holds each one's (model, remote flag, code)."""
    models = list(dict.fromkeys(model for model, _flag, _code in sends))
    if len(models) > 1:
        named = ", ".join(f"`{m}`" for m in models)
        first = [next(code for model, _flag, code in sends if model == m) for m in models]
        each = " and ".join(f"`{m}` (`{code}`)" for m, code in zip(models, first))
        why = (f"not hoisted: a session runs one model, and this loop sends requests to {each}; where one "
               "model's part does not need the other's results, give each model a loop of its own: each "
               "loop then becomes one session")
        return f" to {len(models)} models ({named})", why
    flags = list(dict.fromkeys(flag for _model, flag, _code in sends))
    first = [next(code for _model, flag, code in sends if flag == f) for f in flags]
    each = " and ".join(f"`remote={f}` (`{code}`)" for f, code in zip(flags, first))
    why = f"not hoisted: a session takes one remote flag, and this loop's requests take {each}; pass the same " \
        "flag to each"
    return f" to `{models[0]}` with {len(flags)} remote flags", why


def stopped_by_a_session(block: Block) -> tuple[str, str]:
    why = f"not hoisted: NDIF refuses a remote session opened inside a running one, and ndif-opt leaves " \
        f"`{first_line(block.node)}`, a session you wrote, as it is: open one session around the loop instead " \
        "(what must run on your machine, such as prints and files, after it) to send one request"
    return f" to `{block.model}`, opening a session in each iteration", why


def stopped_by_a_local_trace(block: Block, blocks: list[Block]) -> tuple[str, str]:
    remote = next((b for b in blocks if b.remote.state is not Remote.NO), block)
    why = f"not hoisted: `{first_line(block.node)}` runs on your machine (it has no `remote=`), and in a " \
        "session it would run on NDIF"
    return f" to `{remote.model}`", why


def stopped_by_kwargs(block: Block) -> tuple[str, str]:
    why = f"not hoisted: `{first_line(block.node)}` passes `remote=` inside `**kwargs`, which a session " \
        "cannot take from it; write `remote=...` as a keyword argument"
    return f" to `{block.model}`", why


def first_line(stmt: cst.BaseStatement) -> str:
    """The statement's first line of code (not a comment above it), without its colon."""
    lines = [line.strip() for line in code_of(stmt).strip().splitlines()]
    return next((line for line in lines if line and not line.startswith("#")), lines[0] if lines else "").rstrip(":")


def kind_label(region: Region) -> str:
    first = region.statements[0]
    if len(region.statements) == 1 and isinstance(first, cst.For):
        return "this loop"
    if len(region.statements) == 1 and isinstance(first, cst.While):
        return "this while loop"
    if len(region.statements) == 1 and isinstance(first, cst.SimpleStatementLine):
        return "this statement"  # (`a, b = f(x), f(y)`: a line that sends several requests)
    return "this run of remote work"


def header_rebound(region: Region) -> str:
    """Why one session opened before the region cannot stand for its traces: a name its
    `model.session(remote=flag)` reads is assigned inside the region, so the traces may
    run on another model, or with another flag, than the one the session was opened with."""
    bound = set(collect_all(region.statements).binds)
    stores = {code_of(t.target) for stmt in region.statements
              for t in find_nodes(stmt, lambda n: isinstance(n, cst.AssignTarget))
              if isinstance(t.target, cst.Attribute)}
    inner = _bound_in_inner_scopes(region.statements)
    if region.model in stores or region.model.split(".")[0] in bound | inner:
        how = "a variable of code inside it" if region.model.split(".")[0] in inner else "assigned inside it"
        return (f"`{region.model}` is {how}, so its requests may go to different models, "
                "and a session runs one model that must exist before it opens")
    flag_reads = set(collect(region.flag).reads) if region.flag is not None else set()
    rebound = sorted(flag_reads & (bound | inner))
    if rebound:
        how = "a variable of code inside it" if rebound[0] in inner else "assigned inside it"
        return (f"`{rebound[0]}` is {how} and decides `remote=`, so its requests may not all "
                "run remotely; one session takes one flag, read before it opens")
    return ""


def _bound_in_inner_scopes(statements) -> set[str]:
    """Names the comprehensions and lambdas of ``statements`` bind for themselves: where the
    session opens, before them, such a name is not theirs (it is unbound, or another value)."""
    found: set[str] = set()
    for stmt in statements:
        for node in find_nodes(stmt, lambda n: type(n) in (cst.CompFor, cst.Lambda)):
            if type(node) is cst.CompFor:
                found |= set(target_names(node.target))
            else:
                found |= {param.name.value for param in all_params(node.params)}
    return found


def leaves_early(region: Region, facts: Facts) -> bool:
    """Does a loop of the region hold a `break` of its own or a `return`: it may end before
    its last iteration, and send fewer requests than it has iterations? (Not a retry's: the
    table counts the one attempt that succeeds.)"""
    for stmt in region.statements:
        for loop in find_nodes(stmt, lambda n: type(n) in (cst.For, cst.While)):
            if retry_guard(loop, facts) is not None or retried_until_success(loop):
                continue
            if "break" in jumps_of_loop(loop.body) or find_nodes(loop.body, lambda n: type(n) is cst.Return):
                return True
    return False


def not_hoisted(region: Region, facts: Facts, requests: RegionRequests) -> str:
    names, meaning = symbols(requests.sent, requests.runs)
    sent = counted_with_loops(requests.sent, "separate remote request", names)[0]
    if any(block.remote.state is Remote.MAYBE for block in region.blocks) or leaves_early(region, facts):
        # (a flag decided as the code runs: the table counts them remote; a loop that may
        # end early: the table counts every iteration)
        sent = f"up to {sent}"
    # (a region that runs more than once would send a session each time: the count is all of them)
    sessions = "one" if requests.runs == 1 else \
        f"one each time it runs ({counted_with_loops(requests.runs, 'session', names)[0]} in all)"
    if not region.model:  # (its requests go to no one model the code names)
        return (f"{kind_label(region)} sends {sent}{per_call(requests)}, not all to one model the code names"
                + (f" ({meaning})" if meaning else ""))
    return (
        f"{kind_label(region)} sends {sent} to `{region.model}`{per_call(requests)}; "
        f"one `{region.model}.session(remote=...)` around it would send {sessions}"
        + (f" ({meaning})" if meaning else "")
    )


def request_claim(requests: RegionRequests) -> tuple | None:
    """(before, after) of a region made one session per run, for its finding: a claim on
    the cost table, unless the table leaves the region out (no code calls it)."""
    return None if requests.uncalled is not None else (requests.sent, requests.runs)


def per_call(requests: RegionRequests) -> str:
    if requests.uncalled:
        return f" each time `{requests.uncalled}` runs (no code here calls it: not in the cost table)"
    if requests.uncalled == "":
        return " each time it runs"
    return ""


def hoisted_message(region: Region, facts: Facts, accumulators, requests: RegionRequests, caller: str = "") -> str:
    if caller:  # its calls run in a session already: that session's finding counts them
        text = (f"{tense('wrapped', 'would wrap')} {kind_label(region)} in one session, for a call of `{caller}` "
                f"outside a session (the session that {tense('now calls', 'would call')} `{caller}` counts its "
                "requests)")
    else:
        change, meaning = claim_text(requests.sent, requests.runs, "request")
        change = f"up to {change}" if leaves_early(region, facts) else change  # (the table counts every iteration)
        text = f"{tense('wrapped', 'would wrap')} {kind_label(region)} in one session: {change}{per_call(requests)}"
        if meaning:
            text += f" ({meaning})"
    if region.helper_calls:
        names = sorted({h.spelled(c) for c, h in region.helper_calls})
        text += "; " + ", ".join(f"`{n}`" for n in names) + f" {tense('now called', 'would be called')} with " \
            "remote=False inside it" + _correctness_note(sorted(_filled_remotely(region, facts)))
        return text + _passed_note(region) + _left_note(region) + _split_note(region.split, region.handled_by) \
            + _retry_note(region.retry)
    flag = region.blocks[0].remote
    if caller:
        pass  # (the flag is the calling session's business)
    elif flag.state is Remote.MAYBE:
        text += f" (remote-ness unknown: {flag.reason}; the session takes the same flag, so this holds either way)"
    elif flag.expr is not None and not (isinstance(flag.expr, cst.Name) and flag.expr.value == "True"):
        text += f" ({flag.reason})"
    saved = [a.name for a in accumulators if a.name not in region.left_on_server and a.kind != "carried"]
    if saved:
        text += "; " + ", ".join(f"`{n}`" for n in saved) + f" {tense('now created', 'would be created')} in " \
            "the session and saved"
    carried = [a.name for a in accumulators if a.name not in region.left_on_server and a.kind == "carried"]
    if carried:  # (made by your code before the session, as written: `nnsight.save(name)` takes it along)
        text += "; " + ", ".join(f"`{n}`" for n in carried) + f" {tense('now taken', 'would be taken')} into " \
            "the session, filled there and saved"
    kept = [a.name for a in accumulators if a.name in region.left_on_server]
    if kept:
        text += "; " + ", ".join(f"`{n}`" for n in kept) + f" {tense('now created', 'would be created')} in " \
            "the session and left there (nothing after it reads it: not downloaded)"
    text += _correctness_note(sorted(_filled_remotely(region, facts)))
    return text + _passed_note(region) + _split_note(region.split, region.handled_by) + _retry_note(region.retry)


def _filled_remotely(region: Region, facts: Facts) -> set[str]:
    """The client objects the region's blocks (and those of the functions it calls) that may
    run remotely fill in place: as the script was, they stay as they were on the client."""
    blocks = [*region.blocks, *(b for _, helper in region.helper_calls for b in helper.blocks if b.parent is None)]
    return {name for block in blocks if block.effective_remote is not Remote.NO
            for name in client_objects_filled(block, facts)}


def _correctness_note(names: list[str]) -> str:
    if not names:
        return ""
    return (" (a correctness fix: " + ", ".join(f"`{n}`" for n in names) + " stayed empty on your machine when run "
            "on NDIF, where the remote blocks filled the server's copy)")


def let_go_note(region: Region, facts: Facts, let_go: set[str]) -> str:
    """`; not brought back: `prompt`, `logits` (...)`: the script's intermediates the
    session keeps (a function's locals go without a word, as they always do)."""
    if facts.stmt(region.statements[0]).function is not None:
        return ""
    names = sorted(let_go & intermediates(facts))
    if not names:
        return ""
    return (f"; {tense('not brought back', 'would not be brought back')}: " + ", ".join(f"`{n}`" for n in names)
            + " (loop temporaries and saved values that only the session reads; nothing after it reads them)")


def _left_note(region: Region) -> str:
    """`; `self.cache` stays in the session (...)`."""
    if not region.left_attributes:
        return ""
    names = ", ".join(f"`{n}`" for n in region.left_attributes)
    return (f"; {names}, which the methods set, {tense('stays', 'would stay')} on the server: no code can read "
            "it after the session (not downloaded)")


def _passed_note(region: Region) -> str:
    """`; `steered` now takes `vec` as an argument (...)`."""
    notes = [
        f"`{name}` {tense('now takes', 'would take')} " + ", ".join(f"`{n}`" for n in names)
        for name, names in sorted(region.passed_functions.items())
    ]
    if not notes:
        return ""
    return "; " + ", ".join(notes) + (
        " as an argument (the session computes it, and the copy of a function a session carries cannot see "
        "the session's names)"
    )


def _retry_note(retry: PortableRetry | None) -> str:
    if retry is None:
        return ""
    return (
        f"; the retry (`{retry.guard.header}`) {tense('now wraps', 'would wrap')} the whole session: a failed "
        f"attempt {tense('runs', 'would run')} the session again from the start (a run without failures "
        f"{tense('is', 'would be')} unchanged)"
    )


def _split_note(split: Split | None, handled_by: str = "") -> str:
    handled = (f"; {handled_by} handles a failure of its code: should the session fail, the code "
               f"{tense('runs', 'would run')} as written, and a failure is handled there as before (a run "
               f"without failures {tense('is', 'would be')} unchanged)") if handled_by else ""
    if split is None:
        return handled
    text = ""
    if split.deferred:
        what = "(prints, files, progress bars, objects other code holds)"
        lines = f"statement that must run on your machine {what} {tense('now runs', 'would run')}"
        if split.deferred != 1:
            lines = f"statements that must run on your machine {what} {tense('now run', 'would run')}"
        text += f"; {split.deferred} {lines} after it, in the same order, over values the session " \
            f"{tense('records', 'would record')}"
        if not split.fallback and not handled_by:  # (a fallback runs them as written: see below)
            text += f" ({'it runs' if split.deferred == 1 else 'they run'} only when the whole session succeeds: " \
                "a failure in an iteration loses the output of the iterations before it too)"
    if split.prepared:
        lines = f"statement that computes on your machine what the remote part reads {tense('now runs', 'would run')}"
        if split.prepared != 1:
            lines = f"statements that compute on your machine what the remote part reads " \
                f"{tense('now run', 'would run')}"
        text += f"; {split.prepared} {lines} before it, in the same order, and the session " \
            f"{tense('takes', 'would take')} the values in turn"
    if split.carried:
        names = ", ".join(f"`{n}`" for n in split.carried)
        text += f"; {names} {tense('brought', 'would be brought')} back from the session for the code after it"
    if split.fallback:
        text += (
            f"; its `try` {tense('now also guards', 'would also guard')} the session: should the session fail, "
            f"the code {tense('runs', 'would run')} as written, each failure handled on its own (a run without "
            f"failures {tense('is', 'would be')} unchanged)"
        )
    return text + handled


def problem_words(problem: Problem) -> str:
    if problem.kind in ("control", "request") or _says_where_it_runs(problem.message):  # it says why already
        return f"not hoisted: the code {problem.message}"
    return f"not hoisted: the code {problem.message}, which must run on your machine"


def _says_where_it_runs(message: str) -> bool:
    """Does a problem's message say already that the code belongs to your machine (`uses
    `log`, which exists only on your machine`)? Then it is not said twice."""
    return "your machine" in message or "not on the server" in message


def unsafe_reason(problem: Problem, not_replayed: str = "") -> str:
    """Why a loop needs --unsafe-fixes; ``not_replayed``: why its prints could not be replayed
    after the session, as they usually are (a progress bar never is)."""
    if problem.kind != "print":
        why = "the loop shows a progress bar, which a session would drop"
        if not_replayed:
            why += f"; it cannot be replayed after the session: {not_replayed}"
        return why + " (use --unsafe-fixes to accept)"
    why = "the loop prints: inside a session `print` becomes a server log line"
    if not_replayed:
        why += f", and it cannot be replayed after the session: {not_replayed}"
    return why + " (use --unsafe-fixes to accept)"


def clock_note(region: Region, facts: Facts) -> str:
    """What the region's reads of your machine's clock time once it is a session: they stay
    on your machine, replayed after the session, so they no longer time each request."""
    clocks = sorted({qualify(p.node.func, facts.imports) for p in region.unsafe if p.kind == "clock"})
    if not clocks:
        return ""
    return (f"; its clock reads (`{clocks[0]}()`) {tense('now run', 'would run')} on your machine after the "
            "session, so they time that replay, not each request")


def unsafe_note(unsafe: list[Problem]) -> str:
    """What an applied unsafe fix gives up, said where it is applied (`--unsafe-fixes`)."""
    kinds = {p.kind for p in unsafe}
    notes = []
    if "print" in kinds:
        notes.append(f"its `print` output {tense('now goes', 'would go')} to the server's log, not your screen")
    if "progress" in kinds:
        notes.append(f"its progress bar {tense('is', 'would be')} dropped")
    return "".join(f"; {note}" for note in notes)

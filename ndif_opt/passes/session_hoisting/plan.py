"""session-hoisting's plan of a region: what the session takes over, brings back, lets go and
hands to the functions it calls."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts, opens_invoke
from ndif_opt.analysis.names import (
    NameUse, all_params, collect, collect_all, definite_binds, exposed_reads, free_reads, function_locals,
    returned_names, target_names,
)
from ndif_opt.analysis.regions import (
    Accumulator,
    carried_container,
    client_objects_filled,
    empty_container_binding,
    find_accumulator,
    holds_immutable,
    reads_after,
    shared_elsewhere,
)
from ndif_opt.analysis.remote_functions import RemoteHelper, nested_functions
from ndif_opt.analysis.wire import bound_value_problem, stored_problem, wire_problem
from ndif_opt.passes.session_hoisting.region import Region
from ndif_opt.passes.session_hoisting.split_items import Split
from ndif_opt.syntax.expressions import is_save_call
from ndif_opt.syntax.rewrite import code_of
from ndif_opt.syntax.walk import all_nodes, find_nodes


def liveness(region: Region, facts: Facts) -> tuple[str, list[Accumulator], list[str]]:
    """Why the rest of the script would miss something, or "" and the accumulators
    the session must take over; and the names read afterwards that would stay on the
    server (the reason is about the first of them)."""
    stmts = region.moved
    everything = collect_all(stmts)
    changing = _changed_in_place_on_entry(stmts, everything)
    changing_nodes = {id(node) for nodes in changing.values() for node in nodes}
    for name, (node, *_) in changing.items():
        if holds_immutable(facts, name, region.suite, changing_nodes):
            continue  # `text += piece` on a string: a new object, none changed in place
        why = shared_elsewhere(facts, name, region.suite, region.end)
        if why:
            operator = code_of(node.operator).strip()
            return f"`{name} {operator} ...` may change in place the object `{name}` holds: {why}", [], []
    later = reads_after(facts, region.suite, region.end)
    saved = saved_in_region(region) - rebound_after_save(region)
    lost: list[str] = []
    # the names bound outside the blocks are among those bound anywhere: the walk that
    # leaves the blocks out is needed only when one of those is read later
    if any(n in later and n not in saved for n in everything.binds):
        outside_blocks = collect_all(stmts, skip=tuple(b.node.body for b in region.blocks))
        lost = [n for n in outside_blocks.binds if n in later and n not in saved]
    for name in lost:  # what comes back must be able to: data, not a module or a file
        problem = wire_problem(name, stmts, facts)
        if problem:
            return f"{problem}, and the code after it needs it", [], []
    accumulators: list[Accumulator] = []
    for name in _client_mutations(region, facts, everything):
        acc, why = _container_for(region, facts, name)
        if acc is None:
            return f"it changes `{name}`, which lives on your machine: {why}", [], []
        accumulators.append(acc)
    in_place = []
    for name in list(lost):
        acc = _accumulator_inside(region, name)
        if acc is not None:
            in_place.append(acc)
            lost.remove(name)
    region.saved_here = _results_to_save(region, facts, set(lost), {a.name for a in in_place})
    carried = region.split.carried if region.split is not None else []
    lost = [n for n in lost if n not in region.saved_here.values() and n not in carried]
    if lost:
        return "", [], lost
    return "", accumulators + in_place, []


def _changed_in_place_on_entry(stmts: list[cst.BaseStatement], use: NameUse) -> dict[str, list[cst.AugAssign]]:
    """Names an augmented assignment of the statements (`acc += [x]`) binds while they may
    still hold the object they held before the statements ran: for a list, a tensor, a
    dict or a set, `+=` and its kin change that object in place, where another holder of
    it sees the change. Each with its augmented assignments, in the order of the code.
    ``use``: the statements' names (an augmented assignment binds and changes its name)."""
    candidates = use.binds.keys() & use.mutates.keys()
    if candidates:
        candidates &= exposed_reads(stmts).keys()
    found: dict[str, list[cst.AugAssign]] = {}
    for stmt in stmts if candidates else ():
        for node in find_nodes(stmt, lambda n: type(n) is cst.AugAssign and type(n.target) is cst.Name):
            if node.target.value in candidates:
                found.setdefault(node.target.value, []).append(node)
    return found


def unmovable(region: Region, facts: Facts) -> list[str]:
    """The names the region changes in place that no container of the session can stand
    for (an object of `self`, a parameter): they must stay on your machine."""
    names = _client_mutations(region, facts, collect_all(region.moved))
    return [name for name in names if _container_for(region, facts, name)[0] is None]


def _container_for(region: Region, facts: Facts, name: str) -> tuple[Accumulator | None, str]:
    """The container the session takes over for ``name``, which the region fills: one
    created above it, or any new container, which can travel to the session and back;
    else None and why not."""
    acc, why = find_accumulator(facts, name, region.suite, region.start)
    if acc is None:
        acc, why = carried_container(facts, name, region.suite, region.end)
        # a container taken along is sent with what it holds, and comes back with it
        problem = bound_value_problem(name, facts) if acc is not None else ""
        if problem:
            return None, problem
    if acc is not None:  # what comes back must be data
        problem = stored_problem(name, region.moved, facts)
        if problem:
            return None, problem
    return acc, why


def lost_reason(name: str) -> str:
    return (
        f"`{name}` is computed inside the loop and read afterwards, and cannot be brought back "
        "from the session"
    )


def _client_mutations(region: Region, facts: Facts, everything: NameUse) -> list[str]:
    """Names the region changes in place (in helper calls too) without binding them, and
    that are not models, in the order the code first changes them: that order picks the
    refusal given and the order of the containers created. ``everything``: the names of
    the region's statements."""
    mutated = dict.fromkeys(everything.mutates)
    for call, helper in region.helper_calls:
        for param in helper.mutated_params:
            value = helper.argument(call, param)
            if isinstance(value, cst.Name):
                mutated.setdefault(value.value)
    return [name for name in mutated if name not in everything.binds and not facts.is_model_like(name)
            and facts.changes_a_module(name, everything.mutates.get(name))]


def saved_in_region(region: Region) -> set[str]:
    """Names the region's blocks bind to saved values."""
    return set().union(*(b.saved_names for b in region.blocks)) if region.blocks else set()


def rebound_after_save(region: Region) -> set[str]:
    """Names a block saves that code outside the blocks binds again after it, in the
    order of the code (`probs = probs.softmax(-1)` after the trace saved `probs`): at the
    session's end the name may hold that value, which is not saved, so it does not come
    back — nnsight sends back saved objects, not names."""
    saved = saved_in_region(region)
    if not saved:
        return set()
    inside = {id(node) for b in region.blocks for node in all_nodes(b.node.body)}
    last: dict[str, bool] = {}  # name -> whether its last binding in the code is in a block
    for stmt in region.moved:
        for node in find_nodes(stmt, lambda n: type(n) in _BINDERS):
            for name in _bound_by(node):
                if name in saved:
                    last[name] = id(node) in inside
    return {name for name, in_block in last.items() if not in_block}


_BINDERS = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.WithItem, cst.NamedExpr)


def _bound_by(node: cst.CSTNode) -> list[str]:
    kind = type(node)
    if kind is cst.Assign:
        return [name for target in node.targets for name in target_names(target.target)]
    if kind in (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr):
        return target_names(node.target)
    return target_names(node.asname.name) if node.asname is not None else []


def _results_to_save(
    region: Region, facts: Facts, lost: set[str], relocated: set[str]
) -> dict[int, str]:
    """Top-level `name = value` statements of the region whose value must come back:
    read later, or, in a notebook, a module-level result the kernel keeps for cells to
    come. They get `.save()`."""
    module_level = region.kernel_keeps_names
    found: dict[int, str] = {}
    for stmt in region.moved:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        target = small.targets[0].target
        if not isinstance(target, cst.Name) or is_save_call(small.value):
            continue
        name = target.value
        if name in relocated or not (name in lost or module_level):
            continue
        if region.split is not None and name in region.split.record_names and name not in lost:
            continue  # the split's own bookkeeping (a feed of the prelude's values), not a result
        if sum(1 for other in region.moved if name in collect(other).binds) != 1:
            continue  # bound again elsewhere in the region: which value comes back is unclear
        found[id(stmt)] = name
    return found


def globals_the_session_would_hide(region: Region, facts: Facts) -> str:
    """A same-file function called in the session reads the module's names: one the
    moved code binds is a name of the session's own scope there, which the function's
    copy on NDIF cannot see (NameError, or an old value). A function the session calls
    itself gets such names as arguments (`def f(x, *, vec)`, `f(x, vec=vec)`) when
    every call of it is one the session makes after binding them (see
    :func:`_passable`); otherwise the session would hide them, and the region stays."""
    moved = region.moved
    bound = set(collect_all(moved).binds)
    region.passed_calls, region.passed_functions = {}, {}
    if not bound:
        return ""
    direct = _calls_by_function(moved, facts)
    callers = {name: "" for name in direct}  # function -> the function of the session that calls it
    queue = list(direct)
    while queue:  # what the functions the session calls call in turn run there too
        name = queue.pop()
        for read in collect(_functions_by_name(facts)[name].body).reads:
            if read in _functions_by_name(facts) and read not in callers:
                callers[read] = callers[name] or name
                queue.append(read)
    for name, via in callers.items():
        hidden = _module_names_read(_functions_by_name(facts)[name], bound)
        if not hidden:
            continue
        why = _passable(name, hidden, region, direct.get(name, []), facts) if not via else (
            f"it is called by `{via}`, not by the session itself")
        if why:
            read = hidden[0]
            return (
                f"`{name}` reads `{read}`, which the session would compute: inside the session the "
                f"function's copy cannot see it, and it cannot be handed over as an argument ({why}); "
                f"compute `{read}` before the loop, or pass it as an argument"
            )
        region.passed_functions[name] = hidden
        for call in direct[name]:
            region.passed_calls[id(call)] = hidden
    return ""


def _calls_by_function(stmts: list[cst.BaseStatement], facts: Facts) -> dict[str, list[cst.Call]]:
    """The calls of same-file functions by plain name in ``stmts``, by function."""
    found: dict[str, list[cst.Call]] = {}
    for stmt in stmts:
        for call in find_nodes(stmt, lambda n: type(n) is cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value in _functions_by_name(facts):
                found.setdefault(call.func.value, []).append(call)
    return found


def _functions_by_name(facts: Facts) -> dict[str, cst.FunctionDef]:
    """The file's functions a call by plain name runs: the module's, and those defined in a
    function's body that their name can only mean (a closure reads its function's names as
    a module function reads the module's)."""
    return facts.once(_module_and_nested_functions)


def _module_and_nested_functions(facts: Facts) -> dict[str, cst.FunctionDef]:
    return {**nested_functions(facts), **facts.functions}


def _module_names_read(func: cst.FunctionDef, names: set[str]) -> tuple[str, ...]:
    """Which of ``names`` the function reads as module names (not its own)."""
    return tuple(sorted(free_reads(func) & names))


def _passable(name: str, hidden: tuple[str, ...], region: Region, calls: list[cst.Call], facts: Facts) -> str:
    """Why the session cannot hand ``hidden`` to function ``name`` as arguments ("" if
    it can). It can when the region is module code (its names are the module's, which
    the function reads), the function is a plain one no decorator wraps, nothing declares
    the names `global` (the function reads each when it runs: an argument read at the
    call must be the same value), every use of the function in the file is a direct call
    the session makes, and each such call comes after the session has bound the names
    (the argument is read where the function might never have read it)."""
    func = _functions_by_name(facts)[name]
    where = facts.stmt(region.statements[0])
    if where.function is not None or any(isinstance(node, cst.ClassDef) for node in where.ancestors):
        return "the session would run inside a function or class, whose names the function does not read"
    helper = next((h for _, h in region.helper_calls if h.name == name), None)
    if func.decorators and (helper is None or len(helper.context_decorators) != len(func.decorators)):
        return f"`{name}` is decorated"
    if any(n.value in hidden for g in find_nodes(facts.module, lambda n: type(n) is cst.Global) for n in (x.name for x in g.names)):
        return "it is declared `global` somewhere, so it may change while the function runs"
    split = region.split
    if (split is not None and split.fallback) or region.handled_by:
        return "the code as written runs again should the session fail"
    elsewhere = [*split.replay, *split.prelude] if split is not None else []
    if _calls_by_function(elsewhere, facts).get(name):
        return f"`{name}` is also called on your machine"
    made = {id(c.func) for c in calls}
    uses = find_nodes(facts.module, lambda n: type(n) is cst.Name and n.value == name and n is not func.name)
    if len(uses) != len(made) or any(id(n) not in made for n in uses):
        return f"`{name}` is used elsewhere in the file, where it would miss the argument"
    if any(_nested_call(stmt, made) for stmt in region.moved):
        return f"`{name}` is called inside a nested function"
    earlier: set[str] = set()
    first = {id(c) for c in calls}
    for stmt in region.moved:
        if any(id(c) in first for c in find_nodes(stmt, lambda n: type(n) is cst.Call)) and not set(hidden) <= earlier:
            missing = next(n for n in hidden if n not in earlier)
            return f"it is called before the session has surely bound `{missing}`"
        earlier |= definite_binds(stmt)
    return ""


def _nested_call(stmt: cst.CSTNode, funcs: set[int]) -> bool:
    """Is one of the calls (by the id of their `func`) inside a `def`, `lambda` or class
    within ``stmt``?"""
    for scope in find_nodes(stmt, lambda n: isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef))):
        if find_nodes(scope, lambda n: id(n) in funcs):
            return True
    return False


def names_passed_between_invokes(region: Region, facts: Facts) -> str:
    """Why a trace of the region may not run in a session: one of its invokes reads a name
    a sibling invoke binds ("" when none does). nnsight runs the invokes of a trace together;
    in a session the later invoke may find the value an earlier trace left under that name
    (the previous iteration's), not its sibling's: measured, a patching loop's second
    iteration read the first one's clean activation."""
    functions = [helper.func for _, helper in region.helper_calls]
    for block in facts.blocks:
        if block.method == "session" or block.tracer_name is None or not _in(block, region, functions):
            continue
        invokes = [stmt for stmt in block.node.body.body if opens_invoke(stmt, block.tracer_name)]
        bound: set[str] = set()
        for invoke in invokes:
            shared = sorted(bound & set(exposed_reads(invoke.body.body)))
            if shared:
                return (f"an invoke of `{code_of(block.call.func)}(...)` reads `{shared[0]}`, which another invoke "
                        "of it binds: in a session it may read the value an earlier trace left under that name; "
                        "keep these traces apart, or compute it in the invoke that reads it")
            bound |= set(collect(invoke.body).binds)
    return ""


def _in(block: Block, region: Region, functions: list[cst.FunctionDef]) -> bool:
    """Is the block in the region's statements, or in a function the region calls?"""
    ancestors = block.stmt.ancestors
    return any(node in ancestors or node is block.node for node in (*region.statements, *functions))


def helper_argument_problem(region: Region, facts: Facts) -> str:
    """A helper that fills a parameter must be handed a container the session owns."""
    for call, helper in region.helper_calls:
        receiver = helper.receiver(call)
        if receiver is not None and helper.self_stores:
            return (f"`{helper.spelled(call)}` stores `self.{helper.self_stores[0]}` on `{receiver}`: in a session "
                    f"the store would change the server's copy of `{receiver}`, and yours would keep its old value")
        for param in helper.mutated_params:
            value = helper.argument(call, param)
            if value is not None and not isinstance(value, cst.Name):
                return f"`{helper.name}` changes its argument `{param}`, which is not a plain name here"
    return ""


def objects_helpers_fill(region: Region, facts: Facts) -> str:
    """A helper whose nnsight block fills an object that outlives its call (a module's
    `_CACHE[prompt] = ...save()`): in the session the block runs on the server and fills
    the server's copy, so yours would stay as it was, where the script run on your machine
    fills it. (A container of the helper's own is made and filled on the server within one
    call: what the helper returns of it comes back.)"""
    for call, helper in region.helper_calls:
        own = function_locals(helper.func) | {p.name.value for p in all_params(helper.func.params)}
        for block in helper.blocks:
            if block.parent is not None:
                continue
            filled = next((name for name in client_objects_filled(block, facts) if name not in own), None)
            if filled is not None:
                return (f"`{helper.spelled(call)}` fills `{filled}` inside its nnsight block, an object that "
                        f"outlives the call: in a session that block would fill the server's copy, and your "
                        f"`{filled}` would stay as it was; return the value from `{helper.name}` and store it "
                        "where it is called")
    return ""


def needed_after(region: Region, facts: Facts) -> frozenset[str]:
    """The names the code after the session may read: the script's reads after the
    region, and what the replay reads and brings back."""
    needed = set(reads_after(facts, region.suite, region.end))
    if region.split is not None:
        needed |= set(region.split.carried) | set(collect_all(region.split.replay).reads)
    return frozenset(needed)


def names_released(region: Region, accumulators, needed: Callable[[], frozenset[str]]) -> list[str]:
    """Names the session binds to what a same-file function returns of what its trace
    saved — a value the session would download with the names it ends with — and that
    nothing after the session reads. They are bound to
    None at the session's end. Not in a notebook's module code: the kernel keeps names
    for cells to come."""
    if region.kernel_keeps_names:
        return []
    # the calls of functions that return what their trace saved
    calls = {id(call) for call, helper in region.helper_calls if _returns_a_save(helper)}
    if not calls:
        return []
    kept = needed() | set(region.saved_here.values()) | {a.name for a in accumulators}
    if region.split is not None:
        kept |= region.split.record_names
    found: list[str] = []
    for stmt in region.moved:
        for assign in find_nodes(stmt, lambda n: type(n) is cst.Assign and id(n.value) in calls):
            if len(assign.targets) != 1 or type(assign.targets[0].target) not in (cst.Name, cst.Tuple, cst.List):
                continue
            for name in target_names(assign.targets[0].target):  # (`resid, logits = probe(p)` too)
                if name not in kept and name not in found:
                    found.append(name)
    return found


def names_unbound(region: Region, accumulators, needed: Callable[[], frozenset[str]]) -> list[str]:
    """Names the code after the session reads that only the session's traces bind (`=`),
    none of them to a saved object: your machine keeps its own value (a trace sends back only what
    it saved). A session may send one back all the same: at its end nnsight returns each
    name whose value's id is in its saved set, and a value saved earlier in the session
    and freed since (a list of saved values bound anew each iteration) leaves its id free
    for the name's value. They are unbound at the session's end."""
    in_traces: set[str] = set()
    saved: set[str] = set()
    for block in region.blocks:
        # (bound anew by `=`: `xs += [...]` changes the client's list, which its own rules handle)
        in_traces |= {name for assign in find_nodes(block.node.body, lambda n: type(n) is cst.Assign)
                      for target in assign.targets for name in target_names(target.target)}
        saved |= _names_of_saved_objects(block)
    kept = saved | set(region.saved_here.values()) | {a.name for a in accumulators}
    if region.split is not None:
        kept |= region.split.record_names | set(region.split.carried)
    candidates = (in_traces - kept) & needed()
    if not candidates:
        return []
    # (a name the session's own frame binds too comes back, or not, as the pass decided)
    cut = _WithoutBodies({id(block.node) for block in region.blocks})
    outside = set(collect_all([stmt.visit(cut) for stmt in region.moved]).binds)
    return sorted(candidates - outside)


def _names_of_saved_objects(block: Block) -> set[str]:
    """The names the block binds to an object a save marks: `act = h.save()` marks the
    object `h` and `act` name, and `g = act` names it too. nnsight sends back every name
    bound to a saved object."""
    names = set(block.saved_names)
    for call in find_nodes(block.node.body, is_save_call):
        func = call.func
        marked = func.value if type(func) is cst.Attribute and func.attr.value == "save" else call.args[0].value
        if type(marked) is cst.Name:
            names.add(marked.value)
    plain = [a for a in find_nodes(block.node.body, lambda n: type(n) is cst.Assign and type(n.value) is cst.Name)]
    grew = True
    while grew:
        grew = False
        for assign in plain:
            group = {assign.value.value, *(n for t in assign.targets for n in target_names(t.target))}
            if group & names and not group <= names:
                names |= group
                grew = True
    return names


class _WithoutBodies(cst.CSTTransformer):
    """The code with the bodies of the given blocks emptied: what runs in the session's frame."""

    def __init__(self, blocks: set[int]) -> None:
        self.blocks = blocks

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        if id(original) not in self.blocks:
            return updated
        return updated.with_changes(body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]))


def _returns_a_save(helper: RemoteHelper) -> bool:
    """Does the function return a name its trace binds to a saved value (alone, or in a
    tuple: `return resid, logits`)?"""
    returned = returned_names(helper.func)
    return any(name in block.saved_names for block in helper.blocks for name in returned)


def containers_left_on_server(region: Region, accumulators, needed: Callable[[], frozenset[str]]) -> frozenset[str]:
    """The containers created above the region that it fills and that nothing after the
    session reads: the session makes them and does not download them. In a notebook's
    module code every one comes back (the kernel keeps names for cells to come)."""
    if region.kernel_keeps_names:
        return frozenset()
    # (one the client made and the session takes along is the client's object: it stays
    # as it was on your machine, which is what a later pass would see and "fix")
    candidates = [a.name for a in accumulators if a.kind != "carried" and not region.start <= a.index < region.end]
    if not candidates:
        return frozenset()
    return frozenset(name for name in candidates if name not in needed())


def unreturned_names(region: Region, facts: Facts, accumulators) -> set[str]:
    """Client names the moved code bound that stay on the server (none is read later)."""
    kept = saved_in_region(region) | {a.name for a in accumulators if a.name not in region.left_on_server}
    kept |= set(region.saved_here.values())
    if region.split is not None:
        kept |= set(region.split.carried) | region.split.record_names
        # what the client part reads comes back in the records (a name the replay binds in
        # some iterations only may end with an earlier value: not brought back)
        kept |= set(collect_all(region.split.replay).reads) - region.split.partial
    unkept = [n for n in collect_all(region.moved).binds if n not in kept]
    block_bodies = tuple(b.node.body for b in region.blocks)
    # a name bound somewhere in the region but in none of its blocks is bound outside
    # them: the walk that leaves the blocks out is needed only for a name they bind too
    in_blocks = collect_all(block_bodies).binds
    if not any(n in in_blocks for n in unkept):
        return set(unkept)
    bound = collect_all(region.moved, skip=block_bodies).binds
    return {n for n in unkept if n in bound}


def _accumulator_inside(region: Region, name: str) -> Accumulator | None:
    """An empty list/dict created by a top-level statement of the region itself: it
    becomes a saved container in place."""
    found = None
    for offset, stmt in enumerate(region.statements):
        if name not in collect(stmt).binds:
            continue
        kind = empty_container_binding(stmt, name)
        if kind is None or found is not None:
            return None
        found = Accumulator(name, kind, stmt, region.start + offset)
    return found


def replay_reads(split: Split, stores: list[str], every_line: bool = False) -> str:
    """Why the replay cannot run: a line of it reads an attribute of `self` that the
    session sets, which your `self` gets back only at the replay's end (or, for one
    that stays on the server, never)."""
    if not stores:
        return ""
    # (the last line brings the attributes that come back)
    for stmt in split.replay if every_line else split.replay[:-1]:
        for node in find_nodes(stmt, lambda n: type(n) is cst.Attribute):
            if code_of(node) in stores:
                return (
                    f"a line that must run on your machine reads `{code_of(node)}`, which the session sets "
                    "on its own copy of `self`"
                )
    return ""

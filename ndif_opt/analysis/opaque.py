"""Remote work ndif-opt cannot see: the constructs it names instead of guessing.

Two shapes of real code send requests that no static reading of the file can count or
bundle, and each gets a finding that names it (issue "Reach on unseen code": a loop is
never left as it is without a word):

- a loop that calls a *callback*: a parameter of its function, handed the model
  (`for prompt in prompts: test_fn(llm, prompt)`): what the callback sends is decided by
  whoever calls the function;
- nnsight code written as a *string* (`"with model.trace(...)"` built, written to a file
  and imported, or passed to `exec`): ndif-opt reads code, not the strings code writes;
- a block opened through a *name* (`ctx = model.trace(p, remote=r) if fresh else
  nullcontext()`, then `with ctx:`): which code runs in the block, and whether it is a
  block at all, is decided when the script runs;
- a loop that calls a function made when the script runs: a *closure* a same-file factory
  returns (`run = make_runner(remote=True)`, `def make_runner(remote): def run(p): with
  model.trace(...)`; `return run`), whose remote flag and model the factory's call fixed;
- a `map(...)` of a function that sends requests: a request per element, which ndif-opt bundles
  when the same loop is written as a comprehension or a `for` loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts, model_block_receiver, qualify
from ndif_opt.analysis.names import COMPREHENSIONS, all_params, collect, target_names
from ndif_opt.analysis.remote_functions import helper_calls
from ndif_opt.syntax.loops import map_as_comprehension
from ndif_opt.syntax.walk import children, find_nodes

# text of nnsight code: a `with` statement opening a block on a model
_BLOCK_TEXT = re.compile(r"\bwith\s+[\w.\[\]]+\.(trace|session|generate)\s*\(")


@dataclass(frozen=True)
class CallbackLoop:
    loop: cst.For | cst.While
    callback: str  # the parameter called
    function: str  # the function whose parameter it is


def callback_loops(facts: Facts) -> list[CallbackLoop]:
    """Loops outside nnsight blocks that call a parameter of their function with a model
    among the arguments, and take what it returns as a value (`a, b = test_fn(llm, p)`,
    `test_fn(llm, p)`): not a module reached through it (`get_module(llm, layer)[...]`,
    code that runs inside a trace)."""
    found = []
    for info in _loops_outside_blocks(facts):
        loop, function = info.node, info.function
        if function is None:
            continue
        params = {p.name.value for p in all_params(function.params)}
        for call in _calls_for_their_value(loop.body, params):
            if any(facts.is_model_like(name) for arg in call.args for name in collect(arg.value).reads):
                found.append(CallbackLoop(loop, call.func.value, function.name.value))
                break
    return found


def statements_outside_blocks(facts: Facts, kinds: tuple[type, ...]):
    """The statements of ``kinds`` (their StmtInfo) that no nnsight block holds."""
    blocks = {id(block.node) for block in facts.blocks}
    for info in facts.statements.values():
        if type(info.node) in kinds and not any(id(node) in blocks for node in info.ancestors):
            yield info


def _loops_outside_blocks(facts: Facts):
    return statements_outside_blocks(facts, (cst.For, cst.While))


def _calls_for_their_value(node: cst.CSTNode, names: set[str], parent: cst.CSTNode | None = None):
    """Calls of one of ``names`` whose result is a value: not indexed or read an
    attribute of right away (`get_module(llm, layer)[...]` reaches a module)."""
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in names \
            and not (type(parent) in (cst.Subscript, cst.Attribute) and parent.value is node):
        yield node
    for child in children(node):
        yield from _calls_for_their_value(child, names, node)


def code_strings(facts: Facts) -> list[tuple[cst.BaseStatement, str]]:
    """Statements that hold nnsight code as a string: a `with <model>.trace(...)` line in a
    string that is not a docstring. (statement, that line)"""
    found: list[tuple[cst.BaseStatement, str]] = []
    for info in facts.statements.values():
        stmt = info.node
        if type(stmt) is not cst.SimpleStatementLine or _docstring(stmt):
            continue
        for string in find_nodes(stmt, lambda n: type(n) in (cst.SimpleString, cst.FormattedStringText)):
            line = next((line for line in string.value.splitlines() if _BLOCK_TEXT.search(line)), None)
            if line is not None:
                found.append((stmt, line.strip().strip("\"'").replace("\\n", "").strip()[:80]))
                break
    return found


def _docstring(stmt: cst.SimpleStatementLine) -> bool:
    return len(stmt.body) == 1 and type(stmt.body[0]) is cst.Expr and type(stmt.body[0].value) in (
        cst.SimpleString, cst.ConcatenatedString)


@dataclass(frozen=True)
class BlockThroughName:
    stmt: cst.With  # `with ctx:`
    name: str  # `ctx`
    call: cst.Call  # the block's call in what binds the name: `model.trace(...)`


def blocks_through_names(facts: Facts) -> list[BlockThroughName]:
    """`with` statements over a name that a statement of the same function binds to an
    expression holding a model's `.trace/.session/.generate(...)` call: nnsight blocks
    only ndif-opt's readers of `with model.trace(...)` statements do not see."""
    bound: dict[tuple[int, str], cst.Call] = {}
    for info in facts.statements.values():
        stmt = info.node
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is not cst.Assign:
                continue
            call = _model_block_call(small.value, facts)
            if call is not None:
                for target in small.targets:
                    for name in target_names(target.target):
                        bound[(id(info.function), name)] = call
    found = []
    for info in facts.statements.values():
        if type(info.node) is not cst.With:
            continue
        for item in info.node.items:
            if type(item.item) is cst.Name and (id(info.function), item.item.value) in bound:
                found.append(BlockThroughName(info.node, item.item.value, bound[(id(info.function), item.item.value)]))
                break
    return found


def _model_block_call(value: cst.BaseExpression, facts: Facts) -> cst.Call | None:
    """The first call in ``value`` that opens a block on a model, as a `with` statement's
    would (:func:`ndif_opt.analysis.facts.model_block_receiver`)."""
    return next((call for call in find_nodes(value, lambda n: type(n) is cst.Call)
                 if model_block_receiver(call, facts) is not None), None)


@dataclass(frozen=True)
class ClosureLoop:
    loop: cst.For | cst.While | cst.BaseExpression  # a `for`, a `while` or a comprehension
    name: str  # the name called: `run`
    factory: str  # the function whose call bound it: `make_runner` (see Closure.factory)
    function: str = ""  # the name of the function the name runs (`top_token` of a partial of it)


@dataclass(frozen=True)
class Closure:
    name: str  # the name bound: `run` of `run = make_runner(remote=True)`
    factory: str  # `make_runner`; `functools.partial`; "" for another name of a function
    func: cst.FunctionDef  # the nested function it returns, which holds a remote block
    bound: tuple[cst.Arg, ...] = ()  # the arguments a partial gives before a call's own
    # in a container's element: where in the tuple the factory returns (index, length); None: alone
    position: tuple[int, int] | None = None


def closures(facts: Facts) -> dict[str, Closure]:
    """Names bound (anywhere: a name is taken for the same closure in every scope) to a call
    of a same-file function that returns one of its nested functions holding a remote
    block: calling the name runs that nested function."""
    return facts.once(_closures)


def _closures(facts: Facts) -> dict[str, Closure]:
    factories = _closure_factories(facts)
    found: dict[str, Closure] = _other_names(facts)
    if not factories:
        return found
    held: dict[str, Closure] = {}  # containers of closures: `{l: make_ablator(l) for l in ...}`
    for info in facts.statements.values():
        stmt = info.node
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is not cst.Assign:
                continue
            for target in small.targets:
                for name, closure in _bound_closures(target.target, small.value, factories):
                    found[name] = closure
                element = _closure_elements(small.value, factories)
                if element is not None:
                    for name in target_names(target.target):
                        held[name] = element
    loops = [info.node for info in facts.statements.values() if type(info.node) is cst.For]
    if held:  # (a comprehension's `for` takes one from a container the same way: `[fn(x) for fn in fns]`)
        loops += find_nodes(facts.module, lambda n: type(n) is cst.CompFor)
    for loop in loops:
        closure, target = _iterated_closure(loop, held)
        if closure is not None:
            found[target] = Closure(target, closure.factory, closure.func)
    return found


def _other_names(facts: Facts) -> dict[str, Closure]:
    """Names bound once to a same-file function that holds a remote block, by another
    name (`score = top_token`) or with arguments given ahead (`top3 =
    functools.partial(top_token, k=3)`): calling the name runs that function."""
    holding = {id(b.stmt.function) for b in facts.blocks if b.stmt.function is not None}
    if not holding:
        return {}
    found = {}
    for name in facts.bindings:
        value = facts.constant(name)
        bound: tuple[cst.Arg, ...] = ()
        factory = ""
        if type(value) is cst.Call and qualify(value.func, facts.imports) == "functools.partial" and value.args \
                and value.args[0].keyword is None and not value.args[0].star \
                and not any(arg.star for arg in value.args):
            factory, bound, value = "functools.partial", tuple(value.args[1:]), value.args[0].value
        func = facts.functions.get(value.value) if type(value) is cst.Name else None
        if func is not None and id(func) in holding and name not in facts.functions:
            found[name] = Closure(name, factory, func, bound)
    return found


def _bound_closures(target: cst.BaseExpression, value: cst.BaseExpression,
                    factories: dict[str, tuple[cst.FunctionDef | None, ...]]):
    """(name, closure) for each name ``target = value`` binds to a closure: `run =
    make_runner()`, and `run, stats = make_runner()` where the factory returns a tuple."""
    if type(value) is not cst.Call or type(value.func) is not cst.Name or value.func.value not in factories:
        return
    factory = value.func.value
    returned = factories[factory]
    if type(target) is cst.Name and len(returned) == 1 and returned[0] is not None:
        yield target.value, Closure(target.value, factory, returned[0])
    elif type(target) in (cst.Tuple, cst.List) and len(target.elements) == len(returned) > 1:
        for element, func in zip(target.elements, returned):
            if type(element.value) is cst.Name and func is not None:
                yield element.value.value, Closure(element.value.value, factory, func)


def _closure_elements(value: cst.BaseExpression,
                      factories: dict[str, tuple[cst.FunctionDef | None, ...]]) -> Closure | None:
    """The closure every element of a container display or comprehension is (each a call
    of one factory that returns one closure), else None."""
    kind = type(value)
    if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
        elements = [value.elt]
    elif kind is cst.DictComp:
        elements = [value.value]
    elif kind in (cst.List, cst.Tuple, cst.Set):
        elements = [e.value for e in value.elements]
    elif kind is cst.Dict:
        elements = [e.value for e in value.elements if type(e) is cst.DictElement]
    else:
        return None
    made = [_made_closure(element, factories) for element in elements]
    if not made or None in made or len({(c.factory, id(c.func), c.position) for c in made}) != 1:
        return None
    return made[0]


def _made_closure(element: cst.BaseExpression,
                  factories: dict[str, tuple[cst.FunctionDef | None, ...]]) -> Closure | None:
    """The closure a call of a factory makes, where it makes one: alone, or in the tuple
    it returns (`(run, stats)`: ``position`` says where)."""
    if type(element) is not cst.Call or type(element.func) is not cst.Name or element.func.value not in factories:
        return None
    factory = element.func.value
    returned = factories[factory]
    made = [(i, func) for i, func in enumerate(returned) if func is not None]
    if len(made) != 1:
        return None
    index, func = made[0]
    return Closure("_", factory, func, position=None if len(returned) == 1 else (index, len(returned)))


def _iterated_closure(loop: cst.For | cst.CompFor, held: dict[str, Closure]) -> tuple[Closure | None, str]:
    """The closure a loop's target takes from a container of closures: `for fn in fns`,
    `for fn in fns.values()`, `for k, fn in fns.items()`, `for i, fn in enumerate(fns)`."""
    source, target = loop.iter, loop.target
    pair = False
    if type(source) is cst.Call and type(source.func) is cst.Attribute and not source.args \
            and source.func.attr.value in ("values", "items"):
        pair = source.func.attr.value == "items"
        source = source.func.value
    elif type(source) is cst.Call and type(source.func) is cst.Name and source.func.value == "enumerate" \
            and source.args:
        pair, source = True, source.args[0].value
    if type(source) is not cst.Name or source.value not in held:
        return None, ""
    if pair:
        if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != 2:
            return None, ""
        target = target.elements[1].value
    closure = held[source.value]
    if closure.position is not None:  # `for run, stats in runners`: the element is the factory's tuple
        index, length = closure.position
        if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != length:
            return None, ""
        target = target.elements[index].value
    return (closure, target.value) if type(target) is cst.Name else (None, "")


def closure_loops(facts: Facts) -> list[ClosureLoop]:
    """Loops outside nnsight blocks — `for`, `while` and comprehensions — that call a
    closure (:func:`closures`): each call of it may send a request no reader of `def`
    statements sees."""
    made = closures(facts)
    if not made:
        return []

    def calls_made(node: cst.CSTNode) -> list[cst.Call]:
        return find_nodes(node, lambda n: type(n) is cst.Call and type(n.func) is cst.Name and n.func.value in made)

    found = []
    for info in _loops_outside_blocks(facts):
        called = calls_made(info.node.body)
        if called:
            closure = made[called[0].func.value]
            found.append(ClosureLoop(info.node, closure.name, closure.factory, closure.func.name.value))
    for info in statements_outside_blocks(facts, (cst.SimpleStatementLine,)):
        for comprehension in find_nodes(info.node, lambda n: type(n) in COMPREHENSIONS):
            called = calls_made(comprehension)
            if called:
                closure = made[called[0].func.value]
                found.append(ClosureLoop(comprehension, closure.name, closure.factory, closure.func.name.value))
                break
    # a nest of loops is one finding, on its outermost loop
    return [one for one in found if not any(other is not one and find_nodes(other.loop, lambda n: n is one.loop)
                                            for other in found)]


def mapped_remote_calls(facts: Facts, helpers: dict) -> list[tuple[cst.BaseStatement, cst.Call, cst.Call]]:
    """`map(f, xs)`, `map(lambda x: ..., xs)`, `sorted(xs, key=f)` and the other calls
    :func:`map_as_comprehension` reads, outside nnsight blocks, whose element calls one of
    ``helpers`` (functions that send requests): (its statement, the call, the call in its
    element). Each element sends a request; session-hoisting bundles loops and
    comprehensions, not these calls."""
    if not helpers:
        return []
    found = []
    for info in statements_outside_blocks(facts, (cst.SimpleStatementLine,)):
        for call in find_nodes(info.node, lambda n: type(n) is cst.Call and type(n.func) in (cst.Name, cst.Attribute)
                               and map_as_comprehension(n) is not None):
            mapped = map_as_comprehension(call)
            calls = helper_calls(mapped[1], helpers) if mapped is not None else []
            if calls:
                found.append((info.node, call, calls[0][0]))
    return found


def _closure_factories(facts: Facts) -> dict[str, tuple[cst.FunctionDef | None, ...]]:
    """Same-file functions that return one of their nested functions holding a remote
    block (`return run`), or a tuple of nested functions one of which does (`return run,
    stats`): factory name -> what it returns, position by position (None: not such a
    function)."""
    nested_with_blocks = {id(b.stmt.function) for b in facts.blocks if b.stmt.function is not None}
    found = {}
    for name, func in facts.functions.items():
        inner = {f.name.value: f for f in find_nodes(func.body, lambda n: type(n) is cst.FunctionDef)}
        if not any(id(f) in nested_with_blocks for f in inner.values()):
            continue
        for ret in find_nodes(func.body, lambda n: type(n) is cst.Return):
            values = [e.value for e in ret.value.elements] if type(ret.value) is cst.Tuple else [ret.value]
            returned = tuple(inner.get(v.value) if type(v) is cst.Name else None for v in values)
            if any(f is not None and id(f) in nested_with_blocks for f in returned):
                found[name] = tuple(f if f is not None and id(f) in nested_with_blocks else None for f in returned)
                break
    return found

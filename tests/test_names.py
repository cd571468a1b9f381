"""names.collect caches by statement; the cached answer equals a plain walk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from generators import dense_nnsight_script

from ndif_opt.analysis import names

ROOT = Path(__file__).resolve().parent.parent


def _plain(node: cst.CSTNode) -> names.NameUse:
    collector = names._Collector()
    node.visit(collector)
    return collector.use


def _as_lists(use: names.NameUse):
    # the nodes each name maps to must be the very same (first seen), in the same order
    return [list(map(id, d.values())) + list(d) for d in (use.reads, use.binds, use.mutates)] + [
        [(kind, id(node)) for kind, node in use.control]
    ]


def test_cached_collect_equals_a_plain_walk():
    sources = [dense_nnsight_script(80)] + [(ROOT / "ndif_opt" / f).read_text() for f in ("analysis/names.py", "engine/windows.py")]
    for source in sources:
        module = cst.parse_module(source)
        nodes = [module, *module.body]
        nodes += [s for s in module.body if isinstance(s, cst.FunctionDef)]
        nodes += [s.body for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef, cst.For))]
        for node in nodes:
            assert _as_lists(names.collect(node)) == _as_lists(_plain(node))


def test_collect_of_a_new_tree_shares_untouched_statements():
    module = cst.parse_module("a = b\nfor x in y:\n    c.append(x)\n")
    first = names.collect(module.body[1])
    changed = module.with_changes(body=[cst.parse_statement("a = 2\n"), module.body[1]])
    assert names.collect(changed.body[1]) is first
    assert set(names.collect(changed).reads) == {"y", "x", "c"}


def test_cached_collect_with_skipped_subtrees_equals_a_plain_walk():
    module = cst.parse_module(dense_nnsight_script(60))
    skip = tuple(s.body for s in module.body if isinstance(s, cst.With))
    plain = names._SkippingCollector(skip)
    module.visit(plain)
    assert _as_lists(names.collect(module, skip)) == _as_lists(plain.use)
    assert names.collect(module, skip) is names.collect(module, list(skip))  # cached either way


def _use(source: str) -> tuple[list[str], list[str], list[str]]:
    use = names.collect(cst.parse_module(source))
    return list(use.reads), list(use.binds), list(use.mutates)


def test_a_comprehension_keeps_its_targets_to_itself():
    # Python 3: `a` is the comprehension's own; the first iterable is read outside it
    assert _use("s = [round(float(a.sum()), 4) for a in acts]") == (["round", "float", "acts"], ["s"], [])
    assert _use("y = [x for x in x]") == (["x"], ["y"], [])  # the outer `x` is read
    assert _use("g = sum(q * w for q in r for w in q)") == (["sum", "r"], ["g"], [])
    assert _use("d = {k: v for k, (v, *_) in pairs.items()}") == (["pairs"], ["d"], [])
    # a walrus binds where the comprehension is; a method call mutates an outer object
    assert _use("z = {k for k in d if (m := k)}") == (["d"], ["z", "m"], [])
    assert _use("[log.append(i) for i in range(3)]") == (["log", "range"], [], ["log"])
    # a name read after the comprehension is the enclosing one
    assert _use("a = [i for i in range(3)]\nb = i") == (["range", "i"], ["a", "b"], [])


def test_a_try_binds_for_sure_what_its_body_and_every_handler_bind():
    from ndif_opt.analysis.names import definite_binds

    stmt = cst.parse_module(
        "try:\n    x = f()\n    y = g(x)\nexcept ValueError:\n    x = None\nexcept Exception as e:\n    x = 0\n"
        "finally:\n    z = 1\n"
    ).body[0]
    assert definite_binds(stmt) == {"x", "z"}  # `y` only when nothing failed
    bare = cst.parse_module("try:\n    x = f()\nexcept Exception:\n    pass\n").body[0]
    assert definite_binds(bare) == set()


def test_returned_name_is_the_one_name_every_own_return_gives():
    from ndif_opt.analysis.names import returned_name

    def func(source: str) -> cst.FunctionDef:
        return cst.parse_module(textwrap.dedent(source)).body[0]

    assert returned_name(func("def f(p):\n    if p:\n        return x\n    return x\n")) == "x"
    assert returned_name(func("def f(p):\n    if p:\n        return x\n    return y\n")) is None
    assert returned_name(func("def f(p):\n    return x[0]\n")) is None
    # a nested function's return is its own
    assert returned_name(func("def f(p):\n    def g():\n        return y\n    return x\n")) == "x"
    assert returned_name(func("def f(p):\n    print(p)\n")) is None


@pytest.mark.parametrize(
    "loop,bound",
    [
        ("for i in range(3):\n    p = i\n", {"i", "p"}),
        ("for i in range(1, 4):\n    p = i\n", {"i", "p"}),
        ("for s in ['a', 'b']:\n    p = s\n", {"s", "p"}),
        ("for i in range(0):\n    p = i\n", set()),  # never runs
        ("for i in range(n):\n    p = i\n", set()),  # may not run
        ("for i in []:\n    p = i\n", set()),
        ("for i in range(3):\n    if i:\n        continue\n    p = i\n", set()),  # may skip the binding
        ("for i in range(3):\n    if i:\n        break\n    p = i\n", set()),
        ("for i in range(3):\n    p = i\nelse:\n    q = 1\n", set()),
    ],
)
def test_a_loop_that_runs_at_least_once_binds_what_its_body_binds(loop, bound):
    from ndif_opt.analysis.names import definite_binds, exposed_reads

    assert definite_binds(cst.parse_statement(loop)) == bound
    after = cst.parse_module(loop + "print(p)\n").body
    assert ("p" in exposed_reads(after)) == ("p" not in bound)

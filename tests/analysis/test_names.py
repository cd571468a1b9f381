"""names.collect caches by statement; the cached answer equals a plain walk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from generators import dense_nnsight_script

from ndif_opt.analysis import names

ROOT = Path(__file__).resolve().parents[2]


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


MATCH = """\
match event:
    case {"layer": layer, **rest} if layer > limit:
        prompt = f"{layer}"
    case Point(x=xx, y=0) as point:
        prompt = str(point)
    case Color.RED | None:
        prompt = other_prompt
    case [first, *others]:
        prompt = first
    case _:
        prompt = "plain"
"""


def test_a_match_pattern_binds_its_captures_and_reads_classes_and_values():
    reads, binds, _ = _use(MATCH)
    assert set(binds) == {"layer", "rest", "prompt", "xx", "point", "first", "others"}
    # `x`/`y` of `Point(x=..., y=0)` are attribute names, not names of this scope
    assert {"event", "limit", "Point", "Color", "str", "other_prompt"} <= set(reads)
    assert not {"x", "y", "rest", "xx", "others"} & set(reads)
    stmt = cst.parse_module(MATCH).body[0]
    # a guard and a case's body read after the pattern bound its captures
    assert set(names.exposed_reads([stmt])) == {"event", "limit", "Point", "Color", "str", "other_prompt"}
    # one case runs, and the last matches anything: what every case binds, for sure
    assert names.definite_binds(stmt) == {"prompt"}
    without_default = cst.parse_module(MATCH.replace("    case _:\n", "    case 0:\n")).body[0]
    assert names.definite_binds(without_default) == set()  # no case may match
    guarded = cst.parse_module(MATCH.replace("    case _:\n", "    case _ if ready:\n")).body[0]
    assert names.definite_binds(guarded) == set()


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


def _stmts(source: str):
    return list(cst.parse_module(textwrap.dedent(source)).body)


def test_a_line_of_small_statements_reads_after_what_it_bound():
    assert list(names.exposed_reads(_stmts("x = 1; y = x\nz = y + w\n"))) == ["w"]
    assert list(names.exposed_reads(_stmts("y = x; x = 1\n"))) == ["x"]


def test_the_statements_an_input_depends_on_are_found_by_def_use():
    body = _stmts('''
        scale = 2.0
        row = rows[i]
        random.shuffle(options)
        print(row)
        question = row["q"] + " ".join(options)
        ids = tok(question)["input_ids"]
        n = len(ids)
        log.append(n)
    ''')
    # transitively: ids <- question <- row, options (shuffled in place); not scale, the
    # print, n or the log
    assert names.depended_on(body, {"ids"}) == [1, 2, 4, 5]
    # `tok(question)` is handed `question` and may change it: kept with it, in order
    assert names.depended_on(body, {"question"}) == [1, 2, 4, 5]
    assert names.depended_on(body, {"row"}) == [1]  # reading `row["q"]` changes nothing
    assert names.depended_on(body, {"scale", "n"}) == [0, 1, 2, 4, 5, 6, 7]  # `log.append(n)` is handed `n`
    assert names.depended_on(body, {"other"}) == []
    # a name bound for sure needs nothing bound before it; a maybe-binding keeps it needed
    assert names.depended_on(_stmts("p = a\np = b\n"), {"p"}) == [1]
    assert names.depended_on(_stmts("p = a\nif c:\n    p = b\n"), {"p"}) == [0, 1]
    # changed in place: an item, a container method, an in-place tensor method
    assert names.depended_on(_stmts("d = {}\nd['text'] = t\nx.add_(1)\ny = 1\n"), {"d", "x"}) == [0, 1, 2]


def test_what_a_call_may_change():
    stmt = _stmts("out = f(a, b.c, k=d); e.add_(1); g.append(h); len(i); str(j)\n")[0]
    assert set(names.may_change(stmt)) == {"a", "d", "e", "g", "h"}  # not `b`, `i`, `j`


def test_a_change_through_a_functions_result_is_not_a_change_of_the_function():
    """`layer_output(model, i)[0, 2] = v` changes what the function returned, never
    `layer_output` (nor the loop's `i`, which a finding then said "stays empty"); a method's
    result may be part of its object; that a call may change its arguments is may_change's."""
    def mutated(code: str) -> set[str]:
        return set(names.collect(_stmts(code)[0]).mutates)

    assert mutated("layer_output(model, i)[0, 2] = v\n") == set()
    assert set(names.may_change(_stmts("layer_output(model, i)[0, 2] = v\n")[0])) == {"model", "i"}
    assert mutated("get_store().append(x)\n") == set()
    assert mutated("cache.get(k)[0] = v\n") == {"cache"}
    assert mutated("rows[f(x)].append(y)\n") == {"rows"}
    assert set(names.may_change(_stmts("layer_output(model).add_(1)\n")[0])) == {"model"}


def test_moving_code_ahead_of_the_rest_of_a_loop_body():
    """The one def-use test of the sweep passes' moves (sweeps.moved_ahead)."""
    from ndif_opt.passes.common.sweeps import moved_ahead

    def conflict(ahead: str, args: str, behind: str, varying=()):
        parts = _stmts(ahead) + [cst.parse_expression(args)] if args else _stmts(ahead)
        found = moved_ahead(parts, _stmts(behind), varying=frozenset(varying))
        return None if found is None else (found.name, found.how)

    # the prompt is computed ahead from the loop variable: nothing breaks
    assert conflict("prompt = f'{name} is'\n", "prompt", "out.append(prompt)\n") is None
    # the input reads what the rest sets or fills (an earlier iteration's value)
    assert conflict("", "prompt", "prompt = prompt + '!'\n") == ("prompt", "bound")
    assert conflict("", "prompts[-1]", "prompts.append(x)\n") == ("prompts", "changed")
    assert conflict("p = f'{answer}'\n", "p", "answer = 1\n") == ("answer", "bound")
    # what is computed ahead changes what the rest reads
    assert conflict("hist.append(t)\np = ' '.join(hist)\n", "p", "n = len(hist)\n") == ("hist", "changes")
    assert conflict("hist.append(t)\np = ' '.join(hist)\n", "p", "n = 1\n") is None
    # an object bound ahead, in the iteration, is the iteration's own
    assert conflict("d = {}\nd['k'] = t\n", "d", "print(d)\n") is None
    # ahead of the loop: the loop variables change
    assert conflict("", "name", "x = 1\n", varying={"name"}) == ("name", "bound")


@pytest.mark.parametrize("code, name", [
    ("logits.shape", "logits_shape"),
    ("example['question'][:50]", "example_question_head"),
    ("tokens[0][-n:]", "tokens_tail"),
    ("x[0, -1].argmax().item()", "x_argmax"),
    ("probs[0, top].item()", "probs_top"),
    ("vec.norm().item()", "vec_norm"),
    ("len(states)", "len_states"),
    ("r['a b']['1st']", "r_a_b_1st"),
    ("(a + b)", "value"),
    # an element nothing else describes is not the whole sequence
    ("ranks[-1]", "ranks_last"),
    ("rows[0]", "rows_first"),
    ("grid[0][-1]", "grid_last"),
    ("probs[0].argmax().item()", "probs_argmax"),
])
def test_a_describing_name_says_what_the_value_is(code, name):
    assert names.describing_name(cst.parse_expression(code)) == name


def test_in_place_changes_through_torch_methods_and_chosen_objects():
    assert _use("acc.add_(x)") == (["acc", "x"], [], ["acc"])  # torch's in-place methods
    assert _use("acc.mul(x)") == (["acc", "x"], [], [])  # a new tensor
    assert _use("(hits if ok else misses).append(p)")[2] == ["hits", "misses"]
    assert _use("(cache or fallback).update(d)")[2] == ["cache", "fallback"]


def test_a_call_that_changes_its_first_argument():
    assert _use("random.shuffle(prompts)")[2] == ["prompts"]
    assert _use("rng.shuffle(order)")[2] == ["order"]
    assert _use("heapq.heappush(best, (s, p))")[2] == ["best"]
    assert _use("random.choice(prompts)")[2] == []


def test_a_default_of_a_parameter_is_read_where_the_function_is_defined():
    # `lambda x, w=w:` reads `w` when the lambda is made, not when it runs
    for code in ("f = lambda x, w=w: x * w", "def f(x, w=w * 2):\n    return x * w\n"):
        use = names.collect(cst.parse_module(code))
        assert "w" in use.reads, code


ALIASING = """
y = x
a, b = y, 3
for L, lg in per_layer.items():
    hits += int(lg[0, -1].argmax().item() == 13)
    z = lg.norm()
on_cpu = x.to("cpu")
either = x if flag else None
given = keep(x)
word = tokenizer.decode(x[0].argmax())
top = x[0, -1].argmax().item()
saved = keep(x).save()
"""


@pytest.mark.parametrize("held, expected", [
    ({"x"}, {"x", "y", "a", "on_cpu", "either", "given"}),
    ({"per_layer"}, {"per_layer", "L", "lg"}),
])
def test_aliases_are_the_names_that_may_hold_the_object(held, expected):
    assert names.aliases(cst.parse_module(ALIASING).body, held) == expected

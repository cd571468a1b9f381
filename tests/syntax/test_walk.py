"""walk.walk calls a read-only visitor exactly as libcst's own ``visit`` does."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
from generators import dense_nnsight_script

from ndif_opt.syntax.walk import children, find_nodes, paths_to, transform, walk, walk_content

ROOT = Path(__file__).resolve().parents[2]
# (a larger corpus, 519,293 nodes of ndif_opt's and libcst's own sources, was checked once)
CORPUS = [dense_nnsight_script(60), (ROOT / "ndif_opt" / "analysis" / "names.py").read_text()] + [
    "async def f(*a, b=1, **k):\n    async with x as (y, z):\n        await g(lambda q, /, r: q)\n"
    "    match v:\n        case [1, *rest] | {'k': _} if rest:\n            pass\n"
    "x: int = (yield)\ndel a[1:2, ::3]\nglobal q\nprint(f'{a!r:>{w}}', *b, **c)\n"
    "try:\n    pass\nexcept* E as e:\n    raise X from e\nelse:\n    ...\nfinally:\n    pass\n"
    "@dec\nclass C(B, metaclass=M):\n    def m[T](self) -> T: return self\n"
    "type A = list[int]\n"
]


from ndif_opt.syntax.walk import _LAYOUT_BASES as LAYOUT  # noqa: E402


def test_children_in_libcst_order_on_every_node():
    class Check(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            expected = node.children
            assert len(children(node)) == len(expected), type(node).__name__
            assert all(a is b for a, b in zip(children(node), expected)), type(node).__name__
            return True

    for source in CORPUS:
        cst.parse_module(source).visit(Check())


class Record(cst.CSTVisitor):
    """Records every call; refuses to enter function bodies (children of `visit_` -> False)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.calls.append(("visit FunctionDef", id(node)))
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.calls.append(("visit Name", id(node)))

    def leave_Name(self, node: cst.Name) -> None:
        self.calls.append(("leave Name", id(node)))

    def leave_Call(self, node: cst.Call) -> None:
        self.calls.append(("leave Call", id(node)))


class RecordLayout(Record):
    """A visitor with methods for layout: the walk must enter whitespace and commas."""

    def visit_Comma(self, node: cst.Comma) -> None:
        self.calls.append(("visit Comma", id(node)))

    def leave_EmptyLine(self, node: cst.EmptyLine) -> None:
        self.calls.append(("leave EmptyLine", id(node)))


class Hooked(Record):
    def on_visit(self, node: cst.CSTNode) -> bool:
        self.calls.append(("on_visit", id(node)))
        return not isinstance(node, cst.Lambda) and super().on_visit(node)

    def on_leave(self, node: cst.CSTNode) -> None:
        self.calls.append(("on_leave", id(node)))
        super().on_leave(node)


def test_walk_makes_the_same_calls_as_visit():
    for source in CORPUS:
        module = cst.parse_module(source)
        for kind in (Record, RecordLayout, Hooked):
            by_libcst, by_walk = kind(), kind()
            module.visit(by_libcst)
            walk(module, by_walk)
            assert by_walk.calls == by_libcst.calls, kind.__name__
            assert by_walk.calls


def test_find_nodes_skips_only_layout():
    # what a search reads (the fields that may hold more than layout) finds every name,
    # call and statement a full walk meets, in the same order
    class All(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Name, cst.Call, cst.BaseStatement)):
                self.found.append(node)
            return True

    for source in CORPUS:
        module = cst.parse_module(source)
        everything = All()
        walk(module, everything)
        wanted = find_nodes(module, lambda n: isinstance(n, (cst.Name, cst.Call, cst.BaseStatement)))
        assert [id(n) for n in wanted] == [id(n) for n in everything.found]


def test_walk_content_hooks_every_node_but_layout_in_order():
    class Hooks(cst.CSTVisitor):
        def __init__(self, record_layout: bool) -> None:
            self.record_layout = record_layout
            self.calls: list[tuple[str, int]] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if self.record_layout or not isinstance(node, LAYOUT):
                self.calls.append(("on_visit", id(node)))
            return not isinstance(node, cst.Lambda)

        def on_leave(self, node: cst.CSTNode) -> None:
            if self.record_layout or not isinstance(node, LAYOUT):
                self.calls.append(("on_leave", id(node)))

    for source in CORPUS:
        module = cst.parse_module(source)
        everything, content = Hooks(record_layout=False), Hooks(record_layout=True)
        walk(module, everything)
        walk_content(module, content)
        assert content.calls == everything.calls


def test_transform_gives_what_visit_gives():
    # a transformer entering only the paths to the nodes it changes: the same code as
    # libcst's visit, with the nodes off those paths kept as they are
    class Rename(cst.CSTTransformer):
        # enters the nodes above the chosen names, not the names: their leave hooks are
        # still called, as by libcst
        def __init__(self, on_path: set[int], chosen: set[int]) -> None:
            self.on_path = on_path
            self.chosen = chosen

        def on_visit(self, node: cst.CSTNode) -> bool:
            return id(node) in self.on_path and id(node) not in self.chosen

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
            return updated.with_changes(value=updated.value + "_") if id(original) in self.chosen else updated

    for source in CORPUS:
        module = cst.parse_module(source)
        names = [n for n in find_nodes(module, lambda n: type(n) is cst.Name)]
        for every in (1, 3, 7):
            chosen = {id(n) for n in names[::every]}
            on_path = paths_to(module, lambda n: id(n) in chosen)
            by_libcst = module.visit(Rename(on_path, chosen))
            by_transform = transform(module, Rename(on_path, chosen))
            assert by_transform.code == by_libcst.code
            assert by_transform.deep_equals(by_libcst)
            kept = {id(s) for s in module.body} & {id(s) for s in by_transform.body}
            assert kept == {id(s) for s in module.body if id(s) not in on_path}

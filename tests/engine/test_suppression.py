"""`# ndif-opt: ignore` comments: what lines and passes each one covers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ndif_opt.engine.suppression import Suppression, Suppressions

ALL = None


def sup(text: str) -> Suppressions:
    return Suppressions.from_source(textwrap.dedent(text))


def test_no_comment_no_suppressions():
    s = sup("x = 1\nfor a in b:\n    pass\n")
    assert s.items == () and not s
    assert not s.covers("session-hoisting", 1, 2)


def test_plain_line_comment_covers_its_line_for_every_pass():
    s = sup(
        """\
        a = 1
        b = []  # ndif-opt: ignore
        c = 3
        """
    )
    assert s.items == (Suppression(line=1, start=1, end=1, ids=ALL),)
    assert s.covers("session-hoisting", 1, 1)
    assert s.covers("accumulator-relocation", 1, 5)  # only the start line matters
    assert not s.covers("session-hoisting", 0, 1)
    assert not s.covers("session-hoisting", 2, 2)


def test_header_comment_covers_the_whole_block():
    s = sup(
        """\
        top = {}
        for prompt in PROMPTS:  # ndif-opt: ignore[session-hoisting]
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output.save()
            top[prompt] = logits
        print(top)
        """
    )
    assert s.items == (Suppression(line=1, start=1, end=4, ids=frozenset({"session-hoisting"})),)
    for line in (1, 2, 3, 4):
        assert s.covers("session-hoisting", line, line)
    assert not s.covers("session-hoisting", 5, 5)
    assert not s.covers("session-hoisting", 0, 0)
    assert not s.covers("accumulator-relocation", 1, 4)  # not in the list


@pytest.mark.parametrize(
    ("header", "end"),
    [
        ("with model.trace(p, remote=True):  # ndif-opt: ignore", 2),
        ("while running:  # ndif-opt: ignore", 2),
        ("if remote:  # ndif-opt: ignore", 2),
        ("def run(p):  # ndif-opt: ignore", 2),
        ("async def run(p):  # ndif-opt: ignore", 2),
        ("class Runner:  # ndif-opt: ignore", 2),
    ],
)
def test_every_compound_statement_header(header, end):
    s = Suppressions.from_source(f"x = 0\n{header}\n    a = 1\n    b = 2\nafter = 3\n")
    (item,) = s.items
    assert (item.start, item.end) == (1, 3)
    assert s.covers("session-hoisting", 3, 3)
    assert not s.covers("session-hoisting", 4, 4)


def test_multi_line_header_and_decorators():
    s = sup(
        """\
        with model.trace(
            prompt,
            remote=True,  # ndif-opt: ignore
        ):
            out = model.output.save()
        @decorator  # ndif-opt: ignore[accumulator-relocation]
        def f(
            a,
        ):
            return a
        z = 1
        """
    )
    first, second = s.items
    assert (first.line, first.start, first.end, first.ids) == (2, 0, 4, ALL)
    assert (second.line, second.start, second.end) == (5, 5, 9)
    assert second.ids == frozenset({"accumulator-relocation"})


def test_comment_inside_a_body_covers_only_its_line():
    s = sup(
        """\
        for p in ps:
            # ndif-opt: ignore
            a = 1  # ndif-opt: ignore
            b = 2
        """
    )
    assert [(i.line, i.start, i.end) for i in s.items] == [(1, 1, 1), (2, 2, 2)]
    assert not s.covers("session-hoisting", 0, 3)


def test_nested_header_covers_the_inner_block_only():
    s = sup(
        """\
        for p in ps:
            with model.trace(p, remote=True):  # ndif-opt: ignore
                x = 1
            y = 2
        """
    )
    assert [(i.start, i.end) for i in s.items] == [(1, 2)]
    assert not s.covers("session-hoisting", 0, 3)


def test_one_line_compound_statement():
    s = sup("for p in ps: run(p)  # ndif-opt: ignore\nnext_line = 1\n")
    assert [(i.start, i.end) for i in s.items] == [(0, 0)]


def test_file_level():
    s = sup(
        """\
        import nnsight
        # ndif-opt: ignore-file[accumulator-relocation]
        x = 1
        """
    )
    (item,) = s.items
    assert item.file_level and item.ids == frozenset({"accumulator-relocation"})
    assert s.covers("accumulator-relocation", 0, 0)
    assert s.covers("accumulator-relocation", 10_000, 10_001)
    assert not s.covers("session-hoisting", 2, 2)
    every = sup("x = 1\n\n# ndif-opt: ignore-file\n")
    assert every.covers("session-hoisting", 0, 0) and every.covers("anything", 99, 99)


def test_ignore_file_must_stand_alone():
    s = sup("x = 1  # ndif-opt: ignore-file\n")
    assert s.items == ()
    assert s.problems == ((0, "`ignore-file` must be on a line of its own"),)


def test_strings_are_not_comments():
    s = sup(
        '''\
        text = "# ndif-opt: ignore-file"
        doc = """
        # ndif-opt: ignore
        """
        '''
    )
    assert s.items == ()


def test_id_lists_and_spelling():
    s = sup(
        """\
        a = 1  # ndif-opt: ignore[session-hoisting,accumulator-relocation]
        b = 2  #ndif-opt:ignore [ session-hoisting  accumulator-relocation ]
        c = 3  # noqa: E501  # ndif-opt: ignore[session-hoisting]
        d = 4  # ndif-opt: ignore[]
        e = 5  # ndif-opt: ignored
        f = 6  # ndif-opt: ignore[session-hoisting, no-such-pass]
        """
    )
    both = frozenset({"session-hoisting", "accumulator-relocation"})
    assert [(i.line, i.ids) for i in s.items] == [
        (0, both),
        (1, both),
        (2, frozenset({"session-hoisting"})),
        (5, frozenset({"session-hoisting", "no-such-pass"})),
    ]
    assert s.unknown_ids == [(5, "no-such-pass")]
    assert [line for line, _ in s.problems] == [3, 4]


def test_untokenizable_text_has_no_suppressions():
    assert Suppressions.from_source('x = """\n# ndif-opt: ignore-file\n').items == ()
    assert Suppressions.from_source("for x in (:\n  # ndif-opt: ignore\n").items == ()
    Suppressions.from_source("\x00 = 1  # ndif-opt: ignore\n")  # does not raise
    Suppressions.from_source("\ufeff" + "(" * 500 + "  # ndif-opt: ignore\n")


def test_tokenizable_but_unparsable_keeps_line_comments():
    s = Suppressions.from_source("for x in y  # ndif-opt: ignore\n    pass\n")
    assert [(i.start, i.end) for i in s.items] == [(0, 0)]


def test_crlf_line_endings():
    s = Suppressions.from_source("x = 1\r\nfor p in ps:  # ndif-opt: ignore\r\n    y = 2\r\nz = 3\r\n")
    assert [(i.start, i.end) for i in s.items] == [(1, 2)]


PROMPT_LOOP = (Path(__file__).resolve().parents[2] / "examples" / "prompt_loop.py").read_text()


def test_optimize_leaves_suppressed_code_alone():
    from ndif_opt import optimize
    from ndif_opt.types import Status

    source = PROMPT_LOOP.replace("for prompt in PROMPTS:", "for prompt in PROMPTS:  # ndif-opt: ignore")
    result = optimize(source)
    hoist = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert hoist and all(f.status is Status.SUPPRESSED for f in hoist)
    assert result.code == source


def test_suppressing_one_pass_keeps_the_others():
    from ndif_opt import optimize
    from ndif_opt.types import Status

    source = PROMPT_LOOP.replace("for prompt in PROMPTS:", "for prompt in PROMPTS:  # ndif-opt: ignore[detach-cpu]")
    result = optimize(source)
    assert "model.session(remote=True)" in result.code
    file_level = "# ndif-opt: ignore-file[session-hoisting]\n" + PROMPT_LOOP
    result = optimize(file_level)
    assert "session(" not in result.code
    assert any(f.status is Status.SUPPRESSED for f in result.findings)

"""The cost table's words: a download of unknown size shows as such, downloads compare only
where they can, and a row whose download grew says why."""

from __future__ import annotations

import ast
import json
import textwrap

from ndif_opt import optimize
from ndif_opt.engine import windows
from ndif_opt.output.text import cost_table, download_change, markdown_report, to_json
from ndif_opt.types import Cost, Finding, PassCost, Range, Result, Status, UnknownDownload, UnknownDownloads

HEAD = 'from nnsight import LanguageModel\nmodel = LanguageModel("openai-community/gpt2")\n'

# three traces, each saving a value whose size the shape model cannot know (k is read at
# run time); session-hoisting makes them one request that brings the values back in a list
UNKNOWN_SIZE = HEAD + textwrap.dedent(
    """
    import sys

    k = int(sys.argv[1])
    for prompt in ["The cat sat on", "A dog ran to", "Birds fly over"]:
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].topk(k).indices.save()
        print(prompt, top)
    """
)

# a list filled on the server that stayed empty on the client: accumulator-relocation
# brings it back, so the download grows
EMPTY_ON_THE_CLIENT = HEAD + textwrap.dedent(
    """
    norms = []
    with model.trace("The Eiffel Tower is in", remote=True):
        for layer in model.transformer.h:
            norms.append(layer.output.norm().save())
    print(norms)
    """
)

TOP = UnknownDownload("top", "model.lm_head.output[0, -1].topk(k).indices", "argument 'k' is not a literal")
OTHER = UnknownDownload("rows", "f(x)", "call of 'f' is not modelled")


def _cost(download: int, *unknown: tuple[UnknownDownload, int]) -> Cost:
    return Cost(requests=1, download_bytes=download, download_unknown=UnknownDownloads.of(dict(unknown)))


def _row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(name + " "))


# -- downloads of unknown size --------------------------------------------------------------


def test_a_download_of_unknown_size_reads_as_a_lower_bound_with_a_footnote():
    result = optimize(UNKNOWN_SIZE)
    table = cost_table(result)
    total = _row(table, "total")
    assert "+ ? →" in total and total.count("+ ?") == 2  # both sides hold values of unknown size
    assert "download unknown" in total  # 3 values of `top` before, a list of them after: no ratio
    assert "+ ? = values of a size not known statically" in table
    assert "`top` ← `model.lm_head.output[0, -1].topk(k).indices` (3 downloads → 0)" in table
    assert "argument 'k' is not a literal" in table


def test_a_value_brought_back_in_a_name_ndif_opt_made_is_named_by_its_code():
    # a client tensor of unknown size the loop adds to comes back through the session's log
    # (`_ndif_log`, a name of ndif-opt's): the note names the code, not that name
    source = HEAD + textwrap.dedent(
        """
        import sys
        import torch

        counts = torch.zeros(int(sys.argv[1]))
        for text in ["a b c", "hello there", "one two three"]:
            with model.trace(text, remote=True):
                h = model.transformer.h[4].output.save()
            counts += (h[0] > 0).float().sum(0)
        print(int((counts > 0).sum()))
        """
    )
    table = cost_table(optimize(source))
    assert "`counts`, brought back by a session (0 downloads → 1)" in table, table
    assert "_ndif" not in table


def test_downloads_compare_only_when_their_unknown_parts_are_the_same():
    assert download_change(_cost(5000, (TOP, 3)), _cost(5000, (TOP, 1))) == "download unknown"
    assert download_change(_cost(5000, (TOP, 3)), _cost(5000, (OTHER, 3))) == "download unknown"
    assert download_change(_cost(5000), _cost(2000, (TOP, 1))) == "download unknown"
    assert download_change(_cost(5000, (TOP, 3)), _cost(5000, (TOP, 3))) == "download ="
    assert download_change(_cost(5000, (TOP, 3)), _cost(2000, (TOP, 3))) == (
        "download 3.0 KB less (the same unknown part)"  # a difference: the ratio is not known
    )
    assert download_change(_cost(2000, (TOP, 3)), _cost(3000, (TOP, 3))) == (
        "download 1.0 KB more (the same unknown part)"
    )
    assert download_change(_cost(5000), _cost(2000)) == "download 2.5× fewer"


def test_the_json_report_lists_the_values_of_unknown_size():
    result = optimize(UNKNOWN_SIZE)
    payload = json.loads(to_json([("probe.py", result)], []))
    before = payload["files"][0]["totals"]["download_unknown_before"]
    assert before == [{"name": "top", "source": TOP.source, "reason": TOP.reason, "count": 3}]
    assert payload["files"][0]["totals"]["download_unknown_after"]  # the list that brings them back
    assert payload["totals"]["download_unknown_before"] == [{**before[0], "path": "probe.py"}]
    known = json.loads(to_json([("known.py", optimize(EMPTY_ON_THE_CLIENT))], []))
    assert known["totals"]["download_unknown_before"] == known["totals"]["download_unknown_after"] == []


def test_the_markdown_report_shows_the_unknown_part_and_its_footnote():
    text = markdown_report("probe.py", optimize(UNKNOWN_SIZE))
    assert "+ ? →" in text
    assert "- `top` ← `model.lm_head.output[0, -1].topk(k).indices` (3 downloads → 0)" in text


# -- why a download grew ----------------------------------------------------------------------


def test_a_session_that_brings_back_a_list_left_empty_says_why_the_download_grew():
    # session-hoisting's own correctness fix ("(a correctness fix: `feats` stayed empty ...)",
    # trial48 min_04) labels its row, as accumulator-relocation's does
    source = HEAD + textwrap.dedent(
        """
        import torch

        feats = []
        for t in ["I love it", "I hate it", "Great stuff"]:
            with model.trace(t, remote=True):
                feats.append(model.transformer.h[6].output[0, -1].save())
        print(torch.stack(feats).shape)
        """
    )
    table = cost_table(optimize(source))
    assert "more (a correctness fix: the data now comes back)" in _row(table, "session-hoisting"), table


def test_a_correctness_fix_says_why_the_download_grew():
    result = optimize(EMPTY_ON_THE_CLIENT)
    table = cost_table(result)
    row = _row(table, "accumulator-relocation")
    assert "more (a correctness fix: the data now comes back)" in row
    assert "(a correctness fix: the data now comes back)" in _row(table, "total")
    assert "correctness" not in _row(table, "session-hoisting")  # a row that did not grow


def _grown(findings: tuple[Finding, ...]) -> Result:
    cost = PassCost("accumulator-relocation", _cost(1300), _cost(4000))
    return Result(source="", code="", findings=findings, costs=(cost,))


def _fix(message: str, status: Status = Status.APPLIED) -> Finding:
    return Finding("accumulator-relocation", message, Range.of(0, 0, 0, 0), status)


def test_the_reason_counts_the_fixes_and_needs_one():
    fixed = "`a` is now created inside the block as a saved list (a correctness fix)"
    one = _row(cost_table(_grown((_fix(fixed),))), "accumulator-relocation")
    two = _row(cost_table(_grown((_fix(fixed), _fix(fixed.replace("`a`", "`b`"))))), "accumulator-relocation")
    assert one.endswith("download 3.08× more (a correctness fix: the data now comes back)")
    assert two.endswith("download 3.08× more (2 correctness fixes: the data now comes back)")
    for findings in [(), (_fix("`a` is smaller now"),), (_fix(fixed, Status.SKIPPED),)]:
        assert _row(cost_table(_grown(findings)), "accumulator-relocation").endswith("download 3.08× more")


def test_the_unknown_parts_of_independent_windows_add_up():
    # two independent experiments: the pipeline optimizes them as windows and adds
    # their costs up, the values of unknown size with them
    second = UNKNOWN_SIZE.split("import sys", 1)[1].replace("top", "low").replace("topk(k)", "topk(j)")
    source = UNKNOWN_SIZE + second.replace("k = int(sys.argv[1])", "j = int(sys.argv[2])")
    assert windows.plan(source, ast.parse(source)) is not None
    before = optimize(source).costs[0].before.download_unknown
    assert sorted((value.name, n) for value, n in before.counts) == [("low", 3), ("top", 3)]


# -- loops of unknown length ------------------------------------------------------------------

# a loop over the rows of a file: how many there are is known only when the script runs
FILE_ROWS = HEAD + textwrap.dedent(
    """
    import sys

    rows = open(sys.argv[1]).read().splitlines()
    with model.trace("The Eiffel Tower is in", remote=True):
        base = model.lm_head.output[0, -1].save()
    for row in rows:
        with model.trace(row, remote=True):
            h = model.transformer.h[0].output[0, -1].save()
    """
)


def test_a_loop_of_unknown_length_shows_as_n_with_a_footnote_naming_it():
    result = optimize(FILE_ROWS)
    table = cost_table(result, "probe.py")
    first = _row(table, "nnsight-05-failures")
    assert first.split()[1:4] == ["1", "+", "N"]  # one request, then one per row: never 8
    assert "KB·N" in first  # the download scales with N too
    assert "N = the iterations of `for row in rows` (probe.py:9)" in table
    assert "→ 1 " in _row(table, "total")  # one session however long the file is
    assert "requests (1 + N)× fewer" in _row(table, "total")


# a function that calls itself: how deep it goes depends on what its traces return
RECURSION = HEAD + textwrap.dedent(
    """
    def search(lo, hi):
        with model.trace("The Eiffel Tower is in", remote=True):
            norm = model.transformer.h[(lo + hi) // 2].output[0, -1].norm().save()
        if hi - lo <= 1:
            return lo
        mid = (lo + hi) // 2
        return search(lo, mid) if norm.item() > 1 else search(mid, hi)

    print(search(0, 12))
    """
)


def test_a_function_that_calls_itself_is_billed_as_a_loop_of_unknown_length():
    """A trial's bisection was billed one request where it sent four: the walk followed
    one run of the function and none of the calls it makes of itself."""
    table = cost_table(optimize(RECURSION), "probe.py")
    assert _row(table, "total").split()[1:4] == ["N", "→", "N"]
    assert "N = the iterations of the recursion of `search` (probe.py:4 in `search`)" in table


def test_the_json_report_writes_a_number_of_unknown_loops_as_an_object():
    payload = json.loads(to_json([("probe.py", optimize(FILE_ROWS))], []))
    entry = payload["files"][0]
    requests = entry["totals"]["requests_before"]
    assert requests == {"constant": 1, "terms": [{"coefficient": 1, "loops": ["N"]}], "text": "1 + N"}
    assert entry["totals"]["requests_after"] == 1
    assert entry["unknown_loops"] == [{"symbol": "N", "loop": "for row in rows", "function": "", "lines": [9]}]
    two = json.loads(to_json([("a.py", optimize(FILE_ROWS)), ("b.py", optimize(FILE_ROWS))], []))
    total = two["totals"]["requests_before"]
    assert total["constant"] == 2 and [t["loops"] for t in total["terms"]] == [["a.py:N"], ["b.py:N"]]


def test_the_markdown_report_names_the_loops_of_unknown_length():
    text = markdown_report("probe.py", optimize(FILE_ROWS))
    assert "**1 + N → 1 requests" in text
    assert "- N = the iterations of `for row in rows` (probe.py:9)" in text


def test_a_change_too_small_for_three_digits_is_said_in_percent():
    """`download 1× fewer` (a trial's report: 1.2 MB -> 1.2 MB) read as no change."""
    said = {(before, after): download_change(Cost(download_bytes=before), Cost(download_bytes=after))
            for before, after in [(1_200_000, 1_197_600), (1_000, 1_004), (1_000, 980), (32, 1)]}
    assert said == {(1_200_000, 1_197_600): "download 0.2% less", (1_000, 1_004): "download 0.4% more",
                    (1_000, 980): "download 1.02× fewer", (32, 1): "download 32× fewer"}, said

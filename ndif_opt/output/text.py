"""Renderings of results: findings lines, the per-pass cost table, diffs, JSON."""

from __future__ import annotations

import difflib
import json

from ndif_opt.types import (
    Cost,
    Count,
    Finding,
    Number,
    Result,
    Status,
    UnknownDownload,
    UnknownDownloads,
    UnknownLoop,
    default_names,
    direction,
    grows,
    is_known,
    may_be_positive,
)
from ndif_opt.wording import count_text, counted, human_bytes

_STATUS_WORDS = {
    Status.SKIPPED: "not fixed",
    Status.UNSAFE_NOT_APPLIED: "unsafe fix available",
    Status.SUPPRESSED: "suppressed",
}


def status_word(finding: Finding, written: bool) -> str:
    """``fixed`` only where the output holds the fix (``written``); ``fixable`` where nothing
    was written (``--diff``, a report); the other statuses as they are."""
    if finding.status is Status.APPLIED:
        return "fixed" if written else "fixable"
    return _STATUS_WORDS[finding.status]


def finding_line(path: str, finding: Finding, written: bool = True) -> str:
    line = finding.range.start.line + 1
    col = finding.range.start.character + 1
    text = f"{path}:{line}:{col}: {finding.pass_id} [{status_word(finding, written)}] {finding.worded(written)}"
    if finding.reason:
        text += f" — {finding.reason}"
    return text


def unified_diff(path: str, before: str, after: str) -> str:
    """A diff that `patch -p0` and `git apply` take: the file names are the path itself
    (the "(original)"/"(optimized)" labels go where a date would, after a tab), and a
    last line without a newline is marked as such."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=path,
        tofile=path,
        fromfiledate="(original)",
        tofiledate="(optimized)",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def totals(result: Result) -> tuple[Cost, Cost]:
    if not result.costs:
        return Cost(), Cost()
    return result.costs[0].before, result.costs[-1].after


def _ratio(before: Number | Count, after: Number | Count, names: dict[UnknownLoop, str] | None = None) -> str:
    """`32× fewer`, `1.02× more` or `=`: the direction in words (a bare before/after
    ratio reads `0.984×` for an increase); `N× fewer` where a count depends on a loop of
    unknown length."""
    if before == after:
        return "="
    if not (is_known(before) and is_known(after)):
        return _symbolic_ratio(before, after, names)
    if after == 0:
        return "all gone"
    if before == 0:
        return "new"
    ratio, word = (before / after, "fewer") if after < before else (after / before, "more")
    return _times(ratio, word)


def _times(ratio: float, word: str) -> str:
    """`32× fewer`, `1.02× more`; a change too small for three digits (`1× fewer` read as
    no change) in percent: `0.4% less`."""
    if f"{ratio:.3g}" == "1":
        share = (1 - 1 / ratio) if word == "fewer" else (ratio - 1)
        return f"{share * 100:.1g}% {'less' if word == 'fewer' else 'more'}"
    return (f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.3g}×") + f" {word}"


def _symbolic_ratio(before: Number | Count, after: Number | Count, names) -> str:
    word = direction(before - after)
    if word is None:
        return "="
    high, low = (before, after) if word == "fewer" else (after, before)
    try:
        ratio = high / low if low else None
    except (ValueError, TypeError):
        ratio = None
    if ratio is None:
        return word
    if is_known(ratio):
        return _times(ratio, word)
    text = count_text(ratio, names, number=lambda v: f"{v:.3g}")
    return (f"({text})" if " " in text else text) + f"× {word}"


# ---------------------------------------------------------------------------------------
# Loops of unknown length
# ---------------------------------------------------------------------------------------


def _loop_lines(source: str):
    """syntax.loops.loop_lines, imported when a table has loops of unknown length (it
    imports libcst, which a command line that prints nothing else need not load)."""
    from ndif_opt.syntax.loops import loop_lines

    return loop_lines(source)


def unknown_loops(result: Result) -> list[UnknownLoop]:
    """Every loop of unknown length a row of the cost table depends on, by where it is
    in the source (then by its header)."""
    found: dict[UnknownLoop, None] = {}
    for pc in result.costs:
        for cost in (pc.before, pc.after):
            found.update(dict.fromkeys(cost.unknown_loops))
    if not found:
        return []
    lines = _loop_lines(result.source)
    return sorted(found, key=lambda loop: (lines.get(loop.lines_key, [10**9])[0], loop))


def loop_names(result: Result) -> dict[UnknownLoop, str]:
    """N, or N₁, N₂, …: the symbol of each loop of unknown length in the result's table."""
    return default_names(unknown_loops(result))


def loop_notes(result: Result, path: str = "", names: dict[UnknownLoop, str] | None = None) -> list[str]:
    """One line per loop of unknown length: its symbol, its header, where it is."""
    loops = unknown_loops(result)
    if not loops:
        return []
    names = names if names is not None else default_names(loops)
    lines = _loop_lines(result.source)
    notes = []
    for loop in loops:
        at = lines.get(loop.lines_key)
        where = ", ".join(f"{path}:{line}" if path else f"line {line}" for line in at) if at else "in code a pass wrote"
        inside = f" in `{loop.function}`" if loop.function else ""
        notes.append(f"{names[loop]} = the iterations of {loop.named} ({where}{inside})")
    return notes


LOOPS_HEADING = "N = a loop whose length is not known before the script runs (the data it reads):"


# ---------------------------------------------------------------------------------------
# Downloads of unknown size, and why a download grew
# ---------------------------------------------------------------------------------------


def download_text(cost: Cost, names: dict[UnknownLoop, str] | None = None) -> str:
    """``279.6 KB``, or ``279.6 KB + ?`` when the download holds values of a size not
    known statically (the number counts only their framing)."""
    text = human_bytes(cost.download_bytes, names)
    return f"{text} + ?" if cost.download_unknown else text


def downloads_comparable(before: Cost, after: Cost) -> bool:
    """Do the two downloads differ by their known parts only — the same values of unknown
    size on both sides, each downloaded as many times?"""
    return before.download_unknown == after.download_unknown


def download_change(before: Cost, after: Cost, names: dict[UnknownLoop, str] | None = None) -> str:
    """``download 4.46× fewer``; where part of a download is of unknown size, the change
    of the known part when the unknown parts are the same, else ``download unknown``."""
    if not downloads_comparable(before, after):
        return "download unknown"
    if not before.download_unknown:
        return f"download {_ratio(before.download_bytes, after.download_bytes, names)}"
    change = after.download_bytes - before.download_bytes
    if change == 0:
        return "download ="
    # a ratio of the known parts is not the ratio of the downloads: their difference is
    more = grows(before.download_bytes, after.download_bytes)
    return f"download {human_bytes(change if more else -change, names)} {'more' if more else 'less'} (the same unknown part)"


def _download_grew(before: Cost, after: Cost) -> bool:
    grew = after.download_unknown - before.download_unknown  # the values downloaded more often
    return grows(before.download_bytes, after.download_bytes) or bool(grew)


# a pass marks a finding whose rewrite makes the script correct on NDIF (not only
# cheaper) with these words in its message: "(a correctness fix)", or "(a correctness fix:"
# and what it fixes (session-hoisting names the containers that stayed empty)
CORRECTNESS_MARK = "(a correctness fix"


def growth_reason(result: Result, pass_id: str | None, before: Cost, after: Cost) -> str | None:
    """Why the download of a pass's row (``None``: the total's) grew, from the fixes the
    pass applied: a correctness fix brings back data that stayed on the server. None when
    it did not grow, or no fix says why."""
    if not _download_grew(before, after):
        return None
    fixes = [
        f for f in result.findings
        if f.applied and CORRECTNESS_MARK in f.message and pass_id in (None, f.pass_id)
    ]
    if not fixes:
        return None
    what = "a correctness fix" if len(fixes) == 1 else f"{len(fixes)} correctness fixes"
    return f"{what}: the data now comes back"


def _download_column(result: Result, pass_id: str | None, before: Cost, after: Cost,
                     names: dict[UnknownLoop, str] | None = None) -> str:
    text = download_change(before, after, names)
    reason = growth_reason(result, pass_id, before, after)
    return f"{text} ({reason})" if reason else text


def unknown_downloads(result: Result) -> list[UnknownDownload]:
    """Every value of unknown size some row of the cost table downloads, in order."""
    seen: dict[UnknownDownload, None] = {}
    for pc in result.costs:
        for cost in (pc.before, pc.after):
            seen.update(dict.fromkeys(cost.download_unknown.values))
    return list(seen)


def unknown_download_notes(result: Result) -> list[str]:
    """One line per value of unknown size: its name, what computes it, how many times the
    original and the optimized script download it, and why its size is not known."""
    before, after = totals(result)
    names = loop_names(result)
    return [
        f"{_downloaded_as(value, result)}"
        f"({counted_in(before.download_unknown.count(value), 'download', names)} → "
        f"{count_text(after.download_unknown.count(value), names)}): "
        f"{value.reason}"
        for value in unknown_downloads(result)
    ]


def _downloaded_as(value: UnknownDownload, result: Result) -> str:
    """`name` ← `code`; for a name ndif-opt made (a session's log of values brought back),
    the code alone: the name is none of the script's."""
    if value.name in result.introduced:
        return f"`{_shortened(value.source)}`, brought back by a session "
    return f"`{value.name}` ← `{_shortened(value.source)}` "


def counted_in(value: Number | Count, noun: str, names: dict[UnknownLoop, str]) -> str:
    """:func:`counted` with the table's symbols for loops of unknown length."""
    if is_known(value):
        return counted(value, noun)
    return f"{count_text(value, names)} {noun}s"


def _shortened(code: str, limit: int = 60) -> str:
    return code if len(code) <= limit else code[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------
# The text table
# ---------------------------------------------------------------------------------------


def cost_table(result: Result, path: str = "") -> str:
    """The per-pass table; under it, what each symbol N of a loop of unknown length
    stands for (``path``:line) and the values of unknown size."""
    names = loop_names(result)
    rows = [("pass", "requests", "download", "forward passes", "layer evals", "est. time", "")]
    for pc in result.costs:
        rows.append(_row(result, pc.pass_id, pc.before, pc.after, names))
    before, after = totals(result)
    rows.append(_row(result, None, before, after, names))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for index, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0 or index == len(rows) - 2:
            out.append("  ".join("-" * w for w in widths))
    loops = loop_notes(result, path, names)
    if loops:
        out += ["", f"  {LOOPS_HEADING}"]
        out += [f"    {note}" for note in loops]
    notes = unknown_download_notes(result)
    if notes:
        out += ["", "  + ? = values of a size not known statically (the download counts their framing only):"]
        out += [f"    {note}" for note in notes]
    return "\n".join(out) + "\n"


def plain_count(value: Number | Count, names: dict[UnknownLoop, str] | None = None) -> str:
    """``26624``, ``1 + 2·N``: a count as the tables write it (no thousands separator)."""
    return count_text(value, names, number=_plain)


def _plain(value: Number) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def seconds_text(value: Number | Count, names: dict[UnknownLoop, str] | None = None, digits: str = ".1f") -> str:
    """``2.1 s``; ``2.1 s + 2.0 s·N``."""
    if isinstance(value, Count):
        return value.text(lambda v: _seconds_number(v, digits), names)
    return f"{value:{digits}} s"


def _seconds_number(value: float, digits: str) -> str:
    """A time of a term: ``2.0 s``, and ``0.012 s`` rather than ``0.0 s`` (per iteration)."""
    return f"{value:{digits}} s" if value == 0 or abs(value) >= 0.1 else f"{value:.2g} s"


def _row(result: Result, pass_id: str | None, before: Cost, after: Cost,
         names: dict[UnknownLoop, str] | None = None) -> tuple[str, ...]:
    """A row of the table: a pass's (``pass_id``) or the total (None)."""
    return (
        pass_id or "total",
        f"{plain_count(before.requests, names)} → {plain_count(after.requests, names)}",
        f"{download_text(before, names)} → {download_text(after, names)}",
        f"{plain_count(before.forward_passes, names)} → {plain_count(after.forward_passes, names)}",
        f"{plain_count(before.layer_evaluations, names)} → {plain_count(after.layer_evaluations, names)}",
        f"{seconds_text(before.seconds, names)} → {seconds_text(after.seconds, names)}",
        f"requests {_ratio(before.requests, after.requests, names)}, "
        f"{_download_column(result, pass_id, before, after, names)}",
    )


# The JSON report. A number of the bill is a JSON number, or — where it depends on loops
# whose length is not known before the script runs — an object
#     {"constant": 1, "terms": [{"coefficient": 2, "loops": ["N"]}], "text": "1 + 2·N"}
# (the value is constant + Σ coefficient × Π iterations of its loops), and the file's
# "unknown_loops" says what each symbol stands for:
#     [{"symbol": "N", "loop": "for row in rows", "function": "main", "lines": [12]}]
# ("function": "" at module level; "lines": 1-based, of the source as written). In the
# totals over several files a symbol is qualified by its file: "probe.py:N".


def result_dict(path: str, result: Result, qualified: bool = False, written: bool = False) -> dict:
    """One file's entry; ``qualified``: its symbols prefixed with its path (for totals
    over several files); ``written``: the output holds the fixes (findings say done, not would)."""
    before, after = totals(result)
    names = loop_names(result)
    if qualified:
        names = {loop: f"{path}:{name}" for loop, name in names.items()}
    return {
        "path": path,
        "changed": result.changed,
        "totals": _cost_pair(before, after, names),
        "passes": [{"id": pc.pass_id, **_cost_pair(pc.before, pc.after, names)} for pc in result.costs],
        "unknown_loops": _loops_list(result, names),
        "findings": [f.to_dict(written) for f in result.findings],
        "assumptions": list(result.assumptions),
    }


def _loops_list(result: Result, names: dict[UnknownLoop, str]) -> list[dict]:
    lines = _loop_lines(result.source) if names else {}
    return [
        {"symbol": names[loop], "loop": loop.header, "function": loop.function,
         "lines": lines.get(loop.lines_key, [])}
        for loop in unknown_loops(result)
    ]


def json_number(value: Number | Count, names: dict[UnknownLoop, str] | None = None) -> Number | dict:
    """A number of the bill as the JSON report writes it (see above)."""
    if is_known(value):
        return value
    names = names if names is not None else default_names(value.loops)
    return {
        "constant": value.constant,
        "terms": [{"coefficient": c, "loops": [names[loop] for loop in m]} for m, c in value.terms],
        "text": value.text(_plain, names),
    }


def _cost_pair(before: Cost, after: Cost, names: dict[UnknownLoop, str]) -> dict:
    pair = {}
    for key in (
        "requests", "upload_bytes", "download_bytes", "forward_passes", "layer_evaluations", "compute_flops", "seconds"
    ):
        pair[f"{key}_before"] = json_number(getattr(before, key), names)
        pair[f"{key}_after"] = json_number(getattr(after, key), names)
    # the values download_bytes counts the framing of only: a download is a lower bound
    # while either list holds one
    pair["download_unknown_before"] = _unknown_list(before, names)
    pair["download_unknown_after"] = _unknown_list(after, names)
    return pair


def _unknown_list(cost: Cost, names: dict[UnknownLoop, str]) -> list[dict]:
    return [
        {"name": value.name, "source": value.source, "reason": value.reason, "count": json_number(n, names)}
        for value, n in cost.download_unknown.counts
        if may_be_positive(n)
    ]


def to_json(entries: list[tuple[str, Result]], errors: list[dict], written: bool = False) -> str:
    files = [result_dict(path, result, qualified=len(entries) > 1, written=written) for path, result in entries]
    total: dict = {}
    for entry in files:
        _add_into(total, entry["totals"], entry["path"])
    payload = {
        "version": 1,
        "totals": total,
        "passes": files[0]["passes"] if len(files) == 1 else _merge_passes(files),
        "files": files,
        "errors": errors,
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _add_into(target: dict, costs: dict, path: str) -> None:
    """Add one file's cost fields to totals over files: numbers add up, and the values of
    unknown size are listed with the file they belong to."""
    for key, value in costs.items():
        if isinstance(value, list):
            target[key] = target.get(key, []) + [{**item, "path": path} for item in value]
        else:
            target[key] = _json_sum(target.get(key, 0), value)


def _json_sum(a: Number | dict, b: Number | dict) -> Number | dict:
    """Two numbers of the JSON report added (their symbols are of different files)."""
    if not isinstance(a, dict) and not isinstance(b, dict):
        return a + b
    a, b = (x if isinstance(x, dict) else {"constant": x, "terms": [], "text": _plain(x)} for x in (a, b))
    texts = [t["text"] for t in (a, b) if t["text"] != "0"]
    return {"constant": a["constant"] + b["constant"], "terms": a["terms"] + b["terms"], "text": " + ".join(texts)}


def _merge_passes(files: list[dict]) -> list[dict]:
    merged: dict[str, dict] = {}
    for entry in files:
        for p in entry["passes"]:
            target = merged.setdefault(p["id"], {"id": p["id"]})
            _add_into(target, {key: value for key, value in p.items() if key != "id"}, entry["path"])
    return list(merged.values())


# ---------------------------------------------------------------------------------------
# Markdown (pull-request comments)
# ---------------------------------------------------------------------------------------

def _seconds_text(value: Number | Count, names: dict[UnknownLoop, str] | None = None) -> str:
    if isinstance(value, Count):
        return value.text(lambda v: _seconds_text(v), names)
    return f"{value:,.0f} s" if value >= 100 else _seconds_number(value, ".1f")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_line(result: Result) -> str:
    """``8 → 1 requests · 242.3 KB → 1.6 KB download · 16.0 s → 2.0 s estimated``
    (``N → 1 requests · …`` where a loop of unknown length counts: see the table's notes)."""
    before, after = totals(result)
    names = loop_names(result)
    return (
        f"{plain_count(before.requests, names)} → {plain_count(after.requests, names)} requests · "
        f"{download_text(before, names)} → {download_text(after, names)} download · "
        f"{_seconds_text(before.seconds, names)} → {_seconds_text(after.seconds, names)} estimated"
    )


def cost_table_markdown(result: Result) -> str:
    """The per-pass cost table as a GitHub-flavoured markdown table."""
    lines = [
        "| pass | requests | upload | download | forward passes | layer evaluations | est. time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    names = loop_names(result)

    def row(name: str, b: Cost, a: Cost) -> str:
        return (
            f"| {name} | {plain_count(b.requests, names)} → {plain_count(a.requests, names)} "
            f"| {human_bytes(b.upload_bytes, names)} → {human_bytes(a.upload_bytes, names)} "
            f"| {download_text(b, names)} → {download_text(a, names)} "
            f"| {plain_count(b.forward_passes, names)} → {plain_count(a.forward_passes, names)} "
            f"| {plain_count(b.layer_evaluations, names)} → {plain_count(a.layer_evaluations, names)} "
            f"| {_seconds_text(b.seconds, names)} → {_seconds_text(a.seconds, names)} |"
        )

    for pc in result.costs:
        lines.append(row(f"`{pc.pass_id}`", pc.before, pc.after))
    before, after = totals(result)
    lines.append(row("**total**", before, after))
    return "\n".join(lines) + "\n"


def markdown_report(path: str, result: Result, *, diff: bool = True, written: bool = False) -> str:
    """One file's report for a pull-request comment: summary, per-pass table, findings,
    assumptions and the diff (the long parts folded in ``<details>``). ``written``: the
    output holds the fixes (findings say "fixed"; otherwise "fixable", worded as proposals)."""
    out = [f"### ndif-opt: `{path}`", ""]
    if not result.costs:
        out += ["No nnsight code to optimize.", ""]
        return "\n".join(out)
    out += [f"**{summary_line(result)}**", "", cost_table_markdown(result)]
    loops = loop_notes(result, path)
    if loops:
        out += [LOOPS_HEADING, ""]
        out += [f"- {_md_cell(note)}" for note in loops]
        out.append("")
    notes = unknown_download_notes(result)
    if notes:
        out += ["+ ? = values of a size not known statically (the download counts their framing only):", ""]
        out += [f"- {_md_cell(note)}" for note in notes]
        out.append("")
    if result.findings:
        out += [f"<details><summary>Findings ({len(result.findings)})</summary>", ""]
        for finding in result.findings:
            line = finding.range.start.line + 1
            text = (f"- line {line}: `{finding.pass_id}` ({status_word(finding, written)}) "
                    f"{_md_cell(finding.worded(written))}")
            if finding.reason:
                text += f" — {_md_cell(finding.reason)}"
            out.append(text)
        out += ["", "</details>", ""]
    if result.assumptions:
        out += ["<details><summary>Assumptions of the cost model</summary>", ""]
        out += [f"- {_md_cell(a)}" for a in result.assumptions]
        out += ["", "</details>", ""]
    if diff and result.changed:
        text = unified_diff(path, result.source, result.code)
        fence = "````" if "```" in text else "```"
        out += ["<details><summary>Diff</summary>", "", f"{fence}diff", text.rstrip("\n"), fence, "", "</details>", ""]
    return "\n".join(out)


def _download_sum(costs) -> Cost:
    """The download of several files: their bytes and their values of unknown size."""
    download, unknown = 0, UnknownDownloads()
    for cost in costs:
        download += cost.download_bytes
        unknown += cost.download_unknown
    return Cost(download_bytes=download, download_unknown=unknown)


def markdown_many(entries: list[tuple[str, Result]], errors: list[dict] | None = None, written: bool = False) -> str:
    """Several files: a totals line first, then each file's report (``written``: see markdown_report)."""
    out = []
    if len(entries) > 1:
        before = plain_count(sum((totals(r)[0].requests for _, r in entries)))
        after = plain_count(sum((totals(r)[1].requests for _, r in entries)))
        down_b = _download_sum(totals(r)[0] for _, r in entries)
        down_a = _download_sum(totals(r)[1] for _, r in entries)
        changed = sum(1 for _, r in entries if r.changed)
        out += [
            f"## ndif-opt: {len(entries)} files, {changed} would change",
            "",
            f"**{before} → {after} requests · {download_text(down_b)} → {download_text(down_a)} download**",
            "",
        ]
    for path, result in entries:
        out.append(markdown_report(path, result, written=written))
    for error in errors or []:
        out.append(f"- ⚠️ `{error.get('path')}`: {_md_cell(str(error.get('message')))}")
    return "\n".join(out).rstrip("\n") + "\n"

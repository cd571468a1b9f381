"""``--report --format html``: one self-contained page per run.

The page holds, for every file: the summary, the per-pass cost table, a chart of
requests, download and estimated time after each pass (log scales, inline SVG), the
findings, the cost model's assumptions and a side-by-side diff. Everything is inline —
CSS in a ``<style>`` element, the chart as ``<svg>`` — and nothing is fetched: no
scripts, no fonts, no images, no external links, so the file can be attached to a CI run
or opened offline.
"""

from __future__ import annotations

import difflib
import html
import math
import re

from ndif_opt.output.text import (
    LOOPS_HEADING,
    direction,
    download_change,
    download_text,
    downloads_comparable,
    growth_reason,
    loop_names,
    loop_notes,
    plain_count,
    seconds_text,
    status_word,
    summary_line,
    totals,
    unknown_download_notes,
)
from ndif_opt.types import Cost, Count, Number, Result, Status, UnknownLoop, is_known
from ndif_opt.wording import human_bytes

__all__ = ["render_html", "cost_chart_svg"]

_BADGE = {  # the class of a status's badge
    Status.APPLIED: "applied",
    Status.SKIPPED: "skipped",
    Status.UNSAFE_NOT_APPLIED: "unsafe",
    Status.SUPPRESSED: "suppressed",
}

_CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #ffffff; --soft: #f6f8fa;
        --add: #dafbe1; --sub: #ffebe9; --chg: #fff8c5; --req: #0969da; --down: #8250df; --time: #bc4c00; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1280px; padding: 24px; color: var(--fg); background: var(--bg);
       font: 14px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", Arial, sans-serif; overflow-wrap: break-word; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 4px; padding-top: 16px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 8px; }
code, pre, .diff td { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12px; }
.summary { font-size: 15px; font-weight: 600; margin: 4px 0 12px; }
.muted { color: var(--muted); }
.scrolls { overflow-x: auto; max-width: 100%; }  /* a table wider than the page scrolls in its box */
table.costs { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; }
table.costs th, table.costs td { border: 1px solid var(--line); padding: 4px 6px; text-align: right; white-space: nowrap; }
table.costs th:first-child, table.costs td:first-child { text-align: left; }
table.costs thead th { background: var(--soft); white-space: normal; vertical-align: bottom; }
table.costs tr.total td { font-weight: 600; background: var(--soft); }
table.costs td .note { display: block; white-space: normal; min-width: 10em; font-size: 12px; }
.better { color: #1a7f37; } .worse { color: #cf222e; } td.unknown { font-style: italic; }
p.legend { font-size: 12px; margin: 0 0 8px; }
svg.chart { display: block; margin: 8px 0; max-width: 100%; height: auto; }
svg.chart text { font: 11px -apple-system, "Segoe UI", Arial, sans-serif; fill: var(--fg); }
svg.chart .axis { stroke: var(--line); } svg.chart .grid { stroke: #eef1f4; }
svg.chart .requests { fill: var(--req); } svg.chart .download { fill: var(--down); } svg.chart .time { fill: var(--time); }
ul.findings { padding-left: 20px; } ul.findings li { margin: 2px 0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 11px; font-weight: 600; }
.badge.applied { background: #dafbe1; color: #116329; } .badge.skipped { background: #eef1f4; color: #59636e; }
.badge.unsafe { background: #fff8c5; color: #7d4e00; } .badge.suppressed { background: #eef1f4; color: #59636e; }
/* the widths come from the columns (the line numbers as wide as the longest): each side's
   code gets half of the rest, and wraps at spaces before it breaks a word */
table.diff { border-collapse: collapse; width: 100%; border: 1px solid var(--line); table-layout: fixed; }
table.diff td { padding: 0 4px; vertical-align: top; white-space: pre-wrap; overflow-wrap: break-word; }
table.diff td.diff_header { text-align: right; color: var(--muted); background: var(--soft); }
table.diff th { background: var(--soft); text-align: left; padding: 4px 8px; font-weight: 600;
                overflow-wrap: anywhere; }
table.diff tbody { border-top: 1px solid var(--line); }
.diff_add { background: var(--add); } .diff_chg { background: var(--chg); } .diff_sub { background: var(--sub); }
span.diff_add { background: #aceebb; } span.diff_chg { background: #f5e08f; } span.diff_sub { background: #ffcecb; }
"""


def render_html(entries: list[tuple[str, Result]], *, title: str = "ndif-opt report",
                errors: list[dict] | None = None, written: bool = False) -> str:
    """The report page for ``[(path, result), ...]``; ``written``: the output holds the fixes
    (findings say "fixed"; otherwise "fixable", worded as proposals)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if len(entries) > 1:
        changed = sum(1 for _, r in entries if r.changed)
        parts.append(f'<p class="muted">{len(entries)} files, {changed} would change.</p>')
    for index, (path, result) in enumerate(entries):
        parts.append(_file_section(index, path, result, written))
    if errors:
        parts.append("<h2>Errors</h2><ul>")
        parts += [f"<li><code>{_e(str(e.get('path')))}</code>: {_with_code(str(e.get('message')))}</li>" for e in errors]
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _file_section(index: int, path: str, result: Result, written: bool = False) -> str:
    out = [f'<section class="file" id="file-{index}">', f"<h2><code>{_e(path)}</code></h2>"]
    if not result.costs:
        out.append('<p class="muted">No nnsight code to optimize.</p></section>')
        return "\n".join(out)
    out.append(f'<p class="summary">{_e(summary_line(result))}</p>')
    out.append("<h3>Cost per pass</h3>")
    out.append(_cost_table(index, result))
    out.append(LEGEND)
    loops = loop_notes(result, path)
    if loops:
        out.append(f'<p class="muted">{_with_code(LOOPS_HEADING)}</p>')
        out.append('<ul class="unknown-loops">' + "".join(f"<li>{_with_code(n)}</li>" for n in loops) + "</ul>")
    notes = unknown_download_notes(result)
    if notes:
        out.append('<p class="muted">+ ? = values of a size not known statically '
                   "(the download counts their framing only):</p>")
        out.append('<ul class="unknown-downloads">' + "".join(f"<li>{_with_code(n)}</li>" for n in notes) + "</ul>")
    out.append('<h3>Requests, download and estimated time after each pass <span class="muted">(log scales)</span></h3>')
    out.append(cost_chart_svg(result, element_id=f"cost-chart-{index}"))
    if result.findings:
        out.append(f"<h3>Findings ({len(result.findings)})</h3>")
        out.append('<ul class="findings">')
        for finding in result.findings:
            reason = f" — {_with_code(finding.reason)}" if finding.reason else ""
            out.append(
                f'<li><span class="badge {_BADGE[finding.status]}">{_e(status_word(finding, written))}</span> '
                f"line {finding.range.start.line + 1}: "
                f"<code>{_e(finding.pass_id)}</code> {_with_code(finding.worded(written))}{reason}</li>"
            )
        out.append("</ul>")
    if result.assumptions:
        out.append("<h3>Assumptions of the cost model</h3><ul>")
        out += [f"<li>{_with_code(a)}</li>" for a in result.assumptions]
        out.append("</ul>")
    out.append("<h3>Diff</h3>")
    out.append(_side_by_side(path, result))
    out.append("</section>")
    return "\n".join(out)


def _cost_table(index: int, result: Result) -> str:
    head = (
        f'<div class="scrolls"><table class="costs" id="cost-table-{index}"><thead><tr><th>pass</th><th>requests</th><th>upload</th>'
        "<th>download</th><th>forward passes</th><th>layer evaluations</th><th>est. time</th></tr></thead><tbody>"
    )
    rows = [head]
    names = loop_names(result)

    def cells(pass_id: str | None, b: Cost, a: Cost) -> str:
        pairs = [
            (b.requests, a.requests, plain_count),
            (b.upload_bytes, a.upload_bytes, human_bytes),
            (b.forward_passes, a.forward_passes, plain_count),
            (b.layer_evaluations, a.layer_evaluations, plain_count),
            (b.seconds, a.seconds, _time),
        ]
        out = []
        for before, after, fmt in pairs:
            shown = fmt(before, names), fmt(after, names)
            out.append(f'<td class="{_direction(before, after, *shown)}">{_e(shown[0])} → {_e(shown[1])}</td>')
        out.insert(2, _download_cell(result, pass_id, b, a, names))
        return "".join(out)

    for pc in result.costs:
        rows.append(
            f'<tr data-pass="{_e(pc.pass_id)}"><td><code>{_e(pc.pass_id)}</code></td>'
            f"{cells(pc.pass_id, pc.before, pc.after)}</tr>"
        )
    before, after = totals(result)
    rows.append(f'<tr class="total"><td>total</td>{cells(None, before, after)}</tr>')
    rows.append("</tbody></table></div>")
    return "".join(rows)


LEGEND = ('<p class="muted legend"><span class="better">green</span>: fewer or smaller (better) · '
          '<span class="worse">red</span>: more or larger (worse) · black: the same, as shown · '
          '<i>italic</i>: downloads of a size not known statically, which do not compare</p>')


def _direction(before: Number | Count, after: Number | Count, shown_before: str, shown_after: str) -> str:
    """The class of a before → after cell: better (fewer, smaller), worse, or none where the
    figures read the same (4.5 KB → 4.5 KB is not worse for a few bytes more)."""
    if shown_before == shown_after:
        return ""
    return {"fewer": "better", "more": "worse"}.get(direction(before - after), "")


def _download_cell(result: Result, pass_id: str | None, before: Cost, after: Cost,
                   names: dict[UnknownLoop, str] | None = None) -> str:
    """Better or worse only where the downloads compare (the same values of unknown size
    on both sides); the reason a download grew, where a fix says."""
    comparable = downloads_comparable(before, after)
    shown = download_text(before, names), download_text(after, names)
    css = _direction(before.download_bytes, after.download_bytes, *shown) if comparable else "unknown"
    text = f"{shown[0]} → {shown[1]}"
    # with values of unknown size, the words say how the downloads compare, if they do
    notes = [download_change(before, after, names)] if before.download_unknown or after.download_unknown else []
    reason = growth_reason(result, pass_id, before, after)
    if reason:
        notes.append(reason)
    note = f' <span class="muted note">({_e("; ".join(notes))})</span>' if notes else ""
    return f'<td class="{css}">{_e(text)}{note}</td>'


def _time(seconds: Number | Count, names: dict[UnknownLoop, str] | None = None) -> str:
    if not is_known(seconds):
        return seconds_text(seconds, names)
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.1f} s"


def _one_iteration(value: Number | Count) -> float:
    """A bar's height: a loop of unknown length drawn at one iteration (its figure says N)."""
    return float(value if is_known(value) else value.at(1))


# ---------------------------------------------------------------------------------------
# The chart
# ---------------------------------------------------------------------------------------

# (css class, label, the number a bar shows, the text of a cost's figure)
_METRICS = (
    ("requests", "requests", lambda c: c.requests,
     lambda c, names: f"{c.requests:,.0f}" if is_known(c.requests) else plain_count(c.requests, names)),
    ("download", "download", lambda c: c.download_bytes, download_text),  # its known part, then `+ ?`
    ("time", "est. time", lambda c: c.seconds, lambda c, names: _time(c.seconds, names)),
)


def cost_chart_svg(result: Result, *, element_id: str = "cost-chart") -> str:
    """Three bar panels — requests, download bytes, estimated seconds — over the stages
    "original" and "after <pass>", each on its own log-10 scale."""
    stages = [("original", result.costs[0].before if result.costs else Cost())]
    stages += [(pc.pass_id, pc.after) for pc in result.costs]
    names = loop_names(result)
    panel_w, panel_h, gap = 400, 260, 24
    top, bottom, left = 28, 96, 56
    plot_h = panel_h - top - bottom
    width = len(_METRICS) * panel_w + (len(_METRICS) - 1) * gap
    out = [
        f'<svg class="chart" id="{_e(element_id)}" '
        f'viewBox="0 0 {width} {panel_h}" width="{width}" height="{panel_h}" role="img" '
        f'aria-label="requests, download and estimated time after each pass, log scales">'
    ]
    for m, (css, label, get, text) in enumerate(_METRICS):
        x0 = m * (panel_w + gap)
        values = [max(_one_iteration(get(cost)), 0.0) for _, cost in stages]
        low, high = _log_range(values)
        plot_w = panel_w - left - 8
        out.append(f'<g class="panel" data-metric="{css}" transform="translate({x0},0)">')
        out.append(f'<text x="{left}" y="16" font-weight="600">{_e(label)}</text>')
        for exponent in range(low, high + 1):
            y = top + plot_h - (exponent - low) / max(high - low, 1) * plot_h
            out.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(
                f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_e(_tick(css, exponent))}</text>'
            )
        out.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
        out.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}"/>')
        slot = plot_w / max(len(stages), 1)
        bar = max(min(slot * 0.7, 36), 2)
        for i, ((stage, cost), value) in enumerate(zip(stages, values)):
            height = _bar_height(value, low, high, plot_h)
            x = left + i * slot + (slot - bar) / 2
            y = top + plot_h - height
            out.append(
                f'<rect class="{css}" data-stage="{_e(stage)}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                f'height="{height:.1f}"><title>{_e(stage)}: {_e(text(cost, names))}</title></rect>'
            )
            cx = left + i * slot + slot / 2
            out.append(
                f'<text x="{cx:.1f}" y="{top + plot_h + 8:.1f}" text-anchor="end" '
                f'transform="rotate(-45 {cx:.1f} {top + plot_h + 8:.1f})">{_e(_short_stage(stage))}</text>'
            )
        out.append(
            f'<text x="{left + plot_w}" y="16" text-anchor="end" class="muted">'
            f"{_e(text(stages[0][1], names))} → {_e(text(stages[-1][1], names))}</text>"
        )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _log_range(values: list[float]) -> tuple[int, int]:
    positive = [v for v in values if v > 0]
    if not positive:
        return 0, 1
    # one decade below the smallest value, so that 1 request still shows as a bar
    low = math.floor(math.log10(min(positive))) - 1
    high = max(math.ceil(math.log10(max(positive))), low + 2)
    return low, high


def _bar_height(value: float, low: int, high: int, plot_h: float) -> float:
    if value <= 0:
        return 0.0
    share = (math.log10(value) - low) / max(high - low, 1)
    return max(min(share, 1.0), 0.0) * plot_h


def _tick(metric: str, exponent: int) -> str:
    value = 10.0**exponent
    if metric == "download":
        return human_bytes(value).replace(".0 ", " ") if value >= 1 else ""
    if metric == "time":
        return f"{value:,.0f} s" if value >= 1 else f"{value:g} s"
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _short_stage(stage: str) -> str:
    return stage if len(stage) <= 22 else stage[:21] + "…"


# ---------------------------------------------------------------------------------------
# The diff
# ---------------------------------------------------------------------------------------


def _side_by_side(path: str, result: Result) -> str:
    if not result.changed:
        return '<p class="muted">Nothing to change.</p>'
    differ = difflib.HtmlDiff(tabsize=4, wrapcolumn=None)
    table = differ.make_table(
        result.source.splitlines(),
        result.code.splitlines(),
        fromdesc=f"{path} (original)",
        todesc=f"{path} (optimized)",
        context=True,
        numlines=3,
    )
    # difflib writes presentational attributes and a column of links to the next change;
    # the page's CSS styles the table, and its columns are the line numbers and the code
    table = table.replace('cellspacing="0" cellpadding="0" rules="groups" ', "")
    table = table.replace(' nowrap="nowrap"', "")
    table = table.replace("&nbsp;", " ")  # (difflib's: code wraps at its spaces, not inside a name)
    table = _NEXT_LINKS.sub("", table)
    digits = len(str(max(result.source.count("\n"), result.code.count("\n")) + 1))
    number = f'<col style="width: {digits + 1.5:g}ch">'  # (the cells' monospace digits, and padding)
    columns = f"<colgroup>{number}<col>{number}<col></colgroup>"
    return _COLGROUPS.sub(columns, table, count=1)


_NEXT_LINKS = re.compile(r'<t([hd]) class="diff_next"[^>]*>.*?</t\1>')
_COLGROUPS = re.compile(r"(?:<colgroup></colgroup>\s*)+")


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


_BACKTICKED = re.compile(r"`([^`]+)`")


def _with_code(text: str) -> str:
    """``text`` escaped, its `backticked` spans as ``<code>`` (a finding's words quote code so)."""
    return _BACKTICKED.sub(lambda match: f"<code>{match.group(1)}</code>", _e(text))

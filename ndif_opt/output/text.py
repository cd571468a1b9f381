"""Renderings of results: findings lines, the per-pass cost table, diffs, JSON."""

from __future__ import annotations

import difflib
import json

from ndif_opt.output.wording import counted
from ndif_opt.types import Cost, Finding, Result, Status, UnknownDownload, UnknownDownloads


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"


def finding_line(path: str, finding: Finding, written: bool = True) -> str:
    line = finding.range.start.line + 1
    col = finding.range.start.character + 1
    status = {
        Status.APPLIED: "fixed" if written else "fixable",
        Status.SKIPPED: "not fixed",
        Status.UNSAFE_NOT_APPLIED: "unsafe fix available",
        Status.SUPPRESSED: "suppressed",
    }[finding.status]
    text = f"{path}:{line}:{col}: {finding.pass_id} [{status}] {finding.message}"
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


def _ratio(before: float, after: float) -> str:
    """`32× fewer`, `1.02× more` or `=`: the direction in words (a bare before/after
    ratio reads `0.984×` for an increase)."""
    if before == after:
        return "="
    if after == 0:
        return "all gone"
    if before == 0:
        return "new"
    ratio, word = (before / after, "fewer") if after < before else (after / before, "more")
    return (f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.3g}×") + f" {word}"


# ---------------------------------------------------------------------------------------
# Downloads of unknown size, and why a download grew
# ---------------------------------------------------------------------------------------


def download_text(cost: Cost) -> str:
    """``279.6 KB``, or ``279.6 KB + ?`` when the download holds values of a size not
    known statically (the number counts only their framing)."""
    text = human_bytes(cost.download_bytes)
    return f"{text} + ?" if cost.download_unknown else text


def downloads_comparable(before: Cost, after: Cost) -> bool:
    """Do the two downloads differ by their known parts only — the same values of unknown
    size on both sides, each downloaded as many times?"""
    return before.download_unknown == after.download_unknown


def download_change(before: Cost, after: Cost) -> str:
    """``download 4.46× fewer``; where part of a download is of unknown size, the change
    of the known part when the unknown parts are the same, else ``download unknown``."""
    if not downloads_comparable(before, after):
        return "download unknown"
    if not before.download_unknown:
        return f"download {_ratio(before.download_bytes, after.download_bytes)}"
    change = after.download_bytes - before.download_bytes
    if change == 0:
        return "download ="
    # a ratio of the known parts is not the ratio of the downloads: their difference is
    return f"download {human_bytes(abs(change))} {'more' if change > 0 else 'less'} (the same unknown part)"


def _download_grew(before: Cost, after: Cost) -> bool:
    grew = after.download_unknown - before.download_unknown  # the values downloaded more often
    return after.download_bytes > before.download_bytes or bool(grew)


# a pass marks a finding whose rewrite makes the script correct on NDIF (not only
# cheaper) with these words in its message
CORRECTNESS_MARK = "(a correctness fix)"


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


def _download_column(result: Result, pass_id: str | None, before: Cost, after: Cost) -> str:
    text = download_change(before, after)
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
    return [
        f"`{value.name}` ← `{_shortened(value.source)}` "
        f"({counted(before.download_unknown.count(value), 'download')} → {after.download_unknown.count(value)}): "
        f"{value.reason}"
        for value in unknown_downloads(result)
    ]


def _shortened(code: str, limit: int = 60) -> str:
    return code if len(code) <= limit else code[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------
# The text table
# ---------------------------------------------------------------------------------------


def cost_table(result: Result) -> str:
    rows = [("pass", "requests", "download", "forward passes", "layer evals", "est. time", "")]
    for pc in result.costs:
        rows.append(_row(result, pc.pass_id, pc.before, pc.after))
    before, after = totals(result)
    rows.append(_row(result, None, before, after))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for index, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0 or index == len(rows) - 2:
            out.append("  ".join("-" * w for w in widths))
    notes = unknown_download_notes(result)
    if notes:
        out += ["", "  + ? = values of a size not known statically (the download counts their framing only):"]
        out += [f"    {note}" for note in notes]
    return "\n".join(out) + "\n"


def _row(result: Result, pass_id: str | None, before: Cost, after: Cost) -> tuple[str, ...]:
    """A row of the table: a pass's (``pass_id``) or the total (None)."""
    return (
        pass_id or "total",
        f"{before.requests} → {after.requests}",
        f"{download_text(before)} → {download_text(after)}",
        f"{before.forward_passes} → {after.forward_passes}",
        f"{before.layer_evaluations} → {after.layer_evaluations}",
        f"{before.seconds:.1f} s → {after.seconds:.1f} s",
        f"requests {_ratio(before.requests, after.requests)}, {_download_column(result, pass_id, before, after)}",
    )


def result_dict(path: str, result: Result) -> dict:
    before, after = totals(result)
    return {
        "path": path,
        "changed": result.changed,
        "totals": _cost_pair(before, after),
        "passes": [{"id": pc.pass_id, **_cost_pair(pc.before, pc.after)} for pc in result.costs],
        "findings": [f.to_dict() for f in result.findings],
        "assumptions": list(result.assumptions),
    }


def _cost_pair(before: Cost, after: Cost) -> dict:
    pair = {}
    for key in (
        "requests", "upload_bytes", "download_bytes", "forward_passes", "layer_evaluations", "compute_flops", "seconds"
    ):
        pair[f"{key}_before"] = getattr(before, key)
        pair[f"{key}_after"] = getattr(after, key)
    # the values download_bytes counts the framing of only: a download is a lower bound
    # while either list holds one
    pair["download_unknown_before"] = _unknown_list(before)
    pair["download_unknown_after"] = _unknown_list(after)
    return pair


def _unknown_list(cost: Cost) -> list[dict]:
    return [
        {"name": value.name, "source": value.source, "reason": value.reason, "count": n}
        for value, n in cost.download_unknown.counts
        if n > 0
    ]


def to_json(entries: list[tuple[str, Result]], errors: list[dict]) -> str:
    files = [result_dict(path, result) for path, result in entries]
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
            target[key] = target.get(key, 0) + value


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

_STATUS_WORDS = {
    Status.APPLIED: "fixed",
    Status.SKIPPED: "not fixed",
    Status.UNSAFE_NOT_APPLIED: "unsafe fix available",
    Status.SUPPRESSED: "suppressed",
}


def _seconds_text(value: float) -> str:
    return f"{value:,.0f} s" if value >= 100 else f"{value:.1f} s"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_line(result: Result) -> str:
    """``8 → 1 requests · 242.3 KB → 1.6 KB download · 16.0 s → 2.0 s estimated``."""
    before, after = totals(result)
    return (
        f"{before.requests} → {after.requests} requests · "
        f"{download_text(before)} → {download_text(after)} download · "
        f"{_seconds_text(before.seconds)} → {_seconds_text(after.seconds)} estimated"
    )


def cost_table_markdown(result: Result) -> str:
    """The per-pass cost table as a GitHub-flavoured markdown table."""
    lines = [
        "| pass | requests | upload | download | forward passes | layer evaluations | est. time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, b: Cost, a: Cost) -> str:
        return (
            f"| {name} | {b.requests} → {a.requests} "
            f"| {human_bytes(b.upload_bytes)} → {human_bytes(a.upload_bytes)} "
            f"| {download_text(b)} → {download_text(a)} "
            f"| {b.forward_passes} → {a.forward_passes} "
            f"| {b.layer_evaluations} → {a.layer_evaluations} "
            f"| {_seconds_text(b.seconds)} → {_seconds_text(a.seconds)} |"
        )

    for pc in result.costs:
        lines.append(row(f"`{pc.pass_id}`", pc.before, pc.after))
    before, after = totals(result)
    lines.append(row("**total**", before, after))
    return "\n".join(lines) + "\n"


def markdown_report(path: str, result: Result, *, diff: bool = True) -> str:
    """One file's report for a pull-request comment: summary, per-pass table, findings,
    assumptions and the diff (the long parts folded in ``<details>``)."""
    out = [f"### ndif-opt: `{path}`", ""]
    if not result.costs:
        out += ["No nnsight code to optimize.", ""]
        return "\n".join(out)
    out += [f"**{summary_line(result)}**", "", cost_table_markdown(result)]
    notes = unknown_download_notes(result)
    if notes:
        out += ["+ ? = values of a size not known statically (the download counts their framing only):", ""]
        out += [f"- {_md_cell(note)}" for note in notes]
        out.append("")
    if result.findings:
        out += [f"<details><summary>Findings ({len(result.findings)})</summary>", ""]
        for finding in result.findings:
            line = finding.range.start.line + 1
            text = f"- line {line}: `{finding.pass_id}` ({_STATUS_WORDS[finding.status]}) {_md_cell(finding.message)}"
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


def markdown_many(entries: list[tuple[str, Result]], errors: list[dict] | None = None) -> str:
    """Several files: a totals line first, then each file's report."""
    out = []
    if len(entries) > 1:
        before = sum((totals(r)[0].requests for _, r in entries))
        after = sum((totals(r)[1].requests for _, r in entries))
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
        out.append(markdown_report(path, result))
    for error in errors or []:
        out.append(f"- ⚠️ `{error.get('path')}`: {_md_cell(str(error.get('message')))}")
    return "\n".join(out).rstrip("\n") + "\n"

"""Renderings of results: findings lines, the per-pass cost table, diffs, JSON."""

from __future__ import annotations

import difflib
import json

from ndif_opt.types import Cost, Finding, Result, Status


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
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{path} (original)",
        tofile=f"{path} (optimized)",
    )
    text = "".join(lines)
    if text and not text.endswith("\n"):
        text += "\n"
    return text


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


def cost_table(result: Result) -> str:
    rows = [("pass", "requests", "download", "forward passes", "layer evals", "est. time", "")]
    for pc in result.costs:
        rows.append(_row(pc.pass_id, pc.before, pc.after))
    before, after = totals(result)
    rows.append(_row("total", before, after))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for index, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0 or index == len(rows) - 2:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out) + "\n"


def _row(name: str, before: Cost, after: Cost) -> tuple[str, ...]:
    return (
        name,
        f"{before.requests} → {after.requests}",
        f"{human_bytes(before.download_bytes)} → {human_bytes(after.download_bytes)}",
        f"{before.forward_passes} → {after.forward_passes}",
        f"{before.layer_evaluations} → {after.layer_evaluations}",
        f"{before.seconds:.1f} s → {after.seconds:.1f} s",
        f"requests {_ratio(before.requests, after.requests)}, download {_ratio(before.download_bytes, after.download_bytes)}",
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
    return pair


def to_json(entries: list[tuple[str, Result]], errors: list[dict]) -> str:
    files = [result_dict(path, result) for path, result in entries]
    total = {}
    for entry in files:
        for key, value in entry["totals"].items():
            total[key] = total.get(key, 0) + value
    payload = {
        "version": 1,
        "totals": total,
        "passes": files[0]["passes"] if len(files) == 1 else _merge_passes(files),
        "files": files,
        "errors": errors,
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _merge_passes(files: list[dict]) -> list[dict]:
    merged: dict[str, dict] = {}
    for entry in files:
        for p in entry["passes"]:
            target = merged.setdefault(p["id"], {"id": p["id"]})
            for key, value in p.items():
                if key != "id":
                    target[key] = target.get(key, 0) + value
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
        f"{human_bytes(before.download_bytes)} → {human_bytes(after.download_bytes)} download · "
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
            f"| {human_bytes(b.download_bytes)} → {human_bytes(a.download_bytes)} "
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


def markdown_many(entries: list[tuple[str, Result]], errors: list[dict] | None = None) -> str:
    """Several files: a totals line first, then each file's report."""
    out = []
    if len(entries) > 1:
        before = sum((totals(r)[0].requests for _, r in entries))
        after = sum((totals(r)[1].requests for _, r in entries))
        down_b = sum((totals(r)[0].download_bytes for _, r in entries))
        down_a = sum((totals(r)[1].download_bytes for _, r in entries))
        changed = sum(1 for _, r in entries if r.changed)
        out += [
            f"## ndif-opt: {len(entries)} files, {changed} would change",
            "",
            f"**{before} → {after} requests · {human_bytes(down_b)} → {human_bytes(down_a)} download**",
            "",
        ]
    for path, result in entries:
        out.append(markdown_report(path, result))
    for error in errors or []:
        out.append(f"- ⚠️ `{error.get('path')}`: {_md_cell(str(error.get('message')))}")
    return "\n".join(out).rstrip("\n") + "\n"

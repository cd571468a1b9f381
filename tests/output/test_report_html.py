"""Report formats: markdown for pull-request comments, one self-contained HTML page
(rendered in headless Chromium when it is installed: `apt-get install -y chromium`; the
layout checked there through Playwright's Python package, which drives that binary)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ndif_opt import optimize
from ndif_opt.output.html import cost_chart_svg, render_html
from ndif_opt.output.text import cost_table_markdown, markdown_many, markdown_report, summary_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "steering_sweep.py"


@pytest.fixture(scope="module")
def result():
    return optimize(EXAMPLE.read_text())


@pytest.fixture(scope="module")
def page(result):
    return render_html([("examples/steering_sweep.py", result)])


# -- markdown ------------------------------------------------------------------------------


def test_markdown_report_has_summary_table_findings_and_diff(result):
    text = markdown_report("examples/steering_sweep.py", result)
    assert text.startswith("### ndif-opt: `examples/steering_sweep.py`")
    assert f"**{summary_line(result)}**" in text
    assert "| pass | requests | upload | download | forward passes | layer evaluations | est. time |" in text
    skip = next(pc for pc in result.costs if pc.pass_id == "skip-insertion")
    assert skip.after.layer_evaluations < skip.before.layer_evaluations  # the skipped prefix
    assert f"| {skip.before.layer_evaluations} → {skip.after.layer_evaluations} |" in text
    for pc in result.costs:
        assert f"| `{pc.pass_id}` | {pc.before.requests} → {pc.after.requests} |" in text
    assert "| **total** | 8 → 1 |" in text
    assert "<summary>Findings (" in text and "session-hoisting" in text
    assert "```diff\n--- examples/steering_sweep.py\t(original)" in text
    assert text.count("<details>") == text.count("</details>") == 3


def test_markdown_table_rows_have_the_same_number_of_cells(result):
    rows = [line for line in cost_table_markdown(result).splitlines() if line.startswith("|")]
    counts = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
    assert counts == {8}


def test_markdown_escapes_pipes_and_handles_unchanged_files():
    source = 'x = 1  # not nnsight | at all\n'
    text = markdown_report("plain.py", optimize(source))
    assert "No nnsight code to optimize." in text
    many = markdown_many([("a.py", optimize(source)), ("b.py", optimize(EXAMPLE.read_text()))])
    assert many.startswith("## ndif-opt: 2 files, 1 would change")


# -- HTML ----------------------------------------------------------------------------------

EXTERNAL = re.compile(r"<script|<link|<img|<iframe|@import|url\(|src=|href=\"(?!#)|https?://", re.I)


def test_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    assert not EXTERNAL.search(page), EXTERNAL.search(page).group(0)


def test_page_has_table_chart_and_diff(page, result):
    assert 'id="cost-table-0"' in page
    for pc in result.costs:
        assert f'data-pass="{pc.pass_id}"' in page
    assert 'id="cost-chart-0"' in page and page.count('class="panel"') == 3
    stages = len(result.costs) + 1
    assert len(re.findall(r'<rect class="(requests|download|time)"', page)) == 3 * stages
    assert '<table class="diff"' in page and "(optimized)" in page
    assert "<th>layer evaluations</th>" in page
    skip = next(pc for pc in result.costs if pc.pass_id == "skip-insertion")
    row = re.search(r'<tr data-pass="skip-insertion">(.*?)</tr>', page).group(1)
    assert f'<td class="better">{skip.before.layer_evaluations} → {skip.after.layer_evaluations}</td>' in row


def test_source_text_is_escaped():
    source = EXAMPLE.read_text().replace('PROMPT = "I think this movie is"', 'PROMPT = "</style><script>x</script>"')
    html = render_html([("evil <b>.py", optimize(source))])
    assert "<script>" not in html and "&lt;/style&gt;&lt;script&gt;" in html
    assert "evil &lt;b&gt;.py" in html


def test_chart_is_log_scaled(result):
    svg = cost_chart_svg(result)
    heights = {
        m: [float(h) for h in re.findall(rf'<rect class="{m}"[^>]*height="([\d.]+)"', svg)]
        for m in ("requests", "download", "time")
    }
    # 8 requests → 1: one decade apart on a log scale, so the first bar is about twice
    # the last (the axis starts one decade below the smallest value)
    first, last = heights["requests"][0], heights["requests"][-1]
    assert 1.7 < first / last < 2.3
    assert all(h > 0 for values in heights.values() for h in values)


def test_a_download_of_unknown_size_is_neither_better_nor_worse_and_has_a_footnote():
    from test_report import UNKNOWN_SIZE

    html = render_html([("probe.py", optimize(UNKNOWN_SIZE))])
    cells = re.findall(r'<tr data-pass="session-hoisting">(?:<td.*?</td>){3}(<td.*?</td>)', html)
    assert cells == [
        '<td class="unknown">3.8 KB + ? → 1.3 KB + ? <span class="muted note">(download unknown)</span></td>'
    ]
    assert '<ul class="unknown-downloads"><li><code>top</code> ← <code>model.lm_head.output[0, -1].topk(k).indices</code>' \
        in html
    assert "<title>original: 3.8 KB + ?</title>" in html  # the chart's download bar


def test_a_download_a_correctness_fix_grows_says_why():
    from test_report import EMPTY_ON_THE_CLIENT

    html = render_html([("norms.py", optimize(EMPTY_ON_THE_CLIENT))])
    row = re.search(r'<tr data-pass="accumulator-relocation">(.*?)</tr>', html).group(1)
    assert '<span class="muted note">(a correctness fix: the data now comes back)</span>' in row


def test_a_figure_that_reads_the_same_is_neither_better_nor_worse(page):
    """Green for better, red for worse, no colour where the figures read the same (an upload
    a few bytes larger, rounded to the same 4.5 KB, is not drawn in red)."""
    cells = re.findall(r'<td class="(better|worse|)">([^<]*) → ([^<]*)</td>', page)
    assert cells and any(css == "" for css, _, _ in cells) and any(css == "better" for css, _, _ in cells)
    for css, before, after in cells:
        assert (css == "") == (before == after), (css, before, after)
    assert 'class="muted legend"' in page and "green</span>: fewer or smaller (better)" in page


def test_backticks_in_words_are_code(page):
    findings = page.split('<ul class="findings">', 1)[1].split("</ul>", 1)[0]
    assert "<code>" in findings and "`" not in findings
    assumptions = page.split("<h3>Assumptions of the cost model</h3>", 1)[1].split("</ul>", 1)[0]
    assert "`" not in assumptions


def test_the_diff_has_a_narrow_gutter_and_wraps_code_at_its_spaces(page):
    assert "diff_next" not in page and "&nbsp;" not in page.split('<table class="diff"', 1)[1]
    assert '<colgroup><col style="width: 3.5ch"><col><col style="width: 3.5ch"><col></colgroup>' in page


def test_fixed_only_where_the_output_holds_the_fix(result):
    proposed = render_html([("examples/steering_sweep.py", result)])
    assert ">fixable</span>" in proposed and ">fixed</span>" not in proposed
    assert "would be computed once" in proposed
    written = render_html([("examples/steering_sweep.py", result)], written=True)
    assert ">fixed</span>" in written and ">fixable</span>" not in written


def test_page_for_a_file_without_nnsight():
    html = render_html([("plain.py", optimize("print(1)\n"))])
    assert "No nnsight code to optimize." in html and not EXTERNAL.search(html)


# -- headless Chromium -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-extensions",
    # any fetch the page attempted would fail: nothing is resolvable
    "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
]


def _chromium(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)


@needs_chromium
def test_chromium_renders_the_chart_and_the_table(page, result, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    run = _chromium("--dump-dom", path.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert re.search(r'<svg[^>]*id="cost-chart-0"', dom)
    assert re.search(r'<table class="costs" id="cost-table-0"', dom)
    assert len(re.findall(r"<tr data-pass=", dom)) == len(result.costs)
    assert len(re.findall(r"<rect ", dom)) == 3 * (len(result.costs) + 1)
    assert '<table class="diff"' in dom


@needs_chromium
def test_chromium_screenshot(page, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    shot = tmp_path / "report.png"
    run = _chromium("--hide-scrollbars", "--window-size=1320,1600", f"--screenshot={shot}", path.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# -- in a real browser: readable at 900 and 1400 px -------------------------------------------

WIDTHS = (900, 1400)


@pytest.fixture(scope="module")
def report_page(result, tmp_path_factory) -> Path:
    """A page with a long diff, downloads of unknown size and loops of unknown length."""
    from test_report import FILE_ROWS, UNKNOWN_SIZE

    entries = [("examples/steering_sweep.py", result), ("probe.py", optimize(UNKNOWN_SIZE)),
               ("rows.py", optimize(FILE_ROWS)),
               ("examples/activation_patching.py", optimize((ROOT / "examples" / "activation_patching.py").read_text()))]
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(entries), encoding="utf-8")
    return path


@needs_chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_in_chromium_the_page_fits_its_width_and_logs_no_error(report_page, width):
    """Playwright drives the Chromium installed on the machine (`executable_path`: no
    browser is downloaded). Nothing wider than the window (the cost table scrolls in its
    own box), no console message of a warning or an error, no request at all."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            logged, requested = [], []
            page.on("console", lambda message: logged.append(f"{message.type}: {message.text}")
                    if message.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: logged.append(f"page error: {error}"))
            page.on("request", lambda request: requested.append(request.url)
                    if not request.url.startswith("file:") else None)
            page.goto(report_page.as_uri())
            page.wait_for_load_state("load")
            measured = page.evaluate("""() => {
                const root = document.documentElement;
                const boxes = [...document.querySelectorAll('.scrolls')].map(b => b.getBoundingClientRect().right);
                const gutters = [...document.querySelectorAll('table.diff td.diff_header')].map(
                    td => td.getBoundingClientRect().width);
                const code = [...document.querySelectorAll('table.diff td:not(.diff_header)')].map(
                    td => td.getBoundingClientRect().width);
                return {scroll: root.scrollWidth, client: root.clientWidth, boxes,
                        gutter: Math.max(...gutters), code: Math.min(...code),
                        findings: [...document.querySelectorAll('ul.findings')].map(u => u.innerText).join(' ')};
            }""")
        finally:
            browser.close()
    assert measured["scroll"] <= measured["client"] == width, measured
    assert max(measured["boxes"]) <= width
    assert measured["gutter"] < 60, measured["gutter"]  # digits, not ~170 px a side
    assert measured["code"] > (width - 48) / 2 - 2 * 60 - 20  # the code gets the rest
    assert "`" not in measured["findings"]
    assert logged == [] and requested == []

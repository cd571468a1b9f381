"""The README's commands work as written, and print what the README shows.

- The first command: its `ndif-opt ...` part (without the install before it), run with this
  interpreter, prints what "What it does" quotes.
- The test command is the one `.ci/run` runs.
- "On your own script": every `$ ` line of its console blocks, in order, in a temporary
  directory that holds a copy of examples/ (`pip install` lines are checked, not run: the
  extras they name exist). Each exits 0 and prints what the README shows under it.
- "In Jupyter": the transcript's cells go through a real IPython shell with the extension
  loaded; the extension prints what the transcript shows.
- "Configuration": the `[tool.ndif-opt]` block loads.

In an expected output, a line `…` stands for any number of lines, and a line that ends in
`…` for any line that starts with what comes before it. stdout comes before stderr, as on a
terminal (the command line flushes its stdout before it prints findings).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
ELLIPSIS = "…"
#: `ndif-opt` as the README runs it: this checkout, with this interpreter
NDIF_OPT = f'ndif-opt() {{ {shlex.quote(sys.executable)} -m ndif_opt "$@"; }}\n'


@dataclass(frozen=True)
class Command:
    line: str  # what follows `$ `
    expected: tuple[str, ...]  # the lines the README shows under it


def _section(title: str) -> str:
    """The README's text under `## title`, up to the next heading of level 1 or 2 (a `#`
    line inside a code block is code, not a heading)."""
    lines = README.split("\n")
    start = lines.index(f"## {title}")
    in_code = False
    for end in range(start + 1, len(lines)):
        in_code ^= lines[end].startswith("```")
        if not in_code and lines[end].startswith(("# ", "## ")):
            break
    else:
        end = len(lines)
    return "\n".join(lines[start:end]) + "\n"


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def _commands(text: str) -> list[Command]:
    commands: list[Command] = []
    for block in _blocks(text, "console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append(Command(line[2:], ()))
            else:
                assert commands, f"console output before any command: {line!r}"
                last = commands.pop()
                commands.append(Command(last.line, last.expected + (line,)))
    return commands


def _mismatch(expected: list[str], actual: list[str]) -> str | None:
    """None when `actual` is what `expected` shows (with its `…` lines), else the first line
    of `expected` that nothing matches."""
    expected = [line.rstrip() for line in expected]
    actual = [line.rstrip() for line in actual]

    def line_matches(want: str, got: str) -> bool:
        return got.startswith(want[:-1].rstrip()) if want.endswith(ELLIPSIS) else got == want

    def match(i: int, j: int) -> int | None:  # None: matched; else the index in expected that failed
        if i == len(expected):
            return None if j == len(actual) else i
        if expected[i] == ELLIPSIS:
            failures = [match(i + 1, k) for k in range(j, len(actual) + 1)]
            return None if None in failures else max(failures)
        if j < len(actual) and line_matches(expected[i], actual[j]):
            return match(i + 1, j + 1)
        return i

    failed = match(0, 0)
    if failed is None:
        return None
    shown = expected[failed] if failed < len(expected) else "(end of the expected output)"
    return f"no output line matches {shown!r}; the output was:\n" + "\n".join(actual)


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", NDIF_OPT + line], cwd=cwd, env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=600)


def _check_install(line: str) -> None:
    """A `pip install` line: the torch pin is CI's, and each extra it names exists."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for named in re.findall(r'-e "\.\[([a-z,]+)\]"', line):
        for extra in named.split(","):
            assert extra in extras, f"{line}: no extra {extra!r} in pyproject.toml"
    for pin in re.findall(r"torch==\S+", line):
        assert pin in (ROOT / ".ci" / "run").read_text(), f"{line}: .ci/run installs another torch"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with a copy of examples/, as a fresh clone has it."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def _run_all(commands: list[Command], cwd: Path) -> None:
    for command in commands:
        if command.line.startswith("pip install"):
            _check_install(command.line)
            continue
        done = _run(command.line, cwd)
        assert done.returncode == 0, f"$ {command.line}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        if command.expected:
            problem = _mismatch(list(command.expected), (done.stdout + done.stderr).splitlines())
            assert problem is None, f"$ {command.line}: {problem}"


def _bash_blocks_before_the_guide() -> list[str]:
    return _blocks(README[:README.index("\n## What it does\n")], "bash")


def test_the_readme_starts_with_the_two_commands():
    install_and_run, install_and_test = (block.strip() for block in _bash_blocks_before_the_guide())
    assert README.startswith("# ndif-opt\n")
    assert install_and_run.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && ")
    assert "pip install torch==2.13.0 && pip install -e \".[test]\"" in install_and_test


def test_the_first_command_prints_what_the_readme_shows(workdir):
    install_and_run = _bash_blocks_before_the_guide()[0].strip()
    command = install_and_run.split(" && ")[-1]
    assert command.startswith("ndif-opt ")
    shown = _commands(_section("What it does"))
    assert [c.line for c in shown] == [command]  # the section shows the first command's output
    _run_all(shown, workdir)


def test_the_test_command_is_what_ci_runs():
    install_and_test = _bash_blocks_before_the_guide()[1].strip()
    pytest_command = install_and_test.split(" && ")[-1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert pytest_command.startswith("python -m pytest ")
    assert re.search(rf"^{re.escape(pytest_command)}$", ci, re.M), f"{pytest_command!r} is not a line of .ci/run"
    for install in install_and_test.split(" && ")[2:-1]:  # the same installs (CI's are quiet)
        assert f"python -m {install}".replace("pip install ", "pip install -q ") in ci, install


def test_the_workflow_runs_as_written(workdir):
    commands = _commands(_section("On your own script"))
    lines = [c.line for c in commands]
    # the workflow the README promises: diff, then verify, then in place
    assert [line.split()[1] for line in lines if line.startswith("ndif-opt ")][:3] == ["probe.py", "verify", "-i"]
    _run_all(commands, workdir)
    probe = (workdir / "probe.py").read_text()
    assert "with model.session(remote=True):" in probe  # -i rewrote it


def test_a_mismatch_is_seen():
    assert _mismatch(["a", ELLIPSIS, "d"], ["a", "b", "c", "d"]) is None
    assert _mismatch(["a", ELLIPSIS], ["a"]) is None
    assert _mismatch(["ab …"], ["abc"]) is None
    assert _mismatch(["a", "b"], ["a", "c"]) is not None
    assert _mismatch(["a"], ["a", "b"]) is not None  # an unshown line is a difference
    assert _mismatch(["a", ELLIPSIS, "x"], ["a", "b"]) is not None


def _transcript() -> str:
    (transcript,) = [block for block in _blocks(_section("On your own script"), "text") if "In [1]:" in block]
    return transcript


def _cells(transcript: str) -> list[tuple[int, str, list[str]]]:
    """(number, code, output lines) of each `In [n]:` of an IPython transcript."""
    cells = []
    for number, chunk in re.findall(r"^In \[(\d+)\]: (.*?)(?=^In \[|\Z)", transcript, re.M | re.S):
        first, *rest = chunk.rstrip("\n").split("\n")
        code = [first] + [line[len("   ...: "):] for line in rest if line.startswith("   ...: ")]
        output = [line for line in rest if not line.startswith("   ...: ")]
        cells.append((int(number), "\n".join(code).rstrip() + "\n", output))
    return cells


def test_the_jupyter_transcript_is_what_the_extension_prints(capsys, ipython):
    shell = ipython  # reset before and after (tests/conftest.py)
    cells = _cells(_transcript())
    assert [number for number, _, _ in cells] == list(range(1, len(cells) + 1))
    assert any(code.startswith("%ndif_opt diff") for _, code, _ in cells)
    try:
        for number, code, output in cells:
            assert shell.execution_count == number
            capsys.readouterr()
            if code.startswith("%"):
                assert shell.run_cell(code, store_history=True).success
            else:  # cells of nnsight code would reach the network: analysed, not run
                shell.events.trigger("pre_run_cell", SimpleNamespace(raw_cell=code))
                shell.history_manager.store_inputs(number, code, code)
                shell.execution_count += 1
            problem = _mismatch([line for line in output if line.strip()], capsys.readouterr().out.splitlines())
            assert problem is None, f"In [{number}]: {problem}"
    finally:
        shell.run_cell("%unload_ext ndif_opt")


def test_the_configuration_block_loads(tmp_path):
    from ndif_opt.frontends.config import load_options

    (block,) = _blocks(_section("Configuration"), "toml")
    (tmp_path / "pyproject.toml").write_text(block)
    options = load_options(tmp_path / "script.py")
    assert options.ignore == frozenset({"detach-cpu"})
    assert options.nnsight == "0.8"


def test_the_users_part_is_at_most_250_lines():
    users_part = README[:README.index("\n# Reference\n")]  # the reference sections follow
    assert users_part.count("\n") + 1 <= 250


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(text: str) -> set[str]:
    in_code = False
    anchors = set()
    for line in text.split("\n"):
        in_code ^= line.startswith("```")
        if not in_code and re.match(r"#{1,6} ", line):
            anchors.add(_anchor(line.lstrip("#")))
    return anchors


def test_the_links_of_the_readme_and_docs_lead_somewhere():
    # the README's text moved to docs/ (issue 34): every relative link and anchor still resolves
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in _headings(linked.read_text(encoding="utf-8")), f"{page.name}: {target}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in ("architecture", "speed", "reach", "decisions", "real-world-code", "passes"):
        assert f"(docs/{doc}.md" in readme, f"the README does not link docs/{doc}.md"

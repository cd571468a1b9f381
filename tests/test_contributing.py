"""The commit-msg hook CONTRIBUTING.md asks for: a subject of at most 72 characters, then a
blank line."""

import subprocess
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / ".githooks" / "commit-msg"


def _check(tmp_path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(["bash", str(HOOK), str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("message", [
    "Short subject\n",
    "Short subject\n\nThe detail, as long as it needs to be. " + "x" * 200 + "\n",
    "x" * 72 + "\n# a comment line git drops\n",
])
def test_a_short_subject_passes(tmp_path, message):
    assert _check(tmp_path, message).returncode == 0


@pytest.mark.parametrize("message, says", [
    ("x" * 73 + "\n", "73 characters"),
    ("Subject\nno blank line before the body\n", "second line blank"),
    ("\n", "empty"),
])
def test_a_long_or_run_on_subject_fails(tmp_path, message, says):
    done = _check(tmp_path, message)
    assert done.returncode == 1 and says in done.stderr

"""Configuration and suppression mean the same in the CLI and the library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ndif_opt import optimize
from ndif_opt.frontends.config import load_options

ROOT = Path(__file__).resolve().parents[2]
NAIVE = (ROOT / "examples" / "prompt_loop.py").read_text()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_pyproject_ignore_is_honoured_by_cli_and_library(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ndif-opt]\nignore = ["reduction-pushdown"]\n')
    script = tmp_path / "s.py"
    script.write_text(NAIVE)
    library = optimize(NAIVE, options=load_options(script)).code
    command = cli(script, "-q").stdout
    assert command == library
    assert "logits = model.lm_head.output.detach().cpu().save()" in library  # the save was kept
    assert "model.session(remote=True)" in library
    # flags on the command line combine with the file: --select narrows, the file's ignore stays
    narrowed = cli(script, "-q", "--select", "session-hoisting").stdout
    assert "model.session(remote=True)" in narrowed and ".detach().cpu()" not in narrowed
    assert narrowed == optimize(NAIVE, options=load_options(script, select=["session-hoisting"])).code


def test_suppression_comment_is_honoured_by_cli_and_library(tmp_path):
    source = NAIVE.replace("for prompt in PROMPTS:", "for prompt in PROMPTS:  # ndif-opt: ignore")
    script = tmp_path / "s.py"
    script.write_text(source)
    assert optimize(source).code == cli(script, "-q").stdout == source
    # suppressing one pass leaves the others free: each request downloads less
    only = NAIVE.replace("for prompt in PROMPTS:", "for prompt in PROMPTS:  # ndif-opt: ignore[session-hoisting]")
    script.write_text(only)
    out = cli(script, "-q").stdout
    assert out == optimize(only).code and "session(" not in out and "argmax().item().save()" in out

"""One list defines the passes (ndif_opt.passes.PASS_MODULES): the CLI's ids, the docs, the
README's table (generated, as docs/passes.md is) and the pipeline's order all come from it,
and no pass lives outside it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from ndif_opt import optimize
from ndif_opt.output.docs import passes_table, render
from ndif_opt.passes import PASS_IDS, PASS_MODULES, PASSES, get_pass

ROOT = Path(__file__).resolve().parents[2]
LOOP = (
    "from nnsight import LanguageModel\n"
    "model = LanguageModel('openai-community/gpt2')\n"
    "for prompt in ['a', 'b']:\n"
    "    with model.trace(prompt, remote=True):\n"
    "        h = model.transformer.h[0].output.save()\n"
    "    print(h.shape)\n"
)


def test_the_ids_are_the_modules_of_the_list():
    assert PASS_IDS == tuple(module.replace("_", "-") for module in PASS_MODULES)
    assert [cls.id for cls in PASSES] == list(PASS_IDS)
    for module, cls in zip(PASS_MODULES, PASSES):
        assert cls.__module__ == f"ndif_opt.passes.{module}"
        assert (cls.__doc__ or "").strip().startswith(f"{cls.id}: ")
        assert get_pass(cls.id) is cls


def test_no_pass_class_outside_the_list():
    defining = set()
    for path in (ROOT / "ndif_opt" / "passes").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "Pass" for b in node.bases):
                # a pass is a module, or a package whose __init__ defines the class
                defining.add(path.parent.name if path.name == "__init__.py" else path.stem)
    assert defining == set(PASS_MODULES)


def test_each_directory_of_pass_tests_is_a_pass():
    # tests/passes/<id>/ holds the tests of one pass (a pass whose tests are only its cases,
    # checked by test_cases.py here, has none); tests of several passes sit in tests/passes/
    directories = {p.name for p in (ROOT / "tests" / "passes").iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert directories <= set(PASS_MODULES), directories - set(PASS_MODULES)


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ndif_opt", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_the_command_line_takes_its_ids_and_rules_from_the_list():
    listed = _cli("rules")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [f"{cls.id}: {cls.summary()}" for cls in PASSES]
    every = [arg for pass_id in PASS_IDS for arg in ("--select", pass_id)]
    assert _cli("-", *every, stdin=LOOP).returncode in (0, 1)  # 1: it changed the code
    unknown = _cli("-", "--select", "no-such-pass", stdin=LOOP)
    assert unknown.returncode == 2 and "no-such-pass" in unknown.stderr


def test_the_docs_follow_the_list():
    text = render()
    sections = re.findall(r"^## ([a-z0-9-]+)$", text, re.M)
    assert sections == list(PASS_IDS)
    assert (ROOT / "docs" / "passes.md").read_text() == text, "run: python -m ndif_opt.output.docs > docs/passes.md"


def test_the_readme_table_is_the_generated_one():
    # every pass, in pipeline order, with its summary and fix safety, linked into docs/passes.md
    table = passes_table("docs/passes.md")
    assert table in (ROOT / "README.md").read_text(), "paste: python -m ndif_opt.output.docs --table"
    rows = dict(re.findall(r"^\| \[`([a-z0-9-]+)`\]\(docs/passes\.md#\1\).* \| ([^|]+) \|$", table, re.M))
    assert list(rows) == list(PASS_IDS)
    for cls in PASSES:
        assert rows[cls.id].strip() == cls.fix_safety, cls.id


def test_the_pipeline_runs_the_passes_in_the_order_of_the_list():
    default = optimize(LOOP)
    assert [cost.pass_id for cost in default.costs] == [cls.id for cls in PASSES if not cls.opt_in]
    with_everything = optimize(LOOP, select=PASS_IDS)
    assert [cost.pass_id for cost in with_everything.costs] == list(PASS_IDS)

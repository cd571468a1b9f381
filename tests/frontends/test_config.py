"""[tool.ndif-opt] in pyproject.toml: discovery, keys, validation, CLI overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ndif_opt.frontends.config import ConfigError, find_config, load_options, parse_table
from ndif_opt.options import Options

FULL = """\
[project]
name = "demo"

[tool.ndif-opt]
select = ["session-hoisting", "accumulator-relocation"]
ignore = ["accumulator-relocation"]
unsafe-fixes = true
assume-remote = true
max-batch = 8

[tool.ndif-opt.cost]
seq-len = 64
latency = 1.5
bandwidth = 2e7
throughput = 1e14

[tool.ndif-opt.models."openai-community/gpt2"]
dtype = "float16"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_full_table(repo):
    config = write(repo / "pyproject.toml", FULL)
    script = write(repo / "scripts" / "deep" / "run.py", "x = 1\n")
    assert find_config(script) == config.resolve()
    options = load_options(script)
    assert options == Options(
        select=frozenset({"session-hoisting", "accumulator-relocation"}),
        ignore=frozenset({"accumulator-relocation"}),
        unsafe_fixes=True,
        assume_remote=True,
        max_batch=8,
        cost={
            "seq-len": 64,
            "latency": 1.5,
            "bandwidth": 2e7,
            "throughput": 1e14,
            "models": {"openai-community/gpt2": {"dtype": "float16"}},
        },
    )
    assert isinstance(options.cost["seq-len"], int)
    assert isinstance(options.cost["latency"], float)
    assert options.wants("session-hoisting") and not options.wants("accumulator-relocation")


def test_nearest_pyproject_with_our_table_wins(repo):
    write(repo / "pyproject.toml", "[tool.ndif-opt]\nmax-batch = 4\n")
    write(repo / "pkg" / "pyproject.toml", "[project]\nname = 'x'\n")  # not ours: skipped
    write(repo / "pkg" / "sub" / "pyproject.toml", "[tool.ndif-opt]\nmax-batch = 2\n")
    assert load_options(repo / "pkg" / "a.py").max_batch == 4
    assert load_options(repo / "pkg" / "sub" / "b.py").max_batch == 2
    assert find_config(repo / "pkg") == (repo / "pyproject.toml").resolve()


def test_search_stops_at_the_repository_root(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.ndif-opt]\nmax-batch = 4\n")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    assert find_config(tmp_path / "repo" / "x.py") is None
    assert load_options(tmp_path / "repo" / "x.py") == Options()
    assert find_config(tmp_path / "x.py") == (tmp_path / "pyproject.toml").resolve()


def test_no_path_means_current_directory(repo, monkeypatch):
    write(repo / "pyproject.toml", "[tool.ndif-opt]\nunsafe-fixes = true\n")
    monkeypatch.chdir(repo)
    assert find_config(None) == (repo / "pyproject.toml").resolve()
    assert load_options().unsafe_fixes is True


def test_cli_overrides_win_and_none_keeps_the_file(repo):
    write(repo / "pyproject.toml", FULL)
    options = load_options(
        repo / "a.py",
        select=["accumulator-relocation"],
        ignore=None,
        unsafe_fixes=False,
        assume_remote=None,
        max_batch=16,
        cost={"latency": 3.0},
    )
    assert options.select == frozenset({"accumulator-relocation"})
    assert options.ignore == frozenset({"accumulator-relocation"})  # from the file
    assert options.unsafe_fixes is False  # an explicit CLI value beats the file
    assert options.assume_remote is True  # None: the file's value
    assert options.max_batch == 16
    assert options.cost["latency"] == 3.0 and options.cost["seq-len"] == 64
    # An empty list from a command line is "not given".
    assert load_options(repo / "a.py", select=[]).select == frozenset(
        {"session-hoisting", "accumulator-relocation"}
    )


def test_explicit_config_file(repo):
    other = write(repo / "elsewhere" / "custom.toml", "[tool.ndif-opt]\nmax-batch = 3\n")
    write(repo / "pyproject.toml", "[tool.ndif-opt]\nmax-batch = 5\n")
    assert load_options(repo / "a.py", config=other).max_batch == 3
    assert load_options(other).max_batch == 3  # a .toml path is the config itself
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_options(repo / "a.py", config=repo / "missing.toml")
    no_table = write(repo / "plain.toml", "[tool.other]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"has no \[tool.ndif-opt\] table"):
        load_options(None, config=no_table)


def test_underscore_spelling_is_accepted():
    assert parse_table({"unsafe_fixes": True, "max_batch": 2, "cost": {"seq_len": 5}}) == {
        "unsafe_fixes": True,
        "max_batch": 2,
        "cost": {"seq-len": 5},
    }


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"selct": ["session-hoisting"]}, "tool.ndif-opt.selct", "did you mean 'select'"),
        ({"select": ["session-hoist"]}, "tool.ndif-opt.select", "unknown pass id 'session-hoist'"),
        ({"ignore": "nope"}, "tool.ndif-opt.ignore", "unknown pass id 'nope'"),
        ({"select": [1]}, "tool.ndif-opt.select", "must be a list of pass ids"),
        ({"unsafe-fixes": "yes"}, "tool.ndif-opt.unsafe-fixes", "must be true or false"),
        ({"max-batch": 0}, "tool.ndif-opt.max-batch", "positive integer"),
        ({"max-batch": 2.5}, "tool.ndif-opt.max-batch", "positive integer"),
        ({"cost": {"latncy": 1}}, "tool.ndif-opt.cost.latncy", "did you mean 'latency'"),
        ({"cost": {"bandwidth": -1}}, "tool.ndif-opt.cost.bandwidth", "positive number"),
        ({"cost": 3}, "tool.ndif-opt.cost", "must be a table"),
        ({"models": {"gpt2": 1}}, 'tool.ndif-opt.models."gpt2"', "must be a table of fields"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, table, key, fragment):
    path = tmp_path / "pyproject.toml"
    with pytest.raises(ConfigError) as info:
        parse_table(table, path)
    error = info.value
    assert error.path == str(path)
    assert error.key == key
    assert fragment in str(error)
    assert str(error).startswith(f"{path}: {key}: ")


def test_unknown_key_in_a_file(repo):
    config = write(repo / "pyproject.toml", "[tool.ndif-opt]\nunsafe-fix = true\n")
    with pytest.raises(ConfigError) as info:
        load_options(repo / "a.py")
    assert str(info.value) == (
        f"{config.resolve()}: tool.ndif-opt.unsafe-fix: unknown key 'unsafe-fix'; "
        "did you mean 'unsafe-fixes'?"
    )


def test_invalid_toml_is_a_config_error(repo):
    write(repo / "pyproject.toml", "[tool.ndif-opt]\nselect = [\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_options(repo / "a.py")


def test_bad_cli_override(repo):
    with pytest.raises(ConfigError, match="--select: unknown pass id 'x'"):
        load_options(repo / "a.py", select=["x"])
    with pytest.raises(TypeError):
        load_options(repo / "a.py", unsafe=True)


def test_model_overrides_are_checked_by_the_registry(repo):
    pytest.importorskip("ndif_opt.cost.model_registry")
    write(repo / "pyproject.toml", '[tool.ndif-opt.models."openai-community/gpt2"]\nbogus = 1\n')
    with pytest.raises(ConfigError, match="tool.ndif-opt.models"):
        load_options(repo / "a.py")


def test_options_drive_optimize(repo):
    from ndif_opt import optimize

    write(repo / "pyproject.toml", '[tool.ndif-opt]\nignore = ["session-hoisting"]\n')
    source = (Path(__file__).parents[2] / "examples" / "prompt_loop.py").read_text()
    result = optimize(source, options=load_options(repo / "prompt_loop.py"))
    assert not any(f.pass_id == "session-hoisting" for f in result.findings)
    assert os.fspath(find_config(repo / "prompt_loop.py")).endswith("pyproject.toml")


def test_cost_table_reaches_the_cost_model(repo):
    """The keys config writes into Options.cost are the ones the cost model reads."""
    from ndif_opt import optimize

    source = (Path(__file__).parents[2] / "examples" / "prompt_loop.py").read_text()
    write(repo / "pyproject.toml", "[tool.ndif-opt.cost]\nlatency = 100\n")
    slow = optimize(source, options=load_options(repo / "a.py"))
    fast = optimize(source, options=Options())
    assert slow.costs and fast.costs
    assert slow.costs[0].before.requests == fast.costs[0].before.requests == 8
    assert slow.costs[0].before.seconds > fast.costs[0].before.seconds + 700  # 8 × (100 − 2)

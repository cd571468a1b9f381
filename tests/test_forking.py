"""One long file's windows optimized in forked processes (``Options.jobs``): the same
result as in one process, whatever a child does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generators import dense_nnsight_script  # noqa: E402

from ndif_opt import batch, forking, optimize, pipeline  # noqa: E402
from ndif_opt.files import SourceFile  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

pytestmark = pytest.mark.skipif(not forking.can_fork(), reason="windows are forked on Linux only")

LONG = dense_nnsight_script(700)  # two groups of windows of over 300 lines each


def pid_of(item: int) -> tuple[int, int]:
    return item, os.getpid()


def test_items_after_the_first_run_in_children():
    results = forking.map_forked(pid_of, [0, 1, 2])
    assert [item for item, _ in results] == [0, 1, 2]
    pids = [pid for _, pid in results]
    assert pids[0] == os.getpid()
    assert len(set(pids)) == 3


def die_unless_first(item: int) -> int:
    if item != 0:
        os._exit(3)  # a child killed outright (the OOM killer, a segfault)
    return item


def test_a_child_that_dies_gives_none():
    assert forking.map_forked(die_unless_first, [0, 1]) == [0, None]


@pytest.fixture
def forks(monkeypatch):
    """The groups handed to processes, per call of map_forked."""
    calls: list[list[int]] = []
    original = forking.map_forked

    def recording(function, items):
        calls.append([len(item) for item in items])
        return original(function, items)

    monkeypatch.setattr(forking, "map_forked", recording)
    return calls


def test_jobs_two_gives_the_result_of_one_process(forks):
    alone = optimize(LONG, options=Options(jobs=1))
    assert forks == []
    split = optimize(LONG, options=Options(jobs=2))
    assert len(forks) == 1 and len(forks[0]) == 2 and min(forks[0]) > 10
    assert alone.changed
    assert split == alone


def test_a_short_file_is_not_split(forks):
    optimize(dense_nnsight_script(200), options=Options(jobs=2))
    assert forks == []


def test_an_editor_cache_keeps_the_windows_in_process(forks):
    cache = pipeline.WindowCache()
    assert optimize(LONG, options=Options(jobs=2), cache=cache) == optimize(LONG)
    assert forks == []


def failing_on(marker: str, error: type[BaseException], only_in_child: bool = False):
    parent = os.getpid()
    original = pipeline._run_module

    def run_module(source, options, filename=None, module=None, **keywords):
        if marker in source and (not only_in_child or os.getpid() != parent):
            if error is SystemExit:
                os._exit(3)
            raise error("window failed")
        return original(source, options, filename, module, **keywords)

    return run_module


# a window in the second half of the file: the child's share
MARKER = "stats_88 = {}"


def test_a_window_that_raises_in_a_child_raises_here(monkeypatch):
    assert MARKER in LONG[len(LONG) // 2:]
    monkeypatch.setattr(pipeline, "_run_module", failing_on(MARKER, RecursionError))
    with pytest.raises(RecursionError):
        optimize(LONG, options=Options(jobs=1))
    with pytest.raises(RecursionError):
        optimize(LONG, options=Options(jobs=2))


def test_windows_of_a_child_that_dies_are_computed_here(monkeypatch, forks):
    expected = optimize(LONG)
    monkeypatch.setattr(pipeline, "_run_module", failing_on(MARKER, SystemExit, only_in_child=True))
    assert optimize(LONG, options=Options(jobs=2)) == expected
    assert len(forks) == 1


def recording_jobs(seen: list[int]):
    def task(source: SourceFile, options: Options):
        seen.append(options.jobs)
        return batch.work(source, options)
    return task


def test_only_a_single_file_gets_the_jobs(tmp_path):
    paths = []
    for name in ("a.py", "b.py"):
        path = tmp_path / name
        path.write_text(dense_nnsight_script(40))
        paths.append(str(path))
    seen: list[int] = []
    batch.process(paths[:1], {paths[0]: Options()}, jobs=2, task=recording_jobs(seen))
    assert seen == [2]
    seen.clear()
    batch.process(paths, {p: Options() for p in paths}, jobs=1, task=recording_jobs(seen))
    assert seen == [1, 1]

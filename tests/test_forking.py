"""One long file's windows optimized in forked processes (``Options.jobs``): the same
result as in one process, whatever a child does."""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generators import dense_nnsight_script  # noqa: E402

from ndif_opt import batch, forking, optimize, pipeline  # noqa: E402
from ndif_opt.files import SourceFile  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

pytestmark = pytest.mark.skipif(not forking.can_fork(), reason="windows are forked on Linux only")

LONG = dense_nnsight_script(700)  # windows enough for two processes, many times over


def pid_of(items):
    """Each item with the process that computed it, slowly enough that both get some."""
    for item in items:
        time.sleep(0.002)
        yield item, os.getpid()


def test_items_are_shared_with_a_child_and_come_out_in_order():
    results = list(forking.map_shared(pid_of, [list(range(0, 50)), list(range(50, 100))]))
    assert [item for item, _ in results] == list(range(100))
    pids = {pid for _, pid in results}
    assert os.getpid() in pids and len(pids) == 2
    assert results[0][1] == os.getpid()  # this process starts at the front of the first group
    assert results[50][1] != os.getpid()  # the child at the front of its own


def dying_after(count: int):
    """Items squared; a child dies outright (the OOM killer, a segfault) after ``count``."""
    parent = os.getpid()

    def function(items):
        done = 0
        for item in items:
            if os.getpid() != parent and done == count:
                os._exit(3)
            time.sleep(0.002)
            done += 1
            yield item * item

    return function


@pytest.mark.parametrize("here", [True, False])
@pytest.mark.parametrize("count", [0, 1, 10])
def test_the_items_of_a_child_that_dies_are_computed_here(count, here):
    groups = [list(range(0, 40)), list(range(40, 80))]
    assert list(forking.map_shared(dying_after(count), groups, here=here)) == [item * item for item in range(80)]


def raising_in_child_on(bad: int):
    parent = os.getpid()

    def function(items):
        for item in items:
            if item == bad and os.getpid() != parent:
                raise ValueError(item)
            yield item

    return function


def test_an_item_a_child_raised_on_is_computed_here():
    groups = [list(range(0, 30)), list(range(30, 60))]
    assert list(forking.map_shared(raising_in_child_on(30), groups)) == list(range(60))


def raising_on(bad: int):
    def function(items):
        for item in items:
            if item == bad:
                raise ValueError(item)
            yield item

    return function


@pytest.mark.parametrize("here", [True, False])
@pytest.mark.parametrize("bad", [5, 45])
def test_an_error_surfaces_in_order(bad, here):
    """Every item before the bad one comes out first, wherever it was computed."""
    values = forking.map_shared(raising_on(bad), [list(range(0, 40)), list(range(40, 80))], here=here)
    got = []
    with pytest.raises(ValueError, match=str(bad)):
        for value in values:
            got.append(value)
    assert got == list(range(bad))


def test_without_items_here_every_item_is_computed_in_a_child():
    results = list(forking.map_shared(pid_of, [list(range(0, 30)), list(range(30, 60))], here=False))
    assert [item for item, _ in results] == list(range(60))
    pids = {pid for _, pid in results}
    assert os.getpid() not in pids and len(pids) == 2


def unpicklable_in_child_on(bad: int):
    parent = os.getpid()

    def function(items):
        for item in items:
            yield (lambda: item) if item == bad and os.getpid() != parent else item

    return function


@pytest.mark.parametrize("here", [True, False])
def test_a_value_a_child_cannot_send_is_computed_here(here):
    """The batch holding it is lost; this process computes what it did not get."""
    groups = [list(range(0, 30)), list(range(30, 60))]
    assert list(forking.map_shared(unpicklable_in_child_on(45), groups, here=here)) == list(range(60))


class PicklingPipe:
    """A pipe's sending end that pickles what it is given, and sends nothing."""

    closed = False

    def send(self, value) -> None:
        pickle.dumps(value)

    def close(self) -> None:
        self.closed = True


def test_a_child_that_cannot_send_its_last_batch_ends_quietly(monkeypatch):
    """No traceback from the child (the parent computes the values it did not get)."""
    import multiprocessing

    monkeypatch.setattr(batch, "_worker_init", lambda parent=None: None)  # not this process's signals
    claims = forking._Claims(multiprocessing.get_context("fork"), [3])
    pipe = PicklingPipe()
    forking._child_main(lambda items: ((lambda: item) for item in items), [1, 2, 3], claims, 0, pipe, os.getppid())
    assert pipe.closed


def test_one_group_stays_in_process():
    assert list(forking.map_shared(pid_of, [[1, 2, 3]])) == [(item, os.getpid()) for item in (1, 2, 3)]


@pytest.fixture
def forks(monkeypatch):
    """The groups handed to processes, per call of map_shared."""
    calls: list[list[int]] = []
    original = forking.map_shared

    def recording(function, groups, **keywords):
        calls.append([len(group) for group in groups])
        return original(function, groups, **keywords)

    monkeypatch.setattr(forking, "map_shared", recording)
    return calls


def test_jobs_two_gives_the_result_of_one_process(forks):
    alone = optimize(LONG, options=Options(jobs=1))
    assert forks == []
    split = optimize(LONG, options=Options(jobs=2))
    assert len(forks) == 1 and len(forks[0]) == 2 and min(forks[0]) > 10
    assert alone.changed
    assert split == alone


def test_a_short_file_is_not_split(forks):
    optimize(dense_nnsight_script(100), options=Options(jobs=2))  # under 120 lines of windows
    assert forks == []


def test_a_200_line_file_is_split(forks):
    optimize(dense_nnsight_script(200), options=Options(jobs=2))
    assert len(forks) == 1


def test_a_long_file_is_computed_in_children_only(monkeypatch):
    """From _LINES_FOR_CHILDREN_ONLY lines of windows this process computes none of them
    (it would raise here), and the result is the one process's."""
    expected = optimize(LONG)
    heres: list[bool] = []
    original = forking.map_shared

    def recording(function, groups, here=True):
        heres.append(here)
        return original(function, groups, here=here)

    parent = os.getpid()
    placed = pipeline._placed

    def placed_in_a_child(plan, window, optimized):
        assert os.getpid() != parent, "a window computed in the parent"
        return placed(plan, window, optimized)

    monkeypatch.setattr(forking, "map_shared", recording)
    monkeypatch.setattr(pipeline, "_placed", placed_in_a_child)
    monkeypatch.setattr(pipeline, "_LINES_FOR_CHILDREN_ONLY", 500)
    assert optimize(LONG, options=Options(jobs=2)) == expected
    monkeypatch.setattr(pipeline, "_LINES_FOR_CHILDREN_ONLY", 5000)
    with pytest.raises(AssertionError, match="in the parent"):
        optimize(LONG, options=Options(jobs=2))
    assert heres == [False, True]


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


@pytest.mark.parametrize("lines", [700, 1500])
def test_shared_windows_give_the_result_of_one_process(lines, forks):
    source = dense_nnsight_script(lines)
    assert optimize(source, options=Options(jobs=2)) == optimize(source, options=Options(jobs=1))
    assert len(forks) == 1


def test_a_child_that_dies_part_way_leaves_its_windows_to_this_process(monkeypatch, forks):
    """The child delivers some windows, then is killed: this process computes the rest."""
    expected = optimize(LONG)
    parent = os.getpid()
    original = pipeline._placed
    done = [0]

    def placed(plan, window, optimized):
        if os.getpid() != parent:
            if done[0] == 5:
                os._exit(3)
            done[0] += 1
        return original(plan, window, optimized)

    monkeypatch.setattr(pipeline, "_placed", placed)
    assert optimize(LONG, options=Options(jobs=2)) == expected
    assert len(forks) == 1


def test_a_window_that_gives_up_in_a_child_gives_up_the_windows(monkeypatch):
    """_placed's None (a pass changed the shared context) ends the windowed run wherever
    it was computed: the whole module runs instead, as in one process."""
    original = pipeline._placed

    def placed(plan, window, optimized):
        if MARKER in plan.text(window.start, window.end):
            return None
        return original(plan, window, optimized)

    monkeypatch.setattr(pipeline, "_placed", placed)
    whole = []
    run_module = pipeline._run_module

    def recording(source, options, filename=None, module=None, **keywords):
        if module is None and len(source) == len(LONG):
            whole.append(source)
        return run_module(source, options, filename, module, **keywords)

    monkeypatch.setattr(pipeline, "_run_module", recording)
    alone = optimize(LONG, options=Options(jobs=1))
    assert len(whole) == 1
    assert optimize(LONG, options=Options(jobs=2)) == alone
    assert len(whole) == 2


def test_a_window_a_child_raises_on_is_computed_here(monkeypatch, forks):
    expected = optimize(LONG)
    monkeypatch.setattr(pipeline, "_run_module", failing_on(MARKER, ValueError, only_in_child=True))
    assert optimize(LONG, options=Options(jobs=2)) == expected
    assert len(forks) == 1

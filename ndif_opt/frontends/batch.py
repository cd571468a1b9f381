"""Optimizing many files at once: the command line's directory mode.

Every input is read and prefiltered here, in the calling process (reading is I/O and
the prefilter — a substring test, then an ast-grep parse — takes about a millisecond);
a file without nnsight is its own result. The files that need the pipeline run in a
process pool, one task per file, largest first so a big file does not start last. With
one job, or only one file to optimize, there is no pool: the pipeline runs in this
process (what tests and debuggers want). Outcomes come back in
input order whatever order the workers finish in, so output is deterministic. Nothing
here writes files or prints: the caller does, after every outcome is in.

Importing this module imports neither libcst nor the passes: a run in which no file
needs the pipeline never pays for them. When a pool is needed and workers are forked,
the pipeline is imported once before the fork, so the workers share it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ndif_opt.engine.runtime import collector_paused, init_worker
from ndif_opt.frontends.files import InputError, SourceFile, decode, read_source, same_file
from ndif_opt.options import Options
from ndif_opt.types import Result


@dataclass(frozen=True)
class Outcome:
    """One input: its source and result, or the one-line error that stopped it."""

    path: str  # as given on the command line ("-" for stdin)
    source: SourceFile | None = None
    result: Result | None = None
    error: str | None = None


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity mask, where the OS has one)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return counter() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_modules(source: SourceFile) -> dict[str, str]:
    """The user's own modules the script imports that sit beside it (name -> source)."""
    import re

    if source.path.startswith("<"):  # stdin, or code given as a string: no folder to look in
        return {}
    folder = os.path.dirname(os.path.abspath(source.path))
    found: dict[str, str] = {}
    pattern = r"^\s*(?:from\s+([A-Za-z_][\w.]*)\s+import|import\s+([A-Za-z_][\w.]*))"
    for match in re.finditer(pattern, source.text, re.M):
        name = match.group(1) or match.group(2)
        candidate = os.path.join(folder, *name.split(".")) + ".py"
        if name not in found and os.path.isfile(candidate) and not same_file(candidate, source.path):
            try:
                found[name] = read_source(candidate).text
            except InputError:
                continue
    return found


def optimize_source(source: SourceFile, options: Options, *, prefiltered: bool = False) -> Result:
    """Run the pipeline (or the notebook pipeline) on one input; InputError names the
    file when it does not parse. ``prefiltered``: ``needs_pipeline`` said yes already.
    A script's IPython lines (``!pip install``) are kept as they are."""
    from ndif_opt.engine.cells import optimize_script

    modules = local_modules(source)
    if modules:
        options = dataclasses.replace(options, local_modules={**modules, **options.local_modules})
    if source.path.endswith(".ipynb"):
        from ndif_opt.frontends.notebook import optimize_notebook

        try:
            return optimize_notebook(source.text, options=options, filename=source.path).as_result()
        except ValueError as error:
            raise InputError(f"{source.path}: {error}") from None
        except SyntaxError as error:
            raise InputError(f"{source.path}: cannot parse: {error.msg}") from None
    try:
        return optimize_script(source.text, options, filename=source.path, prefiltered=prefiltered)
    except SyntaxError as error:
        raise InputError(f"{source.path}: cannot parse: {error.msg}") from None
    except RecursionError:
        raise InputError(f"{source.path}: too deeply nested to analyse") from None


def _check_syntax(source: SourceFile) -> None:
    from ndif_opt.engine.cells import check_script_syntax

    try:
        check_script_syntax(source.text, source.path)
    except SyntaxError as error:
        raise InputError(f"{source.path}: cannot parse: {error.msg}") from None


def needs_pipeline(source: SourceFile) -> bool:
    """False when the result is known without the pipeline: a script without nnsight
    comes back untouched (what ``run_pipeline`` returns after the same prefilter)."""
    if source.path.endswith(".ipynb"):
        return True  # the prefilter looks at code, not at a notebook's JSON
    from ndif_opt.engine.prefilter import uses_nnsight

    return uses_nnsight(source.text)


def work(source: SourceFile, options: Options) -> tuple[Result | None, str | None]:
    """One task of the pool (also run in-process with one job): a result or an error.
    ``process`` hands it only files that passed the prefilter. The processes that run it
    are ndif-opt's: no garbage collection during the file (ndif_opt/engine/runtime.py)."""
    try:
        with collector_paused():
            return optimize_source(source, options, prefiltered=True), None
    except InputError as error:
        return None, str(error)


class Terminated(BaseException):
    """SIGTERM arrived while a pool was running (the workers have been stopped)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _context():
    import multiprocessing

    # fork on Linux: a worker starts in milliseconds with the modules already imported.
    # Elsewhere the platform's default (spawn, forkserver): each worker imports them.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _pool(workers: int):
    from concurrent.futures import ProcessPoolExecutor

    context = _context()
    if context.get_start_method() == "fork":
        # import the pipeline once, here: every forked worker inherits it instead of
        # importing it again (the same wall time, a fraction of the CPU)
        import ndif_opt.engine.pipeline  # noqa: F401
        import ndif_opt.frontends.notebook  # noqa: F401
    sys.stdout.flush()  # a forked child flushes its copy of unflushed output when it exits
    sys.stderr.flush()
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                               initargs=(os.getpid(),))


def _stop(pool) -> None:
    """Stop a pool now: cancel what has not started and end the running workers."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # taken before shutdown(), which drops the pool's reference to its manager thread
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
    # let the pool's manager thread see its workers gone and close its wakeup pipe before
    # the interpreter exits: else Python 3.11's exit hook may write to that pipe while the
    # thread closes it ("Exception ignored ... Bad file descriptor" on the terminal, seen
    # under load after SIGTERM and after Ctrl-C)
    if manager is not None:
        manager.join(timeout=5)


def _catch_sigterm():
    """While workers run, SIGTERM (a CI timeout, `kill`) stops them before this process
    ends: it raises :class:`Terminated` here. Returns the handler to restore."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        return None


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _isolated(task: Callable, source: SourceFile, options: Options) -> tuple[Result | None, str | None]:
    """Run one file in a pool of its own, after a worker died: if this file is what
    kills it, only this file fails."""
    from concurrent.futures.process import BrokenProcessPool

    pool = _pool(1)
    try:
        outcome = pool.submit(task, source, options).result()
    except BrokenProcessPool:
        outcome = None, f"{source.path}: the worker process stopped unexpectedly (out of memory, or a crash)"
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return outcome


def process(
    paths: Sequence[str],
    options: Mapping[str, Options],
    *,
    jobs: int = 1,
    progress=None,
    task: Callable[[SourceFile, Options], tuple[Result | None, str | None]] = work,
) -> list[Outcome]:
    """Outcomes for ``paths`` in the same order. ``options`` maps each path to its
    options; ``jobs`` is the most worker processes (1: none); ``progress`` (a
    :class:`ndif_opt.frontends.progress.Progress`) advances once per file. ``task`` is the
    per-file function (module-level, so a worker can unpickle it). An InputError
    becomes that file's error; any other exception stops the run and propagates."""
    outcomes: list[Outcome | None] = [None] * len(paths)
    pending: list[tuple[int, SourceFile]] = []

    def advance() -> None:
        if progress is not None:
            progress.advance()

    def redraw() -> None:  # the elapsed time moves on while a long file runs
        if progress is not None and hasattr(progress, "draw"):
            progress.draw()

    for index, path in enumerate(paths):
        try:
            source = decode("<stdin>", sys.stdin.buffer.read()) if path == "-" else read_source(path)
            if needs_pipeline(source):
                pending.append((index, source))
                continue
            _check_syntax(source)  # a file without nnsight still has to be Python
            outcomes[index] = Outcome(path, source, Result(source=source.text, code=source.text))
        except InputError as error:
            outcomes[index] = Outcome(path, error=str(error))
        advance()

    def settle(index: int, source: SourceFile, result: Result | None, error: str | None) -> None:
        outcomes[index] = Outcome(paths[index], source, result, error) if error is None else (
            Outcome(paths[index], error=error))
        advance()

    redraw()  # the scan is done: show how far it got
    pool = None
    if jobs > 1 and len(pending) > 1:
        try:
            pool = _pool(min(jobs, len(pending)))
        except (OSError, ImportError, NotImplementedError):  # no process support here
            pool = None
    if pool is None:
        for index, source in pending:
            settle(index, source, *task(source, options[paths[index]]))
        return outcomes  # type: ignore[return-value]

    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    crashed: list[tuple[int, SourceFile]] = []
    previous = None
    try:
        # largest first: the longest tasks start early, the short ones fill the gaps
        order = sorted(pending, key=lambda item: -len(item[1].text))
        futures = {pool.submit(task, source, options[paths[index]]): (index, source) for index, source in order}
        previous = _catch_sigterm()  # after the first submit: forked workers are started
        remaining = set(futures)
        while remaining:
            done, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
            if not done:
                redraw()
            for future in sorted(done, key=lambda f: futures[f][0]):
                index, source = futures[future]
                try:
                    result, error = future.result()
                except BrokenProcessPool:
                    crashed.append((index, source))
                    continue
                settle(index, source, result, error)
    except BaseException:  # an interrupt, or a task that raised: stop the others now
        _stop(pool)
        raise
    finally:
        _restore_sigterm(previous)
    pool.shutdown(wait=True)
    for index, source in sorted(crashed, key=lambda item: item[0]):
        settle(index, source, *_isolated(task, source, options[paths[index]]))
    return outcomes  # type: ignore[return-value]

"""Settings of the processes ndif-opt owns: the command line, its workers, the editor server.

Workers (:func:`init_worker`) ignore Ctrl-C, which their parent handles, and end when
their parent dies.

Garbage collection. The pipeline allocates millions of short-lived objects (libcst nodes,
rebuilt trees, shapes) while the parsed file and the caches keyed by node stay alive, so
with Python's default thresholds (a collection every 700 net allocations) the collector
keeps re-examining the same long-lived trees: 17-22% of the run on a 5,000-line dense
script (4.8 s -> 4.0 s with the thresholds below; the peak memory is the same, 175 MB,
since almost all garbage is freed by reference counting, not by the collector). Library
callers of ``ndif_opt.optimize`` keep their interpreter's settings: a library should not
change process-wide state behind its caller's back.

While one file is optimized the collector does not run at all (:func:`collector_paused`).
What a run leaves for the collector is its cyclic garbage, and the pipeline makes almost
none (tests/engine/test_runtime.py keeps it so: ~50 objects for a 300-line dense script), so the
memory is the same; what goes is the collector's walks over the young trees that are
alive anyway: 7% of a 5,000-line dense run and 11% of a 20,000-line one (timed with
``gc.callbacks``); ``ast.parse`` of the 20,000 lines took 260 ms without collections and
500-830 ms with them.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: Collections of the youngest generation every 100,000 net allocations (Python's default:
#: 700); the older generations after 50 and 100 of the younger ones (default: 10 and 10).
THRESHOLDS = (100_000, 50, 100)


def collect_garbage_rarely() -> None:
    """Fewer garbage collections for the rest of this process (see the module docstring)."""
    gc.set_threshold(*THRESHOLDS)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection inside the block (one file's run), then as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def init_worker(parent: int | None = None) -> None:
    """Settings of a worker process of directory mode's pool (``parent``: the pid of the
    process that started it)."""
    collect_garbage_rarely()  # inherited when forked; set again where workers are spawned
    # Ctrl-C on a terminal reaches the whole process group: the parent handles it and
    # stops the workers, which must not each print a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, if inherited
    if sys.platform.startswith("linux"):
        # a parent killed outright (SIGKILL) cannot stop its workers: have the kernel
        # end a worker whose parent is gone, instead of leaving it computing, then asleep
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if parent is not None and os.getppid() != parent:  # it died before the prctl
            os._exit(1)

"""One file's independent parts computed in forked processes: the command line's way of
using every core on a single long script (directory mode uses them one file each).

:func:`map_forked` is ``[function(item) for item in items]`` with every item after the
first computed in a child process forked for it while this process computes the first.
A child inherits everything already in memory (the parsed plan, imported modules, warm
caches), so nothing is pickled on the way in; only its result comes back, pickled through
a pipe. Where forking is not available (not Linux, or the fork fails) the items are
computed here, one after another: the results are the same, only slower.

A child that stops without a result (killed, out of memory) gives ``None`` for its item;
the caller computes that item itself, so a failure shows up exactly as it would have in
this process. Children ignore Ctrl-C (the parent handles it and ends them) and, on Linux,
end when the parent dies.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Value = TypeVar("Value")


def can_fork() -> bool:
    return sys.platform.startswith("linux")


def map_forked(function: Callable[[Item], Value], items: Sequence[Item]) -> list[Value | None]:
    """``function`` of each item, in order; items after the first in forked children.
    ``None`` for an item whose child gave no result."""
    if len(items) < 2 or not can_fork():
        return [function(item) for item in items]
    import multiprocessing

    context = multiprocessing.get_context("fork")
    sys.stdout.flush()  # a forked child flushes its copy of unflushed output when it exits
    sys.stderr.flush()
    children = []
    try:
        for item in items[1:]:
            children.append(_start(context, function, item))
        results: list[Value | None] = [function(items[0])]
        for child in children:
            results.append(_result_of(child, function))
        return results
    finally:
        for child in children:
            child.stop()


class _Child:
    def __init__(self, process, receive, item) -> None:
        self.process = process
        self.receive = receive
        self.item = item

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
        if self.process is not None:
            self.process.join(timeout=5)
        if self.receive is not None:
            self.receive.close()


def _start(context, function: Callable, item) -> _Child:
    try:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_child_main, args=(function, item, send, os.getpid()), daemon=True)
        process.start()
    except OSError:  # no fork here (process limit, memory): the item is computed here
        return _Child(None, None, item)
    send.close()  # the child holds the only writing end: its exit ends our reading
    return _Child(process, receive, item)


def _result_of(child: _Child, function: Callable):
    if child.process is None:
        return function(child.item)
    try:
        return child.receive.recv()
    except (EOFError, OSError):  # the child stopped without sending
        return None


def _child_main(function: Callable, item, send, parent: int) -> None:
    from ndif_opt.batch import _worker_init

    _worker_init(parent)
    try:
        send.send(function(item))
    except BaseException:  # noqa: BLE001 - the parent computes this item itself
        pass
    finally:
        send.close()

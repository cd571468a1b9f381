"""One file's independent parts computed in forked processes: the command line's way of
using every core on a single long script (directory mode uses them one file each).

:func:`map_shared` is ``function(items)`` (one value per item, in order) with the items
shared out while they are computed: one process per group of neighbouring items (this
one for the first group, or, with ``here=False``, a forked child for every group) starts
at the front of its group and claims its items one at a time, through counters in memory
every process sees; a process whose group is done takes the item from the back of the
group with most left. So every process works until nothing is left and they all finish
together, however unevenly the items or the machine's load are spread; each works on
runs of neighbours (neighbours share context, which each process prepares once). A child
inherits everything already in memory (the items, imported modules, warm caches), so
nothing is pickled on the way in; it sends its values back, pickled through a pipe, in
batches (every 50 ms, and when it is done), and this process reads them between its own
items and when it has none left.

Without items of its own (``here=False``) this process keeps nothing of the work: what
the computation leaves in memory (caches keyed by what it worked on) goes with the
children, which exit without freeing it, instead of staying here for the garbage
collector to walk and for the interpreter to free at exit.

The values come out in item order, the same as in one process. An item a child claimed
but never delivered (it raised, or the child was killed, or ran out of memory) is computed
here when its turn comes, as is one this process raised on while claiming, so a failure
shows up exactly as it would have in one process. Children ignore Ctrl-C (the parent
handles it and ends them), end when the parent dies, and are stopped when the values
have been read or the reader stops early. Where forking is not available (not Linux, or
the fork fails) the items are computed here: the values are the same, only slower.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Value = TypeVar("Value")

# a value not yet received: its child may still send it
_PENDING = object()


def can_fork() -> bool:
    return sys.platform.startswith("linux")


def map_shared(function: Callable[[Iterable[Item]], Iterator[Value]],
               groups: Sequence[Sequence[Item]], *, here: bool = True) -> Iterator[Value]:
    """The values of ``function`` over the items of the groups, in order, computed here and
    in a forked child per group after the first (``here=False``: in a child per group,
    this process computing only what a child did not deliver). ``function`` takes the
    items as it asks for them and yields one value per item before it asks for the next;
    it may stop early (then the items it did not ask for are still computed, elsewhere)."""
    items = [item for group in groups for item in group]
    if len(groups) < 2 or not can_fork():
        yield from function(items)
        return
    import multiprocessing

    context = multiprocessing.get_context("fork")
    claims = _Claims(context, [len(group) for group in groups])
    sys.stdout.flush()  # a forked child flushes its copy of unflushed output when it exits
    sys.stderr.flush()
    children: list[_Child] = []
    try:
        for group in range(1 if here else 0, len(groups)):
            child = _start(context, function, items, claims, group)
            if child is not None:
                children.append(child)
        yield from _Gathering(function, items, claims, children).values(here)
    finally:
        for child in children:
            child.stop()


class _Claims:
    """Which items are left: per group, the first and one past the last item nobody has
    claimed (indexes into all the items), in memory shared by the processes."""

    def __init__(self, context, sizes: list[int]) -> None:
        bounds: list[int] = []
        start = 0
        for size in sizes:
            bounds += [start, start + size]
            start += size
        self.lock = context.Lock()
        self.bounds = context.RawArray("q", bounds)

    def take(self, group: int) -> int | None:
        """The next item of the group's front, or else the last of the group with most
        left; None when every item is claimed."""
        bounds = self.bounds
        with self.lock:
            front, back = bounds[2 * group], bounds[2 * group + 1]
            if front < back:
                bounds[2 * group] = front + 1
                return front
            largest = max(range(len(bounds) // 2), key=lambda g: bounds[2 * g + 1] - bounds[2 * g])
            front, back = bounds[2 * largest], bounds[2 * largest + 1]
            if front < back:
                bounds[2 * largest + 1] = back - 1
                return back - 1
            return None

    def each(self, group: int, claimed: list[int]) -> Iterator[int]:
        """The items this process claims, one at a time, each appended to ``claimed``."""
        while (index := self.take(group)) is not None:
            claimed.append(index)
            yield index


def _values_of(function: Callable, items: Sequence, indexes: Iterable[int]) -> Iterator:
    return function(items[index] for index in indexes)


def _served(queue: list[int]) -> Iterator[int]:
    """The indexes put in ``queue``, each taken when asked for (one is put before each)."""
    while queue:
        yield queue.pop(0)


class _Child:
    def __init__(self, process, receive) -> None:
        self.process = process
        self.receive = receive

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(timeout=5)
        self.receive.close()


def _start(context, function: Callable, items: Sequence, claims: _Claims, group: int) -> _Child | None:
    try:
        receive, send = context.Pipe(duplex=False)
        _widen(send)
        process = context.Process(target=_child_main, args=(function, items, claims, group, send, os.getpid()),
                                  daemon=True)
        process.start()
    except OSError:  # no fork here (process limit, memory): its items are computed here
        return None
    send.close()  # the child holds the only writing end: its exit ends our reading
    return _Child(process, receive)


def _widen(send) -> None:
    """A larger pipe (Linux allows 1 MiB unprivileged), so that a child seldom waits for
    this process to read while it computes its own items."""
    try:
        import fcntl

        fcntl.fcntl(send.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


# a child sends its values in batches, one at least this often (seconds) and one when it
# is done: a message per value cost this process ~0.3 ms each to receive (waking, two
# reads, a selector), 0.25 s of dense-5k's 750 windows
_SEND_EVERY = 0.05


def _child_main(function: Callable, items: Sequence, claims: _Claims, group: int, send, parent: int) -> None:
    from ndif_opt.batch import _worker_init

    _worker_init(parent)
    claimed: list[int] = []
    batch: list[tuple[int, object]] = []
    sent = time.perf_counter()
    try:
        for value in _values_of(function, items, claims.each(group, claimed)):
            batch.append((claimed[-1], value))
            if time.perf_counter() - sent >= _SEND_EVERY:
                send.send(batch)
                batch, sent = [], time.perf_counter()
    except BaseException:  # noqa: BLE001 - the parent computes the item it stopped on
        pass
    finally:
        try:
            if batch:
                send.send(batch)
        except BaseException:  # noqa: BLE001 - the parent computes what it did not get
            pass
        finally:
            send.close()


class _Gathering:
    """This process's side of :func:`map_shared`: its own items, the children's values
    as they arrive, and the values in order."""

    def __init__(self, function: Callable, items: Sequence, claims: _Claims, children: list[_Child]) -> None:
        self.function = function
        self.items = items
        self.claims = claims
        self.open = [child.receive for child in children]
        self.values_by_index: list = [_PENDING] * len(items)
        self.next = 0  # the first value not yet given out

    def values(self, here: bool) -> Iterator:
        """The values in order: with ``here``, this process's own first (the first group's
        front), then each value as it comes or, never delivered, computed here."""
        if here:
            yield from self._own()
        leftovers: list[int] = []
        computed = _values_of(self.function, self.items, _served(leftovers))
        for index in range(self.next, len(self.items)):
            while self.values_by_index[index] is _PENDING and self.open:
                self._receive(block=True)
            if self.values_by_index[index] is _PENDING:  # never delivered: compute it here
                leftovers.append(index)
                value = next(computed, _PENDING)
                if value is _PENDING:
                    return  # the function stopped (as in one process, where its values end)
                yield value
            else:
                yield self.values_by_index[index]
            self.values_by_index[index] = None  # given out: not kept

    def _own(self) -> Iterator:
        """Claim and compute items here, giving out each value whose turn has come; on an
        error stop claiming (the item is computed again in turn, where it raises)."""
        claimed: list[int] = []
        values = _values_of(self.function, self.items, self.claims.each(0, claimed))
        while True:
            try:
                value = next(values)
            except StopIteration:
                return
            except Exception:  # noqa: BLE001 - recomputed in turn, where it raises for the caller
                return
            self.values_by_index[claimed[-1]] = value
            self._receive(block=False)
            while self.next < len(self.items) and self.values_by_index[self.next] is not _PENDING:
                yield self.values_by_index[self.next]
                self.values_by_index[self.next] = None
                self.next += 1

    def _receive(self, block: bool) -> None:
        """The values the children have sent (waiting for one at least when ``block``);
        a child whose pipe ends has stopped."""
        from multiprocessing.connection import wait

        for receive in wait(self.open, timeout=None if block else 0):
            try:
                while receive.poll():
                    for index, value in receive.recv():
                        self.values_by_index[index] = value
            except (EOFError, OSError):
                self.open.remove(receive)

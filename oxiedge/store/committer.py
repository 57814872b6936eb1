"""Group commit: every acknowledgement in oxiedge waits here for its synced round.

Theory of operation
-------------------
Writers *stage* operations into the pending ``WriteBatch`` (synchronously, no await) and then
``await commit()``, which waits for the round that contains everything staged so far. A round
swaps the pending batch for an empty one, writes it with an unsynced ``db.write``
(microseconds, in the event-loop thread), then makes it durable with ``flush_wal(True)`` in
the sync thread (``_SyncThread``). ``flush_wal`` issues the same ``write``/``fdatasync`` calls
as a synced write but releases the GIL, whereas a synced ``write`` would hold the GIL through
the fsync and freeze the event loop (docs/storage.md). Then every waiter of the round is
woken through one shared event.

* The first ``commit()`` that finds no sync in flight leads the round: it starts it in its
  own task and waits for the sync thread's wake-up fd itself, so a lone writer is committed
  at once, with no timer and no hop through another task.
* Writers arriving while a sync runs stage into the next batch and share the next round,
  which the finishing round starts at once.
* The committer task (``run``) starts the rounds that only ``kick()`` asked for, finishes
  the syncs nobody leads (a round started as the previous one finished, a cancelled leader)
  and commits what is left at shutdown.
* If the write or the sync fails, every waiter of that round gets ``CommitError`` and the
  committer refuses all later rounds: an fsync failure is never retried (the kernel may have
  dropped the dirty pages), so nothing written after it may be acknowledged either.
  ``failed_event`` is set at that moment; the server (``server.py``) then exits non-zero
  (crash-only: systemd restarts it and recovery runs from what *is* on disk).
* Nothing else in oxiedge syncs.

Fault injection (tests only): ``OXIEDGE_TEST_SYNC_EIO_AFTER=N`` makes the sync thread raise
``OSError(EIO)`` instead of syncing once N syncs succeeded, the way a failing disk reports a
lost write through ``fdatasync``. It exercises the real failure path of the real committer
(a real ``serve`` process, the real threads and waiters) where no test can make a disk fail.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

import trio
from rocksdict import Rdict, WriteBatch

from oxiedge.histogram import BATCH_OPERATIONS, ROUND_SECONDS, Histogram


class CommitError(RuntimeError):
    """A commit round failed; nothing in it may be acknowledged."""


#: Test-only fault injection (module docstring); unset in production.
FAULT_ENV = "OXIEDGE_TEST_SYNC_EIO_AFTER"


def _with_injected_fault(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn``, or ``fn`` that fails with EIO after ``$OXIEDGE_TEST_SYNC_EIO_AFTER`` calls."""
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return fn
    left = [int(raw)]

    def faulty() -> object:
        if left[0] <= 0:
            raise OSError(errno.EIO, f"Input/output error (injected by {FAULT_ENV})")
        left[0] -= 1
        return fn()

    return faulty


class _Round:
    __slots__ = ("done", "error", "number")

    def __init__(self, number: int) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.number = number  # the batch's generation (``GroupCommitter.generation``)


class _SyncThread:
    """One long-lived thread that runs ``flush_wal(True)`` for the committer.

    The loop thread hands it a request through a ``SimpleQueue`` (no await) and learns of the
    result through a wakeup fd (an ``eventfd``, a pipe where there is none) that the waiting
    task watches with ``wait_readable``: epoll wakes *that* task directly, with no hop through
    trio's ``run_sync_soon`` task or a worker-thread cache. One sync is in flight at a time.
    """

    def __init__(self, fn: Callable[[], object]) -> None:
        self._fn = fn
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._rfd = self._wfd = -1
        self._error: BaseException | None = None

    def start(self) -> None:
        if hasattr(os, "eventfd"):
            self._rfd = self._wfd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        else:  # pragma: no cover - macOS
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
        self._thread = threading.Thread(target=self._loop, name="oxiedge-wal-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._requests.put(False)
            self._thread.join()
            self._thread = None
            os.close(self._rfd)
            if self._wfd != self._rfd:
                os.close(self._wfd)
            self._rfd = self._wfd = -1

    def request(self) -> None:
        """Start one sync in the thread (returns at once)."""
        self._requests.put(True)

    async def wait_done(self) -> BaseException | None:
        """Wait for the sync started by :meth:`request`; returns its exception, if any.

        If cancelled, the sync is still running and its result still unread: another task
        must call this again (the committer does).
        """
        await trio.lowlevel.wait_readable(self._rfd)
        os.read(self._rfd, 8)
        error, self._error = self._error, None
        return error

    def _loop(self) -> None:
        while self._requests.get():
            try:
                self._fn()
            except BaseException as exc:  # handed to the waiting task
                self._error = exc
            # The result is stored before the wake-up is written (the GIL orders both).
            os.write(self._wfd, (1).to_bytes(8, sys.byteorder))


class GroupCommitter:
    """Batches staged writes of many tasks into one synced RocksDB write per round.

    Who runs a round: the first ``commit()`` that finds no sync in flight starts the round
    itself (unsynced ``db.write`` in its own task, then the sync thread is asked) and waits
    for the sync's wake-up fd itself, then wakes the other waiters of the round: a lone
    writer's round costs no hop through another task. Writers arriving during a sync stage
    into the next batch; the round that finishes starts the next one at once. The committer
    task (``run``) starts rounds that only ``kick()`` asked for, waits for the syncs nobody
    leads (a round started when the previous one finished, or a leader that was cancelled),
    and commits what is left at shutdown.
    """

    def __init__(self, db: Rdict, before_write: Callable[[WriteBatch], None] | None = None) -> None:
        self._db = db
        self._before_write = before_write
        self.batch = WriteBatch(raw_mode=True)
        #: the generation of ``batch``: each batch gets the next number when it is created
        self.generation = 1
        #: every batch of this generation or older is synced (0: none yet)
        self.synced_generation = 0
        self._deferred = False  # ``before_write`` has work even if ``batch`` is empty
        self._round = _Round(1)  # the round of ``batch`` (not started yet)
        self._syncing: _Round | None = None  # the round whose sync is in flight
        self._leading = False  # a commit() task waits for the sync in flight itself
        self._requested = False  # someone waits for (or kicked) the pending batch
        self._leader_gone: trio.Event | None = None  # shutdown waits for a leader (run)
        self._wake: trio.Event | None = None
        self._failure: BaseException | None = None
        self._running = False
        self._count = 0  # operations in the round in flight
        self._sync_thread = _SyncThread(_with_injected_fault(lambda: db.flush_wal(True)))
        self.rounds = 0  # synced rounds completed
        self.ops = 0  # operations committed
        #: each synced round's time from its write to the end of its sync, and its size
        #: (``/metrics``: oxiedge_store_commit_round_seconds / _batch_operations)
        self.round_seconds = Histogram(ROUND_SECONDS)
        self.batch_operations = Histogram(BATCH_OPERATIONS)
        self._round_started = 0.0
        #: set once, when durable writing stopped (the server exits on it)
        self.failed_event = trio.Event()
        #: ``time.monotonic()`` when the sync in flight started (None: no sync running)
        self.sync_started: float | None = None
        #: called with the generation of each synced round, after its waiters were woken
        #: (stream queues learn which of their records readers may see); never raises here
        self.after_sync: list[Callable[[int], None]] = []

    @property
    def failed(self) -> BaseException | None:
        """The error that stopped durable writing, if any."""
        return self._failure

    def stuck_for(self) -> float:
        """Seconds the sync in flight has been running (0 when none runs)."""
        started = self.sync_started
        return 0.0 if started is None else time.monotonic() - started

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            self.failed_event.set()

    @property
    def pending(self) -> bool:
        return self._deferred or not self.batch.is_empty()

    def defer(self) -> None:
        """``before_write`` has operations to stage into the next round (coalesced range
        deletes, queue counters): that round runs even if nothing else is staged."""
        self._deferred = True

    def _next_batch(self) -> None:
        """Swap in an empty batch of the next generation (the caller holds the old one)."""
        self.generation += 1
        self.batch, self._round = WriteBatch(raw_mode=True), _Round(self.generation)
        self._deferred = False

    def kick(self) -> None:
        """Have the staged operations committed soon, without waiting for them."""
        self._requested = True
        if self._wake is not None and self._syncing is None:
            self._wake.set()  # the committer starts the round once this task yields

    async def commit(self) -> None:
        """Wait until everything staged before this call is durable.

        Raises ``CommitError`` if the round failed (or durable writing stopped earlier).
        """
        if self._failure is not None:
            raise CommitError(f"durable writes stopped: {self._failure}") from self._failure
        if not self._running:
            raise CommitError("the group committer is not running")
        if self.pending:
            round_ = self._round
            if self._syncing is None:
                self._start_round()
                if self._syncing is round_:
                    await self._lead()
                if round_.done.is_set():  # (no second scheduler pass for the leader)
                    if round_.error is not None:
                        raise CommitError(f"commit failed: {round_.error}") from round_.error
                    return
            else:
                self._requested = True  # the round in flight starts this one when it ends
        elif self._syncing is not None:
            round_ = self._syncing  # what this caller staged may be in the round in flight
        else:
            await trio.lowlevel.checkpoint()  # nothing staged, nothing in flight: durable
            return
        await round_.done.wait()
        if round_.error is not None:
            raise CommitError(f"commit failed: {round_.error}") from round_.error

    def _start_round(self) -> None:
        """Write the pending batch (unsynced) and have the sync thread sync it."""
        self._requested = False
        batch, round_ = self.batch, self._round
        try:
            try:
                if self._failure is not None:
                    raise CommitError(f"durable writes stopped: {self._failure}")
                if self._before_write is not None:  # it stages into ``batch`` (not swapped)
                    self._before_write(batch)
            finally:
                self._next_batch()
            count = batch.len()
            self._round_started = time.monotonic()
            self._db.write(batch)
        except Exception as exc:
            self._fail(exc)
            round_.error = exc
            round_.done.set()
            return
        self._count = count
        self._syncing = round_
        self.sync_started = time.monotonic()
        self._sync_thread.request()

    def _finish_round(self, error: BaseException | None) -> None:
        """The sync in flight returned: wake its waiters; start the next round if asked."""
        round_ = self._syncing
        assert round_ is not None
        self._syncing = None
        self.sync_started = None
        if error is None:
            self.ops += self._count
            self.rounds += 1
            self.round_seconds.observe(time.monotonic() - self._round_started)
            self.batch_operations.observe(self._count)
            self.synced_generation = round_.number
        else:
            self._fail(error)
            round_.error = error
        round_.done.set()  # only now: every waiter of the round is after its WAL sync
        if self._requested and self.pending:
            self._start_round()
            if self._syncing is not None and self._wake is not None:
                self._wake.set()  # nobody leads this round: the committer waits for it
        if error is None:
            self._synced(round_.number)

    def _synced(self, generation: int) -> None:
        for fn in self.after_sync:
            try:
                fn(generation)
            except Exception:  # a listener's bug must not stop durable writing
                logging.getLogger(__name__).exception("after-sync listener failed")

    async def _lead(self) -> None:
        """Wait for the sync in flight in this task (it started the round)."""
        self._leading = True
        try:
            error = await self._sync_thread.wait_done()
        except BaseException:
            # Cancelled before the sync returned: the committer task takes the round over.
            self._leading = False
            if self._wake is not None:
                self._wake.set()
            if self._leader_gone is not None:
                self._leader_gone.set()
            raise
        self._leading = False
        self._finish_round(error)
        if self._leader_gone is not None:
            self._leader_gone.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The committer task; runs until cancelled, then commits what is still pending."""
        self._running = True
        self._wake = trio.Event()
        self._sync_thread.start()
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await self._serve()
        finally:
            self._running = False
            self._wake = None
            # A sync in flight: its outcome is known before the thread stops, so no waiter
            # is left with an unknown one (a leader still waiting finishes it itself).
            with trio.CancelScope(shield=True):
                while self._syncing is not None:
                    if self._leading:
                        self._leader_gone = trio.Event()
                        await self._leader_gone.wait()
                        self._leader_gone = None
                    else:
                        self._finish_round(await self._sync_thread.wait_done())
            self._sync_thread.stop()
            if self._failure is None:
                self.commit_blocking()

    async def _serve(self) -> None:
        while True:
            if self._syncing is not None:
                if self._leading:
                    return  # its leader finishes it (and wakes us for an unled next one)
                # Shielded: a cancelled server still waits for the sync it started.
                with trio.CancelScope(shield=True):
                    error = await self._sync_thread.wait_done()
                self._finish_round(error)
            elif self._requested and self.pending:
                self._start_round()
            else:
                self._requested = False
                return

    def commit_blocking(self) -> None:
        """Write and sync the pending batch in the calling thread (CLI, shutdown).

        Only for code without a running event loop to freeze; raises ``CommitError``.
        """
        if self._failure is not None:
            if self.pending:
                raise CommitError(f"durable writes stopped: {self._failure}")
            return
        if not self.pending:
            return
        batch, round_ = self.batch, self._round
        try:
            try:
                if self._before_write is not None:  # it stages into ``batch`` (not swapped)
                    self._before_write(batch)
            finally:
                self._next_batch()
            count = batch.len()
            self._db.write(batch)
            self._db.flush_wal(True)
            self.ops += count
            self.rounds += 1
            self.synced_generation = round_.number
            self._synced(round_.number)
        except Exception as exc:
            self._fail(exc)
            round_.error = exc
            raise CommitError(f"commit failed: {exc}") from exc
        finally:
            round_.done.set()


"""Group commit: every acknowledgement in oxiedge waits here for its synced round.

Theory of operation
-------------------
Writers *stage* operations into the pending ``WriteBatch`` (synchronously, no await) and then
``await commit()``, which waits for the round that contains everything staged so far. One
committer task runs the rounds: it swaps the pending batch for an empty one, writes it with an
unsynced ``db.write`` (microseconds, in the event-loop thread), then makes it durable with
``flush_wal(True)`` in a worker thread. ``flush_wal`` issues the same ``write``/``fdatasync``
calls as a synced write but releases the GIL, whereas a synced ``write`` would hold the GIL
through the fsync and freeze the event loop (STORAGE-NOTES.md). Then every waiter of the round
is woken through one shared event.

* A lone writer is committed at once: ``commit()`` wakes the committer, no timer.
* Writers arriving while a sync runs stage into the next batch and share the next round.
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
import os
import queue
import threading
import time
from collections.abc import Callable

import trio
from rocksdict import Rdict, WriteBatch


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
    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class _SyncThread:
    """One long-lived thread that runs ``flush_wal(True)`` for the committer.

    Cheaper per round than ``trio.to_thread.run_sync`` (no capacity limiter, no thread-cache
    hand-off, no context copy): the loop thread puts a request in a queue and waits on an
    event that the sync thread sets through the trio token when the sync returned.
    """

    def __init__(self, fn: Callable[[], object]) -> None:
        self._fn = fn
        self._requests: queue.SimpleQueue[tuple[trio.Event, list[BaseException]] | None] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._loop, name="oxiedge-wal-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join()
            self._thread = None

    async def sync(self) -> None:
        """Run one sync in the thread; re-raises its exception here."""
        done = trio.Event()
        errors: list[BaseException] = []
        self._requests.put((done, errors))
        await done.wait()
        if errors:
            raise errors[0]

    def _loop(self) -> None:
        assert self._token is not None
        while True:
            request = self._requests.get()
            if request is None:
                return
            done, errors = request
            try:
                self._fn()
            except BaseException as exc:  # handed to the waiting task
                errors.append(exc)
            try:
                self._token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                return


class GroupCommitter:
    """Batches staged writes of many tasks into one synced RocksDB write per round."""

    def __init__(self, db: Rdict, before_write: Callable[[WriteBatch], None] | None = None) -> None:
        self._db = db
        self._before_write = before_write
        self.batch = WriteBatch(raw_mode=True)
        self._round = _Round()
        self._wake: trio.Event | None = None
        self._failure: BaseException | None = None
        self._running = False
        self._sync_thread = _SyncThread(_with_injected_fault(lambda: db.flush_wal(True)))
        self.rounds = 0  # synced rounds completed
        self.ops = 0  # operations committed
        #: set once, when durable writing stopped (the server exits on it)
        self.failed_event = trio.Event()
        #: ``time.monotonic()`` when the sync in flight started (None: no sync running)
        self.sync_started: float | None = None

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
        return not self.batch.is_empty()

    def kick(self) -> None:
        """Have the staged operations committed soon, without waiting for them."""
        if self._wake is not None:
            self._wake.set()

    async def commit(self) -> None:
        """Wait until everything staged before this call is durable.

        Raises ``CommitError`` if the round failed (or durable writing stopped earlier).
        """
        if self._failure is not None:
            raise CommitError(f"durable writes stopped: {self._failure}") from self._failure
        if not self._running:
            raise CommitError("the group committer is not running")
        round_ = self._round
        self.kick()
        await round_.done.wait()
        if round_.error is not None:
            raise CommitError(f"commit failed: {round_.error}") from round_.error

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
                await self._run_round()
        finally:
            self._running = False
            self._wake = None
            self._sync_thread.stop()
            if self._failure is None:
                self.commit_blocking()

    async def _run_round(self) -> None:
        batch, round_ = self.batch, self._round
        self.batch, self._round = WriteBatch(raw_mode=True), _Round()
        try:
            if self._failure is not None:
                raise CommitError(f"durable writes stopped: {self._failure}")
            if not batch.is_empty():
                if self._before_write is not None:
                    self._before_write(batch)
                count = batch.len()
                self._db.write(batch)
                # Shielded: a cancelled server still waits for the sync it started, so no
                # waiter is left with an unknown outcome.
                self.sync_started = time.monotonic()
                try:
                    with trio.CancelScope(shield=True):
                        await self._sync_thread.sync()
                finally:
                    self.sync_started = None
                self.ops += count
            self.rounds += 1
        except BaseException as exc:
            self._fail(exc)
            round_.error = exc
            if not isinstance(exc, Exception):
                round_.done.set()
                raise
        round_.done.set()

    def commit_blocking(self) -> None:
        """Write and sync the pending batch in the calling thread (CLI, shutdown).

        Only for code without a running event loop to freeze; raises ``CommitError``.
        """
        if self._failure is not None:
            if not self.batch.is_empty():
                raise CommitError(f"durable writes stopped: {self._failure}")
            return
        batch, round_ = self.batch, self._round
        self.batch, self._round = WriteBatch(raw_mode=True), _Round()
        if batch.is_empty():
            round_.done.set()
            return
        try:
            if self._before_write is not None:
                self._before_write(batch)
            count = batch.len()
            self._db.write(batch)
            self._db.flush_wal(True)
            self.ops += count
            self.rounds += 1
        except Exception as exc:
            self._fail(exc)
            round_.error = exc
            raise CommitError(f"commit failed: {exc}") from exc
        finally:
            round_.done.set()


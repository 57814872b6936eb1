"""The hot loop: ready plain-TCP connections served inline, where trio would sleep.

Why
---
A trio wake-up is expensive on a small or virtual machine: the run loop's bookkeeping,
the task's resumption through its await chain, the one-shot re-arm of the descriptor.
Measured with echo servers that only read and write (bench/README.md, session 7): at one
message per millisecond trio costs ~100 µs of CPU and ~100 µs p50 per round trip where a
plain ``select.epoll`` loop in Python costs ~40 µs and ~65 µs; every MQTT message pays
that once for the publisher's read and once for the subscriber's PUBACK.

How
---
A connection's reader task that finds nothing to read *parks* its descriptor here
(``park``) instead of waiting in trio. The hot loop keeps its own level-triggered epoll
holding every parked descriptor and trio's own epoll descriptor. It is a trio
``Instrument``: in ``before_io_wait`` - the moment trio would block in ``epoll_wait`` -
it blocks in its own epoll for the same timeout instead, and for each ready connection
runs ``serve_inline`` right there: read, hand the bytes to the protocol, do the
actions that need no await (replies, deliveries, ``SEND``, ``KICK``). A descriptor stays
registered across messages (no re-arm). An action that needs an await (a commit, a login,
a checkpoint, back-pressure, the close) ends the inline part: the descriptor leaves the
loop and the parked task is woken to go on with that action (``Seat.hand_off``).

The loop returns to trio as soon as trio has something to do: its own epoll is ready
(other sockets, the commit thread's eventfd, signals and ``run_sync_soon`` through its
wake-up socket), a task became runnable (a hand-off, a writer woken), or trio's next
deadline is due (the timeout). trio then waits with the timeout it computed before the
hook ran, so in the last two cases the loop makes that wait return at once (its
``force_wakeup``). Timers, deadlines and every other task behave as before; only the order
of work inside one wake-up differs, and not the order of arrival: epoll lists ready
descriptors in the order they became ready, and the loop serves parked connections only
up to trio's own descriptor; those after it wait until trio has run the tasks its input
woke (a connection waiting in trio is not overtaken by one whose input came later), each
for one round at most (``_serve_ready``).
Where a wait that runs out must be seen by trio as one (a test's
``wait_all_tasks_blocked``, an autojump clock) the loop only serves what is ready and
never blocks; trio's own wait then does not see the parked descriptors.

Busy-poll (``--busy-poll-us``)
------------------------------
Off by default. With it on, while most recent waits ended within one spin (request and
answer back to back), a wait first polls the epoll without blocking for up to that long,
yielding the CPU between polls, and blocks only if nothing came: a client that answers
within the spin is served without the sleep and the wake-up (on a virtual machine waking
an idle vCPU costs 50-80 µs). An idle or paced link does not spin (its waits are long),
nor does any wait while a sync is in flight (the sync thread needs the GIL). The cost is
CPU while traffic comes back to back; measured in bench/README.md (issue 17, session 16).

What it relies on
-----------------
Attributes of trio's run loop that are not public API (``_trio_internals``): the epoll
object of its I/O manager and ``force_wakeup``, its run queue, ``waiting_for_idle`` and
the autojump threshold. Where any is missing (another trio version, a kqueue platform)
or ``OXIEDGE_HOT_LOOP=0`` is set, ``hot_loop()`` returns None and every reader waits in
trio (``wait_readable``) as before; ``hot_loop_state()`` says why (start-up logs ``hot
loop on`` or ``hot loop off: REASON``, ``oxiedge status`` shows it). ``pyproject.toml``
bounds trio below its next minor version: raise the bound once these tests pass on it.
An unexpected error inside the loop turns it off for the rest of the run and wakes every
parked task, which then waits in trio: the loop can cost speed, never a connection.
"""

from __future__ import annotations

import logging
import math
import os
import select
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.net.actions import NEED_DATA, StreamProtocol, run_until_await
from oxiedge.net.written import flush_written

if TYPE_CHECKING:
    from oxiedge.net.output import Output

log = logging.getLogger("oxiedge")

RECV_SIZE = 65536  # bytes per read (the reader's, ``net.loop``, and the inline one)


class Raise:
    """A hand-off from the hot loop: the inline burst raised; the reader re-raises it."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Seat:
    """A connection's place in the hot loop, owned by its transport (``net.loop``): all the
    loop and the transport share. The transport parks here (``park``) and reads what the
    loop handed back (``pending``); the loop serves the connection through it
    (``serve_inline``) and hands it back (``hand_off``)."""

    __slots__ = ("_hot", "_woken", "armed", "fd", "output", "pending", "protocol", "skipped")

    def __init__(self, output: Output) -> None:
        self.protocol: StreamProtocol | None = None  # (set when the transport runs)
        self.output = output
        self.fd = -1  # the descriptor, while parked
        self.armed = math.inf  # the deadline of the scope the reader parked under
        #: the action the reader task goes on with, once the loop handed it back
        self.pending: object = None
        #: the hot loop's last round that left this connection's input for later
        self.skipped = -1
        self._hot: HotLoop | None = None
        self._woken: trio.Event | None = None

    async def park(self, hot: HotLoop, fd: int, armed: float) -> None:
        """Wait for input in the hot loop instead of trio; returns once the loop handed
        the connection back (``pending`` says what to do next)."""
        self._woken = woken = trio.Event()
        self._hot, self.fd, self.armed = hot, fd, armed
        hot.park(self, fd)
        try:
            await woken.wait()
        finally:
            self.leave()

    def leave(self) -> None:
        """Out of the loop (also before the descriptor is closed, or on an abort)."""
        fd = self.fd
        if fd >= 0:
            self.fd = -1
            hot = self._hot
            if hot is not None:
                hot.unpark(fd)

    def hand_off(self, action: object) -> None:
        """The inline part ends (``serve_inline``): the reader task goes on with
        ``action`` (None: just wait for input in trio)."""
        self.pending = NEED_DATA if action is None else action
        self.leave()
        woken = self._woken
        if woken is not None:
            self._woken = None
            woken.set()


def serve_inline(seat: Seat) -> None:
    """The hot loop found input on a parked connection: one burst, inline, as far as it
    needs no await.

    The reader's steps (``Transport._perform``): read, ``receive_data``, actions until
    ``NEED_DATA``, what the burst wrote to other connections first, then this one's
    replies. What needs an await is handed back to the reader task (``hand_off``)."""
    proto = seat.protocol
    assert proto is not None
    try:
        got = os.read(seat.fd, RECV_SIZE)
    except BlockingIOError:
        return  # (a spurious wake-up)
    except OSError as exc:
        seat.hand_off(Raise(exc))
        return
    output = seat.output
    output.traffic.received += len(got)
    written = output.written
    written.in_burst = True
    try:
        proto.receive_data(got)
        action = run_until_await(proto, output.send_now, output.kick)
        flush_written(written)
        if action is not NEED_DATA:
            seat.hand_off(action)
            return
        data = proto.data_to_send()
        if data:
            output.send_now(data)
        if output.out_bytes > output.pause_at or proto.deadline < seat.armed:
            seat.hand_off(NEED_DATA)  # wait for the output / re-arm: the task
    except BaseException as exc:  # raised in the reader task, as without the loop
        flush_written(written)
        seat.hand_off(Raise(exc))


_ENV = "OXIEDGE_HOT_LOOP"
_HAS_EPOLL = hasattr(select, "epoll")  # (Linux; trio uses kqueue elsewhere)
#: The busy-poll spins only while more than this share of recent waits ended within one
#: spin (``_spin_then_poll``), each wait weighing ``_HIT_WEIGHT`` in the moving average:
#: a request-answer run qualifies after a few waits; a link whose waits alternate between
#: a quick answer and a long pause (a paced publisher and its subscriber's PUBACK) never.
SPIN_GATE = 0.75
_HIT_WEIGHT = 0.25


def _trio_internals() -> Any:
    """trio's run loop (``Runner``) where it has every attribute the loop uses, else None:
    its I/O manager's epoll and ``force_wakeup``, its run queue, and what says whether a
    wait that runs out must be seen by trio as one (``waiting_for_idle``, the autojump
    threshold of a test clock)."""
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT

        runner = GLOBAL_RUN_CONTEXT.runner
        io_manager = runner.io_manager
        ok = (isinstance(io_manager._epoll.fileno(), int) and callable(io_manager.force_wakeup)
              and hasattr(runner.runq, "__len__") and hasattr(runner, "waiting_for_idle")
              and isinstance(runner.clock_autojump_threshold, float | int))
    except Exception:  # (any shape of trio we do not know)
        return None
    return runner if ok else None


def _never() -> bool:
    return False


class HotLoop(trio.abc.Instrument):
    """One per ``trio.run``: serves parked connections inline (see the module docstring)."""

    def __init__(self, runner: Any) -> None:
        self._runner = runner
        self._ep = select.epoll()
        self._trio_fd: int = runner.io_manager._epoll.fileno()
        self._ep.register(self._trio_fd, select.EPOLLIN)
        self._runq = runner.runq
        self._wake_trio: Callable[[], None] = runner.io_manager.force_wakeup
        self.parked: dict[int, Seat] = {}
        self.broken = False
        self.served = 0  # connections served inline (a count for tests and probes)
        self.spin = 0.0  # the busy-poll's longest spin, seconds (``busy_poll``; 0 = off)
        self.spins = 0  # waits that spun (a count for tests and probes)
        self._hits = 0.0  # moving average: did a wait end within one spin (0..1)
        self._syncing: Callable[[], bool] = _never
        self._round = 0  # rounds of ``_serve_ready`` (what ``Seat.skipped`` counts in)

    def busy_poll(self, microseconds: int, syncing: Callable[[], bool] | None = None) -> None:
        """``--busy-poll-us``: before blocking, poll for up to this long while waits end
        that quickly (0 = never); ``syncing`` says a sync is in flight (then no spin)."""
        self.spin = max(0, microseconds) / 1e6
        self._syncing = syncing or _never

    def status(self) -> dict[str, Any]:
        """``oxiedge status`` → ``hot_loop``: on (or failed), bursts served inline, and
        the busy-poll."""
        state: dict[str, Any] = {"on": not self.broken}
        if self.broken:
            state["reason"] = "failed (see the log); connections wait in trio"
        return {**state, "parked": len(self.parked), "served_inline": self.served,
                "busy_poll_us": round(self.spin * 1e6), "busy_polls": self.spins}

    def park(self, seat: Seat, fd: int) -> None:
        seat.skipped = -1  # a round it gave way in before it left does not count now
        self._ep.register(fd, select.EPOLLIN)
        self.parked[fd] = seat

    def unpark(self, fd: int) -> None:
        if self.parked.pop(fd, None) is not None:
            try:
                self._ep.unregister(fd)
            except OSError:  # (already closed: the kernel dropped it)
                pass

    def before_io_wait(self, timeout: float) -> None:
        if not self.parked:
            return  # nothing parked: trio waits exactly as before
        try:
            self._serve(timeout)
        except Exception:  # a bug here must not leave parked connections unserved
            log.exception("oxiedge: the hot loop failed; connections wait in trio from now on")
            self._shut_down()

    def _serve(self, timeout: float) -> None:
        poll, parked, runq = self._ep.poll, self.parked, self._runq
        runner = self._runner
        if timeout <= 0 or runner.waiting_for_idle or runner.clock_autojump_threshold < 1e9:
            # trio has work already (serve what is ready, then let it run), or a test's
            # wait_all_tasks_blocked / autojump clock needs trio's own wait to run out.
            self._serve_ready(poll(0))
            if timeout > 0 and runq:
                self._wake_trio()
            return
        end = time.perf_counter() + timeout
        wait = timeout
        wait_for: Callable[[float], list[tuple[int, int]]] = (
            self._spin_then_poll if self.spin else self._ep.poll)
        while True:
            if self._serve_ready(wait_for(wait)):
                return  # trio's own epoll is ready: its wait returns at once
            if runq or not parked:
                break  # a task became runnable (a hand-off, a writer woken)
            wait = end - time.perf_counter()
            if wait <= 0:
                break  # trio's timeout is used up here
        # trio waits next with the timeout it computed before this call: make that wait
        # return at once (one byte to its wake-up socket), or a runnable task would sleep
        # through it and a timer would fire a whole timeout late.
        self._wake_trio()

    def _serve_ready(self, ready: list[tuple[int, int]]) -> bool:
        """Serve the parked connections among ``ready`` (epoll's list: in the order the
        descriptors became ready); True if trio's own descriptor is among them.

        Input on a connection that waits in trio (trio's descriptor) arrived before what
        follows it in the list: that task runs first, and a parked one after it is
        served in the next round (level-triggered: still ready). Serving it first would
        let a client's PUBLISH overtake another's SUBSCRIBE sent before it (paho's
        test_subscribe_options). A connection gives way like that for one round only:
        epoll keeps a descriptor that stays ready where it was in its list, so with
        trio's always ready (busy connections in trio) one after it would never be
        served. The round after, it is served even behind trio's descriptor, and that
        keeps the order too: its input came before trio's wait that followed the round
        it gave way in, and that wait collected everything trio's side had by then. Only
        the connection that gave way is served: one whose input is new waits in turn
        (``Seat.skipped``), so the order holds in every round, not every other. What it
        cannot order: a connection served after giving way reads all it has, also input
        that came while it waited (after trio's wait), as a reader in trio does."""
        self._round = now = self._round + 1
        parked, trio_fd = self.parked, self._trio_fd
        behind = False  # (past trio's descriptor)
        for fd, _ in ready:
            if fd == trio_fd:
                behind = True
                continue
            seat = parked.get(fd)
            if seat is None:
                continue
            if behind and seat.skipped != now - 1:
                seat.skipped = now  # its turn comes next round
                continue
            self.served += 1
            serve_inline(seat)
        return behind

    def _spin_then_poll(self, wait: float) -> list[tuple[int, int]]:
        """The loop's wait with a busy-poll first (``--busy-poll-us``).

        It spins - polls without blocking for up to ``spin`` seconds, giving the CPU away
        between polls (``sched_yield``: a client on the same CPU runs) - only where that
        pays: when most recent waits ended within one spin (``_hits``, a moving average
        over the waits, above ``SPIN_GATE``: request and answer back to back, not a paced
        or idle link, whose next input comes later than any spin) and while no sync is in
        flight (``_syncing``: the sync thread needs the GIL the spin would keep taking)."""
        poll = self._ep.poll
        ready = poll(0)
        if ready:
            self._note_wait(True)
            return ready
        clock = time.perf_counter
        start = clock()
        spin = self.spin
        if self._hits > SPIN_GATE and not self._syncing():
            self.spins += 1
            stop = start + min(spin, wait)
            while clock() < stop:
                os.sched_yield()
                ready = poll(0)
                if ready:
                    self._note_wait(True)
                    return ready
            wait -= clock() - start
        ready = poll(wait if wait > 0 else 0)
        self._note_wait(bool(ready) and clock() - start < spin)
        return ready

    def _note_wait(self, within_spin: bool) -> None:
        """One wait into the moving average the busy-poll's gate reads."""
        self._hits += (within_spin - self._hits) * _HIT_WEIGHT

    def _shut_down(self) -> None:
        self.broken = True
        for fd, seat in list(self.parked.items()):
            self.unpark(fd)
            seat.hand_off(None)
        self._ep.close()

    def after_run(self) -> None:
        if not self.broken:
            self._ep.close()


class HotLoopOff:
    """The RunVar's value when this run has no hot loop: why (``oxiedge status``)."""

    def __init__(self, reason: str, chosen: bool = False) -> None:
        self.reason = reason
        self.chosen = chosen  # the operator's choice (OXIEDGE_HOT_LOOP=0), not a limit

    def status(self) -> dict[str, Any]:
        return {"on": False, "reason": self.reason}


_HOT: trio.lowlevel.RunVar[HotLoop | HotLoopOff] = trio.lowlevel.RunVar("oxiedge_hot_loop")


def hot_loop() -> HotLoop | None:
    """This run's hot loop (installed on first use), or None when there is none."""
    hot = hot_loop_state()
    if type(hot) is HotLoopOff or hot.broken:  # type: ignore[union-attr]
        return None
    return hot  # type: ignore[return-value]


def hot_loop_state() -> HotLoop | HotLoopOff:
    """This run's hot loop (installed on first use; ``broken`` once it failed), or why
    there is none. Either one's ``status()`` is ``oxiedge status`` → ``hot_loop``."""
    try:
        return _HOT.get()
    except LookupError:
        hot = _install()
        _HOT.set(hot)
        return hot


def _install() -> HotLoop | HotLoopOff:
    setting = os.environ.get(_ENV, "1").strip()
    if setting.lower() in ("0", "off", "no", "false"):
        return HotLoopOff(f"{_ENV}={setting}", chosen=True)
    if not _HAS_EPOLL:
        return HotLoopOff(f"no epoll on this platform ({sys.platform}; Linux only)")
    runner = _trio_internals()
    if runner is None:
        return HotLoopOff(f"trio {trio.__version__} lacks the run-loop internals it uses"
                          " (a trio version it was not tested with)")
    hot = HotLoop(runner)
    trio.lowlevel.add_instrument(hot)
    return hot

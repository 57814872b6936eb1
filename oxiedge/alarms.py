"""Resource alarms: memory high-watermark and free-disk limit, as RabbitMQ has them.

Theory of operation
-------------------
A monitor task samples the process RSS (``/proc/self/statm``) and the free space of the
data dir's filesystem (``statvfs``) once a second. When either crosses its limit the alarm
fires: ``blocked`` turns true, a loud log line is written, and every subscriber is told
(AMQP connections send ``connection.blocked`` to clients that announced the capability).
Publishing connections then await ``wait_unblocked()`` before reading more input, so a
publisher is throttled by TCP back-pressure instead of the broker running out of memory or
disk; consumers keep draining, which is what clears a memory alarm. When every alarm has
cleared, waiters resume and subscribers hear ``unblocked``.

What the memory alarm measures: the process RSS, what the kernel (and its OOM killer)
sees.  Freed message buffers do not leave the RSS by themselves: glibc's malloc keeps them
in its heap, so after consumers drained a queue the RSS would stay high and the alarm
would never clear.  So whenever a sample is over the watermark, ``malloc_trim(0)`` first
hands the free heap pages back to the kernel and the RSS is sampled again: the figure
compared is then memory really in use (message bodies, Python objects, RocksDB caches),
which a drain does bring down.  Where there is no ``malloc_trim`` (musl, macOS) the raw
RSS is used.

A memory alarm clears once the RSS is 5% under the watermark, a disk alarm once the free
space is 10% over its limit (hysteresis: an alarm does not flap at its boundary).

Limits: the memory watermark is a fraction (default 0.4, RabbitMQ's default) of the memory
the process may use — the RAM, or its cgroup limit when lower (``MemoryMax=``/``MemoryHigh=``
of the systemd unit; ``sizes.memory_limit``) — or an absolute size (``512MB``, at least
32 MB); ``status()`` names where the limit came from. The disk limit is an absolute size (default
200 MB, a margin that lets RocksDB compact and the WAL roll on a small SD card).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from . import sizes

Listener = Callable[[bool, str], None]


def current_rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_MALLOC_TRIM = _find_malloc_trim()


def free_disk(path: Path) -> int:
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize)


class ResourceAlarms:
    """Memory and disk alarms shared by both brokers."""

    def __init__(self, data_dir: Path, memory_limit: int, disk_free_limit: int,
                 log: Any = None, interval: float = 1.0) -> None:
        self.data_dir = data_dir
        self.memory_limit = memory_limit
        self.disk_free_limit = disk_free_limit
        self.interval = interval
        self.log = log
        self.memory_alarm = False
        self.disk_alarm = False
        #: any alarm raised (publishers wait): an attribute, read per burst on the hot path,
        #: kept by the two writers of the alarms (``sample``, ``set_alarm``)
        self.blocked = False
        self.rss = 0
        self.disk_free = 0
        #: the memory this process may use and its source ("RAM" or "cgroup FILE")
        self.memory_available, self.memory_source = sizes.memory_limit()
        self.fired = 0  # how many times an alarm went off
        self.trims = 0  # malloc_trim calls made because a sample was over the watermark
        self.external: dict[str, str] = {}  # alarms raised by other parts: kind -> detail
        self._listeners: list[Listener] = []
        self._clear = trio.Event()
        self._clear.set()

    @property
    def reason(self) -> str:
        flags = (("memory", self.memory_alarm), ("disk", self.disk_alarm))
        low = [kind for kind, on in flags if on]
        own = ["low on " + " and ".join(low)] if low else []
        return "; ".join([*own, *self.external.values()])

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(blocked, reason)`` on every change; returns an unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def wait_unblocked(self) -> None:
        """Return at once when no alarm is active, else when all have cleared."""
        if self.blocked:
            await self._clear.wait()

    def check(self) -> None:
        """Sample once and update the alarms (the monitor calls this every interval)."""
        self.rss = current_rss()
        if self.rss > self.memory_limit and _MALLOC_TRIM is not None:
            # Give freed heap pages back before judging (see the module docstring).
            _MALLOC_TRIM(0)
            self.trims += 1
            self.rss = current_rss()
        try:
            self.disk_free = free_disk(self.data_dir)
        except OSError:
            self.disk_free = 0
        was = self.blocked
        # Hysteresis: a memory alarm clears only 5% under the watermark. Without it a
        # publisher stopped right at the watermark flaps it (a trim takes the RSS just
        # under, the publisher resumes and pushes it just over again), and every flap is a
        # connection.blocked / unblocked pair to each client.
        memory_margin = self.memory_limit // 20 if self.memory_alarm else 0
        memory = self.rss > self.memory_limit - memory_margin
        # Hysteresis: clear a disk alarm only with 10% room above the limit, so a
        # compaction's transient files do not flap it.
        disk_margin = self.disk_free_limit // 10 if self.disk_alarm else 0
        disk = self.disk_free < self.disk_free_limit + disk_margin
        if memory != self.memory_alarm:
            self._log(memory, "memory", f"RSS {self.rss >> 20} MB, watermark "
                      f"{self.memory_limit >> 20} MB")
        if disk != self.disk_alarm:
            self._log(disk, "disk", f"{self.disk_free >> 20} MB free in {self.data_dir}, limit "
                      f"{self.disk_free_limit >> 20} MB")
        self.memory_alarm, self.disk_alarm = memory, disk
        self._changed(was)

    def set_alarm(self, kind: str, detail: str | None) -> None:
        """Raise (``detail`` given) or clear (None) an alarm of another part, e.g. a full
        uplink outbox with the ``block`` policy: publishers wait while it is raised."""
        if (detail is None) == (kind not in self.external):
            return  # no change
        was = self.blocked
        if detail is None:
            del self.external[kind]
        else:
            self.external[kind] = detail
        self._log(detail is not None, kind, detail or "")
        self._changed(was)

    def _changed(self, was: bool) -> None:
        self.blocked = self.memory_alarm or self.disk_alarm or bool(self.external)
        if self.blocked != was:
            if self.blocked:
                self.fired += 1
                self._clear = trio.Event()
            else:
                self._clear.set()
            for listener in list(self._listeners):
                listener(self.blocked, self.reason)

    def _log(self, on: bool, kind: str, detail: str) -> None:
        if self.log is None:
            return
        if on:
            self.log.warning("ALARM %s: %s - publishers are blocked until it clears", kind,
                             detail)
        else:
            self.log.warning("alarm %s cleared: %s", kind, detail)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.check()
        task_status.started()
        while True:
            await trio.sleep(self.interval)
            self.check()

    def startup_line(self) -> str:
        """``memory watermark …`` for the start-up log: the watermark, the limit it is
        measured against and where that limit comes from; a loud warning when an absolute
        watermark is above the limit (the kernel would kill the broker first)."""
        line = (f"memory watermark {sizes.format_size(self.memory_limit)} of a memory limit of "
                f"{sizes.format_size(self.memory_available)} ({self.memory_source})")
        if self.memory_limit >= self.memory_available:
            line += (" - WARNING: the watermark is above the limit: the kernel stops the broker"
                     " before the alarm can throttle publishers")
        return line

    def status(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "memory_alarm": self.memory_alarm,
            "disk_alarm": self.disk_alarm,
            "rss_mb": round(self.rss / (1 << 20), 1),
            "memory_watermark_mb": round(self.memory_limit / (1 << 20), 1),
            "memory_limit_mb": round(self.memory_available / (1 << 20), 1),
            "memory_limit_source": self.memory_source,
            "disk_free_mb": round(self.disk_free / (1 << 20), 1),
            "disk_free_limit_mb": round(self.disk_free_limit / (1 << 20), 1),
            "other_alarms": dict(self.external),
            "alarms_fired": self.fired,
            "malloc_trims": self.trims,
        }

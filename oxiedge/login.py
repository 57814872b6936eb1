"""Password checks of every protocol: off the event loop, in one bounded pool, and slower
after failures.

Theory of operation
-------------------
PBKDF2 costs tens of milliseconds on the VM and several times that on a Pi core; run on the
event loop it stalls every other client (issue 14 measured an innocent MQTT client's ping at
129 ms while 10 AMQP clients tried wrong passwords). So ``Logins.check`` runs every check
that may hash in a worker thread (``hashlib`` releases the GIL while it hashes), and all
protocols share one ``trio.CapacityLimiter`` of ``--login-hash-threads`` tokens: a login
storm costs at most that many cores, and waiting logins queue cheaply (each waiter is a
connection, bounded by the connection limits).

Failed logins are slowed (``LoginThrottle``): after n recent failures, every further
attempt waits ``min(cap, 0.1 s · 2^(n-1))`` before its password is even checked, so parallel
connections do not escape the delay. n counts the failures of

* that user name from that address (one guesser, or one misconfigured worker retrying);
* that user name from anywhere (guessing one account from many addresses);
* that address for any name, but only once its failures span ``SPRAY_NAMES`` different
  user names (trying many accounts from one address).

So one worker retrying a wrong password slows only itself and its own user name: the
other clients on its host or behind its NAT log in at full speed (the throttle used to
count every failure per address, which delayed every good password from that address too).
A success clears that pair's and that user name's records (not the address's: a sprayer
holding one valid account could otherwise reset its own penalty); records are forgotten
after ``FORGET_AFTER`` seconds without a failure. The tables are bounded
(``--login-track-max`` entries each; the least recently failed is evicted and counted), so a
flood of random names cannot grow memory.

The source address of the connection being served comes from ``oxiedge.connections.PEER``
(set by the connection guard every listener runs its handlers in), so the protocol code
passes only the credentials.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import trio

from .auth import UserStore
from .connections import PEER

BASE_DELAY = 0.1
FORGET_AFTER = 600.0
#: An address's failures count for every name it tries once they span this many names.
SPRAY_NAMES = 3


class _Record:
    __slots__ = ("count", "last", "names")

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0
        self.names: set[str] | None = None  # (the sources table: names tried, up to SPRAY_NAMES)


class LoginThrottle:
    """Recent failures per (address, user name), per user name and per address (see the
    module docstring; sans-IO, ``clock`` injectable)."""

    def __init__(self, max_delay: float = 2.0, max_entries: int = 4096,
                 base_delay: float = BASE_DELAY, forget_after: float = FORGET_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_delay = max_delay
        self.max_entries = max_entries
        self.base_delay = base_delay
        self.forget_after = forget_after
        self.clock = clock
        self.pairs: OrderedDict[tuple[str, str], _Record] = OrderedDict()
        self.sources: OrderedDict[str, _Record] = OrderedDict()
        self.users: OrderedDict[str, _Record] = OrderedDict()
        self.evicted = 0

    def _recent(self, table: OrderedDict[Any, _Record], key: Any, now: float) -> _Record | None:
        rec = table.get(key)
        if rec is not None and now - rec.last > self.forget_after:
            del table[key]
            return None
        return rec

    def delay(self, source: str, user: str | None) -> float:
        """Seconds the next attempt from ``source`` for ``user`` waits before it is checked."""
        if self.max_delay <= 0:
            return 0.0
        now = self.clock()
        n = 0
        src = self._recent(self.sources, source, now)
        if src is not None and src.names is not None and len(src.names) >= SPRAY_NAMES:
            n = src.count
        if user is not None:
            for rec in (self._recent(self.pairs, (source, user), now),
                        self._recent(self.users, user, now)):
                if rec is not None and rec.count > n:
                    n = rec.count
        if n == 0:
            return 0.0
        return float(min(self.max_delay, self.base_delay * 2 ** min(n - 1, 30)))

    def _bump(self, table: OrderedDict[Any, _Record], key: Any, now: float) -> _Record:
        rec = table.pop(key, None) or _Record()
        if now - rec.last > self.forget_after:
            rec.count = 0
            rec.names = None
        rec.count += 1
        rec.last = now
        table[key] = rec  # most recent last: eviction takes the least recently failed
        while len(table) > self.max_entries:
            table.popitem(last=False)
            self.evicted += 1
        return rec

    def failed(self, source: str, user: str | None) -> None:
        now = self.clock()
        src = self._bump(self.sources, source, now)
        if user is not None:
            if src.names is None:
                src.names = set()
            if len(src.names) < SPRAY_NAMES:
                src.names.add(user)
            self._bump(self.pairs, (source, user), now)
            self._bump(self.users, user, now)

    def succeeded(self, source: str, user: str | None) -> None:
        if user is not None:
            self.pairs.pop((source, user), None)
            self.users.pop(user, None)


class Logins:
    """The one place any protocol checks a password (see the module docstring)."""

    def __init__(self, users: UserStore, hash_threads: int = 1, max_delay: float = 2.0,
                 max_entries: int = 4096) -> None:
        self.users = users
        self.throttle = LoginThrottle(max_delay, max_entries)
        self.hash_threads = hash_threads
        self._limiter: trio.CapacityLimiter | None = None
        self.checks = 0
        self.failures = 0
        self.delayed = 0
        self.delay_total = 0.0

    def _pool(self) -> trio.CapacityLimiter:
        if self._limiter is None:  # created in the running trio loop
            self._limiter = trio.CapacityLimiter(self.hash_threads)
        return self._limiter

    async def check(self, username: str | None, password: bytes | None) -> bool:
        """True if the credentials are acceptable (``None`` username = anonymous)."""
        self.checks += 1
        if username is None or (username == "" and not password) or not self.users.has_users:
            # No hash to compute (anonymous, or no user exists at all): decided inline.
            ok = self.users.authenticate(username, password)
            if not ok:
                self.failures += 1
            return ok
        source = PEER.get()
        wait = self.throttle.delay(source, username)
        if wait > 0:
            self.delayed += 1
            self.delay_total += wait
            await trio.sleep(wait)
        ok = await trio.to_thread.run_sync(self.users.authenticate, username, password,
                                           limiter=self._pool())
        if ok:
            self.throttle.succeeded(source, username)
        else:
            self.failures += 1
            self.throttle.failed(source, username)
        return bool(ok)

    def status(self) -> dict[str, Any]:
        limiter = self._limiter
        return {
            "mode": self.users.mode(),
            "users": len(self.users.names),
            "checks": self.checks,
            "failures": self.failures,
            "delayed": self.delayed,
            "delay_total_s": round(self.delay_total, 1),
            "delay_max_s": self.throttle.max_delay,
            "hash_threads": self.hash_threads,
            "hashing_now": limiter.borrowed_tokens if limiter is not None else 0,
            "waiting_to_hash": limiter.statistics().tasks_waiting if limiter is not None else 0,
            "tracked_sources": len(self.throttle.sources),
            "tracked_users": len(self.throttle.users),
            "tracked_pairs": len(self.throttle.pairs),
            "track_max": self.throttle.max_entries,
            "track_evicted": self.throttle.evicted,
        }

"""HTTP Basic credentials checked against the broker's users, as every protocol checks them.

A password that the connection has not had verified yet goes through ``oxiedge.login``
(``Logins.check``: the login throttle, then PBKDF2 in the shared hashing pool, never on the
event loop); a verified one is remembered per connection (``access.CredentialCache``). The
user's tags come from the permissions file (``oxiedge user add --tags``) at every request,
so a tag change applies to the next request.

The console's login form opens a session instead (:meth:`Credentials.login`, through the
same ``Logins.check``): a request without an Authorization header but with the session
cookie runs as that session's user while the session lives (``sessions.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..auth import UserStore
from ..login import Logins
from .access import ANONYMOUS, CredentialCache, CredentialError, Principal, parse_basic
from .sessions import SessionTable, cookie_token

NO_USERS_ON_NETWORK = ("no user exists and this listener is not on a loopback address: add "
                       "one with `oxiedge user add NAME --tags administrator`")


@dataclass
class Credentials:
    """Turns an Authorization header into a :class:`Principal` or a refusal reason."""

    users: UserStore
    logins: Logins
    tags_of: Callable[[str], list[str]]
    failures: int = 0
    cache_hits: int = 0
    sessions: SessionTable = field(default_factory=SessionTable)
    clock: Callable[[], float] = time.monotonic

    async def principal(self, header: str | None, cache: CredentialCache,
                        cookie: str | None = None) -> Principal | str:
        if not self.users.has_users:
            # The broker's rule (auth.UserStore.anonymous_allowed): no users and a loopback
            # address (or --allow-anonymous) is an open broker; credentials do not matter.
            return ANONYMOUS if self.users.anonymous_allowed else NO_USERS_ON_NETWORK
        if header is None:
            token = cookie_token(cookie)
            if token is not None:
                return self._session(token)
            return "Login failed: no credentials (HTTP Basic)"
        try:
            name, password = parse_basic(header)
        except CredentialError as exc:
            self.failures += 1
            return f"Login failed: {exc}"
        stored = self.users.hash_of(name)
        if stored is not None and cache.known(name, stored, password):
            self.cache_hits += 1
        elif stored is not None and await self.logins.check(name, password):
            cache.remember(name, stored, password)
        else:
            if stored is None:
                await self.logins.check(name, password)  # same cost and throttle as a user
            self.failures += 1
            return "Login failed"
        return Principal(name, tuple(self.tags_of(name)))

    def _session(self, token: str) -> Principal | str:
        found = self.sessions.find(token, self.clock())
        if found is None:
            return "Login failed: the session has ended, log in again"
        if self.users.hash_of(found.user) != found.stored_hash:  # removed, or new password
            self.sessions.drop(token)
            return "Login failed: the user or its password changed, log in again"
        return Principal(found.user, tuple(self.tags_of(found.user)))

    async def login(self, name: str, password: bytes) -> str | None:
        """The console's login form: check the password as every login (the throttle, the
        hashing pool) and open a session; its token, or None (refused)."""
        stored = self.users.hash_of(name) if name else None
        ok = await self.logins.check(name, password)  # (an unknown user costs the same)
        if not ok or stored is None:
            self.failures += 1
            return None
        return self.sessions.open(name, stored, self.clock())

    def logout(self, cookie: str | None) -> bool:
        token = cookie_token(cookie)
        return token is not None and self.sessions.close(token)

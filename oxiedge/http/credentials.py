"""HTTP Basic credentials checked against the broker's users, as every protocol checks them.

A password that the connection has not had verified yet goes through ``oxiedge.login``
(``Logins.check``: the login throttle, then PBKDF2 in the shared hashing pool, never on the
event loop); a verified one is remembered per connection (``access.CredentialCache``). The
user's tags come from the permissions file (``oxiedge user add --tags``) at every request,
so a tag change applies to the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..auth import UserStore
from ..login import Logins
from .access import ANONYMOUS, CredentialCache, CredentialError, Principal, parse_basic

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

    async def principal(self, header: str | None, cache: CredentialCache) -> Principal | str:
        if not self.users.has_users:
            # The broker's rule (auth.UserStore.anonymous_allowed): no users and a loopback
            # address (or --allow-anonymous) is an open broker; credentials do not matter.
            return ANONYMOUS if self.users.anonymous_allowed else NO_USERS_ON_NETWORK
        if header is None:
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

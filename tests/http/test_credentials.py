"""The broker's anonymous rule and the login path as the HTTP listener applies them, with a
real UserStore and Logins (hashing in the worker thread)."""

from __future__ import annotations

import base64

from oxiedge.auth import UserStore, hash_password
from oxiedge.http.access import ANONYMOUS, CredentialCache
from oxiedge.http.credentials import NO_USERS_ON_NETWORK, Credentials
from oxiedge.login import Logins


def _credentials(users: UserStore) -> Credentials:
    return Credentials(users, Logins(users), lambda name: ["monitoring"])


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_no_users_on_loopback_is_anonymous_whatever_the_header() -> None:
    creds = _credentials(UserStore({}, None, network=False))
    for header in (None, _basic("x", "y"), "Bearer z"):
        assert await creds.principal(header, CredentialCache()) is ANONYMOUS


async def test_no_users_on_a_network_address_is_refused_unless_allow_anonymous() -> None:
    creds = _credentials(UserStore({}, None, network=True))
    assert await creds.principal(None, CredentialCache()) == NO_USERS_ON_NETWORK
    assert await creds.principal(_basic("a", "b"), CredentialCache()) == NO_USERS_ON_NETWORK
    opened = _credentials(UserStore({}, True, network=True))  # --allow-anonymous
    assert await opened.principal(None, CredentialCache()) is ANONYMOUS


async def test_users_need_credentials_even_with_allow_anonymous() -> None:
    users = UserStore({"alice": hash_password("pw", iterations=1000)}, True, network=True)
    creds = _credentials(users)
    cache = CredentialCache()
    assert await creds.principal(None, cache) == "Login failed: no credentials (HTTP Basic)"
    assert await creds.principal(_basic("alice", "nope"), cache) == "Login failed"
    assert await creds.principal(_basic("bob", "pw"), cache) == "Login failed"
    who = await creds.principal(_basic("alice", "pw"), cache)
    assert not isinstance(who, str) and (who.name, who.tags) == ("alice", ("monitoring",))
    checks = creds.logins.checks
    assert not isinstance(await creds.principal(_basic("alice", "pw"), cache), str)
    assert creds.logins.checks == checks and creds.cache_hits == 1  # no second hash
    # (a request without credentials is the challenge, not a failure)
    assert creds.failures == 2 and creds.logins.throttle.users  # the throttle saw them

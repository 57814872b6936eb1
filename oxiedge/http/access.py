"""Who may call what on the HTTP listener (sans-IO: the password check itself is the
caller's, through ``oxiedge.login``).

RabbitMQ's management API is the model: HTTP Basic against the broker's users, and the
user's tags decide what it may do - ``administrator`` everything, ``monitoring`` and
``management`` read only; a user without one of those is refused like a wrong password
(401 ``not_authorised``, "Not management user"). While no user exists, the broker's own rule
(``auth.UserStore.anonymous_allowed``: a loopback address, or ``--allow-anonymous``) lets
every request in as the anonymous administrator; a listener that may not be anonymous and
has no users answers 401 to everything but the health checks.

A password is verified once per connection (:class:`CredentialCache`): the next request
with the same header is let in without a hash, so a dashboard polling every second over one
keep-alive connection costs one PBKDF2 run, not one per poll. The cache is keyed by the
stored hash too, so a changed password or a removed user is checked again at once.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import secrets
from dataclasses import dataclass

#: Verified credentials one connection remembers (a client sends one; a few for proxies).
CACHE_ENTRIES = 4
#: Longest Authorization header value looked at (a longer one is refused, not decoded).
MAX_AUTHORIZATION = 1024

READ_TAGS = frozenset({"administrator", "monitoring", "management"})
#: The stored hashes oxiedge verifies (``auth.py``, ``access/mosquitto.py``): its own PBKDF2,
#: Mosquitto 2's ``$7$`` and Mosquitto 1's ``$6$``.
HASH_PREFIXES = ("pbkdf2_sha256$", "$7$", "$6$")


class Need(enum.Enum):
    """What a path needs."""

    NOTHING = "nothing"  # /healthz, /readyz: for systemd and load balancers
    READ = "read"  # monitoring, management or administrator
    ADMIN = "admin"  # administrator


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request runs as."""

    name: str
    tags: tuple[str, ...]
    anonymous: bool = False


ANONYMOUS = Principal("anonymous", ("administrator",), anonymous=True)


class CredentialError(ValueError):
    """The Authorization header is not usable Basic credentials (the reason says why)."""


def parse_basic(header: str) -> tuple[str, bytes]:
    """``Basic base64(user:password)`` -> (user, password bytes)."""
    if len(header) > MAX_AUTHORIZATION:
        raise CredentialError("Authorization header too long")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise CredentialError("only Basic authentication is supported")
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialError("Basic credentials are not valid base64") from None
    user, sep, password = raw.partition(b":")
    if not sep or not user:
        raise CredentialError("Basic credentials need user:password")
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        raise CredentialError("user name is not UTF-8") from None


def refusal(principal: Principal, need: Need) -> str | None:
    """Why ``principal`` may not do what ``need`` asks (None: it may)."""
    if need is Need.NOTHING:
        return None
    tags = set(principal.tags)
    if need is Need.ADMIN and "administrator" not in tags:
        return "Not administrator user"
    if not tags & READ_TAGS:
        return "Not management user"
    return None


class CredentialCache:
    """Credentials this connection has had verified (see the module docstring)."""

    __slots__ = ("_entries", "_salt")

    def __init__(self) -> None:
        self._salt = secrets.token_bytes(16)
        self._entries: dict[tuple[str, str], bytes] = {}

    def _digest(self, password: bytes) -> bytes:
        return hashlib.sha256(self._salt + password).digest()

    def known(self, user: str, stored_hash: str, password: bytes) -> bool:
        return self._entries.get((user, stored_hash)) == self._digest(password)

    def remember(self, user: str, stored_hash: str, password: bytes) -> None:
        if len(self._entries) >= CACHE_ENTRIES:
            self._entries.pop(next(iter(self._entries)))
        self._entries[(user, stored_hash)] = self._digest(password)

    def __len__(self) -> int:
        return len(self._entries)

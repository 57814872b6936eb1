"""The console's login sessions (sans-IO): a bounded table of session cookies.

Theory of operation
-------------------
The console's login form (``console/login.py``) checks a user's password through the one
login path (``oxiedge.login``: the failed-login throttle, PBKDF2 off the event loop) and
then opens a session here: a random token (32 bytes, URL-safe) that the browser keeps in a
cookie - ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (a cross-site request does
not carry it), ``Secure`` on the TLS listener - and that the listener accepts instead of HTTP
Basic credentials (``credentials.Credentials.principal``).

The table keeps a digest of the token, never the token itself, with the user, the stored
password hash it was opened against (a changed password or a removed user ends the session
at its next request) and two times: a session ends ``IDLE_S`` after its last request and
``LIFETIME_S`` after the login, whichever comes first; logout ends it at once. A request
that may change something (any method but ``GET`` and ``HEAD``; a session's, and as well
one with remembered Basic credentials or an anonymous one) must come from a page of this
very origin (:func:`foreign_origin`): ``SameSite`` does not stop another port of the same
host, which is the same site. At most
``MAX_SESSIONS`` are kept: a login beyond that ends the least recently used one (counted in
``evicted``). The clock is the caller's (``now``), so expiry is tested without sleeping.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

COOKIE = "oxiedge_session"
#: Open sessions kept (a login beyond it ends the least recently used one).
MAX_SESSIONS = 256
#: A session ends this long after its last request...
IDLE_S = 30 * 60.0
#: ... and at the latest this long after the login.
LIFETIME_S = 12 * 3600.0
#: Longest Cookie header value looked at.
MAX_COOKIE = 4096


@dataclass(slots=True)
class Session:
    user: str
    stored_hash: str
    opened: float
    used: float


def _key(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class SessionTable:
    """The open sessions (see the module docstring)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_s: float = IDLE_S,
                 lifetime_s: float = LIFETIME_S) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self._open: OrderedDict[bytes, Session] = OrderedDict()
        self.opened = 0
        self.expired = 0
        self.evicted = 0
        self.closed = 0

    def open(self, user: str, stored_hash: str, now: float) -> str:
        """A new session of ``user``; returns its token (the cookie's value)."""
        while len(self._open) >= self.max_sessions:
            self._open.popitem(last=False)
            self.evicted += 1
        token = secrets.token_urlsafe(32)
        self._open[_key(token)] = Session(user, stored_hash, now, now)
        self.opened += 1
        return token

    def find(self, token: str, now: float) -> Session | None:
        """The live session of ``token`` (its idle time restarts), or None."""
        key = _key(token)
        found = self._open.get(key)
        if found is None:
            return None
        if now - found.used > self.idle_s or now - found.opened > self.lifetime_s:
            del self._open[key]
            self.expired += 1
            return None
        found.used = now
        self._open.move_to_end(key)
        return found

    def close(self, token: str) -> bool:
        """Logout: end the session of ``token`` (False: there was none)."""
        if self._open.pop(_key(token), None) is None:
            return False
        self.closed += 1
        return True

    def drop(self, token: str) -> None:
        """End a session whose user or password is gone (not a logout)."""
        if self._open.pop(_key(token), None) is not None:
            self.expired += 1

    def status(self) -> dict[str, Any]:
        return {"open": len(self._open), "opened": self.opened, "expired": self.expired,
                "evicted": self.evicted, "logouts": self.closed,
                "max_sessions": self.max_sessions, "idle_s": self.idle_s,
                "lifetime_s": self.lifetime_s}


def cookie_token(header: str | None) -> str | None:
    """The session token of a ``Cookie`` header, if it carries one."""
    if not header or len(header) > MAX_COOKIE:
        return None
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE and value:
            return value.strip('"')
    return None


def set_cookie(token: str, secure: bool, max_age: float = LIFETIME_S) -> str:
    """The ``Set-Cookie`` value that hands ``token`` to the browser."""
    return (f"{COOKIE}={token}; Path=/; Max-Age={int(max_age)}; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else ""))


def clear_cookie(secure: bool) -> str:
    """The ``Set-Cookie`` value that makes the browser forget the session."""
    return set_cookie("", secure, 0)


def foreign_origin(headers: dict[str, str]) -> str | None:
    """Why a request did not come from a page of this origin (None: it did, or the browser
    said nothing). Browsers send ``Sec-Fetch-Site`` and, on a cross-origin post, ``Origin``;
    another port of this host is ``same-site``, not ``same-origin``."""
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return "a request from another site or origin may not change anything"
    origin = headers.get("origin")
    if origin is not None and _netloc(origin) != headers.get("host"):
        return "the request's Origin is not this console"
    return None


def _netloc(url: str) -> str | None:
    """``host[:port]`` of ``url``; None where ``urlsplit`` refuses it (``http://[::1``)."""
    try:
        return urlsplit(url).netloc
    except ValueError:
        return None

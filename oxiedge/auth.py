"""Users shared by MQTT and AMQP: a password file of salted PBKDF2-SHA256 hashes.

File format, one user per line (``#`` comments allowed)::

    name:pbkdf2_sha256$<iterations>$<salt base64>$<hash base64>

Anonymous clients (no username) are accepted only when the file has no users *and* the
listeners are on a loopback address, unless ``allow_anonymous`` says otherwise explicitly
(Mosquitto 2.x's rule: a broker reachable from the network is never open by accident, and
removing the last user does not reopen it). Successful checks are cached (keyed by a fast
salted digest of the password) so a reconnect storm does not burn the CPU of a Pi on PBKDF2.
An unknown user name costs one PBKDF2 run against a dummy hash, like a wrong password, so the
response time does not tell which names exist. ``oxiedge.login`` runs these checks off the
event loop and slows repeated failures.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ITERATIONS = 120_000
_SCHEME = "pbkdf2_sha256"


class UserFileError(ValueError):
    """The password file is malformed (the message names the line)."""


def hash_password(password: str | bytes, iterations: int = ITERATIONS) -> str:
    pw = password.encode() if isinstance(password, str) else password
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", pw, salt, iterations)
    return "$".join([_SCHEME, str(iterations), base64.b64encode(salt).decode(),
                     base64.b64encode(digest).decode()])


def verify_password(password: bytes, encoded: str) -> bool:
    if encoded.startswith("$"):  # imported from Mosquitto, verified as it is
        from .access.mosquitto import verify_mosquitto

        return verify_mosquitto(password, encoded)
    try:
        scheme, iterations, salt_b64, hash_b64 = encoded.split("$")
        if scheme != _SCHEME:
            return False
        salt = base64.b64decode(salt_b64)
        expected = base64.b64decode(hash_b64)
        digest = hashlib.pbkdf2_hmac("sha256", password, salt, int(iterations))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


#: What every way of naming a user (CLI, HTTP API, definitions import) is told.
USER_NAME_RULE = "a user name is non-empty, printable, without ':' or surrounding spaces"


def user_name_ok(name: str) -> bool:
    """Can ``name`` be a password-file entry? (A line break would split its NAME:HASH line
    and leave a file that no longer reads; a ':' would end the name early.)"""
    return bool(name) and ":" not in name and name.strip() == name and name.isprintable() \
        and not name.startswith("#")


def read_user_file(path: Path) -> dict[str, str]:
    users: dict[str, str] = {}
    if not path.exists():
        return users
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        if not sep or not name or not encoded.startswith((_SCHEME + "$", "$7$", "$6$")):
            raise UserFileError(f"{path}:{lineno}: expected NAME:{_SCHEME}$...")
        users[name] = encoded
    return users


def write_user_file(path: Path, users: dict[str, str]) -> None:
    """Atomically rewrite the password file (mode 0600)."""
    bad = next((name for name in users if not user_name_ok(name)), None)
    if bad is not None:  # the last guard: every writer checks first, naming its field
        raise UserFileError(f"{bad!r}: {USER_NAME_RULE}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    body = "".join(f"{name}:{encoded}\n" for name, encoded in sorted(users.items()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("# oxiedge users: edit with `oxiedge user add|remove`\n" + body)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextmanager
def editing_user_file(path: Path) -> Iterator[dict[str, str]]:
    """The one way the password file is changed: read, modify the yielded name -> hash
    dict, rewrite - under an exclusive ``flock`` on ``PATH.lock``. Every writer goes through
    it (``oxiedge user add|remove``, ``user import-mosquitto``, the HTTP API's user writes,
    the definitions import, in the server or the CLI), so two changes at once, from two
    processes or two threads of one, never lose a user: flock locks an open file, and each
    caller opens its own. The rewrite is skipped when nothing changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        users = read_user_file(path)
        before = dict(users)
        yield users
        if users != before or not path.exists():
            write_user_file(path, users)
    finally:
        os.close(lock)  # (releases the lock)


def put_user(path: Path, name: str, encoded: str) -> bool:
    """Add or replace ``name``'s stored hash; True if the user is new (blocking: fsync)."""
    with editing_user_file(path) as users:
        added = name not in users
        users[name] = encoded
    return added


def remove_user(path: Path, name: str) -> bool:
    """Remove ``name``; False if there was no such user (blocking: fsync)."""
    with editing_user_file(path) as users:
        return users.pop(name, None) is not None


def is_network_address(bind: str) -> bool:
    """True unless ``bind`` is a loopback address (``0.0.0.0`` and ``::`` are the network)."""
    if bind == "localhost":
        return False
    try:
        return not ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return True


def _dummy_hash(iterations: int) -> str:
    """A hash no password matches, for unknown user names (same cost as a real check)."""
    return "$".join([_SCHEME, str(iterations), base64.b64encode(secrets.token_bytes(16)).decode(),
                     base64.b64encode(secrets.token_bytes(32)).decode()])


class UserStore:
    """Who may connect; used by both brokers. ``network``: the listeners are on a
    non-loopback address (then no user does not mean anonymous access)."""

    def __init__(self, users: dict[str, str], allow_anonymous: bool | None,
                 path: Path | None = None, network: bool = False) -> None:
        self.path = path
        self.network = network
        self._users = users
        self._explicit_anonymous = allow_anonymous
        self._cache: dict[str, bytes] = {}
        self._cache_salt = secrets.token_bytes(16)
        self._dummy = self._make_dummy()
        self.failures = 0

    @classmethod
    def load(cls, path: Path | None, allow_anonymous: bool | None = None, network: bool = False
             ) -> UserStore:
        users = read_user_file(path) if path is not None else {}
        return cls(users, allow_anonymous, path, network)

    def _make_dummy(self) -> str:
        # The iteration count of a real user, so that an unknown name costs exactly as much.
        for encoded in self._users.values():
            parts = encoded.split("$")
            if len(parts) == 4 and parts[1].isdigit():
                return _dummy_hash(int(parts[1]))
        return _dummy_hash(ITERATIONS)

    def reload(self) -> None:
        if self.path is not None:
            self._users = read_user_file(self.path)
            self._cache.clear()
            self._dummy = self._make_dummy()

    @property
    def anonymous_allowed(self) -> bool:
        if self._explicit_anonymous is not None:
            return self._explicit_anonymous
        return not self._users and not self.network

    @property
    def open_by_loopback(self) -> bool:
        """Anonymous access by the default rule (no user, loopback listeners), not by an
        explicit ``--allow-anonymous``: the HTTP listener guards it against other web sites
        (``http.loopback``)."""
        return self._explicit_anonymous is None and not self._users and not self.network

    def mode(self) -> str:
        """How anonymous clients are treated, for the start-up log and ``oxiedge status``."""
        users = len(self._users)
        if self._explicit_anonymous is True:
            warn = " - WARNING: anyone on the network may connect" if self.network and \
                not users else ""
            return f"anonymous clients allowed (--allow-anonymous), {users} user(s){warn}"
        if self._explicit_anonymous is False:
            return f"anonymous clients refused (--no-allow-anonymous), {users} user(s)"
        if users:
            return f"anonymous clients refused ({users} user(s) configured)"
        if self.network:
            return ("anonymous clients refused: non-loopback address and no user (add one with"
                    " `oxiedge user add`, or pass --allow-anonymous)")
        return "anonymous clients allowed (loopback address, no user configured)"

    def entries(self) -> dict[str, str]:
        """A copy of name -> encoded hash (to compare before and after a reload)."""
        return dict(self._users)

    def hash_of(self, name: str) -> str | None:
        """The stored hash of ``name`` (None: no such user), for callers that remember a
        verified password and must notice when it changes (the HTTP listener)."""
        return self._users.get(name)

    @property
    def has_users(self) -> bool:
        return bool(self._users)

    @property
    def names(self) -> list[str]:
        return sorted(self._users)

    def authenticate(self, username: str | None, password: bytes | None) -> bool:
        """True if the credentials are acceptable (``None`` username = anonymous)."""
        if username is None or (username == "" and not password):
            ok = self.anonymous_allowed
        else:
            encoded = self._users.get(username)
            if encoded is None and not self._users:
                # No users at all: a name is as good as none (an open loopback broker).
                ok = self.anonymous_allowed
            elif encoded is None:
                # No user-name oracle: an unknown name costs one PBKDF2 run, like a wrong
                # password, and fails.
                verify_password(password or b"", self._dummy)
                ok = False
            else:
                pw = password or b""
                quick = hashlib.sha256(self._cache_salt + pw).digest()
                if self._cache.get(username) == quick:
                    ok = True
                else:
                    ok = verify_password(pw, encoded)
                    if ok:
                        self._cache[username] = quick
        if not ok:
            self.failures += 1
        return ok

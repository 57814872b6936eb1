"""TLS for the MQTT and AMQP listeners: the server context, its reload, bounded handshakes.

trio's own :class:`trio.SSLStream` over the stdlib ``ssl`` module (no extra dependency).

* :func:`build_context` turns ``--tls-cert/--tls-key/--tls-ca/--tls-min-version/
  --tls-verify-client`` into an ``ssl.SSLContext``; every problem (missing file, a key that
  does not match the certificate, a bad CA file) raises :class:`TlsConfigError` naming the
  option and the value, so ``oxiedge serve`` exits non-zero before it listens.
* :class:`TlsManager` holds the current context. ``reload()`` (SIGHUP, ``oxiedge tls
  reload``) builds a new one from the same paths and swaps it in: handshakes started after
  the swap see the new certificate, established connections keep their session. A reload
  that fails keeps the old context and says why.
* :class:`TlsListener` wraps a TCP listener: ``accept`` returns an ``SSLStream`` at once,
  without handshaking, so the accept loop never waits for a client's crypto. The
  handshake runs in the connection's own task (:meth:`TlsManager.handshake`), bounded by
  ``--tls-handshake-timeout``; a client that never speaks, or speaks garbage, costs one
  task for at most that long and is counted (``tls.handshake_timeouts`` /
  ``tls.handshake_failures`` in ``oxiedge status``).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from oxiedge.net.sockets import transport_socket

VERIFY_MODES = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
MIN_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
#: At most one log line per this many seconds about failed handshakes (a scanner or a
#: flood must not fill the journal); the counters count every one.
_FAILURE_LOG_INTERVAL = 10.0


class TlsConfigError(ValueError):
    """Invalid TLS settings; the message names the option and the bad value."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The TLS part of the configuration (paths are re-read on every reload)."""

    cert: Path | None
    key: Path | None
    ca: Path | None
    min_version: str = "1.2"
    verify_client: str = "none"
    identity_as_username: bool = False
    handshake_timeout: float = 10.0
    max_handshakes: int = 256

    @classmethod
    def from_config(cls, config: Any) -> TlsSettings:
        return cls(cert=config.tls_cert, key=config.tls_key, ca=config.tls_ca,
                   min_version=config.tls_min_version, verify_client=config.tls_verify_client,
                   identity_as_username=config.tls_identity_as_username,
                   handshake_timeout=float(config.tls_handshake_timeout),
                   max_handshakes=config.tls_max_handshakes)


def _readable(path: Path, option: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TlsConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None


def build_context(s: TlsSettings) -> ssl.SSLContext:
    """A server-side context from the settings; raises :class:`TlsConfigError`."""
    if s.cert is None:
        raise TlsConfigError("a TLS port is set but --tls-cert (OXIEDGE_TLS_CERT) is not")
    _readable(s.cert, "--tls-cert (OXIEDGE_TLS_CERT)")
    key = s.key if s.key is not None else s.cert  # one PEM file may hold both
    if s.key is not None:
        _readable(s.key, "--tls-key (OXIEDGE_TLS_KEY)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSIONS[s.min_version]
    # TLS 1.2 renegotiation would let a client buy server handshakes after the bounded
    # first one; compression leaks plaintext lengths (CRIME). Neither is needed by MQTT/AMQP.
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    try:
        ctx.load_cert_chain(str(s.cert), str(key))
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"--tls-cert {s.cert} / --tls-key {key}: not a PEM certificate and its private "
            f"key, or the key does not match the certificate ({exc.reason or exc})") from None
    except OSError as exc:
        raise TlsConfigError(f"--tls-cert {s.cert} / --tls-key {key}: {exc}") from None
    if s.ca is not None:
        _readable(s.ca, "--tls-ca (OXIEDGE_TLS_CA)")
        try:
            ctx.load_verify_locations(cafile=str(s.ca))
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(
                f"--tls-ca (OXIEDGE_TLS_CA) {s.ca}: not a PEM CA bundle ({exc})") from None
    if s.verify_client != "none":
        if s.ca is None:
            raise TlsConfigError(f"--tls-verify-client {s.verify_client} needs --tls-ca "
                                 "(OXIEDGE_TLS_CA): the CA that signs client certificates")
        ctx.verify_mode = VERIFY_MODES[s.verify_client]
    return ctx


def cert_identity(cert: dict[str, Any] | None) -> str | None:
    """The user name a verified client certificate stands for: its subject's commonName,
    else its first DNS / e-mail subjectAltName (Mosquitto ``use_identity_as_username`` and
    RabbitMQ's EXTERNAL mechanism both take the CN by default)."""
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    for kind, value in cert.get("subjectAltName", ()):
        if kind in ("DNS", "email") and value:
            return str(value)
    return None


def peer_name(stream: trio.abc.Stream) -> str:
    sock = transport_socket(stream)
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("?", 0)
    except OSError:
        return "?"
    return f"{host}:{port}"


class TlsManager:
    """The current server context, its reload, and the handshake counters."""

    def __init__(self, settings: TlsSettings, log: logging.Logger) -> None:
        self.settings = settings
        self.log = log
        self.context = build_context(settings)  # TlsConfigError: before any port opens
        self.counters = {"handshakes": 0, "handshake_failures": 0, "handshake_timeouts": 0,
                         "handshakes_refused": 0, "reloads": 0, "reload_failures": 0}
        self.pending = 0  # handshakes in progress (bounded by --tls-max-handshakes)
        self.loaded_at = time.time()
        self.last_reload_error = ""
        self._last_failure_log = 0.0
        self._suppressed = 0

    # ------------------------------------------------------------------ reload
    def reload(self) -> dict[str, Any]:
        """Re-read certificate, key and CA; swap the context for new handshakes.
        On error the old context stays in use and the error is returned (and logged)."""
        try:
            ctx = build_context(self.settings)
        except TlsConfigError as exc:
            self.counters["reload_failures"] += 1
            self.last_reload_error = str(exc)
            self.log.error("TLS reload failed, keeping the previous certificate: %s", exc)
            return {"reloaded": False, "error": str(exc)}
        self.context = ctx
        self.counters["reloads"] += 1
        self.loaded_at = time.time()
        self.last_reload_error = ""
        self.log.info("TLS certificate reloaded from %s", self.settings.cert)
        return {"reloaded": True, "cert": str(self.settings.cert)}

    def wrap(self, transport: trio.SocketStream) -> trio.SSLStream[trio.SocketStream]:
        # https_compatible: a client that closes TCP without close_notify (most MQTT
        # clients) is an ordinary EOF, and our aclose() does not wait for the peer's.
        return trio.SSLStream(transport, self.context, server_side=True, https_compatible=True)

    # --------------------------------------------------------------- handshake
    async def handshake(self, stream: trio.SSLStream[Any], label: str) -> bool:
        """Complete the server handshake within ``--tls-handshake-timeout``; False (counted,
        the stream closed) when it fails or stalls. Runs in the connection's own task.

        At most ``--tls-max-handshakes`` run at once: each holds an OpenSSL object and its
        buffers for up to the timeout, so a flood of silent sockets must not hold more; the
        ones beyond it are closed at once (counted ``handshakes_refused``)."""
        if self.pending >= self.settings.max_handshakes:
            self.counters["handshakes_refused"] += 1
            self._failure(label, stream, f"refused: --tls-max-handshakes "
                                         f"({self.settings.max_handshakes}) in progress")
            await trio.aclose_forcefully(stream)
            return False
        self.pending += 1
        try:
            with trio.move_on_after(self.settings.handshake_timeout) as scope:
                try:
                    await stream.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self.counters["handshake_failures"] += 1
                    cause = exc.__cause__ or exc
                    self._failure(label, stream, f"failed: {cause}")
                    await trio.aclose_forcefully(stream)
                    return False
        finally:
            self.pending -= 1
        if scope.cancelled_caught:
            self.counters["handshake_timeouts"] += 1
            self._failure(label, stream,
                          f"timed out after {self.settings.handshake_timeout:g}s")
            await trio.aclose_forcefully(stream)
            return False
        self.counters["handshakes"] += 1
        return True

    def _failure(self, label: str, stream: trio.SSLStream[Any], what: str) -> None:
        now = time.monotonic()
        if now - self._last_failure_log < _FAILURE_LOG_INTERVAL:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more not logged)" if self._suppressed else ""
        self._last_failure_log, self._suppressed = now, 0
        self.log.info("%s TLS handshake from %s %s%s", label, peer_name(stream), what, more)

    def identity(self, stream: trio.SSLStream[Any]) -> str | None:
        """The verified client certificate's user name (None: no certificate, or
        ``--tls-identity-as-username`` is off)."""
        if not self.settings.identity_as_username:
            return None
        try:
            return cert_identity(stream.getpeercert())
        except (ValueError, ssl.SSLError):
            return None

    # ------------------------------------------------------------------ admin
    def admin_handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {"tls.reload": lambda _args: self.reload()}

    def status(self) -> dict[str, Any]:
        s = self.settings
        return {
            **self.counters,
            "cert": str(s.cert),
            "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.loaded_at)),
            "last_reload_error": self.last_reload_error or "none",
            "min_version": s.min_version,
            "verify_client": s.verify_client,
            "identity_as_username": s.identity_as_username,
            "handshake_timeout": s.handshake_timeout,
            "handshakes_in_progress": self.pending,
            "max_handshakes": s.max_handshakes,
        }


async def open_secured(tls: TlsManager | None, stream: trio.abc.Stream,
                       label: str) -> tuple[bool, str | None]:
    """Where a connection starts, for both protocols: a TLS stream runs its bounded, counted
    handshake first. Returns ``(go on, the verified client certificate's identity)``; a plain
    stream goes on with no identity."""
    if not isinstance(stream, trio.SSLStream):
        return True, None
    assert tls is not None, "a TLS stream comes from a TlsListener, built with the manager"
    if not await tls.handshake(stream, label):
        return False, None
    return True, tls.identity(stream)


class TlsListener(trio.abc.Listener[trio.SSLStream[trio.SocketStream]]):
    """A TCP listener whose streams are TLS server streams (handshake not yet done).
    The context is read at each accept, so a reload applies to the next client."""

    def __init__(self, inner: trio.SocketListener, manager: TlsManager) -> None:
        self.inner = inner
        self.manager = manager

    @property
    def socket(self) -> trio.socket.SocketType:
        return self.inner.socket

    async def accept(self) -> trio.SSLStream[trio.SocketStream]:
        return self.manager.wrap(await self.inner.accept())

    async def aclose(self) -> None:
        await self.inner.aclose()

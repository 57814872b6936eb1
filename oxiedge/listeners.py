"""The broker's listening sockets as one table.

Each entry of :data:`LISTENERS` is one listener: its name in the log lines, its key in
``oxiedge status`` / the health checks (``App.endpoints``), the ``Config`` field of its port
(``None`` = off, ``0`` = any free port), whether it speaks TLS, and which server handles its
connections (``mqtt``, ``amqp``, ``http``: the wiring passes that server's ``run``).
:func:`open_listeners` binds every entry of one server that is on, in table order (plain
before TLS), starts the server on all of them at once, and logs each bound port. Adding a
listener is one entry here; the start-up lines (``MQTT listening on HOST:PORT``, then the
authentication mode; for HTTP also ``console on http(s)://HOST:PORT/``) are the same for
all, and tests read them.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .app import App
from .config import Config
from .tls import TlsListener, TlsManager


class StartupError(RuntimeError):
    """The server cannot start; the message names the bad value."""


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    label: str  # in the log lines and refusals: "MQTT TLS listening on ..."
    endpoint: str  # App.endpoints key: oxiedge status, /api/health/checks/port-listener
    port_option: str  # the Config field of its port
    tls: bool
    serves: str  # the server that handles its connections


LISTENERS: tuple[ListenerSpec, ...] = (
    ListenerSpec("MQTT", "mqtt", "mqtt_port", False, "mqtt"),
    ListenerSpec("MQTT TLS", "mqtt_tls", "mqtt_tls_port", True, "mqtt"),
    ListenerSpec("AMQP", "amqp", "amqp_port", False, "amqp"),
    ListenerSpec("AMQP TLS", "amqp_tls", "amqp_tls_port", True, "amqp"),
    ListenerSpec("HTTP", "http", "http_port", False, "http"),  # (+ WebSocket at /mqtt, /ws)
    ListenerSpec("HTTP TLS", "http_tls", "http_tls_port", True, "http"),
)

#: A server's ``run(listeners, *, task_status)``, started with ``nursery.start``.
Serve = Callable[..., Awaitable[Any]]


def port_of(config: Config, spec: ListenerSpec) -> int | None:
    port = getattr(config, spec.port_option)
    return None if port is None else int(port)


def wanted(config: Config, serves: str) -> list[ListenerSpec]:
    """The listeners of server ``serves`` that are on."""
    return [s for s in LISTENERS if s.serves == serves and port_of(config, s) is not None]


def any_tls(config: Config) -> bool:
    return any(s.tls and port_of(config, s) is not None for s in LISTENERS)


async def bind(config: Config, port: int, label: str) -> list[trio.SocketListener]:
    try:
        return await trio.open_tcp_listeners(port, host=config.bind)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"{label} port {port} on {config.bind} is already in use") \
                from None
        raise StartupError(f"cannot listen on {config.bind}:{port} for {label}: {exc}") from None


def bound_port(listeners: list[Any]) -> int:
    return int(listeners[0].socket.getsockname()[1])


def format_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _url_host(bind: str) -> str:
    """The host of a URL that reaches ``bind`` (a wildcard bind: this machine's loopback)."""
    if bind in ("", "0.0.0.0"):
        return "127.0.0.1"
    return "[::1]" if bind == "::" else format_host(bind)


async def open_listeners(app: App, serves: str, run: Serve, nursery: trio.Nursery,
                         tls: TlsManager | None, suffix: str = "") -> None:
    """Bind the listeners of ``serves`` that are on, start ``run`` on them and log each
    (``suffix`` ends the first "listening" line)."""
    config, log = app.config, app.log
    bound: list[tuple[ListenerSpec, list[Any]]] = []
    for spec in wanted(config, serves):
        raw = await bind(config, port_of(config, spec) or 0, spec.label)
        if spec.tls:
            assert tls is not None  # (built whenever a TLS port is on: server.py)
            bound.append((spec, [TlsListener(x, tls) for x in raw]))
        else:
            bound.append((spec, list(raw)))
    await nursery.start(run, [x for _, group in bound for x in group])
    host = format_host(config.bind)
    for i, (spec, group) in enumerate(bound):
        actual = bound_port(group)
        app.endpoints[spec.endpoint] = f"{config.bind}:{actual}"
        log.info("%s listening on %s:%d%s", spec.label, host, actual, suffix if i == 0 else "")
        log.info("%s on %s:%d: %s", spec.label, host, actual, app.users.mode())
        if spec.serves == "http":
            log.info("console on %s://%s:%d/", "https" if spec.tls else "http",
                     _url_host(config.bind), actual)

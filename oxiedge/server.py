"""``oxiedge serve``: one trio nursery holding the committer, the brokers and the admin socket.

Start-up order is part of the contract: open the store, recover every broker's durable state,
and only then bind the listeners, so a port that accepts connections always serves recovered
state. Start-up lines (exact prefixes: README) go to stderr; ``oxiedge ready`` is last,
and it is also when systemd hears READY=1.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio

from . import gcpolicy, sdnotify
from .access import PermissionError_, PermissionStore
from .access import path_for as permissions_path
from .access.reload import reload_access
from .admin.server import AdminServer, StatusPart, core_handlers
from .amqp.service import AmqpService
from .app import App, make_logger
from .auth import UserFileError, UserStore, is_network_address
from .bridge.amqp_mqtt import TopicBridge
from .bus import Bus
from .config import Config, ConfigError
from .ingest.routes import Route, parse_routes
from .ingest.step import Ingest
from .listeners import StartupError, any_tls, open_listeners, wanted
from .mqtt.service import MqttService
from .net.hot import HotLoopOff, hot_loop_state
from .store import Store, StoreFormatError, StoreLockedError
from .tls import TlsConfigError, TlsManager, TlsSettings
from .topicmap import EXCHANGE
from .uplink.definitions import UplinkDef, check_device_id, load_config_file
from .uplink.manager import UplinkManager, default_device_id

#: Exit status after a failed commit round (crash-only: ``Restart=on-failure`` restarts the
#: unit and start-up recovery runs from what is on disk; 2 stays "bad configuration").
EXIT_STORAGE_FAILURE = 3
#: Seconds the failed round's waiters get to answer (nack, close) before the process exits.
STORAGE_FAILURE_GRACE = 0.5


def run(config: Config) -> int:
    """Run the server until SIGTERM/SIGINT; returns the process exit code."""
    log = make_logger()
    try:
        trio.run(serve, config)
    except (StartupError, ConfigError) as exc:
        log.error("oxiedge: error: %s", exc)
        return 2
    except BaseExceptionGroup as group:
        # Raised inside the server's nursery (a port in use, a bad TLS file): the group
        # holds it. Only a group of nothing else is a start-up error; the rest propagates.
        bad, rest = group.split((StartupError, ConfigError))
        if bad is None or rest is not None:
            raise
        log.error("oxiedge: error: %s", _first_leaf(bad))
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _prepare_data_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create data dir {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(f"data dir {path} is not writable")


def _open_store(config: Config) -> Store:
    _prepare_data_dir(config.data)
    try:
        return Store.open(config.db_path)
    except StoreLockedError:
        raise StartupError(
            f"data dir {config.data} is in use by another oxiedge process") from None
    except StoreFormatError as exc:  # a newer oxiedge's data: refuse, change nothing
        raise StartupError(str(exc)) from None
    except Exception as exc:
        raise StartupError(f"cannot open the store in {config.db_path}: {exc}") from None


def admin_socket_mode(data: Path) -> int:
    """0660 when the data dir is shared with its group only (the systemd unit sets
    StateDirectoryMode=0750, so members of the ``oxiedge`` group may use the CLI), else
    owner-only 0600 (a plain 0755 directory does not open the socket to its group)."""
    try:
        mode = os.stat(data).st_mode
    except OSError:
        return 0o600
    group_ok = mode & 0o050 == 0o050 and mode & 0o007 == 0
    return 0o660 if group_ok else 0o600


async def serve(config: Config) -> None:
    """Open, recover, listen, announce ready; shut down cleanly on SIGTERM/SIGINT."""
    log = make_logger()
    routes = parse_routes(config.ingest)  # invalid routes: exit before listening
    uplinks = load_config_file(config.config_file) if config.config_file else []
    config = replace(
        config, device_id=check_device_id(config.device_id or default_device_id()))
    try:
        users = UserStore.load(config.users_path, config.allow_anonymous,
                               network=is_network_address(config.bind))
        permissions = PermissionStore.load(permissions_path(config.data))
    except (UserFileError, PermissionError_, OSError) as exc:
        raise StartupError(str(exc)) from None
    tls = _tls_manager(config, log)  # a bad certificate or key: exit before listening
    store = _open_store(config)
    try:
        app = App(config=config, store=store, users=users, log=log, permissions=permissions)
        await _serve_app(app, tls, routes, uplinks)
    finally:
        store.close()
        log.info("oxiedge stopped")


def _tls_manager(config: Config, log: Any) -> TlsManager | None:
    """The TLS context when a TLS port is set (None otherwise); invalid settings raise
    StartupError naming the bad value."""
    if not any_tls(config):
        return None
    try:
        return TlsManager(TlsSettings.from_config(config), log)
    except TlsConfigError as exc:
        raise StartupError(str(exc)) from None


@dataclass
class Parts:
    """The parts of one server. Each is built here with the typed parts it needs (no
    lookups by name); ``status`` holds those whose counters join ``oxiedge status``."""

    tls: TlsManager | None
    ingest: Ingest
    bus: Bus
    mqtt: MqttService | None = None
    amqp: AmqpService | None = None
    status: dict[str, StatusPart] = field(default_factory=dict)


def _build(app: App, tls: TlsManager | None, routes: list[Route], mqtt_on: bool,
           amqp_on: bool) -> Parts:
    """The brokers and the bus between them (``bus.py``): the MQTT router and the AMQP
    publish path hand publishes to the bus; the bus reaches amq.topic through the bridge,
    the ingest step, and (once they exist, ``_start``) the uplink outboxes."""
    ingest = Ingest(app, routes)
    mqtt = MqttService(app, tls=tls) if mqtt_on else None
    amqp = AmqpService(app, tls=tls) if amqp_on else None
    bridge = None if amqp is None else TopicBridge(amqp, amqp.broker.exchanges[EXCHANGE])
    bus = Bus(mqtt, bridge, ingest)
    parts = Parts(tls=tls, ingest=ingest, bus=bus, mqtt=mqtt, amqp=amqp)
    if tls is not None:
        parts.status["tls"] = tls
    parts.status["ingest"] = ingest
    if mqtt is not None:
        app.services["mqtt"] = mqtt
        mqtt.broker.bus = bus
    if amqp is not None:
        app.services["amqp"] = amqp
        amqp.broker.bus = bus
    if mqtt is not None and bridge is not None:
        parts.status["mqtt_amqp"] = bridge
    return parts


async def _serve_app(app: App, tls: TlsManager | None, routes: list[Route],
                     uplinks: list[UplinkDef]) -> None:
    config, log = app.config, app.log
    parts = _build(app, tls, routes, bool(wanted(config, "mqtt")),
                   bool(wanted(config, "amqp")))
    handlers = core_handlers(app, parts.status)
    _tune_transport(app, parts)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals, \
            trio.open_signal_receiver(signal.SIGHUP) as hangups:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope, log, parts)
            nursery.start_soon(_reload_on_hangup, hangups, app, tls)
            await _start(app, parts, nursery, handlers, uplinks)


def _tune_transport(app: App, parts: Parts) -> None:
    """The hot loop: whether it is on (logged, and its ``oxiedge status`` section either
    way) and its busy-poll. (The blocked keep-alive is the ``BlockedWatch``'s, ``App``.)"""
    config, log = app.config, app.log
    hot = hot_loop_state()
    parts.status["hot_loop"] = hot
    if isinstance(hot, HotLoopOff):
        if hot.chosen:
            log.info("hot loop off: %s", hot.reason)
        else:  # the appliance loses speed it was measured with: loud
            log.warning("hot loop off: %s", hot.reason)
        if config.busy_poll_us:
            log.warning("--busy-poll-us %d ignored: no hot loop (%s)", config.busy_poll_us,
                        hot.reason)
        return
    log.info("hot loop on")
    committer = app.store.committer
    hot.busy_poll(config.busy_poll_us, lambda: committer.sync_started is not None)
    if config.busy_poll_us:
        log.info("busy-poll on - up to %d µs before the event loop sleeps", config.busy_poll_us)


async def _reload_on_hangup(hangups: Any, app: App, tls: TlsManager | None) -> None:
    """SIGHUP re-reads the TLS certificate and key (like ``oxiedge tls reload``), the users
    and the permissions (``access/reload.py``; each logs what changed)."""
    async for _ in hangups:
        app.log.info("received SIGHUP: reloading users, permissions and TLS")
        reload_access(app.users, app.permissions, app.log)
        if tls is None:
            app.log.info("received SIGHUP: no TLS listener, nothing to reload")
        else:
            tls.reload()


async def _stop_on_signal(signals: Any, scope: trio.CancelScope, log: Any,
                          parts: Parts) -> None:  # fmt: skip
    async for signum in signals:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        sdnotify.stopping()
        if parts.mqtt is not None:
            parts.mqtt.shutting_down()  # MQTT 5 clients hear why (DISCONNECT 0x8B)
        scope.cancel()
        return


async def _start(app: App, parts: Parts, nursery: trio.Nursery, handlers: dict[str, Any],
                 uplink_defs: list[UplinkDef]) -> None:
    config, log = app.config, app.log
    await nursery.start(app.store.committer.run)
    nursery.start_soon(_exit_on_storage_failure, app)
    await nursery.start(app.alarms.run)
    log.info("%s", app.alarms.startup_line())
    ingest, tls = parts.ingest, parts.tls
    await ingest.start()
    handlers.update(ingest.admin_handlers())
    await nursery.start(ingest.run)  # retention, resumed index builds
    if "mqtt_amqp" in parts.status:  # both brokers: amq.topic <-> MQTT through the bus
        log.info("MQTT-AMQP bridge on - amq.topic")
    # Recovery of everything before any port opens (README: "Recovery finishes before any
    # port opens").
    for service in app.services.values():
        await service.recover()
    # Uplink outboxes are recovered here too; links connect on their own schedule.
    uplinks = UplinkManager(app, uplink_defs, config.device_id, parts.bus)
    parts.bus.uplinks = uplinks
    parts.status["uplink"] = uplinks
    await uplinks.start(nursery)
    await _recovery_done(app)
    handlers.update(uplinks.admin_handlers())
    for key, service in app.services.items():  # (listeners: the table of listeners.py)
        await open_listeners(app, key, service.run, nursery, tls, service.listening_suffix())
        for line in service.extra_lines():
            log.info("%s", line)
        if key == "mqtt":
            log.info("%s", ingest.startup_line())
        handlers.update(service.admin_handlers())
    if tls is not None:
        handlers.update(tls.admin_handlers())
    else:
        handlers["tls.reload"] = lambda _args: {
            "reloaded": False, "error": "no TLS port is configured (--mqtt-tls-port, "
            "--amqp-tls-port, --http-tls-port)"}
    log.info("%s", uplinks.startup_line())
    http = await _start_http(app, parts, nursery, handlers)
    admin = AdminServer(app, handlers, config.admin_socket, admin_socket_mode(config.data))
    await nursery.start(admin.run)
    gcpolicy.freeze_startup_objects()  # no full GC pass over start-up's objects (p99)
    log.info("oxiedge ready")
    if http is not None:
        http.ready = True  # /readyz
    sdnotify.ready(f"serving {', '.join(app.endpoints.values()) or 'admin socket only'}")
    nursery.start_soon(sdnotify.watchdog_loop, lambda interval: _durable_ok(app, interval))


async def _start_http(app: App, parts: Parts, nursery: trio.Nursery,
                      handlers: dict[str, Any]) -> Any:
    """The HTTP listener (docs/http.md) on --http-port and --http-tls-port; returns its view
    of the server (``ready`` is set once ``oxiedge ready`` is logged), None when both are off.
    Its h11 is imported only here."""
    config, log = app.config, app.log
    if not wanted(config, "http"):
        return None
    from .http.wiring import build

    server, view = build(app, handlers, parts.status, parts.tls, parts.amqp)
    if parts.mqtt is not None:  # MQTT over WebSocket at /mqtt and /ws (docs/http.md)
        from .ws.endpoint import WebSocketEndpoint

        server.websocket = WebSocketEndpoint(parts.mqtt, log)
        parts.status["websocket"] = server.websocket
    await open_listeners(app, "http", server.run, nursery, parts.tls)
    parts.status["http"] = server
    nursery.start_soon(view.sample_history)  # the console's rate ring, from start-up
    return view


async def _recovery_done(app: App) -> None:
    """Commit what recovery staged (quarantine moves among it) and say what it moved aside
    or left alone (each record was logged with its key)."""
    store = app.store
    if store.committer.pending:
        await store.commit()
    for name in store.unknown_families:
        app.log.warning("store: column family %r is not used by this version, left alone", name)
    if store.quarantined_now:
        app.log.warning("recovery: %d record(s) could not be decoded and were quarantined "
                        "(`oxiedge status`: store.quarantine)", store.quarantined_now)


def _durable_ok(app: App, interval: float) -> bool:
    """Feed the watchdog only while durable writes work: not after a failed round, and not
    while one sync has hung for a whole watchdog interval."""
    committer = app.store.committer
    return committer.failed is None and committer.stuck_for() < interval


async def _exit_on_storage_failure(app: App) -> None:
    """Crash-only on storage failure: once a commit round failed, nothing durable can be
    acknowledged again by this process (an fsync is never retried), so it logs one line and
    exits non-zero; systemd restarts it and recovery runs. ``os._exit``, not a clean
    shutdown: closing RocksDB would flush memtables to the failing disk, and everything
    acknowledged is already synced (the SIGKILL tests prove that state recovers)."""
    committer = app.store.committer
    await committer.failed_event.wait()
    with trio.CancelScope(shield=True):  # a SIGTERM now must not turn this into exit 0
        app.log.error("oxiedge: storage failure: durable writes stopped (%s); exiting with "
                      "status %d so that the service restarts and recovery runs",
                      committer.failed, EXIT_STORAGE_FAILURE)
        sdnotify.status(f"storage failure, exiting: {committer.failed}")
        await trio.sleep(STORAGE_FAILURE_GRACE)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(EXIT_STORAGE_FAILURE)


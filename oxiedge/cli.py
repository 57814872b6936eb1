"""The ``oxiedge`` command line (typer + rich).

Every command except ``serve`` talks to the running server over the admin socket in the data
dir, and works directly on the data dir when no server runs. Listings print a rich table, or
one JSON object per line with ``--json``.
"""

from __future__ import annotations

import getpass
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from .admin.client import ServerNotRunning, call
from .admin.protocol import AdminError
from .config import Config, ConfigError

if TYPE_CHECKING:
    from .store import Store

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="oxiedge: MQTT + AMQP broker appliance with acknowledgements that mean on disk.",
)
ingest_app = typer.Typer(no_args_is_help=True, help="MQTT topics stored as documents.")
user_app = typer.Typer(no_args_is_help=True, help="Users of MQTT and AMQP (password file).")
app.add_typer(ingest_app, name="ingest")
index_app = typer.Typer(no_args_is_help=True, help="Secondary indexes on collections.")
app.add_typer(index_app, name="index")
app.add_typer(user_app, name="user")
uplink_app = typer.Typer(no_args_is_help=True,
                         help="Store-and-forward to an upstream RabbitMQ or MQTT broker.")
app.add_typer(uplink_app, name="uplink")
tls_app = typer.Typer(no_args_is_help=True,
                      help="TLS listeners (--mqtt-tls-port, --amqp-tls-port).")
app.add_typer(tls_app, name="tls")



class _LazyConsole:
    """A rich Console made on first use: `oxiedge serve` never pays rich's ~3 MB of RSS."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        self._console.print(*args, **kwargs)


out = _LazyConsole(soft_wrap=True)
err = _LazyConsole(stderr=True)

DataOpt = Annotated[Path | None, typer.Option("--data", help="data dir [env: OXIEDGE_DATA; default ./oxiedge-data]")]  # noqa: E501
JsonOpt = Annotated[bool, typer.Option("--json", help="one JSON object per line")]


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _config(data: Path | None, password_file: Path | None = None) -> Config:
    try:
        return Config.resolve({"data": data, "password_file": password_file})
    except ConfigError as exc:
        _fail(str(exc), 2)


def _open_store(cfg: Config, write: bool) -> Store:
    from .store import Store, StoreLockedError

    if not cfg.db_path.exists() and not write:
        _fail(f"no oxiedge data in {cfg.data} (start `oxiedge serve` or pass --data)")
    try:
        store = Store.open(cfg.db_path, read_only=not write)
    except StoreLockedError:
        _fail(f"a server holds {cfg.data} but its admin socket {cfg.admin_socket} does not answer")
    except Exception as exc:  # rocksdict reports I/O problems as plain exceptions
        _fail(f"cannot open {cfg.db_path}: {exc}")
    # The brokers' hot records show up as `_mqtt` / `_amqp` documents, as on a live server.
    from .amqp.views import register_offline_message_view
    from .mqtt.views import register_views

    register_views(store)
    register_offline_message_view(store)
    return store


def _request(data: Path | None, op: str, args: dict[str, Any],
             offline: Callable[[Any], Any] | None, write: bool = False) -> Any:
    """Ask the running server; without one, run ``offline(store)`` on the data dir."""
    cfg = _config(data)
    try:
        return call(cfg.admin_socket, op, args)
    except ServerNotRunning:
        if offline is None:
            _fail(f"no server is running on {cfg.data}")
    except AdminError as exc:
        _fail(str(exc))
    store = _open_store(cfg, write)
    try:
        return offline(store)
    except (ValueError, KeyError) as exc:
        _fail(str(exc))
    finally:
        store.close()


def _offline(module: str, function: str, *args: Any) -> Callable[[Any], Any]:
    """``module.function(store, *args)`` for ``_request``, imported only when no server answers:
    the offline helpers pull in RocksDB and trio, which a running server's answer does not need."""

    def run(store: Any) -> Any:
        return getattr(importlib.import_module(module), function)(store, *args)

    return run


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def _print_rows(rows: list[dict[str, Any]], as_json: bool, title: str | None = None) -> None:
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return
    if not rows:
        out.print(f"(no {title or 'rows'})")
        return
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    out.print(table)


def _print_line(text: str) -> None:
    out.print(text, highlight=False, markup=False)


def _verb(result: dict[str, Any]) -> str:
    """How an ``add`` went, from the ``state`` the server or the offline helper returned."""
    return {"added": "added", "updated": "updated"}.get(result.get("state", ""), "already present")


# ----------------------------------------------------------------------- serve
def _flag_help(name: str) -> str:
    from .config import OPTIONS_BY_NAME

    opt = OPTIONS_BY_NAME[name]
    return f"{opt.help} [env: {opt.env}; default: {opt.default or 'none'}]"


@app.command()
def serve(
    data: Annotated[Path | None, typer.Option("--data", help=_flag_help("data"))] = None,
    bind: Annotated[str | None, typer.Option("--bind", help=_flag_help("bind"))] = None,
    mqtt_port: Annotated[str | None, typer.Option("--mqtt-port", help=_flag_help("mqtt_port"))] = None,  # noqa: E501
    amqp_port: Annotated[str | None, typer.Option("--amqp-port", help=_flag_help("amqp_port"))] = None,  # noqa: E501
    mqtt_tls_port: Annotated[str | None, typer.Option("--mqtt-tls-port", help=_flag_help("mqtt_tls_port"))] = None,  # noqa: E501
    amqp_tls_port: Annotated[str | None, typer.Option("--amqp-tls-port", help=_flag_help("amqp_tls_port"))] = None,  # noqa: E501
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help=_flag_help("tls_cert"))] = None,  # noqa: E501
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help=_flag_help("tls_key"))] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help=_flag_help("tls_ca"))] = None,
    tls_min_version: Annotated[str | None, typer.Option("--tls-min-version", help=_flag_help("tls_min_version"))] = None,  # noqa: E501
    tls_verify_client: Annotated[str | None, typer.Option("--tls-verify-client", help=_flag_help("tls_verify_client"))] = None,  # noqa: E501
    tls_identity_as_username: Annotated[bool | None, typer.Option("--tls-identity-as-username/--no-tls-identity-as-username", help=_flag_help("tls_identity_as_username"))] = None,  # noqa: E501
    tls_handshake_timeout: Annotated[int | None, typer.Option("--tls-handshake-timeout", help=_flag_help("tls_handshake_timeout"))] = None,  # noqa: E501
    tls_max_handshakes: Annotated[int | None, typer.Option("--tls-max-handshakes", help=_flag_help("tls_max_handshakes"))] = None,  # noqa: E501
    mqtt_persist: Annotated[bool | None, typer.Option("--mqtt-persist/--no-mqtt-persist", help=_flag_help("mqtt_persist"))] = None,  # noqa: E501
    ingest: Annotated[list[str] | None, typer.Option("--ingest", help=_flag_help("ingest"))] = None,
    mqtt_max_packet_size: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_packet_size"))] = None,  # noqa: E501
    mqtt_queue_limit: Annotated[int | None, typer.Option(help=_flag_help("mqtt_queue_limit"))] = None,  # noqa: E501
    mqtt_queue_bytes: Annotated[str | None, typer.Option(help=_flag_help("mqtt_queue_bytes"))] = None,  # noqa: E501
    mqtt_retained_max: Annotated[int | None, typer.Option(help=_flag_help("mqtt_retained_max"))] = None,  # noqa: E501
    mqtt_retained_bytes: Annotated[str | None, typer.Option(help=_flag_help("mqtt_retained_bytes"))] = None,  # noqa: E501
    mqtt_max_sessions: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_sessions"))] = None,  # noqa: E501
    mqtt_max_subscriptions: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_subscriptions"))] = None,  # noqa: E501
    mqtt_max_subscription_levels: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_subscription_levels"))] = None,  # noqa: E501
    mqtt_max_topic_levels: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_topic_levels"))] = None,  # noqa: E501
    mqtt_max_topic_length: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_topic_length"))] = None,  # noqa: E501
    mqtt_max_connect_size: Annotated[str | None, typer.Option(help=_flag_help("mqtt_max_connect_size"))] = None,  # noqa: E501
    mqtt_connect_timeout: Annotated[int | None, typer.Option(help=_flag_help("mqtt_connect_timeout"))] = None,  # noqa: E501
    amqp_queue_limit: Annotated[int | None, typer.Option(help=_flag_help("amqp_queue_limit"))] = None,  # noqa: E501
    amqp_heartbeat: Annotated[int | None, typer.Option(help=_flag_help("amqp_heartbeat"))] = None,
    amqp_frame_max: Annotated[int | None, typer.Option(help=_flag_help("amqp_frame_max"))] = None,
    amqp_channel_max: Annotated[int | None, typer.Option(help=_flag_help("amqp_channel_max"))] = None,  # noqa: E501
    amqp_max_message_size: Annotated[str | None, typer.Option(help=_flag_help("amqp_max_message_size"))] = None,  # noqa: E501
    amqp_queue_bytes: Annotated[str | None, typer.Option(help=_flag_help("amqp_queue_bytes"))] = None,  # noqa: E501
    amqp_max_queues: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_queues"))] = None,
    amqp_max_queues_per_connection: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_queues_per_connection"))] = None,  # noqa: E501
    amqp_max_consumers_per_connection: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_consumers_per_connection"))] = None,  # noqa: E501
    amqp_preauth_max_size: Annotated[str | None, typer.Option(help=_flag_help("amqp_preauth_max_size"))] = None,  # noqa: E501
    amqp_handshake_timeout: Annotated[str | None, typer.Option(help=_flag_help("amqp_handshake_timeout"))] = None,  # noqa: E501
    memory_high_watermark: Annotated[
        str | None, typer.Option(help=_flag_help("memory_high_watermark"))] = None,
    disk_free_limit: Annotated[str | None, typer.Option(help=_flag_help("disk_free_limit"))] = None,
    password_file: Annotated[Path | None, typer.Option(help=_flag_help("password_file"))] = None,
    allow_anonymous: Annotated[bool | None, typer.Option("--allow-anonymous/--no-allow-anonymous", help=_flag_help("allow_anonymous"))] = None,  # noqa: E501
    device_id: Annotated[str | None, typer.Option("--device-id", help=_flag_help("device_id"))] = None,  # noqa: E501
    config_file: Annotated[Path | None, typer.Option("--config", help=_flag_help("config_file"))] = None,  # noqa: E501
    max_connections: Annotated[int | None, typer.Option(help=_flag_help("max_connections"))] = None,
    max_connections_per_source: Annotated[int | None, typer.Option(help=_flag_help("max_connections_per_source"))] = None,  # noqa: E501
    login_hash_threads: Annotated[int | None, typer.Option(help=_flag_help("login_hash_threads"))] = None,  # noqa: E501
    login_delay_max: Annotated[float | None, typer.Option(help=_flag_help("login_delay_max"))] = None,  # noqa: E501
    login_track_max: Annotated[int | None, typer.Option(help=_flag_help("login_track_max"))] = None,
) -> None:
    """Run the broker (MQTT + AMQP + document store) in the foreground."""
    try:
        cfg = Config.resolve(locals())
    except ConfigError as exc:
        err.print(f"oxiedge: error: {exc}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    from . import server  # the brokers, trio and RocksDB: only once the settings are valid

    raise typer.Exit(server.run(cfg))


# ------------------------------------------------------------------ documents
@app.command()
def collections(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List collections with their document counts."""
    rows = _request(data, "collections", {}, lambda s: s.list_collections())
    _print_rows(rows, as_json, "collections")


@app.command()
def find(
    collection: Annotated[str, typer.Argument(help="collection name")],
    filter: Annotated[str | None, typer.Argument(help='JSON filter, e.g. \'{"value": {"$gte": 25}}\'')] = None,  # noqa: E501
    sort: Annotated[str | None, typer.Option("--sort", help="field[,field]; -field for descending")] = None,  # noqa: E501
    limit: Annotated[int | None, typer.Option("--limit", min=0)] = None,
    skip: Annotated[int, typer.Option("--skip", min=0)] = 0,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find documents in a collection."""
    spec: Any = None
    if filter:
        try:
            spec = json.loads(filter)
        except ValueError as exc:
            _fail(f"the filter is not valid JSON: {exc}", 2)
        if not isinstance(spec, dict):
            _fail("the filter must be a JSON object, e.g. '{\"value\": {\"$gte\": 25}}'", 2)
        from .store.query import QueryError, compile_filter

        try:
            compile_filter(spec)
        except QueryError as exc:
            _fail(f"bad filter: {exc}", 2)
    args = {"collection": collection, "filter": spec, "sort": sort, "limit": limit, "skip": skip}

    def offline(store: Store) -> list[dict[str, Any]]:
        from .uplink.definitions import redact_documents

        return redact_documents(collection, store.find(collection, spec, sort, limit, skip))

    rows = _request(data, "find", args, offline)
    _print_rows(rows, as_json, collection)


# -------------------------------------------------------------- broker views
_VIEW_MODULES = {
    "sessions": "oxiedge.mqtt.views",
    "retained": "oxiedge.mqtt.views",
    "queues": "oxiedge.amqp.views",
    "exchanges": "oxiedge.amqp.views",
    "bindings": "oxiedge.amqp.views",
}


def _offline_view(name: str) -> Callable[[Any], Any]:
    def run(store: Any) -> Any:
        module = importlib.import_module(_VIEW_MODULES[name])  # lazy: keeps the CLI light
        return module.offline_views(store)[name]()

    return run


def _view_command(name: str, doc: str) -> None:
    def command(data: DataOpt = None, as_json: JsonOpt = False) -> None:
        rows = _request(data, name, {}, _offline_view(name))
        _print_rows(rows, as_json, name)

    command.__doc__ = doc
    command.__name__ = name
    app.command(name=name)(command)


_view_command("sessions",
              "MQTT sessions: client, connected, subscriptions, queued, in-flight, dropped.")
_view_command("retained", "Retained MQTT messages.")
_view_command("queues", "AMQP queues: ready, unacked, consumers, durable, dropped.")
_view_command("exchanges", "AMQP exchanges.")
_view_command("bindings", "AMQP bindings.")


@app.command()
def limits(
    memory_high_watermark: Annotated[str | None, typer.Option(
        help="fraction of RAM (0.4) or size (512MB)")] = None,
    disk_free_limit: Annotated[str | None, typer.Option(help="size, e.g. 200MB")] = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the resource alarms; change their limits on the running server (not persisted)."""
    args = {"memory_high_watermark": memory_high_watermark, "disk_free_limit": disk_free_limit}
    result = _request(data, "alarms.set", args, None)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    _print_rows([result], False, "resource alarms")


@app.command()
def status(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Health, counters and bounds of the running server (or of the data dir)."""

    def offline(store: Any) -> dict[str, Any]:
        return {"server": "not running", "data": str(_config(data).data),
                "collections": len(store.list_collections()),
                "store": {"quarantine": store.quarantine_status()}}

    result = _request(data, "status", {}, offline)
    if as_json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
        return
    _print_pairs(result, "oxiedge status")


def _flatten(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, name + "."))
        else:
            rows.append((name, value))
    return rows


# --------------------------------------------------------------------- ingest
_INGEST = "oxiedge.ingest.stored"
RouteArg = Annotated[str, typer.Argument(help="TOPIC_FILTER:COLLECTION (split at the last :)")]


@ingest_app.command("add")
def ingest_add(
    route: RouteArg,
    max_docs: Annotated[int | None, typer.Option("--max-docs", min=1, help="keep at most N documents in the collection (oldest deleted first)")] = None,  # noqa: E501
    max_age: Annotated[str | None, typer.Option("--max-age", help="delete documents older than this: 30d, 12h, 90m, 45s, 2w")] = None,  # noqa: E501
    data: DataOpt = None,
) -> None:
    """Store MQTT messages matching a topic filter in a collection (live, persistent)."""
    from .ingest.retention import validate_policy
    from .ingest.routes import RouteError, parse_route

    try:
        parse_route(route)
        validate_policy(max_docs, max_age)
    except (RouteError, ValueError) as exc:
        _fail(str(exc), 2)
    args = {"route": route, "max_docs": max_docs, "max_age": max_age}
    result = _request(data, "ingest.add", args,
                      _offline(_INGEST, "add_route_offline", route, max_docs, max_age), write=True)
    limits = ", ".join(f"{k}={result[k]}" for k in ("max_docs", "max_age") if k in result)
    _print_line(f"ingest route {result['route']} {_verb(result)}"
                + (f" ({limits})" if limits else ""))


@ingest_app.command("remove")
def ingest_remove(route: RouteArg, data: DataOpt = None) -> None:
    """Remove a stored ingest route."""
    result = _request(data, "ingest.remove", {"route": route},
                      _offline(_INGEST, "remove_route_offline", route), write=True)
    _print_line(f"ingest route {result['route']} removed")


@ingest_app.command("list")
def ingest_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List ingest routes (from the configuration and from the store)."""
    rows = _request(data, "ingest.list", {}, _offline(_INGEST, "list_routes_offline"))
    _print_rows(rows, as_json, "ingest routes")


# ---------------------------------------------------------------------- index
_INDEXES = "oxiedge.ingest.indexes"
CollArg = Annotated[str, typer.Argument(help="collection name")]
FieldArg = Annotated[str, typer.Argument(help="field path, e.g. value or room.name")]


@index_app.command("add")
def index_add(collection: CollArg, field: FieldArg, data: DataOpt = None) -> None:
    """Index a field (built now for existing documents, then maintained on every write)."""
    result = _request(data, "index.add", {"collection": collection, "field": field},
                      _offline(_INDEXES, "add_offline", collection, field), write=True)
    verb = "added" if result.get("created") else "already present"
    _print_line(f"index {collection}.{field} {verb}")


@index_app.command("remove")
def index_remove(collection: CollArg, field: FieldArg, data: DataOpt = None) -> None:
    """Remove an index."""
    _request(data, "index.remove", {"collection": collection, "field": field},
             _offline(_INDEXES, "remove_offline", collection, field), write=True)
    _print_line(f"index {collection}.{field} removed")


@index_app.command("list")
def index_list(
    collection: Annotated[str | None, typer.Argument(help="only this collection")] = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List indexes."""
    rows = _request(data, "index.list", {"collection": collection},
                    _offline(_INDEXES, "list_offline", collection))
    _print_rows(rows, as_json, "indexes")


# ----------------------------------------------------------------------- users
PwFileOpt = Annotated[Path | None, typer.Option("--password-file", help="[env: OXIEDGE_PASSWORD_FILE; default DATA/passwd]")]  # noqa: E501


def _reload_users(cfg: Config) -> None:
    try:
        call(cfg.admin_socket, "users.reload")
    except (ServerNotRunning, AdminError):
        pass


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="user name")],
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="read the password from stdin")] = False,  # noqa: E501
    data: DataOpt = None,
    password_file: PwFileOpt = None,
    tags: Annotated[str | None, typer.Option("--tags", help="administrator, monitoring or none (comma-separated; stored, not yet used by anything remote)")] = None,  # noqa: E501
) -> None:
    """Add a user or change its password (prompts unless --password-stdin)."""
    from .access.rules import TAGS
    from .auth import hash_password, read_user_file, write_user_file

    if not name or ":" in name or name.strip() != name:
        _fail("user names must be non-empty, without ':' or surrounding spaces", 2)
    tag_list = [t.strip() for t in tags.split(",") if t.strip()] if tags is not None else None
    if tag_list is not None and any(t not in TAGS for t in tag_list):
        _fail(f"tags must be among {', '.join(TAGS)}", 2)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            _fail("passwords differ", 2)
    if not password:
        _fail("empty password", 2)
    cfg = _config(data, password_file)
    path = cfg.users_path
    users = read_user_file(path)
    users[name] = hash_password(password)
    write_user_file(path, users)
    _reload_users(cfg)
    if tag_list is not None:
        _access_cli.set_tags(data, name, tag_list)
    _print_line(f"user {name} saved in {path}")


@user_app.command("remove")
def user_remove(name: str, data: DataOpt = None, password_file: PwFileOpt = None) -> None:
    """Remove a user."""
    from .auth import read_user_file, write_user_file

    cfg = _config(data, password_file)
    path = cfg.users_path
    users = read_user_file(path)
    if users.pop(name, None) is None:
        _fail(f"no user {name!r} in {path}")
    write_user_file(path, users)
    _reload_users(cfg)
    _access_cli.forget_user(data, name)
    _print_line(f"user {name} removed")
    if not users:
        # The last user is gone: say what that means (it never reopens a network listener).
        _print_line("no user left: anonymous clients are allowed on a loopback --bind only;"
                    " a broker on any other address refuses them unless --allow-anonymous")


@user_app.command("list")
def user_list(data: DataOpt = None, password_file: PwFileOpt = None, as_json: JsonOpt = False
              ) -> None:
    """List users and their tags."""
    from .auth import read_user_file

    path = _config(data, password_file).users_path
    tags = _access_cli.tags_of(data)
    _print_rows([{"user": n, "tags": ",".join(tags.get(n, [])) or "none"}
                 for n in sorted(read_user_file(path))], as_json, "users")


# --------------------------------------------------------------------- uplink
_UPLINKS = "oxiedge.uplink.manager"
NameArg = Annotated[str, typer.Argument(help="uplink name")]


@uplink_app.command("add")
def uplink_add(
    name: NameArg,
    urls: Annotated[list[str], typer.Argument(help="amqp[s]://user:pass@host:port/vhost or mqtt[s]://user:pass@host:port; several = a cluster's nodes, tried in turn", show_default=False)],  # noqa: E501
    out: Annotated[list[str] | None, typer.Option("--out", help="forward local messages matching this topic filter (repeatable)")] = None,  # noqa: E501
    inbound: Annotated[list[str] | None, typer.Option("--in", help="bring upstream messages matching this filter here (repeatable)")] = None,  # noqa: E501
    exchange: Annotated[str | None, typer.Option(help="AMQP exchange to publish to and bind --in to [default: amq.topic]")] = None,  # noqa: E501
    prefix: Annotated[str | None, typer.Option(help="upstream topic prefix, e.g. 'site/{device}/'")] = None,  # noqa: E501
    ca_file: Annotated[Path | None, typer.Option(help="TLS: trust this CA file instead of the system's")] = None,  # noqa: E501
    window: Annotated[int | None, typer.Option(help="most unconfirmed messages in flight [default: 256]")] = None,  # noqa: E501
    heartbeat: Annotated[float | None, typer.Option(help="AMQP heartbeat / MQTT keep-alive, seconds [default: 30]")] = None,  # noqa: E501
    max_messages: Annotated[int | None, typer.Option(help="outbox bound in messages [default: 1000000]")] = None,  # noqa: E501
    max_bytes: Annotated[str | None, typer.Option(help="outbox bound in bytes, e.g. 512MB [default: 512MB]")] = None,  # noqa: E501
    policy: Annotated[str | None, typer.Option(help="when the outbox is full: drop-oldest (counted) or block (back-pressure on local publishers)")] = None,  # noqa: E501
    queue_type: Annotated[str | None, typer.Option(help="AMQP --in queue type upstream: quorum or classic [default: quorum]")] = None,  # noqa: E501
    data: DataOpt = None,
) -> None:
    """Add (or change) an uplink: live on a running server, else in the data dir."""
    from .uplink.definitions import parse_definition
    from .uplink.link import UplinkError

    spec: dict[str, Any] = {"name": name, "urls": urls, "out": out or [], "in": inbound or []}
    for key, value in (("exchange", exchange), ("prefix", prefix), ("window", window),
                       ("heartbeat", heartbeat), ("max_messages", max_messages),
                       ("max_bytes", max_bytes), ("policy", policy), ("queue_type", queue_type),
                       ("ca_file", str(ca_file.expanduser().resolve()) if ca_file else None)):
        if value is not None:
            spec[key] = value
    try:
        parse_definition(spec)
    except UplinkError as exc:
        _fail(str(exc), 2)
    result = _request(data, "uplink.add", {"definition": spec},
                      _offline(_UPLINKS, "add_offline", spec), write=True)
    _print_line(f"uplink {name} {_verb(result)}")


@uplink_app.command("remove")
def uplink_remove(name: NameArg, data: DataOpt = None) -> None:
    """Remove an uplink and discard its unsent messages."""
    result = _request(data, "uplink.remove", {"name": name},
                      _offline(_UPLINKS, "remove_offline", name), write=True)
    held = [f"{result[k]} {k.split('_')[1]}" for k in ("discarded_parked", "discarded_returned")
            if result.get(k)]
    _print_line(f"uplink {name} removed ({result.get('discarded', 0)} unsent message(s) "
                f"discarded{', of them ' + ' and '.join(held) if held else ''})")


@uplink_app.command("list")
def uplink_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List uplinks (passwords hidden)."""
    rows = _request(data, "uplink.list", {}, _offline(_UPLINKS, "list_offline"))
    if not as_json:  # the table: what identifies an uplink; --json has every option
        rows = [{k: r.get(k) for k in ("name", "urls", "out", "in", "prefix", "policy", "source")}
                for r in rows]
    _print_rows(rows, as_json, "uplinks")


@uplink_app.command("status")
def uplink_status(name: Annotated[str | None, typer.Argument(help="one uplink")] = None,
                  data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Connection state, backlog, lag, rate and last error of each uplink."""
    result = _request(data, "uplink.status", {"name": name} if name else {},
                      _offline(_UPLINKS, "status_offline", name))
    if as_json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
        return
    if not result:
        _print_line("no uplinks")
    for uplink_name, row in result.items():
        _print_pairs(row, f"uplink {uplink_name}")


def _print_pairs(obj: dict[str, Any], title: str) -> None:
    """A two-column key/value table (narrow terminals stay readable)."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("key")
    table.add_column("value", overflow="fold")
    for key, value in _flatten(obj):
        table.add_row(key, _cell(value))
    out.print(table)


@app.command()
def version() -> None:
    """Print the version."""
    from . import __version__

    out.print(__version__)


def main() -> None:
    app()


# ------------------------------------------------------------------------ tls
@tls_app.command("reload")
def tls_reload(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Re-read the TLS certificate, key and CA (like SIGHUP); connections stay up, new
    handshakes use the new certificate. A bad file keeps the old one and exits 1."""
    result = _request(data, "tls.reload", {}, None)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    elif result.get("reloaded"):
        sys.stdout.write(f"TLS certificate reloaded from {result.get('cert')}\n")
    if not result.get("reloaded"):
        _fail(f"TLS reload failed, the previous certificate stays in use: {result.get('error')}")


# Permission and ACL verbs (`oxiedge permissions|acl`, `user import-mosquitto`) register
# themselves on ``app`` / ``user_app``; imported last since they use the helpers above.
from .access import cli as _access_cli  # noqa: E402

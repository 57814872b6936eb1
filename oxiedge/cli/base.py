"""What every ``oxiedge`` verb group shares: the typer apps, the lazy rich consoles, the
common options, and the helpers that ask the running server over the admin socket or, with
none running, work on the data dir (``_request``), and print rows or key/value pairs."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ..admin.client import ServerNotRunning, call
from ..admin.protocol import AdminError
from ..config import Config, ConfigError

if TYPE_CHECKING:
    from ..store import Store

app = typer.Typer(
    no_args_is_help=True,
    add_completion=True,  # --install-completion; names from the server: complete.py
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
err = _LazyConsole(stderr=True, soft_wrap=True)  # (a message stays one line for grep)

class Settings:
    """The options every command takes (``oxiedge --timeout S --quiet COMMAND``)."""

    quiet = False


@app.callback()
def _every_command(
    timeout: Annotated[float, typer.Option("--timeout", envvar="OXIEDGE_TIMEOUT", min=0.1, help="seconds to wait for the server's answer")] = 60.0,  # noqa: E501
    quiet: Annotated[bool, typer.Option("--quiet", help="print no confirmations (listings and results still print)")] = False,  # noqa: E501
) -> None:
    from ..admin import client

    client.DEFAULT_TIMEOUT = timeout
    Settings.quiet = quiet


DataOpt = Annotated[Path | None, typer.Option("--data", help="data dir [env: OXIEDGE_DATA; default ./oxiedge-data]")]  # noqa: E501
JsonOpt = Annotated[bool, typer.Option("--json", help="one JSON object per line")]


def _fail(message: str, code: int = 1) -> NoReturn:
    from rich.markup import escape  # (a name in the message may look like markup: "[/]")

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def _config(data: Path | None, password_file: Path | None = None) -> Config:
    try:
        return Config.resolve({"data": data, "password_file": password_file})
    except ConfigError as exc:
        _fail(str(exc), 2)


def _open_store(cfg: Config, write: bool, create: bool | None = None) -> Store:
    """The data dir's store; ``create`` (default: ``write``) makes a new one if none."""
    from ..store import Store, StoreLockedError

    if not cfg.db_path.exists() and not (write if create is None else create):
        _fail(f"no oxiedge data in {cfg.data} (start `oxiedge serve` or pass --data)")
    try:
        store = Store.open(cfg.db_path, read_only=not write)
    except StoreLockedError:
        _fail(f"a server holds {cfg.data} but its admin socket {cfg.admin_socket} does not answer")
    except Exception as exc:  # rocksdict reports I/O problems as plain exceptions
        _fail(f"cannot open {cfg.db_path}: {exc}")
    # The brokers' hot records show up as `_mqtt` / `_amqp` documents, as on a live server.
    from ..amqp.views import register_offline_message_view
    from ..mqtt.views import register_views

    register_views(store)
    register_offline_message_view(store)
    return store


def _request(data: Path | None, op: str, args: dict[str, Any],
             offline: Callable[[Any], Any] | None, write: bool = False,
             create: bool | None = None) -> Any:
    """Ask the running server; without one, run ``offline(store)`` on the data dir
    (``write``: opened for writing; ``create``: a missing store is made, default ``write``)."""
    cfg = _config(data)
    try:
        return _call_waiting(cfg.admin_socket, op, args)
    except ServerNotRunning:
        if offline is None:
            _fail(f"no server is running on {cfg.data}: start it with `oxiedge serve` or "
                  "pass --data")
    except AdminError as exc:
        _fail(str(exc), _exit_code(exc))
    except TimeoutError:
        _fail(f"the server on {cfg.data} did not answer within --timeout (busy, or blocked "
              "by a resource alarm: see `oxiedge check alarms`)")
    store = _open_store(cfg, write, create)
    from ..operations import OperationError, jsonable

    try:
        return jsonable(offline(store))  # (an operation's offline form returns its rows)
    except OperationError as exc:  # the offline form of an operation refused
        _fail(str(exc), 2 if exc.kind == "bad_request" else 1)
    except (ValueError, KeyError) as exc:
        _fail(str(exc))
    finally:
        store.close()


#: After this long without an answer, a terminal gets a spinner while the command waits.
SPINNER_AFTER_S = 0.5


def _call_waiting(path: Path, op: str, args: dict[str, Any]) -> Any:
    """``call``, with a spinner on a terminal's stderr while a busy server keeps it waiting
    (the call runs in a thread; the main thread draws)."""
    if not sys.stderr.isatty():
        return call(path, op, args)
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call(path, op, args)
        except BaseException as exc:  # handed to the main thread as it is
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(SPINNER_AFTER_S)
    if worker.is_alive():
        from rich.console import Console

        with Console(stderr=True).status(f"waiting for the server ({op}) ..."):
            worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _exit_code(exc: AdminError) -> int:
    """2 for a malformed request (as typer's usage errors), 1 for any other refusal."""
    return 2 if exc.kind == "bad_request" else 1


def _live(data: Path | None, op: str, args: dict[str, Any]) -> Any:
    """An operation only a running server does (``oxiedge/operations.py``)."""
    return _request(data, op, args, None)


def _print_result(result: Any, as_json: bool, message: str) -> None:
    """A verb's outcome: ``message`` for a person, the result object with ``--json``."""
    if as_json:
        sys.stdout.write(json.dumps(result, ensure_ascii=False, default=str) + "\n")
    else:
        _print_line(message)


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
    from rich.text import Text  # cells are data, never markup (a queue may be named "[/]")

    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(row.get(c))) for c in columns))
    out.print(table)


def _print_line(text: str) -> None:
    """A confirmation (``--quiet`` drops it)."""
    if not Settings.quiet:
        out.print(text, highlight=False, markup=False)


def _print_text(text: str) -> None:
    """Output that is the command's result (``--quiet`` keeps it)."""
    out.print(text, highlight=False, markup=False)


def _verb(result: dict[str, Any]) -> str:
    """How an ``add`` went, from the ``state`` the server or the offline helper returned."""
    return {"added": "added", "updated": "updated"}.get(result.get("state", ""), "already present")



PwFileOpt = Annotated[Path | None, typer.Option("--password-file", help="[env: OXIEDGE_PASSWORD_FILE; default DATA/passwd]")]  # noqa: E501


def _flatten(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, name + "."))
        else:
            rows.append((name, value))
    return rows



def _print_pairs(obj: dict[str, Any], title: str) -> None:
    """A two-column key/value table (narrow terminals stay readable)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_header=False)
    table.add_column("key")
    table.add_column("value", overflow="fold")
    for key, value in _flatten(obj):
        table.add_row(Text(key), Text(_cell(value)))
    out.print(table)


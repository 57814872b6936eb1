"""The MQTT verbs: ``sessions [--offline] [--older-than 7d]``, ``subscriptions``, ``session
delete CLIENT``, ``client kick CLIENT``, ``retained [clear TOPIC | clear --all]``.

Each change is one operation of the running server (``mqtt/operations.py``), answered
once durable; with no server running, the listings, ``session delete`` and ``retained clear``
work on the data dir (``admin/offline.py``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from . import complete
from .base import (
    DataOpt,
    JsonOpt,
    _fail,
    _live,
    _offline,
    _print_result,
    _print_rows,
    _request,
    app,
)
from .documents import offline_view

session_app = typer.Typer(no_args_is_help=True, help="Delete a persistent MQTT session.")
client_app = typer.Typer(no_args_is_help=True, help="Disconnect an MQTT client.")
retained_app = typer.Typer(invoke_without_command=True,
                           help="Retained MQTT messages: list them, or clear them.")
app.add_typer(session_app, name="session")
app.add_typer(client_app, name="client")
app.add_typer(retained_app, name="retained")

_OFFLINE = "oxiedge.admin.offline"  # the verbs on a stopped server's data dir
ClientArg = Annotated[str, typer.Argument(help="the client id",
                                          autocompletion=complete.clients)]


@app.command()
def sessions(
    offline: Annotated[bool, typer.Option("--offline", help="only sessions with no client connected")] = False,  # noqa: E501
    older_than: Annotated[str | None, typer.Option("--older-than", help="only those offline at least this long, e.g. 7d, 12h")] = None,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """MQTT sessions: client, connected, subscriptions, queued, in-flight, dropped, seconds
    until an offline one expires, seconds offline."""
    seconds = None
    if older_than is not None:
        from ..durations import parse_duration

        try:
            seconds = parse_duration(older_than)
        except ValueError as exc:
            _fail(f"--older-than: {exc}", 2)

    def stopped(store: object) -> object:
        if seconds is not None:
            _fail("--older-than needs a running server (how long a session has been "
                  "offline is known only to the server that saw it go)")
        return offline_view("sessions")(store)  # (with no server, all are offline)

    rows = _request(data, "sessions", {"offline": offline, "older_than": seconds}, stopped)
    _print_rows(rows, as_json, "sessions")


@app.command()
def subscriptions(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """MQTT subscriptions: client, topic filter, granted QoS, connected."""
    rows = _request(data, "subscriptions", {}, _offline(_OFFLINE, "subscriptions"))
    _print_rows(rows, as_json, "subscriptions")


@session_app.command("delete")
def session_delete(client: ClientArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a session with its subscriptions and queued messages (a connected client is
    disconnected first); also on a stopped server's data dir."""
    result = _request(data, "session.delete", {"client": client},
                      _offline(_OFFLINE, "delete_session", client),
                      write=True, create=False)
    note = " (its client was disconnected)" if result["was_connected"] else ""
    _print_result(result, as_json, f"session '{client}' deleted: {result['messages']} "
                                   f"messages, {result['subscriptions']} subscriptions{note}")


@client_app.command("kick")
def client_kick(client: ClientArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Disconnect a client (its will is published; a persistent session stays)."""
    result = _live(data, "client.kick", {"client": client})
    _print_result(result, as_json, f"client '{client}' disconnected")


@retained_app.callback()
def retained(
    ctx: typer.Context,
    data: DataOpt = None,
    as_json: JsonOpt = False,
    sys_topics: Annotated[bool, typer.Option(
        "--sys", help="also the broker's own $SYS topics (a running server's)")] = False,
) -> None:
    """Retained MQTT messages (`oxiedge retained clear TOPIC|--all` clears them)."""
    if ctx.invoked_subcommand is None:
        rows = _request(data, "retained", {"sys": sys_topics}, offline_view("retained"))
        _print_rows(rows, as_json, "retained")


@retained_app.command("clear")
def retained_clear(
    topic: Annotated[str | None, typer.Argument(help="the topic (no wildcards)")] = None,
    everything: Annotated[bool, typer.Option("--all", help="clear every retained message")] = False,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Clear a topic's retained message (as an empty retained PUBLISH would, without
    delivering anything), or all of them with --all; also on a stopped server's data dir."""
    if (topic is None) == (not everything):
        _fail("give a TOPIC or --all (not both)", 2)
    result = _request(data, "retained.clear", {"topic": topic, "all": everything},
                      _offline(_OFFLINE, "clear_retained", topic, everything),
                      write=True, create=False)
    _print_result(result, as_json, f"{result['cleared']} retained message(s) cleared")

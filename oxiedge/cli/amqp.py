"""The AMQP verbs: ``queue declare|delete|purge``, ``exchange declare|delete``, ``binding
add|remove``, ``connections``, ``connection close``, ``channels``, ``consumers``,
``publish``, ``get``.

Each is one operation of the running server (``amqp/operations.py``): the broker's own
declaration paths, answered once durable. Names follow rabbitmqadmin and rabbitmqctl.
``queue purge`` and ``queue delete`` also work on a stopped server's data dir
(``admin/offline.py``).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any

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

queue_app = typer.Typer(no_args_is_help=True, help="Declare, delete and purge AMQP queues.")
exchange_app = typer.Typer(no_args_is_help=True, help="Declare and delete AMQP exchanges.")
binding_app = typer.Typer(no_args_is_help=True, help="Add and remove AMQP bindings.")
connection_app = typer.Typer(no_args_is_help=True, help="Close an AMQP connection.")
app.add_typer(queue_app, name="queue")
app.add_typer(exchange_app, name="exchange")
app.add_typer(binding_app, name="binding")
app.add_typer(connection_app, name="connection")

ArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", help="an x-argument KEY=VALUE (repeatable), e.g. x-queue-type=quorum, "
    "x-max-length=1000: integers, true/false and JSON objects are typed, the rest are "
    "strings")]
DurableOpt = Annotated[bool, typer.Option("--durable/--transient",
                                          help="survives a restart")]
AutoDeleteOpt = Annotated[bool, typer.Option("--auto-delete", help="auto-delete")]
_INTEGER = re.compile(r"-?\d+\Z")
_OFFLINE = "oxiedge.admin.offline"  # the verbs on a stopped server's data dir


def parse_arguments(items: list[str] | None) -> dict[str, Any]:
    """``--arg KEY=VALUE`` as the field table a client would send: ``1000`` an integer,
    ``true``/``false`` a boolean, ``{...}``/``[...]`` JSON, anything else a string (as
    RabbitMQ's management UI types them). The broker checks each value as for a client."""
    table: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            _fail(f"--arg {item!r}: expected KEY=VALUE, e.g. x-max-length=1000", 2)
        value: Any = text
        if _INTEGER.match(text):
            value = int(text)
        elif text in ("true", "false"):
            value = text == "true"
        elif text and text[0] in "{[":
            try:
                value = json.loads(text)
            except ValueError as exc:
                _fail(f"--arg {key}: not valid JSON: {exc}", 2)
        table[key] = value
    return table


# -- queues -------------------------------------------------------------------------------

@queue_app.command("declare")
def queue_declare(
    name: Annotated[str, typer.Argument(help="queue name")],
    durable: DurableOpt = True,
    auto_delete: AutoDeleteOpt = False,
    arg: ArgOpt = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare a queue (as a client's queue.declare: same checks, durable record)."""
    args = {"name": name, "durable": durable, "auto_delete": auto_delete,
            "arguments": parse_arguments(arg)}
    result = _live(data, "queue.declare", args)
    state = "declared" if result["created"] else "already declared, same properties"
    _print_result(result, as_json, f"queue '{name}' {state} "
                                   f"({'durable' if result['durable'] else 'transient'})")


@queue_app.command("delete")
def queue_delete(
    name: Annotated[str, typer.Argument(help="queue name", autocompletion=complete.queues)],
    if_unused: Annotated[bool, typer.Option("--if-unused", help="only if it has no consumers")] = False,  # noqa: E501
    if_empty: Annotated[bool, typer.Option("--if-empty", help="only if it has no ready messages")] = False,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a queue with its bindings and messages (its consumers are cancelled); also
    on a stopped server's data dir."""
    result = _request(data, "queue.delete", {"name": name, "if_unused": if_unused,
                                             "if_empty": if_empty},
                      _offline(_OFFLINE, "delete_queue", name, if_unused, if_empty),
                      write=True, create=False)
    _print_result(result, as_json, f"queue '{name}' deleted with {result['messages']} "
                                   "ready messages")


@queue_app.command("purge")
def queue_purge(
    name: Annotated[str, typer.Argument(help="queue name", autocompletion=complete.queues)],
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a queue's ready messages (unacknowledged ones stay); on a stopped server's data
    dir, every stored message of the queue."""
    result = _request(data, "queue.purge", {"name": name},
                      _offline(_OFFLINE, "purge_queue", name),
                      write=True, create=False)
    _print_result(result, as_json, f"queue '{name}' purged: {result['messages']} messages")


# -- exchanges ----------------------------------------------------------------------------

@exchange_app.command("declare")
def exchange_declare(
    name: Annotated[str, typer.Argument(help="exchange name")],
    type: Annotated[str, typer.Option("--type", "-t", help="direct, fanout, topic or headers")] = "direct",  # noqa: E501
    durable: DurableOpt = True,
    auto_delete: AutoDeleteOpt = False,
    internal: Annotated[bool, typer.Option("--internal", help="clients may not publish to it")] = False,  # noqa: E501
    arg: ArgOpt = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare an exchange (as a client's exchange.declare)."""
    args = {"name": name, "type": type, "durable": durable, "auto_delete": auto_delete,
            "internal": internal, "arguments": parse_arguments(arg)}
    result = _live(data, "exchange.declare", args)
    state = "declared" if result["created"] else "already declared, same properties"
    _print_result(result, as_json, f"exchange '{name}' ({result['type']}) {state}")


@exchange_app.command("delete")
def exchange_delete(
    name: Annotated[str, typer.Argument(help="exchange name",
                                        autocompletion=complete.exchanges)],
    if_unused: Annotated[bool, typer.Option("--if-unused", help="only if nothing is bound from it")] = False,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete an exchange and every binding from or to it."""
    result = _live(data, "exchange.delete", {"name": name, "if_unused": if_unused})
    _print_result(result, as_json, f"exchange '{name}' deleted")


# -- bindings -----------------------------------------------------------------------------

SourceArg = Annotated[str, typer.Argument(help="the exchange messages come from",
                                          autocompletion=complete.exchanges)]
DestArg = Annotated[str, typer.Argument(help="the queue (or, with --to-exchange, exchange)",
                                        autocompletion=complete.queues)]
KeyOpt = Annotated[str, typer.Option("--routing-key", "-k", help="routing (binding) key")]
ToExchangeOpt = Annotated[bool, typer.Option(
    "--to-exchange", help="the destination is an exchange (exchange-to-exchange binding)")]


def _binding(op: str, source: str, destination: str, routing_key: str, to_exchange: bool,
             arg: list[str] | None, data: Any) -> dict[str, Any]:
    result: dict[str, Any] = _live(data, op, {
        "source": source, "destination": destination, "routing_key": routing_key,
        "destination_type": "exchange" if to_exchange else "queue",
        "arguments": parse_arguments(arg)})
    return result


@binding_app.command("add")
def binding_add(source: SourceArg, destination: DestArg, routing_key: KeyOpt = "",
                to_exchange: ToExchangeOpt = False, arg: ArgOpt = None,
                data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Bind a queue (or an exchange) to an exchange (headers exchanges: --arg x-match=all)."""
    result = _binding("binding.add", source, destination, routing_key, to_exchange, arg, data)
    state = "bound" if result["changed"] else "already bound"
    _print_result(result, as_json, f"{result['destination_type']} '{destination}' {state} "
                                   f"to exchange '{source}' with key '{routing_key}'")


@binding_app.command("remove")
def binding_remove(source: SourceArg, destination: DestArg, routing_key: KeyOpt = "",
                   to_exchange: ToExchangeOpt = False, arg: ArgOpt = None,
                   data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Remove a binding (the same source, destination, key and arguments it was added with)."""
    result = _binding("binding.remove", source, destination, routing_key, to_exchange, arg,
                      data)
    _print_result(result, as_json, f"{result['destination_type']} '{destination}' unbound "
                                   f"from exchange '{source}' (key '{routing_key}')")


# -- connections, channels, consumers -------------------------------------------------------

@app.command()
def connections(
    interval: Annotated[float, typer.Option("--interval", min=0, max=60, help="seconds over which the rates are measured (0: no rates, one call)")] = 1.0,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """AMQP connections: name (the id `connection close` takes), user, state (running,
    blocking, blocked, closing), channels, consumers, unacked, published and delivered with
    their rates (messages/s over the last --interval)."""
    rows = _live(data, "connections", {})
    if interval > 0:
        import time

        before = {r["name"]: r for r in rows}
        started = time.monotonic()
        time.sleep(interval)
        rows = _live(data, "connections", {})
        rows = [with_rates(r, before.get(r["name"]), time.monotonic() - started)
                for r in rows]
    if not as_json:  # the client's table is in --json (and /api/connections)
        rows = [{k: v for k, v in r.items() if k != "client_properties"} for r in rows]
    _print_rows(rows, as_json, "connections")


def with_rates(row: dict[str, Any], before: dict[str, Any] | None,
               elapsed: float) -> dict[str, Any]:
    """``row`` with ``publish_rate`` after ``published`` and ``deliver_rate`` after
    ``delivered``: messages/s since ``before`` (None for a connection that was not there)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value
        rate = {"published": "publish_rate", "delivered": "deliver_rate"}.get(key)
        if rate is not None:
            out[rate] = None if before is None or elapsed <= 0 else \
                round(max(0, value - before.get(key, 0)) / elapsed, 1)
    return out


@connection_app.command("close")
def connection_close(
    name: Annotated[str, typer.Argument(help="the connection's name (host:port) as `oxiedge connections` lists it", autocompletion=complete.connections)],  # noqa: E501
    reason: Annotated[str, typer.Option("--reason", help="what the client is told")] = "closed by the administrator",  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Close an AMQP connection: the client gets 320 CONNECTION_FORCED with the reason."""
    result = _live(data, "connection.close", {"name": name, "reason": reason})
    _print_result(result, as_json, f"connection {name} closed")


@app.command()
def channels(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """AMQP channels: connection, number, user, consumers, unacked, prefetch, confirm."""
    _print_rows(_live(data, "channels", {}), as_json, "channels")


@app.command()
def consumers(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """AMQP consumers: queue, tag, connection, channel, ack required, prefetch, unacked."""
    _print_rows(_live(data, "consumers", {}), as_json, "consumers")


# -- messages -----------------------------------------------------------------------------

@app.command()
def publish(
    routing_key: Annotated[str, typer.Option("--routing-key", "-k", help="routing key (for the default exchange: the queue's name)")] = "",  # noqa: E501
    exchange: Annotated[str, typer.Option("--exchange", "-e", help="exchange [default: the default exchange]")] = "",  # noqa: E501
    message: Annotated[str | None, typer.Option("-m", "--message", help="the body (text)")] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="send this file's contents")] = None,  # noqa: E501
    stdin: Annotated[bool, typer.Option("-s", "--stdin", help="send all of stdin")] = False,
    transient: Annotated[bool, typer.Option("--transient", help="delivery mode 1 (not persistent)")] = False,  # noqa: E501
    header: Annotated[list[str] | None, typer.Option("--header", help="a header KEY=VALUE (repeatable; typed as --arg)")] = None,  # noqa: E501
    prop: Annotated[list[str] | None, typer.Option("--property", "-p", help="a property NAME=VALUE, e.g. content_type=application/json (repeatable)")] = None,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Publish an AMQP message (as rabbitmqadmin publish): returns once it is on disk, and
    says whether it was routed."""
    given = [x for x in (message is not None, file is not None, stdin) if x]
    if len(given) > 1:
        _fail("give one of -m MESSAGE, -f FILE or -s (stdin)", 2)
    if file is not None:
        try:
            body = file.read_bytes()
        except OSError as exc:
            _fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    else:
        body = sys.stdin.buffer.read() if stdin else (message or "").encode()
    properties: dict[str, Any] = parse_arguments(prop)
    for name in ("content_type", "content_encoding", "correlation_id", "reply_to",
                 "expiration", "message_id", "type", "user_id", "app_id", "cluster_id"):
        if name in properties:  # (short strings even when they look like numbers)
            properties[name] = str(properties[name])
    if header:
        properties["headers"] = parse_arguments(header)
    result = _live(data, "amqp.publish", {
        "exchange": exchange, "routing_key": routing_key, "persistent": not transient,
        "payload": base64.b64encode(body).decode(), "properties": properties})
    where = f"exchange '{exchange}'" if exchange else "the default exchange"
    outcome = "routed" if result["routed"] else "NOT routed (no queue matched)"
    if result["refused"]:
        outcome += "; refused by a full queue (x-overflow=reject-publish)"
    _print_result(result, as_json, f"published {len(body)} bytes to {where} with key "
                                   f"'{routing_key}': {outcome}")


@app.command()
def get(
    queue: Annotated[str, typer.Argument(help="queue name", autocompletion=complete.queues)],
    count: Annotated[int, typer.Option("--count", "-c", min=1, max=10_000, help="how many messages")] = 1,  # noqa: E501
    ack: Annotated[bool, typer.Option("--ack", help="remove them (default: put them back, marked redelivered)")] = False,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show messages from the head of a queue (as rabbitmqadmin get); --ack removes them."""
    rows = _live(data, "amqp.get", {"queue": queue, "count": count, "ack": ack})
    for row in rows:
        raw = base64.b64decode(row.pop("payload"))
        try:
            row["payload"] = raw.decode()
        except UnicodeDecodeError:
            row["payload"], row["payload_encoding"] = base64.b64encode(raw).decode(), "base64"
    _print_rows(rows, as_json, f"messages of {queue}")

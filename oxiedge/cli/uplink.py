"""``oxiedge uplink add|remove|list|status``: store-and-forward to an upstream broker."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from . import complete
from .base import (
    DataOpt,
    JsonOpt,
    _fail,
    _offline,
    _print_line,
    _print_pairs,
    _print_rows,
    _request,
    _verb,
    uplink_app,
)

_UPLINKS = "oxiedge.uplink.manager"
NameArg = Annotated[str, typer.Argument(help="uplink name", autocompletion=complete.uplinks)]


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
    from ..uplink.definitions import parse_definition
    from ..uplink.link import UplinkError

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
def uplink_status(name: Annotated[str | None, typer.Argument(
                      help="one uplink", autocompletion=complete.uplinks)] = None,
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


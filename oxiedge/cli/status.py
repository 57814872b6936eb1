"""``oxiedge status``: one screen in sections (server, listeners, clients, queues, storage,
alarms, uplinks); ``--all`` lists every counter and bound, ``--json`` gives them to
scripts. With no server running it reads the data dir; with neither, it fails."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from ..sizes import format_size
from .base import DataOpt, JsonOpt, _config, _print_pairs, _print_text, _request, app


def _uptime(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours or days else []
    parts += [f"{minutes}m", f"{s}s"] if not days else [f"{minutes}m"]
    return " ".join(parts)


def summary(st: dict[str, Any]) -> list[tuple[str, str]]:
    """``(section, line)`` pairs of the one-screen status, from ``status``'s dictionary."""
    if st.get("server") == "not running":
        quarantined = st.get("store", {}).get("quarantine", {}).get("records", 0)
        return [("server", f"not running (data {st.get('data')})"),
                ("storage", f"{st.get('collections', 0)} collections, {quarantined} "
                            "quarantined records")]
    out = [("server", f"oxiedge {st.get('version')}, pid {st.get('pid')}, up "
                      f"{_uptime(float(st.get('uptime_s') or 0))}, data {st.get('data')}")]
    endpoints = st.get("endpoints") or {}
    out.append(("listeners", ", ".join(f"{k} {v}" for k, v in endpoints.items()) or "none"))
    conns = st.get("connections", {})
    mqtt, amqp = st.get("mqtt"), st.get("amqp")
    clients = [f"{conns.get('open', 0)} open (peak {conns.get('peak', 0)})"]
    if mqtt:
        clients.append(f"MQTT {mqtt.get('connections', 0)} connections, "
                       f"{mqtt.get('sessions', 0)} sessions, {mqtt.get('subscriptions', 0)} "
                       "subscriptions")
    if amqp:
        clients.append(f"AMQP {amqp.get('connections', 0)} connections, "
                       f"{amqp.get('channels', 0)} channels, {amqp.get('consumers', 0)} "
                       "consumers")
    out.append(("clients", "; ".join(clients)))
    queues = []
    if mqtt:
        queues.append(f"MQTT {mqtt.get('queued', 0)} queued, {mqtt.get('inflight', 0)} in "
                      f"flight, {mqtt.get('retained', 0)} retained, {mqtt.get('dropped', 0)} "
                      "dropped")
    if amqp:
        queues.append(f"AMQP {amqp.get('queues', 0)} queues, {amqp.get('ready', 0)} ready, "
                      f"{amqp.get('unacked', 0)} unacked, {amqp.get('dropped', 0)} dropped")
    either = mqtt or amqp
    if either:  # --max-backlog-bytes: every byte queued on disk, MQTT and AMQP together
        held = sum(int(s.get("backlog_bytes") or 0) for s in (mqtt, amqp) if s)
        budget = either.get("max_backlog_bytes")
        limit = "no bound" if budget is None else format_size(int(budget))
        queues.append(f"on disk {format_size(held)} of {limit} backlog budget "
                      f"({either.get('max_backlog_source')})")
    out.append(("queues", "; ".join(queues) or "no broker"))
    store = st.get("store", {})
    q = store.get("quarantine", {})
    out.append(("storage", f"durable writes {store.get('durable_writes')}, "
                           f"{store.get('commit_rounds', 0)} commit rounds, "
                           f"{q.get('records', 0)} quarantined records"))
    alarms = st.get("alarms", {})
    on = [k for k in ("memory", "disk") if alarms.get(f"{k}_alarm")]
    on += list((alarms.get("other_alarms") or {}).values())
    out.append(("alarms", f"{'ON: ' + ', '.join(on) if on else 'none'} (memory "
                          f"{alarms.get('rss_mb')} of {alarms.get('memory_watermark_mb')} MiB, "
                          f"disk free {alarms.get('disk_free_mb')} MiB, limit "
                          f"{alarms.get('disk_free_limit_mb')} MiB)"))
    uplinks = st.get("uplink") or {}
    lines = [f"{name} {u.get('state')}, {u.get('backlog_messages', 0)} waiting, lag "
             f"{u.get('lag_seconds', 0)} s" for name, u in sorted(uplinks.items())]
    out.append(("uplinks", "; ".join(lines) or "none"))
    return out


@app.command()
def status(
    everything: Annotated[bool, typer.Option("--all", help="every counter and bound")] = False,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Health of the running server in sections (or of the data dir); --all for every
    counter and bound."""

    def offline(store: Any) -> dict[str, Any]:
        return {"server": "not running", "data": str(_config(data).data),
                "collections": len(store.list_collections()),
                "store": {"quarantine": store.quarantine_status()}}

    result = _request(data, "status", {}, offline)
    if as_json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
    elif everything:
        _print_pairs(result, "oxiedge status")
    else:
        width = max(len(section) for section, _ in summary(result))
        for section, line in summary(result):
            _print_text(f"{section:<{width}}  {line}")

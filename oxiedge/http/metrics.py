"""``/metrics``: the Prometheus text format (version 0.0.4), sans-IO.

Theory of operation
-------------------
A scrape renders one :class:`Snapshot`: the same ``oxiedge status`` dictionary the admin
socket serves (``admin.server.server_status``), plus a few exact process figures. Nothing is
sampled here and no state is kept, so a scrape costs what ``oxiedge status`` costs (the
brokers' gauges are sums over their queues and sessions; the counters are plain integers).

Two groups of families:

* **RabbitMQ's names and labels** (``rabbitmq_*``) where RabbitMQ has a metric with the same
  meaning, so its Grafana dashboards (RabbitMQ-Overview) work unchanged: every series joins
  on ``rabbitmq_identity_info`` by the scrape's ``instance`` label. AMQP figures are what
  RabbitMQ's aggregated ``rabbitmq_channel_*`` families count; the
  ``rabbitmq_global_messages_*_total`` families carry a ``protocol`` label (``amqp091``,
  ``mqtt311``) as RabbitMQ 3.12+ does. ``rabbitmq_erlang_uptime_seconds`` is the process's
  uptime (there is no Erlang VM).
* **Everything else ``oxiedge status`` counts** (``oxiedge_<section>_<key>``): each
  numeric value of each section; a key listed in :data:`COUNTERS` is a counter (``_total``),
  every other one a gauge. Per-uplink values carry an ``uplink`` label.

``/metrics/per-object`` adds the per-queue families with ``{vhost, queue}`` labels, as
RabbitMQ serves them at the same path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..histogram import Histogram

VHOST = "/"
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")

#: Keys of each ``oxiedge status`` section that only grow (exported as ``..._total``).
COUNTERS: dict[str, frozenset[str]] = {
    "store": frozenset({"commit_rounds", "committed_ops"}),
    "alarms": frozenset({"alarms_fired", "malloc_trims", "blocked_hangups",
                         "blocked_hangups_discarded", "blocked_discarded_bytes"}),
    "connections": frozenset({"accepted", "refused_max_connections", "refused_max_per_source",
                              "admitted_after_wait", "close_lines_suppressed"}),
    "logins": frozenset({"checks", "failures", "delayed", "delay_total_s", "track_evicted"}),
    "permissions": frozenset({"denied_total", "mqtt_publish_denied", "mqtt_subscribe_denied",
                              "mqtt_wills_denied", "mqtt_queued_dropped", "amqp_access_refused",
                              "reloads", "reload_failures"}),
    "mqtt": frozenset({"auth_failures", "blocked", "commit_errors", "connect_timeouts",
                       "connect_too_large", "connections_total", "disconnects_sent",
                       "dropped", "dropped_backlog_bytes", "dropped_qos0",
                       "dropped_queue_bytes", "dropped_too_large", "expired", "messages_in",
                       "messages_out", "messages_in5", "messages_out5",
                       "payload_format_invalid", "protocol_errors", "qos2_ids_forgotten",
                       "retained_refused", "sessions_expired", "sessions_refused",
                       "shared_handed_on", "shared_lost", "shared_undelivered",
                       "subscriptions_refused", "takeovers", "topics_refused", "wills",
                       "wills_skipped", "sys_rounds", "sys_published"}),
    # MQTT over WebSocket (oxiedge/ws/endpoint.py)
    "websocket": frozenset({"upgrades", "refused", "pings", "closed_by_peer",
                            "closed_text_frame", "closed_message_too_big",
                            "closed_protocol_error"}),
    "amqp": frozenset({"route_caches_cleared", "published", "unroutable", "returned", "dropped",
                       "expired", "rejected", "dead_lettered", "dead_letter_dropped",
                       "queues_expired", "alternate_routed", "delivered", "acked", "requeued",
                       "discarded", "confirmed", "nacked_confirms",
                       "exchange_limit_refused", "binding_limit_refused",
                       "arguments_limit_refused", "connections_total", "connections_closed",
                       "connection_errors", "connections_dropped", "channel_errors",
                       "auth_failures", "handshake_timeouts", "preauth_too_large",
                       "messages_too_large", "channel_limit_refused", "queue_limit_refused",
                       "consumer_limit_refused", "queues_declared", "queues_created",
                       "queues_deleted", "delivered_ack", "delivered_noack", "get_ack",
                       "get_noack", "get_empty", "channels_opened", "channels_closed",
                       "stream_appended", "stream_delivered", "stream_retention_removed",
                       "read_back_messages", "expiry_rounds_cut"}),
    "ingest": frozenset({"ingested", "fallback", "failed", "retention_deleted",
                         "finds_by_index", "documents_read"}),
    "mqtt_amqp": frozenset({"mqtt_to_amqp", "amqp_to_mqtt", "skipped_mqtt_topics",
                            "skipped_amqp_keys", "user_properties_dropped"}),
    "hot_loop": frozenset({"served_inline", "busy_polls"}),
    "tls": frozenset({"handshakes", "handshake_failures", "handshake_timeouts",
                      "handshakes_refused", "reloads", "reload_failures"}),
    "uplink": frozenset({"sent", "acked", "returned", "parked", "dropped", "connects",
                         "connect_failures", "received"}),
    "http": frozenset({"connections_total", "requests", "responses_2xx", "responses_4xx",
                       "responses_5xx", "header_too_large", "header_timeouts",
                       "body_too_large", "body_timeouts", "idle_closed",
                       "request_limit_closed", "bad_requests", "auth_failures",
                       "auth_cache_hits", "write_timeouts", "gc_pauses", "gc_pauses_cut",
                       "sessions_opened", "sessions_expired", "sessions_evicted",
                       "sessions_logouts"}),
}
#: Sections whose values are exported under another metric already, or are not figures.
_SKIP_KEYS = frozenset({"pid", "version", "uptime_s", "format_version"})


@dataclass
class Snapshot:
    """What one scrape renders (built by the listener's wiring from the running server)."""

    status: dict[str, Any]
    node: str
    cluster: str
    rss_bytes: int = 0
    memory_limit_bytes: int = 0
    disk_free_bytes: int = 0
    disk_free_limit_bytes: int = 0
    open_fds: int = 0
    max_fds: int = 0
    #: ``(family, help, histogram)``: exported as Prometheus histograms
    histograms: list[tuple[str, str, Histogram]] = field(default_factory=list)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def metric_name(*parts: str) -> str:
    """A valid metric name from free-form parts (anything else becomes ``_``)."""
    return _NAME_BAD.sub("_", "_".join(p for p in parts if p))


class Exposition:
    """Builds the text: one ``# HELP``/``# TYPE`` per family, its samples after it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._families: set[str] = set()

    def family(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[dict[str, str], float]]) -> None:
        if name in self._families:  # a name clash (a status key spelled twice): first wins
            return
        self._families.add(name)
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if labels:
                text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
                self.lines.append(f"{name}{{{text}}} {_number(value)}")
            else:
                self.lines.append(f"{name} {_number(value)}")

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        if name in self._families:
            return
        self._families.add(name)
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for le, count in hist.cumulative():
            self.lines.append(f'{name}_bucket{{le="{le}"}} {count}')
        self.lines.append(f"{name}_sum {_number(hist.sum)}")
        self.lines.append(f"{name}_count {hist.count}")

    def claim(self, name: str) -> None:
        """``name`` was written by other means (a family of its own text)."""
        self._families.add(name)

    def one(self, name: str, kind: str, help_text: str, value: float,
            labels: dict[str, str] | None = None) -> None:
        self.family(name, kind, help_text, [(labels or {}, value)])

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _get(section: dict[str, Any] | None, key: str) -> float:
    value = (section or {}).get(key, 0)
    return value if isinstance(value, int | float) else 0


def _rabbitmq(out: Exposition, snap: Snapshot) -> None:
    s = snap.status
    amqp, mqtt = s.get("amqp") or {}, s.get("mqtt") or {}
    conns, alarms = s.get("connections") or {}, s.get("alarms") or {}
    out.lines.append(identity_family(snap.node, snap.cluster, "default").rstrip("\n"))
    out.claim("rabbitmq_identity_info")
    out.one("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info", 1,
            {"rabbitmq_version": str(s.get("version", "")), "product_name": "oxiedge",
             "product_version": str(s.get("version", "")),
             "prometheus_plugin_version": str(s.get("version", "")),
             "prometheus_client_version": "oxiedge", "erlang_version": "none"})
    out.one("rabbitmq_erlang_uptime_seconds", "gauge",
            "Node uptime (here: the oxiedge process's uptime)", _get(s, "uptime_s"))
    out.one("rabbitmq_process_resident_memory_bytes", "gauge", "Memory used in bytes",
            snap.rss_bytes)
    out.one("rabbitmq_resident_memory_limit_bytes", "gauge",
            "Memory high watermark in bytes", snap.memory_limit_bytes)
    out.one("rabbitmq_disk_space_available_bytes", "gauge", "Disk space available in bytes",
            snap.disk_free_bytes)
    out.one("rabbitmq_disk_space_available_limit_bytes", "gauge",
            "Free disk space low watermark in bytes", snap.disk_free_limit_bytes)
    out.one("rabbitmq_process_open_fds", "gauge", "Open file descriptors", snap.open_fds)
    out.one("rabbitmq_process_max_fds", "gauge", "Open file descriptors limit", snap.max_fds)
    out.one("rabbitmq_process_open_tcp_sockets", "gauge", "Open TCP sockets (client "
            "connections of every listener)", _get(conns, "open"))
    out.one("rabbitmq_process_max_tcp_sockets", "gauge", "Open TCP sockets limit "
            "(--max-connections)", _get(conns, "max_connections"))
    out.one("rabbitmq_alarms_memory_used_watermark", "gauge",
            "is 1 if VM memory watermark alarm is in effect", bool(alarms.get("memory_alarm")))
    out.one("rabbitmq_alarms_free_disk_space_watermark", "gauge",
            "is 1 if free disk space watermark alarm is in effect",
            bool(alarms.get("disk_alarm")))
    out.one("rabbitmq_alarms_file_descriptor_limit", "gauge",
            "is 1 if file descriptor limit alarm is in effect", 0)
    out.one("rabbitmq_connections", "gauge", "Connections currently open (AMQP and MQTT)",
            _get(amqp, "connections") + _get(mqtt, "connections"))
    out.one("rabbitmq_connections_opened_total", "counter", "Total number of connections "
            "opened", _get(amqp, "connections_total") + _get(mqtt, "connections_total"))
    out.one("rabbitmq_connections_closed_total", "counter", "Total number of connections "
            "closed or terminated", max(0, _get(amqp, "connections_total")
                                        + _get(mqtt, "connections_total")
                                        - _get(amqp, "connections") - _get(mqtt, "connections")))
    out.one("rabbitmq_channels", "gauge", "Channels currently open", _get(amqp, "channels"))
    out.one("rabbitmq_consumers", "gauge", "Consumers currently connected",
            _get(amqp, "consumers"))
    out.one("rabbitmq_channel_consumers", "gauge", "Consumers on a channel",
            _get(amqp, "consumers"))
    out.one("rabbitmq_queues", "gauge", "Queues available", _get(amqp, "queues"))
    ready, unacked = _get(amqp, "ready"), _get(amqp, "unacked")
    out.one("rabbitmq_queue_messages_ready", "gauge", "Messages ready to be delivered to "
            "consumers", ready)
    out.one("rabbitmq_queue_messages_unacked", "gauge", "Messages delivered to consumers but "
            "not yet acknowledged", unacked)
    out.one("rabbitmq_queue_messages", "gauge", "Sum of ready and unacknowledged messages - "
            "total queue depth", ready + unacked)
    published, unroutable = _get(amqp, "published"), _get(amqp, "unroutable")
    returned = _get(amqp, "returned")
    for name, help_text, value in (
        ("rabbitmq_channel_messages_published_total", "Total number of messages published "
         "into an exchange on a channel", published),
        ("rabbitmq_channel_messages_confirmed_total", "Total number of messages published "
         "into an exchange and confirmed on the channel", _get(amqp, "confirmed")),
        ("rabbitmq_channel_messages_unroutable_dropped_total", "Total number of messages "
         "published as non-mandatory into an exchange and dropped as unroutable",
         unroutable - returned),
        ("rabbitmq_channel_messages_unroutable_returned_total", "Total number of messages "
         "published as mandatory into an exchange and returned to the publisher as "
         "unroutable", returned),
        ("rabbitmq_channel_messages_delivered_total", "Total number of messages delivered to "
         "consumers in automatic acknowledgement mode", _get(amqp, "delivered_noack")),
        ("rabbitmq_channel_messages_delivered_ack_total", "Total number of messages delivered "
         "to consumers in manual acknowledgement mode", _get(amqp, "delivered_ack")),
        ("rabbitmq_channel_get_total", "Total number of messages fetched with basic.get in "
         "automatic acknowledgement mode", _get(amqp, "get_noack")),
        ("rabbitmq_channel_get_ack_total", "Total number of messages fetched with basic.get "
         "in manual acknowledgement mode", _get(amqp, "get_ack")),
        ("rabbitmq_channel_get_empty_total", "Total number of times basic.get operations "
         "fetched no message", _get(amqp, "get_empty")),
        ("rabbitmq_channels_opened_total", "Total number of channels opened",
         _get(amqp, "channels_opened")),
        ("rabbitmq_channels_closed_total", "Total number of channels closed",
         _get(amqp, "channels_closed")),
        ("rabbitmq_queues_declared_total", "Total number of queues declared",
         _get(amqp, "queues_declared")),
        ("rabbitmq_queues_created_total", "Total number of queues created",
         _get(amqp, "queues_created")),
        ("rabbitmq_queues_deleted_total", "Total number of queues deleted",
         _get(amqp, "queues_deleted")),
        ("rabbitmq_channel_messages_redelivered_total", "Total number of messages requeued "
         "for redelivery", _get(amqp, "requeued")),
        ("rabbitmq_channel_messages_acked_total", "Total number of messages acknowledged by "
         "consumers", _get(amqp, "acked")),
        ("rabbitmq_queue_messages_published_total", "Total number of messages routed to "
         "queues", published - unroutable),
    ):
        out.one(name, "counter", help_text, value)
    out.one("rabbitmq_channel_messages_unconfirmed", "gauge", "Published but not yet "
            "confirmed messages", _get(amqp, "unconfirmed"))
    _global(out, amqp, mqtt)


def _global(out: Exposition, amqp: dict[str, Any], mqtt: dict[str, Any]) -> None:
    amqp_routed = _get(amqp, "published") - _get(amqp, "unroutable")
    rows: dict[str, list[tuple[str, float]]] = {
        "received": [("amqp091", _get(amqp, "published")),
                     ("mqtt311", _get(mqtt, "messages_in") - _get(mqtt, "messages_in5")),
                     ("mqtt50", _get(mqtt, "messages_in5"))],
        "routed": [("amqp091", amqp_routed)],
        "confirmed": [("amqp091", _get(amqp, "confirmed"))],
        "delivered": [("amqp091", _get(amqp, "delivered")),
                      ("mqtt311", _get(mqtt, "messages_out") - _get(mqtt, "messages_out5")),
                      ("mqtt50", _get(mqtt, "messages_out5"))],
        "acknowledged": [("amqp091", _get(amqp, "acked"))],
        "redelivered": [("amqp091", _get(amqp, "requeued"))],
        "unroutable_dropped": [("amqp091", _get(amqp, "unroutable") - _get(amqp, "returned"))],
        "unroutable_returned": [("amqp091", _get(amqp, "returned"))],
        "dead_lettered_confirmed": [("amqp091", _get(amqp, "dead_lettered"))],
    }
    helps = {
        "received": "Total number of messages received from publishers",
        "routed": "Total number of messages routed to queues or streams",
        "confirmed": "Total number of messages confirmed to publishers",
        "delivered": "Total number of messages delivered to consumers",
        "acknowledged": "Total number of messages acknowledged by consumers",
        "redelivered": "Total number of messages requeued for redelivery to consumers",
        "unroutable_dropped": "Total number of messages published as non-mandatory into an "
                              "exchange and dropped as unroutable",
        "unroutable_returned": "Total number of messages published as mandatory into an "
                               "exchange and returned to the publisher as unroutable",
        "dead_lettered_confirmed": "Total number of messages dead-lettered",
    }
    for what, samples in rows.items():
        out.family(f"rabbitmq_global_messages_{what}_total", "counter", helps[what],
                   [({"protocol": proto}, value) for proto, value in samples])


#: Unit suffixes of status keys -> (base-unit suffix, factor): Prometheus names carry base
#: units spelled out (promtool refuses ``_s``, ``_us``, ``_mb``).
_UNITS = (("_s", "_seconds", 1.0), ("_ms", "_seconds", 1e-3), ("_us", "_seconds", 1e-6))


def _family(section: str, key: str, value: float, counter: bool) -> tuple[str, float]:
    """The family name and value of one status figure."""
    base, unit = key, ""
    for suffix, spelled, factor in _UNITS:
        if base.endswith(suffix):
            base, unit, value = base.removesuffix(suffix), spelled, value * factor
            break
    base = base.removesuffix("_total") + unit
    return metric_name("oxiedge", section, base, "total" if counter else ""), value


def _oxiedge(out: Exposition, status: dict[str, Any]) -> None:
    for section, values in status.items():
        if not isinstance(values, dict):
            continue
        if section == "uplink":
            _uplinks(out, values)
            continue
        counters = COUNTERS.get(section, frozenset())
        for key, value in values.items():
            if key in _SKIP_KEYS or key.endswith("_mb") or not isinstance(value, int | float):
                continue  # (the *_mb figures are exported in bytes as rabbitmq_* families)
            counter = key in counters
            name, value = _family(section, key, value, counter)
            out.one(name, "counter" if counter else "gauge",
                    f"oxiedge status {section}.{key}", value)


def _uplinks(out: Exposition, uplinks: dict[str, Any]) -> None:
    keys: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, values in uplinks.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, int | float):
                keys.setdefault(key, []).append(({"uplink": str(name)}, value))
        state = values.get("state")
        if isinstance(state, str):
            keys.setdefault("state_info", []).append(({"uplink": str(name), "state": state}, 1))
    counters = COUNTERS["uplink"]
    for key, samples in sorted(keys.items()):
        counter = key in counters
        name, factor = _family("uplink", key, 1.0, counter)
        out.family(name, "counter" if counter else "gauge",
                   f"oxiedge status uplink.NAME.{key}",
                   [(labels, value * factor) for labels, value in samples])


def render(snap: Snapshot) -> str:
    """The text of ``/metrics``."""
    out = Exposition()
    _rabbitmq(out, snap)
    for name, help_text, hist in snap.histograms:
        out.histogram(name, help_text, hist)
    _oxiedge(out, snap.status)
    return out.text()


#: (family, type, help, queue-row key; ``messages`` is ready + unacked)
_PER_QUEUE: tuple[tuple[str, str, str, str], ...] = (
    ("rabbitmq_queue_messages_ready", "gauge", "Messages ready to be delivered to consumers",
     "ready"),
    ("rabbitmq_queue_messages_unacked", "gauge", "Messages delivered to consumers but not "
     "yet acknowledged", "unacked"),
    ("rabbitmq_queue_messages", "gauge", "Sum of ready and unacknowledged messages - total "
     "queue depth", "messages"),
    ("rabbitmq_queue_consumers", "gauge", "Consumers on a queue", "consumers"),
    ("rabbitmq_queue_messages_published_total", "counter", "Total number of messages "
     "published to queues", "published"),
    ("rabbitmq_queue_messages_delivered_total", "counter", "Total number of messages "
     "delivered from a queue (oxiedge: every delivery and basic.get)", "delivered"),
)


def identity_family(node: str, cluster: str, endpoint: str) -> str:
    out = Exposition()
    out.one("rabbitmq_identity_info", "gauge", "RabbitMQ node & cluster identity info", 1,
            {"rabbitmq_node": node, "rabbitmq_cluster": cluster,
             "rabbitmq_cluster_permanent_id": cluster, "rabbitmq_endpoint": endpoint})
    return out.text()


def render_per_object(queues: list[dict[str, Any]], chunk: int = 250) -> Iterator[str]:
    """The per-queue families of ``/metrics/per-object``, ``chunk`` queues per piece (the
    caller yields to the event loop between pieces)."""
    vhost = _escape(VHOST)
    for name, kind, help_text, key in _PER_QUEUE:
        yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
        for start in range(0, len(queues), chunk):
            lines = []
            for row in queues[start:start + chunk]:
                if key == "messages":
                    value = _get(row, "ready") + _get(row, "unacked")
                else:
                    value = _get(row, key)
                queue = _escape(str(row.get("name", "")))
                lines.append(f'{name}{{vhost="{vhost}",queue="{queue}"}} {_number(value)}\n')
            yield "".join(lines)

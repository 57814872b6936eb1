"""The Prometheus text of /metrics, rendered from status dictionaries (sans-IO) and checked
by Debian's ``promtool check metrics`` where it is installed (the `prometheus` package)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from oxiedge.histogram import Histogram
from oxiedge.http.metrics import COUNTERS, Snapshot, metric_name, render, render_per_object
from oxiedge.mqtt.bounds import Stats

STATUS = {
    "version": "0.1.0", "pid": 1, "uptime_s": 12.5, "data": "/d",
    "endpoints": {"mqtt": "127.0.0.1:1883"},
    "store": {"commit_rounds": 4, "committed_ops": 9, "durable_writes": "ok",
              "format_version": 2, "quarantine": {"records": 0}},
    "alarms": {"blocked": False, "memory_alarm": False, "disk_alarm": True, "rss_mb": 44.7,
               "memory_limit_source": "RAM", "alarms_fired": 1},
    "connections": {"open": 3, "peak": 4, "accepted": 10, "max_connections": 1000,
                    "refused_max_connections": 0},
    "logins": {"mode": "x", "users": 1, "checks": 5, "failures": 2, "delay_total_s": 0.3},
    "mqtt": {"connections": 2, "connections_total": 7, "messages_in": 100,
             "messages_out": 90, "messages_in5": 30, "messages_out5": 20, "sessions": 4,
             "retained": 1, "persist": True},
    "amqp": {"connections": 1, "channels": 2, "queues": 3, "consumers": 1, "ready": 5,
             "unacked": 2, "published": 50, "unroutable": 6, "returned": 2, "confirmed": 40,
             "delivered": 30, "acked": 28, "requeued": 1, "connections_total": 4,
             "delivered_ack": 20, "delivered_noack": 6, "get_ack": 3, "get_noack": 1,
             "get_empty": 7, "unconfirmed": 2, "channels_opened": 9, "channels_closed": 7,
             "queues_declared": 12, "queues_created": 5, "queues_deleted": 2},
    "uplink": {"central": {"state": "connected", "backlog_messages": 3, "lag_seconds": 0.5,
                           "sent": 10}},
    "hot_loop": {"parked": 1, "served_inline": 99},
}


def _histogram() -> Histogram:
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.002, 0.5):
        h.observe(v)
    return h


QUEUES = [{"name": 'odd "name"\\x', "ready": 2, "unacked": 1, "consumers": 1}]


def _snapshot() -> Snapshot:
    return Snapshot(STATUS, "oxiedge@pi", "pi", rss_bytes=46_000_000,
                    memory_limit_bytes=150_000_000, disk_free_bytes=10**9,
                    disk_free_limit_bytes=200_000_000, open_fds=20, max_fds=1024,
                    histograms=[("oxiedge_store_commit_round_seconds", "rounds", _histogram())])


def _value(text: str, series: str) -> float:
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    assert m, f"no {series} in:\n{text}"
    return float(m.group(1))


def test_rabbitmq_families_carry_rabbitmq_meaning() -> None:
    text = render(_snapshot())
    assert 'rabbitmq_identity_info{rabbitmq_node="oxiedge@pi",rabbitmq_cluster="pi"' in text
    assert _value(text, "rabbitmq_erlang_uptime_seconds") == 12.5
    assert _value(text, "rabbitmq_process_resident_memory_bytes") == 46_000_000
    assert _value(text, "rabbitmq_resident_memory_limit_bytes") == 150_000_000
    assert _value(text, "rabbitmq_disk_space_available_bytes") == 10**9
    assert _value(text, "rabbitmq_alarms_free_disk_space_watermark") == 1
    assert _value(text, "rabbitmq_connections") == 3  # MQTT + AMQP
    assert _value(text, "rabbitmq_queue_messages") == 7
    assert _value(text, "rabbitmq_channel_messages_unroutable_dropped_total") == 4
    assert _value(text, "rabbitmq_channel_messages_unroutable_returned_total") == 2
    assert _value(text, "rabbitmq_queue_messages_published_total") == 44
    assert _value(text, 'rabbitmq_global_messages_received_total{protocol="amqp091"}') == 50
    assert _value(text, 'rabbitmq_global_messages_received_total{protocol="mqtt311"}') == 70
    assert _value(text, 'rabbitmq_global_messages_received_total{protocol="mqtt50"}') == 30
    assert _value(text, 'rabbitmq_global_messages_delivered_total{protocol="mqtt311"}') == 70
    assert _value(text, 'rabbitmq_global_messages_delivered_total{protocol="mqtt50"}') == 20
    for family, value in (("rabbitmq_channel_messages_delivered_total", 6),
                          ("rabbitmq_channel_messages_delivered_ack_total", 20),
                          ("rabbitmq_channel_get_total", 1), ("rabbitmq_channel_get_ack_total", 3),
                          ("rabbitmq_channel_get_empty_total", 7),
                          ("rabbitmq_channel_messages_unconfirmed", 2),
                          ("rabbitmq_channels_opened_total", 9),
                          ("rabbitmq_channels_closed_total", 7),
                          ("rabbitmq_queues_declared_total", 12),
                          ("rabbitmq_queues_created_total", 5),
                          ("rabbitmq_queues_deleted_total", 2)):
        assert _value(text, family) == value, family


def test_histograms_are_cumulative_with_sum_and_count() -> None:
    text = render(_snapshot())
    assert "# TYPE oxiedge_store_commit_round_seconds histogram" in text
    name = "oxiedge_store_commit_round_seconds"
    assert [_value(text, f'{name}_bucket{{le="{le}"}}') for le in ("0.001", "0.01", "0.1",
                                                                   "+Inf")] == [2, 3, 3, 4]
    assert _value(text, f"{name}_count") == 4
    assert _value(text, f"{name}_sum") == pytest.approx(0.5035)
    with pytest.raises(ValueError):
        Histogram((1, 1))


def test_every_status_figure_is_an_oxiedge_family() -> None:
    text = render(_snapshot())
    assert _value(text, "oxiedge_mqtt_sessions") == 4
    assert _value(text, "oxiedge_mqtt_messages_in_total") == 100
    assert _value(text, "oxiedge_store_commit_rounds_total") == 4
    assert _value(text, "oxiedge_logins_delay_seconds_total") == 0.3
    assert _value(text, "oxiedge_hot_loop_served_inline_total") == 99
    assert _value(text, 'oxiedge_uplink_backlog_messages{uplink="central"}') == 3
    assert _value(text, 'oxiedge_uplink_sent_total{uplink="central"}') == 10
    assert _value(text, 'oxiedge_uplink_lag_seconds{uplink="central"}') == 0.5
    assert _value(text, 'oxiedge_uplink_state_info{uplink="central",state="connected"}') == 1
    assert "oxiedge_store_format_version" not in text  # not a figure
    assert "_mb" not in text  # exported in bytes
    assert "oxiedge_alarms_memory_limit_source" not in text  # a string


def test_every_mqtt_counter_is_a_total() -> None:
    # Every figure of the MQTT broker's Stats only grows, except the two gauges: each one
    # is a Prometheus counter (``_total``: rate() then works), the shared-subscription
    # and MQTT 5 ones included.
    gauges = {"connections", "backlog_bytes"}
    assert set(Stats.__slots__) - gauges <= COUNTERS["mqtt"]
    stats = Stats()
    stats.shared_handed_on, stats.shared_lost, stats.shared_undelivered = 3, 2, 1
    text = render(Snapshot(status={"mqtt": stats.as_dict()}, node="n", cluster="c"))
    assert _value(text, "oxiedge_mqtt_shared_handed_on_total") == 3
    assert _value(text, "oxiedge_mqtt_shared_lost_total") == 2
    assert _value(text, "oxiedge_mqtt_shared_undelivered_total") == 1
    assert "# TYPE oxiedge_mqtt_shared_lost_total counter" in text
    assert "# TYPE oxiedge_mqtt_backlog_bytes gauge" in text


def test_each_family_once_with_help_and_type() -> None:
    text = render(_snapshot())
    names = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert len(names) == len(set(names))
    assert len(re.findall(r"^# HELP ", text, re.M)) == len(names)
    for name in names:
        if re.search(rf"^# TYPE {name} counter$", text, re.M):
            assert name.endswith("_total"), name


def test_per_object_escapes_queue_names_and_comes_in_pieces() -> None:
    queues = [{"name": f"q{i}", "ready": i} for i in range(1200)]
    pieces = list(render_per_object(queues, chunk=500))
    assert len(pieces) == 6 * (1 + 3)  # six families, a header and three slices each
    text = "".join(render_per_object(QUEUES))
    assert 'rabbitmq_queue_messages{vhost="/",queue="odd \\"name\\"\\\\x"} 3' in text


def test_metric_name_replaces_bad_characters() -> None:
    assert metric_name("oxiedge", "uplink", "lag-s.x") == "oxiedge_uplink_lag_s_x"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus)")
def test_promtool_accepts_the_text() -> None:
    snap = _snapshot()
    for text in (render(snap), "".join(render_per_object(QUEUES))):
        res = subprocess.run(["promtool", "check", "metrics"], input=text,
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stdout + res.stderr


#: Every metric family RabbitMQ's "RabbitMQ-Overview" Grafana dashboard queries
#: (rabbitmq-server, deps/rabbitmq_prometheus/docker/grafana/dashboards/RabbitMQ-Overview.json).
DASHBOARD = {
    "rabbitmq_identity_info", "rabbitmq_build_info", "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked", "rabbitmq_queues", "rabbitmq_channels",
    "rabbitmq_channel_consumers", "rabbitmq_connections", "rabbitmq_resident_memory_limit_bytes",
    "rabbitmq_process_resident_memory_bytes", "rabbitmq_disk_space_available_bytes",
    "rabbitmq_process_max_fds", "rabbitmq_process_open_fds", "rabbitmq_process_max_tcp_sockets",
    "rabbitmq_process_open_tcp_sockets", "rabbitmq_channel_messages_published_total",
    "rabbitmq_channel_messages_confirmed_total", "rabbitmq_queue_messages_published_total",
    "rabbitmq_channel_messages_unconfirmed", "rabbitmq_channel_messages_unroutable_dropped_total",
    "rabbitmq_channel_messages_unroutable_returned_total",
    "rabbitmq_channel_messages_delivered_total", "rabbitmq_channel_messages_delivered_ack_total",
    "rabbitmq_channel_messages_redelivered_total", "rabbitmq_channel_messages_acked_total",
    "rabbitmq_channel_get_total", "rabbitmq_channel_get_ack_total",
    "rabbitmq_channel_get_empty_total", "rabbitmq_queues_declared_total",
    "rabbitmq_queues_created_total", "rabbitmq_queues_deleted_total",
    "rabbitmq_channels_opened_total", "rabbitmq_channels_closed_total",
    "rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total",
}


def test_every_dashboard_family_is_exported_or_listed_missing_in_docs() -> None:
    from pathlib import Path

    exported = set(re.findall(r"^# TYPE (\S+) ", render(_snapshot()), re.M))
    docs = (Path(__file__).resolve().parents[2] / "docs/http.md").read_text()
    missing_section = docs.split("Missing, compared with RabbitMQ-Overview's queries:", 1)[1]
    missing_section = missing_section.split("\n\n", 1)[0]
    listed = set(re.findall(r"`(rabbitmq_\w+)`", missing_section))
    assert DASHBOARD - exported == listed, (
        f"docs/http.md's missing list should be exactly {sorted(DASHBOARD - exported)}")

"""The rate ring and the chart on their own (sans-IO: status dicts in, numbers and SVG out),
and the uplinks page's backlog chart against a real server whose uplink cannot connect."""

from __future__ import annotations

import time
from typing import Any

from oxiedge.console.html import chart, esc
from oxiedge.http.history import INTERVAL_S, SAMPLES, SECTIONS, RateHistory
from tests.conftest import ServerProcess


def _status(mqtt_in: int, backlog: int = 0) -> dict[str, Any]:
    return {"mqtt": {"messages_in": mqtt_in, "messages_out": 0},
            "amqp": {"published": 0, "delivered": 0},
            "uplink": {"central": {"backlog_messages": backlog, "lag_seconds": 1.5}}}


def test_rates_are_differences_over_time_and_the_ring_is_bounded() -> None:
    ring = RateHistory()
    ring.sample(100.0, _status(0))
    ring.sample(101.0, _status(50))  # closer than MIN_INTERVAL_S: not a sample
    assert ring.latest()["MQTT in"] == 0.0
    ring.sample(105.0, _status(50, backlog=7))
    assert ring.latest()["MQTT in"] == 10.0
    ring.sample(110.0, _status(40))  # a counter that went down is no negative rate
    assert ring.latest()["MQTT in"] == 0.0
    assert dict(ring.rates())["MQTT in"] == [(-5.0, 10.0), (0.0, 0.0)]
    assert dict(ring.uplink_series(0))["central"] == [(-10.0, 0.0), (-5.0, 7.0), (0.0, 0.0)]
    for i in range(SAMPLES * 2):
        ring.sample(200.0 + 5 * i, _status(i))
    assert len(ring.samples) == SAMPLES and len(ring.uplinks) == SAMPLES
    assert SECTIONS == ("mqtt", "amqp", "uplink")  # all the listener's sampler reads


def test_chart_is_svg_with_escaped_labels() -> None:
    svg = chart([("<b>x</b>", [(-10.0, 1.0), (0.0, 3.0)])], title="<t>", x_from=-60)
    assert svg.count("<polyline") == 1 and "<b>" not in svg and "&lt;b&gt;" in svg
    assert "no data yet" in chart([("x", [])], title="empty")
    assert esc('"\'<>&') == "&quot;&#x27;&lt;&gt;&amp;"


def test_uplinks_page_charts_the_backlog(http_server: ServerProcess, client_for: Any) -> None:
    # Port 1 on loopback refuses: the uplink stays unconnected and its outbox fills.
    http_server.cli("uplink", "add", "central", "mqtt://127.0.0.1:1", "--out", "sensors/#")
    for i in range(3):
        http_server.cli("pub", "-t", "sensors/a", "-m", str(i), "-q", "1")
    c = client_for(http_server)
    page = c.get("/uplinks").body.decode()
    assert "central" in page and "Backlog" in page and "Lag" in page
    assert '<td data-label="Backlog" class=num>3</td>' in page


def test_the_ring_fills_from_start_up(http_server: ServerProcess, client_for: Any) -> None:
    """The listener samples every 5 s whether or not a page is open: the first page a
    browser opens already has a chart (two samples make the first rate)."""
    time.sleep(2 * INTERVAL_S + 1)  # no request in between: only the broker samples
    first = client_for(http_server).get("/?fragment=1").body.decode()
    assert "<polyline" in first and "no data yet" not in first

"""The hostile suite's own instruments work against an idle server (a baseline for the
others: if these fail, the abuse tests' measurements mean nothing)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, server_status


def test_innocent_client_and_rss_sampler_on_an_idle_server(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    srv = hostile_server()
    assert srv.mqtt_port is not None
    with innocent(srv.mqtt_port, interval=0.02) as client:
        time.sleep(1.0)
    stats = client.stop()
    stats.assert_responsive(limit_ms=100)
    assert stats.count >= 20, stats
    sampler = srv.rss  # type: ignore[attr-defined]
    time.sleep(0.2)
    assert 5 << 20 < sampler.peak <= sampler.hwm() + (1 << 20)
    assert server_status(srv)["alarms"]["memory_watermark_mb"] > 0

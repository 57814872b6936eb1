"""Two start-up and overview details against a real ``oxiedge serve``: the log names the
console's URL, and the overview shows the commit round's latency (p50 / p99 in ms, estimated
from the store's histogram) once rounds have run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oxiedge.histogram import ROUND_SECONDS, Histogram
from tests.conftest import ServerProcess
from tests.tls.conftest import make_pki


def test_startup_logs_the_console_url(http_server: ServerProcess) -> None:
    lines = http_server.log_lines
    url = f"console on http://127.0.0.1:{http_server.http_port}/"
    assert any(line.endswith(url) for line in lines), lines
    # next to the listening line, which stays as it was (tests parse it)
    listening = next(i for i, line in enumerate(lines)
                     if f"HTTP listening on 127.0.0.1:{http_server.http_port}" in line)
    console = next(i for i, line in enumerate(lines) if line.endswith(url))
    assert 0 < console - listening <= 2


def test_startup_logs_the_https_console_url(start_server: Callable[..., ServerProcess],
                                            tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    srv = start_server("--http-port", "0", "--http-tls-port", "0", "--tls-cert", str(pki.cert),
                       "--tls-key", str(pki.key))
    for url in (f"console on http://127.0.0.1:{srv.http_port}/",
                f"console on https://127.0.0.1:{srv.http_tls_port}/"):
        assert any(line.endswith(url) for line in srv.log_lines), srv.log_lines


def test_overview_shows_commit_round_latency(http_server: ServerProcess, client_for: Any
                                             ) -> None:
    http_server.cli("queue", "declare", "work")
    for i in range(5):
        http_server.cli("publish", "-k", "work", "-m", f"job {i}")
    html = client_for(http_server).get("/").body.decode()
    card = re.search(r'id="stat-commit-latency"><span>([^<]*)</span><b>([^<]*)</b>', html)
    assert card, "no commit latency card on the overview"
    assert card.group(1) == "Commit round p50 / p99 (ms)"
    p50, p99 = (float(x) for x in card.group(2).split(" / "))
    # sane: positive, ordered, within the histogram's finite range (10 s)
    assert 0 < p50 <= p99 <= ROUND_SECONDS[-1] * 1000
    status = json.loads(http_server.cli("status", "--json").stdout)
    assert set(status["store"]["commit_round_ms"]) == {"p50", "p99"}


def test_quantile_estimate_from_buckets() -> None:
    hist = Histogram((1.0, 2.0, 4.0))
    assert hist.quantile(0.5) is None
    for value in (0.5, 1.5, 1.5, 3.0):
        hist.observe(value)
    assert hist.quantile(0.25) == 1.0  # the whole first bucket
    assert hist.quantile(0.5) == 1.5  # half-way through the second
    assert hist.quantile(1.0) == 4.0
    hist.observe(100.0)  # beyond the last bound: the estimate stops at it
    assert hist.quantile(1.0) == 4.0

"""A real Prometheus (Debian's ``prometheus`` package) scrapes a real oxiedge and answers
RabbitMQ-Overview's kind of query - the join on ``rabbitmq_identity_info`` - with data."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus (Debian package) not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        return list(json.loads(r.read())["data"]["result"])


def test_prometheus_scrapes_and_joins_on_identity(http_server: ServerProcess,
                                                  tmp_path: Path) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                             http_server.amqp_port))
    ch = conn.channel()
    ch.queue_declare("scraped")
    for _ in range(4):
        ch.basic_publish("", "scraped", b"x")
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: oxiedge\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{http_server.http_port}']\n")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    expr = ('sum(rabbitmq_queue_messages_ready * on(instance) group_left(rabbitmq_cluster) '
            'rabbitmq_identity_info)')
    try:
        deadline, result = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            try:
                result = _query(port, expr)
            except OSError:
                result = []
            if result:
                break
            time.sleep(0.5)
        assert result, "Prometheus never had the joined series"
        assert float(result[0]["value"][1]) == 4
        up = _query(port, 'up{job="oxiedge"}')
        assert float(up[0]["value"][1]) == 1
        uptime = _query(port, "rabbitmq_erlang_uptime_seconds")
        assert float(uptime[0]["value"][1]) > 0
    finally:
        proc.terminate()
        proc.wait(20)
        conn.close()

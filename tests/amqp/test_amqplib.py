"""amqplib (Node.js) closes cleanly with publishes still queued (issue 18).

amqplib queues ``sendToQueue`` frames per channel and may write its ``connection.close``
ahead of them; a broker that closes its socket right after close-ok makes the kernel reset
the connection, the client never reads close-ok and the application hangs.  amqplib is
installed with npm into a cache directory (``OXIEDGE_NPM_CACHE``, default
``/tmp/oxiedge-npm``); the tests skip when node/npm are missing or the install fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.amqp.conftest import params
from tests.conftest import ServerProcess

AMQPLIB = "2.3.1"
SCRIPT = Path(__file__).with_name("amqplib_close.js")
CACHE = Path(os.environ.get("OXIEDGE_NPM_CACHE", "/tmp/oxiedge-npm"))


@pytest.fixture(scope="session")
def amqplib_path() -> Path:
    """NODE_PATH of an npm-installed amqplib (installed once, reused across runs)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the amqplib tests")
    prefix = CACHE / f"amqplib-{AMQPLIB}"
    modules = prefix / "node_modules"
    if not (modules / "amqplib" / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                              str(prefix), f"amqplib@{AMQPLIB}"],
                             capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            pytest.skip(f"npm install amqplib@{AMQPLIB} failed: {res.stderr[-500:]}")
    return modules


def run_amqplib(modules: Path, port: int, count: int, mode: str = "exclusive",
                timeout: float = 60) -> dict[str, Any]:
    res = subprocess.run(["node", str(SCRIPT), str(port), str(count), mode],
                         capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, NODE_PATH=str(modules)))
    assert res.stdout.strip(), res.stderr
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    out["returncode"] = res.returncode
    return out


def amqp_status(srv: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = ServerProcess(tmp_path_factory.mktemp("amqplib") / "data", ("--mqtt-port", "off"),
                        None).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("count", [1, 10, 100, 500, 1000, 2046, 10_000])
def test_close_with_pending_publishes(amqplib_path: Path, shared: ServerProcess,
                                      count: int) -> None:
    out = run_amqplib(amqplib_path, shared.amqp_port or 0, count)
    assert out["closed"] and out["errors"] == [] and out["returncode"] == 0, out


@pytest.mark.slow
def test_close_with_100k_pending_publishes(amqplib_path: Path, shared: ServerProcess) -> None:
    out = run_amqplib(amqplib_path, shared.amqp_port or 0, 100_000, timeout=120)
    assert out["closed"] and out["errors"] == [] and out["returncode"] == 0, out


def test_close_is_clean_and_what_arrived_is_durable(amqplib_path: Path,
                                                    start_server: Any) -> None:
    """3000 persistent publishes to a durable queue without confirms, then channel.close
    and connection.close at once: both complete, no connection counts as dropped or
    errored, and every publish (all arrived before the channel's close) survives a SIGKILL
    right after the close: close-ok is sent only once they are on disk."""
    srv = start_server("--mqtt-port", "off")
    out = run_amqplib(amqplib_path, srv.amqp_port, 3000, "durable:js.pending")
    assert out["closed"] and out["errors"] == [], out
    status = amqp_status(srv)
    published = status["published"]
    assert published == 3000
    assert status["connections_dropped"] == 0 and status["connection_errors"] == 0, status
    assert status["connections_closed"] >= 1
    srv.kill()
    srv.start()
    conn = pika.BlockingConnection(params(srv.amqp_port))
    ch = conn.channel()
    depth = ch.queue_declare("js.pending", passive=True).method.message_count
    conn.close()
    assert depth == published

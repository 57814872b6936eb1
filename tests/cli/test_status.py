"""``oxiedge status``: one screen in sections by default, every counter with --all, the
data dir when no server runs, an error when there is neither."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ServerProcess, run_cli


def test_sections_all_and_offline(server: ServerProcess) -> None:
    server.cli("queue", "declare", "jobs")
    server.cli("limits", "--disk-free-limit", "1000TB")
    lines = server.cli("status").stdout.splitlines()
    sections = [line.split()[0] for line in lines]
    assert sections == ["server", "listeners", "clients", "queues", "storage", "alarms",
                        "uplinks"]
    text = "\n".join(lines)
    assert f"mqtt 127.0.0.1:{server.mqtt_port}" in text and "AMQP 1 queues" in text
    assert "alarms     ON: disk" in text and "durable writes ok" in text
    server.cli("limits", "--disk-free-limit", "200MB")  # 200 * 10^6 bytes, shown in MiB
    assert "limit 190.7 MiB)" in " ".join(server.cli("status").stdout.split())
    everything = server.cli("status", "--all").stdout
    assert "mqtt.queue_limit" in everything and "amqp.max_queues" in everything
    server.stop()
    offline = server.cli("status").stdout
    assert "not running" in offline and "collections" in offline


def test_neither_server_nor_data(tmp_path: Path) -> None:
    res = run_cli(tmp_path / "none", "status")
    assert res.returncode == 1 and "no oxiedge data" in res.stderr


def test_timeout_and_quiet_on_every_command(server: ServerProcess) -> None:
    import os
    import signal

    assert server.cli("--quiet", "queue", "declare", "q").stdout == ""
    assert "q" in server.cli("--quiet", "queues").stdout  # a listing is the result
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        res = server.cli("--timeout", "1", "queues", check=False)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert res.returncode == 1 and "did not answer within --timeout" in " ".join(
        res.stderr.split())

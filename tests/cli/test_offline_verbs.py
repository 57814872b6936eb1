"""The verbs that work on a stopped server's data dir (``queue purge|delete``, ``session
delete``, ``retained clear``, the listings): the same answers as a running server, the
changes still there when it starts again, and a clear refusal while a server holds the
data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.test_mqtt_verbs import _client, _until
from tests.conftest import ServerProcess


def _rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def _refused(server: ServerProcess, *args: str, code: int = 1) -> str:
    res = server.cli(*args, check=False)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    return " ".join(res.stderr.split())


def _fill(server: ServerProcess) -> None:
    server.cli("exchange", "declare", "events", "--type", "topic")
    for name in ("jobs", "keep"):
        server.cli("queue", "declare", name)
        server.cli("binding", "add", "events", name, "-k", "job.#")
    for i in range(3):
        server.cli("publish", "-e", "events", "-k", "job.x", "-m", f"m{i}")
    dev = _client(server, "dev1", clean=False)
    dev.subscribe("cmd/#", qos=1)
    _until(lambda: _rows(server.cli("subscriptions", "--json").stdout) != [])
    dev.disconnect()
    dev.loop_stop()
    _until(lambda: _rows(server.cli("sessions", "--offline", "--json").stdout) != [])
    for i in range(2):
        server.cli("pub", "-t", "cmd/go", "-m", f"{i}", "-q", "1")
    for topic in ("state/a", "state/b"):
        server.cli("pub", "-t", topic, "-m", "on", "-q", "1", "-r")


def test_verbs_on_a_stopped_data_dir(server: ServerProcess) -> None:
    _fill(server)
    server.stop()
    queues = {r["name"]: r for r in _rows(server.cli("queues", "--json").stdout)}
    assert queues["jobs"]["ready"] == 3 and queues["keep"]["ready"] == 3
    assert _rows(server.cli("subscriptions", "--json").stdout) == [
        {"client": "dev1", "filter": "cmd/#", "qos": 1, "connected": False}]

    assert json.loads(server.cli("queue", "purge", "jobs", "--json").stdout) == {
        "name": "jobs", "messages": 3}
    assert "PRECONDITION_FAILED - queue 'keep' in vhost '/' is not empty" in _refused(
        server, "queue", "delete", "keep", "--if-empty")
    assert json.loads(server.cli("queue", "delete", "keep", "--json").stdout) == {
        "name": "keep", "messages": 3}
    assert "NOT_FOUND - no queue 'keep' in vhost '/'" in _refused(server, "queue", "purge",
                                                                  "keep")
    assert [b["queue"] for b in _rows(server.cli("bindings", "--json").stdout)
            if b["exchange"] == "events"] == ["jobs"]

    res = json.loads(server.cli("session", "delete", "dev1", "--json").stdout)
    assert res == {"client": "dev1", "messages": 2, "subscriptions": 1, "was_connected": False}
    assert "no MQTT session of client 'dev1'" in _refused(server, "session", "delete", "dev1")

    assert json.loads(server.cli("retained", "clear", "state/a", "--json").stdout) == {
        "cleared": 1, "topics": ["state/a"]}
    assert "no retained message on topic 'state/a'" in _refused(server, "retained", "clear",
                                                                "state/a")
    assert "not a topic name" in _refused(server, "retained", "clear", "state/#", code=2)
    assert json.loads(server.cli("retained", "clear", "--all", "--json").stdout) == {
        "cleared": 1, "topics": ["state/b"]}

    server.start()  # what the stopped data dir was told is what the server finds
    assert {r["name"]: r["ready"] for r in _rows(server.cli("queues", "--json").stdout)} == {
        "jobs": 0}
    assert _rows(server.cli("sessions", "--json").stdout) == []
    assert [r for r in _rows(server.cli("retained", "--json").stdout)
            if not r["topic"].startswith("$SYS/")] == []


def test_a_server_holding_the_data_dir_is_not_written_behind_its_back(
        server: ServerProcess) -> None:
    server.cli("queue", "declare", "jobs")
    server.admin_socket.unlink()  # the server runs, but nothing answers on its socket
    message = _refused(server, "queue", "purge", "jobs")
    assert "a server holds" in message and "admin socket" in message
    assert "a server holds" in _refused(server, "retained", "clear", "--all")


def test_without_a_data_dir(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    res = run_cli(tmp_path / "none", "queue", "purge", "q")
    assert res.returncode == 1 and "no oxiedge data in" in res.stderr
    assert not (tmp_path / "none").exists()  # nothing created by a refused verb

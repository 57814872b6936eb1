"""``oxiedge definitions export|import`` against real servers: a device's definitions moved
to a fresh data dir give the same document, an import twice changes nothing, --dry-run
changes nothing, a wrong field is refused whole, uplink passwords never appear, and export
reads a stopped server's data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess, clean_env

# A test here runs a dozen or more CLI processes; at load average 18 each takes seconds.
pytestmark = pytest.mark.timeout(600)

SECRET = "s3cr3t-pw"


def _cli(data: Path, *args: str, env: dict[str, str] | None = None,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    full = {**clean_env(), "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "oxiedge", *args, "--data", str(data)],
                          capture_output=True, text=True, env=full, input=input, timeout=120)


def _ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, (res.stdout, res.stderr)
    return res.stdout


def _populate(server: ServerProcess) -> None:
    server.cli("user", "add", "alice", "--password-stdin", "--tags", "administrator",
               input="pw\n")
    server.cli("permissions", "set", "alice", ".*", ".*", "^q")
    server.cli("acl", "add", "read", "sensors/#", "--user", "alice")
    server.cli("acl", "add", "readwrite", "dev/%c/#", "--pattern")
    server.cli("exchange", "declare", "events", "--type", "topic")
    server.cli("queue", "declare", "jobs", "--arg", "x-max-length=1000")
    server.cli("binding", "add", "events", "jobs", "-k", "job.*")
    server.cli("ingest", "add", "sensors/#:readings", "--max-docs", "500")
    server.cli("index", "add", "readings", "value")
    server.cli("uplink", "add", "central", f"amqp://edge:{SECRET}@127.0.0.1:1/%2F",
               "--out", "sensors/#")


def test_export_import_round_trip(start_server: Callable[..., ServerProcess],
                                  tmp_path: Path) -> None:
    one = start_server(data=tmp_path / "one")
    _populate(one)
    text = _ok(one.cli("definitions", "export"))
    assert SECRET not in text
    doc = json.loads(text)
    assert [q["name"] for q in doc["queues"]] == ["jobs"]
    assert doc["queues"][0]["arguments"] == {"x-max-length": 1000}
    assert doc["bindings"] == [{"source": "events", "vhost": "/", "destination": "jobs",
                                "destination_type": "queue", "routing_key": "job.*",
                                "arguments": {}}]
    ox = doc["oxiedge"]
    assert ox["ingest"] == [{"filter": "sensors/#", "collection": "readings", "max_docs": 500}]
    assert ox["indexes"] == [{"collection": "readings", "field": "value"}]
    assert ox["acl"]["users"] == {"alice": [["read", "sensors/#"]]}
    assert ox["uplinks"][0]["urls"] == [
        "amqp://edge:${OXIEDGE_SECRET_UPLINK_CENTRAL}@127.0.0.1:1/%2F"]
    assert doc["users"][0]["name"] == "alice" and doc["users"][0]["tags"] == ["administrator"]
    path = tmp_path / "defs.json"
    path.write_text(text)

    two = start_server(data=tmp_path / "two")
    # Without the secret: refused whole, naming the field; nothing imported.
    res = _cli(two.data, "definitions", "import", str(path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "oxiedge.uplinks[0].urls: secret OXIEDGE_SECRET_UPLINK_CENTRAL" in \
        " ".join(res.stderr.split())
    assert json.loads(_ok(two.cli("queues", "--json")) or "null") is None

    env = {"OXIEDGE_SECRET_UPLINK_CENTRAL": SECRET}
    dry = _ok(_cli(two.data, "definitions", "import", str(path), "--dry-run", "--json",
                   env=env))
    planned = json.loads(dry)
    assert planned["dry_run"] is True and planned["created"] >= 10
    assert _ok(two.cli("exchanges", "--json")).count('"events"') == 0  # nothing applied

    done = json.loads(_ok(_cli(two.data, "definitions", "import", str(path), "--json",
                               env=env)))
    assert done["created"] == planned["created"] and done["skipped_users"] == []
    assert json.loads(_ok(two.cli("definitions", "export"))) == doc  # the same document
    uplink = json.loads(_ok(two.cli("find", "_config", '{"_kind": "uplink"}', "--json")))
    assert uplink["urls"] == ["amqp://edge:***@127.0.0.1:1"]

    again = json.loads(_ok(_cli(two.data, "definitions", "import", str(path), "--json")))
    assert (again["created"], again["updated"]) == (0, 0)  # idempotent (secret not needed)

    # The stored password is the real one: export from a stopped server, with the secret
    # in the uplink's stored URL (read offline through the same reader).
    two.stop()
    offline = json.loads(_ok(_cli(two.data, "definitions", "export")))
    assert offline == doc


def test_a_wrong_field_is_refused_whole(server: ServerProcess, tmp_path: Path) -> None:
    doc: dict[str, Any] = {
        "exchanges": [{"name": "x", "vhost": "/", "type": "topic", "durable": True}],
        "queues": [{"name": "a", "vhost": "/", "durable": True},
                   {"name": "b", "vhost": "/", "durable": "yes"}],
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    res = server.cli("definitions", "import", str(path), check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "queues[1].durable: must be true or false, not 'yes'" in " ".join(res.stderr.split())
    assert _ok(server.cli("queues", "--json")) == ""
    doc["queues"][1] = {"name": "b", "arguments": {"x-max-length": -1}}
    doc["bindings"] = [{"source": "x", "destination": "nowhere", "destination_type": "queue"}]
    path.write_text(json.dumps(doc))
    res = server.cli("definitions", "import", str(path), check=False)
    assert "queues[1].arguments: " in res.stderr and res.returncode == 2
    doc["queues"][1] = {"name": "b"}
    path.write_text(json.dumps(doc))
    res = server.cli("definitions", "import", str(path), check=False)
    assert "bindings[0].destination: no queue 'nowhere'" in " ".join(res.stderr.split())
    assert _ok(server.cli("queues", "--json")) == ""
    path.write_text("{not json")
    res = server.cli("definitions", "import", str(path), check=False)
    assert res.returncode == 2 and "is not JSON" in res.stderr
    path.write_text(json.dumps({"queues": [{"name": f"q{i:07d}" + "x" * 200}
                                           for i in range(6000)]}))
    res = server.cli("definitions", "import", str(path), check=False)
    assert res.returncode == 2 and "POST /api/definitions" in " ".join(res.stderr.split())


def test_a_conflicting_queue_is_refused_before_anything_changes(server: ServerProcess,
                                                                tmp_path: Path) -> None:
    server.cli("queue", "declare", "jobs")
    doc = {"exchanges": [{"name": "x", "type": "fanout"}],
           "queues": [{"name": "jobs", "arguments": {"x-max-length": 5}}]}
    path = tmp_path / "defs.json"
    path.write_text(json.dumps(doc))
    res = server.cli("definitions", "import", str(path), check=False)
    assert res.returncode == 1
    assert "queues[0]: queue 'jobs' exists with other properties" in " ".join(res.stderr.split())
    assert '"x"' not in _ok(server.cli("exchanges", "--json"))


def test_export_to_a_file_and_without_a_server(tmp_path: Path) -> None:
    data = tmp_path / "none"
    res = _cli(data, "definitions", "export")
    assert res.returncode == 1 and "no oxiedge data" in res.stderr
    assert os.path.exists(data) is False


def test_import_streams_progress_events(server: ServerProcess) -> None:
    from oxiedge.admin.client import call_stream

    doc = {"exchanges": [{"name": f"x{i}", "type": "fanout"} for i in range(3)],
           "queues": [{"name": "q0"}], "bindings": [
               {"source": "x0", "destination": "q0", "destination_type": "queue"}]}
    events: list[Any] = []
    result = call_stream(server.admin_socket, "definitions.import",
                         {"document": doc, "progress": True}, events.append, timeout=60)
    assert [e["done"] for e in events] == [1, 2, 3, 4, 5]
    assert {e["total"] for e in events} == {5}
    assert events[-1] == {"done": 5, "total": 5, "section": "bindings", "name": "x0 -> q0"}
    assert result["created"] == 5 and result["exchanges"] == 3


#: The listings the done-when compares: a definitions export from one data dir imported
#: into an empty one gives the same rows.
LISTINGS = (("queues",), ("exchanges",), ("bindings",), ("ingest", "list"), ("index", "list"),
            ("uplink", "list"), ("user", "list"), ("permissions", "list"), ("acl", "list"))


def _listings(data: Path) -> dict[str, list[Any]]:
    out = {}
    for cmd in LISTINGS:
        text = _ok(_cli(data, *cmd, "--json"))
        out[" ".join(cmd)] = sorted((json.loads(line) for line in text.splitlines()
                                     if line.strip()), key=json.dumps)
    return out


def test_offline_import_into_an_empty_data_dir(start_server: Callable[..., ServerProcess],
                                               tmp_path: Path) -> None:
    """No server on either side: export a stopped device's data dir, import it into an
    empty one with the same code as the server's import, and every listing matches."""
    one = start_server(data=tmp_path / "one")
    _populate(one)
    one.stop()
    path = tmp_path / "defs.json"
    _ok(_cli(one.data, "definitions", "export", str(path)))
    want = _listings(one.data)
    assert want["queues"] and want["bindings"] and want["uplink list"]

    two = tmp_path / "two"
    env = {"OXIEDGE_SECRET_UPLINK_CENTRAL": SECRET}
    # A dry run before there is any data dir plans against an empty one and makes nothing.
    first = json.loads(_ok(_cli(two, "definitions", "import", str(path), "--dry-run",
                                "--json", env=env)))
    assert first["dry_run"] is True and first["created"] >= 10 and not two.exists()
    bad = json.loads(path.read_text())
    bad["queues"][0]["durable"] = "yes"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = _cli(two, "definitions", "import", str(tmp_path / "bad.json"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "queues[0].durable: must be true or false, not 'yes'" in " ".join(res.stderr.split())
    assert not (two / "passwd").exists()  # nothing half-imported

    dry = json.loads(_ok(_cli(two, "definitions", "import", str(path), "--dry-run", "--json",
                              env=env)))
    assert dry["dry_run"] is True and dry["created"] == first["created"]
    done = json.loads(_ok(_cli(two, "definitions", "import", str(path), "--json", env=env)))
    assert done["created"] == dry["created"] and done["skipped_users"] == []
    assert _listings(two) == want
    assert json.loads(_ok(_cli(two, "definitions", "export"))) == json.loads(path.read_text())
    again = json.loads(_ok(_cli(two, "definitions", "import", str(path), "--json")))
    assert (again["created"], again["updated"]) == (0, 0)
    # A server started on it serves the same, and the user logs in with its password.
    served = start_server(data=two)
    assert _listings(two) == want
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", served.amqp_port, credentials=pika.PlainCredentials("alice", "pw")))
    assert conn.channel().queue_declare("jobs", passive=True).method.message_count == 0
    conn.close()

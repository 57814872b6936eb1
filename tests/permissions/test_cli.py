"""`oxiedge permissions|acl|user` offline and on a running server; Mosquitto import."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from oxiedge.admin.client import call
from oxiedge.admin.protocol import AdminError
from tests.conftest import ServerProcess, run_cli
from tests.permissions.conftest import Client

Start = Callable[..., ServerProcess]


def _rows(res: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_offline_edits_and_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    res = run_cli(data, "user", "add", "alice", "--password-stdin", "--tags", "administrator",
                  input="pw-of-alice\n")
    assert res.returncode == 0, res.stderr
    run_cli(data, "user", "add", "bob", "--password-stdin", input="pw-of-bob\n")
    assert _rows(run_cli(data, "user", "list", "--json")) == [
        {"user": "alice", "tags": "administrator"}, {"user": "bob", "tags": "none"}]
    assert run_cli(data, "user", "add", "x", "--password-stdin", "--tags", "root",
                   input="p\n").returncode == 2
    assert run_cli(data, "permissions", "set", "bob", "^q$", "(", ".*").returncode == 2
    assert run_cli(data, "acl", "add", "maybe", "a/b", "--user", "bob").returncode == 2
    assert run_cli(data, "acl", "add", "read", "a/#/b", "--user", "bob").returncode == 2
    assert run_cli(data, "acl", "add", "read", "a/b").returncode == 2  # for whom?
    assert run_cli(data, "permissions", "set", "bob", "^q$", "^q$", ".*").returncode == 0
    assert run_cli(data, "permissions", "set-topic", "bob", "amq.topic", "^a", "^b"
                   ).returncode == 0
    assert _rows(run_cli(data, "permissions", "list", "--json")) == [
        {"user": "bob", "vhost": "/", "exchange": "", "configure": "^q$", "write": "^q$",
         "read": ".*"},
        {"user": "bob", "vhost": "/", "exchange": "amq.topic", "configure": "", "write": "^a",
         "read": "^b"}]
    assert run_cli(data, "acl", "add", "read", "a/#", "--user", "bob").returncode == 0
    assert run_cli(data, "acl", "add", "readwrite", "d/%c/#", "--pattern").returncode == 0
    assert _rows(run_cli(data, "acl", "list", "--json")) == [
        {"for": "user bob", "access": "read", "topic": "a/#"},
        {"for": "(pattern)", "access": "readwrite", "topic": "d/%c/#"}]
    assert run_cli(data, "acl", "remove", "read", "x", "--user", "bob").returncode == 1
    assert run_cli(data, "permissions", "clear", "bob").returncode == 0
    assert run_cli(data, "permissions", "clear", "bob").returncode == 1
    assert run_cli(data, "user", "remove", "bob").returncode == 0  # rules go with the user
    doc = json.loads((data / "permissions.json").read_text())
    assert "bob" not in doc["users"] and doc["users"]["alice"] == {"tags": ["administrator"]}
    (data / "permissions.json").write_text("{broken")
    res = run_cli(data, "acl", "list")
    assert res.returncode == 1 and "permissions.json" in res.stderr


def test_live_changes_reach_connected_clients(start_server: Start, tmp_path: Path) -> None:
    server = start_server()
    server.cli("user", "add", "alice", "--password-stdin", input="pw-of-alice\n")
    server.cli("user", "add", "bob", "--password-stdin", input="pw-of-bob\n")
    alice = Client(server.mqtt_port, "alice", "a1")
    try:
        assert alice.subscribe("b/#") == [1]  # no rules: everything allowed
        server.cli("acl", "add", "read", "a/#", "--user", "alice")
        assert alice.subscribe("b/#", "a/+") == [0x80, 1]  # same connection, new rule
        server.cli("acl", "add", "read", "b/#", "--user", "alice")
        assert alice.subscribe("b/#") == [1]
        server.cli("acl", "remove", "read", "b/#", "--user", "alice")
        server.cli("acl", "remove", "read", "a/#", "--user", "alice")
        assert alice.subscribe("c/#") == [1]  # no line left: unrestricted again
        server.cli("acl", "default", "deny")
        assert alice.subscribe("c/#") == [0x80]
        status = json.loads(server.cli("status", "--json").stdout)["permissions"]
        assert status["default"]["mqtt"] == "deny" and status["reloads"] == 5
        # a hand edit: `permissions reload` applies it; a broken file is refused, rules stay
        path = server.data / "permissions.json"
        doc = json.loads(path.read_text())
        doc["users"]["alice"] = {"acl": [["read", "c/#"]]}
        path.write_text(json.dumps(doc))
        assert "rules on" in server.cli("permissions", "reload").stdout
        assert alice.subscribe("c/#", "d/#") == [1, 0x80]
        # the admin operation itself: the server (owner of the file) makes the change
        change = {"for": "user", "user": "alice", "access": "read", "topic": "e/#"}
        reply = call(server.admin_socket, "permissions.apply", {"op": "acl_add", "args": change})
        assert reply["message"] == "acl: read e/# added"
        assert alice.subscribe("e/#") == [1]
        with pytest.raises(AdminError, match="whole last level"):
            call(server.admin_socket, "permissions.apply",
                 {"op": "acl_add", "args": {**change, "topic": "e/#/x"}})
        assert ["read", "e/#"] in json.loads(path.read_text())["users"]["alice"]["acl"]
        path.write_text("{broken")
        res = server.cli("permissions", "reload", check=False)
        assert res.returncode == 1 and "permissions.json" in res.stderr
        assert alice.subscribe("c/#") == [1]
    finally:
        alice.close()


def test_import_from_mosquitto(start_server: Start, tmp_path: Path) -> None:
    passwd, acl = tmp_path / "mosquitto.passwd", tmp_path / "mosquitto.acl"
    try:
        subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwd), "roger", "rabbit"],
                       check=True, capture_output=True, timeout=30)
        subprocess.run(["mosquitto_passwd", "-b", str(passwd), "sue", "pw-of-sue"],
                       check=True, capture_output=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("mosquitto_passwd is not installed")
    acl.write_text("user roger\ntopic readwrite plant/#\ntopic deny plant/vault\n"
                   "pattern read clients/%c/#\n")
    data = tmp_path / "data"
    res = run_cli(data, "user", "import-mosquitto", "--passwd", str(passwd), "--acl", str(acl))
    assert res.returncode == 0, res.stderr
    assert "imported 2 users" in res.stdout
    server = start_server(data=data)
    roger = Client(server.mqtt_port, "roger", "r1", password="rabbit")  # the $7$ hash, as is
    try:
        assert roger.subscribe("plant/+", "plant/vault", "other/#", "clients/r1/#") == [
            1, 0x80, 0x80, 1]
    finally:
        roger.close()
    # sue has a password but no acl line: Mosquitto's acl_file rule, everything refused
    sue = Client(server.mqtt_port, "sue", "s1")
    try:
        assert sue.subscribe("plant/#") == [0x80]
    finally:
        sue.close()
    Client(server.mqtt_port, "roger", "r2", password="wrong", refused=True)

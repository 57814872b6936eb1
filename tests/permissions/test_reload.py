"""SIGHUP re-reads the password file and DATA/permissions.json (edited by hand), logs what
changed, and keeps the users and rules in force when a file is broken."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

from oxiedge.access.rules import validate
from oxiedge.auth import hash_password, read_user_file, write_user_file
from tests.conftest import ServerProcess
from tests.permissions.conftest import PASSWORD, Client, rules

Serve = Callable[..., ServerProcess]


def _hangup(server: ServerProcess, expect: str) -> str:
    """SIGHUP, then the next log line starting with ``expect`` (earlier ones are ignored)."""
    assert server.proc is not None
    seen = len(server.log_lines)
    server.proc.send_signal(signal.SIGHUP)
    server.wait_for_line("received SIGHUP: reloading")
    server.wait_for_line(expect)
    return next(ln for ln in server.log_lines[seen:] if ln.startswith(expect))


def test_sighup_reloads_users_and_permissions(serve_with: Serve) -> None:
    server = serve_with(["alice"], rules({"alice": {"acl": [["readwrite", "a/#"]]}}))
    port = server.mqtt_port
    alice = Client(port, "alice", "a1")
    try:
        assert alice.subscribe("a/x", "b/x") == [1, 0x80]
        # The operator edits both files by hand: a new user, a wider rule, a pattern line.
        users = read_user_file(server.data / "passwd")
        users["bob"] = hash_password(PASSWORD + "bob", 1000)
        write_user_file(server.data / "passwd", users)
        doc = rules({"alice": {"acl": [["readwrite", "a/#"], ["read", "b/#"]]}},
                    patterns=[["readwrite", "devices/%c/#"]])
        (server.data / "permissions.json").write_text(json.dumps(validate(doc)))
        line = _hangup(server, "permissions reloaded: ")
        assert "users with changed rules: alice" in line and "pattern lines 0 -> 1" in line
        assert "added bob" in server.wait_for_line("users reloaded: ")
        # The same connection sees the new rules at its next check; bob may log in now.
        assert alice.subscribe("b/x") == [1]
        bob = Client(port, "bob", "b1")
        try:
            assert bob.subscribe("devices/b1/in", "a/x") == [1, 0x80]
        finally:
            bob.close()
        # A broken permissions file: refused, logged, the rules in force stay.
        (server.data / "permissions.json").write_text('{"users": {"alice": {"acl": [["rw"')
        line = _hangup(server, "permissions not reloaded")
        assert "the previous rules stay" in line
        assert alice.subscribe("b/y", "c/x") == [1, 0x80]
        status = json.loads(server.cli("status", "--json").stdout)["permissions"]
        assert status["reloads"] >= 1 and status["patterns"] == 1
        assert status["reload_failures"] == 1
        assert "permissions.json" in status["last_reload_error"]
        # b/x (alice, before the reload), a/x (bob), c/x (alice): three filters refused.
        assert status["mqtt_subscribe_denied"] == 3 and status["denied_total"] == 3
        assert status["anonymous_lines"] == 0
        assert server.proc is not None and server.proc.poll() is None
    finally:
        alice.close()

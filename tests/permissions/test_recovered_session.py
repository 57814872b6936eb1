"""A persistent session recovered after a SIGKILL knows its user: what is published while
its client is still offline follows that user's read rules (deny lines, ``%u`` patterns)
at once, instead of being queued on disk and dropped only when the client reconnects."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import ServerProcess
from tests.permissions.conftest import Client, rules

Serve = Callable[..., ServerProcess]

ACL = rules({"alice": {"acl": [["read", "sensors/#"], ["deny", "sensors/secret/#"]]},
             "pub": {"acl": [["write", "#"]]}},
            patterns=[["read", "users/%u/#"]])


def _find(server: ServerProcess, kind: str) -> list[dict[str, object]]:
    out = server.cli("find", "_mqtt", json.dumps({"_kind": kind}), "--json").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _dropped(server: ServerProcess) -> int:
    status = json.loads(server.cli("status", "--json").stdout)["permissions"]
    return int(status["mqtt_queued_dropped"])


def test_offline_deliveries_of_a_recovered_session_follow_its_users_rules(
        serve_with: Serve) -> None:
    server = serve_with(["alice", "pub"], ACL)
    alice = Client(server.mqtt_port, "alice", "alice-1", clean=False)
    assert alice.subscribe("sensors/#", "users/alice/#") == [1, 1]
    alice.close()
    server.kill()  # the session now exists only on disk
    server.start()
    assert server.line("MQTT persistence on - recovered 1 sessions") is not None
    assert [(d["client"], d["user"]) for d in _find(server, "session")] == [("alice-1", "alice")]
    pub = Client(server.mqtt_port, "pub", "pub-1")
    try:
        for topic in ("sensors/a", "sensors/secret/key", "users/alice/in", "users/bob/in"):
            pub.publish(topic, topic.encode(), 1)
    finally:
        pub.close()
    # Only what alice may read was queued (and written) for her offline session.
    assert sorted(str(d["topic"]) for d in _find(server, "msg")) == ["sensors/a",
                                                                     "users/alice/in"]
    server.kill()
    server.start()
    alice = Client(server.mqtt_port, "alice", "alice-1", clean=False)
    try:
        got = sorted((t, p) for t, p, _r in alice.topics())
        assert got == [("sensors/a", b"sensors/a"), ("users/alice/in", b"users/alice/in")]
    finally:
        alice.close()
    # Nothing had to be dropped at the reconnect: it never reached her queue.
    assert _dropped(server) == 0


def test_a_take_over_by_another_user_is_recorded(serve_with: Serve) -> None:
    """The session record follows the user of the client attached last, so after a restart
    the session reads with that user's rules."""
    doc = rules({"alice": {"acl": [["read", "sensors/#"]]}, "bob": {"acl": [["read", "cmd/#"]]},
                 "pub": {"acl": [["write", "#"]]}})
    server = serve_with(["alice", "bob", "pub"], doc)
    alice = Client(server.mqtt_port, "alice", "shared", clean=False)
    assert alice.subscribe("sensors/#") == [1]
    alice.close()
    bob = Client(server.mqtt_port, "bob", "shared", clean=False)
    assert bob.subscribe("cmd/#") == [1]
    bob.close()
    server.kill()
    server.start()
    assert [d["user"] for d in _find(server, "session")] == ["bob"]
    pub = Client(server.mqtt_port, "pub", "pub-1")
    try:
        pub.publish("sensors/a", b"for alice", 1)
        pub.publish("cmd/x", b"for bob", 1)
    finally:
        pub.close()
    assert [d["topic"] for d in _find(server, "msg")] == ["cmd/x"]

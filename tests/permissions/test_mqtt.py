"""MQTT topic ACLs against a real server with paho: every rule allowed and denied."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import ServerProcess
from tests.permissions.conftest import Client, rules

Serve = Callable[..., ServerProcess]

ACL = rules({
    "alice": {"acl": [["readwrite", "sensors/#"], ["deny", "sensors/secret/#"],
                      ["write", "cmd/+"]]},
    "bob": {"acl": [["read", "cmd/#"], ["read", "sensors/#"], ["deny", "sensors/private"]]},
    "ops": {"acl": [["read", "devices/+/lwt"], ["read", "devices/+/state"]]},
}, patterns=[["readwrite", "devices/%c/#"], ["read", "users/%u/#"]])


def _status(server: ServerProcess) -> dict[str, int]:
    return dict(json.loads(server.cli("status", "--json").stdout)["permissions"])


def test_subscribe_publish_and_retained_follow_the_acl(serve_with: Serve) -> None:
    server = serve_with(["alice", "bob", "ops", "carol"], ACL)
    port = server.mqtt_port
    alice, bob = Client(port, "alice", "a1"), Client(port, "bob", "b1")
    try:
        # One SUBSCRIBE, mixed: each denied filter gets 0x80 in its own position.
        assert alice.subscribe("sensors/+", "cmd/+", "#", "sensors/secret/x", "users/alice/in"
                               ) == [1, 0x80, 0x80, 0x80, 1]
        # Like paho's interop test_subscribe_failure: a denied filter alone gets 0x80.
        assert bob.subscribe("test/nosubscribe") == [0x80]
        assert bob.subscribe("cmd/#", "sensors/#") == [1, 1]
        # Retained messages before bob subscribes again: the denied one never reaches him.
        alice.publish("sensors/t1", b"21.5", 1, retain=True)
        alice.publish("sensors/private", b"pin", 1, retain=True)
        alice.publish("cmd/valve", b"open", 1)  # write-only for alice: allowed
        alice.publish("sensors/secret/key", b"k", 1)  # denied: PUBACKed, dropped
        alice.publish("sensors/secret/key", b"k2", 2)  # denied at QoS 2: the flow completes
        alice.publish("users/alice/in", b"x", 1)  # pattern read-only: denied
        got = bob.topics()
        assert ("cmd/valve", b"open", False) in got
        assert ("sensors/t1", b"21.5", False) in got
        assert all(t != "sensors/private" and not t.startswith("sensors/secret")
                   for t, _p, _r in got), got
        assert {t for t, _p, _r in alice.topics(0.2)} == {"sensors/t1", "sensors/private"}
        bob.publish("sensors/from-bob", b"x", 1)  # bob may only read: dropped
        assert alice.topics(0.5) == []
        retained = Client(port, "bob", "b2")
        try:
            assert retained.subscribe("sensors/#") == [1]
            assert retained.topics() == [("sensors/t1", b"21.5", True)]
        finally:
            retained.close()
        counters = _status(server)
        assert counters["mqtt_publish_denied"] >= 4
        assert counters["mqtt_subscribe_denied"] == 4
    finally:
        alice.close()
        bob.close()


def test_patterns_and_wills(serve_with: Serve) -> None:
    server = serve_with(["alice", "bob", "ops", "carol"], ACL)
    port = server.mqtt_port
    ops = Client(port, "ops", "ops1")
    try:
        assert ops.subscribe("devices/+/lwt", "devices/#") == [1, 0x80]
        carol = Client(port, "carol", "dev7")
        assert carol.subscribe("devices/dev7/#", "devices/dev8/#") == [1, 0x80]
        carol.publish("devices/dev7/lwt", b"own topic", 1)
        carol.publish("devices/dev8/lwt", b"someone else's", 1)
        carol.close()
        assert ops.topics() == [("devices/dev7/lwt", b"own topic", False)]
        # A will goes out only if its user may write its topic.
        good = Client(port, "carol", "dev9", will=("devices/dev9/lwt", b"dev9 gone"))
        bad = Client(port, "carol", "dev10", will=("devices/dev9/lwt", b"forged"))
        good.drop()
        bad.drop()
        assert ops.topics(1.5) == [("devices/dev9/lwt", b"dev9 gone", False)]
        assert _status(server)["mqtt_wills_denied"] == 1
    finally:
        ops.close()


def test_anonymous_lines_and_no_rules(serve_with: Serve, start_server: Callable[..., ServerProcess],
                                      tmp_path: object) -> None:
    server = serve_with([], rules(anonymous_acl=[["read", "public/#"], ["write", "inbox"]]))
    anon = Client(server.mqtt_port, None)
    try:
        assert anon.subscribe("public/#", "private/#") == [1, 0x80]
        # a SUBSCRIBE big enough to be applied in steps obeys the same rules, per position
        many = [f"{'public' if i % 2 else 'private'}/{i}" for i in range(300)]
        assert anon.subscribe(*many) == [1 if i % 2 else 0x80 for i in range(300)]
        anon.publish("inbox", b"hi", 1)
        anon.publish("public/news", b"forged", 1)  # read-only
        assert anon.topics(0.5) == []
    finally:
        anon.close()
    assert _status(server)["mqtt_publish_denied"] == 1
    assert _status(server)["mqtt_subscribe_denied"] == 151


def test_a_taken_over_session_keeps_only_what_the_new_user_may_read(serve_with: Serve) -> None:
    """Messages queued for a persistent session under one user are not handed to another
    user who takes the client id over, unless that user may read them (Mosquitto checks
    every message as it sends it)."""
    doc = rules({"alice": {"acl": [["read", "sensors/#"], ["read", "cmd/#"]]},
                 "bob": {"acl": [["read", "sensors/#"]]}})
    server = serve_with(["alice", "bob", "admin"], doc)
    port = server.mqtt_port
    alice = Client(port, "alice", "shared", clean=False)
    assert alice.subscribe("sensors/#", "cmd/#") == [1, 1]
    alice.close()
    admin = Client(port, "admin", "pub")
    try:
        admin.publish("sensors/a", b"reading", 1)
        admin.publish("cmd/x", b"alice only", 1)
    finally:
        admin.close()
    bob = Client(port, "bob", "shared", clean=False)
    try:
        assert bob.topics() == [("sensors/a", b"reading", False)]
    finally:
        bob.close()
    assert _status(server)["mqtt_queued_dropped"] == 1

"""The permission model without a server: matching, defaults, substitution, Mosquitto hashes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from oxiedge.access.grants import Grants, binding_key_to_mqtt_filter, mqtt_filter_to_binding_key
from oxiedge.access.mosquitto import parse_acl_file, verify_mosquitto
from oxiedge.access.rules import (
    PermissionError_,
    PermissionStore,
    editing,
    empty,
    filter_covered,
    read_file,
    topic_matches,
    validate,
)
from oxiedge.auth import UserStore, read_user_file


def store(**users: Any) -> PermissionStore:
    doc = empty()
    doc["users"] = users
    return PermissionStore(None, validate(doc))


def test_topic_patterns() -> None:
    assert topic_matches("sensors/#", "sensors") and topic_matches("sensors/#", "sensors/a/b")
    assert topic_matches("a/+/c", "a/b/c") and not topic_matches("a/+/c", "a/b/d")
    assert not topic_matches("#", "$SYS/x") and topic_matches("$SYS/#", "$SYS/x")
    assert filter_covered("sensors/#", "sensors/+/temp")
    assert filter_covered("a/+", "a/b") and filter_covered("a/+", "a/+")
    assert not filter_covered("a/+", "a/#") and not filter_covered("a/b", "a/+")
    assert not filter_covered("#", "$SYS/#") and not filter_covered("a/#", "#")


def test_no_rules_means_everything_is_allowed() -> None:
    perms = PermissionStore(None)
    assert not perms.active
    g = Grants(perms, "alice", "c1")
    assert g.may_publish("x/y") and g.may_subscribe("#") and g.vhost_allowed()
    assert g.amqp("configure", "anything") and g.topic_publish("amq.topic", "a.b")


def test_mqtt_lines_deny_first_then_grants() -> None:
    perms = store(alice={"acl": [["readwrite", "sensors/#"], ["deny", "sensors/secret/#"],
                                 ["write", "cmd/+"]]}, bob={})
    a = Grants(perms, "alice", "c1")
    assert a.may_publish("sensors/t1") and not a.may_publish("sensors/secret/x")
    assert a.may_subscribe("sensors/+") and not a.may_subscribe("sensors/secret/#")
    assert not a.may_subscribe("#") and not a.may_subscribe("cmd/+")  # write-only
    assert a.may_read("sensors/t1") and not a.may_read("sensors/secret/k")
    assert a.may_publish("cmd/valve") and not a.may_read("cmd/valve")
    # bob has no line and there is no pattern: unrestricted (the default is allow) ...
    assert Grants(perms, "bob").may_publish("sensors/secret/x")
    # ... until the MQTT default is deny (Mosquitto with an acl_file)
    perms.doc["default"]["mqtt"] = "deny"
    perms.reload()
    assert not Grants(perms, "bob").may_publish("anything")


def test_patterns_substitute_user_and_client_id() -> None:
    doc = empty()
    doc["patterns"] = [["readwrite", "devices/%c/#"], ["read", "users/%u/inbox"]]
    perms = PermissionStore(None, validate(doc))
    g = Grants(perms, "alice", "dev7")
    assert g.may_publish("devices/dev7/temp") and not g.may_publish("devices/dev8/temp")
    assert g.may_subscribe("users/alice/inbox") and not g.may_subscribe("users/bob/inbox")
    # a client id with a wildcard never widens the rule
    assert not Grants(perms, "alice", "+").may_publish("devices/x/temp")
    assert not Grants(perms, None, "dev7").may_subscribe("users//inbox")
    # an anonymous client gets nothing from a %u line, and is still restricted by it
    assert not Grants(perms, None, "x").may_publish("anything")


def test_amqp_regexps_and_default_exchange() -> None:
    perms = store(w={"vhosts": {"/": {"configure": "^(amq\\.gen.*|jobs)$", "write": "^jobs$",
                                      "read": "^(jobs|amq\\.default)$"}}})
    g = Grants(perms, "w")
    assert g.vhost_allowed() and g.amqp("configure", "jobs") and g.amqp("configure", "amq.gen-x")
    assert not g.amqp("configure", "other") and not g.amqp("write", "")
    assert g.amqp("read", "") and not Grants(perms, "w", vhost="/other").vhost_allowed()


def test_topic_permissions_expand_variables_and_cover_the_bridge() -> None:
    perms = store(**{"a.b": {"topics": {"/": {"amq.topic": {"write": "^devices\\.{client_id}\\.",
                                                    "read": "^users\\.{username}\\."}}}}})
    g = Grants(perms, "a.b", "d1")
    assert g.topic_publish("amq.topic", "devices.d1.temp")
    assert not g.topic_publish("amq.topic", "devices.d2.temp")
    assert g.topic_bind("amq.topic", "users.a.b.#") and not g.topic_bind("amq.topic", "users.aXb.x")
    # the same rule holds for MQTT: amq.topic and MQTT topics are one space
    assert g.may_publish("devices/d1/temp") and not g.may_publish("devices/d2/temp")
    assert g.may_subscribe("users/a/b/+") and not g.may_subscribe("users/a/+")
    assert not g.may_subscribe("#")
    # a topic with '.' never crosses the bridge, so amq.topic's rules do not govern it
    assert g.may_publish("devices/d2.x")


def test_mqtt_rules_hold_on_amq_topic() -> None:
    perms = store(m={"acl": [["write", "sensors/#"], ["read", "sensors/+/temp"]]})
    g = Grants(perms, "m")
    assert g.topic_publish("amq.topic", "sensors.t1") and not g.topic_publish("amq.topic", "cmd.x")
    assert g.topic_bind("amq.topic", "sensors.*.temp") and not g.topic_bind("amq.topic", "#")
    assert not g.topic_bind("amq.topic", "sensors.#.temp")  # no MQTT form: refused
    assert g.topic_publish("other.topic", "cmd.x")  # another exchange: MQTT rules do not apply
    assert mqtt_filter_to_binding_key("a/+/#") == "a.*.#"
    assert binding_key_to_mqtt_filter("a.*.#") == "a/+/#"


def test_changes_reach_cached_grants() -> None:
    perms = store(alice={"acl": [["read", "a/#"]]})
    g = Grants(perms, "alice")
    assert g.may_subscribe("a/b") and not g.may_subscribe("b/c")
    perms.doc["users"]["alice"]["acl"] = [["read", "b/#"]]
    perms.reload()
    assert not g.may_subscribe("a/b") and g.may_subscribe("b/c")


def test_invalid_rules_are_refused(tmp_path: Path) -> None:
    for bad in ({"users": {"x": {"acl": [["read", "a/#/b"]]}}},
                {"users": {"x": {"vhosts": {"/": {"configure": "(", "write": "", "read": ""}}}}},
                {"users": {"x": {"tags": ["root"]}}}, {"default": {"mqtt": "maybe"}}, []):
        with pytest.raises(PermissionError_):
            validate(bad)
    path = tmp_path / "permissions.json"
    path.write_text("{not json")
    with pytest.raises(PermissionError_, match=r"permissions\.json"):
        read_file(path)
    path.unlink()
    with editing(path) as doc:
        doc["users"]["alice"] = {"acl": [["read", "a/#"]]}
    assert read_file(path)["users"]["alice"]["acl"] == [["read", "a/#"]]
    assert path.stat().st_mode & 0o777 == 0o600


def test_acl_file_parsing() -> None:
    acl = parse_acl_file("# comment\ntopic read $SYS/#\n\nuser roger\ntopic foo/bar\n"
                         "topic deny foo/secret\npattern write devices/%c/state\n")
    assert acl["anonymous"] == [["read", "$SYS/#"]]
    assert acl["users"]["roger"] == [["readwrite", "foo/bar"], ["deny", "foo/secret"]]
    assert acl["patterns"] == [["write", "devices/%c/state"]]
    with pytest.raises(PermissionError_, match="acl_file:1"):
        parse_acl_file("bogus line")


def test_mosquitto_hashes_from_mosquitto_passwd(tmp_path: Path) -> None:
    """A file written by the real mosquitto_passwd is read and its hashes verified as is."""
    passwd = tmp_path / "passwd"
    try:
        subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwd), "roger", "s3cret pw"],
                       check=True, capture_output=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("mosquitto_passwd is not installed")
    users = read_user_file(passwd)
    assert users["roger"].startswith("$7$")
    assert verify_mosquitto(b"s3cret pw", users["roger"])
    assert not verify_mosquitto(b"wrong", users["roger"])
    store_ = UserStore(users, None)
    assert store_.authenticate("roger", b"s3cret pw") and not store_.authenticate("roger", b"x")
    assert not verify_mosquitto(b"x", "$7$999999999999$AAAA$AAAA")  # absurd rounds: refused


def test_the_cache_stays_bounded() -> None:
    from oxiedge.access.grants import CACHE_MAX, CACHE_MAX_BYTES

    perms = store(alice={"acl": [["write", "a/#"]]})
    g = Grants(perms, "alice")
    for i in range(CACHE_MAX * 3):
        assert g.may_publish(f"a/{i}/" + "x" * 1000) and not g.may_publish(f"b/{i}")
    assert len(g._cache) <= CACHE_MAX and g._cache_bytes <= CACHE_MAX_BYTES + 1100

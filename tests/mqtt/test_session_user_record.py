"""The user entry of MQTT session records (format 2) and the format-1 records without it."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from oxiedge.mqtt import persist
from oxiedge.store import FORMAT_VERSION, Store
from tests.permissions.conftest import Client


@pytest.mark.parametrize("user", ["alice", "", "ünï", None])
def test_session_record_round_trip(user: str | None) -> None:
    subs = {"sensors/#": 1, "a/+/b": 2, "x": 0}
    raw = persist.encode_session(7, subs, user)
    assert persist.check_session(persist.session_key("c"), raw) == ("c", 7, subs, user)


def test_a_format_1_record_decodes_without_a_user() -> None:
    """Format 1 wrote owner + subscriptions only; the entry is never mistaken for one."""
    old = (7).to_bytes(8, "big") + b"\x00\x03a/b\x01"
    assert persist.decode_session(old) == (7, {"a/b": 1}, None)
    assert persist.encode_session(7, {"a/b": 1}) == old
    assert persist.decode_session((7).to_bytes(8, "big")) == (7, {}, None)


@pytest.mark.parametrize("tail", [b"\x00\x00", b"\x00\x00\x00\x05ab", b"\x00\x00\x00\x01\xff",
                                  b"\x00\x00\x00\x00\x00\x05a/b"])
def test_a_broken_user_entry_is_a_value_error(tail: bytes) -> None:
    """Truncated, not UTF-8, or a subscription cut short: ValueError, so recovery
    quarantines the record instead of crash-looping."""
    with pytest.raises(ValueError):
        persist.check_session(persist.session_key("c"), (7).to_bytes(8, "big") + tail)


def test_a_format_1_data_dir_is_migrated_and_its_session_kept(
        start_server: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = Store.open(data / "db")
    # What format 1 left: the marker, a session record without the user, a queued message.
    store.stage_put("meta", b"v", struct.pack(">I", 1))
    store.stage_put(persist.CF, persist.session_key("old-1"),
                    (5).to_bytes(8, "big") + b"\x00\x03a/#\x01")
    store.stage_put(persist.CF, persist.msg_key(persist.owner_bytes(5), 0),
                    persist.encode_msg(1, False, b"a/b", b"queued before the upgrade"))
    store.commit_blocking()
    store.close()
    server = start_server("--amqp-port", "off", data=data)
    assert server.line("MQTT persistence on - recovered 1 sessions, 1 pending") is not None
    status = json.loads(server.cli("status", "--json").stdout)
    assert status["store"]["format_version"] == FORMAT_VERSION == 2
    assert status["store"]["quarantine"]["records"] == 0
    found = server.cli("find", "_mqtt", '{"_kind": "session"}', "--json").stdout
    assert "user" not in json.loads(found)  # not known until the client comes back
    client = Client(server.mqtt_port, None, "old-1", clean=False)
    try:
        assert [(t, p) for t, p, _r in client.topics()] == [("a/b", b"queued before the upgrade")]
    finally:
        client.close()
    found = server.cli("find", "_mqtt", '{"_kind": "session"}', "--json").stdout
    assert json.loads(found)["user"] is None  # recorded now: anonymous
    assert server.stop() == 0
    store = Store.open(data / "db", read_only=True)
    raw = store.get_raw(persist.CF, persist.session_key("old-1"))
    store.close()
    assert raw is not None and persist.decode_session(raw) == (5, {"a/#": 1}, "")

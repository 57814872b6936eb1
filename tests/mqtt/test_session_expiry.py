"""--mqtt-session-expiry: a persistent session offline that long is deleted with its queue.

The broker core with an injected clock (real RocksDB, no server), then a real server:
the expiry, what it logs and counts, that the deletion is durable (SIGKILL), that a restart
renews the lease, and that expired sessions give their room back to new client ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from oxiedge.config import Config, ConfigError
from oxiedge.mqtt import persist
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.session import Limits
from oxiedge.store import Store
from tests.conftest import ServerProcess

from .conftest import wait_for
from .rawclient import RawClient, RawSession

Start = Callable[..., ServerProcess]
PRESENT = b"\x20\x02\x01\x00"
FRESH = b"\x20\x02\x00\x00"


class Wire:
    out_bytes = 0

    def write(self, data: bytes) -> None:
        pass


def session_keys(store: Store) -> list[bytes]:
    return [bytes(k) for k, _ in store.iter_raw(persist.CF, persist.SESSION)]


def test_config_spellings() -> None:
    def expiry(value: object) -> int | None:
        return Config.resolve({"mqtt_session_expiry": value}, {}).mqtt_session_expiry

    assert Config.resolve({}, {}).mqtt_session_expiry == 86400  # default: one day
    assert expiry("12h") == 43200 and expiry("90") == 90 and expiry("2w") == 14 * 86400
    assert expiry("never") is None and expiry("off") is None
    env = {"OXIEDGE_MQTT_SESSION_EXPIRY": "30m"}
    assert Config.resolve({}, env).mqtt_session_expiry == 1800
    assert expiry("3650d") == 3650 * 86400  # ten years: the longest
    # (0 would mean "ends with the connection" in MQTT 5)
    for bad in ("0", "-5", "soon", "1y", "3651d", "9" * 320 + "w"):
        with pytest.raises(ConfigError, match="--mqtt-session-expiry"):
            expiry(bad)


def test_offline_persistent_session_expires_after_its_time(store: Store) -> None:
    b = Broker(store, Limits(10, session_expiry=100))
    s, _, _ = b.open_session("gone", clean=False)
    b.subscribe(s, [("a/#", 1)])
    live, _, _ = b.open_session("live", clean=False)
    live.conn = Wire()
    b.open_session("clean", clean=True)  # ends with its connection, not here
    store.commit_blocking()
    assert b.route("a/1", b"x", 1, False)  # queued for the offline session, on disk
    store.commit_blocking()
    assert len(s.queue) == 1
    s.offline_since = 1000.0
    assert b.expire_sessions(1099.0) == []
    assert "gone" in b.sessions
    assert b.expire_sessions(1100.0) == [s]
    assert set(b.sessions) == {"live", "clean"}
    assert b.stats.sessions_expired == 0  # the sweep counts them once the deletion is durable
    store.commit_blocking()
    assert session_keys(store) == [persist.session_key("live")]  # record and queue gone
    assert not list(store.iter_raw(persist.CF, persist.MSG))
    assert b.route("a/2", b"y", 1, False) is False  # its subscription went with it
    # Much later: the attached and the clean session are still not touched.
    assert b.expire_sessions(1e9) == []


def test_a_session_first_seen_offline_starts_its_clock_then(store: Store) -> None:
    """Recovered sessions (``offline_since`` unknown) get the whole expiry from the first
    sweep: a restart renews the lease, a wrong wall clock cannot expire them early."""
    b = Broker(store, Limits(10, session_expiry=100))
    s, _, _ = b.open_session("recovered", clean=False)
    assert s.offline_since is None
    assert b.expire_sessions(5000.0) == []
    assert s.offline_since == 5000.0
    assert b.expire_sessions(5099.0) == []
    assert b.expire_sessions(5100.0) == [s]


def test_a_connecting_session_and_never_are_left_alone(store: Store) -> None:
    b = Broker(store, Limits(10, session_expiry=100))
    s, _, _ = b.open_session("resuming", clean=False)
    s.offline_since = 0.0
    b.connecting["resuming"] = object()  # its CONNECT awaits a commit
    assert b.expire_sessions(500.0) == []
    del b.connecting["resuming"]
    assert b.expire_sessions(500.0) == [s]
    forever = Broker(None, Limits(10))  # session_expiry None: --mqtt-session-expiry never
    t, _, _ = forever.open_session("kept", clean=False)
    t.offline_since = 0.0
    assert forever.expire_sessions(1e12) == []


# ---------------------------------------------------------------- a real server


def _port(srv: ServerProcess) -> int:
    assert srv.mqtt_port is not None
    return srv.mqtt_port


def _status(srv: ServerProcess) -> dict[str, object]:
    mqtt: dict[str, object] = json.loads(srv.cli("status", "--json").stdout)["mqtt"]
    return mqtt


def test_server_expires_an_offline_session_with_its_queue_durably(start_mqtt: Start) -> None:
    srv = start_mqtt("--mqtt-session-expiry", "2s")
    sub = RawSession(_port(srv))
    sub.connect("sleepy", clean=False)
    assert sub.subscribe(1, ("exp/#", 1)) == (1,)
    sub.disconnect()
    pub = RawSession(_port(srv))
    pub.connect("pub")
    for i in range(3):
        pub.publish("exp/t", f"m{i}".encode(), 1, pid=i + 1)  # acked: queued on disk
    pub.disconnect()
    status = _status(srv)  # (on a loaded machine its 2 s may be over before this answer)
    assert status["queued"] == (3 if status["sessions_expired"] == 0 else 0), status
    line = srv.wait_for_line("MQTT: 1 persistent session offline over 2s expired", timeout=120)
    assert "('sleepy')" in line and "3 undelivered messages deleted" in line, line
    status = _status(srv)
    assert status["sessions_expired"] == 1 and status["sessions"] == 0
    assert status["queued"] == 0 and status["session_expiry"] == 2
    srv.kill()  # the deletion was committed: a crash does not bring the session back
    srv.start(timeout=120)
    assert srv.line("MQTT persistence on - recovered 0 sessions, 0 pending messages"), \
        srv.log_lines
    again = RawClient(_port(srv))
    assert again.connect("sleepy", clean=False, expect=None) == FRESH  # no session present
    again.close()


def _expiries(srv: ServerProcess) -> list[str]:
    """The server's "N persistent session(s) offline over ... expired (...)" lines so far."""
    return [ln for ln in list(srv.log_lines)
            if ln.startswith("MQTT: ") and " persistent session" in ln and " expired (" in ln]


def test_a_session_in_use_or_back_in_time_is_kept(start_mqtt: Start) -> None:
    """Connected sessions never expire; one that reconnects before its time restarts the
    clock; a restart renews every offline session's lease (the clock starts again).

    Read off the server's own sweeps rather than from sleeping the right amount, so that
    a loaded machine only makes it slower: a witness session goes offline after the hopper
    first left and before it comes back. The sweep that expires the witness comes more
    than the expiry after the hopper first left and after "online" connected: the hopper
    is kept by it only because coming back restarted its clock, "online" only because it
    is connected."""
    expiry = 10
    srv = start_mqtt("--mqtt-session-expiry", f"{expiry}s")
    online = RawSession(_port(srv))
    online.connect("online", clean=False, keepalive=0)
    hopper = RawSession(_port(srv))
    hopper.connect("hopper", clean=False)
    hopper.disconnect()  # (returns once the server closed it: offline from then)
    witness = RawSession(_port(srv))
    witness.connect("witness", clean=False)
    witness.disconnect()
    time.sleep(expiry / 2)  # back at half its time: sweeps apart from the witness's end
    back = RawSession(_port(srv))
    assert back.connect("hopper", clean=False, expect=None) == PRESENT
    back.disconnect()
    back_gone = time.monotonic()  # the hopper's clock runs from before this
    wait_for(lambda: bool(_expiries(srv)), timeout=120)
    assert _expiries(srv) == [f"MQTT: 1 persistent session offline over {expiry}s expired "
                              "('witness'); 0 undelivered messages deleted with them"]
    online.ping()
    status = _status(srv)
    assert status["sessions_expired"] == 1 and status["sessions"] == 2, status
    srv.kill()
    time.sleep(5)  # down: the lease renewed at start comes later still
    srv.start(timeout=120)  # every offline session's clock starts again at recovery
    # Without the renewal the hopper would be gone by now (offline over its expiry, with
    # time for a sweep or two to spare); with it, it has its whole expiry from the start.
    time.sleep(max(0.0, back_gone + expiry + 3 - time.monotonic()))
    late = RawSession(_port(srv))
    assert late.connect("hopper", clean=False, expect=None) == PRESENT  # lease renewed
    late.disconnect()
    # and it ends in time after all ("online", offline since the kill, goes too)
    wait_for(lambda: any("'hopper'" in line for line in _expiries(srv)), timeout=120)


def test_expired_sessions_give_their_room_back(start_mqtt: Start) -> None:
    """The audit's attack: persistent sessions with fresh client ids fill
    --mqtt-max-sessions and every new client id gets CONNACK 3. With an expiry the
    broker recovers on its own once they have been offline that long."""
    # 6 s: the newcomer must be refused before the fillers' time is up, on a loaded machine
    srv = start_mqtt("--mqtt-max-sessions", "5", "--mqtt-session-expiry", "6s")
    for i in range(5):
        raw = RawClient(_port(srv))
        raw.connect(f"filler-{i}", clean=False)
        raw.close()  # gone without DISCONNECT: the session stays
    newcomer = RawClient(_port(srv))
    assert newcomer.connect("newcomer", clean=False, expect=None)[3] == 3  # server unavailable
    newcomer.close()
    srv.wait_for_line("MQTT: 5 persistent sessions offline over 6s expired", timeout=120)

    admitted: list[RawClient] = []

    def admit() -> bool:
        raw = RawClient(_port(srv))
        if raw.connect("newcomer", clean=False, expect=None)[3] == 0:
            admitted.append(raw)  # kept online: its own session must not expire meanwhile
            return True
        raw.close()
        return False

    wait_for(admit, timeout=60)
    status = _status(srv)
    admitted[0].close()
    assert status["sessions_refused"] == 1 and status["sessions_expired"] == 5

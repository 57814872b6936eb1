"""Whether the hot loop is on is never silent: start-up logs ``hot loop on`` or ``hot loop
off: REASON``, and ``oxiedge status`` → ``hot_loop`` shows it either way (a real server);
each reason it can be off for, in-process."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from oxiedge.net import hot as hot_module
from oxiedge.net.hot import HotLoop, HotLoopOff, hot_loop, hot_loop_state
from tests.mqtt.rawclient import RawSession


def _status(server: Any) -> dict[str, Any]:
    return dict(json.loads(server.cli("status", "--json").stdout)["hot_loop"])


def _served_one_publish(server: Any) -> None:
    sess = RawSession(server.mqtt_port)
    try:
        sess.connect("hls")
        sess.publish("hls/t", b"x", 1, pid=1)
        sess.ping()
    finally:
        sess.close()


def test_on_by_default_logged_and_shown(server: Any) -> None:
    assert "hot loop on" in server.log_lines
    assert not any(line.startswith("hot loop off") for line in server.log_lines)
    _served_one_publish(server)
    status = _status(server)
    assert status["on"] is True and "reason" not in status
    # (how many bursts went inline depends on the scheduler: a client that answers
    # before the reader looks again is read by the task; test_hot.py counts them)
    assert isinstance(status["served_inline"], int) and status["parked"] >= 0


def test_off_by_the_switch_logged_and_shown(start_server: Any) -> None:
    srv = start_server(env={"OXIEDGE_HOT_LOOP": "0"})
    assert "hot loop off: OXIEDGE_HOT_LOOP=0" in srv.log_lines
    assert "hot loop on" not in srv.log_lines
    _served_one_publish(srv)  # served in trio, as before
    assert _status(srv) == {"on": False, "reason": "OXIEDGE_HOT_LOOP=0"}


def _state_in_a_run() -> HotLoop | HotLoopOff:
    async def main() -> HotLoop | HotLoopOff:
        state = hot_loop_state()
        assert state is hot_loop_state()  # (one per run)
        return state

    return trio.run(main)


@pytest.mark.parametrize("setting", ["0", "off", "no", "False"])
def test_each_spelling_of_the_switch(setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXIEDGE_HOT_LOOP", setting)
    state = _state_in_a_run()
    assert isinstance(state, HotLoopOff) and state.chosen
    assert state.reason == f"OXIEDGE_HOT_LOOP={setting}"


def test_off_without_the_trio_internals_names_the_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OXIEDGE_HOT_LOOP", raising=False)
    monkeypatch.setattr(hot_module, "_trio_internals", lambda: None)
    state = _state_in_a_run()
    assert isinstance(state, HotLoopOff) and not state.chosen
    assert state.reason.startswith(f"trio {trio.__version__} lacks the run-loop internals")
    assert state.status() == {"on": False, "reason": state.reason}


def test_off_without_epoll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OXIEDGE_HOT_LOOP", raising=False)
    monkeypatch.setattr(hot_module, "_HAS_EPOLL", False)  # (as on macOS or BSD)
    state = _state_in_a_run()
    assert isinstance(state, HotLoopOff) and not state.chosen
    assert state.reason.startswith("no epoll on this platform")


def test_a_failed_loop_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OXIEDGE_HOT_LOOP", raising=False)

    async def main() -> dict[str, Any]:
        hot = hot_loop()
        assert hot is not None and hot.status()["on"] is True
        hot._shut_down()  # what an unexpected error in the loop does
        assert hot_loop() is None
        return hot.status()

    status = trio.run(main)
    assert status["on"] is False and status["reason"].startswith("failed")

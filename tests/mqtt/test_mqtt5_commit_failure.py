"""An MQTT 5 connection whose burst's commit fails (sans-IO, the protocol object driven as
the transport drives it): its PUBACKs and PUBRECs go out as 0x80 with a Reason String,
then DISCONNECT 0x80, and nothing of the round is acknowledged as a success."""

from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec5 import decode_all5
from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.packets5 import (
    Connect5,
    Disconnect5,
    Puback5,
    Publish5,
    Pubrec5,
    Subscribe5,
    Subscription,
)
from oxiedge.mqtt.properties import Properties
from oxiedge.mqtt.session import Limits
from oxiedge.net import COMMIT, NEED_DATA, SEND, Close
from oxiedge.store import Store

from .test_protocol import Clock, Peer


@pytest.mark.parametrize("problem_info", [None, 0])
async def test_a_failed_commit_answers_0x80_with_a_reason(tmp_path: Path,
                                                         problem_info: int | None) -> None:
    store = Store.open(tmp_path / "db")
    try:
        async with store.running():
            broker = Broker(store, Limits(100))
            clock = Clock()
            sub = Peer(broker, store, clock)  # a durable subscriber: its copy needs a commit
            await sub.feed(encode5(Connect5("s", True, 60, properties=Properties(
                session_expiry_interval=600))))
            await sub.feed(encode5(Subscribe5(1, (Subscription("f/#", 2),))))
            pub = Peer(broker, store, clock)
            await pub.feed(encode5(Connect5("p", True, 60, properties=Properties(
                request_problem_information=problem_info))))
            proto = pub.proto
            proto.receive_data(encode5(Publish5("f/1", b"x", 1, False, False, 7))
                               + encode5(Publish5("f/2", b"y", 2, False, False, 8)))
            out = b""
            while True:
                action = proto.next_action()
                if action is COMMIT:
                    proto.commit_done(OSError(5, "injected I/O error"))
                elif action is NEED_DATA or action is SEND:
                    out += proto.data_to_send()
                elif isinstance(action, Close):
                    break
            out += pub.wire.take()
            got = decode_all5(out)
            reason = Properties(reason_string="commit failed: [Errno 5] injected I/O error")
            # (Request Problem Information 0: no Reason String but on DISCONNECT)
            ack = reason if problem_info is None else Properties()
            assert got == [Puback5(7, 0x80, ack), Pubrec5(8, 0x80, ack),
                           Disconnect5(0x80, reason)]  # fmt: skip
            assert broker.stats.commit_errors == 1
    finally:
        store.close()

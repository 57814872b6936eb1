"""``AmqpProtocol`` without a socket: ``(state, bytes in) -> exact bytes out`` tables.

Each case is a list of steps ``(bytes in, exact bytes out, actions asked for)`` played on
one protocol object over a real (in-process) broker and store: ``COMMIT`` is performed
with ``store.commit()`` and ``AUTH <user>`` with the real ``Logins.check``, as the
transport loop (``oxiedge.net``) would; "bytes out" is what the protocol handed to the
loop (``data_to_send``), in order.  Expected frames are written with the codec (tested
byte by byte in test_codec.py) and, for a few, as literal bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from oxiedge.amqp import codec, spec
from oxiedge.amqp import protocol as amqp_protocol
from oxiedge.amqp.protocol import (
    CHECKPOINT,
    COMMIT,
    NEED_DATA,
    SEND,
    AmqpProtocol,
    Authenticate,
    Close,
)
from oxiedge.amqp.service import AmqpService
from tests.amqp.conftest import amqp_service

M = codec.encode_method
PERSISTENT = spec.BasicProperties(delivery_mode=2).encode()


def publish(ch: int, key: str, body: bytes, props: bytes = b"\x00\x00") -> bytes:
    return codec.encode_content(ch, spec.BasicPublish(routing_key=key), props, body, 0)


class MemoryOutlet:
    """The transport's side the protocol writes to outside its steps."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def deliver_now(self) -> None:
        pass


def protocol_for(svc: AmqpService) -> AmqpProtocol:
    app = svc.app
    return AmqpProtocol(svc.broker, MemoryOutlet(), svc.limits, svc.counters, app.permissions,
                        svc.server_properties(), clock=trio.current_time, alarms=app.alarms,
                        peer="table")


async def play(svc: AmqpService, proto: AmqpProtocol, data: bytes,
               checkpoints: list[int] | None = None) -> tuple[bytes, list[str]]:
    """Feed ``data``; perform the actions until the protocol needs data or closes
    (checkpoints depend on the clock: counted in ``checkpoints``, not listed)."""
    proto.receive_data(data)
    actions: list[str] = []
    out = b""
    while True:
        action = proto.next_action()
        out += proto.data_to_send()
        if action is NEED_DATA or isinstance(action, Close):
            actions.append("CLOSE" if isinstance(action, Close) else "NEED_DATA")
            break
        if action is SEND:
            continue  # (sent above, before what follows)
        if action is CHECKPOINT:
            if checkpoints is not None:
                checkpoints.append(len(out))
            continue
        if action is COMMIT:
            actions.append("COMMIT")
            await svc.app.store.commit()
            proto.commit_done(None)
        else:
            assert isinstance(action, Authenticate), action
            actions.append(f"AUTH {action.username}")
            proto.authenticated(await svc.app.logins.check(action.username, action.password))
    return out, actions


def handshake_steps(props: dict[str, Any]) -> list[tuple[bytes, bytes, list[str]]]:
    return [
        (codec.PROTOCOL_HEADER,
         M(0, spec.ConnectionStart(0, 9, props, b"PLAIN AMQPLAIN", b"en_US")),
         ["NEED_DATA"]),
        (M(0, spec.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest")),
         M(0, spec.ConnectionTune(2047, 131072, 60)),
         ["AUTH guest", "NEED_DATA"]),
        (M(0, spec.ConnectionTuneOk(2047, 131072, 0)) + M(0, spec.ConnectionOpen("/")),
         # connection.open-ok: class 10, method 41, an empty shortstr
         b"\x01\x00\x00\x00\x00\x00\x05\x00\x0a\x00\x29\x00\xce",
         ["NEED_DATA"]),
    ]


OPEN_1 = (M(1, spec.ChannelOpen()),
          # channel.open-ok: class 20, method 11, an empty longstr
          b"\x01\x00\x01\x00\x00\x00\x08\x00\x14\x00\x0b\x00\x00\x00\x00\xce",
          ["NEED_DATA"])

CASES: dict[str, list[tuple[bytes, bytes, list[str]]]] = {
    "channel open and close": [
        OPEN_1,
        (M(1, spec.ChannelClose(200, "bye", 0, 0)), M(1, spec.ChannelCloseOk()),
         ["NEED_DATA"]),
        # close-ok, then the socket stays open (frames are read and dropped) until the
        # client closes its side
        (M(0, spec.ConnectionClose(200, "bye", 0, 0)), M(0, spec.ConnectionCloseOk()),
         ["NEED_DATA"]),
        (M(1, spec.ChannelOpen()), b"", ["NEED_DATA"]),
        (b"", b"", ["CLOSE"]),
    ],
    "declare: transient at once, durable after its commit": [
        OPEN_1,
        (M(1, spec.QueueDeclare(queue="t")), M(1, spec.QueueDeclareOk("t", 0, 0)),
         ["NEED_DATA"]),
        (M(1, spec.QueueDeclare(queue="d", durable=True)), M(1, spec.QueueDeclareOk("d", 0, 0)),
         ["COMMIT", "NEED_DATA"]),
        (M(1, spec.ExchangeDeclare(exchange="x", type="topic", durable=True)),
         M(1, spec.ExchangeDeclareOk()), ["COMMIT", "NEED_DATA"]),
        (M(1, spec.QueueBind(queue="t", exchange="x", routing_key="#")),
         M(1, spec.QueueBindOk()), ["NEED_DATA"]),  # a transient queue: nothing to sync
    ],
    "publish and confirm: one commit per burst, coalesced acks": [
        OPEN_1,
        (M(1, spec.ConfirmSelect()), M(1, spec.ConfirmSelectOk()), ["NEED_DATA"]),
        (M(1, spec.QueueDeclare(queue="t")), M(1, spec.QueueDeclareOk("t", 0, 0)),
         ["NEED_DATA"]),
        (publish(1, "t", b"a"), M(1, spec.BasicAck(1, False)), ["NEED_DATA"]),  # no commit
        (M(1, spec.QueueDeclare(queue="d", durable=True)), M(1, spec.QueueDeclareOk("d", 0, 0)),
         ["COMMIT", "NEED_DATA"]),
        (publish(1, "d", b"b", PERSISTENT) + publish(1, "d", b"c", PERSISTENT)
         + publish(1, "d", b"d", PERSISTENT),
         M(1, spec.BasicAck(4, True)), ["COMMIT", "NEED_DATA"]),
        # unroutable + mandatory: basic.return first, then the confirm
        (codec.encode_content(1, spec.BasicPublish(routing_key="nowhere", mandatory=True),
                              b"\x00\x00", b"e", 0),
         codec.encode_content(1, spec.BasicReturn(312, "NO_ROUTE", "", "nowhere"),
                              b"\x00\x00", b"e", 131072) + M(1, spec.BasicAck(5, False)),
         ["NEED_DATA"]),
    ],
    "channel error 404: channel.close, the connection stays": [
        OPEN_1,
        (M(1, spec.QueueDeclare(queue="nope", passive=True)),
         M(1, spec.ChannelClose(404, "NOT_FOUND - no queue 'nope' in vhost '/'", 50, 10)),
         ["NEED_DATA"]),
        (M(1, spec.QueueDeclare(queue="ignored")), b"", ["NEED_DATA"]),  # until close-ok
        (M(1, spec.ChannelCloseOk()), b"", ["NEED_DATA"]),
        (M(1, spec.ChannelOpen()), M(1, spec.ChannelOpenOk()), ["NEED_DATA"]),
    ],
    "connection error 501: a frame over frame_max closes the connection": [
        OPEN_1,
        (codec.encode_frame(3, 1, b"x" * 200_000),
         M(0, spec.ConnectionClose(
             501, "FRAME_ERROR - frame size 200008 exceeds frame_max 131072", 0, 0)),
         ["NEED_DATA"]),  # waiting for close-ok
        (M(0, spec.ConnectionCloseOk()), b"", ["CLOSE"]),
    ],
}


@asynccontextmanager
async def opened(tmp_path: Path) -> AsyncIterator[tuple[AmqpService, AmqpProtocol]]:
    async with amqp_service(tmp_path) as svc:
        proto = protocol_for(svc)
        for data, out, actions in handshake_steps(svc.server_properties()):
            assert await play(svc, proto, data) == (out, actions)
        assert proto.opened
        yield svc, proto


async def test_handshake_start_tune_open(tmp_path: Path) -> None:
    async with opened(tmp_path) as (_svc, proto):
        assert (proto.user, proto.frame_max, proto.heartbeat) == ("guest", 131072, 0)


@pytest.mark.parametrize("name", list(CASES))
async def test_table(tmp_path: Path, name: str) -> None:
    async with opened(tmp_path) as (svc, proto):
        for i, (data, out, actions) in enumerate(CASES[name]):
            assert await play(svc, proto, data) == (out, actions), f"step {i}"


async def test_bad_protocol_header_gets_ours(tmp_path: Path) -> None:
    async with amqp_service(tmp_path) as svc:
        proto = protocol_for(svc)
        assert await play(svc, proto, b"AMQP\x00\x00\x08\x00") == (codec.PROTOCOL_HEADER,
                                                                  ["CLOSE"])


async def test_refused_login_is_a_403_connection_close(tmp_path: Path) -> None:
    async with amqp_service(tmp_path) as svc:
        proto = protocol_for(svc)
        await play(svc, proto, codec.PROTOCOL_HEADER)
        out, actions = await play(svc, proto, M(0, spec.ConnectionStartOk({}, "CRAM-MD5", b"")))
        assert out == M(0, spec.ConnectionClose(
            403, "ACCESS_REFUSED - Login was refused using authentication mechanism CRAM-MD5",
            10, 11))
        assert actions == ["NEED_DATA"] and proto.closing and not proto.opened


async def test_a_long_burst_lets_other_connections_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands of one read past BURST_SLICE_S yield CHECKPOINT (the loop lets the other
    connections run, then the burst goes on): one costly command after another (a publish
    through a 20,000-exchange chain is ~50 ms) used to hold the loop for the whole read."""
    async with opened(tmp_path) as (svc, proto):
        assert await play(svc, proto, OPEN_1[0]) == OPEN_1[1:]
        monkeypatch.setattr(amqp_protocol, "BURST_SLICE_S", 0.0)
        burst = b"".join(M(1, spec.QueueDeclare(queue=f"cp{i}")) for i in range(5))
        seen: list[int] = []
        out, actions = await play(svc, proto, burst, seen)
        assert actions == ["NEED_DATA"] and len(seen) >= 4
        assert out.count(b"cp") == 5  # every declare-ok, in order, after the checkpoints
        assert [out.index(f"cp{i}".encode()) for i in range(5)] == sorted(
            out.index(f"cp{i}".encode()) for i in range(5))


async def test_frames_split_anywhere_give_the_same_bytes(tmp_path: Path) -> None:
    """A burst fed one byte at a time: same replies, each once its frame is complete."""
    async with opened(tmp_path) as (svc, proto):
        data = OPEN_1[0] + M(1, spec.QueueDeclare(queue="s"))
        out = b""
        for i in range(len(data)):
            got, _actions = await play(svc, proto, data[i:i + 1])
            out += got
        assert out == OPEN_1[1] + M(1, spec.QueueDeclareOk("s", 0, 0))


def test_protocol_modules_import_no_trio() -> None:
    """The protocol object and everything it is made of are sans-IO: no trio import (the
    trio binding is connection.py; the broker's timer task is timers.py)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "oxiedge" / "amqp"
    for name in ("acktimeout", "actions", "bounds", "burst", "channel", "channels", "codec",
                 "consumers", "handshake", "methods", "ports", "priority", "protocol",
                 "publish", "queues", "selection", "settlement", "streaming", "transaction"):
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        assert "trio" not in imported, name


async def test_single_acks_free_prefetch_and_unknown_tags_are_406(tmp_path: Path) -> None:
    """basic.ack of one tag (the common case, its own path): the prefetch slot frees and
    the next message is delivered; a basic.get delivery acks too; an unknown tag is 406."""
    async with opened(tmp_path) as (svc, proto):
        await play(svc, proto, OPEN_1[0] + M(1, spec.QueueDeclare(queue="p"))
                   + M(1, spec.BasicQos(0, 1, False))
                   + M(1, spec.BasicConsume(queue="p", consumer_tag="c")))
        outlet = proto._outlet
        assert isinstance(outlet, MemoryOutlet)
        out, _ = await play(svc, proto, publish(1, "p", b"a") + publish(1, "p", b"b"))
        deliver = [codec.encode_content(1, spec.BasicDeliver("c", t, False, "", "p"),
                                        b"\x00\x00", body, 131072)
                   for t, body in ((1, b"a"), (2, b"b"))]
        assert out + b"".join(outlet.written) == deliver[0]  # prefetch 1: one at a time
        outlet.written.clear()
        out, _ = await play(svc, proto, M(1, spec.BasicAck(1, False)))
        assert out + b"".join(outlet.written) == deliver[1]
        outlet.written.clear()
        await play(svc, proto, M(1, spec.BasicCancel("c")))
        await play(svc, proto, publish(1, "p", b"g"))
        out, _ = await play(svc, proto, M(1, spec.BasicGet(queue="p")))
        assert out == codec.encode_content(1, spec.BasicGetOk(3, False, "", "p", 0),
                                           b"\x00\x00", b"g", 131072)
        out, _ = await play(svc, proto, M(1, spec.BasicAck(2, False))
                            + M(1, spec.BasicAck(3, False)))
        assert out == b"" and not proto.channels[1].settlement.unacked
        out, _ = await play(svc, proto, M(1, spec.BasicAck(9, False)))
        assert out == M(1, spec.ChannelClose(
            406, "PRECONDITION_FAILED - unknown delivery tag 9", 60, 80))


async def test_recover_and_reject_settle_through_the_channel_settlement(tmp_path: Path) -> None:
    """basic.recover: recover-ok first, then the redeliveries (new tags, redelivered);
    basic.reject requeue=true puts a delivery back in place, requeue=false drops it; an
    ack of a recovered (old) tag is 406."""
    async with opened(tmp_path) as (svc, proto):
        await play(svc, proto, OPEN_1[0] + M(1, spec.QueueDeclare(queue="r"))
                   + M(1, spec.BasicConsume(queue="r", consumer_tag="c")))
        outlet = proto._outlet
        assert isinstance(outlet, MemoryOutlet)

        def deliver(tag: int, body: bytes, redelivered: bool) -> bytes:
            return codec.encode_content(1, spec.BasicDeliver("c", tag, redelivered, "", "r"),
                                        b"\x00\x00", body, 131072)

        out, _ = await play(svc, proto, publish(1, "r", b"a") + publish(1, "r", b"b"))
        assert out + b"".join(outlet.written) == deliver(1, b"a", False) + deliver(2, b"b", False)
        outlet.written.clear()
        out, _ = await play(svc, proto, M(1, spec.BasicRecover(requeue=True)))
        # (the requeue dispatches at once: the redeliveries go out before recover-ok)
        assert out == deliver(3, b"a", True) + deliver(4, b"b", True) + M(1, spec.BasicRecoverOk())
        out, _ = await play(svc, proto, M(1, spec.BasicReject(4, requeue=True)))
        assert out == deliver(5, b"b", True)
        out, _ = await play(svc, proto, M(1, spec.BasicReject(5, requeue=False))
                            + M(1, spec.BasicAck(3, False)))
        assert out == b"" and not proto.channels[1].settlement.unacked
        assert svc.broker.queues["r"].unacked == 0 and not svc.broker.queues["r"].ready
        out, _ = await play(svc, proto, M(1, spec.BasicAck(1, False)))
        assert out == M(1, spec.ChannelClose(
            406, "PRECONDITION_FAILED - unknown delivery tag 1", 60, 80))

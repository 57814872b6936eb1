"""A minimal blocking AMQP client on a raw socket, built on the sans-IO codec, for
black-box tests that need to send exactly the bytes they want."""

from __future__ import annotations

import socket
import time

from oxiedge.amqp import codec, spec
from oxiedge.amqp.codec import Command, FrameParser


class RawClient:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.parser = FrameParser(0, expect_header=False)
        self.heartbeats = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, method: spec.Method) -> None:
        self.send(codec.encode_method(channel, method))

    def recv_command(self, timeout: float = 5.0) -> Command | None:
        """The next command (heartbeats counted and skipped); None at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            ev = self.parser.next_event()
            if isinstance(ev, Command):
                return ev
            if ev is not None:
                self.heartbeats += 1
                continue
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                return None
            self.parser.feed(data)

    def expect(self, cls: type[spec.Method], channel: int = 0) -> spec.Method:
        cmd = self.recv_command()
        assert cmd is not None, f"connection closed while waiting for {cls.NAME}"
        assert isinstance(cmd.method, cls), f"expected {cls.NAME}, got {cmd.method!r}"
        assert cmd.channel == channel
        return cmd.method

    def call(self, channel: int, method: spec.Method, reply: type[spec.Method]) -> spec.Method:
        """Send ``method`` and expect ``reply`` on the same channel."""
        self.method(channel, method)
        return self.expect(reply, channel)

    def handshake(self, heartbeat: int = 0, frame_max: int = 131072) -> spec.ConnectionTune:
        self.send(codec.PROTOCOL_HEADER)
        self.expect(spec.ConnectionStart)
        self.method(0, spec.ConnectionStartOk({"product": "raw"}, "PLAIN", b"\x00guest\x00guest"))
        tune = self.expect(spec.ConnectionTune)
        assert isinstance(tune, spec.ConnectionTune)
        self.method(0, spec.ConnectionTuneOk(tune.channel_max, frame_max, heartbeat))
        self.call(0, spec.ConnectionOpen("/"), spec.ConnectionOpenOk)
        return tune

    def open_channel(self, number: int = 1) -> None:
        self.call(number, spec.ChannelOpen(), spec.ChannelOpenOk)

    def expect_close(self, code: int) -> spec.ConnectionClose:
        close = self.expect(spec.ConnectionClose)
        assert isinstance(close, spec.ConnectionClose)
        assert close.reply_code == code, close
        self.method(0, spec.ConnectionCloseOk())
        return close

    def read_to_eof(self, timeout: float = 5.0) -> bytes:
        self.sock.settimeout(timeout)
        chunks: list[bytes] = []
        while True:
            data = self.sock.recv(65536)
            if not data:
                return b"".join(chunks)
            chunks.append(data)

    def close(self) -> None:
        self.sock.close()

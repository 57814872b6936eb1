"""Fuzzing the MQTT 5 codec with ≥ 1,000,000 inputs (slow suite, issue 39), as
``test_mqtt_codec_fuzz`` does for 3.1.1.

Whatever bytes arrive on an MQTT 5 connection, ``Decoder5`` either returns packets or raises
``ProtocolError`` (``MalformedPacket`` / ``ProtocolViolation``: the connection then sends
DISCONNECT with its reason code and closes): never IndexError, ValueError, UnicodeError,
struct.error or anything else. Seeds are valid MQTT 5 streams (every packet type, with
properties), so the mutations reach the property and reason-code decoders, not only the
framing."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.codec import ProtocolError
from oxiedge.mqtt.codec5 import Decoder5
from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.packets5 import Packet5
from tests.fuzz.mutate import chunks, mutate
from tests.mqtt.test_codec5 import packets5

SEEDS = 2_000
MUTATIONS = 500  # per seed: 2,000 x (500 + 1) = 1,002,000 inputs
_count = [0]


def _decode(data: bytes, rnd: random.Random) -> None:
    d = Decoder5(max_packet_size=rnd.choice((64, 4096, 1 << 20)),
                 max_topic_levels=rnd.choice((2, 200)), max_topic_length=rnd.choice((8, 4096)))
    first = rnd.random() < 0.2  # sometimes as a connection's first packet
    try:
        for piece in chunks(data, rnd):
            d.feed(piece)
            if first:
                if d.next_connect() is None:
                    continue
                first = False
            while d.next_item5() is not None:
                pass
    except ProtocolError:
        pass
    _count[0] += 1


@settings(max_examples=SEEDS, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(packets5, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def _fuzz(seed: list[Packet5], rnd_seed: int) -> None:
    rnd = random.Random(rnd_seed)
    base = b"".join(encode5(p) for p in seed)
    _decode(base, rnd)
    for _ in range(MUTATIONS):
        _decode(mutate(base, rnd), rnd)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_mqtt5_decoder_survives_a_million_mutated_streams() -> None:
    _count[0] = 0
    _fuzz()
    assert _count[0] >= 1_000_000, _count[0]


@settings(max_examples=20, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(packets5, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_mqtt5_decoder_fuzz_smoke(seed: list[Packet5], rnd_seed: int) -> None:
    """The same engine, 20 x 100 inputs, in the default suite."""
    rnd = random.Random(rnd_seed)
    base = b"".join(encode5(p) for p in seed)
    for _ in range(100):
        _decode(mutate(base, rnd), rnd)

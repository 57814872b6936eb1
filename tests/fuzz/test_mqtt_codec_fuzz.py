"""Fuzzing the MQTT codec with ≥ 1,000,000 inputs (slow suite, issue 14).

Whatever bytes arrive, ``Decoder`` either returns packets or raises ``ProtocolError``
(the connection then closes, MQTT-4.8.0-1): never IndexError, ValueError, RecursionError
or anything else, which would end the connection task with a traceback instead."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.codec import Decoder, ProtocolError, encode
from oxiedge.mqtt.packets import Packet
from tests.fuzz.mutate import chunks, mutate
from tests.mqtt.test_codec import packets

SEEDS = 2_000
MUTATIONS = 500  # per seed: 2,000 x (500 + 1) = 1,002,000 inputs
_count = [0]


def _decode(data: bytes, rnd: random.Random) -> None:
    d = Decoder(max_packet_size=rnd.choice((64, 4096, 1 << 20)),
                max_topic_levels=rnd.choice((2, 200)), max_topic_length=rnd.choice((8, 4096)))
    d.mqtt31 = rnd.random() < 0.2
    try:
        for piece in chunks(data, rnd):
            d.feed(piece)
            while d.next_item() is not None:
                pass
    except ProtocolError:
        pass
    _count[0] += 1


@settings(max_examples=SEEDS, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(packets, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def _fuzz(seed: list[Packet], rnd_seed: int) -> None:
    # The mutations' randomness comes from one drawn seed (drawing each random number
    # from Hypothesis would overrun its buffer after a few hundred mutations).
    rnd = random.Random(rnd_seed)
    base = b"".join(encode(p) for p in seed)
    _decode(base, rnd)
    for _ in range(MUTATIONS):
        _decode(mutate(base, rnd), rnd)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_mqtt_decoder_survives_a_million_mutated_streams() -> None:
    _count[0] = 0
    _fuzz()
    assert _count[0] >= 1_000_000, _count[0]


@settings(max_examples=20, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(packets, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_mqtt_decoder_fuzz_smoke(seed: list[Packet], rnd_seed: int) -> None:
    """The same engine, 20 x 100 inputs, in the default suite."""
    rnd = random.Random(rnd_seed)
    base = b"".join(encode(p) for p in seed)
    for _ in range(100):
        _decode(mutate(base, rnd), rnd)

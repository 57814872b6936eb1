"""Cheap deterministic mutations of valid protocol streams (the codec fuzzers' engine).

Hypothesis draws the valid seeds and the ``random.Random`` (so a failure shrinks and
replays); each seed is then mutated many times here, far faster than Hypothesis could draw
each input, which is what makes a million inputs per codec affordable in the slow suite.
"""

from __future__ import annotations

import random

_INTERESTING = (0x00, 0x01, 0x02, 0x7F, 0x80, 0xCE, 0xFE, 0xFF)


def mutate(data: bytes, rnd: random.Random) -> bytes:
    """One to four random edits of ``data``: flips, interesting bytes, inserts, deletes,
    truncation, duplicated slices, or plain garbage."""
    out = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(8)
        n = len(out)
        if op == 0 and n:
            out[rnd.randrange(n)] ^= 1 << rnd.randrange(8)
        elif op == 1 and n:
            out[rnd.randrange(n)] = rnd.choice(_INTERESTING)
        elif op == 2:
            at = rnd.randint(0, n)
            out[at:at] = rnd.randbytes(rnd.randint(1, 8))
        elif op == 3 and n:
            at = rnd.randrange(n)
            del out[at : at + rnd.randint(1, 8)]
        elif op == 4 and n:
            del out[rnd.randint(0, n) :]
        elif op == 5 and n:
            at = rnd.randrange(n)
            piece = out[at : at + rnd.randint(1, 32)]
            dest = rnd.randint(0, n)
            out[dest:dest] = piece
        elif op == 6 and n:
            at = rnd.randrange(n)
            out[at : at + 4] = b"\xff\xff\xff\x7f"[: rnd.randint(1, 4)]
        else:
            out += rnd.randbytes(rnd.randint(1, 64))
    return bytes(out)


def chunks(data: bytes, rnd: random.Random) -> list[bytes]:
    """``data`` split at random points (a socket delivers arbitrary pieces)."""
    if len(data) < 2 or rnd.random() < 0.5:
        return [data]
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randint(1, 4))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

"""The checked-in ``oxiedge/amqp/spec.py`` is exactly what ``tools/gen_amqp.py`` generates."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from oxiedge.amqp import spec

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # type: ignore[no-untyped-def]
    path = ROOT / "tools" / "gen_amqp.py"
    mod_spec = importlib.util.spec_from_file_location("gen_amqp", path)
    assert mod_spec and mod_spec.loader
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _spec_json(gen: Any) -> dict[str, Any]:
    """The machine-readable spec lives in ../shared beside the checkout (as in CI)."""
    path = Path(gen.DEFAULT_SPEC)
    if not path.exists():
        pytest.skip(f"AMQP spec not found at {path} (shared/ is not beside this checkout)")
    return json.loads(path.read_text())  # type: ignore[no-any-return,unused-ignore]


def test_checked_in_module_matches_generator() -> None:
    gen = _generator()
    text = gen.generate(_spec_json(gen))
    assert (ROOT / "oxiedge" / "amqp" / "spec.py").read_text() == text


def test_ids_and_flags_follow_spec() -> None:
    assert (spec.BasicPublish.CLASS_ID, spec.BasicPublish.METHOD_ID) == (60, 40)
    assert spec.BasicPublish.HAS_CONTENT and not spec.BasicAck.HAS_CONTENT
    assert (spec.ConfirmSelect.CLASS_ID, spec.ConfirmSelect.METHOD_ID) == (85, 10)
    assert (spec.BasicNack.CLASS_ID, spec.BasicNack.METHOD_ID) == (60, 120)
    # RabbitMQ's exchange.unbind-ok really is 51 (not 41) in the spec.
    assert spec.ExchangeUnbindOk.METHOD_ID == 51
    assert spec.METHODS[(50 << 16) | 10] is spec.QueueDeclare
    assert len(spec.PROPERTY_NAMES) == 14
    assert spec.NOT_IMPLEMENTED == 540 and spec.FRAME_END == 206


def test_bit_packing_shares_one_octet() -> None:
    m = spec.QueueDeclare(
        queue="q", passive=False, durable=True, exclusive=True, auto_delete=False, nowait=True
    )
    raw = m.encode_args()
    # ticket(2) + shortstr "q"(2) + one octet of bits + empty table(4)
    assert raw == b"\x00\x00\x01q" + bytes([0b10110]) + b"\x00\x00\x00\x00"
    assert spec.QueueDeclare.decode_args(raw) == m


def test_basic_properties_flags() -> None:
    props = spec.BasicProperties(content_type="text/plain", delivery_mode=2)
    assert props.encode() == b"\x90\x00\x0atext/plain\x02"
    decoded, off = spec.BasicProperties.decode(props.encode())
    assert decoded == props and off == 14
    assert spec.BasicProperties().encode() == b"\x00\x00"


def test_arguments_follow_spec_order_and_types() -> None:
    import dataclasses

    gen = _generator()
    raw = _spec_json(gen)
    domains = dict(raw["domains"])
    for klass in raw["classes"]:
        for method in klass["methods"]:
            cls = spec.METHODS[(klass["id"] << 16) | method["id"]]
            expected = tuple(
                (a["name"].replace("-", "_") + ("_" if a["name"] == "global" else ""),
                 a.get("type") or domains[a["domain"]])
                for a in method["arguments"])
            assert expected == cls.ARGUMENTS, cls.NAME
            assert tuple(f.name for f in dataclasses.fields(cls)) == tuple(n for n, _ in expected)


def test_checked_in_constants_match_generator() -> None:
    """Reply codes live only in the generated ``constants.py`` (re-exported by ``spec``)."""
    gen = _generator()
    text = gen.generate_constants(_spec_json(gen))
    assert (ROOT / "oxiedge" / "amqp" / "constants.py").read_text() == text
    assert spec.NOT_FOUND == 404 and spec.NOT_FOUND in spec.SOFT_ERRORS
    assert spec.FRAME_ERROR not in spec.SOFT_ERRORS
    assert spec.REPLY_NAMES[spec.PRECONDITION_FAILED] == "PRECONDITION_FAILED"

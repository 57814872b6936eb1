"""docs/mqtt5.md's tables of properties and reason codes are the codec's own tables."""

from __future__ import annotations

from pathlib import Path

from oxiedge.mqtt.packets import PacketType
from oxiedge.mqtt.properties import SPECS, WILL
from oxiedge.mqtt.reasons import TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "mqtt5.md"
_TYPES = {1: "Byte", 2: "Two Byte Integer", 4: "Four Byte Integer", 5: "Variable Byte Integer",
          6: "UTF-8 String", 7: "Binary Data", 8: "UTF-8 String Pair"}  # fmt: skip
_CONTEXTS = [(WILL, "Will")] + [(int(t), t.name) for t in PacketType]


def _contexts(bits: int) -> str:
    return ", ".join(name for ctx, name in _CONTEXTS if bits & (1 << ctx)) or "-"


def property_table() -> str:
    rows = ["| id | property | type | packets | more than once in |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| 0x{s.ident:02X} | {s.name} | {_TYPES[s.kind]} | {_contexts(s.contexts)} "
             f"| {_contexts(s.repeats)} |" for s in sorted(SPECS.values(), key=lambda s: s.ident)]
    return "\n".join(rows) + "\n"


def reason_table() -> str:
    rows = ["| code | name | packets |", "| --- | --- | --- |"]
    rows += [f"| 0x{code:02X} | {name} | {', '.join(p.name for p in packets)} |"
             for code, name, packets in TABLE]
    return "\n".join(rows) + "\n"


def test_the_property_table_is_the_codecs() -> None:
    assert property_table() in DOC.read_text(), "docs/mqtt5.md:\n" + property_table()


def test_the_reason_code_table_is_the_codecs() -> None:
    assert reason_table() in DOC.read_text(), "docs/mqtt5.md:\n" + reason_table()


MQTT_DOC = DOC.parent / "mqtt.md"


def test_mqtt_md_says_what_oxiedge_does_with_every_property_and_reason_code() -> None:
    text = MQTT_DOC.read_text()
    props = text[text.index("### Every MQTT 5 property"):text.index("### Every MQTT 5 reason")]
    missing = [s.name for s in SPECS.values() if f"| 0x{s.ident:02X} | {s.name} |" not in props]
    assert not missing, missing
    codes = text[text.index("| code | name | oxiedge |"):]
    codes = codes[:codes.index("\n\n")]
    listed = {int(c, 16) for row in codes.splitlines()[2:]
              for c in row.split("|")[1].replace(",", " ").split()}  # fmt: skip
    assert {code for code, _name, _packets in TABLE} == listed

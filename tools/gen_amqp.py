#!/usr/bin/env python3
"""Generate ``oxiedge/amqp/spec.py`` and ``constants.py`` from the AMQP 0-9-1 spec (JSON).

Usage::

    python tools/gen_amqp.py [--spec PATH] [--out PATH] [--check]

The output is checked in; ``tests/amqp/test_spec_generated.py`` fails when it differs from
what this script produces, so the method layer cannot drift from the spec (class/method ids,
argument order and types).  Every method becomes a frozen, slotted dataclass with
``encode_args()`` and ``decode_args(buf, off)``; consecutive ``bit`` arguments share octets
(spec 4.2.5.2, "bits are packed into octets").  The basic class's 14 content properties
become ``BasicProperties`` with the 16-bit property-flags word (spec 4.2.6.1).
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = ROOT.parent / "shared" / "spec" / "amqp-rabbitmq-0.9.1.json"
DEFAULT_OUT = ROOT / "oxiedge" / "amqp" / "spec.py"

# Python annotation and zero default per wire type.
PY_TYPE = {
    "bit": ("bool", "False"),
    "octet": ("int", "0"),
    "short": ("int", "0"),
    "long": ("int", "0"),
    "longlong": ("int", "0"),
    "timestamp": ("int", "0"),
    "shortstr": ("str", '""'),
    "longstr": ("bytes", 'b""'),
    "table": ("dict[str, Any]", None),
}
STRUCT = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}


def camel(name: str) -> str:
    """``recover-async`` -> ``RecoverAsync``."""
    return "".join(part.capitalize() for part in name.split("-"))


def ident(name: str) -> str:
    """A spec name as a Python identifier (``global`` is a keyword)."""
    out = name.replace("-", "_")
    return out + "_" if keyword.iskeyword(out) else out


def resolve(arg: dict[str, Any], domains: dict[str, str]) -> str:
    if "type" in arg:
        return str(arg["type"])
    return domains[arg["domain"]]


def py_default(wire: str, arg: dict[str, Any]) -> str:
    """The dataclass default: the spec's default-value when given, else the type's zero."""
    value = arg.get("default-value")
    if wire == "table":
        return "field(default_factory=dict)"
    if value is None:
        return PY_TYPE[wire][1] or "None"
    if wire == "bit":
        return "True" if value else "False"
    if wire == "longstr":
        return repr(str(value).encode())
    if wire == "shortstr":
        return json.dumps(str(value))
    return repr(int(value))


def group_args(args: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Split arguments into runs: a run of up to 8 consecutive bits, or a single field."""
    groups: list[list[tuple[str, str]]] = []
    for name, wire in args:
        if wire == "bit" and groups and groups[-1][0][1] == "bit" and len(groups[-1]) < 8:
            groups[-1].append((name, wire))
        else:
            groups.append([(name, wire)])
    return groups


def gen_encode(args: list[tuple[str, str]]) -> list[str]:
    if not args:
        return ["    def encode_args(self) -> bytes:", '        return b""']
    parts: list[str] = []
    for group in group_args(args):
        name, wire = group[0]
        if wire == "bit":
            terms = [f"({1 << i} if self.{n} else 0)" for i, (n, _) in enumerate(group)]
            if len(terms) == 1:
                parts.append(f"_B.pack({terms[0][1:-1]})")
            else:
                inner = "\n                | ".join(terms)
                parts.append(f"_B.pack(\n                {inner}\n            )")
        elif wire in STRUCT:
            parts.append(f"_{STRUCT[wire]}.pack(self.{name})")
        elif wire == "shortstr":
            parts.append(f"encode_shortstr(self.{name})")
        elif wire == "longstr":
            parts.append(f"encode_longstr(self.{name})")
        elif wire == "table":
            parts.append(f"encode_table(self.{name})")
        else:
            raise ValueError(wire)
    lines = ["    def encode_args(self) -> bytes:", "        return b\"\".join(("]
    lines += [f"            {p}," for p in parts]
    lines.append("        ))")
    return lines


def gen_decode(cls_name: str, args: list[tuple[str, str]]) -> list[str]:
    lines = [
        "    @classmethod",
        f"    def decode_args(cls, buf: bytes, off: int = 0) -> {cls_name}:",
    ]
    if not args:
        lines.append("        return cls()")
        return lines
    for group in group_args(args):
        name, wire = group[0]
        if wire == "bit":
            lines.append("        bits = buf[off]")
            lines.append("        off += 1")
            for i, (n, _) in enumerate(group):
                lines.append(f"        {n} = bool(bits & {1 << i})")
        elif wire in STRUCT:
            size = {"B": 1, "H": 2, "I": 4, "Q": 8}[STRUCT[wire]]
            lines.append(f"        {name} = _{STRUCT[wire]}.unpack_from(buf, off)[0]")
            lines.append(f"        off += {size}")
        elif wire == "shortstr":
            lines.append(f"        {name}, off = decode_shortstr(buf, off)")
        elif wire == "longstr":
            lines.append(f"        {name}, off = decode_longstr(buf, off)")
        elif wire == "table":
            lines.append(f"        {name}, off = decode_table(buf, off)")
    call = ", ".join(n for n, _ in args)
    if len(call) <= 80:
        lines.append(f"        return cls({call})")
    else:
        lines.append("        return cls(")
        lines += [f"            {n}," for n, _ in args]
        lines.append("        )")
    return lines


def generate_constants(spec: dict[str, Any]) -> str:
    """``oxiedge/amqp/constants.py``: frame types, frame-end, reply codes, and the reply
    codes' classes (spec 1.2: a soft error closes a channel, a hard one the connection)."""
    name = {c["name"]: c["name"].replace("-", "_") for c in spec["constants"]}
    errors = [c for c in spec["constants"] if c.get("class") in ("soft-error", "hard-error")]
    out = [
        '"""AMQP 0-9-1 constants: frame types, frame-end, reply codes and their classes.',
        "",
        "GENERATED by tools/gen_amqp.py from shared/spec/amqp-rabbitmq-0.9.1.json: do not edit,",
        "re-run the generator.  ``oxiedge.amqp.spec`` re-exports every name.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
    ]
    out += [f"{name[c['name']]} = {c['value']}" for c in spec["constants"]]
    out += ["", "#: Reply codes of the spec's ``soft-error`` class (channel exceptions).",
            "SOFT_ERRORS = frozenset({"]
    out += [f"    {name[c['name']]}," for c in errors if c["class"] == "soft-error"]
    out += ["})", "", "#: Every error reply code's name (the first word of a reply text).",
            "REPLY_NAMES = {"]
    out += [f'    {name[c["name"]]}: "{name[c["name"]]}",' for c in errors]
    out += ["}", ""]
    return "\n".join(out)


def generate(spec: dict[str, Any]) -> str:
    domains = {name: wire for name, wire in spec["domains"]}
    out: list[str] = [
        '"""AMQP 0-9-1 methods and basic content properties (with RabbitMQ\'s extensions).',
        "",
        "GENERATED by tools/gen_amqp.py from shared/spec/amqp-rabbitmq-0.9.1.json: do not edit,",
        "re-run the generator.  Decoders may raise IndexError/struct.error on truncated input;",
        "``oxiedge.amqp.codec`` translates those into AmqpError 502 at its boundary.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import struct",
        "from abc import ABC, abstractmethod",
        "from dataclasses import dataclass, field",
        "from typing import Any, ClassVar",
        "",
        "from oxiedge.amqp.fields import (",
        "    decode_longstr,",
        "    decode_shortstr,",
        "    decode_table,",
        "    encode_longstr,",
        "    encode_shortstr,",
        "    encode_table,",
        ")",
        "",
        '_B = struct.Struct(">B")',
        '_H = struct.Struct(">H")',
        '_I = struct.Struct(">I")',
        '_Q = struct.Struct(">Q")',
        "",
        f"VERSION = ({spec['major-version']}, {spec['minor-version']}, {spec['revision']})",
        f"PORT = {spec['port']}",
        "",
        "# -- constants (frame types, frame-end, reply codes): generated into constants.py",
        "# (which imports nothing, so errors.py can use them without an import cycle)",
        "from oxiedge.amqp.constants import *  # noqa: E402, F403",
    ]
    out += [
        "",
        "",
        "@dataclass(frozen=True, slots=True)",
        "class Method(ABC):",
        '    """Base of every generated method: ids, flags and the argument codec."""',
        "",
        "    CLASS_ID: ClassVar[int] = 0",
        "    METHOD_ID: ClassVar[int] = 0",
        '    NAME: ClassVar[str] = ""',
        "    SYNCHRONOUS: ClassVar[bool] = False",
        "    HAS_CONTENT: ClassVar[bool] = False",
        "    #: ``(field name, wire type)`` in spec order (bit, octet, short, long, longlong,",
        "    #: timestamp, shortstr, longstr, table).",
        "    ARGUMENTS: ClassVar[tuple[tuple[str, str], ...]] = ()",
        "",
        "    @abstractmethod",
        "    def encode_args(self) -> bytes:",
        '        """The method\'s argument bytes (after the class and method ids)."""',
        "",
        "    @classmethod",
        "    @abstractmethod",
        "    def decode_args(cls, buf: bytes, off: int = 0) -> Method:",
        '        """Decode the arguments that start at ``off``."""',
    ]
    registry: list[tuple[int, int, str]] = []
    for klass in spec["classes"]:
        for method in klass["methods"]:
            cls_name = camel(klass["name"]) + camel(method["name"])
            registry.append((klass["id"], method["id"], cls_name))
            args = [(ident(a["name"]), resolve(a, domains)) for a in method["arguments"]]
            out += [
                "",
                "",
                "@dataclass(frozen=True, slots=True)",
                f"class {cls_name}(Method):",
                f'    """{klass["name"]}.{method["name"]} ({klass["id"]}, {method["id"]})."""',
                "",
                f"    CLASS_ID: ClassVar[int] = {klass['id']}",
                f"    METHOD_ID: ClassVar[int] = {method['id']}",
                f'    NAME: ClassVar[str] = "{klass["name"]}.{method["name"]}"',
                f"    SYNCHRONOUS: ClassVar[bool] = {bool(method.get('synchronous', False))}",
                f"    HAS_CONTENT: ClassVar[bool] = {bool(method.get('content', False))}",
            ]
            if args:
                out.append("    ARGUMENTS: ClassVar[tuple[tuple[str, str], ...]] = (")
                out += [f'        ("{n}", "{w}"),' for n, w in args]
                out += ["    )", ""]
            else:
                out.append("    ARGUMENTS: ClassVar[tuple[tuple[str, str], ...]] = ()")
            for arg, (name, wire) in zip(method["arguments"], args, strict=True):
                out.append(f"    {name}: {PY_TYPE[wire][0]} = {py_default(wire, arg)}")
            out.append("")
            out += gen_encode(args)
            out.append("")
            out += gen_decode(cls_name, args)
    out += [
        "",
        "",
        "#: ``(class_id << 16) | method_id`` -> method class.",
        "METHODS: dict[int, type[Method]] = {",
    ]
    for cid, mid, cls_name in registry:
        out.append(f"    0x{(cid << 16) | mid:08X}: {cls_name},")
    out.append("}")
    out += gen_properties(spec, domains)
    return "\n".join(out) + "\n"


def gen_properties(spec: dict[str, Any], domains: dict[str, str]) -> list[str]:
    basic = next(c for c in spec["classes"] if c["name"] == "basic")
    props = [(ident(p["name"]), resolve(p, domains)) for p in basic["properties"]]
    assert len(props) <= 15, "more than one property-flags word is not generated"
    out = [
        "",
        "",
        "@dataclass(frozen=True, slots=True)",
        "class BasicProperties:",
        '    """The basic class content-header properties; ``None`` means "absent".',
        "",
        "    Property ``i`` (spec order) is flagged by bit ``15 - i`` of the flags word; bit 0",
        "    would announce a further flags word, which the basic class never needs.",
        '    """',
        "",
        f"    CLASS_ID: ClassVar[int] = {basic['id']}",
        "",
    ]
    for name, wire in props:
        ann = PY_TYPE[wire][0]
        out.append(f"    {name}: {ann} | None = None")
    out += ["", "    def encode(self) -> bytes:", '        """Flags word + present properties."""']
    out.append("        flags = 0")
    out.append("        parts: list[bytes] = []")
    for i, (name, wire) in enumerate(props):
        bit = 1 << (15 - i)
        out.append(f"        if self.{name} is not None:")
        out.append(f"            flags |= 0x{bit:04X}")
        if wire in STRUCT:
            out.append(f"            parts.append(_{STRUCT[wire]}.pack(self.{name}))")
        elif wire == "shortstr":
            out.append(f"            parts.append(encode_shortstr(self.{name}))")
        elif wire == "longstr":
            out.append(f"            parts.append(encode_longstr(self.{name}))")
        elif wire == "table":
            out.append(f"            parts.append(encode_table(self.{name}))")
        else:
            raise ValueError(wire)
    out.append("        return _H.pack(flags) + b\"\".join(parts)")
    out += [
        "",
        "    @classmethod",
        "    def decode(cls, buf: bytes, off: int = 0) -> tuple[BasicProperties, int]:",
        '        """Decode flags + properties at ``off``; returns ``(props, offset after)``."""',
        "        flags = _H.unpack_from(buf, off)[0]",
        "        off += 2",
        "        values: dict[str, Any] = {}",
    ]
    for i, (name, wire) in enumerate(props):
        bit = 1 << (15 - i)
        out.append(f"        if flags & 0x{bit:04X}:")
        if wire in STRUCT:
            size = {"B": 1, "H": 2, "I": 4, "Q": 8}[STRUCT[wire]]
            out.append(f"            values[{name!r}] = _{STRUCT[wire]}.unpack_from(buf, off)[0]")
            out.append(f"            off += {size}")
        elif wire == "shortstr":
            out.append(f"            values[{name!r}], off = decode_shortstr(buf, off)")
        elif wire == "longstr":
            out.append(f"            values[{name!r}], off = decode_longstr(buf, off)")
        elif wire == "table":
            out.append(f"            values[{name!r}], off = decode_table(buf, off)")
    out.append("        return cls(**values), off")
    out += ["", "", "PROPERTY_NAMES = ("]
    out += [f'    "{n}",' for n, _ in props]
    out.append(")")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is stale")
    opts = parser.parse_args(argv)
    spec = json.loads(opts.spec.read_text())
    outputs = {opts.out: generate(spec),
               opts.out.parent / "constants.py": generate_constants(spec)}
    if opts.check:
        stale = [p for p, text in outputs.items()
                 if (p.read_text() if p.exists() else "") != text]
        for p in stale:
            print(f"{p} is stale; run tools/gen_amqp.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in outputs.items():
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

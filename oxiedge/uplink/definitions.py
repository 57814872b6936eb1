"""Uplink definitions: parsing and validation, the stored form and the config file.

An uplink comes from ``oxiedge uplink add`` (a ``{"_kind": "uplink"}`` document in
``_config``, live and persistent) or from the ``[uplink.NAME]`` tables of the TOML file named
by ``--config`` / ``OXIEDGE_CONFIG`` (configuration, not stored; it wins over a stored
uplink of the same name). Every source goes through ``parse_definition``, so a bad value is
reported the same way everywhere: ``UplinkError`` naming the uplink and the option.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..mqtt.topics import topic_filter_problem
from ..sizes import parse_size
from ..store import Store
from ..topicmap import mqtt_to_routing_key
from .link import Endpoint, UplinkError, parse_endpoint

CONFIG = "_config"
KIND = "uplink"
POLICIES = ("drop-oldest", "block")
QUEUE_TYPES = ("quorum", "classic")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
DEVICE_ID = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


@dataclass(frozen=True, slots=True)
class UplinkDef:
    """One uplink as configured (validated)."""

    name: str
    urls: tuple[str, ...]
    out: tuple[str, ...] = ()
    inbound: tuple[str, ...] = ()
    exchange: str = "amq.topic"
    prefix: str = ""
    ca_file: str | None = None
    window: int = 256
    heartbeat: float = 30.0
    max_messages: int = 1_000_000
    max_bytes: int = 512 << 20
    policy: str = "drop-oldest"
    queue_type: str = "quorum"
    source: str = field(default="store", compare=False)
    # Upstream-side filters (MQTT syntax, prefix applied with "{device}" kept) that earlier
    # versions of this uplink subscribed/bound and this one does not: dropped on connect.
    retired_in: tuple[str, ...] = field(default=(), compare=False)

    @property
    def endpoints(self) -> list[Endpoint]:
        return [parse_endpoint(u) for u in self.urls]

    @property
    def protocol(self) -> str:
        return self.endpoints[0].protocol

    def document(self) -> dict[str, Any]:
        """The stored ``_config`` document."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("source", "retired_in")}
        doc["in"] = list(doc.pop("inbound"))
        doc["urls"], doc["out"] = list(self.urls), list(self.out)
        if self.retired_in:
            doc["retired_in"] = list(self.retired_in)
        return {"_kind": KIND, **doc}

    def row(self) -> dict[str, Any]:
        """What ``uplink list`` shows (passwords hidden)."""
        return {"name": self.name, "urls": [e.redacted() for e in self.endpoints],
                "out": list(self.out), "in": list(self.inbound), "prefix": self.prefix,
                "exchange": self.exchange if self.protocol == "amqp" else None,
                "window": self.window, "heartbeat": self.heartbeat,
                "max_messages": self.max_messages, "max_bytes": self.max_bytes,
                "policy": self.policy, "source": self.source}


_KEYS = {"name", "urls", "url", "out", "in", "inbound", "exchange", "prefix", "ca_file",
         "window", "heartbeat", "max_messages", "max_bytes", "policy", "queue_type",
         "retired_in"}


def _check_amqp_names(name: str, prefix: str, out: tuple[str, ...],
                      inbound: tuple[str, ...]) -> None:
    """An AMQP uplink turns ``prefix + topic`` into a routing key (``/`` → ``.``): a prefix or
    filter that has no such form would make the uplink forward nothing, silently."""
    sample = prefix.replace("{device}", "device")
    if mqtt_to_routing_key(sample + "x") is None:
        raise UplinkError(f"uplink {name!r}: prefix {prefix!r} has no AMQP routing-key form "
                          "(write it with / between words, e.g. 'site/{device}/'; no '.', "
                          "no empty level)")
    for key, filters in (("out", out), ("in", inbound)):
        for f in filters:
            if mqtt_to_routing_key(sample + f.replace("+", "w").replace("#", "w")) is None:
                raise UplinkError(f"uplink {name!r}: --{key} filter {f!r} has no AMQP "
                                  "routing-key form (no '.', no empty level)")


def _strings(name: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise UplinkError(f"uplink {name!r}: {key} must be a list of strings")
    out: list[str] = []
    for v in value:
        if v not in out:
            out.append(v)
    return tuple(out)


def _number(name: str, key: str, value: Any, lo: float, hi: float, kind: type) -> Any:
    try:
        number = kind(value)
        if isinstance(value, bool) or (kind is int and float(value) != number):
            raise ValueError
    except (TypeError, ValueError):
        raise UplinkError(f"uplink {name!r}: {key} must be a number, not {value!r}") from None
    if not lo <= number <= hi:
        raise UplinkError(f"uplink {name!r}: {key} {number} out of range {lo}-{hi}")
    return number


def parse_definition(spec: dict[str, Any], source: str = "store",
                     check_files: bool = True) -> UplinkDef:
    """Validate a definition from the CLI, the admin socket, a document or the config file.

    ``check_files=False`` (stored definitions at start-up) skips the CA file's existence
    check: a file missing for a while must not make the uplink - and its backlog -
    disappear; the link reports it on every connection attempt instead."""
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise UplinkError(f"invalid uplink name {name!r}: 1-64 characters from A-Z a-z 0-9 "
                          "_ . -, not starting with . or -")
    unknown = sorted(set(spec) - _KEYS - {"_kind", "_id", "_version"})
    if unknown:
        raise UplinkError(f"uplink {name!r}: unknown option(s) {', '.join(unknown)}")
    urls = _strings(name, "urls", spec.get("urls")) + _strings(name, "url", spec.get("url"))
    if not urls:
        raise UplinkError(f"uplink {name!r}: no upstream URL")
    endpoints = [parse_endpoint(u) for u in urls]
    if len({e.protocol for e in endpoints}) > 1:
        raise UplinkError(f"uplink {name!r}: all URLs must use one protocol (amqp or mqtt)")
    out = _strings(name, "out", spec.get("out"))
    inbound = _strings(name, "in", spec.get("in", spec.get("inbound")))
    if not out and not inbound:
        raise UplinkError(f"uplink {name!r}: give at least one --out or --in topic filter")
    for key, filters in (("out", out), ("in", inbound)):
        for f in filters:
            problem = topic_filter_problem(f)
            if problem is not None:
                raise UplinkError(f"uplink {name!r}: invalid --{key} filter {f!r}: {problem}")
    prefix = spec.get("prefix") or ""
    if not isinstance(prefix, str) or any(c in prefix for c in "+#\x00"):
        raise UplinkError(f"uplink {name!r}: prefix {prefix!r} must be text without + # or NUL")
    if endpoints[0].protocol == "amqp":
        _check_amqp_names(name, prefix, out, inbound)
    exchange = spec.get("exchange") or "amq.topic"
    if not isinstance(exchange, str) or len(exchange.encode()) > 255:
        raise UplinkError(f"uplink {name!r}: invalid exchange {exchange!r}")
    ca_file = spec.get("ca_file") or None
    if check_files and ca_file is not None and not Path(str(ca_file)).expanduser().is_file():
        raise UplinkError(f"uplink {name!r}: CA file {ca_file!r} does not exist")
    policy = spec.get("policy") or "drop-oldest"
    if policy not in POLICIES:
        raise UplinkError(f"uplink {name!r}: policy must be one of {', '.join(POLICIES)}")
    queue_type = spec.get("queue_type") or "quorum"
    if queue_type not in QUEUE_TYPES:
        raise UplinkError(f"uplink {name!r}: queue_type must be one of {', '.join(QUEUE_TYPES)}")
    max_bytes: Any = spec.get("max_bytes")
    if isinstance(max_bytes, str):
        try:
            max_bytes = parse_size(max_bytes)
        except ValueError as exc:
            raise UplinkError(f"uplink {name!r}: max_bytes: {exc}") from None
    defaults = UplinkDef(name, urls)
    return UplinkDef(
        name=name, urls=urls, out=out, inbound=inbound, exchange=exchange, prefix=prefix,
        ca_file=str(Path(str(ca_file)).expanduser()) if ca_file else None,
        window=_number(name, "window", spec.get("window", defaults.window), 1, 65535, int),
        heartbeat=_number(name, "heartbeat", spec.get("heartbeat", defaults.heartbeat), 0.5,
                          3600, float),
        max_messages=_number(name, "max_messages",
                             spec.get("max_messages") or defaults.max_messages, 1, 1 << 40, int),
        max_bytes=_number(name, "max_bytes", max_bytes or defaults.max_bytes, 1024, 1 << 50, int),
        policy=policy, queue_type=queue_type, source=source,
        retired_in=tuple(f for f in _strings(name, "retired_in", spec.get("retired_in"))
                         if topic_filter_problem(f) is None))


def retired_filters(old: UplinkDef, new: UplinkDef) -> tuple[str, ...]:
    """Upstream-side ``--in`` filters (prefix applied, ``{device}`` kept) that ``old`` or its
    predecessors had and ``new`` has not: the link unbinds/unsubscribes them."""
    keep = {new.prefix + f for f in new.inbound}
    return tuple(dict.fromkeys(f for f in [*old.retired_in, *(old.prefix + f for f in old.inbound)]
                               if f not in keep))


def check_device_id(device_id: str) -> str:
    """``device_id`` if valid (it becomes part of queue names, client ids and topics)."""
    if not DEVICE_ID.match(device_id):
        raise UplinkError(f"--device-id (OXIEDGE_DEVICE_ID): invalid device id {device_id!r}: "
                          "1-64 characters from A-Z a-z 0-9 _ -")
    return device_id


# ------------------------------------------------------------------ stored
def stored_definitions(store: Store, log: Any = None) -> list[tuple[int, UplinkDef]]:
    """``(doc id, definition)`` of every stored uplink; a broken one is skipped (and
    logged when ``log`` is given); ``stored_names`` still lists it."""
    out = []
    for doc in store.find(CONFIG, {"_kind": KIND}):
        try:
            out.append((int(doc["_id"]), parse_definition(doc, check_files=False)))
        except (UplinkError, ValueError, TypeError, KeyError) as exc:  # never a crash-loop
            if log is not None:
                log.error("uplink %s: stored definition is invalid, not started (its "
                          "outbox is kept): %s", doc.get("name"), exc)
    return out


def redact_documents(coll: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``docs`` as shown to `oxiedge find`: stored uplinks' URLs without their passwords."""
    if coll != CONFIG:
        return docs
    out = []
    for doc in docs:
        if doc.get("_kind") == KIND and isinstance(doc.get("urls"), list):
            doc = {**doc, "urls": [_redact_url(u) for u in doc["urls"]]}
        out.append(doc)
    return out


def _redact_url(url: Any) -> Any:
    try:
        return parse_endpoint(str(url)).redacted()
    except UplinkError as exc:
        return f"<invalid URL: {exc}>"


def stored_names(store: Store) -> set[str]:
    """Names of every stored uplink document, valid or not."""
    return {str(doc.get("name")) for doc in store.find(CONFIG, {"_kind": KIND})}


def load_config_file(path: Path) -> list[UplinkDef]:
    """The ``[uplink.NAME]`` tables of a TOML config file (other tables are an error)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise UplinkError(f"config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UplinkError(f"config file {path}: {exc}") from None
    unknown = sorted(set(data) - {"uplink"})
    if unknown:
        raise UplinkError(f"config file {path}: unknown table(s) {', '.join(unknown)} "
                          "(supported: [uplink.NAME])")
    tables = data.get("uplink", {})
    if not isinstance(tables, dict):
        raise UplinkError(f"config file {path}: [uplink] must hold [uplink.NAME] tables")
    defs = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise UplinkError(f"config file {path}: uplink.{name} must be a table")
        defs.append(parse_definition({**table, "name": name}, source="config"))
    return defs

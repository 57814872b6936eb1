"""The uplink manager: local messages into durable outboxes, the uplinks, commands back.

Theory of operation
-------------------
The uplink outboxes are destinations of the bus (``oxiedge/bus.py``): for every publish of
the MQTT topic space (an MQTT client's, or an AMQP client's to ``amq.topic``) the bus asks
``targets`` which uplinks' ``--out`` filters match, and stages the message into each one's
outbox (``outbox.py``) in the same round, so the publishing connection awaits the same group
commit before its PUBACK / confirm: a locally acknowledged message is already queued for
upstream. Which uplinks a topic goes to, and whether it has a name upstream (an AMQP
routing key) there, is cached per topic.

Each uplink (``uplink.py``) runs one task that connects, forwards and reconnects; inbound
commands come back through ``deliver``, which publishes them on the bus with the uplink as
their origin (so, by the bus's one echo rule, a command is never queued back to that
uplink) and awaits their commit before the link acknowledges them upstream. The admin
operations (``uplink add|remove|list|status``) and their offline forms (no server
running) are here too.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from typing import Any

import trio

from ..mqtt.topics import topic_matches
from ..staged import COMMIT, MessageProps, Publisher
from .definitions import (
    CONFIG,
    KIND,
    UplinkDef,
    parse_definition,
    retired_filters,
    stored_definitions,
    stored_names,
)
from .link import (
    LinkError,
    UplinkError,
)
from .outbox import Outbox, stored_outbox_names
from .ports import AppView
from .uplink import Uplink

_TOPIC_CACHE = 4096


def default_device_id() -> str:
    """The host name's first label, reduced to the characters a device id may hold."""
    label = socket.gethostname().split(".")[0]
    cleaned = "".join(c if c.isalnum() or c in "_-" else "-" for c in label)[:64]
    return cleaned or "oxiedge"


class UplinkManager:
    """Every uplink of one server (the bus's outbox destinations) and the admin operations."""

    def __init__(self, app: AppView, config_defs: list[UplinkDef], device_id: str,
                 bus: Publisher) -> None:
        self.app = app
        self.bus = bus  # where inbound commands are published
        self.device_id = device_id  # validated by ``oxiedge serve`` before the store opens
        self.config_defs = {d.name: d for d in config_defs}
        self.stored: dict[str, tuple[int, UplinkDef]] = {}
        self.uplinks: dict[str, Uplink] = {}
        # topic -> the uplinks whose --out matches it, each with whether it is routable
        self._cache: dict[str, tuple[tuple[Uplink, bool], ...]] = {}
        self.flush_soon = trio.Event()  # some uplink has deletes waiting for a round
        self._nursery: trio.Nursery | None = None
        self.log: logging.Logger = app.log

    # ------------------------------------------------------------- lifecycle
    async def start(self, nursery: trio.Nursery) -> None:
        """Load definitions, start every uplink's task."""
        self._nursery = nursery
        for doc_id, d in stored_definitions(self.app.store, self.log):
            self.stored[d.name] = (doc_id, d)
        defs = {name: d for name, (_i, d) in self.stored.items()}
        for name, d in self.config_defs.items():
            if name in defs:
                self.log.warning("uplink %s: the config file's definition replaces the stored "
                                 "one", name)
            defs[name] = d
        # An outbox nobody sends (its uplink left the config file, or its stored definition
        # is broken) is kept - never delete data silently - and said once.
        orphans = sorted(stored_outbox_names(self.app.store) - set(defs))
        known = set(defs) | stored_names(self.app.store) if orphans else set()
        for name in orphans:
            waiting = Outbox(self.app.store, name).messages
            self.log.warning("uplink %s is not %s, its outbox keeps %d unsent message(s): "
                             "add it again to send them, or `oxiedge uplink remove %s` to "
                             "discard them", name, "valid" if name in known else "configured",
                             waiting, name)
        for d in defs.values():
            self._start(d)
        nursery.start_soon(self._ticker)
        nursery.start_soon(self._flusher)

    def _start(self, d: UplinkDef, previous: Uplink | None = None) -> Uplink:
        uplink = Uplink(self, d, previous)
        self.uplinks[d.name] = uplink
        self._cache.clear()
        assert self._nursery is not None
        self._nursery.start_soon(uplink.run)
        return uplink

    def _stop(self, name: str) -> Uplink | None:
        uplink = self.uplinks.pop(name, None)
        self._cache.clear()
        if uplink is not None:
            uplink.stop()
        return uplink

    async def _flusher(self) -> None:
        """Commit the tail of confirmed deletes shortly after a burst ends."""
        while True:
            await self.flush_soon.wait()
            self.flush_soon = trio.Event()
            await trio.sleep(0.05)
            for uplink in self.uplinks.values():
                uplink.flush_deletes()

    async def _ticker(self) -> None:
        while True:
            await trio.sleep(1.0)
            now = time.monotonic()
            for uplink in self.uplinks.values():
                uplink.tick(now)

    def startup_line(self) -> str:
        if not self.uplinks:
            return "uplink off - no uplinks"
        return (f"uplink on - {len(self.uplinks)} uplink(s), device id {self.device_id}: "
                + ", ".join(f"{u.name} -> {u.endpoints[0].redacted()}"
                            for u in self.uplinks.values()))

    # ------------------------------------------------- the bus's destinations
    def targets(self, topic: str) -> tuple[tuple[Uplink, bool], ...]:
        """The uplinks whose ``--out`` matches ``topic``, each with whether the topic has an
        upstream name there; cached per topic (the bus stages into them)."""
        targets = self._cache.get(topic)
        if targets is None:
            targets = tuple((u, u.routable(topic)) for u in self.uplinks.values()
                            if any(topic_matches(f, topic) for f in u.definition.out))
            if len(self._cache) >= _TOPIC_CACHE:
                self._cache.clear()
            self._cache[topic] = targets
        return targets

    async def deliver(self, uplink: Uplink, topic: str, payload: bytes,
                      props: MessageProps | None = None) -> None:
        """Publish an inbound command locally (its origin: the uplink; ``props``: its
        MQTT 5 properties) and wait until it is durable."""
        try:
            staged = self.bus.publish(uplink.origin, topic, payload, 1, False, props)
        except ValueError:
            raise LinkError(f"inbound topic {topic!r} cannot be published locally") from None
        if staged & COMMIT:
            await self.app.store.commit()
        uplink.received += 1

    # ------------------------------------------------------------------ admin
    def admin_handlers(self) -> dict[str, Any]:
        return {"uplink.list": self._list, "uplink.add": self._add,
                "uplink.remove": self._remove, "uplink.status": self._status}

    def _list(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        return [u.definition.row() for u in self.uplinks.values()]

    async def _add(self, args: dict[str, Any]) -> dict[str, Any]:
        d = parse_definition(dict(args.get("definition") or {}))
        if d.name in self.config_defs:
            raise UplinkError(f"uplink {d.name!r} comes from the config file; change it there")
        staged = stage_add(self.app.store, d, self.stored.get(d.name))
        if staged is None:
            return {"name": d.name, "state": "present"}
        d, doc_id, state = staged
        await self.app.store.commit()
        self.stored[d.name] = (doc_id, d)
        previous = self._stop(d.name)
        uplink = self._start(d, previous)
        uplink.enforce_bounds()  # new bounds apply at once
        self.log.info("uplink %s %s: %s", d.name, state,
                      ", ".join(e.redacted() for e in d.endpoints))
        return {"name": d.name, "state": state}

    async def _remove(self, args: dict[str, Any]) -> dict[str, Any]:
        name = str(args.get("name", ""))
        if name in self.config_defs:
            raise UplinkError(f"uplink {name!r} comes from the config file; remove it there")
        uplink = self._stop(name)
        # The running outbox knows records staged but not committed yet; a scan would not.
        result = stage_remove(self.app.store, name, uplink.outbox if uplink else None)
        await self.app.store.commit()
        self.stored.pop(name, None)
        self.log.info("uplink %s removed (%d unsent message(s) discarded)", name,
                      result["discarded"])
        return result

    def _status(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args.get("name")
        if name:
            if name not in self.uplinks:
                raise UplinkError(f"no uplink {name!r}")
            return {name: self.uplinks[name].status()}
        return self.status()

    def status(self) -> dict[str, Any]:
        return {name: u.status() for name, u in self.uplinks.items()}


# ------------------------------------------------------------- offline (CLI)
def stage_add(store: Any, d: UplinkDef, old: tuple[int, UplinkDef] | None
              ) -> tuple[UplinkDef, int, str] | None:
    """Stage storing ``d`` over ``old`` (its stored ``(doc id, definition)``, if any):
    ``(definition as stored, doc id, "added" | "updated")``, or None if ``old`` equals it.
    An update remembers the ``--in`` filters it retires (the link drops them upstream)."""
    if old is None:
        return d, int(store.stage_insert(CONFIG, d.document())["_id"]), "added"
    doc_id, previous = old
    if previous == d:
        return None
    d = replace(d, retired_in=retired_filters(previous, d))
    store.stage_update(CONFIG, doc_id, d.document(), replace=True)
    return d, doc_id, "updated"


def add_offline(store: Any, spec: dict[str, Any]) -> dict[str, Any]:
    d = parse_definition(spec)
    old = next(((i, o) for i, o in stored_definitions(store) if o.name == d.name), None)
    staged = stage_add(store, d, old)
    if staged is None:
        return {"name": d.name, "state": "present"}
    store.commit_blocking()
    return {"name": d.name, "state": staged[2]}


def stage_remove(store: Any, name: str, outbox: Outbox | None = None) -> dict[str, Any]:
    """Stage the removal of uplink ``name``: its stored documents (valid or not) and its
    outbox, whose unsent messages are discarded. Raises if there is neither."""
    docs = [doc for doc in store.find(CONFIG, {"_kind": KIND}) if doc.get("name") == name]
    if outbox is None:
        if not docs and name not in stored_outbox_names(store):
            raise UplinkError(f"no uplink {name!r}")
        outbox = Outbox(store, name)
    result = {"name": name, "removed": True, "discarded": outbox.messages,
              # known while the server runs: how many of them waited unsent on purpose
              "discarded_parked": outbox.parked, "discarded_returned": outbox.returned}
    outbox.clear()
    for doc in docs:
        store.stage_delete(CONFIG, int(doc["_id"]))
    return result


def remove_offline(store: Any, name: str) -> dict[str, Any]:
    """``uplink remove`` with no server running."""
    result = stage_remove(store, name)
    store.commit_blocking()
    return result


def list_offline(store: Any) -> list[dict[str, Any]]:
    return [d.row() for _i, d in stored_definitions(store)]


def status_offline(store: Any, name: str | None = None) -> dict[str, Any]:
    out = {}
    for _i, d in stored_definitions(store):
        if name and d.name != name:
            continue
        box = Outbox(store, d.name)
        out[d.name] = {"state": "server not running", "backlog_messages": box.messages,
                       "backlog_bytes": box.bytes, "lag_seconds": round(box.oldest_age(), 3)}
    if name and name not in out:
        raise UplinkError(f"no uplink {name!r}")
    return out

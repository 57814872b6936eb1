"""The uplink manager: local messages into durable outboxes, the uplinks, commands back.

Theory of operation
-------------------
``on_publish`` is an MQTT ``on_publish`` hook (or, without MQTT, an AMQP ``amq.topic`` hook).
For every uplink whose ``--out`` filters match, it stages the message into that uplink's
outbox (``outbox.py``) and returns True, so the publishing connection awaits the same group
commit before its PUBACK / confirm: a locally acknowledged message is already queued for
upstream. Which uplinks a topic goes to, and whether it has a name upstream (an AMQP
routing key) there, is cached per topic.

Each uplink (``uplink.py``) runs one task that connects, forwards and reconnects; inbound
commands come back through ``deliver``, which publishes them locally (skipping that
uplink's own ``--out``, so a command is never echoed back) and awaits their commit before
the link acknowledges them upstream. The admin operations (``uplink add|remove|list|
status``) and their offline forms (no server running) are here too.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from typing import Any

import trio

from ..amqp.service import AmqpService
from ..app import App
from ..mqtt.service import MqttService
from ..mqtt.topics import topic_matches
from ..topicmap import mqtt_to_routing_key, routing_key_to_mqtt
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
from .uplink import Uplink

_TOPIC_CACHE = 4096


def default_device_id() -> str:
    """The host name's first label, reduced to the characters a device id may hold."""
    label = socket.gethostname().split(".")[0]
    cleaned = "".join(c if c.isalnum() or c in "_-" else "-" for c in label)[:64]
    return cleaned or "oxiedge"


class UplinkManager:
    """Every uplink of one server, the publish hook and the admin operations."""

    def __init__(self, app: App, config_defs: list[UplinkDef], device_id: str,
                 mqtt: MqttService | None, amqp: AmqpService | None) -> None:
        self.app = app
        self.mqtt = mqtt  # where inbound commands are published (MQTT if it runs)
        self.amqp = amqp
        self.device_id = device_id  # validated by ``oxiedge serve`` before the store opens
        self.config_defs = {d.name: d for d in config_defs}
        self.stored: dict[str, tuple[int, UplinkDef]] = {}
        self.uplinks: dict[str, Uplink] = {}
        # topic -> the uplinks whose --out matches it, each with whether it is routable
        self._cache: dict[str, tuple[tuple[Uplink, bool], ...]] = {}
        self._source: Uplink | None = None  # the uplink whose command is being delivered
        self.flush_soon = trio.Event()  # some uplink has deletes waiting for a round
        self._nursery: trio.Nursery | None = None
        self.log: logging.Logger = app.log

    # ------------------------------------------------------------- lifecycle
    async def start(self, nursery: trio.Nursery) -> None:
        """Load definitions, attach the hook, start every uplink's task."""
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

    def _sync_hook(self) -> None:
        """Be in the brokers' publish hooks exactly while some uplink exists: a server
        without uplinks pays nothing per published message."""
        mqtt, amqp = self.mqtt, self.amqp
        hook: Any
        hooks: list[Any]  # this hook list goes with the bus (issue 15)
        if mqtt is not None:
            hooks, hook = mqtt.on_publish, self.on_publish
        elif amqp is not None:
            hooks, hook = amqp.topic_hooks, self.on_amqp_publish
        else:
            return
        if self.uplinks and hook not in hooks:
            hooks.append(hook)
        elif not self.uplinks and hook in hooks:
            hooks.remove(hook)

    def _start(self, d: UplinkDef, previous: Uplink | None = None) -> Uplink:
        uplink = Uplink(self, d, previous)
        self.uplinks[d.name] = uplink
        self._cache.clear()
        self._sync_hook()
        assert self._nursery is not None
        self._nursery.start_soon(uplink.run)
        return uplink

    def _stop(self, name: str) -> Uplink | None:
        uplink = self.uplinks.pop(name, None)
        self._cache.clear()
        self._sync_hook()
        if uplink is not None:
            uplink.scope.cancel()
            uplink.clear_alarm()  # now, not when the task unwinds (a successor may raise it)
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

    # ------------------------------------------------------------------ hooks
    def on_publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> bool:
        """MQTT ``on_publish`` hook (only while uplinks exist): stage into matching
        outboxes; True if anything was."""
        targets = self._cache.get(topic)
        if targets is None:
            targets = tuple((u, u.routable(topic)) for u in self.uplinks.values()
                            if any(topic_matches(f, topic) for f in u.definition.out))
            if len(self._cache) >= _TOPIC_CACHE:
                self._cache.clear()
            self._cache[topic] = targets
        if not targets or (retain and not payload):
            return False  # clearing a retained message is not a message (MQTT-3.3.1-10)
        staged = False
        for uplink, routable in targets:
            if uplink is self._source:
                continue
            if routable:
                uplink.enqueue(topic, payload, retain)
                staged = True
            else:
                uplink.skipped += 1
        return staged

    def on_amqp_publish(self, routing_key: str, _props: bytes, body: bytes,
                        persistent: bool) -> bool:
        """AMQP ``amq.topic`` hook, used when the server runs without MQTT."""
        topic = routing_key_to_mqtt(routing_key)
        if topic is None:
            return False
        return self.on_publish(topic, body, 1 if persistent else 0, False)

    async def deliver(self, uplink: Uplink, topic: str, payload: bytes) -> None:
        """Publish an inbound command locally and wait until it is durable."""
        mqtt, amqp = self.mqtt, self.amqp
        self._source = uplink
        try:
            if mqtt is not None:
                staged = mqtt.publish_from_bridge(topic, payload, 1, False)
            elif amqp is not None:
                key = mqtt_to_routing_key(topic)
                if key is None:
                    raise ValueError(topic)
                staged = amqp.publish_from_bridge("amq.topic", key, payload, True).needs_commit
            else:
                staged = False
        except ValueError:
            raise LinkError(f"inbound topic {topic!r} cannot be published locally") from None
        finally:
            self._source = None
        if staged:
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

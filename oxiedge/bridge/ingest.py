"""The ingest bridge: MQTT publishes whose topic matches a route become documents.

Routes come from ``--ingest`` / ``OXIEDGE_MQTT_INGEST`` (configuration, not stored) and from
``oxiedge ingest add`` (documents ``{"_kind": "route"}`` in ``_config``, live and persistent).
A publish is ingested by staging one document per matching route into the group-commit batch;
the MQTT broker awaits the same commit before its PUBACK, so "acknowledged" covers the
document too. With no routes the cost per publish is one truth test.

Document shape (DESIGN.md): a JSON-object payload is the document; any other payload becomes
``{"payload": value}`` — the JSON value, else the UTF-8 text, else base64 with
``"_payload_encoding": "base64"``. Every document gets ``_topic`` and ``_received_at`` (ms).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from ..app import App
from ..store import Store
from .routes import Route, RouteError, parse_route, topic_matches

CONFIG = "_config"


def payload_document(topic: str, payload: bytes, received_ms: int) -> dict[str, Any]:
    """The document an MQTT payload becomes (see the module docstring)."""
    doc: dict[str, Any]
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        doc = {"payload": base64.b64encode(payload).decode(), "_payload_encoding": "base64"}
    else:
        try:
            value = json.loads(text) if text.strip() else text
        except ValueError:
            value = text
        if isinstance(value, float) and value != value:  # NaN is not storable JSON
            value = text
        doc = dict(value) if isinstance(value, dict) else {"payload": value}
        if isinstance(value, dict):
            doc.pop("_id", None)
            doc.pop("_version", None)
    doc["_topic"] = topic
    doc["_received_at"] = received_ms
    return doc


def stored_routes(store: Store) -> list[tuple[int, Route]]:
    out = []
    for doc in store.find(CONFIG, {"_kind": "route"}):
        out.append((int(doc["_id"]), Route(doc["filter"], doc["collection"])))
    return out


def add_route_offline(store: Store, text: str) -> dict[str, Any]:
    route = parse_route(text)
    for _id, existing in stored_routes(store):
        if existing == route:
            return {"route": str(route), "added": False}
    store.stage_insert(CONFIG, {"_kind": "route", "filter": route.filter,
                                "collection": route.collection})
    store.commit_blocking()
    return {"route": str(route), "added": True}


def remove_route_offline(store: Store, text: str) -> dict[str, Any]:
    route = parse_route(text)
    for doc_id, existing in stored_routes(store):
        if existing == route:
            store.stage_delete(CONFIG, doc_id)
            store.commit_blocking()
            return {"route": str(route), "removed": True}
    raise RouteError(f"no stored ingest route {text!r}")


def list_routes_offline(store: Store) -> list[dict[str, Any]]:
    return [{"route": str(r), "filter": r.filter, "collection": r.collection, "source": "store"}
            for _id, r in stored_routes(store)]


class IngestBridge:
    """Live routes of a running server, and the per-publish ingest step."""

    def __init__(self, app: App, config_routes: list[Route]) -> None:
        self.app = app
        self.config_routes = list(config_routes)
        self.stored: list[tuple[int, Route]] = []
        self.routes: list[Route] = []
        self.ingested = 0
        self.failed = 0

    async def start(self) -> None:
        self.stored = stored_routes(self.app.store)
        self._rebuild()

    def _rebuild(self) -> None:
        routes = list(self.config_routes)
        for _id, route in self.stored:
            if route not in routes:
                routes.append(route)
        self.routes = routes

    def startup_line(self) -> str:
        if not self.routes:
            return "MQTT ingest bridge off - no routes"
        return f"MQTT ingest bridge on - {len(self.routes)} route(s)"

    def stage_publish(self, topic: str, payload: bytes) -> bool:
        """Stage the documents of one publish; True if anything was staged."""
        if not self.routes:
            return False
        matched = [r for r in self.routes if topic_matches(r.filter, topic)]
        if not matched:
            return False
        doc = payload_document(topic, payload, int(time.time() * 1000))
        store = self.app.store
        done: set[str] = set()
        for route in matched:
            if route.collection in done:
                continue  # two routes into one collection: one document
            done.add(route.collection)
            store.stage_insert(route.collection, doc)
            self.ingested += 1
        return True

    # --------------------------------------------------------------- admin API
    def admin_handlers(self) -> dict[str, Any]:
        return {"ingest.list": self._list, "ingest.add": self._add, "ingest.remove": self._remove}

    def _list(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [{"route": str(r), "filter": r.filter, "collection": r.collection,
                 "source": "config"} for r in self.config_routes]
        rows += [{"route": str(r), "filter": r.filter, "collection": r.collection,
                  "source": "store"} for _id, r in self.stored if r not in self.config_routes]
        return rows

    async def _add(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        if any(r == route for _i, r in self.stored):
            return {"route": str(route), "added": False}
        doc = self.app.store.stage_insert(CONFIG, {"_kind": "route", "filter": route.filter,
                                                   "collection": route.collection})
        await self.app.store.commit()
        self.stored.append((int(doc["_id"]), route))
        self._rebuild()
        self.app.log.info("ingest route added: %s", route)
        return {"route": str(route), "added": True}

    async def _remove(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        for doc_id, existing in list(self.stored):
            if existing == route:
                self.app.store.stage_delete(CONFIG, doc_id)
                await self.app.store.commit()
                self.stored = [(i, r) for i, r in self.stored if i != doc_id]
                self._rebuild()
                self.app.log.info("ingest route removed: %s", route)
                return {"route": str(route), "removed": True}
        if route in self.config_routes:
            raise RouteError(f"ingest route {str(route)!r} comes from --ingest/OXIEDGE_MQTT_INGEST;"
                             " change the server's configuration to remove it")
        raise RouteError(f"no ingest route {str(route)!r}")

    def status(self) -> dict[str, Any]:
        return {"routes": len(self.routes), "ingested": self.ingested, "failed": self.failed}

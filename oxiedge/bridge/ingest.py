"""The ingest bridge: MQTT publishes whose topic matches a route become documents.

Routes come from ``--ingest`` / ``OXIEDGE_MQTT_INGEST`` (configuration, not stored) and from
``oxiedge ingest add`` (documents ``{"_kind": "route"}`` in ``_config``, live and persistent,
optionally with a retention policy ``max_docs`` / ``max_age`` in seconds).

A publish is ingested by staging one document per matching collection into the group-commit
batch. The MQTT connection then awaits that commit before its PUBACK/PUBREC when QoS >= 1
(the hook returns True), and only kicks the committer for QoS 0, so "acknowledged" covers
the document and a QoS 0 publisher never waits. With no routes the cost per publish is one
truth test.

Document shape (DESIGN.md): a JSON-object payload is the document; any other payload becomes
``{"payload": value}`` — the JSON value, else the UTF-8 text, else base64 with
``"_payload_encoding": "base64"``. Every document gets ``_topic`` and ``_received_at`` (ms).

PUBACK means the document is stored: a document the store's encoder refuses (JSON nested
deeper than it writes, a string it cannot hold) is stored instead in its *fallback* form,
the payload as text (or base64) with ``_ingest_fallback`` saying why, and counted in
``fallback``. The fallback is built from strings only, so the encoder always takes it.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
import trio

from ..app import App
from ..mqtt.topics import topic_matches
from ..store import Store, StoreError, validate_collection_name
from . import indexes
from .retention import Policy, Retention, validate_policy
from .routes import Route, RouteError, parse_route

CONFIG = "_config"


def payload_document(topic: str, payload: bytes, received_ms: int) -> dict[str, Any]:
    """The document an MQTT payload becomes (see the module docstring)."""
    doc: dict[str, Any]
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        doc = {"payload": base64.b64encode(payload).decode(), "_payload_encoding": "base64"}
    else:
        # orjson is strict where storage must be: NaN/Infinity and nesting deeper than 1024
        # are not storable JSON, so such payloads stay text. Integers beyond 64 bits become
        # floats, as in JavaScript.
        try:
            value = orjson.loads(payload) if text.strip() else text
        except orjson.JSONDecodeError:
            value = text
        if isinstance(value, dict):
            doc = value
            doc.pop("_id", None)
            doc.pop("_version", None)
        else:
            doc = {"payload": value}
    doc["_topic"] = topic
    doc["_received_at"] = received_ms
    return doc


def fallback_document(topic: str, payload: bytes, received_ms: int, reason: str
                      ) -> dict[str, Any]:
    """The document stored when ``payload_document``'s result cannot be encoded: the raw
    payload as text or base64, never a parsed value, so the encoder cannot refuse it."""
    doc: dict[str, Any]
    try:
        doc = {"payload": payload.decode("utf-8")}
    except UnicodeDecodeError:
        doc = {"payload": base64.b64encode(payload).decode(), "_payload_encoding": "base64"}
    doc["_topic"] = _storable_text(topic)
    doc["_received_at"] = received_ms
    doc["_ingest_fallback"] = reason
    return doc


def _storable_text(text: str) -> str:
    """``text`` with what strict UTF-8 cannot hold (lone surrogates) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


# ------------------------------------------------------------ stored routes
def stored_routes(store: Store) -> list[tuple[int, Route, Policy]]:
    """Every stored route; one that no longer parses is quarantined (moved aside, counted,
    logged) so that start-up goes on without it."""
    out = []
    for doc in store.find(CONFIG, {"_kind": "route"}):
        try:
            flt, coll = doc.get("filter"), doc.get("collection")
            if not isinstance(flt, str) or not isinstance(coll, str):
                raise ValueError(f"filter {flt!r}, collection {coll!r}")
            route = parse_route(f"{flt}:{coll}")
            policy = validate_policy(doc.get("max_docs"), doc.get("max_age"))
        except ValueError as exc:  # RouteError is a ValueError (ConfigError)
            store.quarantine_doc(CONFIG, int(doc["_id"]), f"ingest route: {exc}")
            continue
        out.append((int(doc["_id"]), route, policy))
    return out


def _route_doc(route: Route, policy: Policy) -> dict[str, Any]:
    doc: dict[str, Any] = {"_kind": "route", "filter": route.filter,
                           "collection": route.collection}
    if policy.max_docs is not None:
        doc["max_docs"] = policy.max_docs
    if policy.max_age is not None:
        doc["max_age"] = policy.max_age
    return doc


def _find(stored: list[tuple[int, Route, Policy]], route: Route) -> tuple[int, Policy] | None:
    """The doc id and policy of ``route``'s stored document, if it has one."""
    return next(((i, p) for i, r, p in stored if r == route), None)


def _stage_add(store: Store, stored: list[tuple[int, Route, Policy]], route: Route,
               policy: Policy) -> tuple[str, int]:
    """Stage the route's document; ``("added"|"updated"|"present", doc id)``."""
    found = _find(stored, route)
    if found is not None:
        doc_id, old = found
        if old == policy:
            return "present", doc_id
        store.stage_update(CONFIG, doc_id, _route_doc(route, policy), replace=True)
        return "updated", doc_id
    doc = store.stage_insert(CONFIG, _route_doc(route, policy))
    return "added", int(doc["_id"])


def _row(route: Route, policy: Policy, source: str) -> dict[str, Any]:
    return {"route": str(route), "filter": route.filter, "collection": route.collection,
            "source": source, **policy.row()}


def _result(route: Route, policy: Policy, state: str) -> dict[str, Any]:
    return {"route": str(route), "added": state == "added", "state": state, **policy.row()}


def add_route_offline(store: Store, text: str, max_docs: int | None = None,
                      max_age: Any = None) -> dict[str, Any]:
    route = parse_route(text)
    policy = validate_policy(max_docs, max_age)
    state, _doc_id = _stage_add(store, stored_routes(store), route, policy)
    store.commit_blocking()
    return _result(route, policy, state)


def remove_route_offline(store: Store, text: str) -> dict[str, Any]:
    route = parse_route(text)
    found = _find(stored_routes(store), route)
    if found is None:
        raise RouteError(f"no stored ingest route {text!r}")
    store.stage_delete(CONFIG, found[0])
    store.commit_blocking()
    return {"route": str(route), "removed": True}


def list_routes_offline(store: Store) -> list[dict[str, Any]]:
    return [_row(r, p, "store") for _id, r, p in stored_routes(store)]


class IngestBridge:
    """Live routes of a running server, the per-publish ingest step, and retention."""

    def __init__(self, app: App, config_routes: list[Route]) -> None:
        self.app = app
        self.config_routes = list(config_routes)
        self.stored: list[tuple[int, Route, Policy]] = []
        self.routes: list[Route] = []
        self.retention = Retention(app.store)
        self.ingested = 0
        self.fallback = 0  # stored in the fallback form (the encoder refused the document)
        self.failed = 0    # not stored at all: only a broken route can do that (logged)

    async def start(self) -> None:
        self.stored = stored_routes(self.app.store)
        self._rebuild()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Retention, and the resumption of index builds a crash interrupted."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.retention.run)
            nursery.start_soon(indexes.resume_builds, self.app.store, self.app.log)
            task_status.started()

    def _rebuild(self) -> None:
        routes = list(self.config_routes)
        policies: dict[str, Policy] = {}
        for _id, route, policy in self.stored:
            try:  # a stored route is written valid; one that is not can store nothing
                validate_collection_name(route.collection)
            except StoreError as exc:
                self.app.log.error("ingest route %s ignored: %s", route, exc)
                continue
            if route not in routes:
                routes.append(route)
            if policy:
                policies[route.collection] = policies.get(route.collection, Policy()).merge(policy)
        self.routes = routes
        self.retention.set_policies(policies)

    def startup_line(self) -> str:
        if not self.routes:
            return "MQTT ingest bridge off - no routes"
        return f"MQTT ingest bridge on - {len(self.routes)} route(s)"

    def stage_publish(self, topic: str, payload: bytes) -> bool:
        """Stage the documents of one publish; True if anything was staged.

        The router calls it only while ``routes`` is non-empty."""
        # Two routes into one collection: one document.
        collections = dict.fromkeys(r.collection for r in self.routes
                                    if topic_matches(r.filter, topic))
        if not collections:
            return False
        now_ms = int(time.time() * 1000)
        doc = payload_document(topic, payload, now_ms)
        store = self.app.store
        for collection in collections:
            try:
                store.stage_insert(collection, doc)
            except ValueError as exc:  # StoreError too: the encoder refused the document
                if not self._stage_fallback(collection, topic, payload, now_ms, exc):
                    continue
            self.ingested += 1
            if self.retention.policies:
                self.retention.after_insert(collection)
        return True

    def _stage_fallback(self, collection: str, topic: str, payload: bytes, now_ms: int,
                        exc: ValueError) -> bool:
        """Stage the fallback form of a refused document; False if even that failed."""
        reason = str(exc)[:200]
        try:
            self.app.store.stage_insert(collection, fallback_document(topic, payload, now_ms,
                                                                      reason))
        except ValueError as again:  # cannot happen for a valid route: say it loudly
            self.failed += 1
            self.app.log.error("ingest: document for %r in %s not stored: %s", topic,
                               collection, again)
            return False
        self.fallback += 1
        if self.fallback == 1 or self.fallback % 1000 == 0:
            self.app.log.warning("ingest: a payload on %r was stored as text in %s (%s); "
                                 "%d so far (ingest.fallback)", _storable_text(topic),
                                 collection, reason, self.fallback)
        return True

    # --------------------------------------------------------------- admin API
    def admin_handlers(self) -> dict[str, Any]:
        return {"ingest.list": self._list, "ingest.add": self._add, "ingest.remove": self._remove,
                **indexes.admin_handlers(self.app.store)}

    def _list(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [_row(r, Policy(), "config") for r in self.config_routes]
        rows += [_row(r, p, "store") for _id, r, p in self.stored if r not in self.config_routes]
        return rows

    async def _add(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        policy = validate_policy(args.get("max_docs"), args.get("max_age"))
        store = self.app.store
        state, doc_id = _stage_add(store, self.stored, route, policy)
        if state != "present":
            await store.commit()
            # the committed change, without re-reading _config (a new id is the largest)
            if state == "added":
                self.stored = [*self.stored, (doc_id, route, policy)]
            else:
                self.stored = [(i, r, policy if i == doc_id else p) for i, r, p in self.stored]
            self._rebuild()
            self.app.log.info("ingest route %s: %s %s", state, route, policy.row() or "")
        return _result(route, policy, state)

    async def _remove(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        found = _find(self.stored, route)
        if found is not None:
            doc_id = found[0]
            self.app.store.stage_delete(CONFIG, doc_id)
            await self.app.store.commit()
            self.stored = [s for s in self.stored if s[0] != doc_id]
            self._rebuild()
            self.app.log.info("ingest route removed: %s", route)
            return {"route": str(route), "removed": True}
        if route in self.config_routes:
            raise RouteError(f"ingest route {str(route)!r} comes from --ingest/OXIEDGE_MQTT_INGEST;"
                             " change the server's configuration to remove it")
        raise RouteError(f"no ingest route {str(route)!r}")

    def status(self) -> dict[str, Any]:
        store = self.app.store
        return {"routes": len(self.routes), "ingested": self.ingested, "fallback": self.fallback,
                "failed": self.failed,
                "retention_deleted": self.retention.total_deleted,
                "retention": self.retention.status(),
                "indexes": len(store.indexes.defs),
                "finds_by_index": store.indexes.scans_avoided,
                "documents_read": store.docs_read}

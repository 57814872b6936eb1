"""The ingest step: MQTT publishes whose topic matches a route become documents.

Routes come from ``--ingest`` / ``OXIEDGE_MQTT_INGEST`` (configuration, not stored) and from
``oxiedge ingest add`` (``stored.py``: documents in ``_config``, live and persistent,
optionally with a retention policy ``max_docs`` / ``max_age`` in seconds, ``retention.py``).

A publish is ingested by staging one document (``documents.py``) per matching collection
into the group-commit batch. The publisher's connection then awaits that commit before its
PUBACK/PUBREC when QoS >= 1 (the step reports that it staged something), and only kicks the
committer for QoS 0, so "acknowledged" covers the document and a QoS 0 publisher never
waits. With no routes the cost per publish is one truth test.

A document the store's encoder refuses is stored in its fallback form instead, counted in
``fallback`` (``documents.fallback_document``).
"""

from __future__ import annotations

import time
from typing import Any

import trio

from ..app import App
from ..mqtt.topics import topic_matches
from ..staged import MessageProps
from ..store import StoreError, validate_collection_name
from . import indexes
from .documents import fallback_document, payload_document, props_field, storable_text
from .retention import Policy, Retention, validate_policy
from .routes import Route, RouteError, parse_route
from .stored import CONFIG, find, result, row, stage_add, stored_routes


class Ingest:
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

    def stage_publish(self, topic: str, payload: bytes, props: MessageProps | None = None
                      ) -> bool:  # fmt: skip
        """Stage the documents of one publish (with ``_props`` from ``props``, see
        ``documents.py``); True if anything was staged.

        The router calls it only while ``routes`` is non-empty."""
        # Two routes into one collection: one document.
        collections = dict.fromkeys(r.collection for r in self.routes
                                    if topic_matches(r.filter, topic))
        if not collections:
            return False
        now_ms = int(time.time() * 1000)
        doc = payload_document(topic, payload, now_ms)
        extra = props_field(props)
        if extra is not None:
            doc["_props"] = extra
        store = self.app.store
        for collection in collections:
            try:
                store.stage_insert(collection, doc)
            except ValueError as exc:  # StoreError too: the encoder refused the document
                if not self._stage_fallback(collection, topic, payload, now_ms, exc, extra):
                    continue
            self.ingested += 1
            if self.retention.policies:
                self.retention.after_insert(collection)
        return True

    def _stage_fallback(self, collection: str, topic: str, payload: bytes, now_ms: int,
                        exc: ValueError, extra: dict[str, Any] | None) -> bool:
        """Stage the fallback form of a refused document; False if even that failed."""
        reason = str(exc)[:200]
        doc = fallback_document(topic, payload, now_ms, reason)
        if extra is not None:
            doc["_props"] = extra  # (strings only, made storable)
        try:
            self.app.store.stage_insert(collection, doc)
        except ValueError as again:  # cannot happen for a valid route: say it loudly
            self.failed += 1
            self.app.log.error("ingest: document for %r in %s not stored: %s", topic,
                               collection, again)
            return False
        self.fallback += 1
        if self.fallback == 1 or self.fallback % 1000 == 0:
            self.app.log.warning("ingest: a payload on %r was stored as text in %s (%s); "
                                 "%d so far (ingest.fallback)", storable_text(topic),
                                 collection, reason, self.fallback)
        return True

    # --------------------------------------------------------------- admin API
    def admin_handlers(self) -> dict[str, Any]:
        return {"ingest.list": self._list, "ingest.add": self._add, "ingest.remove": self._remove,
                **indexes.admin_handlers(self.app.store)}

    def _list(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [row(r, Policy(), "config") for r in self.config_routes]
        rows += [row(r, p, "store") for _id, r, p in self.stored if r not in self.config_routes]
        return rows

    async def _add(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        policy = validate_policy(args.get("max_docs"), args.get("max_age"))
        store = self.app.store
        state, doc_id = stage_add(store, self.stored, route, policy)
        if state != "present":
            await store.commit()
            # the committed change, without re-reading _config (a new id is the largest)
            if state == "added":
                self.stored = [*self.stored, (doc_id, route, policy)]
            else:
                self.stored = [(i, r, policy if i == doc_id else p) for i, r, p in self.stored]
            self._rebuild()
            self.app.log.info("ingest route %s: %s %s", state, route, policy.row() or "")
        return result(route, policy, state)

    async def _remove(self, args: dict[str, Any]) -> dict[str, Any]:
        route = parse_route(str(args.get("route", "")))
        found = find(self.stored, route)
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

"""Stored ingest routes: documents ``{"_kind": "route"}`` in ``_config`` (``oxiedge ingest
add``), with their optional retention policy, and the offline admin forms the CLI uses on
the data dir when no server runs."""

from __future__ import annotations

from typing import Any

from ..store import Store
from .retention import Policy, validate_policy
from .routes import Route, RouteError, parse_route

CONFIG = "_config"


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


def find(stored: list[tuple[int, Route, Policy]], route: Route) -> tuple[int, Policy] | None:
    """The doc id and policy of ``route``'s stored document, if it has one."""
    return next(((i, p) for i, r, p in stored if r == route), None)


def stage_add(store: Store, stored: list[tuple[int, Route, Policy]], route: Route,
               policy: Policy) -> tuple[str, int]:
    """Stage the route's document; ``("added"|"updated"|"present", doc id)``."""
    found = find(stored, route)
    if found is not None:
        doc_id, old = found
        if old == policy:
            return "present", doc_id
        store.stage_update(CONFIG, doc_id, _route_doc(route, policy), replace=True)
        return "updated", doc_id
    doc = store.stage_insert(CONFIG, _route_doc(route, policy))
    return "added", int(doc["_id"])


def row(route: Route, policy: Policy, source: str) -> dict[str, Any]:
    return {"route": str(route), "filter": route.filter, "collection": route.collection,
            "source": source, **policy.row()}


def result(route: Route, policy: Policy, state: str) -> dict[str, Any]:
    return {"route": str(route), "added": state == "added", "state": state, **policy.row()}


def add_route_offline(store: Store, text: str, max_docs: int | None = None,
                      max_age: Any = None) -> dict[str, Any]:
    route = parse_route(text)
    policy = validate_policy(max_docs, max_age)
    state, _doc_id = stage_add(store, stored_routes(store), route, policy)
    store.commit_blocking()
    return result(route, policy, state)


def remove_route_offline(store: Store, text: str) -> dict[str, Any]:
    route = parse_route(text)
    found = find(stored_routes(store), route)
    if found is None:
        raise RouteError(f"no stored ingest route {text!r}")
    store.stage_delete(CONFIG, found[0])
    store.commit_blocking()
    return {"route": str(route), "removed": True}


def list_routes_offline(store: Store) -> list[dict[str, Any]]:
    return [row(r, p, "store") for _id, r, p in stored_routes(store)]


"""The ingest, index and uplink writes under ``/api/oxiedge/`` against a real server: good
input, bad input (a 400 naming the field, a 404 for an unknown object) and a missing
permission (401 for a monitoring user and for no credentials)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from tests.conftest import ServerProcess

ADMIN = ("admin", "admin-pw")
WATCHER = ("watcher", "watcher-pw")
JSON = {"content-type": "application/json"}


def _send(c: Any, method: str, path: str, body: Any = None,
          auth: tuple[str, str] | None = ADMIN) -> Any:
    data = None if body is None else json.dumps(body).encode()
    return c.request(method, path, auth, data, JSON)


def test_ingest_and_index_writes(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    r = _send(c, "POST", "/api/oxiedge/ingest", {"route": "sensors/#:readings",
                                                  "max_docs": 1000})
    assert r.status == 201, r.body
    assert r.json()["state"] == "added" and r.json()["max_docs"] == 1000
    assert _send(c, "POST", "/api/oxiedge/ingest", {"route": "sensors/#:readings",
                                                     "max_docs": 1000}).status == 200
    routes = _send(c, "GET", "/api/oxiedge/ingest").json()
    assert [r["route"] for r in routes] == ["sensors/#:readings"]

    r = _send(c, "PUT", "/api/oxiedge/indexes/readings/_received_at")
    assert r.status == 201 and r.json()["created"] is True, r.body
    listed = _send(c, "GET", "/api/oxiedge/indexes").json()
    assert [(i["collection"], i["field"]) for i in listed] == [("readings", "_received_at")]
    assert _send(c, "DELETE", "/api/oxiedge/indexes/readings/_received_at").status == 200
    assert _send(c, "DELETE", "/api/oxiedge/indexes/readings/_received_at").status == 404

    # bad input: each a 400 naming what is wrong, never a 500
    for body in ({}, {"route": ""}, {"route": 7}):
        r = _send(c, "POST", "/api/oxiedge/ingest", body)
        assert r.status == 400 and r.json()["reason"].startswith("route"), r.body
    r = _send(c, "POST", "/api/oxiedge/ingest", {"route": "no-colon"})
    assert r.status == 400 and "no-colon" in r.json()["reason"]
    r = _send(c, "POST", "/api/oxiedge/ingest", {"route": "a/#:x", "max_docs": "lots"})
    assert r.status == 400 and "max_docs" in r.json()["reason"], r.body
    assert _send(c, "POST", "/api/oxiedge/ingest", None).status == 400
    c.request("POST", "/api/oxiedge/ingest", ADMIN, b"[1]", JSON)
    assert _send(c, "DELETE", "/api/oxiedge/ingest").status == 400
    r = _send(c, "PUT", "/api/oxiedge/indexes/readings/" + quote("a..b", safe=""))
    assert r.status == 400, r.body

    # a missing permission: monitoring users and no credentials are refused, nothing changes
    for auth in (WATCHER, None):
        assert _send(c, "POST", "/api/oxiedge/ingest", {"route": "x/#:y"}, auth).status == 401
        assert _send(c, "PUT", "/api/oxiedge/indexes/readings/t", None, auth).status == 401
        assert _send(c, "DELETE", "/api/oxiedge/ingest?route=" + quote("sensors/#:readings"),
                     None, auth).status == 401
    assert _send(c, "GET", "/api/oxiedge/ingest", None, WATCHER).status == 200

    r = _send(c, "DELETE", "/api/oxiedge/ingest?route=" + quote("sensors/#:readings"))
    assert r.status == 200 and r.json()["removed"] is True
    assert _send(c, "DELETE", "/api/oxiedge/ingest?route=" + quote("sensors/#:readings")
                 ).status == 404
    assert _send(c, "GET", "/api/oxiedge/ingest").json() == []


def test_uplink_writes(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    spec = {"urls": ["mqtt://127.0.0.1:1"], "out": ["sensors/#"]}
    r = _send(c, "PUT", "/api/oxiedge/uplinks/central", spec)
    assert r.status == 201 and r.json() == {"name": "central", "state": "added"}, r.body
    assert _send(c, "PUT", "/api/oxiedge/uplinks/central", spec).json()["state"] == "present"
    r = _send(c, "PUT", "/api/oxiedge/uplinks/central", {**spec, "out": ["sensors/a/#"]})
    assert r.status == 200 and r.json()["state"] == "updated"
    assert [u["name"] for u in _send(c, "GET", "/api/oxiedge/uplinks").json()] == ["central"]
    assert "central" in _send(c, "GET", "/api/oxiedge/uplinks/status").json()

    for body, word in (({"out": ["a/#"]}, "URL"), ({**spec, "urls": ["ftp://x"]}, "ftp"),
                       ({**spec, "out": ["a/#/b"]}, "filter"),
                       ({**spec, "name": "other"}, "name"), ({**spec, "colour": 1}, "colour")):
        r = _send(c, "PUT", "/api/oxiedge/uplinks/central", body)
        assert r.status == 400 and word in r.json()["reason"], (body, r.body)
    r = _send(c, "PUT", "/api/oxiedge/uplinks/" + quote("bad name", safe=""), spec)
    assert r.status == 400 and "name" in r.json()["reason"]

    for auth in (WATCHER, None):
        assert _send(c, "PUT", "/api/oxiedge/uplinks/x", spec, auth).status == 401
        assert _send(c, "DELETE", "/api/oxiedge/uplinks/central", None, auth).status == 401

    r = _send(c, "DELETE", "/api/oxiedge/uplinks/central")
    assert r.status == 200 and r.json()["removed"] is True, r.body
    assert _send(c, "DELETE", "/api/oxiedge/uplinks/central").status == 404
    assert _send(c, "GET", "/api/oxiedge/uplinks").json() == []

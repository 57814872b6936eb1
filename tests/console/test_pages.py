"""The console's pages against a real ``oxiedge serve``: status codes, content, page weight,
who sees which buttons, and the forms a browser without JavaScript posts."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.conftest import ServerProcess

ADMIN = ("admin", "admin-pw")
WATCHER = ("watcher", "watcher-pw")
PAGES = ["/", "/mqtt/sessions", "/mqtt/retained", "/queues", "/queues/work", "/exchanges", "/users",
         "/connections", "/collections", "/collections/readings", "/uplinks"]
#: Every page, with its assets, stays under this (the device may be reached over a slow link).
PAGE_BUDGET = 100_000


def _seed(srv: ServerProcess) -> None:
    srv.cli("queue", "declare", "work")
    for i in range(3):
        srv.cli("publish", "-k", "work", "-m", f"job {i}")
    srv.cli("ingest", "add", "sensors/#:readings")
    for i in range(3):
        srv.cli("pub", "-t", "sensors/a", "-m", f'{{"t": {20 + i}}}', "-q", "1")


def _form(html: str, op: str, target: str) -> dict[str, str]:
    """The hidden fields of the button ``op`` on ``target``, as a browser would post them."""
    for form in re.findall(r"<form method=post.*?</form>", html, re.S):
        fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))
        if fields.get("op") == op and fields.get("target") == target:
            return fields
    raise AssertionError(f"no {op} button for {target} in the page")


def test_every_page_renders_and_stays_small(http_server: ServerProcess, client_for: Any
                                            ) -> None:
    _seed(http_server)
    c = client_for(http_server)
    assets = sum(len(c.get(f"/console/static/{n}").body) for n in ("console.css", "console.js"))
    for path in PAGES:
        r = c.get(path)
        assert r.status == 200, (path, r.body[:300])
        assert r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert b"<title>" in r.body and b'id="live"' in r.body
        assert len(r.body) + assets < PAGE_BUDGET, path
        fragment = c.get(path + "?fragment=1")
        assert fragment.status == 200 and b"<html" not in fragment.body
    overview = c.get("/").body.decode()
    assert "Message rates" in overview and "Memory" in overview
    queue = c.get("/queues/work").body.decode()
    assert "Purge" in queue and ">3<" in queue  # three ready messages
    chart = c.get("/collections/readings?field=t").body.decode()
    assert "<polyline" in chart and "sensors/a" in chart
    assert c.get("/queues/nope").status == 404
    assert c.get("/console/static/nope.js").status == 404
    assert c.get("/console/static/console.js").headers["content-type"].startswith(
        "text/javascript")


def test_login_and_tags(users_server: ServerProcess, client_for: Any) -> None:
    users_server.cli("queue", "declare", "work")
    c = client_for(users_server)
    r = c.get("/queues?page=1")  # a browser without credentials: to the login form
    assert r.status == 303 and r.headers["location"] == "/console/login?next=/queues%3Fpage%3D1"
    assert "www-authenticate" not in r.headers
    assert c.get("/", ("admin", "wrong")).status == 401  # HTTP Basic as before (scripts)
    assert c.get("/queues", ("plain", "plain-pw")).status == 401  # no management tag
    watched = c.get("/queues", WATCHER)
    assert watched.status == 200 and b"work" in watched.body
    assert b'action="/console/action"' not in watched.body  # read-only: no buttons that write
    admin = c.get("/queues", ADMIN).body.decode()
    fields = _form(admin, "queue.purge", "work")
    # a monitoring user cannot post even a form made for an administrator
    r = c.request("POST", "/console/action", WATCHER, urlencode(fields).encode(),
                  {"content-type": "application/x-www-form-urlencoded"})
    assert r.status == 401


def test_forms_work_without_javascript(users_server: ServerProcess, client_for: Any) -> None:
    users_server.cli("queue", "declare", "work")
    for i in range(3):
        users_server.cli("publish", "-k", "work", "-m", f"job {i}")
    c = client_for(users_server)
    form = {"content-type": "application/x-www-form-urlencoded"}
    fields = _form(c.get("/queues", ADMIN).body.decode(), "queue.purge", "work")
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 3
    # CSRF: no token, a wrong token, another site's Origin or Sec-Fetch-Site are refused
    for bad, headers in [({**fields, "csrf": ""}, form),
                         ({**fields, "csrf": "0" * 32}, form),
                         ({**fields, "csrf": "\u00e9"}, form),  # (no 500: not ASCII)
                         ({**fields, **{f"x{i}": "1" for i in range(20)}}, form),
                         (fields, {**form, "origin": "http://evil.example"}),
                         (fields, {**form, "sec-fetch-site": "cross-site"})]:
        r = c.request("POST", "/console/action", ADMIN, urlencode(bad).encode(), headers)
        assert r.status == 403, r.body
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 3
    origin = {**form, "origin": f"http://127.0.0.1:{users_server.http_port}",
              "sec-fetch-site": "same-origin"}
    r = c.request("POST", "/console/action", ADMIN, urlencode(fields).encode(), origin)
    assert r.status == 303
    where = urlsplit(r.headers["location"])
    assert where.path == "/queues"
    assert parse_qs(where.query)["msg"] == ["queue.purge work: done"]
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 0
    page = c.get(r.headers["location"], ADMIN).body.decode()
    assert "queue.purge work: done" in page
    # a refusal of the API comes back as the notice, with the API's words
    fields = _form(c.get("/queues", ADMIN).body.decode(), "queue.delete", "work")
    assert c.request("POST", "/console/action", ADMIN, urlencode(fields).encode(),
                     origin).status == 303
    fields["target"] = "gone"
    r = c.request("POST", "/console/action", ADMIN, urlencode(fields).encode(), origin)
    assert "no queue" in parse_qs(urlsplit(r.headers["location"]).query)["msg"][0]
    # a form cannot send the browser elsewhere
    fields["back"] = "//evil.example/x"
    r = c.request("POST", "/console/action", ADMIN, urlencode(fields).encode(), origin)
    assert r.headers["location"].startswith("/?")


@pytest.mark.parametrize("op, target", [("session.delete", "c1"), ("client.kick", "c1"),
                                        ("retained.clear", "a/b"), ("connection.close", "x")])
def test_mqtt_and_connection_buttons_reach_the_api(http_server: ServerProcess,
                                                   client_for: Any, op: str, target: str
                                                   ) -> None:
    http_server.cli("pub", "-t", "a/b", "-m", "v", "-r")
    c = client_for(http_server)
    page = c.get("/mqtt/retained").body.decode()
    token = _form(page, "retained.clear", "a/b")["csrf"]
    fields = {"op": op, "target": target, "csrf": token, "back": "/mqtt/sessions"}
    r = c.request("POST", "/console/action", None, urlencode(fields).encode(),
                  {"content-type": "application/x-www-form-urlencoded"})
    assert r.status == 303
    notice = parse_qs(urlsplit(r.headers["location"]).query)["msg"][0]
    if op == "retained.clear":
        assert notice.endswith("done") and b"a/b" not in c.get("/mqtt/retained").body
    else:  # nothing of that name: the API's 404 reason
        assert "failed (404" in notice


def test_the_broker_loads_no_page_code_until_asked() -> None:
    """Registering the console's routes imports only its small ``__init__``: the pages, the
    HTML, the chart and the assets load at the first visit (idle RSS stays as it was)."""
    code = ("import sys, oxiedge.http.wiring; "
            "print(sorted(m for m in sys.modules if m.startswith('oxiedge.console')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "['oxiedge.console']"


def test_test_message_get_and_users(users_server: ServerProcess, client_for: Any) -> None:
    users_server.cli("queue", "declare", "work")
    c = client_for(users_server)
    form = {"content-type": "application/x-www-form-urlencoded"}
    page = c.get("/queues/work", ADMIN).body.decode()
    assert 'value="queue.publish"' in page
    got = _form(page, "queue.get", "work")
    publish = {**got, "op": "queue.publish", "payload": "<b>hello</b>"}
    r = c.request("POST", "/console/action", ADMIN, urlencode(publish).encode(), form)
    assert parse_qs(urlsplit(r.headers["location"]).query)["msg"] == [
        "queue.publish work: published"]
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 1
    r = c.request("POST", "/console/action", ADMIN, urlencode(got).encode(), form)
    notice = parse_qs(urlsplit(r.headers["location"]).query)["msg"][0]
    assert "<b>hello</b> (left in place)" in notice, notice
    shown = c.get(r.headers["location"], ADMIN).body.decode()
    assert "&lt;b&gt;hello&lt;/b&gt;" in shown and "<b>hello" not in shown
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 1  # peeked
    # a monitoring user sees no form; the users page read-only (never a hash)
    assert b"queue.publish" not in c.get("/queues/work", WATCHER).body
    watched = c.get("/users", WATCHER).body.decode()
    assert "watcher" in watched and "<form method=post action=\"/console/action" not in watched
    users = c.get("/users", ADMIN).body.decode()
    assert "watcher" in users and "monitoring" in users and "pbkdf2" not in users
    assert 'value="user.put"' in users and 'value="permissions.put"' in users


def test_connected_mqtt_client_is_listed_and_kicked(http_server: ServerProcess,
                                                    client_for: Any) -> None:
    import paho.mqtt.client as mqtt

    assert http_server.mqtt_port
    up, gone = threading.Event(), threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="greenhouse-7",
                         clean_session=False)
    client.on_connect = lambda *_a: up.set()
    client.on_disconnect = lambda *_a: gone.set()
    client.connect("127.0.0.1", http_server.mqtt_port)
    client.loop_start()
    try:
        assert up.wait(10)  # CONNACK: the session is the server's now
        c = client_for(http_server)
        page = c.get("/connections").body.decode()
        fields = _form(page, "client.kick", "greenhouse-7")
        r = c.request("POST", "/console/action", None, urlencode(fields).encode(),
                      {"content-type": "application/x-www-form-urlencoded"})
        assert parse_qs(urlsplit(r.headers["location"]).query)["msg"] == [
            "client.kick greenhouse-7: done"]
        assert gone.wait(10)
    finally:
        client.loop_stop()


def test_long_tables_are_paged_under_the_budget(http_server: ServerProcess,
                                               client_for: Any) -> None:
    import paho.mqtt.client as mqtt

    assert http_server.mqtt_port
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="filler")
    client.connect("127.0.0.1", http_server.mqtt_port)
    client.loop_start()
    for i in range(300):
        info = client.publish(f"site/room{i:03d}/temp", "21.5", qos=1, retain=True)
    info.wait_for_publish(20)
    client.loop_stop()
    client.disconnect()
    c = client_for(http_server)
    first = c.get("/mqtt/retained")
    assert len(first.body) < PAGE_BUDGET
    assert 'href="?page=2">next</a>' in first.body.decode()
    last = c.get("/mqtt/retained?page=4").body.decode()
    assert 'href="?page=3">previous</a>' in last and "next</a>" not in last
    assert c.get("/mqtt/retained?page=0").status == 400


def test_users_page_edits_users_and_permissions(users_server: ServerProcess,
                                                client_for: Any) -> None:
    c = client_for(users_server)
    form = {"content-type": "application/x-www-form-urlencoded"}
    page = c.get("/users", ADMIN).body.decode()
    token = _form(page, "user.delete", "watcher")["csrf"]

    def post(fields: dict[str, str], auth: tuple[str, str] = ADMIN) -> str:
        r = c.request("POST", "/console/action", auth, urlencode(
            {"csrf": token, "back": "/users", **fields}).encode(), form)
        assert r.status == 303, r.body
        return parse_qs(urlsplit(r.headers["location"]).query)["msg"][0]

    assert post({"op": "user.put", "target": "sensor", "password": "s-pw",
                 "tags": "monitoring"}) == "user.put sensor: done"
    assert c.get("/api/whoami", ("sensor", "s-pw")).json()["tags"] == ["monitoring"]
    assert post({"op": "permissions.put", "target": "sensor", "configure": "^$",
                 "write": "^$", "read": "^sensor"}) == "permissions.put sensor: done"
    perms = c.get("/api/permissions/%2F/sensor", ADMIN).json()
    assert (perms["configure"], perms["read"]) == ("^$", "^sensor")
    # bad input comes back as the API's refusal, naming the field
    assert "password" in post({"op": "user.put", "target": "x", "password": "", "tags": ""})
    assert "tags" in post({"op": "user.put", "target": "x", "password": "p", "tags": "root"})
    assert "404" in post({"op": "permissions.put", "target": "ghost", "configure": ".*",
                          "write": ".*", "read": ".*"})
    # a monitoring user is refused by the action route itself
    r = c.request("POST", "/console/action", WATCHER, urlencode(
        {"csrf": token, "op": "user.delete", "target": "admin"}).encode(), form)
    assert r.status == 401
    shown = c.get("/users", ADMIN).body.decode()
    assert "sensor" in shown and "^sensor" in shown
    assert post({"op": "permissions.delete", "target": "sensor"}).endswith("done")
    assert post({"op": "user.delete", "target": "sensor"}) == "user.delete sensor: done"
    assert c.get("/api/users/sensor", ADMIN).status == 404
    assert "404" in post({"op": "user.delete", "target": "sensor"})


def test_collection_page_offers_the_received_at_index(users_server: ServerProcess,
                                                      client_for: Any) -> None:
    c = client_for(users_server)
    assert c.get("/collections/readings", ADMIN).status == 404  # nothing of that name yet
    users_server.cli("ingest", "add", "sensors/#:readings")  # a route: the page, still empty
    page = c.get("/collections/readings", ADMIN).body.decode()
    assert "No index on _received_at" in page
    watched = c.get("/collections/readings", WATCHER).body.decode()
    assert "oxiedge index add readings _received_at" in watched
    assert 'value="index.add"' not in watched  # no button for a monitoring user
    fields = _form(page, "index.add", "readings")
    r = c.request("POST", "/console/action", ADMIN, urlencode(fields).encode(),
                  {"content-type": "application/x-www-form-urlencoded"})
    assert parse_qs(urlsplit(r.headers["location"]).query)["msg"] == ["index.add readings: done"]
    assert [(i["collection"], i["field"]) for i in c.get("/api/oxiedge/indexes", ADMIN).json()
            ] == [("readings", "_received_at")]
    assert "No index on _received_at" not in c.get("/collections/readings", ADMIN).body.decode()

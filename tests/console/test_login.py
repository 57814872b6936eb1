"""The console's login form, session cookie and logout: the session table on its own (an
injected clock: expiry without sleeping), then against a real server over HTTP and HTTPS."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from oxiedge.http.sessions import (
    COOKIE,
    SessionTable,
    clear_cookie,
    cookie_token,
    set_cookie,
)
from tests.conftest import ServerProcess
from tests.http.conftest import add_user
from tests.tls.conftest import make_pki

FORM = {"content-type": "application/x-www-form-urlencoded"}


def test_sessions_expire_idle_and_at_their_lifetime_and_are_bounded() -> None:
    table = SessionTable(max_sessions=2, idle_s=10, lifetime_s=30)
    token = table.open("admin", "h1", now=0)
    assert table.find(token, 9).user == "admin"  # type: ignore[union-attr]
    assert table.find(token, 18) is not None  # each request restarts the idle time
    assert table.find(token, 27) is not None
    assert table.find(token, 31) is None and table.expired == 1  # the lifetime is over
    idle = table.open("a", "h", now=100)
    assert table.find(idle, 111) is None and table.expired == 2
    first, second = table.open("a", "h", 200), table.open("b", "h", 201)
    third = table.open("c", "h", 202)  # beyond the bound: the least recently used goes
    assert table.find(first, 203) is None and table.evicted == 1
    assert table.find(second, 203) is not None and table.find(third, 203) is not None
    assert table.close(third) and not table.close(third) and table.find(third, 204) is None
    assert table.find("forged", 204) is None
    assert table.status()["open"] == 1


def test_cookie_header_and_attributes() -> None:
    assert cookie_token(f"a=1; {COOKIE}=tok; b=2") == "tok"
    assert cookie_token("a=1") is None and cookie_token(None) is None
    assert cookie_token(f"{COOKIE}=") is None and cookie_token("x" * 5000) is None
    plain = set_cookie("tok", secure=False)
    assert "HttpOnly" in plain and "SameSite=Strict" in plain and "Secure" not in plain
    assert "Path=/" in plain and set_cookie("tok", secure=True).endswith("; Secure")
    assert "Max-Age=0" in clear_cookie(False)


def _login(c: Any, user: str, password: str, extra: dict[str, str] | None = None,
           nxt: str = "/queues") -> Any:
    body = urlencode({"user": user, "password": password, "next": nxt}).encode()
    return c.request("POST", "/console/login", None, body, {**FORM, **(extra or {})})


def _cookie(reply: Any) -> str:
    return reply.headers["set-cookie"].split(";", 1)[0]


def test_login_form_session_and_logout(users_server: ServerProcess, client_for: Any) -> None:
    users_server.cli("queue", "declare", "work")
    c = client_for(users_server)
    r = c.get("/queues")
    assert r.status == 303 and r.headers["location"] == "/console/login?next=/queues"
    form = c.get("/console/login?next=/queues")
    assert form.status == 200 and b'name=password type=password' in form.body
    assert c.get("/console/static/console.css").status == 200  # the form's style, no login

    # bad input: a wrong password, an unknown user, nothing at all - the same refusal
    before = json.loads(users_server.cli("status", "--json").stdout)["logins"]["failures"]
    for user, password in (("admin", "wrong"), ("nobody", "x"), ("", "")):
        r = _login(c, user, password)
        assert r.status == 401 and b"Login failed" in r.body and "set-cookie" not in r.headers
    after = json.loads(users_server.cli("status", "--json").stdout)["logins"]
    assert after["failures"] >= before + 2  # through the broker's login path and throttle
    # another site cannot log a browser in, and a user without a console tag gets nothing
    assert _login(c, "admin", "admin-pw", {"origin": "http://evil.example"}).status == 403
    many = "&".join(f"x{i}=1" for i in range(20)).encode()  # a 403, not a 500
    assert c.request("POST", "/console/login", None, many, FORM).status == 403
    r = _login(c, "plain", "plain-pw")
    assert r.status == 403 and "set-cookie" not in r.headers

    # next= is a path of this console, never another host (a browser drops tabs and
    # newlines from a Location: "/<TAB>/evil.example" would be "//evil.example")
    for hostile in ("//evil.example", "/\\evil.example", "https://evil.example",
                    "/\t/evil.example", "/\n/evil.example", "/\r\nx-evil: 1", "/\u00e9"):
        r = _login(c, "admin", "admin-pw", nxt=hostile)
        assert r.status == 303 and r.headers["location"] == "/", hostile
        assert "x-evil" not in r.headers
    r = _login(c, "admin", "admin-pw")
    assert r.status == 303 and r.headers["location"] == "/queues"
    attributes = r.headers["set-cookie"]
    assert "HttpOnly" in attributes and "SameSite=Strict" in attributes
    assert "Secure" not in attributes  # plain HTTP: a Secure cookie would never come back
    session = {"cookie": _cookie(r)}
    page = c.request("GET", "/queues", None, None, session)
    assert page.status == 200 and b"work" in page.body and b"Log out" in page.body
    assert b'value="queue.purge"' in page.body  # an administrator's buttons
    assert c.request("GET", "/api/whoami", None, None, session).json()["name"] == "admin"
    forged = {"cookie": f"{COOKIE}=forged"}
    assert c.request("GET", "/queues", None, None, forged).status == 303
    assert c.request("GET", "/api/whoami", None, None, forged).status == 401

    # a session's write must come from this origin: another port of this host is the same
    # *site* (SameSite lets the cookie go along) but not the same origin
    publish = json.dumps({"routing_key": "work", "payload": "x", "payload_encoding": "string",
                          "properties": {}}).encode()
    path = "/api/exchanges/%2F/amq.default/publish"
    for foreign in ({"origin": "http://127.0.0.1:1"}, {"sec-fetch-site": "same-site"},
                    {"sec-fetch-site": "cross-site"}):
        r = c.request("POST", path, None, publish, {"content-type": "text/plain",
                                                     **session, **foreign})
        assert r.status == 403 and r.json()["error"] == "access_refused", (foreign, r.body)
    here = {"origin": f"http://127.0.0.1:{users_server.http_port}",
            "sec-fetch-site": "same-origin"}
    r = c.request("POST", path, None, publish, {"content-type": "application/json",
                                                 **session, **here})
    assert r.status == 200 and r.json() == {"routed": True}
    # Basic credentials a browser remembers go along with another site's form too
    for foreign in ({"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site"}):
        r = c.request("POST", path, ("admin", "admin-pw"), publish,
                      {"content-type": "text/plain", **foreign})
        assert r.status == 403 and r.json()["error"] == "access_refused", (foreign, r.body)
    r = c.request("POST", path, ("admin", "admin-pw"), publish)  # a script: no such headers
    assert r.status == 200 and r.json() == {"routed": True}

    # a monitoring user's session: pages without buttons, and the API refuses its writes
    watcher = {"cookie": _cookie(_login(c, "watcher", "watcher-pw"))}
    page = c.request("GET", "/queues", None, None, watcher)
    assert page.status == 200 and b'value="queue.purge"' not in page.body
    # (403, no Basic challenge: a browser would prompt for Basic credentials over the page)
    refused = c.request("DELETE", "/api/queues/%2F/work/contents", None, None, watcher)
    assert refused.status == 403 and "www-authenticate" not in refused.headers
    refused = c.request("POST", "/console/action", None, b"op=queue.purge&target=work",
                        {**FORM, **watcher})
    assert refused.status == 403 and "www-authenticate" not in refused.headers

    r = c.request("POST", "/console/logout", None, b"", {**FORM, **session})
    assert r.status == 303 and r.headers["location"] == "/console/login"
    assert "Max-Age=0" in r.headers["set-cookie"]
    assert c.request("GET", "/queues", None, None, session).status == 303  # ended
    # a changed password ends the sessions opened with the old one
    users_server.cli("user", "add", "watcher", "--password-stdin", "--tags", "monitoring",
                     input="new-pw\n")
    assert c.request("GET", "/queues", None, None, watcher).status == 303


def test_session_cookie_is_secure_over_tls(start_server: Callable[..., ServerProcess],
                                           tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    add_user(data, "admin", "admin-pw", "administrator")
    srv = start_server("--http-port", "0", "--http-tls-port", "0", "--tls-cert", str(pki.cert),
                       "--tls-key", str(pki.key), data=data)
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    conn = http.client.HTTPSConnection("localhost", srv.http_tls_port, context=context,
                                       timeout=20)
    try:
        conn.request("POST", "/console/login", urlencode(
            {"user": "admin", "password": "admin-pw", "next": "/"}), FORM)
        r = conn.getresponse()
        r.read()
        assert r.status == 303
        cookie = r.getheader("set-cookie") or ""
        assert cookie.endswith("; Secure") and "HttpOnly" in cookie
        conn.request("GET", "/", headers={"cookie": cookie.split(";", 1)[0]})
        page = conn.getresponse()
        assert page.status == 200 and b"Log out" in page.read()
    finally:
        conn.close()


def test_anonymous_write_must_come_from_this_origin(http_server: ServerProcess,
                                                    client_for: Any) -> None:
    """No users on loopback: every request is the anonymous administrator, so a page of any
    site the operator visits could post to the API - unless the write must come from here."""
    http_server.cli("queue", "declare", "work")
    c = client_for(http_server)
    publish = json.dumps({"routing_key": "work", "payload": "x", "payload_encoding": "string",
                          "properties": {}}).encode()
    path = "/api/exchanges/%2F/amq.default/publish"
    for foreign in ({"origin": "http://evil.example"}, {"origin": "null"},
                    {"sec-fetch-site": "cross-site"}):
        r = c.request("POST", path, None, publish, {"content-type": "text/plain", **foreign})
        assert r.status == 403 and r.json()["error"] == "access_refused", (foreign, r.body)
    here = {"origin": f"http://127.0.0.1:{http_server.http_port}",
            "sec-fetch-site": "same-origin"}
    for headers in (here, {}):  # this console's page, or a script
        r = c.request("POST", path, None, publish, {"content-type": "application/json",
                                                     **headers})
        assert r.status == 200 and r.json() == {"routed": True}

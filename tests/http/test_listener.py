"""The HTTP listener of a real ``oxiedge serve``: health, readiness, authentication with the
broker's users and tags, the bounds, and the management API's reads - with real clients."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess, clean_env
from tests.http.conftest import raw_exchange


def _status(srv: ServerProcess) -> dict[str, Any]:
    return json.loads(srv.cli("status", "--json").stdout)


# ------------------------------------------------------------------ health, anonymous

def test_listener_line_health_ready_and_anonymous_admin(http_server: ServerProcess,
                                                         client_for: Any) -> None:
    assert http_server.line("HTTP on 127.0.0.1:") is not None  # the mode line, like MQTT's
    c = client_for(http_server)
    for path in ("/healthz", "/readyz"):
        r = c.get(path)
        assert (r.status, r.json()) == (200, {"status": "ok"})
        assert r.headers["content-type"] == "application/json"
    # No user on a loopback address: anonymous, as the brokers (auth.UserStore's rule).
    who = c.get("/api/whoami")
    assert (who.status, who.json()) == (200, {"name": "anonymous", "tags": ["administrator"]})
    head = c.request("HEAD", "/healthz")
    assert head.status == 200 and head.body == b""
    status = _status(http_server)
    assert status["endpoints"]["http"] == f"127.0.0.1:{http_server.http_port}"
    assert status["http"]["requests"] >= 4 and status["http"]["responses_2xx"] >= 4


def test_readyz_fails_during_a_resource_alarm(http_server: ServerProcess,
                                              client_for: Any) -> None:
    c = client_for(http_server)
    http_server.cli("limits", "--disk-free-limit", "1000TB")
    r = c.get("/readyz")
    assert r.status == 503
    assert r.json()["status"] == "failed" and "disk" in r.json()["reason"]
    assert c.get("/healthz").status == 200  # durable writes still work
    http_server.cli("limits", "--disk-free-limit", "1MB")
    assert c.get("/readyz").status == 200


def test_http_port_off_and_in_use(start_server: Any, tmp_path: Any) -> None:
    srv = start_server()  # the fixture's default: --http-port off
    assert srv.line("HTTP listening") is None and "http" not in _status(srv)
    srv.stop()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "oxiedge", "serve", "--data",
                              str(tmp_path / "d2"), "--mqtt-port", "0", "--amqp-port", "0",
                              "--http-port", str(port)], capture_output=True, text=True,
                             timeout=60, env=clean_env(), stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    assert f"HTTP port {port} on 127.0.0.1 is already in use" in res.stderr


# ------------------------------------------------------------------ authentication

def test_credentials_and_tags(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    # health needs nothing
    assert c.get("/healthz").status == 200 and c.get("/readyz").status == 200
    # no credentials, a wrong password, an unknown user, a user without a management tag
    for auth, reason in ((None, "Login failed: no credentials (HTTP Basic)"),
                         (("admin", "wrong"), "Login failed"),
                         (("nobody", "x"), "Login failed"),
                         (("plain", "plain-pw"), "Not management user")):
        r = c.get("/api/overview", auth)
        assert r.status == 401, (auth, r.body)
        assert r.headers["www-authenticate"] == 'Basic realm="oxiedge"'
        assert r.json() == {"error": "not_authorised", "reason": reason}
    r = c.request("GET", "/metrics", headers={"Authorization": "Bearer abc"})
    assert r.status == 401 and "Basic" in r.json()["reason"]
    logins = _status(users_server)["logins"]
    assert logins["failures"] >= 2  # a wrong password and an unknown user: the login path
    assert logins["tracked_users"] >= 1  # ... and its throttle, as for MQTT and AMQP
    for user, tags in (("admin", ["administrator"]), ("watcher", ["monitoring"]),
                       ("mgmt", ["management"])):
        who = c.get("/api/whoami", (user, f"{user}-pw"))
        assert (who.status, who.json()) == (200, {"name": user, "tags": tags})
        assert c.get("/metrics", (user, f"{user}-pw")).status == 200


def test_a_verified_password_is_not_hashed_again_on_the_same_connection(
        users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    before = _status(users_server)["logins"]["checks"]
    for _ in range(5):
        assert c.get("/api/whoami", ("watcher", "watcher-pw")).status == 200
    status = _status(users_server)
    assert status["logins"]["checks"] - before == 1  # one PBKDF2 check, four cache hits
    assert status["http"]["auth_cache_hits"] >= 4
    # A new connection checks again; a changed password is checked again at once.
    c2 = client_for(users_server)
    assert c2.get("/api/whoami", ("watcher", "watcher-pw")).status == 200
    users_server.cli("user", "add", "watcher", "--password-stdin", input="new-pw\n")
    assert c.get("/api/whoami", ("watcher", "watcher-pw")).status == 401
    assert c.get("/api/whoami", ("watcher", "new-pw")).status == 200


# ------------------------------------------------------------------ bounds and bad input

def test_malformed_requests_get_json_400_and_close(http_server: ServerProcess) -> None:
    port = http_server.http_port
    assert port
    out = raw_exchange(port, b"NONSENSE\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 ")
    assert b'"error":"bad_request"' in out and b"connection: close" in out
    out = raw_exchange(port, b"GET /api/%ff HTTP/1.1\r\nhost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 ") and b"not UTF-8" in out
    out = raw_exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n")  # HTTP/1.1 needs Host
    assert out.startswith(b"HTTP/1.1 400 ")
    assert _status(http_server)["http"]["bad_requests"] >= 3


def test_header_and_body_size_bounds(http_server: ServerProcess) -> None:
    port = http_server.http_port
    assert port
    big = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 20000 + b"\r\n\r\n"
    out = raw_exchange(port, big)
    assert out.startswith(b"HTTP/1.1 431 ")
    declared = (b"POST /api/definitions HTTP/1.1\r\nhost: x\r\ncontent-length: "
                + str(17 * 1024 * 1024).encode() + b"\r\n\r\n" + b"{" * 1000)
    out = raw_exchange(port, declared)
    assert out.startswith(b"HTTP/1.1 413 ") and b"connection: close" in out
    status = _status(http_server)["http"]
    assert status["header_too_large"] == 1 and status["body_too_large"] == 1


def test_slow_headers_are_cut_off_at_the_header_deadline(http_server: ServerProcess) -> None:
    port = http_server.http_port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        start = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            s.sendall(b"")  # (a slowloris would trickle a byte here; the deadline is total)
        took = time.monotonic() - start
    assert out.startswith(b"HTTP/1.1 408 "), out
    assert 5 < took < 25
    assert _status(http_server)["http"]["header_timeouts"] == 1


def test_unknown_path_method_and_bad_query(http_server: ServerProcess,
                                           client_for: Any) -> None:
    c = client_for(http_server)
    r = c.get("/no/such/thing")
    assert (r.status, r.json()["error"]) == (404, "Object Not Found")
    r = c.request("DELETE", "/healthz")
    assert r.status == 405 and r.headers["allow"] == "GET"
    for query, field in (("page=0", "page"), ("page_size=9999", "page_size"),
                         ("name=(&use_regex=true", "name"), ("page=x", "page")):
        r = c.get(f"/api/queues?{query}")
        assert r.status == 400, query
        assert r.json()["reason"].startswith(f"{field}:"), r.json()
    assert c.get("/api/queues/vhost2").status == 404
    assert c.get("/healthz").status == 200  # the connection survived all of that


def test_connection_limits_apply_to_http(start_server: Any) -> None:
    srv = start_server("--http-port", "0", "--max-connections-per-source", "2")
    port = srv.http_port
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        time.sleep(0.3)  # both accepted and counted
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            third.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            try:
                assert third.recv(100) == b""  # closed before a byte was read
            except ConnectionResetError:
                pass
    finally:
        for s in held:
            s.close()
    assert _status(srv)["connections"]["refused_max_per_source"] >= 1


# ------------------------------------------------------------------ management API reads

def test_queues_exchanges_bindings_overview(http_server: ServerProcess,
                                            client_for: Any) -> None:
    assert http_server.amqp_port
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                             http_server.amqp_port))
    ch = conn.channel()
    ch.queue_declare("jobs", durable=True)
    ch.exchange_declare("events", "topic", durable=True)
    ch.queue_bind("jobs", "events", "a.#")
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("events", "a.b", f"m{i}".encode())
    c = client_for(http_server)
    q = c.get("/api/queues/%2F/jobs").json()
    assert (q["name"], q["vhost"], q["durable"], q["messages_ready"], q["messages"]) == \
        ("jobs", "/", True, 3, 3)
    assert [x["name"] for x in c.get("/api/queues").json()] == ["jobs"]
    page = c.get("/api/queues?page=1&page_size=1&columns=name,messages").json()
    assert page["items"] == [{"name": "jobs", "messages": 3}] and page["total_count"] == 1
    x = c.get("/api/exchanges/%2F/events").json()
    assert (x["name"], x["type"], x["durable"]) == ("events", "topic", True)
    assert "amq.topic" in [e["name"] for e in c.get("/api/exchanges").json()]
    assert c.get("/api/exchanges/%2F/nope").status == 404
    binds = c.get("/api/bindings").json()
    assert {"source": "events", "vhost": "/", "destination": "jobs",
            "destination_type": "queue", "routing_key": "a.#", "arguments": {},
            "properties_key": "a.%23"} in binds
    ov = c.get("/api/overview").json()
    assert ov["queue_totals"]["messages_ready"] == 3
    assert ov["object_totals"]["queues"] == 1 and ov["object_totals"]["connections"] == 1
    assert {"amqp", "mqtt", "http"} <= {x["protocol"] for x in ov["listeners"]}
    conn.close()


# ------------------------------------------------------------------ metrics

def test_metrics_of_a_running_broker(http_server: ServerProcess, client_for: Any) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                             http_server.amqp_port))
    ch = conn.channel()
    ch.queue_declare("m1")
    ch.basic_publish("", "m1", b"x")
    ch.basic_publish("", "no-such-queue", b"x")
    c = client_for(http_server)
    r = c.get("/metrics")
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.body.decode()
    assert "rabbitmq_identity_info{" in text
    assert "\nrabbitmq_queues 1\n" in text
    assert '\nrabbitmq_global_messages_received_total{protocol="amqp091"} 2\n' in text
    assert "\nrabbitmq_channel_messages_unroutable_dropped_total 1\n" in text
    assert "\noxiedge_http_requests_total " in text
    per = c.get("/metrics/per-object").body.decode()
    assert 'rabbitmq_queue_messages_ready{vhost="/",queue="m1"} 1' in per
    conn.close()
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian: prometheus) not installed")
    for body in (text, per):
        res = subprocess.run(["promtool", "check", "metrics"], input=body,
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr


# ------------------------------------------------------------------ HTTPS

def test_https_port_serves_the_same_with_the_tls_settings(start_server: Any,
                                                         tmp_path: Any) -> None:
    import http.client

    from tests.tls.conftest import client_context, make_pki

    pki = make_pki(tmp_path / "pki")
    srv = start_server("--http-port", "off", "--http-tls-port", "0", "--tls-cert",
                       str(pki.cert), "--tls-key", str(pki.key))
    assert srv.http_port is None and srv.http_tls_port
    conn = http.client.HTTPSConnection("127.0.0.1", srv.http_tls_port, timeout=20,
                                       context=client_context(pki.ca_file))
    try:
        for _ in range(2):  # keep-alive over TLS
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            assert (r.status, json.loads(r.read())) == (200, {"status": "ok"})
    finally:
        conn.close()
    assert _status(srv)["endpoints"]["http_tls"] == f"127.0.0.1:{srv.http_tls_port}"
    # A plain-text client on the TLS port: a failed handshake, counted by TLS, no answer.
    assert raw_exchange(srv.http_tls_port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n") == b""


# ------------------------------------------------------------------ every path, every role

READ_PATHS = ["/metrics", "/metrics/per-object", "/api/whoami", "/api/overview", "/api/vhosts",
              "/api/queues", "/api/queues/%2F", "/api/exchanges", "/api/exchanges/%2F",
              "/api/exchanges/%2F/amq.topic", "/api/bindings", "/api/bindings/%2F",
              "/api/nodes", "/api/health/checks/alarms", "/api/health/checks/local-alarms",
              "/api/health/checks/virtual-hosts", "/api/health/checks/node-is-quorum-critical",
              "/api/health/checks/protocol-listener/amqp", "/api/aliveness-test/%2F",
              "/api/connections", "/api/channels", "/api/consumers", "/api/mqtt/sessions",
              "/api/mqtt/subscriptions", "/api/mqtt/retained", "/api/oxiedge/ingest",
              "/api/oxiedge/uplinks", "/api/oxiedge/uplinks/status", "/api/cluster-name",
              "/api/extensions", "/api/exchanges/%2F/amq.topic/bindings/source",
              "/api/exchanges/%2F/amq.topic/bindings/destination"]
ADMIN_PATHS = ["/api/users", "/api/users/admin", "/api/users/admin/permissions",
               "/api/permissions", "/api/definitions", "/api/definitions/%2F",
               "/api/topic-permissions"]


def test_every_path_for_every_role(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    for path in READ_PATHS + ADMIN_PATHS:
        assert c.get(path).status == 401, path
        assert c.get(path, ("plain", "plain-pw")).status == 401, path
        assert c.get(path, ("admin", "admin-pw")).status == 200, path
        expected = 401 if path in ADMIN_PATHS else 200
        for user in ("watcher", "mgmt"):
            r = c.get(path, (user, f"{user}-pw"))
            assert r.status == expected, (path, user, r.body)
    r = c.get("/api/users", ("watcher", "watcher-pw"))
    assert r.json() == {"error": "not_authorised", "reason": "Not administrator user"}


def test_users_permissions_nodes_and_health_checks(users_server: ServerProcess,
                                                   client_for: Any) -> None:
    users_server.cli("permissions", "set", "plain", "^$", ".*", "^q")
    c, admin = client_for(users_server), ("admin", "admin-pw")
    users = {u["name"]: u["tags"] for u in c.get("/api/users", admin).json()}
    assert users == {"admin": ["administrator"], "mgmt": ["management"], "plain": [],
                     "watcher": ["monitoring"]}
    assert c.get("/api/users/plain", admin).json()["password_hash"].startswith("pbkdf2_sha256$")
    assert c.get("/api/users/plain/permissions", admin).json() == [
        {"user": "plain", "vhost": "/", "configure": "^$", "write": ".*", "read": "^q"}]
    assert c.get("/api/permissions/%2F/plain", admin).json()["read"] == "^q"
    assert c.get("/api/users/ghost", admin).status == 404
    node = c.get("/api/nodes", admin).json()[0]
    assert node["running"] is True and node["mem_used"] > 0 and node["fd_used"] > 0
    assert c.get(f"/api/nodes/{node['name']}", admin).status == 200
    port = users_server.amqp_port
    assert c.get(f"/api/health/checks/port-listener/{port}", admin).json() == \
        {"status": "ok", "port": port}
    r = c.get("/api/health/checks/protocol-listener/https", admin)
    assert r.status == 503 and r.json()["missing"] == "https"
    assert c.get("/api/health/checks/port-listener/x", admin).status == 400
    users_server.cli("limits", "--disk-free-limit", "1000TB")
    r = c.get("/api/health/checks/alarms", admin)
    assert r.status == 503 and r.json()["alarms"][0]["resource"] == "disk"
    assert c.get("/api/aliveness-test/%2F", admin).status == 503
    users_server.cli("limits", "--disk-free-limit", "1MB")
    assert c.get("/api/health/checks/alarms", admin).status == 200


def test_long_lists_are_streamed(http_server: ServerProcess, client_for: Any) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                             http_server.amqp_port))
    ch = conn.channel()
    for i in range(300):
        ch.queue_declare(f"s{i:03d}")
    c = client_for(http_server)
    r = c.get("/api/queues")
    assert r.headers.get("transfer-encoding") == "chunked"
    assert sorted(q["name"] for q in r.json()) == [f"s{i:03d}" for i in range(300)]
    sorted_page = c.get("/api/queues?sort=name&sort_reverse=true&page=1&page_size=2").json()
    assert [q["name"] for q in sorted_page["items"]] == ["s299", "s298"]
    per = c.get("/metrics/per-object")
    assert per.headers.get("transfer-encoding") == "chunked"
    assert per.body.decode().count("rabbitmq_queue_messages_ready{") == 300
    head = c.request("HEAD", "/api/queues")
    assert head.status == 200 and head.body == b""
    assert c.get("/healthz").status == 200  # keep-alive after streamed answers
    conn.close()

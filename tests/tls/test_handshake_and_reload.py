"""Handshakes that stall or fail are bounded and counted without holding up other clients;
certificate reloads (``oxiedge tls reload``, SIGHUP) keep established connections."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import time
from collections.abc import Callable

import pytest
import trustme

from tests.conftest import ServerProcess
from tests.mqtt.conftest import Client
from tests.tls.conftest import Pki, client_context, tls_status

Make = Callable[..., Client]


def _closed_by_server(sock: socket.socket, timeout: float) -> float:
    """Seconds until the server closes ``sock`` (recv -> b"" or a reset)."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_stalled_and_garbage_handshakes(start_server: Callable[..., ServerProcess], pki: Pki,
                                        clients: Make) -> None:
    srv = start_server(*pki.server_args("--tls-handshake-timeout", "1"))
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5)
              for port in (srv.mqtt_tls_port, srv.amqp_tls_port)]
    # Half a TLS record header, then nothing: the server waits inside the handshake.
    partial = socket.create_connection(("127.0.0.1", srv.mqtt_tls_port), timeout=5)
    partial.sendall(b"\x16\x03")
    # Meanwhile a real TLS client is served at once.
    t0 = time.monotonic()
    c = clients(srv.mqtt_tls_port, "innocent")
    c.c.tls_set_context(client_context(pki.ca_file))
    c.connect()
    assert c.subscribe(("stall/t", 1)) == [1]
    c.publish("stall/t", b"served", qos=1)
    assert c.get().payload == b"served"
    innocent = time.monotonic() - t0
    # The stalled ones are dropped after --tls-handshake-timeout (1 s), not earlier, and
    # well before the generous bound here.
    for sock in [*silent, partial]:
        waited = _closed_by_server(sock, 8)
        assert waited < 6, waited
        sock.close()
    # Plain-text protocol bytes on a TLS port: a failed handshake, closed at once.
    for port, hello in ((srv.mqtt_tls_port, b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"),
                        (srv.amqp_tls_port, b"AMQP\x00\x00\x09\x01")):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(hello)
            assert _closed_by_server(s, 5) < 4
    status = tls_status(srv)
    assert status["handshake_timeouts"] == 3, status
    assert status["handshake_failures"] >= 2, status
    assert status["handshake_timeout"] == 1
    print(f"innocent TLS client: connect+subscribe+publish+receive in {innocent * 1000:.0f} ms "
          "while 3 handshakes stalled")
    c.disconnect()


def test_handshakes_in_progress_are_bounded(start_server: Callable[..., ServerProcess],
                                            pki: Pki, clients: Make) -> None:
    srv = start_server(*pki.server_args("--tls-max-handshakes", "2",
                                        "--tls-handshake-timeout", "2"))
    port = srv.mqtt_tls_port
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
    deadline = time.monotonic() + 10
    while tls_status(srv)["handshakes_in_progress"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A third one is closed at once, without waiting for the 2 s timeout.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as third:
        assert _closed_by_server(third, 5) < 1.5
    status = tls_status(srv)
    assert status["handshakes_refused"] == 1 and status["max_handshakes"] == 2, status
    # Once the stalled ones time out, real clients are served again.
    for sock in silent:
        assert _closed_by_server(sock, 8) < 6
        sock.close()
    c = clients(port, "after-flood")
    c.c.tls_set_context(client_context(pki.ca_file))
    c.connect()
    c.disconnect()
    assert tls_status(srv)["handshakes_in_progress"] == 0


def _handshake_ok(port: int | None, ctx: ssl.SSLContext) -> bool:
    assert port is not None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
            return True
    except ssl.SSLCertVerificationError:
        return False


def test_reload_keeps_connections_and_serves_the_new_certificate(
        tls_server: ServerProcess, pki: Pki, clients: Make) -> None:
    srv = tls_server
    old_ctx = client_context(pki.ca_file)
    sub = clients(srv.mqtt_tls_port, "stays")
    sub.c.tls_set_context(old_ctx)
    sub.connect()
    assert sub.subscribe(("reload/#", 1)) == [1]
    # A certificate from a new CA, then `oxiedge tls reload`.
    new_ca = trustme.CA()
    new_ca_file = pki.dir / "new-ca.pem"
    new_ca.cert_pem.write_to_path(str(new_ca_file))
    pki.write_server(new_ca.issue_cert("127.0.0.1", "localhost"))
    out = srv.cli("tls", "reload")
    assert "reloaded" in out.stdout
    # The established connection keeps working in both directions.
    pub = clients(srv.mqtt_port, "plain-pub")
    pub.connect()
    pub.publish("reload/a", b"after reload", qos=1)
    assert sub.get().payload == b"after reload"
    sub.publish("reload/b", b"still sending", qos=1)
    assert sub.get().payload == b"still sending"
    # New handshakes see the new certificate (on both listeners).
    new_ctx = client_context(new_ca_file)
    for port in (srv.mqtt_tls_port, srv.amqp_tls_port):
        assert not _handshake_ok(port, old_ctx)
        assert _handshake_ok(port, new_ctx)
    # SIGHUP does the same: back to the first CA's certificate.
    pki.write_server(pki.ca.issue_cert("127.0.0.1", "localhost"))
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while tls_status(srv)["reloads"] < 2:
        assert time.monotonic() < deadline, "SIGHUP did not reload"
        time.sleep(0.1)
    assert _handshake_ok(srv.mqtt_tls_port, old_ctx)
    # A broken file: the reload fails loudly, the previous certificate stays in service.
    pki.cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
    bad = srv.cli("tls", "reload", check=False)
    assert bad.returncode == 1
    assert "previous certificate stays in use" in " ".join((bad.stdout + bad.stderr).split())
    assert _handshake_ok(srv.mqtt_tls_port, old_ctx)
    status = tls_status(srv)
    assert status["reloads"] == 2 and status["reload_failures"] == 1, status
    assert "--tls-cert" in status["last_reload_error"]
    sub.publish("reload/c", b"alive", qos=1)
    assert sub.get().payload == b"alive"
    assert srv.proc.poll() is None


def test_reload_without_tls_says_so(server: ServerProcess) -> None:
    res = server.cli("tls", "reload", check=False)
    assert res.returncode == 1
    assert "no TLS port is configured" in " ".join((res.stdout + res.stderr).split())
    # SIGHUP does not end a server without TLS either.
    assert server.proc is not None
    server.proc.send_signal(signal.SIGHUP)
    server.wait_for_line("received SIGHUP", 10)
    assert server.proc.poll() is None
    status = json.loads(server.cli("status", "--json").stdout)
    assert "tls" not in status and "mqtt_tls" not in status["endpoints"]


pytestmark = pytest.mark.timeout(120)

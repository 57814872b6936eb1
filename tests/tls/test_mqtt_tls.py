"""MQTT over TLS with real clients: paho ``tls_set``, mosquitto_pub/sub ``--cafile``;
certificates refused by the clients (expired, wrong host); client certificates."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme

from tests.conftest import ServerProcess, run_cli
from tests.mqtt.conftest import Client
from tests.tls.conftest import Pki, client_context, expired, tls_status

Make = Callable[..., Client]


def tls_client(clients: Make, port: int | None, ca_file: Path, client_id: str = "",
               cert: tuple[Path, Path] | None = None) -> Client:
    c = clients(port, client_id)
    c.c.tls_set_context(client_context(ca_file, cert))
    return c


def test_paho_over_tls_next_to_the_plain_port(tls_server: ServerProcess, pki: Pki,
                                              clients: Make) -> None:
    secure = tls_client(clients, tls_server.mqtt_tls_port, pki.ca_file, "secure")
    secure.connect()
    plain = clients(tls_server.mqtt_port, "plain")
    plain.connect()
    assert secure.subscribe(("tls/in", 1)) == [1]
    assert plain.subscribe(("tls/out", 1)) == [1]
    plain.publish("tls/in", b"to the TLS client", qos=1)
    assert secure.get().payload == b"to the TLS client"
    big = bytes(range(256)) * 1024  # 256 KiB: many TLS records each way
    secure.publish("tls/out", big, qos=1)
    assert plain.get().payload == big
    secure.disconnect()
    assert tls_status(tls_server)["handshakes"] >= 1


def _connect_error(port: int | None, ca_file: Path) -> Exception:
    """A verifying paho client must refuse the server's certificate."""
    c = Client(port, "refuser")
    c.c.tls_set_context(client_context(ca_file))
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        c.c.connect("127.0.0.1", c.port)
    return info.value


def _mosquitto_sub(port: int | None, ca_file: Path, topic: str
                   ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "--cafile",
                           str(ca_file), "-t", topic, "-C", "1", "-W", "10", "-i", "msub"],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients missing")
def test_mosquitto_clients_with_cafile(tls_server: ServerProcess, pki: Pki) -> None:
    port = tls_server.mqtt_tls_port
    pub = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "--cafile",
                          str(pki.ca_file), "-t", "tls/retained", "-m", "hello over TLS",
                          "-q", "1", "-r", "-i", "mpub"],
                         capture_output=True, text=True, timeout=30)
    assert pub.returncode == 0, pub.stderr
    sub = _mosquitto_sub(port, pki.ca_file, "tls/retained")
    assert sub.returncode == 0, sub.stderr
    assert sub.stdout.strip() == "hello over TLS"
    # Against another CA the client refuses, and the broker counts the failed handshake.
    other = trustme.CA()
    other_ca = pki.dir / "other-ca.pem"
    other.cert_pem.write_to_path(str(other_ca))
    bad = _mosquitto_sub(port, other_ca, "tls/retained")
    assert bad.returncode != 0 and "hello" not in bad.stdout


def test_expired_and_wrong_host_certificates_are_refused(tls_server: ServerProcess, pki: Pki,
                                                         clients: Make) -> None:
    port = tls_server.mqtt_tls_port
    failures = tls_status(tls_server)["handshake_failures"]
    pki.write_server(expired(pki.ca))
    tls_server.cli("tls", "reload")
    err = _connect_error(port, pki.ca_file)
    assert "expired" in str(err)
    pki.write_server(pki.ca.issue_cert("sensors.example.org"))
    tls_server.cli("tls", "reload")
    err = _connect_error(port, pki.ca_file)
    assert "match" in str(err) or "mismatch" in str(err), err
    if shutil.which("mosquitto_sub"):
        assert _mosquitto_sub(port, pki.ca_file, "x").returncode != 0
    # A good certificate again: served, and the refused handshakes were counted.
    pki.write_server(pki.ca.issue_cert("127.0.0.1", "localhost"))
    tls_server.cli("tls", "reload")
    tls_client(clients, port, pki.ca_file, "after").connect()
    status = tls_status(tls_server)
    assert status["handshake_failures"] >= failures + 2, status
    assert status["reloads"] == 3


def _raw_tls_connect(port: int | None, ctx: ssl.SSLContext) -> bytes:
    """Handshake and send a bare CONNECT (no credentials); returns the reply (b"" = closed).
    In TLS 1.3 a refused client certificate shows up after the handshake, on the read."""
    assert port is not None
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x3c\x00\x03raw")
        return tls.recv(4)


def test_client_certificates_and_identity_as_username(
        start_server: Callable[..., ServerProcess], pki: Pki, tmp_path: Path,
        clients: Make) -> None:
    data = tmp_path / "data"
    res = run_cli(data, "user", "add", "backend", "--password-stdin", input="pw\n")
    assert res.returncode == 0, res.stderr  # a user exists: anonymous access is off
    srv = start_server(*pki.server_args("--tls-ca", str(pki.ca_file), "--tls-verify-client",
                                        "required", "--tls-identity-as-username"), data=data)
    port = srv.mqtt_tls_port
    # A certificate from the trusted CA is the credential: no password needed.
    sensor = tls_client(clients, port, pki.ca_file, "sensor-1", cert=pki.client("sensor-1"))
    sensor.connect()
    sensor.publish("from/cert", b"x", qos=1)
    # No client certificate, or one from another CA: the handshake is refused.
    for ctx in (client_context(pki.ca_file),
                client_context(pki.ca_file, pki.client("mallory", ca=trustme.CA()))):
        try:
            reply = _raw_tls_connect(port, ctx)
        except (ssl.SSLError, ConnectionError):
            reply = b""
        assert reply == b"", reply
    assert tls_status(srv)["handshake_failures"] >= 2
    # The plain port still wants a password: the certificate rule is per TLS connection.
    clients(srv.mqtt_port, "anon").connect(expect_rc=5)
    clients(srv.mqtt_port, "backend").connect(auth=("backend", "pw"))


def test_optional_client_certificate(start_server: Callable[..., ServerProcess], pki: Pki,
                                     tmp_path: Path, clients: Make) -> None:
    data = tmp_path / "data"
    assert run_cli(data, "user", "add", "bob", "--password-stdin", input="pw\n").returncode == 0
    srv = start_server(*pki.server_args("--tls-ca", str(pki.ca_file), "--tls-verify-client",
                                        "optional", "--tls-identity-as-username"), data=data)
    port = srv.mqtt_tls_port
    tls_client(clients, port, pki.ca_file, "with-cert", cert=pki.client("dev")).connect()
    # Without a certificate: an ordinary TLS client, user name and password checked.
    tls_client(clients, port, pki.ca_file, "pw").connect(auth=("bob", "pw"))
    tls_client(clients, port, pki.ca_file, "nopw").connect(expect_rc=5)

"""AMQPS with real clients: pika ``SSLOptions``, aio-pika ``amqps://``, and the EXTERNAL
mechanism with a client certificate (RabbitMQ's rabbitmq_auth_mechanism_ssl)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from tests.conftest import ServerProcess, run_cli
from tests.tls.conftest import Pki, client_context, tls_status


def _params(port: int | None, pki: Pki, cert: tuple[Path, Path] | None = None,
            credentials: pika.credentials.VALID_TYPES | None = None) -> pika.ConnectionParameters:
    assert port is not None
    return pika.ConnectionParameters(
        "127.0.0.1", port, credentials=credentials or pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(pki.ca_file, cert), "127.0.0.1"),
        connection_attempts=1, blocked_connection_timeout=10)


def test_pika_over_tls_with_confirms(tls_server: ServerProcess, pki: Pki) -> None:
    conn = pika.BlockingConnection(_params(tls_server.amqp_tls_port, pki))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("tls-q", durable=True)
    body = b"z" * 300_000  # several frames, many TLS records
    ch.basic_publish("", "tls-q", body, pika.BasicProperties(delivery_mode=2))
    # The same queue over the plain port.
    plain = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                              tls_server.amqp_port))
    method, _props, got = plain.channel().basic_get("tls-q", auto_ack=True)
    assert method is not None and got == body
    plain.close()
    conn.close()
    assert tls_status(tls_server)["handshakes"] >= 1


def test_aio_pika_amqps_url(tls_server: ServerProcess, pki: Pki) -> None:
    async def main() -> bytes:
        url = f"amqps://guest:guest@127.0.0.1:{tls_server.amqp_tls_port}/"
        conn = await aio_pika.connect(url, ssl_context=client_context(pki.ca_file))
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("aio-tls", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"amqps ok"), "aio-tls")
            msg = await q.get(timeout=10)
            await msg.ack()
            return msg.body

    assert asyncio.run(main()) == b"amqps ok"


def test_aio_pika_refuses_a_certificate_from_another_ca(tls_server: ServerProcess,
                                                        pki: Pki, tmp_path: Path) -> None:
    import ssl

    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))

    async def main() -> None:
        url = f"amqps://guest:guest@127.0.0.1:{tls_server.amqp_tls_port}/"
        await aio_pika.connect(url, ssl_context=client_context(other), timeout=10)

    with pytest.raises((ssl.SSLCertVerificationError, ConnectionError)):
        asyncio.run(main())


def test_external_mechanism_with_a_client_certificate(
        start_server: Callable[..., ServerProcess], pki: Pki, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli(data, "user", "add", "worker", "--password-stdin",
                   input="pw\n").returncode == 0  # anonymous access off
    srv = start_server(*pki.server_args("--tls-ca", str(pki.ca_file), "--tls-verify-client",
                                        "optional", "--tls-identity-as-username"), data=data)
    port = srv.amqp_tls_port
    conn = pika.BlockingConnection(_params(port, pki, cert=pki.client("worker"),
                                           credentials=pika.credentials.ExternalCredentials()))
    ch = conn.channel()
    ch.queue_declare("ext-q", auto_delete=True)
    ch.basic_publish("", "ext-q", b"by certificate")
    method, _p, body = ch.basic_get("ext-q", auto_ack=True)
    assert method is not None and body == b"by certificate"
    conn.close()

    async def aio_external() -> bytes:  # aiormq: ?auth=external
        ctx = client_context(pki.ca_file, pki.client("worker"))
        conn = await aio_pika.connect(f"amqps://127.0.0.1:{port}/?auth=external",
                                      ssl_context=ctx)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("aio-ext", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio cert"), "aio-ext")
            msg = await q.get(timeout=10)
            await msg.ack()
            return msg.body

    assert asyncio.run(aio_external()) == b"aio cert"
    # No certificate: EXTERNAL is not offered; PLAIN with the password still works.
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(_params(port, pki,
                                        credentials=pika.credentials.ExternalCredentials()))
    pika.BlockingConnection(_params(port, pki, credentials=pika.PlainCredentials(
        "worker", "pw"))).close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(_params(port, pki, credentials=pika.PlainCredentials(
            "worker", "wrong")))
    # Nor on the plain port, certificate or not.
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", srv.amqp_port, credentials=pika.credentials.ExternalCredentials(),
            connection_attempts=1))

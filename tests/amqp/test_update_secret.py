"""``connection.update-secret`` with stock pika against a real server (docs/amqp.md).

The new secret is accepted without being checked and changes nothing: the connection keeps
the user it logged in as, with that user's permissions - as RabbitMQ 3.10 does for its
internal users (checked side by side with pika: a wrong secret, the same one, another
user's password all get update-secret-ok and leave the user as it was).
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import cli_rows, params
from tests.amqp.rawclient import RawClient


def _login(srv: Any, user: str, password: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(
        srv.amqp_port, credentials=pika.PlainCredentials(user, password)))


def test_update_secret_is_accepted_and_keeps_the_user(start_server: Any) -> None:
    srv = start_server()
    srv.cli("user", "add", "admin", "--password-stdin", input="admin-pw\n")
    srv.cli("user", "add", "limited", "--password-stdin", input="limited-pw\n")
    srv.cli("permissions", "set", "admin", ".*", ".*", ".*")
    srv.cli("permissions", "set", "limited", "^lim-", ".*", ".*")

    c = _login(srv, "limited", "limited-pw")
    # Another user's password does not make this connection that user...
    c.update_secret("admin-pw", "rotated by the test")
    ch = c.channel()
    ch.queue_declare("lim-q", auto_delete=True)
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.queue_declare("admins-q")
    assert refused.value.reply_code == 403
    # ... and a secret that is no password at all does not end it.
    c.update_secret("not-a-password", "token refresh")
    c.update_secret("", "empty")
    c.update_secret("limited-pw", "the same secret")
    ch = c.channel()
    ch.queue_declare("lim-q2", auto_delete=True)
    rows = cli_rows(srv, "connections")
    assert [r["user"] for r in rows] == ["limited"]
    c.close()

    # One info line per connection and minute, with the client's reason (clipped repr);
    # the log is read by a thread: the connection list above was a round trip after it.
    lines = [ln for ln in srv.log_lines if "update-secret accepted" in ln]
    assert len(lines) == 1, lines
    assert "(user 'limited')" in lines[0] and "'rotated by the test'" in lines[0]

    # The admin's connection, for comparison, is unaffected by a wrong secret too.
    a = _login(srv, "admin", "admin-pw")
    a.update_secret("wrong", "rotate")
    a.channel().queue_declare("admins-q", auto_delete=True)
    a.close()


def test_update_secret_before_open_is_a_connection_error(server: Any) -> None:
    """Only an open connection may update its secret: during the handshake it is a
    connection error (503 here; RabbitMQ 3.10 answers 504 "unexpected method")."""
    raw = RawClient(server.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    raw.expect(spec.ConnectionStart)
    raw.method(0, spec.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest"))
    tune = raw.expect(spec.ConnectionTune)
    assert isinstance(tune, spec.ConnectionTune)
    raw.method(0, spec.ConnectionTuneOk(tune.channel_max, 131072, 0))
    raw.method(0, spec.ConnectionUpdateSecret(b"early", "rotate"))
    raw.expect_close(503)
    raw.close()

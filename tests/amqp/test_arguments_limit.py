"""--amqp-max-arguments-bytes on a real server with pika: the argument tables the broker
keeps (headers bindings, queue and exchange arguments) share one budget; past it a new
table gets 406 on its channel while the connection and its other channels go on; what
goes refunds; durable tables recovered over a lowered budget all stay and route."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp.exchanges import args_key
from oxiedge.amqp.tablecost import binding_cost, table_cost
from tests.amqp.conftest import params
from tests.conftest import ServerProcess

LIMIT = 64 << 10


def amqp_status(srv: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


def headers_table(tag: str, n: int) -> dict[str, Any]:
    """What pika sends and the server decodes alike: str values, None as void."""
    return {"x-match": "any", "kind": tag, **{f"{tag}-{i:04d}": None for i in range(n)}}


def cost_of(table: dict[str, Any]) -> int:
    return binding_cost(table, args_key(table))


def connect(srv: ServerProcess) -> pika.BlockingConnection:
    assert srv.amqp_port is not None
    return pika.BlockingConnection(params(srv.amqp_port))


def refused(conn: pika.BlockingConnection, call: Callable[[Any], Any]) -> str:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        call(ch)
    assert info.value.reply_code == 406
    return str(info.value)


def test_a_table_past_the_budget_is_406_and_a_refund_makes_room(
        start_server: Callable[..., ServerProcess]) -> None:
    srv = start_server("--mqtt-port", "off", "--amqp-max-arguments-bytes", "64KiB")
    first, second = headers_table("a", 400), headers_table("b", 400)
    assert cost_of(first) < LIMIT < cost_of(first) + cost_of(second)
    conn = connect(srv)
    other = conn.channel()  # stays usable through every refusal below
    other.exchange_declare("h", "headers")
    other.queue_declare("hq")
    other.queue_bind("hq", "h", arguments=first)
    other.queue_bind("hq", "h", arguments=dict(first))  # identical: fine at the budget
    text = refused(conn, lambda ch: ch.queue_bind("hq", "h", arguments=second))
    assert f"arguments limit of {LIMIT} bytes" in text
    big = "x" * 40_000
    refused(conn, lambda ch: ch.queue_declare("dl", arguments={"x-dead-letter-exchange": big}))
    refused(conn, lambda ch: ch.exchange_declare("ae", "fanout",
                                                 arguments={"alternate-exchange": big}))
    other.queue_bind("hq", "amq.direct", "plain")  # no table: not charged, not refused
    other.basic_publish("h", "", b"routed", pika.BasicProperties(headers={"a-0007": 1}))
    assert other.basic_get("hq", auto_ack=True)[2] == b"routed"
    status = amqp_status(srv)
    assert status["arguments_limit_refused"] == 3
    assert status["arguments_bytes"] == cost_of(first)
    assert status["max_arguments_bytes"] == LIMIT
    # An unbind refunds: the second table fits now.
    other.queue_unbind("hq", "h", arguments=first)
    assert amqp_status(srv)["arguments_bytes"] == 0
    other.queue_bind("hq", "h", arguments=second)
    # Deleting the queue refunds its bindings; deleting an exchange its own arguments.
    other.queue_delete("hq")
    assert amqp_status(srv)["arguments_bytes"] == 0
    dl_args = {"x-dead-letter-exchange": big}
    other.queue_declare("dl", arguments=dl_args)
    assert amqp_status(srv)["arguments_bytes"] == table_cost(dl_args)
    refused(conn, lambda ch: ch.exchange_declare("ae", "fanout",
                                                 arguments={"alternate-exchange": big}))
    other.queue_delete("dl")
    other.exchange_declare("ae", "fanout", arguments={"alternate-exchange": big})
    other.exchange_delete("ae")
    assert amqp_status(srv)["arguments_bytes"] == 0
    assert conn.is_open and other.is_open
    conn.close()


def test_exclusive_queues_and_auto_delete_exchanges_refund_when_they_go(
        start_server: Callable[..., ServerProcess]) -> None:
    srv = start_server("--mqtt-port", "off")
    table = headers_table("c", 200)
    conn = connect(srv)
    ch = conn.channel()
    ch.exchange_declare("gone-with-its-queue", "headers", auto_delete=True)
    q = ch.queue_declare("", exclusive=True,
                         arguments={"x-dead-letter-exchange": "d" * 5000}).method.queue
    ch.queue_bind(q, "gone-with-its-queue", arguments=table)
    assert amqp_status(srv)["arguments_bytes"] > cost_of(table) + 5000
    conn.close()  # the exclusive queue goes, its binding, then the auto-delete exchange
    status = amqp_status(srv)
    assert status["arguments_bytes"] == 0 and status["exchanges"] == 6  # the built-in ones


def test_durable_tables_over_a_lowered_budget_are_all_recovered(
        start_server: Callable[..., ServerProcess]) -> None:
    srv = start_server("--mqtt-port", "off")
    table = headers_table("d", 300)
    conn = connect(srv)
    ch = conn.channel()
    ch.exchange_declare("dh", "headers", durable=True)
    ch.queue_declare("dq", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_bind("dq", "dh", arguments=table)
    conn.close()
    used = amqp_status(srv)["arguments_bytes"]
    assert used > cost_of(table)
    srv.stop()
    srv = start_server("--mqtt-port", "off", "--amqp-max-arguments-bytes", "1KiB",
                       data=srv.data)
    warnings = [line for line in srv.log_lines if "--amqp-max-arguments-bytes" in line]
    assert len(warnings) == 1 and f"cost {used} bytes" in warnings[0]
    status = amqp_status(srv)
    assert (status["arguments_bytes"], status["bindings"]) == (used, 1)
    conn = connect(srv)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("dh", "", b"still routed",
                     pika.BasicProperties(headers={"d-0123": "any value"}))
    assert ch.basic_get("dq", auto_ack=True)[2] == b"still routed"
    # New tables are refused until deletes bring it under; plain bindings are fine.
    refused(conn, lambda c: c.queue_bind("dq", "dh", arguments={"x-match": "all", "k": 1}))
    ch.queue_bind("dq", "amq.direct", "plain")
    ch.queue_unbind("dq", "dh", arguments=table)
    ch.queue_bind("dq", "dh", arguments={"x-match": "all", "k": 1})
    assert amqp_status(srv)["arguments_limit_refused"] == 1
    conn.close()


def test_the_flag_is_a_size() -> None:
    from oxiedge.config import Config, ConfigError

    assert Config.resolve({}, {}).amqp_max_arguments_bytes == 16 << 20
    cfg = Config.resolve({}, {"OXIEDGE_AMQP_MAX_ARGUMENTS_BYTES": "2MiB"})
    assert cfg.amqp_max_arguments_bytes == 2 << 20
    assert Config.resolve({"amqp_max_arguments_bytes": "1MB"}, {}).amqp_max_arguments_bytes \
        == 1_000_000
    with pytest.raises(ConfigError) as info:
        Config.resolve({}, {"OXIEDGE_AMQP_MAX_ARGUMENTS_BYTES": "lots"})
    assert "OXIEDGE_AMQP_MAX_ARGUMENTS_BYTES" in str(info.value)

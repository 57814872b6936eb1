"""Settings of the AMQP broker: what it proposes to clients and its bounds (docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass

from .declare import Bound, option
from .kinds import count, seconds, size


@dataclass(frozen=True)
class AmqpSettings:
    """The AMQP broker's settings."""

    amqp_queue_limit: int = option(
        count(), "10000000",
        "ready messages per durable AMQP queue (on disk) before the oldest is dropped; a queue "
        "held in memory keeps at most --amqp-memory-queue-limit",
        limits=Bound("AMQP", "ready messages per durable queue (on disk)",
                     "oldest dropped (or dead-lettered); `x-max-length` is capped by it",
                     "`amqp.dropped`",
                     default="10000000 (a durable queue's ready messages are on disk, a window "
                             "of 1024 in memory)"))
    amqp_memory_queue_limit: int = option(
        count(), "100000",
        "ready messages per AMQP queue held in memory (exclusive, non-durable; at most "
        "--amqp-queue-limit), and unacked deliveries per channel",
        limits=Bound("AMQP", "ready messages per queue held in memory (exclusive or "
                             "non-durable: not paged to disk)",
                     "oldest dropped (or dead-lettered); `x-max-length` is capped by it",
                     "`amqp.dropped`",
                     default="100000 (and never above `--amqp-queue-limit`)"))
    amqp_heartbeat: int = option(
        count(0, metavar="S"), "60",
        "AMQP heartbeat the server proposes, seconds (0 = off)",
        limits=None)
    amqp_frame_max: int = option(
        count(4096), "131072",
        "largest AMQP frame the server proposes, bytes",
        limits=Bound("AMQP", "frame size",
                     "connection closed (501 FRAME_ERROR)",
                     "`amqp.connection_errors`"))
    amqp_channel_max: int = option(
        count(), "2047",
        "most AMQP channels per connection",
        limits=Bound("AMQP", "channels per connection",
                     "connection closed (530 NOT_ALLOWED)",
                     "`amqp.channel_limit_refused`",
                     default="2047 (negotiated down by the client)"))
    amqp_max_message_size: int = option(
        size(), "16MiB",
        "largest AMQP message body; a bigger content header gets channel error 406",
        limits=Bound("AMQP", "message size",
                     "the content header is refused at once: channel error 406 `message size N is "
                     "larger than configured max size M`; its body frames are dropped unread",
                     "`amqp.messages_too_large`",
                     default="16MiB (RabbitMQ 4.x's default; 3.x: 128 MiB)"))
    amqp_queue_bytes: int = option(
        size(), "1GiB",
        "ready body bytes per durable AMQP queue (on disk) without x-max-length-bytes (oldest "
        "dropped); a queue held in memory keeps at most --amqp-memory-queue-bytes",
        limits=Bound("AMQP", "ready bytes per durable queue (on disk) without "
                             "`x-max-length-bytes`",
                     "oldest dropped (or dead-lettered), also at recovery",
                     "`amqp.dropped` (per queue: `oxiedge queues`)",
                     default="1GiB of bodies (on disk; a window of 1 MiB in memory)"))
    amqp_memory_queue_bytes: int = option(
        size(), "64MiB",
        "ready body bytes per AMQP queue held in memory without x-max-length-bytes (at most "
        "--amqp-queue-bytes; oldest dropped)",
        limits=Bound("AMQP", "ready bytes per queue held in memory without "
                             "`x-max-length-bytes`",
                     "oldest dropped (or dead-lettered)",
                     "`amqp.dropped` (per queue: `oxiedge queues`)",
                     default="64MiB of bodies (and never above `--amqp-queue-bytes`)"))
    amqp_max_queues: int = option(
        count(), "10000",
        "most AMQP queues in the broker; more declares get 406",
        limits=Bound("AMQP", "queues in the broker",
                     "declaring a new queue gets channel error 406",
                     "`amqp.queue_limit_refused`"))
    amqp_max_exchanges: int = option(
        count(), "10000",
        "most AMQP exchanges in the broker (built-in ones included); more declares get 406",
        limits=Bound("AMQP", "exchanges in the broker (the built-in ones count)",
                     "declaring a new exchange gets channel error 406",
                     "`amqp.exchange_limit_refused` (gauge `amqp.exchanges`)",
                     default="10000 (RabbitMQ 4's `cluster_exchange_limit` is unlimited by "
                             "default; ~1.5 KB each here with their routing indexes, measured with"
                             " 200,000: ~15 MB at the bound)"))
    amqp_max_bindings: int = option(
        count(), "50000",
        "most AMQP bindings in the broker (queue and exchange-to-exchange); more get 406",
        limits=Bound("AMQP", "bindings in the broker (queue and exchange-to-exchange)",
                     "`queue.bind` / `exchange.bind` of a new binding gets channel error 406; "
                     "re-binding an existing one is fine",
                     "`amqp.binding_limit_refused` (gauge `amqp.bindings`)",
                     default="50000 (a topic binding of four words costs ~1.2 KB with its routing "
                             "index, measured with 200,000: ~60 MB at the bound)"))
    amqp_max_arguments_bytes: int = option(
        size(), "16MiB",
        "memory of the argument tables AMQP bindings, queues and exchanges keep (estimated); a new"
        " table past it gets 406",
        limits=Bound("AMQP", "argument tables the broker keeps (headers-binding arguments, queue "
                             "arguments, exchange arguments)",
                     "`queue.bind`, `queue.declare`, `exchange.declare` of a new object carrying a"
                     " table gets channel error 406 `arguments limit of N bytes in vhost '/' is "
                     "reached`; re-binding or re-declaring an existing one is fine, objects "
                     "without arguments are never refused; deletes refund (below)",
                     "`amqp.arguments_limit_refused` (gauge `amqp.arguments_bytes`, "
                     "`amqp.max_arguments_bytes`)",
                     default="16MiB of memory, estimated per table (below: not wire bytes)"))
    amqp_max_queues_per_connection: int = option(
        count(), "1000",
        "most live AMQP queues one connection has created; more declares get 406",
        limits=Bound("AMQP", "live queues created by one connection",
                     "declaring a new queue gets channel error 406",
                     "`amqp.queue_limit_refused`"))
    amqp_max_consumers_per_connection: int = option(
        count(), "1000",
        "most AMQP consumers on one connection; more basic.consume get 406",
        limits=Bound("AMQP", "consumers per connection",
                     "`basic.consume` gets channel error 406",
                     "`amqp.consumer_limit_refused`"))
    amqp_consumer_timeout: float = option(
        seconds(0), "1800",
        "seconds a delivery may stay unacked before its AMQP channel is closed (0 = off)",
        limits=Bound("AMQP", "time a delivery may stay unacked (RabbitMQ's `consumer_timeout`)",
                     "its channel is closed with 406 PRECONDITION_FAILED `delivery acknowledgement"
                     " on channel N timed out...`, its unacked messages requeued; per queue or "
                     "consumer: `x-consumer-timeout` (ms)",
                     "`amqp.consumer_timeouts`",
                     default="1800 (30 minutes, RabbitMQ's default)"))
    amqp_tx_max_messages: int = option(
        count(1), "10000",
        "most publishes plus settled deliveries one AMQP transaction holds; more get 406",
        limits=Bound("AMQP", "publishes and settled deliveries one transaction holds",
                     "the `basic.publish` / `basic.ack` / `nack` / `reject` past it gets channel "
                     "error 406; the transaction is dropped with the channel",
                     "`amqp.tx_limit_refused`"))
    amqp_tx_max_bytes: int = option(
        size(), "64MiB",
        "body and property bytes of the publishes one AMQP transaction holds; more get 406",
        limits=Bound("AMQP", "bytes of the publishes one transaction holds",
                     "the `basic.publish` past it gets channel error 406; the transaction is "
                     "dropped with the channel",
                     "`amqp.tx_limit_refused`"))
    amqp_preauth_max_size: int = option(
        size(4096), "64KiB",
        "largest AMQP frame before the login completes (connection.start-ok), bytes",
        limits=Bound("AMQP", "frame size before the login",
                     "connection closed (501, \"before login\"); of start-ok's client properties"
                     " the connection keeps only the capabilities it uses, `client_id` and a"
                     " copy of at most ~2 KiB for management (below)",
                     "`amqp.preauth_too_large`"))
    amqp_handshake_timeout: float = option(
        seconds(), "10",
        "seconds from accept to an open AMQP connection (TLS handshake included)",
        limits=Bound("AMQP", "time to log in and open",
                     "socket closed, one log line",
                     "`amqp.handshake_timeouts`",
                     default="10 s (accept to connection.open: the TLS handshake on an AMQPS port,"
                             " the protocol header, start-ok, tune-ok, open)"))

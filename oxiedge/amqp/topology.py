"""The exchanges of vhost ``/`` and their bindings: declare, delete (with auto-delete
exchanges and the bindings that go with them), bind and unbind queues and exchanges, and the
bounds on how many there are and on the argument tables they keep.

:class:`Topology` owns the exchange table (the broker's routing reads the same dict) and
stages the matching durable ``_amqp`` documents; it is synchronous, as the broker is.  Queues
are the broker's (``broker.py``): a queue is bound here and, when it is deleted, unbound
here (:meth:`Topology.unbind_queue`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oxiedge.amqp import arguments as args
from oxiedge.amqp import persist
from oxiedge.amqp.constants import ACCESS_REFUSED, NOT_FOUND, NOT_IMPLEMENTED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.exchanges import (
    SUPPORTED_TYPES,
    Binding,
    Exchange,
    ExchangeBinding,
    ExchangesShared,
    binding_row,
    exchange_binding_row,
    x_match_error,
)
from oxiedge.amqp.tablecost import table_cost

if TYPE_CHECKING:
    from oxiedge.amqp.queues import Queue

BUILTIN_EXCHANGES = (("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                     ("amq.headers", "headers"), ("amq.match", "headers"))


def builtin_exchanges() -> list[Exchange]:
    """The default exchange and the ``amq.*`` exchanges every vhost has."""
    return [Exchange(name, kind, durable=True, builtin=True)
            for name, kind in (("", "direct"), *BUILTIN_EXCHANGES)]


def exchange_of_doc(doc: dict[str, Any]) -> Exchange:
    """The durable exchange an ``_amqp`` ``exchange`` document describes (no bindings)."""
    x = Exchange(doc["name"], doc["type"], durable=True,
                 auto_delete=doc.get("auto_delete", False),
                 internal=doc.get("internal", False), arguments=doc.get("arguments"))
    x.alternate = args.alternate_of(doc.get("arguments") or {})
    x.doc_id = doc["_id"]
    return x


def _flag(value: bool) -> str:
    return "true" if value else "false"


def in_vhost(kind: str, name: str) -> str:
    return f"{kind} '{name}' in vhost '/'"


def check_flags(where: str, flags: tuple[tuple[str, bool, bool], ...]) -> None:
    """A re-declare must repeat each ``(name, current, requested)`` flag (406 otherwise)."""
    for what, have, want in flags:
        if have != want:
            raise AmqpError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{what}' for {where}: received '{_flag(want)}' but current "
                f"is '{_flag(have)}'")


class Topology:
    """Exchanges and bindings of vhost ``/``, their bounds, their durable documents."""

    def __init__(self, store: Any, counters: dict[str, int]) -> None:
        self.store = store
        self.counters = counters  # the broker's (``*_limit_refused``)
        self.exchanges: dict[str, Exchange] = {}
        self.exchanges_shared = ExchangesShared()
        for builtin in builtin_exchanges():
            self.add_exchange(builtin)
        #: ``--amqp-max-exchanges`` / ``--amqp-max-bindings`` / ``--amqp-max-arguments-bytes``
        #: (set by the service)
        self.max_exchanges = 10_000
        self.max_bindings = 50_000
        self.max_arguments_bytes = 16 << 20

    def unbind_queue(self, q: Queue) -> None:
        """``q`` is deleted: remove its bindings (only the exchanges that bind it are
        visited), and the auto-delete exchanges that lose their last binding with them."""
        for name in list(q.sources):
            x = self.exchanges.get(name)
            if x is None:
                continue
            removed = x.remove_queue(q.name)
            for b in removed:
                self.unstage_binding(b)
            if removed:  # exchanges that lost a binding here (RabbitMQ auto-delete)
                self.maybe_auto_delete(x)
        q.sources.clear()

    # -- exchanges ---------------------------------------------------------------------

    def add_exchange(self, x: Exchange) -> None:
        """Make ``x`` known (declared, built in, or recovered); its route cache counts
        against the broker's one bound."""
        x.shared = self.exchanges_shared
        self.exchanges[x.name] = x
        self.exchanges_shared.argument_bytes += table_cost(x.arguments)

    def get_exchange(self, name: str) -> Exchange:
        x = self.exchanges.get(name)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no {in_vhost('exchange', name)}")
        return x

    def declare_exchange(
        self, name: str, type: str, *, passive: bool, durable: bool, auto_delete: bool,
        internal: bool, arguments: dict[str, Any],
    ) -> tuple[Exchange, bool]:
        if not name:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if passive:
            return self.get_exchange(name), False
        if type not in SUPPORTED_TYPES:
            raise AmqpError(NOT_IMPLEMENTED, f"exchange type '{type}' is not implemented")
        alternate = args.check_exchange_args(in_vhost("exchange", name), arguments)
        x = self.exchanges.get(name)
        if x is not None:
            if alternate != x.alternate:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg 'alternate-exchange' for {in_vhost('exchange', name)}: "
                    f"received {alternate!r} but current is {x.alternate!r}")
            if x.type != type:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg 'type' for {in_vhost('exchange', name)}: received "
                    f"'{type}' but current is '{x.type}'")
            check_flags(in_vhost("exchange", name), (("durable", x.durable, durable),
                                                    ("auto_delete", x.auto_delete, auto_delete),
                                                    ("internal", x.internal, internal)))
            return x, False
        if name.startswith("amq."):
            raise AmqpError(ACCESS_REFUSED,
                            f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if len(self.exchanges) >= self.max_exchanges:
            self.counters["exchange_limit_refused"] += 1
            raise AmqpError(PRECONDITION_FAILED, f"cannot declare {in_vhost('exchange', name)}: "
                            f"exchange limit of {self.max_exchanges} is reached", 40, 10)
        kept = persist.jsonable(arguments)
        self.check_arguments(table_cost(kept), f"declare {in_vhost('exchange', name)}", 40, 10)
        x = Exchange(name, type, durable=durable, auto_delete=auto_delete, internal=internal,
                     arguments=kept)
        x.alternate = alternate
        self.add_exchange(x)
        if durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "exchange", "name": name, "type": type, "durable": True,
                "auto_delete": auto_delete, "internal": internal, "arguments": x.arguments})
            x.doc_id = doc["_id"]
            return x, True
        return x, False

    def delete_exchange(self, name: str, if_unused: bool) -> bool:
        """Delete an exchange; returns whether a durable write was staged."""
        if not name or name.startswith("amq."):
            raise AmqpError(ACCESS_REFUSED,
                            f"operation not permitted on {in_vhost('exchange', name)}")
        x = self.exchanges.get(name)
        if x is None:
            return False
        if if_unused and x.in_use:
            raise AmqpError(PRECONDITION_FAILED, f"{in_vhost('exchange', name)} in use")
        return self._drop_exchange(x)

    def _drop_exchange(self, first: Exchange) -> bool:
        """Remove an exchange with every binding where it is source or destination, and
        the auto-delete exchanges that lose their last binding through it, and so on: a
        worklist, not recursion (a chain of thousands of auto-delete exchanges is one
        client's doing, and must not reach Python's recursion limit)."""
        staged = False
        todo = [first]
        while todo:
            x = todo.pop()
            if x is not first and self.exchanges.get(x.name) is not x:
                continue  # dropped already through another path
            self.exchanges.pop(x.name, None)
            self.exchanges_shared.argument_bytes -= table_cost(x.arguments)
            for b in x.bindings.values():
                staged |= self.unstage_binding(b)
            for xb in x.xbindings.values():
                staged |= self.unstage_binding(xb)
                dest = self.exchanges.get(xb.destination)
                if dest is not None:
                    dest.sources.discard(x.name)
            x.clear_bindings()
            for name in x.sources:  # the exchanges binding into it, not all of them
                other = self.exchanges.get(name)
                if other is None:
                    continue
                gone = other.remove_destination(x.name)
                for xb in gone:
                    staged |= self.unstage_binding(xb)
                if gone and self._auto_deletable(other):
                    todo.append(other)
            x.sources.clear()
            if x.doc_id is not None:
                self.store.stage_delete(persist.COLL, x.doc_id)
                staged = True
        return staged

    def _auto_deletable(self, x: Exchange) -> bool:
        # RabbitMQ: an auto-delete exchange goes when its last binding as source goes.
        return (x.auto_delete and not x.in_use and not x.builtin
                and self.exchanges.get(x.name) is x)

    def maybe_auto_delete(self, x: Exchange) -> None:
        if self._auto_deletable(x):
            self._drop_exchange(x)

    # -- bindings ----------------------------------------------------------------------

    def bind(self, q: Queue, exchange: str, routing_key: str, arguments: dict[str, Any]) -> bool:
        if not exchange:
            raise AmqpError(ACCESS_REFUSED,
                            "operation not permitted on the default exchange")
        x = self.get_exchange(exchange)
        if arguments and x.type != "headers":
            raise AmqpError(NOT_IMPLEMENTED,
                            f"binding argument '{next(iter(arguments))}' is not implemented")
        if x.type == "headers" and (why := x_match_error(arguments)):
            raise AmqpError(PRECONDITION_FAILED, why, 50, 20)
        b = Binding(x.name, q, routing_key, dict(arguments))
        if not x.has(b):  # (re-binding an existing one stays fine at either bound)
            if self.exchanges_shared.bindings >= self.max_bindings:
                self._refuse_binding(50, 20)
            self.check_arguments(b.cost, f"bind {in_vhost('queue', q.name)} to "
                                  f"{in_vhost('exchange', x.name)}", 50, 20)
        if not x.add(b):
            return False
        if q.doc_id is not None and x.durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "bind", "exchange": x.name, "queue": q.name,
                "routing_key": routing_key, "arguments": persist.jsonable(arguments)})
            b.doc_id = doc["_id"]
            return True
        return False

    def _refuse_binding(self, class_id: int, method_id: int) -> None:
        self.counters["binding_limit_refused"] += 1
        raise AmqpError(PRECONDITION_FAILED, f"binding limit of {self.max_bindings} "
                        "in vhost '/' is reached", class_id, method_id)

    def check_arguments(self, cost: int, what: str, class_id: int, method_id: int) -> None:
        """406 if keeping a new argument table of ``cost`` bytes (``tablecost``) would take
        the broker past ``--amqp-max-arguments-bytes``; one without arguments always fits
        (after a recovery over the bound, only tables are refused)."""
        used = self.exchanges_shared.argument_bytes
        if cost and used + cost > self.max_arguments_bytes:
            self.counters["arguments_limit_refused"] += 1
            # The limit first: a reply text is cut at 255 bytes, and names can be long.
            raise AmqpError(PRECONDITION_FAILED, f"arguments limit of "
                            f"{self.max_arguments_bytes} bytes in vhost '/' is reached "
                            f"(--amqp-max-arguments-bytes; {used} in use): cannot {what}, "
                            f"its arguments cost {cost} bytes", class_id, method_id)

    def unbind(self, q: Queue, exchange: str, routing_key: str,
               arguments: dict[str, Any] | None = None) -> bool:
        if not exchange:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        x = self.get_exchange(exchange)
        b = x.remove(q.name, routing_key, arguments)
        if b is None:
            return False
        staged = self.unstage_binding(b)
        self.maybe_auto_delete(x)
        return staged

    def bind_exchange(self, destination: str, source: str, routing_key: str,
                      arguments: dict[str, Any]) -> bool:
        """exchange.bind (RabbitMQ extension); returns whether a durable write was staged."""
        if not destination or not source:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        dx = self.get_exchange(destination)
        sx = self.get_exchange(source)
        if arguments:
            raise AmqpError(NOT_IMPLEMENTED,
                            f"binding argument '{next(iter(arguments))}' is not implemented")
        xb = ExchangeBinding(sx.name, dx.name, routing_key)
        if (self.exchanges_shared.bindings >= self.max_bindings
                and (dx.name, routing_key) not in sx.xbindings):
            self._refuse_binding(40, 30)
        if not sx.add_exchange_binding(xb):
            return False
        dx.sources.add(sx.name)
        if sx.durable and dx.durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "bind", "exchange": sx.name, "destination_exchange": dx.name,
                "routing_key": routing_key, "arguments": {}})
            xb.doc_id = doc["_id"]
            return True
        return False

    def unbind_exchange(self, destination: str, source: str, routing_key: str) -> bool:
        if not destination or not source:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        sx = self.exchanges.get(source)
        if sx is None or destination not in self.exchanges:
            return False  # unbinding what is not bound succeeds (RabbitMQ)
        xb = sx.remove_exchange_binding(destination, routing_key)
        if xb is None:
            return False
        if not any(dest == destination for dest, _key in sx.xbindings):
            self.exchanges[destination].sources.discard(sx.name)
        staged = self.unstage_binding(xb)
        self.maybe_auto_delete(sx)
        return staged

    def unstage_binding(self, b: Binding | ExchangeBinding) -> bool:
        if b.doc_id is not None:
            self.store.stage_delete(persist.COLL, b.doc_id)
            b.doc_id = None
            return True
        return False

    def bindings(self, queues: list[Queue]) -> list[dict[str, Any]]:
        # The default exchange binds every queue by its name (spec 3.1.3.1).
        rows = [binding_row("", q.name, q.name, q.durable) for q in queues]
        for x in self.exchanges.values():
            for b in x.bindings.values():
                rows.append(binding_row(x.name, b.queue.name, b.routing_key,
                                        b.doc_id is not None))
            for xb in x.xbindings.values():
                rows.append(exchange_binding_row(x.name, xb.destination, xb.routing_key,
                                                 xb.doc_id is not None))
        return rows

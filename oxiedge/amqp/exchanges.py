"""Exchanges and bindings: direct, fanout and topic routing (the default exchange is the
broker's queue table itself).

Topic patterns (AMQP 0-9-1 spec, exchange class "topic"): words separated by ``.``; ``*``
matches exactly one word, ``#`` zero or more words, anywhere in the pattern.  Bindings are indexed
for routing (:mod:`oxiedge.amqp.routeindex`: a dict for direct, a trie for topic), and
matches are cached per routing key (the cache is cleared whenever a binding changes), so a
steady stream of publishes costs one dict lookup per message and a new routing key costs
its match, not a scan of every binding. Headers exchanges scan their bindings, as
RabbitMQ's do; each test walks the smaller of the binding's arguments and the message's
headers (``headers_match``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from oxiedge.amqp.routeindex import RouteIndex
from oxiedge.amqp.tablecost import binding_cost

if TYPE_CHECKING:
    from oxiedge.amqp.queues import Queue

SUPPORTED_TYPES = ("direct", "fanout", "topic", "headers")


def args_key(arguments: dict[str, Any]) -> bytes:
    """Binding arguments as part of a binding's identity (RabbitMQ binds the same queue to
    a headers exchange several times with different arguments): a 128-bit BLAKE2b digest
    of their canonical form (sorted, each value's ``repr``, so ``b"1"``, ``"1"`` and ``1``
    differ), ``b""`` for none. A digest, not the canonical string itself: a big table's
    string was about as long as its ``repr`` and kept for the binding's life."""
    if not arguments:
        return b""
    canonical = repr(sorted((k, repr(v)) for k, v in arguments.items()))
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), digest_size=16).digest()


#: The ``x-match`` values RabbitMQ accepts on a headers binding.
X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


def _x_match(arguments: dict[str, Any]) -> Any:
    """A binding's ``x-match`` (``all`` when absent; a longstr as text)."""
    mode = arguments.get("x-match", "all")
    return mode.decode("utf-8", "replace") if isinstance(mode, bytes) else mode


def x_match_error(arguments: dict[str, Any]) -> str | None:
    """Why a headers binding's ``x-match`` is refused (RabbitMQ: 406 on the bind), or None."""
    mode = _x_match(arguments)
    if mode in X_MATCH_MODES:
        return None
    return (f"invalid x-match field value {mode!r}; expected all, any, all-with-x, "
            "or any-with-x")


def headers_spec(arguments: dict[str, Any]) -> tuple[bool, bool, int]:
    """What a headers binding tests, worked out once when it is made: (``x-match`` is
    all or all-with-x, ``x-`` arguments are compared, how many arguments are compared).
    An ``x-match`` from before it was checked at bind time counts as ``any``."""
    mode = _x_match(arguments)
    with_x = mode in ("all-with-x", "any-with-x")
    tests = sum(1 for key in arguments if _compared(key, with_x))
    return mode in ("all", "all-with-x"), with_x, tests


def _compared(key: str, with_x: bool) -> bool:
    return key != "x-match" and (with_x or not key.startswith("x-"))


def headers_match(arguments: dict[str, Any], headers: dict[str, Any],
                  spec: tuple[bool, bool, int] | None = None) -> bool:
    """Headers-exchange matching (RabbitMQ): ``x-match`` ``all`` (default) or ``any`` over
    the binding's arguments not starting with ``x-`` (``all-with-x``/``any-with-x`` include
    them); an argument without a value (void) matches the mere presence of the header.

    ``spec`` is ``headers_spec(arguments)``, kept by the binding. Every publish to a headers
    exchange tests every binding, so one test walks the smaller of the two tables and looks
    each key up in the other: a huge binding costs a publish only as much as the message's
    own headers (it used to cost a walk of all its keys, 1.2 ms for 8000)."""
    want_all, with_x, tests = spec if spec is not None else headers_spec(arguments)
    if want_all and tests > len(headers):
        return False  # fewer headers than arguments to hold
    if not want_all and not tests:
        return False  # any of nothing
    if len(headers) < len(arguments):
        held = 0
        for key, got in headers.items():
            if key not in arguments or not _compared(key, with_x):
                continue
            want = arguments[key]
            if want is None or bool(got == want):
                if not want_all:
                    return True
                held += 1
            elif want_all:
                return False
        return want_all and held == tests
    for key, want in arguments.items():
        if not _compared(key, with_x):
            continue
        ok = key in headers and (want is None or bool(headers[key] == want))
        if ok is not want_all:
            return ok  # "all": the first miss decides; "any": the first hit
    return want_all


_CACHE_LIMIT = 4096
#: What one cached route costs beyond its key's characters (dict slot, list, str header).
_ENTRY_COST = 96


class ExchangesShared:
    """What all the exchanges of one broker share: their count of bindings, and one bound
    in bytes for their route caches together (each exchange also keeps at most
    ``_CACHE_LIMIT`` keys): 300 exchanges x 4096 unroutable 250-byte keys used to hold
    ~470 MB for good.  Past ``limit`` every cache is cleared wholesale, as the MQTT route
    cache is; binding changes clear one exchange's cache without refunding, which only
    makes the wholesale clear come sooner."""

    def __init__(self, limit: int = 4 << 20) -> None:
        self.limit = limit
        #: bindings of all the exchanges sharing this (kept by ``Exchange``): the broker's
        #: ``--amqp-max-bindings`` is checked against it
        self.bindings = 0
        #: what the argument tables the broker keeps cost (``tablecost``): the bindings'
        #: (kept by ``Exchange``), the queues' and the exchanges' own (kept by the broker);
        #: the broker's ``--amqp-max-arguments-bytes`` is checked against it
        self.argument_bytes = 0
        self.bytes = 0
        self.cleared = 0
        self._holders: set[Exchange] = set()

    def charge(self, x: Exchange, key: str) -> None:
        self.bytes += len(key) + _ENTRY_COST
        self._holders.add(x)
        if self.bytes > self.limit:
            for holder in self._holders:
                holder.invalidate()
            self._holders.clear()
            self.bytes = 0
            self.cleared += 1


class Binding:
    """One queue binding (``arguments`` kept for equivalence and listing).

    ``key`` is its identity in ``Exchange.bindings``; ``cost`` what its arguments are
    charged against ``--amqp-max-arguments-bytes`` (``tablecost``), refunded when it goes.
    """

    __slots__ = ("arguments", "cost", "doc_id", "exchange", "key", "queue", "routing_key",
                 "spec")

    def __init__(self, exchange: str, queue: Queue, routing_key: str,
                 arguments: dict[str, Any]) -> None:
        self.exchange = exchange
        self.queue = queue
        self.routing_key = routing_key
        self.arguments = arguments
        self.doc_id: int | None = None
        identity = args_key(arguments)
        self.key = (queue.name, routing_key, identity)
        self.cost = binding_cost(arguments, identity)
        #: ``headers_spec`` of the arguments (used only on a headers exchange)
        self.spec = headers_spec(arguments)


class ExchangeBinding:
    """An exchange-to-exchange binding (RabbitMQ extension): messages routed by the source
    with a matching key continue into ``destination``."""

    __slots__ = ("destination", "doc_id", "routing_key", "source")

    def __init__(self, source: str, destination: str, routing_key: str) -> None:
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.doc_id: int | None = None


def binding_row(exchange: str, queue: str, routing_key: str, durable: bool) -> dict[str, Any]:
    """The admin/CLI row of a queue binding for ``oxiedge bindings`` (live and offline)."""
    return {"exchange": exchange, "queue": queue, "routing_key": routing_key,
            "durable": durable}


def exchange_binding_row(source: str, destination: str, routing_key: str,
                         durable: bool) -> dict[str, Any]:
    """The admin/CLI row of an exchange-to-exchange binding."""
    return {"exchange": source, "queue": None, "destination_exchange": destination,
            "routing_key": routing_key, "durable": durable}


class Exchange:
    """A named exchange of type direct, fanout or topic."""

    def __init__(
        self,
        name: str,
        type: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        builtin: bool = False,
    ) -> None:
        self.name = name
        self.type = type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        #: ``alternate-exchange`` argument: where messages this exchange cannot route go
        self.alternate: str | None = None
        self.builtin = builtin
        self.doc_id: int | None = None
        self.bindings: dict[tuple[str, str, bytes], Binding] = {}  # Binding.key -> binding
        #: (destination exchange, key) -> binding, where this exchange is the source
        self.xbindings: dict[tuple[str, str], ExchangeBinding] = {}
        self._by_queue: dict[str, set[tuple[str, str, bytes]]] = {}  # queue name -> binding keys
        #: names of the exchanges with e2e bindings into this one (kept by the broker)
        self.sources: set[str] = set()
        self._index: RouteIndex[Queue] = RouteIndex(type)  # unused by a headers exchange
        # e2e bindings carry no arguments: on a headers exchange they match every message
        self._xindex: RouteIndex[str] = RouteIndex("fanout" if type == "headers" else type)
        self._xcache: dict[str, list[str]] = {}
        self._cache: dict[str, list[Queue]] = {}
        #: shared with every exchange of the broker (``Broker.add_exchange``)
        self.shared = ExchangesShared()
        self.published = 0
        self.unroutable = 0

    def has(self, binding: Binding) -> bool:
        """Is an identical binding here already?"""
        return binding.key in self.bindings

    def add(self, binding: Binding) -> bool:
        """Add a binding; False if an identical one exists (binding is idempotent)."""
        k = binding.key
        if k in self.bindings:
            return False
        self.bindings[k] = binding
        self.shared.bindings += 1
        self.shared.argument_bytes += binding.cost
        self._by_queue.setdefault(k[0], set()).add(k)
        binding.queue.sources.add(self.name)
        if self.type != "headers":
            self._index.add(binding.routing_key, binding.queue)
        self._cache.clear()
        return True

    def _forget(self, k: tuple[str, str, bytes]) -> Binding:
        b = self.bindings.pop(k)
        self.shared.bindings -= 1
        self.shared.argument_bytes -= b.cost
        keys = self._by_queue[k[0]]
        keys.discard(k)
        if not keys:
            del self._by_queue[k[0]]
            b.queue.sources.discard(self.name)
        if self.type != "headers":
            self._index.remove(b.routing_key, b.queue)
        return b

    def remove(self, queue_name: str, routing_key: str,
               arguments: dict[str, Any] | None = None) -> Binding | None:
        k = (queue_name, routing_key, args_key(arguments or {}))
        if k not in self.bindings:
            return None
        self._cache.clear()
        return self._forget(k)

    def remove_queue(self, queue_name: str) -> list[Binding]:
        keys = self._by_queue.get(queue_name, ())
        if len(keys) > 64 and 2 * len(keys) > len(self.bindings):
            return self._remove_most(queue_name)
        gone = [self._forget(k) for k in list(keys)]
        if gone:
            self._cache.clear()
        return gone

    def _remove_most(self, queue_name: str) -> list[Binding]:
        """A queue holding most of the bindings goes: the index is rebuilt from the rest
        rather than unpicked key by key (200,000 bindings: ~0.9 s of event loop)."""
        keys = self._by_queue.pop(queue_name)
        gone = [self.bindings.pop(k) for k in keys]
        self.shared.bindings -= len(gone)
        self.shared.argument_bytes -= sum(b.cost for b in gone)
        for b in gone:
            b.queue.sources.discard(self.name)
        self._index.clear()
        if self.type != "headers":
            for b in self.bindings.values():
                self._index.add(b.routing_key, b.queue)
        self._cache.clear()
        return gone

    def clear_bindings(self) -> None:
        """Forget every binding where this exchange is the source (it is being deleted)."""
        for b in self.bindings.values():
            b.queue.sources.discard(self.name)
            self.shared.argument_bytes -= b.cost
        self.shared.bindings -= len(self.bindings) + len(self.xbindings)
        self.bindings.clear()
        self.xbindings.clear()
        self._by_queue.clear()
        self._index.clear()
        self._xindex.clear()
        self.invalidate()

    def route(self, routing_key: str) -> list[Queue]:
        """The queues a message with ``routing_key`` reaches (each queue once)."""
        hit = self._cache.get(routing_key)
        if hit is not None:
            return hit
        out = self._index.match(routing_key)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = out
        self.shared.charge(self, routing_key)
        return out

    def route_headers(self, headers: dict[str, Any]) -> list[Queue]:
        """Queues of a headers exchange whose binding arguments match ``headers``."""
        seen: dict[int, Queue] = {}
        for b in self.bindings.values():
            if headers_match(b.arguments, headers, b.spec):
                seen.setdefault(id(b.queue), b.queue)
        return list(seen.values())

    def add_exchange_binding(self, binding: ExchangeBinding) -> bool:
        k = (binding.destination, binding.routing_key)
        if k in self.xbindings:
            return False
        self.xbindings[k] = binding
        self.shared.bindings += 1
        self._xindex.add(binding.routing_key, binding.destination)
        self._xcache.clear()
        return True

    def remove_exchange_binding(self, destination: str, routing_key: str
                                ) -> ExchangeBinding | None:
        b = self.xbindings.pop((destination, routing_key), None)
        if b is not None:
            self.shared.bindings -= 1
            self._xindex.remove(routing_key, b.destination)
            self._xcache.clear()
        return b

    def remove_destination(self, destination: str) -> list[ExchangeBinding]:
        gone = [b for k, b in self.xbindings.items() if k[0] == destination]
        for b in gone:
            del self.xbindings[(destination, b.routing_key)]
            self.shared.bindings -= 1
            self._xindex.remove(b.routing_key, b.destination)
        if gone:
            self._xcache.clear()
        return gone

    def route_exchanges(self, routing_key: str) -> list[str]:
        """Names of the destination exchanges a message with ``routing_key`` continues to."""
        hit = self._xcache.get(routing_key)
        if hit is not None:
            return hit
        out = self._xindex.match(routing_key)
        if len(self._xcache) >= _CACHE_LIMIT:
            self._xcache.clear()
        self._xcache[routing_key] = out
        self.shared.charge(self, routing_key)
        return out

    @property
    def in_use(self) -> bool:
        """Has bindings where it is the source (exchange.delete if-unused, auto-delete)."""
        return bool(self.bindings or self.xbindings)

    def invalidate(self) -> None:
        self._cache.clear()
        self._xcache.clear()

    def row(self) -> dict[str, Any]:
        """The admin/CLI row for ``oxiedge exchanges``."""
        return {
            "name": self.name,
            "type": self.type,
            "durable": self.durable,
            "auto_delete": self.auto_delete,
            "internal": self.internal,
            "alternate_exchange": self.alternate,
            "bindings": len(self.bindings) + len(self.xbindings),
            "published": self.published,
            "unroutable": self.unroutable,
        }

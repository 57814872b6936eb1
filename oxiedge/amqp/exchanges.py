"""Exchanges and bindings: direct, fanout and topic routing (the default exchange is the
broker's queue table itself).

Topic patterns (AMQP 0-9-1 spec, exchange class "topic"): words separated by ``.``; ``*``
matches exactly one word, ``#`` zero or more words, anywhere in the pattern.  Matches are
cached per routing key (the cache is cleared whenever a binding changes), so a steady
stream of publishes costs one dict lookup per message.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oxiedge.amqp.queues import Queue

SUPPORTED_TYPES = ("direct", "fanout", "topic", "headers")


def args_key(arguments: dict[str, Any]) -> str:
    """Binding arguments in a canonical form: part of a binding's identity (RabbitMQ binds
    the same queue to a headers exchange several times with different arguments)."""
    return repr(sorted((k, repr(v)) for k, v in arguments.items())) if arguments else ""


def headers_match(arguments: dict[str, Any], headers: dict[str, Any]) -> bool:
    """Headers-exchange matching (RabbitMQ): ``x-match`` ``all`` (default) or ``any`` over
    the binding's arguments not starting with ``x-`` (``all-with-x``/``any-with-x`` include
    them); an argument without a value (void) matches the mere presence of the header."""
    mode = arguments.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    with_x = mode in ("all-with-x", "any-with-x")
    want_all = mode in ("all", "all-with-x")
    hit = False
    for key, value in arguments.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        ok = key in headers and (value is None or headers[key] == value)
        if want_all and not ok:
            return False
        hit = hit or ok
    return True if want_all else hit
_CACHE_LIMIT = 4096


@lru_cache(maxsize=4096)
def _split(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Does the binding ``pattern`` match ``routing_key``?

    A set of reachable word positions is advanced pattern word by pattern word, so several
    ``#`` cost O(pattern x words), never backtracking.
    """
    words = routing_key.split(".")
    n = len(words)
    states = {0}
    for p in _split(pattern):
        if p == "#":
            states = set(range(min(states), n + 1))
        elif p == "*":
            states = {j + 1 for j in states if j < n}
        else:
            states = {j + 1 for j in states if j < n and words[j] == p}
        if not states:
            return False
    return n in states


class Binding:
    """One queue binding (``arguments`` kept for equivalence and listing)."""

    __slots__ = ("arguments", "doc_id", "exchange", "queue", "routing_key")

    def __init__(self, exchange: str, queue: Queue, routing_key: str,
                 arguments: dict[str, Any]) -> None:
        self.exchange = exchange
        self.queue = queue
        self.routing_key = routing_key
        self.arguments = arguments
        self.doc_id: int | None = None


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
        self.bindings: dict[tuple[str, str], Binding] = {}  # (queue name, key) -> binding
        #: (destination exchange, key) -> binding, where this exchange is the source
        self.xbindings: dict[tuple[str, str], ExchangeBinding] = {}
        self._xcache: dict[str, list[str]] = {}
        self._cache: dict[str, list[Queue]] = {}
        self.published = 0
        self.unroutable = 0

    def add(self, binding: Binding) -> bool:
        """Add a binding; False if an identical one exists (binding is idempotent)."""
        k = (binding.queue.name, binding.routing_key + args_key(binding.arguments))
        if k in self.bindings:
            return False
        self.bindings[k] = binding
        self._cache.clear()
        return True

    def remove(self, queue_name: str, routing_key: str,
               arguments: dict[str, Any] | None = None) -> Binding | None:
        b = self.bindings.pop((queue_name, routing_key + args_key(arguments or {})), None)
        if b is not None:
            self._cache.clear()
        return b

    def remove_queue(self, queue_name: str) -> list[Binding]:
        keys = [k for k in self.bindings if k[0] == queue_name]
        gone = [self.bindings.pop(k) for k in keys]
        if gone:
            self._cache.clear()
        return gone

    def route(self, routing_key: str) -> list[Queue]:
        """The queues a message with ``routing_key`` reaches (each queue once)."""
        hit = self._cache.get(routing_key)
        if hit is not None:
            return hit
        seen: dict[int, Queue] = {}
        kind = self.type
        for b in self.bindings.values():
            if kind == "fanout":
                ok = True
            elif kind == "direct":
                ok = b.routing_key == routing_key
            else:
                ok = topic_matches(b.routing_key, routing_key)
            if ok:
                seen.setdefault(id(b.queue), b.queue)
        out = list(seen.values())
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = out
        return out

    def route_headers(self, headers: dict[str, Any]) -> list[Queue]:
        """Queues of a headers exchange whose binding arguments match ``headers``."""
        seen: dict[int, Queue] = {}
        for b in self.bindings.values():
            if headers_match(b.arguments, headers):
                seen.setdefault(id(b.queue), b.queue)
        return list(seen.values())

    def _matches(self, pattern: str, routing_key: str) -> bool:
        kind = self.type
        if kind == "fanout" or kind == "headers":  # e2e bindings carry no arguments
            return True
        if kind == "direct":
            return pattern == routing_key
        return topic_matches(pattern, routing_key)

    def add_exchange_binding(self, binding: ExchangeBinding) -> bool:
        k = (binding.destination, binding.routing_key)
        if k in self.xbindings:
            return False
        self.xbindings[k] = binding
        self._xcache.clear()
        return True

    def remove_exchange_binding(self, destination: str, routing_key: str
                                ) -> ExchangeBinding | None:
        b = self.xbindings.pop((destination, routing_key), None)
        if b is not None:
            self._xcache.clear()
        return b

    def remove_destination(self, destination: str) -> list[ExchangeBinding]:
        gone = [b for k, b in self.xbindings.items() if k[0] == destination]
        for b in gone:
            del self.xbindings[(destination, b.routing_key)]
        if gone:
            self._xcache.clear()
        return gone

    def route_exchanges(self, routing_key: str) -> list[str]:
        """Names of the destination exchanges a message with ``routing_key`` continues to."""
        hit = self._xcache.get(routing_key)
        if hit is not None:
            return hit
        out = list(dict.fromkeys(b.destination for b in self.xbindings.values()
                                 if self._matches(b.routing_key, routing_key)))
        if len(self._xcache) >= _CACHE_LIMIT:
            self._xcache.clear()
        self._xcache[routing_key] = out
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

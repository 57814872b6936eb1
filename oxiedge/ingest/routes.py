"""Ingest routes ``TOPIC_FILTER:COLLECTION``, split at the last ``:``.

Topic levels may contain ``:`` (``plant:7/temp:c/#:readings`` routes ``plant:7/temp:c/#``
into ``readings``), so only the last ``:`` separates the collection.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..mqtt.topics import topic_filter_problem
from ..store import StoreError, validate_collection_name


class RouteError(ConfigError):
    """A malformed ingest route; the message quotes the route."""


@dataclass(frozen=True, slots=True)
class Route:
    """One ingest route: messages whose topic matches ``filter`` land in ``collection``."""

    filter: str
    collection: str

    def __str__(self) -> str:
        return f"{self.filter}:{self.collection}"


def parse_route(text: str) -> Route:
    """Parse ``FILTER:COLLECTION``; raises ``RouteError`` naming the route."""
    topic_filter, sep, collection = text.strip().rpartition(":")
    if not sep:
        raise RouteError(f"ingest route {text!r}: expected TOPIC_FILTER:COLLECTION")
    problem = topic_filter_problem(topic_filter)
    if problem is not None:
        raise RouteError(f"ingest route {text!r}: invalid topic filter {topic_filter!r}: {problem}")
    if not collection:
        raise RouteError(f"ingest route {text!r}: empty collection name")
    if collection.startswith("_"):
        raise RouteError(f"ingest route {text!r}: collection names starting with _ are reserved")
    try:
        validate_collection_name(collection)
    except StoreError as exc:
        raise RouteError(f"ingest route {text!r}: {exc}") from None
    return Route(topic_filter, collection)


def parse_routes(texts: list[str]) -> list[Route]:
    """Parse every route, keeping the first of duplicates."""
    out: list[Route] = []
    for text in texts:
        route = parse_route(text)
        if route not in out:
            out.append(route)
    return out


"""``oxiedge ingest`` (MQTT topics stored as documents) and ``oxiedge index`` (secondary
indexes on collections)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from . import complete
from .base import (
    DataOpt,
    JsonOpt,
    _config,
    _fail,
    _offline,
    _print_line,
    _print_rows,
    _request,
    _verb,
    index_app,
    ingest_app,
)
from .progress import run_with_progress

# --------------------------------------------------------------------- ingest
_INGEST = "oxiedge.ingest.stored"
RouteArg = Annotated[str, typer.Argument(help="TOPIC_FILTER:COLLECTION (split at the last :)")]


@ingest_app.command("add")
def ingest_add(
    route: RouteArg,
    max_docs: Annotated[int | None, typer.Option("--max-docs", min=1, help="keep at most N documents in the collection (oldest deleted first)")] = None,  # noqa: E501
    max_age: Annotated[str | None, typer.Option("--max-age", help="delete documents older than this: 30d, 12h, 90m, 45s, 2w")] = None,  # noqa: E501
    data: DataOpt = None,
) -> None:
    """Store MQTT messages matching a topic filter in a collection (live, persistent)."""
    from ..ingest.retention import validate_policy
    from ..ingest.routes import RouteError, parse_route

    try:
        parse_route(route)
        validate_policy(max_docs, max_age)
    except (RouteError, ValueError) as exc:
        _fail(str(exc), 2)
    args = {"route": route, "max_docs": max_docs, "max_age": max_age}
    result = _request(data, "ingest.add", args,
                      _offline(_INGEST, "add_route_offline", route, max_docs, max_age), write=True)
    limits = ", ".join(f"{k}={result[k]}" for k in ("max_docs", "max_age") if k in result)
    _print_line(f"ingest route {result['route']} {_verb(result)}"
                + (f" ({limits})" if limits else ""))


@ingest_app.command("remove")
def ingest_remove(route: RouteArg, data: DataOpt = None) -> None:
    """Remove a stored ingest route."""
    result = _request(data, "ingest.remove", {"route": route},
                      _offline(_INGEST, "remove_route_offline", route), write=True)
    _print_line(f"ingest route {result['route']} removed")


@ingest_app.command("list")
def ingest_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List ingest routes (from the configuration and from the store)."""
    rows = _request(data, "ingest.list", {}, _offline(_INGEST, "list_routes_offline"))
    _print_rows(rows, as_json, "ingest routes")


# ---------------------------------------------------------------------- index
_INDEXES = "oxiedge.ingest.indexes"
CollArg = Annotated[str, typer.Argument(help="collection name",
                                        autocompletion=complete.collections)]
FieldArg = Annotated[str, typer.Argument(help="field path, e.g. value or room.name")]


@index_app.command("add")
def index_add(collection: CollArg, field: FieldArg, data: DataOpt = None) -> None:
    """Index a field (built now for existing documents, then maintained on every write);
    a progress bar on a terminal while a large collection is indexed."""
    args = {"collection": collection, "field": field}

    def stopped() -> Any:
        return _request(data, "index.add", args,
                        _offline(_INDEXES, "add_offline", collection, field), write=True)

    result = run_with_progress(_config(data).admin_socket, "index.add",
                               {**args, "progress": True},
                               f"indexing {collection}.{field}", stopped)
    verb = "added" if result.get("created") else "already present"
    _print_line(f"index {collection}.{field} {verb}")


@index_app.command("remove")
def index_remove(collection: CollArg, field: FieldArg, data: DataOpt = None) -> None:
    """Remove an index."""
    _request(data, "index.remove", {"collection": collection, "field": field},
             _offline(_INDEXES, "remove_offline", collection, field), write=True)
    _print_line(f"index {collection}.{field} removed")


@index_app.command("list")
def index_list(
    collection: Annotated[str | None, typer.Argument(help="only this collection")] = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List indexes."""
    rows = _request(data, "index.list", {"collection": collection},
                    _offline(_INDEXES, "list_offline", collection))
    _print_rows(rows, as_json, "indexes")


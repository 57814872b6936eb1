"""Documents and broker state: ``collections``, ``find``, the broker views (``queues``,
``exchanges``, ``bindings``; ``sessions`` and ``retained`` are in ``mqtt.py``), ``limits``,
``version`` (``status`` is in ``status.py``)."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import complete
from .base import (
    DataOpt,
    JsonOpt,
    _config,
    _fail,
    _print_rows,
    _request,
    app,
    out,
)

if TYPE_CHECKING:
    from ..store import Store


@app.command()
def collections(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List collections with their document counts."""
    rows = _request(data, "collections", {}, lambda s: s.list_collections())
    _print_rows(rows, as_json, "collections")


@app.command()
def find(
    collection: Annotated[str, typer.Argument(help="collection name",
                                              autocompletion=complete.collections)],
    filter: Annotated[str | None, typer.Argument(help='JSON filter, e.g. \'{"value": {"$gte": 25}}\'')] = None,  # noqa: E501
    sort: Annotated[str | None, typer.Option("--sort", help="field[,field]; -field for descending")] = None,  # noqa: E501
    limit: Annotated[int | None, typer.Option("--limit", min=0)] = None,
    skip: Annotated[int, typer.Option("--skip", min=0)] = 0,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find documents in a collection. On a terminal, an unsorted find of a large collection
    draws a progress bar on stderr (documents scanned, rate, time left)."""
    spec: Any = None
    if filter:
        try:
            spec = json.loads(filter)
        except ValueError as exc:
            _fail(f"the filter is not valid JSON: {exc}", 2)
        if not isinstance(spec, dict):
            _fail("the filter must be a JSON object, e.g. '{\"value\": {\"$gte\": 25}}'", 2)
        from ..store.query import QueryError, compile_filter

        try:
            compile_filter(spec)
        except QueryError as exc:
            _fail(f"bad filter: {exc}", 2)
    args = {"collection": collection, "filter": spec, "sort": sort, "limit": limit, "skip": skip}

    def offline(store: Store) -> list[dict[str, Any]]:
        from ..uplink.definitions import redact_documents

        return redact_documents(collection, store.find(collection, spec, sort, limit, skip))

    from ..admin.export import streams

    if streams(collection, sort):  # a bar on a terminal while a large collection is read
        from .progress import run_with_progress

        rows = run_with_progress(_config(data).admin_socket, "find", {**args, "progress": True},
                                 f"reading {collection}",
                                 lambda: _request(data, "find", args, offline))
    else:
        rows = _request(data, "find", args, offline)
    _print_rows(rows, as_json, collection)


# -------------------------------------------------------------- broker views
_VIEW_MODULES = {
    "sessions": "oxiedge.mqtt.views",
    "retained": "oxiedge.mqtt.views",
    "queues": "oxiedge.amqp.views",
    "exchanges": "oxiedge.amqp.views",
    "bindings": "oxiedge.amqp.views",
}


def offline_view(name: str) -> Callable[[Any], Any]:
    def run(store: Any) -> Any:
        module = importlib.import_module(_VIEW_MODULES[name])  # lazy: keeps the CLI light
        return module.offline_views(store)[name]()

    return run


def _view_command(name: str, doc: str) -> None:
    def command(data: DataOpt = None, as_json: JsonOpt = False) -> None:
        rows = _request(data, name, {}, offline_view(name))
        _print_rows(rows, as_json, name)

    command.__doc__ = doc
    command.__name__ = name
    app.command(name=name)(command)


_view_command("queues", "AMQP queues: ready, unacked, consumers, durable, dropped.")
_view_command("exchanges", "AMQP exchanges.")
_view_command("bindings", "AMQP bindings.")


@app.command()
def limits(
    memory_high_watermark: Annotated[str | None, typer.Option(
        help="fraction of RAM (0.4) or size (512MB)")] = None,
    disk_free_limit: Annotated[str | None, typer.Option(help="size, e.g. 200MB")] = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the resource alarms; change their limits on the running server (not persisted)."""
    args = {"memory_high_watermark": memory_high_watermark, "disk_free_limit": disk_free_limit}
    result = _request(data, "alarms.set", args, None)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    _print_rows([result], False, "resource alarms")


@app.command()
def version() -> None:
    """Print the version."""
    from .. import __version__

    out.print(__version__)

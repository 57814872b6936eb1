"""``oxiedge definitions export [FILE|-]`` and ``oxiedge definitions import FILE
[--dry-run]``: a device's whole configuration as one JSON document (docs/definitions.md).

Both are the operation ``definitions.export|import`` of the running server (the same code
as ``GET|POST /api/definitions``). Both also work on a stopped server's data dir: ``export``
reads it, ``import`` applies the same operation to it (``admin/offline_definitions.py``),
making the data dir if there is none. An import's uplink passwords are references
(``${OXIEDGE_SECRET_UPLINK_NAME}``): the values this command's environment has for them
are sent with the document; the server's own environment is asked for the others.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .base import (
    DataOpt,
    JsonOpt,
    Settings,
    _config,
    _fail,
    _print_line,
    _print_rows,
    _request,
    app,
)
from .progress import run_with_progress

definitions_app = typer.Typer(no_args_is_help=True,
                              help="Export and import the whole configuration (JSON).")
app.add_typer(definitions_app, name="definitions")


def _offline_export(data: Path | None) -> Any:
    def run(store: Any) -> Any:
        from ..definitions.document import export
        from ..definitions.state import offline_state

        cfg = _config(data)
        return export(offline_state(store, cfg.users_path, cfg.data))

    return run


@definitions_app.command("export")
def definitions_export(
    file: Annotated[str, typer.Argument(help="where to write it (- for stdout)")] = "-",
    data: DataOpt = None,
) -> None:
    """Write the definitions: users (with their hashes), permissions, queues, exchanges,
    bindings, and oxiedge's ingest routes, indexes, ACLs and uplinks (passwords as
    references). Works on a stopped server's data dir too."""
    doc = _request(data, "definitions.export", {}, _offline_export(data))
    text = json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    if file == "-":
        sys.stdout.write(text)
        return
    try:
        Path(file).write_text(text)
    except OSError as exc:
        _fail(f"cannot write {file}: {exc.strerror or exc}", 2)
    _print_line(f"definitions written to {file}")


def _read(file: str) -> Any:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    try:
        return json.loads(text)
    except ValueError as exc:
        _fail(f"{file} is not JSON: {exc}", 2)


def _offline_import(data: Path | None, args: dict[str, Any]) -> Any:
    def run(store: Any) -> Any:
        from ..admin.offline_definitions import import_offline

        cfg = _config(data)
        return import_offline(store, cfg.data, cfg.users_path, args["document"],
                              dry_run=args["dry_run"], secrets=args["secrets"])

    return run


def _plan_for_a_new_data_dir(args: dict[str, Any]) -> Any:
    """``--dry-run`` where no data dir is yet: the plan against an empty one, made in a
    temporary directory and thrown away (the import itself would make the data dir)."""
    import tempfile

    from ..admin.offline_definitions import import_offline
    from ..operations import OperationError, jsonable
    from ..store import Store

    with tempfile.TemporaryDirectory(prefix="oxiedge-plan-") as tmp:
        store = Store.open(Path(tmp) / "db")
        try:
            return jsonable(import_offline(store, Path(tmp), Path(tmp) / "passwd",
                                           args["document"], dry_run=True,
                                           secrets=args["secrets"]))
        except OperationError as exc:
            _fail(str(exc), 2 if exc.kind == "bad_request" else 1)
        finally:
            store.close()


@definitions_app.command("import")
def definitions_import(
    file: Annotated[str, typer.Argument(help="the definitions file (- for stdin)")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only print what would change")] = False,  # noqa: E501
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import definitions: checked whole first (nothing changes if one field is wrong),
    then applied through the server's operations; what exists alike stays, so importing
    twice changes nothing. Uplink password references are read from this environment
    (OXIEDGE_SECRET_UPLINK_NAME) or the server's. With no server running it is applied to
    the data dir (made if missing) by the same code."""
    from ..definitions.document import references

    doc = _read(file)
    urls = [str(url) for u in ((doc.get("oxiedge") or {}).get("uplinks") or [])
            if isinstance(u, dict) for url in (u.get("urls") or [])] \
        if isinstance(doc, dict) and isinstance(doc.get("oxiedge"), dict) else []
    secrets = {name: os.environ[name] for name in references(urls) if name in os.environ}
    args = {"document": doc, "dry_run": dry_run, "secrets": secrets}
    from ..admin.protocol import MAX_REQUEST

    if len(json.dumps(args, ensure_ascii=False).encode()) > MAX_REQUEST - 1024:
        _fail(f"{file} is larger than an admin request may be ({MAX_REQUEST >> 20} MiB): "
              "import it with POST /api/definitions (16 MiB), or in parts", 2)
    cfg = _config(data)
    offline = _offline_import(data, args)
    if dry_run and not cfg.db_path.exists():  # (no server either: it would have made it)
        result = _plan_for_a_new_data_dir(args)
    elif dry_run:
        result = _request(data, "definitions.import", args, offline)
    else:
        result = run_with_progress(
            cfg.admin_socket, "definitions.import", {**args, "progress": True},
            "importing definitions",
            lambda: _request(data, "definitions.import", args, offline, write=True,
                             create=True))
    if as_json:
        sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
        return
    if result["changes"] and (dry_run or not Settings.quiet):
        _print_rows(result["changes"], False, "would change" if dry_run else "changed")
    verb = "would create" if dry_run else "created"
    _print_line(f"{verb} {result['created']}, {'would update' if dry_run else 'updated'} "
                f"{result['updated']}, unchanged {result['unchanged']}"
                + (f"; skipped users {', '.join(result['skipped_users'])} (hashes oxiedge "
                   "cannot verify)" if result["skipped_users"] else ""))

"""Shell completion of names (``oxiedge --install-completion``): queues, exchanges, MQTT
clients, AMQP connections, collections and uplinks are asked of the running server (one
admin call with a short timeout), users read from the password file. Nothing is offered
when the server does not answer in time: completion never makes the shell wait long, and
never fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

#: How long a completion waits for the server.
TIMEOUT_S = 1.0


def _data(ctx: typer.Context) -> Path | None:
    """The ``--data`` typed so far on the command line (else the environment's)."""
    node: Any = ctx
    while node is not None:
        value = node.params.get("data") if node.params else None
        if value:
            return Path(value)
        node = node.parent
    env = os.environ.get("OXIEDGE_DATA")
    return Path(env) if env else None


def _server_names(op: str, key: str, args: dict[str, Any] | None = None
                  ) -> Callable[[typer.Context, str], list[str]]:
    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        from ..admin.client import call
        from ..config import Config

        try:
            cfg = Config.resolve({"data": _data(ctx)})
            rows = call(cfg.admin_socket, op, args or {}, timeout=TIMEOUT_S)
        except Exception:  # no server, a slow one, no permission: offer nothing
            return []
        if isinstance(rows, dict):  # (uplink.status: name -> status)
            rows = [{key: name} for name in rows]
        names = {str(r.get(key)) for r in rows if isinstance(r, dict) and r.get(key)}
        return sorted(n for n in names if n.startswith(incomplete))

    return complete


queues = _server_names("queues", "name")
exchanges = _server_names("exchanges", "name")
clients = _server_names("sessions", "client")
connections = _server_names("connections", "name")
collections = _server_names("collections", "name")
uplinks = _server_names("uplink.list", "name")


def users(ctx: typer.Context, incomplete: str) -> list[str]:
    try:
        from ..auth import read_user_file
        from ..config import Config

        path = Config.resolve({"data": _data(ctx)}).users_path
        return sorted(n for n in read_user_file(path) if n.startswith(incomplete))
    except Exception:
        return []

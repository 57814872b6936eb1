"""The ``oxiedge`` command line (typer + rich).

Every command except ``serve`` talks to the running server over the admin socket in the data
dir, and works directly on the data dir when no server runs. Listings print a rich table, or
one JSON object per line with ``--json``.

One module per verb group; ``base.py`` holds the typer apps and what the groups share;
``reference.py`` writes ``docs/cli.md`` from the commands' help. The
modules register their commands when imported, in the order ``oxiedge --help`` lists them.
"""

from __future__ import annotations

import importlib

from .base import (
    DataOpt,
    JsonOpt,
    PwFileOpt,
    _config,
    _fail,
    _print_line,
    _print_rows,
    app,
    user_app,
)

#: The verb groups, imported in the order `oxiedge --help` lists their commands (serve, the
#: document and broker views, version; the groups themselves are added in base.py); the
#: permission and ACL verbs (`oxiedge permissions|acl`, `user import-mosquitto`) come last,
#: as they use the helpers above.
COMMAND_MODULES = ("oxiedge.cli.serve", "oxiedge.cli.documents", "oxiedge.cli.status",
                   "oxiedge.cli.ingest", "oxiedge.cli.amqp", "oxiedge.cli.mqtt",
                   "oxiedge.cli.users", "oxiedge.cli.pubsub", "oxiedge.cli.uplink",
                   "oxiedge.cli.tls", "oxiedge.cli.check", "oxiedge.cli.definitions",
                   "oxiedge.access.cli")
for _name in COMMAND_MODULES:
    importlib.import_module(_name)

__all__ = ["DataOpt", "JsonOpt", "PwFileOpt", "_config", "_fail", "_print_line",
           "_print_rows", "app", "main", "user_app"]


def main() -> None:
    app()

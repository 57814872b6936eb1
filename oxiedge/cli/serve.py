"""``oxiedge serve``: one flag per declared option (``config.OPTIONS``); the brokers, trio and
RocksDB are imported only once the settings are valid.

The command's signature is built from the declarations, so a new option needs no edit here.
Every flag reaches ``Config.resolve`` as the text given (a switch as a bool, a repeatable flag
as a list): the option's own parser checks it, and the error names flag and variable alike.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer

from ..config import OPTIONS, Config, ConfigError, Option
from .base import app, err

_TYPES: dict[str, Any] = {"text": str | None, "switch": bool | None, "repeat": list[str] | None}


def _parameter(opt: Option) -> inspect.Parameter:
    # typer renders help as rich markup: "\[" keeps "[env: ...]" and "[uplink.NAME]" as text.
    info = typer.Option(None, opt.flag, help=opt.help_text().replace("[", "\\["),
                        metavar=opt.metavar or None, show_default=False)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=info,
                             annotation=_TYPES[opt.kind.shape])


def serve(**flags: Any) -> None:
    """Run the broker (MQTT + AMQP + document store) in the foreground."""
    try:
        cfg = Config.resolve(flags)
    except ConfigError as exc:
        err.print(f"oxiedge: error: {exc}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    from .. import server  # the brokers, trio and RocksDB: only once the settings are valid

    raise typer.Exit(server.run(cfg))


serve.__signature__ = inspect.Signature([_parameter(opt) for opt in OPTIONS])  # type: ignore[attr-defined]
app.command()(serve)

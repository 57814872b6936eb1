"""``docs/cli.md``: the command reference, written from the commands' own help.

``python -m oxiedge.cli.reference > docs/cli.md`` regenerates it; ``tests/cli/
test_reference.py`` fails when the file and the commands drift apart. One section per
command (groups first give their own line of help): usage, the help text, then a table of
its arguments and options with their defaults. ``serve``'s options are documented with the
settings (README's option table, ``docs/limits.md``), so it gets its usage line only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperOption

HEADER = """# The `oxiedge` command line

Generated from the commands' own help by `python -m oxiedge.cli.reference > docs/cli.md`
(a test fails when it drifts). Every command but `serve` talks to the running server over
`DATA/admin.sock`; listings also read a stopped server's data dir. What each operation does
on the server, and its exit codes, is in [operations.md](operations.md).

`oxiedge --install-completion` installs shell completion (bash, zsh, fish, PowerShell),
including the names of queues, exchanges, MQTT clients, AMQP connections, collections and
uplinks from the running server (asked with a 1 s timeout) and of users from the password
file.
"""
#: Commands whose options are documented elsewhere (a usage line only here).
USAGE_ONLY = {"serve": "its options are the settings: README's option table and limits.md"}


def _walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every command under ``cmd`` (typer's click objects), groups before their commands."""
    yield path, cmd
    commands = getattr(cmd, "commands", None) or {}
    for name in sorted(commands):
        yield from _walk(commands[name], [*path, name])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _param_row(p: Any) -> str | None:
    if p.name == "help" or getattr(p, "hidden", False):
        return None
    if isinstance(p, TyperOption):
        names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        names += " (required)" if p.required else ""
        help_text = p.help or ""
    else:
        names = f"`{(p.name or '').upper()}`" + ("" if p.required else " (optional)")
        help_text = getattr(p, "help", None) or ""
    default = p.default
    absent = default is None or default is False or default in ((), [])
    shown = "" if absent or callable(default) else f"`{default}`"
    return f"| {names} | {_cell(help_text)} | {shown} |"


def _usage(path: list[str], cmd: Any) -> str:
    pieces = ["[OPTIONS]"]
    for p in cmd.params:
        if not isinstance(p, TyperOption):
            name = (p.name or "").upper() + ("..." if p.nargs == -1 else "")
            pieces.append(name if p.required else f"[{name}]")
    if getattr(cmd, "commands", None) is not None:
        pieces.append("COMMAND [ARGS]...")
    return " ".join([*path, *pieces])


def render(app: typer.Typer) -> str:
    root = typer.main.get_command(app)
    out = [HEADER]
    for path, cmd in _walk(root, ["oxiedge"]):
        if len(path) == 1:  # the options every command takes: oxiedge --timeout 5 CMD
            rows = [r for p in cmd.params if (r := _param_row(p)) is not None]
            out.append("## Options of every command\n\n```\noxiedge [OPTIONS] COMMAND "
                       "[ARGS]...\n```\n")
            out.append("| option | what | default |\n| --- | --- | --- |")
            out.append("\n".join(rows) + "\n")
            continue
        out.append(f"## `{' '.join(path)}`\n")
        out.append(f"```\n{_usage(path, cmd)}\n```\n")
        if cmd.help:
            out.append(" ".join(cmd.help.split()) + "\n")
        if path[1] in USAGE_ONLY:
            out.append(f"({USAGE_ONLY[path[1]]}.)\n")
            continue
        if getattr(cmd, "commands", None) is not None:
            continue
        rows = [r for p in cmd.params if (r := _param_row(p)) is not None]
        if rows:
            out.append("| argument / option | what | default |\n| --- | --- | --- |")
            out.append("\n".join(rows) + "\n")
    return "\n".join(out)


def main() -> None:
    from . import app

    sys.stdout.write(render(app))


if __name__ == "__main__":
    main()

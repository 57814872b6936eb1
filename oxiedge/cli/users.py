"""``oxiedge user add|remove|list``: the password file (``auth.py``); a running server is
told to re-read it. Tags live with the permissions (``access/cli.py``)."""

from __future__ import annotations

import getpass
import sys
from typing import Annotated

import typer

from ..admin.client import ServerNotRunning, call
from ..admin.protocol import AdminError
from ..config import Config
from . import complete
from .base import DataOpt, JsonOpt, PwFileOpt, _config, _fail, _print_line, _print_rows, user_app


def _reload_users(cfg: Config) -> None:
    try:
        call(cfg.admin_socket, "users.reload")
    except (ServerNotRunning, AdminError):
        pass


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="user name")],
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="read the password from stdin")] = False,  # noqa: E501
    data: DataOpt = None,
    password_file: PwFileOpt = None,
    tags: Annotated[str | None, typer.Option("--tags", help="administrator, monitoring, management or none (comma-separated): the HTTP API's roles (administrator: everything; monitoring, management: read only)")] = None,  # noqa: E501
) -> None:
    """Add a user or change its password (prompts unless --password-stdin)."""
    from ..access import cli as access_cli
    from ..access.rules import TAGS
    from ..auth import USER_NAME_RULE, hash_password, put_user, user_name_ok

    if not user_name_ok(name):
        _fail(USER_NAME_RULE, 2)
    tag_list = [t.strip() for t in tags.split(",") if t.strip()] if tags is not None else None
    if tag_list is not None and any(t not in TAGS for t in tag_list):
        _fail(f"tags must be among {', '.join(TAGS)}", 2)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            _fail("passwords differ", 2)
    if not password:
        _fail("empty password", 2)
    cfg = _config(data, password_file)
    path = cfg.users_path
    put_user(path, name, hash_password(password))
    _reload_users(cfg)
    if tag_list is not None:
        access_cli.set_tags(data, name, tag_list)
    _print_line(f"user {name} saved in {path}")


@user_app.command("remove")
def user_remove(name: Annotated[str, typer.Argument(help="user name",
                                                    autocompletion=complete.users)],
                data: DataOpt = None, password_file: PwFileOpt = None) -> None:
    """Remove a user."""
    from ..access import cli as access_cli
    from ..auth import editing_user_file

    cfg = _config(data, password_file)
    path = cfg.users_path
    with editing_user_file(path) as users:
        found = users.pop(name, None) is not None
        left = len(users)
    if not found:
        _fail(f"no user {name!r} in {path}")
    _reload_users(cfg)
    access_cli.forget_user(data, name)
    _print_line(f"user {name} removed")
    if not left:
        # The last user is gone: say what that means (it never reopens a network listener).
        _print_line("no user left: anonymous clients are allowed on a loopback --bind only;"
                    " a broker on any other address refuses them unless --allow-anonymous")


@user_app.command("list")
def user_list(data: DataOpt = None, password_file: PwFileOpt = None, as_json: JsonOpt = False
              ) -> None:
    """List users and their tags."""
    from ..access import cli as access_cli
    from ..auth import read_user_file

    path = _config(data, password_file).users_path
    tags = access_cli.tags_of(data)
    _print_rows([{"user": n, "tags": ",".join(tags.get(n, [])) or "none"}
                 for n in sorted(read_user_file(path))], as_json, "users")


"""``oxiedge permissions …`` (RabbitMQ's words), ``oxiedge acl …`` (Mosquitto's words),
``oxiedge user import-mosquitto`` and user tags: all edit ``DATA/permissions.json``.

Two verb sets over one model because each mirrors the tool its operator already knows:
``permissions set USER CONF WRITE READ`` is ``rabbitmqctl set_permissions``,
``permissions set-topic`` is ``set_topic_permissions``, and ``acl add --user U read T`` is a
``topic read T`` line under ``user U`` of a Mosquitto acl_file. Every change goes to a
running server over the admin socket (``permissions.apply``: the server, which owns the
file, rewrites it and its connections apply the change at their next check); with no server
running the CLI makes the same change (``edit.py``) on the file itself, under a lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..admin.client import ServerNotRunning, call
from ..admin.protocol import AdminError
from ..cli.base import DataOpt, JsonOpt, PwFileOpt, _config, _fail, _print_line, _print_rows, app
from ..cli.base import user_app as _user_app
from .edit import apply
from .rules import ACL_ACCESS, DEFAULTS, PermissionError_, check_acl_topic, compile_regex, editing
from .rules import path_for as _path_for
from .rules import read_file as _read_file

permissions_app = typer.Typer(no_args_is_help=True,
                              help="AMQP permissions (RabbitMQ's set_permissions / "
                                   "set_topic_permissions).")
acl_app = typer.Typer(no_args_is_help=True, help="MQTT topic ACLs (Mosquitto acl_file lines).")
app.add_typer(permissions_app, name="permissions")
app.add_typer(acl_app, name="acl")

VhostOpt = Annotated[str, typer.Option("--vhost", "-p", help="virtual host")]
UserArg = Annotated[str, typer.Argument(help="user name")]


def _path(data: Path | None) -> Path:
    return _path_for(_config(data).data)


def _change(data: Path | None, op: str, args: dict[str, Any]) -> str:
    """One change (``edit.py``): made by the running server over the admin socket (it owns
    the file and applies the change to live connections), or on the file when none runs."""
    cfg = _config(data)
    try:
        result = call(cfg.admin_socket, "permissions.apply", {"op": op, "args": args})
        return str(result["message"])
    except ServerNotRunning:
        pass
    except AdminError as exc:
        _fail(str(exc))
    try:
        with editing(_path(data)) as doc:
            return apply(doc, op, args)
    except PermissionError_ as exc:
        _fail(str(exc))


def _regex(value: str) -> str:
    try:
        compile_regex(value)
    except PermissionError_ as exc:
        _fail(str(exc), 2)
    return value


# --------------------------------------------------------------------------- AMQP
@permissions_app.command("set")
def permissions_set(user: UserArg,
                    configure: Annotated[str, typer.Argument(help="regexp of names the user may create/delete")],  # noqa: E501
                    write: Annotated[str, typer.Argument(help="regexp of names the user may publish/bind into")],  # noqa: E501
                    read: Annotated[str, typer.Argument(help="regexp of names the user may consume/bind from")],  # noqa: E501
                    vhost: VhostOpt = "/", data: DataOpt = None) -> None:
    """Set USER's configure/write/read regexps in a vhost (like rabbitmqctl set_permissions)."""
    _print_line(_change(data, "set", {"user": user, "vhost": vhost, "configure": _regex(configure),
                                      "write": _regex(write), "read": _regex(read)}))


@permissions_app.command("clear")
def permissions_clear(user: UserArg, vhost: VhostOpt = "/", data: DataOpt = None) -> None:
    """Remove USER's permissions in a vhost (with none left the user is unrestricted on AMQP
    again unless `permissions default deny`)."""
    _print_line(_change(data, "clear", {"user": user, "vhost": vhost}))


@permissions_app.command("set-topic")
def permissions_set_topic(user: UserArg,
                          exchange: Annotated[str, typer.Argument(help="topic exchange, e.g. amq.topic")],  # noqa: E501
                          write: Annotated[str, typer.Argument(help="regexp of routing keys the user may publish with")],  # noqa: E501
                          read: Annotated[str, typer.Argument(help="regexp of binding keys the user may bind with")],  # noqa: E501
                          vhost: VhostOpt = "/", data: DataOpt = None) -> None:
    """Set USER's topic permissions on a topic exchange (like set_topic_permissions);
    {username}, {client_id} and {vhost} in the regexps are replaced per connection."""
    _print_line(_change(data, "set_topic", {"user": user, "vhost": vhost, "exchange": exchange,
                                            "write": _regex(write), "read": _regex(read)}))


@permissions_app.command("clear-topic")
def permissions_clear_topic(user: UserArg,
                            exchange: Annotated[str | None, typer.Argument(help="exchange (default: all)")] = None,  # noqa: E501
                            vhost: VhostOpt = "/", data: DataOpt = None) -> None:
    """Remove USER's topic permissions (on one exchange or all) in a vhost."""
    _print_line(_change(data, "clear_topic", {"user": user, "vhost": vhost,
                                              "exchange": exchange}))


@permissions_app.command("list")
def permissions_list(user: Annotated[str | None, typer.Option("--user", help="only this user")] = None,  # noqa: E501
                     data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List AMQP permissions and topic permissions."""
    doc = _read(data)
    rows: list[dict[str, Any]] = []
    for name, entry in sorted(doc["users"].items()):
        if user is not None and name != user:
            continue
        for vhost, p in sorted(entry.get("vhosts", {}).items()):
            rows.append({"user": name, "vhost": vhost, "exchange": "", **p})
        for vhost, xs in sorted(entry.get("topics", {}).items()):
            for exchange, p in sorted(xs.items()):
                rows.append({"user": name, "vhost": vhost, "exchange": exchange,
                             "configure": "", **p})
    _print_rows(rows, as_json, f"permissions (users without any: {doc['default']['amqp']})")


@permissions_app.command("default")
def permissions_default(policy: Annotated[str, typer.Argument(help="allow | deny")],
                        data: DataOpt = None) -> None:
    """What AMQP allows a user without permissions: allow (default, as without rules) or deny
    (RabbitMQ: a user without permissions in a vhost cannot open it)."""
    _set_default("amqp", policy, data)


@permissions_app.command("reload")
def permissions_reload(data: DataOpt = None) -> None:
    """Make a running server re-read DATA/permissions.json (after editing it by hand); a
    broken file is refused and the rules in force stay."""
    cfg = _config(data)
    _read(data)  # validate here first: a clear error names the file and the problem
    try:
        result = call(cfg.admin_socket, "permissions.reload")
    except ServerNotRunning:
        _fail(f"no server is running on {cfg.data} (it reads the file when it starts)")
    except AdminError as exc:
        _fail(str(exc))
    _print_line(f"permissions reloaded: rules {result['rules']}")


def _set_default(proto: str, policy: str, data: Path | None) -> None:
    if policy not in DEFAULTS:
        _fail("expected allow or deny", 2)
    _print_line(_change(data, "default", {"protocol": proto, "policy": policy}))


def _read(data: Path | None) -> dict[str, Any]:
    try:
        return _read_file(_path(data))
    except PermissionError_ as exc:
        _fail(str(exc))


# --------------------------------------------------------------------------- MQTT
AccessArg = Annotated[str, typer.Argument(help="read | write | readwrite | deny")]
TopicArg = Annotated[str, typer.Argument(help="topic, + and # allowed (%u, %c in --pattern)")]
AclUserOpt = Annotated[str | None, typer.Option("--user", help="a user's line")]
PatternOpt = Annotated[bool, typer.Option("--pattern", help="a pattern line for every client")]
AnonOpt = Annotated[bool, typer.Option("--anonymous", help="a line for anonymous clients")]


def _acl_args(access: str, topic: str, user: str | None, pattern: bool, anonymous: bool
              ) -> dict[str, Any]:
    if sum((user is not None, pattern, anonymous)) != 1:
        _fail("give exactly one of --user NAME, --pattern, --anonymous", 2)
    if access not in ACL_ACCESS:
        _fail(f"access must be one of {', '.join(ACL_ACCESS)}", 2)
    try:
        check_acl_topic(topic)
    except PermissionError_ as exc:
        _fail(str(exc), 2)
    kind = "pattern" if pattern else "anonymous" if anonymous else "user"
    return {"for": kind, "user": user, "access": access, "topic": topic}


@acl_app.command("add")
def acl_add(access: AccessArg, topic: TopicArg, user: AclUserOpt = None,
            pattern: PatternOpt = False, anonymous: AnonOpt = False,
            data: DataOpt = None) -> None:
    """Add an MQTT ACL line (Mosquitto's `topic ACCESS T` / `pattern ACCESS T`)."""
    _print_line(_change(data, "acl_add", _acl_args(access, topic, user, pattern, anonymous)))


@acl_app.command("remove")
def acl_remove(access: AccessArg, topic: TopicArg, user: AclUserOpt = None,
               pattern: PatternOpt = False, anonymous: AnonOpt = False,
               data: DataOpt = None) -> None:
    """Remove an MQTT ACL line."""
    _print_line(_change(data, "acl_remove", _acl_args(access, topic, user, pattern, anonymous)))


@acl_app.command("list")
def acl_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List MQTT ACL lines: anonymous, per user, patterns."""
    doc = _read(data)
    rows = [{"for": "(anonymous)", "access": a, "topic": t} for a, t in doc["anonymous_acl"]]
    for name, entry in sorted(doc["users"].items()):
        rows += [{"for": f"user {name}", "access": a, "topic": t} for a, t in entry.get("acl", [])]
    rows += [{"for": "(pattern)", "access": a, "topic": t} for a, t in doc["patterns"]]
    _print_rows(rows, as_json, f"acl (clients without any line: {doc['default']['mqtt']})")


@acl_app.command("default")
def acl_default(policy: Annotated[str, typer.Argument(help="allow | deny")],
                data: DataOpt = None) -> None:
    """What MQTT allows a client without ACL lines: allow (default) or deny (Mosquitto with
    an acl_file)."""
    _set_default("mqtt", policy, data)


# -------------------------------------------------------------------------- users
@_user_app.command("import-mosquitto")
def user_import_mosquitto(
    passwd: Annotated[Path | None, typer.Option("--passwd", help="Mosquitto password file ($7$/$6$ hashes)")] = None,  # noqa: E501
    acl: Annotated[Path | None, typer.Option("--acl", help="Mosquitto acl_file")] = None,
    data: DataOpt = None, password_file: PwFileOpt = None,
) -> None:
    """Import users (hashes kept as they are) and ACLs from Mosquitto. Imported ACLs make the
    MQTT default `deny`, as Mosquitto has it with an acl_file."""
    from ..auth import editing_user_file
    from .mosquitto import parse_acl_file, read_passwd

    if passwd is None and acl is None:
        _fail("give --passwd FILE and/or --acl FILE", 2)
    try:
        imported = read_passwd(passwd) if passwd is not None else {}
        parsed = parse_acl_file(acl.read_text(), str(acl)) if acl is not None else None
    except (OSError, PermissionError_) as exc:
        _fail(str(exc))
    cfg = _config(data, password_file)
    if imported:
        with editing_user_file(cfg.users_path) as users:
            users.update(imported)
        try:
            call(cfg.admin_socket, "users.reload")
        except (ServerNotRunning, AdminError):
            pass
    if parsed is not None:
        _change(data, "import_acl", {"acl": parsed})
    _print_line(f"imported {len(imported)} users"
                + ("" if parsed is None else
                   f", ACLs of {len(parsed['users'])} users and {len(parsed['patterns'])} "
                   "patterns (MQTT default now deny)"))


def set_tags(data: Path | None, name: str, tags: list[str]) -> None:
    """Store a user's tags (``user add --tags``); ``none`` clears them."""
    _change(data, "tags", {"user": name, "tags": tags})


def forget_user(data: Path | None, name: str) -> None:
    """``user remove``: the user's permissions, ACLs and tags go too (as in RabbitMQ)."""
    if _path(data).exists():
        _change(data, "forget", {"user": name})


def tags_of(data: Path | None) -> dict[str, list[str]]:
    doc = _read(data)
    return {n: list(e.get("tags", [])) for n, e in doc["users"].items()}

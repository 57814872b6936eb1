"""``oxiedge check running|alarms|durable|listeners|ports|quarantine|uplink``: health by exit
code for monitor scripts, as ``rabbitmq-diagnostics`` answers: 0 the check passed, 69
(EX_UNAVAILABLE) it failed or no server answers, 75 (EX_TEMPFAIL) the server did not answer
in ``--timeout``, 64 (EX_USAGE) a usage error (typer's own too: an unknown option or
check, a bad value). A failure prints one line on stderr; a pass
one line on stdout (none with ``--quiet``).

The checks themselves are the server's (``admin/health.py``, operation ``check``), except
``running`` (the server answering is the check) and ``listeners`` (this process connects
to every endpoint the server reports, as ``check_port_connectivity`` does: a listener
that accepts is up).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from ..admin.client import ServerNotRunning, call
from ..admin.protocol import AdminError
from .base import DataOpt, _config, app

OK, FAILED, TEMPFAIL, USAGE = 0, 69, 75, 64

#: click's UsageError (typer re-exports only its subclass BadParameter; typer vendors click
#: from 0.17 on, so it is found by name rather than imported from either).
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__
                                   if c.__name__ == "UsageError")


class _UsageExits64(TyperGroup):
    """The ``check`` group: a usage error of its own or of a check (an unknown option, a
    missing or bad value, an unknown check) exits 64, EX_USAGE, as rabbitmq-diagnostics
    does, where typer exits 2."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            exc.exit_code = USAGE  # type: ignore[attr-defined]
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            exc.exit_code = USAGE  # type: ignore[attr-defined]
            raise


check_app = typer.Typer(
    cls=_UsageExits64,
    no_args_is_help=True,
    help="Health by exit code for monitors: 0 ok, 69 failed or no server, 75 timed out, "
         "64 bad usage (as rabbitmq-diagnostics).")
app.add_typer(check_app, name="check")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="seconds to wait for the server")]  # noqa: E501
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="print nothing when the check passes")]  # noqa: E501


def _exit(code: int, line: str, quiet: bool = False) -> NoReturn:
    if code != OK:
        sys.stderr.write(f"{line}\n")
    elif not quiet:
        sys.stdout.write(f"{line}\n")
    raise typer.Exit(code)


def _ask(data: Path | None, op: str, args: dict[str, Any], timeout: float) -> Any:
    cfg = _config(data)
    try:
        return call(cfg.admin_socket, op, args, timeout=timeout)
    except ServerNotRunning:
        _exit(FAILED, f"no server is running on {cfg.data} (start it with `oxiedge serve` "
                      "or pass --data)")
    except TimeoutError:
        _exit(TEMPFAIL, f"the server on {cfg.data} did not answer within {timeout:g} s")
    except AdminError as exc:
        _exit(USAGE if exc.kind == "bad_request" else FAILED, str(exc))


def _server_check(name: str, data: Path | None, timeout: float, quiet: bool,
                  **args: Any) -> None:
    result = _ask(data, "check", {"name": name, **args}, timeout)
    _exit(OK if result["ok"] else FAILED, f"{name}: {result['reason']}", quiet)


@check_app.command("running")
def check_running(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                  quiet: QuietOpt = False) -> None:
    """The server answers on its admin socket."""
    pong = _ask(data, "ping", {}, timeout)
    _exit(OK, f"running: the server answers (pid {pong['pid']})", quiet)


@check_app.command("alarms")
def check_alarms(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                 quiet: QuietOpt = False) -> None:
    """No memory or disk alarm holds publishers."""
    _server_check("alarms", data, timeout, quiet)


@check_app.command("durable")
def check_durable(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                  quiet: QuietOpt = False) -> None:
    """Durable writes work (no failed commit, no sync hanging for 10 s)."""
    _server_check("durable", data, timeout, quiet)


@check_app.command("quarantine")
def check_quarantine(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                     quiet: QuietOpt = False) -> None:
    """No stored record was quarantined as unreadable."""
    _server_check("quarantine", data, timeout, quiet)


@check_app.command("uplink")
def check_uplink(
    name: Annotated[str | None, typer.Argument(help="one uplink (default: all)")] = None,
    max_lag: Annotated[str, typer.Option("--max-lag", help="oldest unforwarded message may be this old, e.g. 60s, 5m")] = "60s",  # noqa: E501
    data: DataOpt = None,
    timeout: TimeoutOpt = 10.0,
    quiet: QuietOpt = False,
) -> None:
    """The uplinks are connected and forward with at most --max-lag of backlog."""
    from ..durations import parse_duration

    try:
        lag = parse_duration(max_lag)
    except ValueError as exc:
        _exit(USAGE, f"--max-lag: {exc}")
    _server_check("uplink", data, timeout, quiet, uplink=name, max_lag=lag)


def _listeners(data: Path | None, timeout: float, quiet: bool) -> None:
    endpoints: dict[str, str] = _ask(data, "status", {}, timeout).get("endpoints") or {}
    failed = []
    for name, endpoint in sorted(endpoints.items()):
        host, _, port = endpoint.rpartition(":")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1" if host != "::" else "::1"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                pass
        except OSError as exc:
            failed.append(f"{name} {endpoint}: {exc.strerror or exc}")
    if failed:
        _exit(FAILED, "listeners: " + "; ".join(failed))
    _exit(OK, f"listeners: {len(endpoints)} accept connections "
              f"({', '.join(f'{k} {v}' for k, v in sorted(endpoints.items()))})", quiet)


@check_app.command("listeners")
def check_listeners(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                    quiet: QuietOpt = False) -> None:
    """Every listener (MQTT, AMQP, TLS, HTTP) accepts a TCP connection."""
    _listeners(data, timeout, quiet)


@check_app.command("ports")
def check_ports(data: DataOpt = None, timeout: TimeoutOpt = 10.0,
                quiet: QuietOpt = False) -> None:
    """The same as `check listeners`."""
    _listeners(data, timeout, quiet)

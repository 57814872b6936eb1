"""Health checks a monitor asks by exit code (``oxiedge check NAME``, as
``rabbitmq-diagnostics check_*``), answered by the running server.

Each check is a method returning a :class:`CheckResult`: ``ok`` and a one-line ``reason``
(what is wrong, or what was checked). The ``check`` operation runs one by name; the CLI
turns ``ok`` into exit code 0 or 69. ``running`` needs no method (the server answering is
the check) and ``listeners`` is checked from outside (the CLI connects to each endpoint of
``status``), so both live in the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..app import App
from ..operations import BAD_REQUEST, NOT_FOUND, Args, Operation, OperationError

#: A commit round's sync that has hung this long fails ``check durable`` (the disk is gone).
SYNC_STUCK_S = 10.0
#: ``check uplink``'s default: the oldest unforwarded message may be this old.
DEFAULT_MAX_LAG_S = 60.0


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    ok: bool
    reason: str


class HealthChecks:
    """The server-side checks of one ``oxiedge serve`` process."""

    def __init__(self, app: App, uplinks: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.app = app
        self.uplinks = uplinks  # name -> its ``status()`` (``UplinkManager.status``)

    def alarms(self) -> CheckResult:
        alarms = self.app.alarms
        if alarms.blocked:
            return CheckResult("alarms", False, f"resource alarm: {alarms.reason} (publishers "
                               "are held; `oxiedge limits` shows the limits)")
        return CheckResult("alarms", True, "no resource alarm")

    def durable(self) -> CheckResult:
        committer = self.app.store.committer
        if committer.failed is not None:
            return CheckResult("durable", False, f"durable writes stopped: {committer.failed}")
        stuck = committer.stuck_for()
        if stuck >= SYNC_STUCK_S:
            return CheckResult("durable", False,
                               f"a commit round's sync has not returned for {stuck:.0f} s")
        return CheckResult("durable", True, f"durable writes ok ({committer.rounds} rounds)")

    def quarantine(self) -> CheckResult:
        q = self.app.store.quarantine_status()
        if q.get("records"):
            latest = "; ".join(q.get("latest") or [])
            return CheckResult("quarantine", False, f"{q['records']} record(s) quarantined "
                               f"(`oxiedge find _quarantine`): {latest}")
        if q.get("unknown_families"):
            return CheckResult("quarantine", False, "unknown column families in the store: "
                               + ", ".join(q["unknown_families"]))
        return CheckResult("quarantine", True, "no quarantined record")

    def uplink(self, name: str | None, max_lag: float) -> CheckResult:
        status = self.uplinks()
        if name is not None:
            if name not in status:
                raise OperationError(f"no uplink {name!r} (see `oxiedge uplink list`)",
                                     NOT_FOUND)
            status = {name: status[name]}
        problems = []
        for uname, s in sorted(status.items()):
            lag = float(s.get("lag_seconds") or 0)
            if s.get("state") != "connected":
                why = f": {s['last_error']}" if s.get("last_error") else ""
                problems.append(f"{uname} is {s.get('state')}{why}")
            if lag > max_lag:
                problems.append(f"{uname} lags {lag:.0f} s (over {max_lag:g} s, "
                                f"{s.get('backlog_messages')} messages waiting)")
        if problems:
            return CheckResult("uplink", False, "; ".join(problems))
        return CheckResult("uplink", True, f"{len(status)} uplink(s) connected, lag within "
                           f"{max_lag:g} s")

    def run(self, name: str, args: Args) -> CheckResult:
        if name == "uplink":
            max_lag = args.number("max_lag", DEFAULT_MAX_LAG_S)
            return self.uplink(args.optional_text("uplink"),
                               DEFAULT_MAX_LAG_S if max_lag is None else max_lag)
        check: Callable[[], CheckResult] | None = {
            "alarms": self.alarms, "durable": self.durable, "quarantine": self.quarantine,
        }.get(name)
        if check is None:
            raise OperationError(f"unknown check {name!r}", BAD_REQUEST)
        return check()

    def operations(self) -> list[Operation]:
        return [Operation("check", "one health check: alarms, durable, quarantine, uplink",
                          lambda a: self.run(a.text("name", required=True), a))]

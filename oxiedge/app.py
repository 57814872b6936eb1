"""``App``: the objects one ``oxiedge serve`` process shares between its parts."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field

from .access.rules import PermissionStore
from .alarms import ResourceAlarms
from .auth import UserStore
from .config import Config
from .connections import ConnectionLimits
from .login import Logins
from .lograte import LineBudget
from .net.blocked import BlockedWatch
from .service import Service
from .sizes import backlog_budget
from .store import Store
from .store.backlog import Backlog


def make_logger() -> logging.Logger:
    """Plain lines on stderr: the contract's start-up lines are exact prefixes."""
    log = logging.getLogger("oxiedge")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


@dataclass
class App:
    """Configuration, store, users, the running services and shared counters.

    The parts that need one another (ingest, the bridge, the uplinks, TLS) are not looked
    up here: ``server.py`` builds each with the typed parts it needs."""

    config: Config
    store: Store
    users: UserStore
    log: logging.Logger = field(default_factory=make_logger)
    # Who may do what (docs/permissions.md); no rules = every authenticated client may.
    permissions: PermissionStore = field(default_factory=lambda: PermissionStore(None))
    services: dict[str, Service] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    endpoints: dict[str, str] = field(default_factory=dict)
    # The lines for connections the broker ended, MQTT and AMQP together (``lograte``).
    close_lines: LineBudget = field(default_factory=LineBudget)
    alarms: ResourceAlarms = field(init=False)
    # Blocked publishers' watch for their peer hanging up (``net.blocked``), given to
    # every transport; its counters join the alarms' in ``oxiedge status``.
    blocked: BlockedWatch = field(init=False)
    connections: ConnectionLimits = field(init=False)
    logins: Logins = field(init=False)
    # --max-backlog-bytes: one budget for the bytes MQTT persistent sessions and AMQP queues
    # paged to disk hold together (each service joins its tally); a fraction of the data
    # filesystem's size is known only now.
    backlog: Backlog = field(init=False)

    def __post_init__(self) -> None:
        config = self.config
        self.alarms = ResourceAlarms(config.data, config.memory_high_watermark,
                                     config.disk_free_limit, self.log)
        self.blocked = BlockedWatch(self.alarms.wait_unblocked, config.blocked_keepalive)
        self.connections = ConnectionLimits(config.max_connections,
                                            config.max_connections_per_source, self.log)
        self.logins = Logins(self.users, config.login_hash_threads, config.login_delay_max,
                             config.login_track_max)
        self.backlog = Backlog(*backlog_budget(config.max_backlog_bytes, config.data))

"""``App``: the objects one ``oxiedge serve`` process shares between its parts."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .alarms import ResourceAlarms
from .auth import UserStore
from .config import Config
from .service import Service
from .store import Store


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
    """Configuration, store, users, the running services and shared counters."""

    config: Config
    store: Store
    users: UserStore
    log: logging.Logger = field(default_factory=make_logger)
    services: dict[str, Service] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    endpoints: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)
    alarms: ResourceAlarms = field(init=False)

    def __post_init__(self) -> None:
        self.alarms = ResourceAlarms(self.config.data, self.config.memory_high_watermark,
                                     self.config.disk_free_limit, self.log)

"""What the uplinks see of the rest of the process: small Protocols, so that no module of
``uplink/`` imports ``app`` (a leaf module; ``app.App`` is the real one, and the bus is
``staged.Publisher``, both wired by ``server.py``)."""

from __future__ import annotations

import logging
from typing import Protocol

from ..store import Store


class Alarms(Protocol):
    """The resource alarms (``alarms.ResourceAlarms``): a full outbox with the ``block``
    policy raises one of its own, and publishers wait while it is raised."""

    def set_alarm(self, kind: str, detail: str | None) -> None:
        """Raise (``detail`` given) or clear (None) the alarm ``kind``."""
        ...


class AppView(Protocol):
    """The process's shared objects as the uplinks use them (``app.App``)."""

    @property
    def store(self) -> Store: ...

    @property
    def alarms(self) -> Alarms: ...

    @property
    def log(self) -> logging.Logger: ...

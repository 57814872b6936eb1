"""What ``MqttProtocol`` sees of the objects around it (typing protocols only)."""

from __future__ import annotations

from typing import Any, Protocol


class Outlet(Protocol):
    """The connection's output as the protocol sees it (``oxiedge.net.output.Output``)."""

    out_bytes: int
    protocol: Any

    def write(self, data: bytes) -> None: ...

    def deliver_now(self) -> None: ...

    def send_now(self, data: bytes) -> None: ...

    def abort(self) -> None: ...


class Alarms(Protocol):
    """The resource alarms as the protocol sees them (``oxiedge.alarms``)."""

    @property
    def blocked(self) -> bool: ...


class Log(Protocol):
    def error(self, msg: str, *args: Any) -> None: ...

"""What an option's value may be: a parser from the text of a flag, variable or default to
the typed value in ``Config``, and the placeholder ``--help`` and README show for it.

Every parser takes the option's label (``--flag (OXIEDGE_VAR)``) first, so the error
(``ConfigError``) names the option whichever way the bad value came in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from ..durations import parse_duration
from ..errors import ConfigError
from ..sizes import check_backlog_budget, parse_memory_watermark, parse_size

T = TypeVar("T")

#: How the command line carries the value: one text, an on/off flag pair, a repeatable text.
Shape = Literal["text", "switch", "repeat"]


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """A kind of value: ``parse(label, raw) -> T`` and its ``--help`` placeholder."""

    parse: Callable[[str, Any], T]
    metavar: str
    shape: Shape = "text"


def _number(label: str, value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{label}: invalid number {value!r}") from None


def _in_range(label: str, number: int, minimum: int, maximum: int | None) -> int:
    if number < minimum:
        raise ConfigError(f"{label}: {number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{label}: {number} is above the maximum {maximum}")
    return number


def count(minimum: int = 1, maximum: int | None = None, metavar: str = "N") -> Kind[int]:
    """A whole number in ``[minimum, maximum]``."""
    return Kind(lambda label, v: _in_range(label, _number(label, v), minimum, maximum), metavar)


def seconds(minimum: float = 0.1) -> Kind[float]:
    """A number of seconds (a fraction allowed), at least ``minimum``."""

    def parse(label: str, value: Any) -> float:
        try:
            number = float(str(value).strip())
        except ValueError:
            raise ConfigError(f"{label}: invalid number of seconds {value!r}") from None
        if number < minimum:
            raise ConfigError(f"{label}: {number:g} is below the minimum {minimum:g}")
        return number

    return Kind(parse, "S")


def _sized(parse_text: Callable[[str], int], minimum: int) -> Callable[[str, Any], int]:
    def parse(label: str, value: Any) -> int:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = parse_text(str(value))
            except ValueError as exc:
                raise ConfigError(f"{label}: {exc}") from None
        return _in_range(label, number, minimum, None)

    return parse


def size(minimum: int = 0) -> Kind[int]:
    """Bytes, written as ``sizes.parse_size`` reads them (``64KiB``, ``200MB``, a number)."""
    return Kind(_sized(parse_size, minimum), "SIZE")


#: A fraction of the memory limit or an absolute size, in bytes (``sizes``).
WATERMARK: Kind[int] = Kind(_sized(parse_memory_watermark, 0), "X")


def _backlog(label: str, value: Any) -> str:
    try:
        return check_backlog_budget(str(value))
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


#: A fraction of the data filesystem's size or a size, kept as written: the data dir it is
#: a fraction of is known when the broker starts (``sizes.backlog_budget``).
BACKLOG: Kind[str] = Kind(_backlog, "X")


def _port(label: str, value: Any) -> int | None:
    text = str(value).strip().lower()
    if text in ("off", "none", "disabled", "false", "no"):
        return None
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{label}: invalid port {value!r} (a number 0-65535 or off)") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{label}: port {port} out of range 0-65535")
    return port


#: A TCP port, 0 for any free one, ``off`` for no listener (None).
PORT: Kind[int | None] = Kind(_port, "N")


def _bool(label: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{label}: invalid value {value!r} (use 1 or 0)")


#: On or off: ``--x/--no-x`` on the command line, 1/0 in the environment.
SWITCH: Kind[bool] = Kind(_bool, "", "switch")
#: Like ``SWITCH``, but unset (None) by default: the server decides.
MAYBE_SWITCH: Kind[bool | None] = Kind(
    lambda label, v: None if v in ("", None) else _bool(label, v), "", "switch")


def _path(label: str, value: Any) -> Path:
    text = str(value).strip()
    if not text:
        raise ConfigError(f"{label}: empty path")
    return Path(text).expanduser()


PATH: Kind[Path] = Kind(_path, "PATH")
#: A path, or None when empty.
MAYBE_PATH: Kind[Path | None] = Kind(
    lambda label, v: None if str(v).strip() == "" else _path(label, v), "PATH")
#: Free text, surrounding blanks removed.
TEXT: Kind[str] = Kind(lambda _label, v: str(v).strip(), "TEXT")


def choice(*choices: str, metavar: str = "M") -> Kind[str]:
    """One of ``choices`` (case-insensitive)."""

    def parse(label: str, value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigError(f"{label}: invalid value {value!r} (one of {', '.join(choices)})")
        return text

    return Kind(parse, metavar)


def _address(label: str, value: Any) -> str:
    text = str(value).strip()
    if text in ("localhost", ""):
        return "127.0.0.1" if text == "" else text
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(f"{label}: invalid address {value!r} (an IPv4 or IPv6 address)") \
            from None
    return text


#: An IP address to bind to (``localhost`` allowed).
ADDRESS: Kind[str] = Kind(_address, "ADDR")


def _routes(_label: str, value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(part.strip() for part in str(item).split(",") if part.strip())
    return out


#: ``FILTER:COLLECTION`` routes: the flag repeated, or comma-separated (checked by ingest).
ROUTES: Kind[list[str]] = Kind(_routes, "FILTER:COLLECTION", "repeat")

#: The longest session expiry: ten years (``never`` for none).
MAX_EXPIRY = 3650 * 86400


def _expiry(label: str, value: Any) -> int | None:
    # Not 0: in MQTT 5 and RabbitMQ a session expiry of 0 means "ends with the connection".
    text = str(value).strip().lower()
    if text in ("never", "off", "none", "infinity"):
        return None
    try:
        secs = parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}, or never") from None
    if secs > MAX_EXPIRY:  # (a float clock loses whole seconds far beyond it)
        raise ConfigError(f"{label}: {value!r} is over the maximum 3650d;"
                          " use never for no expiry")
    return secs


#: A duration (``30m``, ``12h``, ``7d``) in seconds, or None for ``never``.
EXPIRY: Kind[int | None] = Kind(_expiry, "TIME")


def _keepalive(label: str, value: Any) -> tuple[int, int, int]:
    parts = str(value).replace(" ", "").split(",")
    try:
        idle, interval, probes = (int(part) for part in parts)
    except ValueError:
        raise ConfigError(f"{label}: {value!r} is not IDLE,INTERVAL,COUNT"
                          " (three whole numbers, e.g. 60,20,3)") from None
    if min(idle, interval, probes) < 1:
        raise ConfigError(f"{label}: {value!r}: each of IDLE,INTERVAL,COUNT must be"
                          " at least 1")
    if max(idle, interval) > 32767 or probes > 127:  # (Linux's own bounds)
        raise ConfigError(f"{label}: {value!r}: at most 32767 s and 127 probes")
    return idle, interval, probes


#: TCP keep-alive ``IDLE,INTERVAL,COUNT``: seconds, seconds, probes, each at least 1.
KEEPALIVE: Kind[tuple[int, int, int]] = Kind(_keepalive, "I,N,C")

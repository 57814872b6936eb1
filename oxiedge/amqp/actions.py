"""What :class:`~oxiedge.amqp.protocol.AmqpProtocol` asks its driver to do.

``next_action()`` returns one of :data:`NEED_DATA`, :data:`COMMIT`, :class:`Authenticate`
or :data:`DONE`; the protocol's steps are generators that *yield* them (:data:`Steps`) and
receive the answer (a commit's error or None, a login's verdict) as the value of the yield.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Final


class Marker:
    """A named action without data."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Every received frame is handled: read more.
NEED_DATA: Final = Marker("NEED_DATA")
#: Await ``store.commit()``, then call :meth:`AmqpProtocol.committed`.
COMMIT: Final = Marker("COMMIT")
#: The connection is over.
DONE: Final = Marker("DONE")


@dataclass(frozen=True, slots=True)
class Authenticate:
    """Check ``user``/``password`` (``Logins.check``), then call ``authenticated(ok)``."""

    user: str | None
    password: bytes | None


#: Any action, as ``next_action()`` returns it.
Action = Marker | Authenticate
#: A protocol step: yields actions, receives their answers.
Steps = Generator[Any, Any, None]

"""The actions :class:`~oxiedge.amqp.protocol.AmqpProtocol` asks its transport loop for:
the vocabulary of ``oxiedge.net`` (one loop for every protocol), re-exported, and the type
of a protocol step.

The protocol's steps are generators that *yield* actions (:data:`Steps`); the answer (a
commit's error, a login's verdict) comes back through ``commit_done`` / ``authenticated``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from oxiedge.net.actions import BLOCKED, CHECKPOINT, COMMIT, NEED_DATA, SEND, Authenticate, Close

__all__ = ["BLOCKED", "CHECKPOINT", "COMMIT", "NEED_DATA", "SEND", "Authenticate", "Close", "Steps"]

#: A protocol step: yields actions (see ``oxiedge.net``), ends with the connection.
Steps = Generator[Any, Any, None]

"""Typed protocol errors: every decode or state failure becomes an :class:`AmqpError`.

The reply codes and their classes come from the spec (section 1.2, constants), generated into
``constants.py`` and re-exported by ``spec``: soft errors close a channel, hard errors close
the whole connection.  The codec never lets ``IndexError``, ``struct.error`` or
``UnicodeDecodeError`` escape; it translates them at its boundary.
"""

from __future__ import annotations

from oxiedge.amqp.constants import REPLY_NAMES, SOFT_ERRORS, SYNTAX_ERROR


class AmqpError(Exception):
    """A protocol error with its AMQP reply code.

    ``class_id``/``method_id`` name the method that failed (0 when not known), ``channel`` the
    channel it arrived on.  ``hard`` tells whether the connection (not just the channel) must
    close; it defaults from the reply code's class in the spec but can be forced (e.g. a 406 on
    channel 0 is a connection error).
    """

    def __init__(
        self,
        code: int,
        text: str,
        class_id: int = 0,
        method_id: int = 0,
        *,
        channel: int = 0,
        hard: bool | None = None,
    ) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id
        self.channel = channel
        self.hard = (code not in SOFT_ERRORS) if hard is None else hard

    @property
    def reply_text(self) -> str:
        """The reply text RabbitMQ style: ``"NOT_FOUND - no queue 'x' in vhost '/'"``."""
        name = REPLY_NAMES.get(self.code, "ERROR")
        # A shortstr holds 255 BYTES: cut on the encoded form, never inside a character.
        raw = f"{name} - {self.text}".encode("utf-8", "surrogateescape")[:255]
        return raw.decode("utf-8", "ignore")


def syntax_error(text: str, class_id: int = 0, method_id: int = 0) -> AmqpError:
    """A 502 SYNTAX_ERROR (malformed arguments or field table)."""
    return AmqpError(SYNTAX_ERROR, text, class_id, method_id, hard=True)

"""Typed protocol errors: every decode or state failure becomes an :class:`AmqpError`.

The reply codes are those of the AMQP 0-9-1 spec (section 1.2, constants): soft errors close a
channel, hard errors close the whole connection.  The codec never lets ``IndexError``,
``struct.error`` or ``UnicodeDecodeError`` escape; it translates them at its boundary.
"""

from __future__ import annotations

# Reply codes used by the broker (values from the spec's constants table).
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

#: Soft errors (channel level).  Everything else is a hard (connection) error.
SOFT_ERRORS = frozenset(
    {
        CONTENT_TOO_LARGE,
        NO_ROUTE,
        NO_CONSUMERS,
        ACCESS_REFUSED,
        NOT_FOUND,
        RESOURCE_LOCKED,
        PRECONDITION_FAILED,
    }
)

REPLY_TEXT = {
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}


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
        name = REPLY_TEXT.get(self.code, "ERROR")
        # A shortstr holds 255 BYTES: cut on the encoded form, never inside a character.
        raw = f"{name} - {self.text}".encode("utf-8", "surrogateescape")[:255]
        return raw.decode("utf-8", "ignore")


def syntax_error(text: str, class_id: int = 0, method_id: int = 0) -> AmqpError:
    """A 502 SYNTAX_ERROR (malformed arguments or field table)."""
    return AmqpError(SYNTAX_ERROR, text, class_id, method_id, hard=True)

"""One declaration per option of ``oxiedge serve``.

Theory of operation
-------------------
An option is one field of a settings dataclass, written as ::

    mqtt_queue_limit: int = option(count(), "4096", "messages queued per MQTT session ...",
                                   limits=Bound("MQTT", "messages queued per session", ...))

``option`` returns a ``dataclasses.field`` whose metadata holds the declaration: the kind
(parser and placeholder), the default as an operator writes it, the help text and the row of
docs/limits.md (``limits=None`` for an option that bounds nothing); ``options_of`` makes the
``Option`` of each field from it. Everything else is derived: the flag and the variable from
the field's name unless given (``--mqtt-queue-limit``, ``OXIEDGE_MQTT_QUEUE_LIMIT``), the
field's default by parsing the written default, the ``serve`` flags (``cli/serve.py``) and
their ``--help``. ``option`` is typed to return what the kind parses, so mypy checks the
field's annotation against its parser. ``tests/core/test_options_doc.py`` checks README's
option table, ``systemd/oxiedge.env``, ``oxiedge serve --help`` and docs/limits.md against
the declarations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .kinds import Kind

T = TypeVar("T")

_KEY = "oxiedge.option"


@dataclass(frozen=True, slots=True)
class Bound:
    """The option's row in docs/limits.md: ``| bound | flag / env | default | at the bound |
    counter |`` under the heading ``section``; the flag / env cell is derived."""

    section: str
    bound: str
    at_bound: str
    counter: str
    default: str = ""  # the default cell; empty: the written default
    flag_note: str = ""  # appended to the flag / env cell


@dataclass(frozen=True, slots=True)
class Option:
    """One setting of ``oxiedge serve`` (see the module docstring)."""

    name: str
    flag: str  # "--name" or "--name/--no-name" for a switch
    env: str
    default: str  # as written in the environment, README and ``--help``
    kind: Kind[Any]
    help: str
    limits: Bound | None
    shown_default: str  # ``--help`` and README: the default, or what an empty one means
    metavar: str  # the value's placeholder in ``--help`` and README ("" for a switch)

    @property
    def label(self) -> str:
        """How errors name the option: ``--flag (OXIEDGE_VAR)``."""
        return f"{self.flag.split('/')[0]} ({self.env})"

    def parse(self, raw: Any) -> Any:
        return self.kind.parse(self.label, raw)

    def limits_row(self) -> str | None:
        """The option's row of docs/limits.md (None: it bounds nothing)."""
        row = self.limits
        if row is None:
            return None
        where = f"`{self.flag.split('/')[0]}` / `{self.env}`"
        where += f" {row.flag_note}" if row.flag_note else ""
        cells = (row.bound, where, row.default or self.default, row.at_bound, row.counter)
        return "| " + " | ".join(cells) + " |"

    def help_text(self) -> str:
        """The ``--help`` text: help, variable and default."""
        return f"{self.help} [env: {self.env}; default: {self.shown_default}]"


def option(kind: Kind[T], default: str, help: str, *, limits: Bound | None,
           flag: str = "", env: str = "", metavar: str = "", shown_default: str = "") -> T:
    """Declare a setting as a dataclass field (the module docstring shows how).

    ``flag``/``env`` override the names derived from the field's name; ``metavar`` the
    kind's placeholder; ``shown_default`` says what an empty default means ("the host
    name"). The field's default is ``default`` parsed, made afresh for every instance.
    """
    declared = _Declared(kind, default, help, limits, flag, env, metavar or kind.metavar,
                         shown_default)
    # (A factory: the parsed default may be mutable, and a memory watermark depends on the
    # machine when the settings are made, not when this module is imported.)
    made = dataclasses.field(default_factory=lambda: kind.parse(f"default {default!r}", default),
                             metadata={_KEY: declared})
    return cast(T, made)


@dataclass(frozen=True, slots=True)
class _Declared:
    """What ``option`` was given, kept in the field's metadata."""

    kind: Kind[Any]
    default: str
    help: str
    limits: Bound | None
    flag: str
    env: str
    metavar: str
    shown_default: str


def options_of(cls: type) -> tuple[Option, ...]:
    """The ``Option`` of every field of the dataclass ``cls`` that ``option`` declared."""
    found = []
    for f in dataclasses.fields(cls):
        d = f.metadata.get(_KEY)
        if not isinstance(d, _Declared):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with option()")
        dashed = f.name.replace("_", "-")
        switch = d.kind.shape == "switch"
        flag = d.flag or (f"--{dashed}/--no-{dashed}" if switch else f"--{dashed}")
        shown = d.shown_default or d.default or "none"
        if switch and shown in ("1", "0"):
            shown = "on" if shown == "1" else "off"
        found.append(Option(f.name, flag, d.env or f"OXIEDGE_{f.name.upper()}", d.default,
                            d.kind, d.help, d.limits, shown, d.metavar))
    return tuple(found)

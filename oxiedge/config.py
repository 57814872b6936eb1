"""``oxiedge serve`` configuration: flags win over environment variables, which win over defaults.

Every option is declared once, as a field of one of the settings classes in
``oxiedge/options/`` (its flag, ``OXIEDGE_*`` variable, default, parser, help text and
docs/limits.md row: ``options/declare.py``). ``Config`` is their union and ``OPTIONS`` lists
them in field order; the ``serve`` flags (``cli/serve.py``) are built from it, and
``tests/core/test_options_doc.py`` holds README, ``systemd/oxiedge.env``, ``--help`` and
docs/limits.md to it. Adding an option is one ``option(...)`` field in the right area, plus
the doc rows that test asks for. ``Config.resolve`` is the single place that reads the
environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .options.amqp import AmqpSettings
from .options.declare import Option, options_of
from .options.listeners import ListenerSettings
from .options.mqtt import MqttSettings
from .options.server import ServerSettings

__all__ = ["OPTIONS", "OPTIONS_BY_NAME", "Config", "ConfigError", "Option"]


# A dataclass takes its bases' fields from the last base to the first: listeners come first,
# then MQTT, AMQP and the server-wide settings (the order of ``--help`` and ``OPTIONS``).
@dataclass(frozen=True)
class Config(ServerSettings, AmqpSettings, MqttSettings, ListenerSettings):
    """Resolved settings of one ``oxiedge serve`` run; ``Config()`` has every default."""

    @property
    def db_path(self) -> Path:
        return self.data / "db"

    @property
    def admin_socket(self) -> Path:
        return self.data / "admin.sock"

    @property
    def users_path(self) -> Path:
        return self.password_file if self.password_file is not None else self.data / "passwd"

    @classmethod
    def resolve(cls, flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
        """Build a config from CLI flags (None = not given), then ``env``, then defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for opt in OPTIONS:
            given = flags.get(opt.name)
            if given is not None and given != [] and given != ():
                raw = given
            elif env.get(opt.env, "") != "":
                raw = env[opt.env]  # OXIEDGE_MQTT_INGEST: the routes kind splits at ","
            else:
                raw = opt.default
            values[opt.name] = opt.parse(raw)
        return cls(**values)


OPTIONS: tuple[Option, ...] = options_of(Config)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}

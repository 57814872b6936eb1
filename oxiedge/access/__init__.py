"""Authorisation shared by MQTT and AMQP: rules (``rules.py``), one connection's cached view
(``grants.py``, imported by the brokers), Mosquitto import (``mosquitto.py``).
See docs/permissions.md."""

from __future__ import annotations

from .rules import PermissionError_, PermissionStore, path_for

__all__ = ["PermissionError_", "PermissionStore", "path_for"]

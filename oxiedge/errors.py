"""Errors shared across layers, in a leaf module that imports nothing of the project.

``ConfigError`` lives here (not in ``config.py``) so that the parts that validate their own
settings (ingest routes, uplink definitions) can raise it without importing the whole
configuration layer.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid setting; the message names the option and the bad value."""

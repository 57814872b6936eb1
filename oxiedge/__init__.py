"""oxiedge: an MQTT 3.1.1 + AMQP 0-9-1 broker appliance whose acknowledgements mean "on disk"."""

from __future__ import annotations

__version__ = "0.1.0"

# --- oxiedge conformance overlay (written by tests/conformance/run_suites.py) ---
# Some management tests open their own amqpstorm.Connection(HOST, USERNAME, PASSWORD, ...)
# and so dial port 5672; the oxiedge server under test listens on a free port. This makes
# the port default to it (an explicit port is kept).
import os as _ox_os

import amqpstorm as _ox_amqpstorm

_OxBaseConnection = _ox_amqpstorm.Connection


class _OxConnection(_OxBaseConnection):  # type: ignore[misc, valid-type]
    def __init__(self, hostname: str, username: str, password: str, port: int | None = None,
                 **kwargs: object) -> None:
        if port is None:
            port = int(_ox_os.environ["OXIEDGE_AMQP_PORT"])
        super().__init__(hostname, username, password, port, **kwargs)


_ox_amqpstorm.Connection = _OxConnection

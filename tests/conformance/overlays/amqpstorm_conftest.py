# --- oxiedge conformance overlay (written by tests/conformance/run_suites.py) ---
# amqpstorm's functional framework connects with Connection(HOST, USERNAME, PASSWORD) and so
# always to port 5672; the oxiedge server under test listens on a free port instead.
import os as _ox_os

from amqpstorm import Connection as _OxConnection
from amqpstorm.tests.functional import utility as _ox_utility


def _ox_make_connection(self: _ox_utility.TestFunctionalFramework, **kwargs: object
                        ) -> _OxConnection:
    kwargs.setdefault("timeout", 1)
    kwargs.setdefault("poller", self.poller)
    kwargs.setdefault("port", int(_ox_os.environ["OXIEDGE_AMQP_PORT"]))
    return _OxConnection(_ox_os.environ["AMQP_HOST"], _ox_os.environ["AMQP_USERNAME"],
                         _ox_os.environ["AMQP_PASSWORD"], **kwargs)


_ox_utility.TestFunctionalFramework._make_connection = _ox_make_connection


def _ox_clean(names: list[str], queue: bool = False, exchange: bool = False) -> None:
    """Delete what a test declared over AMQP (the suite does it through the management API)."""
    if not queue and not exchange:
        return
    connection = _ox_make_connection(_ox_utility.TestFunctionalFramework.__new__(
        _ox_utility.TestFunctionalFramework))
    try:
        for name in names:
            # A fresh channel per delete: a failed delete closes its channel.
            for kind in ("queue",) * bool(queue) + ("exchange",) * bool(exchange):
                channel = connection.channel()
                try:
                    getattr(channel, kind).delete(name)
                    channel.close()
                except Exception:  # cleanup is best effort, as upstream's
                    pass
    finally:
        connection.close()


_ox_utility.clean = _ox_clean

"""An MQTT 5 will at the end of its connection, sans-IO: published now, or at the earlier of
its Will Delay Interval and the end of its session (3.1.3.2.2), the delayed ones kept by
``wills.DelayedWills`` (with a record on disk); a reconnect that resumed the session first
sends none (MQTT-3.1.3-9)."""

from __future__ import annotations

import time

from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.packets5 import Will5
from oxiedge.mqtt.session import Session


def send_will5(broker: Broker, will: Will5, client_id: str, mine: Session | None,
               ending: Session | None) -> bool:  # fmt: skip
    """Publish ``will`` of ``client_id`` now or later; True if that staged durable work
    (commit). ``mine``: the connection's session; ``ending``: that session if it was still
    the connection's when it closed (None: taken over)."""
    delay = will.properties.will_delay_interval or 0
    if delay and mine is not None and mine.conn is not None \
            and broker.sessions.get(client_id) is mine:
        # A new connection resumed the session before this one was done closing: a
        # reconnect within the delay, so no will (MQTT-3.1.3-9).
        broker.stats.wills_skipped += 1
        return False
    s = ending
    if s is not None and not s.clean and s.expiry:
        delay = min(delay, s.expiry)  # (the session's end sends it too)
    elif s is None or s.clean:
        delay = 0  # the session ends now
    now = time.time()
    if not delay:
        return broker.publish_will5(will, now)
    return broker.wills.delay(client_id, now + delay, will)  # (its record: commit)

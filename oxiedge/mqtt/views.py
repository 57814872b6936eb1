"""MQTT listings read from the data dir when no server runs (``oxiedge sessions`` /
``oxiedge retained``). Same row shapes as the live admin handlers; what only exists at
run time (connections, drop counters since start) shows as not connected / 0."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from oxiedge.mqtt import persist
from oxiedge.mqtt.persist import RawStore


def register_views(store: Any) -> None:
    """Show the raw MQTT records as the ``_mqtt`` collection of ``store`` (CLI and server)."""
    store.register_view("_mqtt", lambda: persist.view_documents(store))


def offline_views(store: RawStore) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """``{"sessions": fn, "retained": fn}`` reading the store (never writing)."""

    def sessions() -> list[dict[str, Any]]:
        v5 = persist.session_expiries(store)
        wall = time.time()
        rows = [
            {
                "client": client,
                "connected": False,
                "clean": False,
                "subscriptions": len(subs),
                "queued": queued,
                "inflight": rel,
                "dropped": 0,
                # 3.1.1: a server starting now gives it its full expiry (None); MQTT 5: its
                # own deadline, which runs while the broker is down
                "expires_in": _expires_in(v5.get(client), wall),
            }
            for client, subs, queued, rel in persist.session_summaries(store)
        ]
        return sorted(rows, key=lambda r: r["client"])

    def retained() -> list[dict[str, Any]]:
        return [
            {"topic": topic, "qos": qos, "bytes": len(payload)}
            for topic, qos, payload in sorted(persist.load_retained(store))
        ]

    return {"sessions": sessions, "retained": retained}


def _expires_in(expiry: tuple[int, float | None] | None, wall: float) -> int | None:
    """Seconds an MQTT 5 session has left (its client connected when the server stopped:
    its whole interval, which starts at the next start)."""
    if expiry is None:
        return None
    interval, deadline = expiry
    return interval if deadline is None else max(0, round(deadline - wall))

"""The retry pattern (examples/retry_pattern.py) end to end against the real server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "retry_pattern.py"


def test_retry_pattern_example_parks_poison_and_retries_flaky(server: Any) -> None:
    """dlx + ttl (RabbitMQ "delayed retry" practice): work -> DLX -> wait queues with TTL ->
    back to work -> parking lot after N attempts.  Short TTLs stand in for 5 s / 30 s."""
    res = subprocess.run(
        [sys.executable, str(EXAMPLE), "--port", str(server.amqp_port), "--delays", "100,250",
         "--jobs", "2", "--timeout", "30"],
        capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.returncode == 0, res.stdout + res.stderr
    summary = events[-1]
    assert summary["event"] == "summary"
    assert summary["done"] == ["flaky-0", "flaky-1", "ok-0", "ok-1"]
    assert summary["parked"] == ["poison-0", "poison-1"]
    # flaky jobs succeeded on attempt 2 (after one 100 ms wait); poison tried 3 times
    done = {e["job"]: e["attempt"] for e in events if e["event"] == "done"}
    assert done == {"ok-0": 1, "ok-1": 1, "flaky-0": 2, "flaky-1": 2}
    attempts = sorted(e["attempt"] for e in events
                      if e["event"] == "failed" and e["job"] == "poison-0")
    assert attempts == [1, 2, 3]
    parked = [e for e in events if e["event"] == "parked"]
    for p in parked:
        assert p["first_death_queue"] == "work"
        # most recent first: the last rejection, the 250 ms wait, the 100 ms wait
        assert p["x-death"] == [
            {"queue": "work", "reason": "rejected", "count": 3},
            {"queue": "work.wait.250ms", "reason": "expired", "count": 1},
            {"queue": "work.wait.100ms", "reason": "expired", "count": 1},
        ]

"""How the MQTT hostile tests judge the innocent client on a shared machine.

The shared 2-core VM often runs other suites at the same time (load averages of 10 seen):
then any process - the broker, the innocent client - is now and then descheduled for
100-400 ms whatever the broker does. A broker stall (the >10 s of issue 14) shows in every
run; such noise does not. So each abuse runs on a fresh server up to ``ATTEMPTS`` (5) times and
passes once the innocent client was responsive (PINGREQ round trips under 100 ms, see
``PingStats.assert_responsive``); every run must still have no error and no round trip over
one second, and every run's own functional assertions hold.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ServerProcess
from tests.hostile.conftest import PingStats

ATTEMPTS = 5


def responsive_in_some_run(run: Callable[[], PingStats], attempts: int = ATTEMPTS) -> PingStats:
    """Call ``run`` (one full abuse on a fresh server, returning the innocent client's
    figures) until it is responsive; fail with every run's figures otherwise."""
    seen: list[str] = []
    for _ in range(attempts):
        stats = run()
        print(f"innocent client: {stats}")
        assert not stats.errors, f"innocent client failed: {stats}"
        assert stats.max <= 1000.0, f"innocent client stalled: {stats}"
        try:
            stats.assert_responsive(limit_ms=100)
            return stats
        except AssertionError as exc:
            seen.append(str(exc))
    raise AssertionError("not responsive in any run:\n" + "\n".join(seen))



def fresh(hostile_server: Callable[..., ServerProcess],
          tmp_path: Path) -> Callable[..., ServerProcess]:
    """``hostile_server`` with a data dir of its own per call (one per attempt)."""
    runs = itertools.count()

    def start(*args: str, env: dict[str, str] | None = None) -> ServerProcess:
        return hostile_server(*args, env=env, data=tmp_path / f"run{next(runs)}")

    return start

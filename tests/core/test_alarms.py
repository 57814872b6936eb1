from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from oxiedge.alarms import ResourceAlarms
from oxiedge.config import Config, ConfigError
from oxiedge.sizes import parse_memory_watermark, parse_size, total_memory


def test_sizes() -> None:
    assert parse_size("4096") == 4096
    assert parse_size("200MB") == 200 << 20
    assert parse_size("1.5G") == int(1.5 * (1 << 30))
    assert parse_size("64 KiB") == 64 << 10
    with pytest.raises(ValueError):
        parse_size("lots")
    assert parse_memory_watermark("0.5") == total_memory() // 2
    assert parse_memory_watermark("512MB") == 512 << 20
    with pytest.raises(ConfigError, match="--disk-free-limit"):
        Config.resolve({"disk_free_limit": "plenty"}, env={})


async def test_alarm_blocks_and_clears(tmp_path: Path) -> None:
    changes: list[tuple[bool, str]] = []
    alarms = ResourceAlarms(tmp_path, memory_limit=1 << 50, disk_free_limit=1 << 60)
    alarms.subscribe(lambda blocked, reason: changes.append((blocked, reason)))
    alarms.check()  # nobody has an exabyte free: disk alarm
    assert alarms.blocked and alarms.disk_alarm and not alarms.memory_alarm
    assert changes == [(True, "low on disk")]
    resumed = trio.Event()

    async def publisher() -> None:
        await alarms.wait_unblocked()
        resumed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher)
        await trio.sleep(0.05)
        assert not resumed.is_set()  # held while the alarm is on
        alarms.disk_free_limit = 1
        alarms.check()
        with trio.fail_after(5):
            await resumed.wait()
    assert changes[-1] == (False, "")
    alarms.memory_limit = 1  # any process uses more than one byte
    alarms.check()
    assert alarms.memory_alarm and alarms.status()["alarms_fired"] == 2


def test_status_shows_the_alarm(start_server) -> None:  # type: ignore[no-untyped-def]
    srv = start_server("--disk-free-limit", "1000000TB")
    status = json.loads(srv.cli("status", "--json").stdout)
    assert status["alarms"]["disk_alarm"] is True and status["alarms"]["blocked"] is True
    assert srv.line("ALARM disk") is not None

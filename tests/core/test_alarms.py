from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from oxiedge.alarms import ResourceAlarms
from oxiedge.config import Config, ConfigError
from oxiedge.sizes import memory_limit, parse_memory_watermark, parse_size, total_memory


def test_sizes() -> None:
    # kB/MB/GB are powers of ten, KiB/MiB/GiB (and systemd's one-letter M) powers of two,
    # as RabbitMQ reads them (issue 14, item 8).
    assert parse_size("4096") == 4096
    assert parse_size("200MB") == 200_000_000
    assert parse_size("200mb") == 200_000_000
    assert parse_size("1kB") == parse_size("1KB") == 1000
    assert parse_size("200MiB") == 200 << 20
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5G") == int(1.5 * (1 << 30))
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("64 KiB") == 64 << 10
    assert parse_size("2TB") == 2 * 10**12
    for bad in ("lots", "12 XB", "1MiBB", "-1MB", ""):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ConfigError, match="--disk-free-limit"):
        Config.resolve({"disk_free_limit": "plenty"}, env={})


def test_memory_watermark_fraction_absolute_and_floor() -> None:
    assert parse_memory_watermark("0.5", limit=1000 << 20) == 500 << 20
    assert parse_memory_watermark("512MB") == 512_000_000
    assert parse_memory_watermark("512MiB") == 512 << 20
    assert parse_memory_watermark("32MB") == 32_000_000
    # A tiny absolute watermark is an error, not one byte that blocks every publisher.
    for tiny in ("1", "1MB", "31MB", "30MiB", "1000"):
        with pytest.raises(ValueError, match="32 MB minimum"):
            parse_memory_watermark(tiny)
    for bad in ("0", "-0.4", "1.5", "lots"):
        with pytest.raises(ValueError):
            parse_memory_watermark(bad)
    with pytest.raises(ConfigError, match=r"--memory-high-watermark.*32 MB"):
        Config.resolve({"memory_high_watermark": "1"}, env={})
    assert Config.resolve({}, env={"OXIEDGE_MEMORY_HIGH_WATERMARK": "400MB"}
                          ).memory_high_watermark == 400_000_000


def _fake_cgroup(root: Path, rel: str, files: dict[str, str]) -> None:
    directory = root / rel.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text + "\n")


def test_memory_limit_from_cgroup_v2(tmp_path: Path) -> None:
    ram = total_memory()
    proc = "0::/system.slice/oxiedge.service\n"
    # No limit files at all, or "max": the RAM.
    assert memory_limit(tmp_path, proc) == (ram, "RAM")
    _fake_cgroup(tmp_path, "/system.slice/oxiedge.service", {"memory.max": "max"})
    assert memory_limit(tmp_path, proc) == (ram, "RAM")
    # MemoryMax=512M.
    _fake_cgroup(tmp_path, "/system.slice/oxiedge.service", {"memory.max": str(512 << 20)})
    value, source = memory_limit(tmp_path, proc)
    assert value == 512 << 20 and source.endswith("oxiedge.service/memory.max"), source
    # MemoryHigh=384M is lower: it wins.
    _fake_cgroup(tmp_path, "/system.slice/oxiedge.service", {"memory.high": str(384 << 20)})
    value, source = memory_limit(tmp_path, proc)
    assert value == 384 << 20 and source.endswith("memory.high"), source
    # A tighter ancestor (the slice) applies too.
    _fake_cgroup(tmp_path, "/system.slice", {"memory.max": str(256 << 20)})
    value, source = memory_limit(tmp_path, proc)
    assert value == 256 << 20 and source.endswith("system.slice/memory.max"), source
    # A limit above the RAM does not count.
    _fake_cgroup(tmp_path, "/system.slice", {"memory.max": str(ram * 2)})
    _fake_cgroup(tmp_path, "/system.slice/oxiedge.service",
                 {"memory.max": str(ram * 2), "memory.high": "max"})
    assert memory_limit(tmp_path, proc) == (ram, "RAM")


def test_memory_limit_from_cgroup_v1(tmp_path: Path) -> None:
    proc = "4:memory:/docker/abc\n1:cpu:/docker/abc\n0::/\n"
    _fake_cgroup(tmp_path, "/memory/docker/abc",
                 {"memory.limit_in_bytes": str(9223372036854771712)})
    assert memory_limit(tmp_path, proc)[1] == "RAM"
    _fake_cgroup(tmp_path, "/memory/docker/abc", {"memory.limit_in_bytes": str(300 << 20)})
    value, source = memory_limit(tmp_path, proc)
    assert value == 300 << 20 and source.endswith("docker/abc/memory.limit_in_bytes")
    # The fraction is a fraction of that limit.
    limit, _ = memory_limit(tmp_path, proc)
    assert parse_memory_watermark("0.4", limit) == int(0.4 * (300 << 20))


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


def test_memory_alarm_clears_only_five_percent_under_the_watermark(tmp_path: Path) -> None:
    # Hysteresis: at the watermark a trim would take the RSS just under it and the
    # resumed publisher just over again - a connection.blocked/unblocked pair per flap.
    alarms = ResourceAlarms(tmp_path, memory_limit=1 << 50, disk_free_limit=0)
    alarms.check()
    rss = alarms.rss
    alarms.memory_limit = rss - (rss >> 6)  # ~1.5 % under this process's RSS: fires
    alarms.check()
    assert alarms.memory_alarm and alarms.blocked
    alarms.memory_limit = rss + (rss >> 6)  # RSS now ~1.5 % under the watermark: holds
    alarms.check()
    assert alarms.memory_alarm, "cleared inside the 5 % margin"
    alarms.memory_limit = rss + (rss >> 2)  # 20 % under: clears
    alarms.check()
    assert not alarms.memory_alarm and not alarms.blocked
    assert alarms.status()["alarms_fired"] == 1


def test_status_shows_the_alarm(start_server) -> None:  # type: ignore[no-untyped-def]
    srv = start_server("--disk-free-limit", "1000000TB")
    status = json.loads(srv.cli("status", "--json").stdout)
    assert status["alarms"]["disk_alarm"] is True and status["alarms"]["blocked"] is True
    assert srv.line("ALARM disk") is not None

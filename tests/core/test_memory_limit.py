"""The memory watermark of a real server follows its cgroup limit (issue 14, item 6), read
from a fake cgroup mount (``OXIEDGE_CGROUP_ROOT``) laid out like the real one for this
process's own cgroup path (the server is a child, so it is in the same cgroup)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oxiedge.sizes import total_memory


def _fake_mount(root: Path, limit: int) -> None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if hier == "0" and controllers == "":
            d = root / rel.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            (d / "memory.max").write_text(f"{limit}\n")
            (d / "memory.high").write_text("max\n")
        elif "memory" in controllers.split(","):
            d = root / "memory" / rel.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            (d / "memory.limit_in_bytes").write_text(f"{limit + (1 << 20)}\n")


def test_watermark_is_a_fraction_of_the_cgroup_limit(start_server: Any, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    limit = 300 << 20
    assert limit < total_memory()
    _fake_mount(root, limit)
    srv = start_server(env={"OXIEDGE_CGROUP_ROOT": str(root)})
    alarms = json.loads(srv.cli("status", "--json").stdout)["alarms"]
    assert alarms["memory_limit_mb"] == 300.0, alarms
    assert alarms["memory_limit_source"].startswith(f"cgroup {root}"), alarms
    assert alarms["memory_limit_source"].endswith("memory.max"), alarms
    assert alarms["memory_watermark_mb"] == round(0.4 * 300, 1), alarms
    line = srv.line("memory watermark")
    assert line is not None and "300.0 MiB" in line and "WARNING" not in line, line
    # The human table shows the source too.
    assert "memory_limit_source" in srv.cli("status", "--all").stdout
    # An absolute watermark above the limit is taken, with a loud start-up warning.
    srv.stop()
    srv2 = start_server("--memory-high-watermark", "400MB", env={"OXIEDGE_CGROUP_ROOT": str(root)},
                        data=tmp_path / "d2")
    line = srv2.line("memory watermark")
    assert line is not None and "WARNING" in line, line


def test_watermark_from_ram_without_a_cgroup_limit(start_server: Any, tmp_path: Path) -> None:
    srv = start_server(env={"OXIEDGE_CGROUP_ROOT": str(tmp_path / "empty")})
    alarms = json.loads(srv.cli("status", "--json").stdout)["alarms"]
    assert alarms["memory_limit_source"] == "RAM"
    assert abs(alarms["memory_watermark_mb"] - 0.4 * total_memory() / (1 << 20)) < 1


def test_tiny_absolute_watermark_is_refused(start_server: Any) -> None:
    srv = start_server("--memory-high-watermark", "1", expect_ready=False)
    assert srv.proc is not None and srv.proc.wait(30) == 2
    srv.wait_for_line("oxiedge: error:")
    text = " ".join(" ".join(srv.log_lines).split())  # the error line is wrapped
    assert "--memory-high-watermark" in text and "below the 32 MB minimum" in text, text

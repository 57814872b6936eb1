"""bench/arm: RESULTS.md is made from the JSON files the tools really write, in the columns of
bench/README.md's tables.

The input is a folder ``bench/arm/run-on-device.sh --quick`` wrote on this project's x86 VM
(``bench/arm/results/vm-x86_64-quick``, the smoke run, not a Pi), so a tool that changes its
JSON shape without the renderer following fails here rather than on someone's Pi at the end
of a run (bench.backlog's ``results`` list did exactly that once).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bench.arm.results import render

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "bench" / "arm" / "results" / "vm-x86_64-quick"
README = (REPO / "bench" / "README.md").read_text()


def _columns(header: str) -> list[str]:
    """A Markdown table header's column names, with figures (100k, 1,000) as N."""
    cells = [c.strip() for c in header.strip().strip("|").split("|")]
    return [re.sub(r"[\d][\d,.]*k?", "N", c) for c in cells]


def _header_after(text: str, heading: str) -> str:
    """The first table header line under ``heading`` in ``text``."""
    rest = text[text.index(heading):]
    return next(line for line in rest.splitlines() if line.startswith("| "))


def test_smoke_run_renders_every_section() -> None:
    out = render(SMOKE)
    assert "Not an ARM device (x86_64)" in out
    for heading in ("## Store", "## Suite (medians)", "Ratios, same run:",
                    "## Memory and start-up", "## Backlog on disk"):
        assert heading in out, heading
    # The committed RESULTS.md is what the renderer makes of the committed JSON.
    assert out == (SMOKE / "RESULTS.md").read_text()


def test_tables_have_the_columns_of_bench_readme() -> None:
    out = render(SMOKE)
    store = _header_after(out, "## Store")
    assert store in README  # the same header, word for word
    memory = _header_after(out, "## Memory and start-up")
    assert _columns(memory) == _columns(_header_after(README, "### Memory and start-up"))
    suite = _header_after(out, "## Suite (medians)")
    assert _columns(suite) == _columns(_header_after(README, "| scenario             | unit"))
    # Backlog: bench/README.md's columns of the backlog tables, in their order.
    backlog = _columns(_header_after(out, "## Backlog on disk"))
    readme_backlog = set()
    for line in README.splitlines():
        if line.startswith("|") and "RSS idle / full / after SIGKILL" in line:
            readme_backlog.update(_columns(line))
    assert set(backlog) <= readme_backlog, set(backlog) - readme_backlog


def test_backlog_rows_from_every_run_of_the_tool(tmp_path: Path) -> None:
    """bench.backlog writes one result per tree and round under ``results``: one row each."""
    data = json.loads((SMOKE / "backlog.json").read_text())
    data["results"] = data["results"] * 2
    (tmp_path / "backlog.json").write_text(json.dumps(data))
    table = render(tmp_path).split("## Backlog on disk")[1]
    assert len([ln for ln in table.splitlines() if ln.startswith("| 20,000 |")]) == 2


def test_command_line_writes_to_stdout() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.arm.results", str(SMOKE)],
                          capture_output=True, text=True, timeout=60, check=True, cwd=REPO)
    assert proc.stdout == (SMOKE / "RESULTS.md").read_text()


def test_a_board_that_is_not_a_pi_says_so(tmp_path: Path) -> None:
    device = json.loads((SMOKE / "device.json").read_text())
    device.update(arch="aarch64", model="linux,dummy-virt", compatible="linux,dummy-virt")
    (tmp_path / "device.json").write_text(json.dumps(device))
    out = render(tmp_path)
    assert "Not a Raspberry Pi (linux,dummy-virt)" in out
    assert "A QEMU virtual machine" in out
    device.update(model="Raspberry Pi 5 Model B Rev 1.0", compatible="raspberrypi,5-model-b")
    (tmp_path / "device.json").write_text(json.dumps(device))
    assert "Not a" not in render(tmp_path)

"""tools/instr.py: the callgrind dump parser on a hand-written dump, and one real run."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _instr() -> object:
    spec = importlib.util.spec_from_file_location("instr", REPO / "tools" / "instr.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Name compression (``fn=(1) name`` once, ``fn=(1)`` later), a call with its inclusive
# cost line (not the caller's own cost), and costs with relative line numbers.
DUMP = """\
version: 1
events: Ir
fn=(1) main
10 100
+1 50
cfn=(2) PyObject_Malloc
calls=3 0
11 900
fn=(2)
0 300
fn=(3) malloc
0 40
fn=(1)
-2 7
totals: 497
"""


def test_parse_counts_own_cost_and_calls(tmp_path: Path) -> None:
    dump = tmp_path / "cg.out.1"
    dump.write_text(DUMP)
    total, own, calls = _instr().parse(dump)  # type: ignore[attr-defined]
    assert own == {"main": 157, "PyObject_Malloc": 300, "malloc": 40}
    assert calls == {"PyObject_Malloc": 3}
    assert total == 497


@pytest.mark.timeout(300)
def test_counts_a_real_scenario() -> None:
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        pytest.skip("valgrind is not installed")
    out = subprocess.run(
        [sys.executable, "tools/instr.py", "-s", "mqtt-qos1-seq", "--count", "200",
         "--warm", "50", "--top", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr
    line = out.stdout.splitlines()[0]
    assert line.startswith("mqtt-qos1-seq: 200 messages; per message: "), out.stdout
    instructions = int(line.split("per message: ")[1].split(" instructions")[0].replace(",", ""))
    assert 5_000 < instructions < 1_000_000  # a Python broker's round trip, not 0

"""Shell completion offers the running server's names (queues, MQTT clients, ...) and
nothing, quickly, without one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ServerProcess, clean_env


def _complete(line: str, data: Path) -> str:
    script = Path(sys.executable).parent / "oxiedge"
    if not script.exists():
        script = Path(shutil.which("oxiedge") or "oxiedge")
        if not script.exists():
            pytest.skip("the oxiedge console script is not installed")
    env = clean_env()
    env.update(_OXIEDGE_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS=line,
               OXIEDGE_DATA=str(data))
    res = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return res.stdout


def test_names_come_from_the_server(server: ServerProcess) -> None:
    for name in ("jobs", "joy", "other"):
        server.cli("queue", "declare", name)
    out = _complete("oxiedge queue delete jo", server.data)
    assert '"jobs"' in out and '"joy"' in out and "other" not in out
    out = _complete("oxiedge binding add amq.t", server.data)
    assert '"amq.topic"' in out
    server.stop()
    assert "jobs" not in _complete("oxiedge queue purge ", server.data)

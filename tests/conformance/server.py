"""``oxiedge serve`` as the conformance runners start it: a subprocess on free loopback
ports, its log mirrored to a file, ready once it printed ``oxiedge ready``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
READY_TIMEOUT_S = 60


def clean_env() -> dict[str, str]:
    """The caller's environment without ``OXIEDGE_*`` settings, output unbuffered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXIEDGE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ServeProcess:
    """``oxiedge serve --data DATA --bind 127.0.0.1 ARGS``; ``port`` is the one the
    ``listen`` pattern's second group found in the start-up lines."""

    def __init__(self, data: Path, log_path: Path, args: list[str], listen: re.Pattern[str]
                 ) -> None:  # fmt: skip
        self.data, self.log_path, self.args, self.listen = data, log_path, args, listen
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oxiedge", "serve", "--data", str(self.data),
             "--bind", "127.0.0.1", "--http-port", "off", *self.args],
            cwd=REPO, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        with self._cond:
            while not any(ln.startswith("oxiedge ready") for ln in self.lines):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("oxiedge did not become ready:\n" + "\n".join(self.lines))
                self._cond.wait(0.5)
            for ln in self.lines:
                m = self.listen.search(ln)
                if m:
                    self.port = int(m.group(2))

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("w", encoding="utf-8") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                with self._cond:
                    self.lines.append(line.rstrip("\n"))
                    self._cond.notify_all()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

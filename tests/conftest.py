"""Shared fixtures: a real ``oxiedge serve`` subprocess on free loopback ports.

``start_server(data_dir, *args, env=...)`` spawns the server, waits for ``oxiedge ready`` and
parses the ports it logged. ``.kill()`` is SIGKILL (the durability tests' power cut),
``.stop()`` is SIGTERM, ``.restart()`` starts again on the same data dir with the same args.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline in any property test: it is a timing assertion, and a loaded CI
# box (or xdist's four workers on two cores) trips it with no fault in the code.
settings.register_profile("oxiedge", deadline=None)
settings.load_profile("oxiedge")

READY = "oxiedge ready"
_LISTEN = re.compile(r"^(MQTT|AMQP|HTTP) listening on (\S+):(\d+)")
_TLS_LISTEN = re.compile(r"^(MQTT|AMQP|HTTP) TLS listening on (\S+):(\d+)")


def clean_env() -> dict[str, str]:
    """This environment without ``OXIEDGE_*``: a test passes its settings explicitly."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OXIEDGE_")}


def run_cli(data: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``oxiedge ARGS --data DATA`` (the CLI a user types) on a wide terminal."""
    env = clean_env()
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "oxiedge", *args, "--data", str(data)],
                          capture_output=True, text=True, input=input, env=env, timeout=60)


class ServerProcess:
    """One real ``oxiedge serve`` process and its log."""

    def __init__(self, data: Path, args: tuple[str, ...], env: dict[str, str] | None) -> None:
        self.data = Path(data)
        self.args = args
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self.mqtt_port: int | None = None
        self.amqp_port: int | None = None
        self.mqtt_tls_port: int | None = None  # "MQTT TLS listening on" (--mqtt-tls-port)
        self.amqp_tls_port: int | None = None
        self.http_port: int | None = None  # off unless a test passes --http-port 0
        self.http_tls_port: int | None = None
        self._cond = threading.Condition()
        self._eof = True  # the pump has read the process's output to its end

    # ----------------------------------------------------------------- control
    def start(self, timeout: float = 30.0, expect_ready: bool = True) -> ServerProcess:
        cmd = [sys.executable, "-m", "oxiedge", "serve", "--data", str(self.data),
               "--bind", "127.0.0.1", "--mqtt-port", "0", "--amqp-port", "0",
               "--http-port", "off", *self.args]
        env = clean_env()
        env.update(self.env or {})
        env["PYTHONUNBUFFERED"] = "1"
        self.log_lines = []
        self.mqtt_port = self.amqp_port = None
        self.mqtt_tls_port = self.amqp_tls_port = None
        self.http_port = self.http_tls_port = None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self._eof = False
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if expect_ready:
            self.wait_for_line(READY, timeout)
        return self

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            with self._cond:
                self.log_lines.append(line)
                m = _LISTEN.match(line)
                if m:
                    setattr(self, f"{m.group(1).lower()}_port", int(m.group(3)))
                t = _TLS_LISTEN.match(line)
                if t:
                    setattr(self, f"{t.group(1).lower()}_tls_port", int(t.group(3)))
                self._cond.notify_all()
        with self._cond:
            self._eof = self._eof or proc is self.proc  # not a restarted server's
            self._cond.notify_all()

    def wait_for_line(self, prefix: str, timeout: float = 30.0) -> str:
        """Wait until a log line starts with ``prefix``; fail if the process exits first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.log_lines:
                    if line.startswith(prefix):
                        return line
                if self.proc is not None and self.proc.poll() is not None:
                    self._cond.wait_for(lambda: self._eof, 5)  # its last lines first
                    if not any(line.startswith(prefix) for line in self.log_lines):
                        raise AssertionError(
                            f"server exited ({self.proc.returncode}) before {prefix!r}:\n"
                            + "\n".join(self.log_lines))
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {prefix!r} within {timeout}s:\n"
                                         + "\n".join(self.log_lines))
                self._cond.wait(min(left, 0.5))

    def line(self, prefix: str) -> str | None:
        with self._cond:
            return next((ln for ln in self.log_lines if ln.startswith(prefix)), None)

    def kill(self) -> None:
        """SIGKILL: the power cut of the durability tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._drain()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(f"server did not stop within {timeout}s on SIGTERM") from None
        self._drain()
        return int(self.proc.returncode)

    def _drain(self) -> None:
        """Once the process is gone: let the pump read its last lines into ``log_lines``."""
        with self._cond:
            self._cond.wait_for(lambda: self._eof, 5)

    def restart(self, timeout: float = 30.0) -> ServerProcess:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        return self.start(timeout)

    @property
    def admin_socket(self) -> Path:
        return self.data / "admin.sock"

    def cli(self, *args: str, input: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        """``run_cli`` on this server's data dir; ``check`` fails the test on a non-zero exit."""
        res = run_cli(self.data, *args, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"oxiedge {' '.join(args)} failed ({res.returncode}):\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[object]:
    """Factory: ``start_server(*args, data=None, env=None)`` → a ready ``ServerProcess``."""
    started: list[ServerProcess] = []

    def start(*args: str, data: Path | None = None, env: dict[str, str] | None = None,
              expect_ready: bool = True) -> ServerProcess:
        srv = ServerProcess(data or tmp_path / "data", args, env)
        started.append(srv)
        return srv.start(expect_ready=expect_ready)

    yield start
    for srv in started:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(10)


@pytest.fixture
def server(start_server: object) -> ServerProcess:
    """A ready server with MQTT and AMQP on free ports and a fresh data dir."""
    return start_server()  # type: ignore[operator]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``small_tmpfs("3m")``: a freshly mounted tmpfs of that size (a disk that really fills
    up); skips without root; unmounted (lazily) at teardown."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        path = tmp_path / f"tmpfs{len(mounted)}"
        path.mkdir()
        if os.geteuid() != 0 or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                capture_output=True).returncode != 0:
            pytest.skip("needs root to mount a small tmpfs")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)

"""Interop with the stock mosquitto_pub / mosquitto_sub clients (skipped if not installed)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable

import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("mosquitto_pub", "mosquitto_sub", "stdbuf")),
    reason="mosquitto-clients not installed (apt-get install mosquitto-clients)",
)
TIMEOUT = 20


def pub(port: int, *args: str) -> None:
    res = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert res.returncode == 0, res.stderr


class Sub:
    """A background mosquitto_sub; ``start`` returns once its SUBACK arrived (-d output)."""

    def __init__(self, port: int, *args: str) -> None:
        self.proc = subprocess.Popen(
            ["stdbuf", "-oL", "mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-d", "-v",
             *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.subacked = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.subacked.wait(TIMEOUT):
            self.proc.kill()
            raise AssertionError("mosquitto_sub got no SUBACK:\n" + "\n".join(self.lines))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "received SUBACK" in line:
                self.subacked.set()

    def messages(self) -> list[str]:
        """After exit: the ``topic payload`` lines (-v), debug lines removed."""
        self.proc.wait(TIMEOUT)
        self.reader.join(TIMEOUT)  # the pipe's last lines may still be unread when it exits
        debug = ("Client ", "Subscribed ")
        return [ln for ln in self.lines if ln.strip() and not ln.startswith(debug)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def test_mosquitto_qos_levels_and_wildcards(shared_mqtt: ServerProcess) -> None:
    port = shared_mqtt.mqtt_port
    assert port is not None
    sub = Sub(port, "-t", "m/+/v", "-t", "m/#", "-q", "2", "-C", "3")
    try:
        for qos in ("0", "1", "2"):
            pub(port, "-t", f"m/{qos}/v", "-m", f"q{qos}", "-q", qos)
        assert sorted(sub.messages()) == ["m/0/v q0", "m/1/v q1", "m/2/v q2"]
    finally:
        sub.kill()


def test_mosquitto_retained(shared_mqtt: ServerProcess) -> None:
    port = shared_mqtt.mqtt_port
    assert port is not None
    pub(port, "-t", "mr/a", "-m", "old", "-r", "-q", "1")
    pub(port, "-t", "mr/a", "-m", "new", "-r", "-q", "1")
    pub(port, "-t", "mr/b", "-m", "gone", "-r", "-q", "1")
    pub(port, "-t", "mr/b", "-n", "-r", "-q", "1")  # -n: empty payload clears
    res = subprocess.run(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", "mr/#", "-v",
         "--retained-only", "-W", "2"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert res.stdout.splitlines() == ["mr/a new"]


def test_mosquitto_persistent_session(shared_mqtt: ServerProcess) -> None:
    port = shared_mqtt.mqtt_port
    assert port is not None
    first = Sub(port, "-i", "mosq-durable", "-c", "-q", "1", "-t", "mp/#", "-C", "1")
    pub(port, "-t", "mp/x", "-m", "online", "-q", "1")
    assert first.messages() == ["mp/x online"]
    for i in range(3):  # the subscriber is offline now: queued for it
        pub(port, "-t", "mp/x", "-m", f"offline{i}", "-q", "1")
    res = subprocess.run(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-i", "mosq-durable", "-c",
         "-q", "1", "-t", "mp/#", "-v", "-C", "3", "-W", "10"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert res.stdout.splitlines() == [f"mp/x offline{i}" for i in range(3)]


def test_mosquitto_auth(start_mqtt: Callable[..., ServerProcess], tmp_path: object) -> None:
    import pathlib

    data = pathlib.Path(str(tmp_path)) / "mauth"
    probe = ServerProcess(data, (), None)
    probe.cli("user", "add", "carol", "--password-stdin", input="pw-carol\n")
    srv = start_mqtt(data=data)
    port = srv.mqtt_port
    assert port is not None
    pub(port, "-t", "a/1", "-m", "x", "-u", "carol", "-P", "pw-carol")
    res = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", "a/1", "-m", "x",
         "-u", "carol", "-P", "wrong"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert res.returncode != 0
    assert "not authorised" in res.stderr.lower() or "bad user" in res.stderr.lower(), res.stderr

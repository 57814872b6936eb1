"""A real Mosquitto upstream for the uplink tests (Debian's ``mosquitto`` on loopback).

``Mosquitto.start(workdir, tls=...)`` writes a config into ``workdir`` and starts the
broker on free loopback ports, with persistence ON: persistent sessions (clean_session=0)
and their queued QoS 1 messages are saved to ``workdir/data/mosquitto.db`` when the broker
stops (SIGTERM) and loaded again by ``start_again()``, which reuses the same ports and
files. With ``tls=True`` a second listener serves TLS with a ``trustme`` test CA (server
certificate for ``localhost`` and ``127.0.0.1``); ``ca_file`` is that CA's PEM.

``users={"name": "password"}`` switches the broker to password authentication
(``allow_anonymous false``) - how the tests reach the CONNACK "bad user name or password"
path for real.

Helpers for assertions use paho-mqtt: ``subscriber()`` (a persistent-session QoS 1
subscriber collecting messages) and ``publish()``. Everything is bounded by timeouts so a
broken broker fails a test instead of hanging it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from .upstream_kit import free_port, write_test_ca

MOSQUITTO = "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = "/usr/bin/mosquitto_passwd"
#: Large so no test hits Mosquitto's per-client offline queue limit (default 1000).
MAX_QUEUED = 100_000


def _executable() -> str:
    exe = MOSQUITTO if os.path.exists(MOSQUITTO) else shutil.which("mosquitto")
    if not exe:
        pytest.skip("mosquitto is not installed (Debian package 'mosquitto': "
                    f"{MOSQUITTO} not found)")
    return exe


def _relisten(line: str, port: int, new_port: int, tls_port: int | None,
              new_tls_port: int | None) -> str:
    if line == f"listener {port} 127.0.0.1":
        return f"listener {new_port} 127.0.0.1"
    if tls_port is not None and line == f"listener {tls_port} 127.0.0.1":
        return f"listener {new_tls_port} 127.0.0.1"
    return line


#: Brokers started and not yet stopped: stopped at interpreter exit if a test forgot.
_RUNNING: weakref.WeakSet[Mosquitto] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for node in list(_RUNNING):
        node.stop()


class Mosquitto:
    """One Mosquitto process with its config, certificates, log and persistence in a
    directory. Stopped by its own pid only."""

    def __init__(self, workdir: Path, exe: str, port: int, tls_port: int | None,
                 ca_file: str | None, users: dict[str, str] | None) -> None:
        self.workdir = workdir
        self.exe = exe
        self.port = port
        self.tls_port = tls_port
        self.ca_file = ca_file
        self.users = dict(users or {})
        self.conf = workdir / "mosquitto.conf"
        self.log = workdir / "mosquitto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def start(cls, workdir: Path, tls: bool = False,
              users: dict[str, str] | None = None) -> Mosquitto:
        """Configure and start a broker in ``workdir`` (created if missing)."""
        exe = _executable()
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "data").mkdir(exist_ok=True)
        port = free_port()
        tls_port = free_port() if tls else None
        lines = [
            # When started as root Mosquitto 2 drops to user "mosquitto", which could not
            # write this (root-owned) directory; ignored when not started as root.
            "user root",
            "per_listener_settings false",
            f"listener {port} 127.0.0.1",
            "persistence true",
            f"persistence_location {workdir / 'data'}/",
            "persistence_file mosquitto.db",
            f"max_queued_messages {MAX_QUEUED}",
            "max_inflight_messages 100",
            f"log_dest file {workdir / 'mosquitto.log'}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "log_timestamp true",
        ]
        if users:
            pwfile = workdir / "passwd"
            pwfile.write_text("")
            for name, password in users.items():
                subprocess.run([MOSQUITTO_PASSWD, "-b", str(pwfile), name, password],
                               check=True, capture_output=True, timeout=10)
            lines += ["allow_anonymous false", f"password_file {pwfile}"]
        else:
            lines.append("allow_anonymous true")
        ca_file = None
        if tls_port is not None:
            ca_path, cert_path, key_path = write_test_ca(workdir)
            ca_file = str(ca_path)
            lines += [f"listener {tls_port} 127.0.0.1", f"cafile {ca_path}",
                      f"certfile {cert_path}", f"keyfile {key_path}"]
        node = cls(workdir, exe, port, tls_port, ca_file, users)
        for attempt in range(3):
            (workdir / "mosquitto.conf").write_text("\n".join(lines) + "\n")
            try:
                node._spawn()
                break
            except RuntimeError as exc:
                # Another process took a "free" port between probing and binding.
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
                node.port = free_port()
                node.tls_port = free_port() if tls else None
                lines = [_relisten(line, port, node.port, tls_port, node.tls_port)
                         for line in lines]
                port, tls_port = node.port, node.tls_port
        _RUNNING.add(node)
        return node

    def _spawn(self, timeout: float = 15.0) -> None:
        """Start the process and wait until it logs that it runs (listeners are open)."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        self.proc = subprocess.Popen([self.exe, "-c", str(self.conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            text = self._log_since(offset)
            if " running" in text:
                return
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr \
                    else ""
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: "
                                   f"{err.strip()} {text.strip()[-500:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"mosquitto not running after {timeout}s: {text[-500:]}")
            time.sleep(0.05)  # polling the log file: there is no event to await here

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop the broker (SIGTERM: it saves its persistence file), SIGKILL if it does not
        exit within 10 s. Idempotent."""
        proc, self.proc = self.proc, None
        _RUNNING.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)  # in case a test paused it
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5)
        if proc.stderr is not None:
            proc.stderr.close()

    def start_again(self) -> None:
        """Start the stopped broker again: same ports, config and persistence file."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("mosquitto is still running")
        self._spawn()
        _RUNNING.add(self)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """The broker's whole log (for assertion messages)."""
        return self._log_since(0)

    # ---------------------------------------------------------------- clients
    def url(self, tls: bool = False, user: str | None = None,
            password: str | None = None) -> str:
        """``mqtt://127.0.0.1:PORT`` or ``mqtts://localhost:TLS_PORT`` (optionally with
        credentials)."""
        cred = ""
        if user is not None:
            cred = user + (f":{password}" if password is not None else "") + "@"
        if tls:
            if self.tls_port is None:
                raise ValueError("this Mosquitto was started without TLS")
            return f"mqtts://{cred}localhost:{self.tls_port}"
        return f"mqtt://{cred}127.0.0.1:{self.port}"

    def _client(self, client_id: str, clean_session: bool) -> Any:
        import paho.mqtt.client as mqtt

        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=clean_session, protocol=mqtt.MQTTv311)
        if self.users:
            name, password = next(iter(self.users.items()))
            client.username_pw_set(name, password)
        return client

    def subscriber(self, topic_filter: str, client_id: str,
                   timeout: float = 10.0) -> Subscriber:
        """A connected paho subscriber (persistent session, QoS 1) collecting messages;
        re-creating one with the same ``client_id`` resumes its session."""
        return Subscriber(self._client(client_id, False), self.port, topic_filter, timeout)

    def publish(self, topic: str, payload: bytes, qos: int = 1,
                timeout: float = 10.0) -> None:
        """Publish one message and wait for the broker's acknowledgement (QoS > 0)."""
        client = self._client(f"pub-{os.getpid()}-{time.monotonic_ns()}", True)
        try:
            client.connect("127.0.0.1", self.port, keepalive=30)
            client.loop_start()
            info = client.publish(topic, payload, qos=qos)
            info.wait_for_publish(timeout)
            if not info.is_published():
                raise TimeoutError(f"publish to {topic!r} not acknowledged in {timeout}s")
            client.disconnect()
        finally:
            client.loop_stop()


class Subscriber:
    """A paho client subscribed at QoS 1; ``messages`` lists ``(topic, payload)``."""

    def __init__(self, client: Any, port: int, topic_filter: str, timeout: float) -> None:
        self.client = client
        self.messages: list[tuple[str, bytes]] = []
        self._cond = threading.Condition()
        self._subscribed = threading.Event()
        self.session_present: bool | None = None
        client.on_message = self._on_message
        client.on_subscribe = lambda *args: self._subscribed.set()
        client.on_connect = self._on_connect
        client.connect("127.0.0.1", port, keepalive=30)
        client.loop_start()
        client.subscribe(topic_filter, qos=1)
        if not self._subscribed.wait(timeout):
            self.close()
            raise TimeoutError(f"no SUBACK for {topic_filter!r} in {timeout}s")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any = None) -> None:
        self.session_present = bool(getattr(flags, "session_present", False))

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._cond:
            self.messages.append((msg.topic, bytes(msg.payload)))
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, bytes]]:
        """Wait until at least ``count`` messages arrived; return a copy of them all.
        Raises ``TimeoutError`` naming how many came."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.messages) >= count, timeout):
                raise TimeoutError(f"{len(self.messages)} of {count} messages in {timeout}s")
            return list(self.messages)

    def close(self) -> None:
        """Disconnect (the session and its subscription stay on the broker)."""
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self.client.loop_stop()

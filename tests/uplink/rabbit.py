"""A real RabbitMQ node for the uplink tests, from Debian's ``rabbitmq-server`` package.

Every node gets its own node name, free loopback ports (AMQP, AMQPS, Erlang distribution
and a private ``epmd``), its own config, cookie (``HOME``) and mnesia directory inside the
given ``workdir``. ``stop()`` ends the node's own process group and the epmd it started, so
nothing is left running; ``start_again()`` reuses the same directory, ports and node name,
so durable (quorum) queues and the messages in them survive the restart.

The TLS listener uses a throw-away CA made with ``trustme`` (server certificate for
``localhost`` and ``127.0.0.1``); ``ca_file`` is that CA's PEM for clients to trust.
Helpers that talk to the node (``declare_sink``, ``drain``, ``publish``) use pika's
blocking client and are meant for the test thread, not for trio code.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .upstream_kit import free_port, write_test_ca

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
EPMD = "epmd"
START_TIMEOUT = 90.0      # a cold first boot on a slow 2-core board takes ~10-20 s
STOP_TIMEOUT = 30.0

_counter = itertools.count(1)
_running: set[Rabbit] = set()


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Rabbit:
    """One RabbitMQ node on loopback; see the module docstring."""

    def __init__(self, workdir: Path, tls: bool) -> None:
        self.workdir = workdir
        self.node = f"oxt{os.getpid()}n{next(_counter)}@localhost"
        self.port = free_port()
        self.tls_port: int | None = free_port() if tls else None
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.ca_file: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._epmd: subprocess.Popen[bytes] | None = None
        self._log = workdir / "stdout.log"

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def start(cls, workdir: Path, tls: bool = False) -> Rabbit:
        """Configure and boot a node in ``workdir``; returns once AMQP clients can log in.

        Skips the calling test when RabbitMQ is not installed."""
        if not SERVER.exists():
            pytest.skip(f"RabbitMQ is not installed ({SERVER} missing; apt-get install "
                        "rabbitmq-server)")
        workdir.mkdir(parents=True, exist_ok=True)
        node = cls(workdir, tls)
        node._configure()
        node._boot()
        return node

    def start_again(self) -> None:
        """Boot the same node (same directory, ports and name) after ``stop()``; nothing
        if it is running."""
        if self._proc is None:
            self._boot()

    def stop(self) -> None:
        """Stop the node cleanly (SIGTERM → graceful shutdown; SIGKILL after a bound)
        and the epmd started for it. The data directory stays. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
            # The wrapper shell may exit before beam.smp: make sure the group is gone.
            self._signal_group(proc, signal.SIGKILL)
        epmd, self._epmd = self._epmd, None
        if epmd is not None:
            epmd.terminate()
            try:
                epmd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                epmd.kill()
                epmd.wait(timeout=5)
        _running.discard(self)

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
        # The node was started in its own session (pgid == pid): beam.smp, erl_child_setup
        # and inet_gethost are in that group; the wrapper shell forwards no signals.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def _configure(self) -> None:
        w = self.workdir
        conf = [
            f"listeners.tcp.1 = 127.0.0.1:{self.port}",
            "loopback_users = none",
            # A nearly full tmp disk must not make the node block publishers mid-test.
            "disk_free_limit.absolute = 1MB",
            "log.console = false",
            # Queue/connection stats (rabbitmqctl list_queues) every 0.5 s, not 5 s.
            "collect_statistics_interval = 500",
            "log.file.level = info",
        ]
        if self.tls_port is not None:
            ca_path, cert_path, key_path = write_test_ca(w)
            self.ca_file = str(ca_path)
            conf += [
                # Loopback only (the "default" listener would bind every interface).
                f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}",
                f"ssl_options.cacertfile = {ca_path}",
                f"ssl_options.certfile = {cert_path}",
                f"ssl_options.keyfile = {key_path}",
                "ssl_options.verify = verify_none",
                "ssl_options.fail_if_no_peer_cert = false",
            ]
        (w / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
        # Quorum queues report their counters (list_queues) every tick: 0.5 s, not 5 s.
        (w / "advanced.config").write_text("[{rabbit, [{quorum_tick_interval, 500}]}].\n")
        (w / "enabled_plugins").write_text("[].\n")
        (w / "home").mkdir(exist_ok=True)

    def _env(self) -> dict[str, str]:
        w = self.workdir
        return dict(
            os.environ,
            HOME=str(w / "home"),  # the Erlang cookie lives here
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_CONFIG_FILE=str(w / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(w / "advanced.config"),
            RABBITMQ_MNESIA_BASE=str(w / "mnesia"),
            RABBITMQ_LOG_BASE=str(w / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(w / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(w / "rabbit.pid"),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            # A crashing node writes erl_crash.dump into its cwd (the checkout) otherwise.
            ERL_CRASH_DUMP=str(w / "erl_crash.dump"),
            # Distribution on loopback only; no busy-waiting schedulers on a 2-core box.
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                "-kernel inet_dist_use_interface {127,0,0,1} "
                "+sbwt none +sbwtdcpu none +sbwtdio none"),
        )

    def _boot(self) -> None:
        env = self._env()
        # A private epmd on its own port: stopping it cannot disturb another node.
        self._epmd = subprocess.Popen(
            [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        log = open(self._log, "ab")  # noqa: SIM115 - closed below, the child keeps its copy
        try:
            self._proc = subprocess.Popen([str(SERVER)], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        finally:
            log.close()
        _running.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        ports = [self.port] + ([self.tls_port] if self.tls_port else [])
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"RabbitMQ exited with {self._proc.returncode}:\n"
                                   + self.log_tail())
            if all(_port_open(p) for p in ports):
                try:
                    self.connection(timeout=5).close()
                    return
                except Exception as exc:  # not ready yet (booting, boot steps running)
                    last = exc
            time.sleep(0.2)
        raise RuntimeError(f"RabbitMQ not ready after {START_TIMEOUT:.0f} s ({last!r}):\n"
                           + self.log_tail())

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the node's stdout and log file (for failure messages)."""
        out = []
        for path in [self._log, *sorted((self.workdir / "log").glob("*.log"))]:
            with contextlib.suppress(OSError):
                out += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl ARGS`` against this node; returns its stdout (raises on error).
        E.g. ``ctl("set_vm_memory_high_watermark", "0")`` raises a memory alarm, which
        blocks publishers (Connection.Blocked) until the watermark is raised again."""
        proc = subprocess.run([str(CTL), "-n", self.node, *args], env=self._env(),
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: "
                               f"{proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    # ------------------------------------------------------------------ clients
    def url(self, tls: bool = False, user: str = "guest", password: str = "guest") -> str:
        """The node's AMQP URL (``amqps://...@localhost`` matches the TLS certificate)."""
        if tls:
            if self.tls_port is None:
                raise RuntimeError("this node was started without TLS")
            return f"amqps://{user}:{password}@localhost:{self.tls_port}/"
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/"

    def connection(self, timeout: float = 10.0) -> Any:
        """A pika ``BlockingConnection`` to the node as guest (the caller closes it)."""
        import pika

        params = pika.ConnectionParameters(
            "127.0.0.1", self.port, credentials=pika.PlainCredentials("guest", "guest"),
            socket_timeout=timeout, blocked_connection_timeout=timeout,
            connection_attempts=1)
        return pika.BlockingConnection(params)

    def declare_sink(self, queue: str, binding: str = "#", exchange: str = "amq.topic",
                     arguments: dict[str, Any] | None = None) -> None:
        """A durable quorum ``queue`` bound to ``exchange`` with ``binding``; extra queue
        ``arguments`` (e.g. ``x-max-length``) are added to ``x-queue-type``."""
        conn = self.connection()
        try:
            ch = conn.channel()
            ch.queue_declare(queue, durable=True,
                             arguments={"x-queue-type": "quorum", **(arguments or {})})
            ch.queue_bind(queue, exchange, routing_key=binding)
        finally:
            conn.close()

    def drain(self, queue: str, timeout: float = 5.0, expect: int = 0,
              ) -> list[tuple[str, bytes, dict[str, Any]]]:
        """Get and ack every message in ``queue`` now: ``(routing_key, body, info)``.

        ``info`` holds the basic properties by pika's names (``message_id``,
        ``delivery_mode``, ``headers``, ...) and, merged in, the message headers themselves
        (``info["x-oxiedge-topic"]``) plus ``redelivered``. With ``expect`` it keeps polling
        until that many arrived or ``timeout`` passed (then returns what it has)."""
        deadline = time.monotonic() + timeout
        out: list[tuple[str, bytes, dict[str, Any]]] = []
        conn = self.connection(timeout)
        try:
            ch = conn.channel()
            while True:
                method, props, body = ch.basic_get(queue, auto_ack=False)
                if method is None:
                    if len(out) >= expect or time.monotonic() >= deadline:
                        return out
                    time.sleep(0.05)  # polling a remote queue: there is no event to await
                    continue
                info: dict[str, Any] = {k: v for k, v in vars(props).items()
                                        if v is not None}
                info.update(props.headers or {})
                info["redelivered"] = method.redelivered
                out.append((method.routing_key, body, info))
                ch.basic_ack(method.delivery_tag)
        finally:
            conn.close()

    def count(self, queue: str) -> int:
        """Messages ready in ``queue`` (passive declare; does not consume)."""
        conn = self.connection()
        try:
            ok = conn.channel().queue_declare(queue, passive=True)
            return int(ok.method.message_count)
        finally:
            conn.close()

    def unacked(self, queue: str) -> int:
        """Messages of ``queue`` delivered to a consumer and not acknowledged yet."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name",
                       "messages_unacknowledged")
        for line in out.splitlines():
            name, _, count = line.rpartition("\t")
            if name == queue:
                return int(count)
        raise KeyError(queue)

    def publish(self, routing_key: str, body: bytes, exchange: str = "amq.topic") -> None:
        """Publish one persistent message and wait for the broker's confirm."""
        import pika

        conn = self.connection()
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish(exchange, routing_key, body,
                             pika.BasicProperties(delivery_mode=2))
        finally:
            conn.close()


@atexit.register
def _stop_leftovers() -> None:
    """Never leave a node running when the test process ends (e.g. after a crash)."""
    for node in list(_running):
        with contextlib.suppress(Exception):
            node.stop()

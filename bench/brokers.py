"""Brokers under test: started here (oxiedge, Mosquitto, RabbitMQ) or given by address.

Every started broker listens on free loopback ports with its own configuration and data
in a temporary directory, runs in its own session (``popen_broker``), and is stopped (its
own pid only) when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procstat

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    """One broker as the scenarios see it."""

    name: str
    mqtt: tuple[str, int] | None = None
    amqp: tuple[str, int] | None = None
    pid: int | None = None  # root of the process tree measured for CPU and RSS
    # Arguments for durable queues the AMQP scenarios declare (RabbitMQ: quorum).
    queue_args: dict[str, object] = field(default_factory=dict)
    # MQTT scenarios this target takes part in (None = all).  RabbitMQ's MQTT plugin is
    # only used for the durable scenarios, where it is the one peer that also syncs.
    mqtt_only: set[str] | None = None
    notes: list[str] = field(default_factory=list)
    user: str = "guest"
    password: str = "guest"
    log_path: Path | None = None
    started: bool = False  # started by this run (so it may be paused and stopped)

    def runs_mqtt(self, scenario: str) -> bool:
        return self.mqtt is not None and (self.mqtt_only is None or scenario in self.mqtt_only)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mosquitto_exe() -> str:
    """The Mosquitto binary: on the PATH, else where Debian's package puts it."""
    return shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def popen_broker(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a broker process the way a service manager does: in its own session.

    Why: with the kernel's scheduler autogroups (``/proc/sys/kernel/sched_autogroup_enabled``,
    on by default in Debian), every session is one scheduling group. A broker started in the
    bench's session shares a group with the load generator and its clients, and on a shared
    CPU it waits behind them: measured in one invocation on the 2-vCPU VM (bench/README.md,
    "Session 10"), paho -> paho p50 on one vCPU was 0.217 ms for oxiedge and 0.235 ms for
    Mosquitto in the bench's session, 0.156 and 0.171 ms in their own; across vCPUs the
    same. systemd starts every service in its own session (and cgroup); RabbitMQ's start
    here always did. Every broker the benches start goes through here, so all are alike."""
    return subprocess.Popen(cmd, start_new_session=True, **kwargs)


def terminate(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM,
              timeout: float = 10.0) -> None:
    """``sig`` to one process, then SIGKILL after ``timeout`` s; waits for the exit."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s"
                                   ) from None
            time.sleep(0.1)


class Started:
    """A broker process this run started; ``stop()`` ends it by its own pid."""

    def __init__(self, target: Target, proc: subprocess.Popen[bytes], tmp: Path) -> None:
        self.target = target
        target.started = True
        self.proc = proc
        self.tmp = tmp
        self.epmd_pids: list[int] = []  # an epmd daemon RabbitMQ started for this run
        self.ready_s: float | None = None  # start to "ready" (oxiedge) or port open
        self.log_lines: list[str] = []

    def stop(self, remove: bool = True, sig: int = signal.SIGTERM) -> None:
        """Stop the broker (``sig`` to its process tree); ``remove`` deletes its temp dir."""
        if self.proc.poll() is None:
            # RabbitMQ's wrapper shell does not forward SIGTERM: signal the whole tree.
            pids = procstat.tree(self.proc.pid)
            for p in reversed(pids):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGCONT)  # in case a run left it paused
                    os.kill(p, sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                for p in procstat.tree(self.proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
                self.proc.wait(timeout=5)
        for p in self.epmd_pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if remove:
            shutil.rmtree(self.tmp, ignore_errors=True)


def ensure_peers_installed() -> None:
    """apt-get install Mosquitto and RabbitMQ when they are missing."""
    rabbit = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    if os.path.exists(mosquitto_exe()) and os.path.exists(rabbit):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "mosquitto", "rabbitmq-server"],
                   check=True, env=env)


def start_mosquitto(cpu_prefix: list[str] | None = None) -> Started:
    """Mosquitto 2 on a free loopback port, anonymous, in-memory (no persistence file)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-mosq-"))
    port = free_port()
    conf = tmp / "mosquitto.conf"
    # max_queued_messages matches oxiedge's per-session offline queue (4096).
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"max_queued_messages 4096\nlog_dest file {tmp}/mosquitto.log\n"
    )
    proc = popen_broker([*(cpu_prefix or []), mosquitto_exe(), "-c", str(conf)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port("127.0.0.1", port, 10)
    t = Target("mosquitto", mqtt=("127.0.0.1", port), pid=proc.pid,
               notes=["Mosquitto (PUBACK = in memory; persistence off)"],
               log_path=tmp / "mosquitto.log")
    return Started(t, proc, tmp)


def start_rabbitmq(queue_type: str = "quorum", with_mqtt: bool = True,
                   cpu_prefix: list[str] | None = None) -> Started:
    """RabbitMQ on free loopback ports with its own node name, config and data dir."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-rmq-"))
    amqp_port, dist_port, mqtt_port = free_port(), free_port(), free_port()
    conf = [f"listeners.tcp.1 = 127.0.0.1:{amqp_port}", "loopback_users = none"]
    plugins = []
    if with_mqtt:
        plugins.append("rabbitmq_mqtt")
        conf += [f"mqtt.listeners.tcp.1 = 127.0.0.1:{mqtt_port}",
                 "mqtt.allow_anonymous = true", "mqtt.default_user = guest",
                 "mqtt.default_pass = guest"]
    (tmp / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
    (tmp / "enabled_plugins").write_text("[{}].\n".format(",".join(plugins)))
    node = f"bench{os.getpid()}@localhost"
    epmd_before = _pids_named("epmd")
    env = dict(os.environ, HOME=str(tmp), RABBITMQ_NODENAME=node,
               RABBITMQ_CONFIG_FILE=str(tmp / "rabbitmq.conf"),
               RABBITMQ_MNESIA_BASE=str(tmp / "mnesia"), RABBITMQ_LOG_BASE=str(tmp / "log"),
               RABBITMQ_ENABLED_PLUGINS_FILE=str(tmp / "enabled_plugins"),
               RABBITMQ_DIST_PORT=str(dist_port), RABBITMQ_PID_FILE=str(tmp / "pid"),
               ERL_CRASH_DUMP=str(tmp / "erl_crash.dump"))
    with open(tmp / "stdout.log", "wb") as log:
        proc = popen_broker([*(cpu_prefix or []), "/usr/lib/rabbitmq/bin/rabbitmq-server"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_port("127.0.0.1", amqp_port, 90)
    if with_mqtt:
        wait_port("127.0.0.1", mqtt_port, 60)
    _wait_rabbit_usable(amqp_port)
    qargs: dict[str, object] = {"x-queue-type": queue_type} if queue_type != "classic" else {}
    t = Target("rabbitmq", amqp=("127.0.0.1", amqp_port), pid=proc.pid, queue_args=qargs,
               mqtt=("127.0.0.1", mqtt_port) if with_mqtt else None,
               mqtt_only={"mqtt-durable-offline", "bridge-mqtt-amqp"},
               notes=[f"RabbitMQ, durable queues are {queue_type} queues (confirm after fsync)"])
    st = Started(t, proc, tmp)
    st.epmd_pids = sorted(_pids_named("epmd") - epmd_before)
    return st


def _pids_named(comm: str) -> set[int]:
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm") as f:
                    if f.read().strip() == comm:
                        out.add(int(name))
            except OSError:
                continue
    return out


def _wait_rabbit_usable(port: int, timeout: float = 60) -> None:
    import pika

    deadline = time.monotonic() + timeout
    while True:
        try:
            c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port,
                                                                  socket_timeout=5))
            c.close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


_LISTEN_RE = re.compile(r"^(MQTT|AMQP) listening on (\S+):(\d+)")


def oxiedge_command() -> list[str]:
    """The installed ``oxiedge`` script of this venv, else ``python -m oxiedge``."""
    exe = Path(sys.executable).parent / "oxiedge"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "oxiedge"]


def start_oxiedge(extra_args: list[str] | None = None, data: Path | None = None,
                  cpu_prefix: list[str] | None = None, env: dict[str, str] | None = None,
                  timeout: float = 60.0, name: str = "oxiedge",
                  tree: Path | None = None) -> Started:
    """``oxiedge serve`` on free ports (port 0), temp data dir; waits for ``oxiedge ready``.
    ``tree``: another checkout with its own ``.venv`` (a before/after in one invocation)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-oxi-"))
    data = data or tmp / "data"
    command = oxiedge_command() if tree is None else [
        str(tree / ".venv" / "bin" / "python"), "-m", "oxiedge"]
    cmd = [*(cpu_prefix or []), *command, "serve", "--data", str(data),
           "--bind", "127.0.0.1", "--mqtt-port", "0", "--amqp-port", "0",
           *_http_off(tree), *(extra_args or [])]  # (--oxiedge-arg=--http-port=0 wins)
    log = tmp / "oxiedge.log"
    t0 = time.monotonic()
    proc = popen_broker(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp,
                        env=_with_repo_on_path(env, tree or REPO))
    t = Target(name, pid=proc.pid, log_path=log)
    st = Started(t, proc, tmp)
    ready = threading.Event()
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        with open(log, "w") as out:
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                out.write(line + "\n")
                out.flush()
                if not ready.is_set():
                    lines.append(line)
                    m = _LISTEN_RE.match(line)
                    if m:
                        addr = (m.group(2), int(m.group(3)))
                        if m.group(1) == "MQTT":
                            t.mqtt = addr
                        else:
                            t.amqp = addr
                    if line.strip() == "oxiedge ready":
                        ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout) or proc.poll() is not None:
        st.stop()
        raise RuntimeError("oxiedge did not become ready:\n" + "\n".join(lines[-20:]))
    st.ready_s = time.monotonic() - t0
    st.log_lines = lines
    t.notes.append("oxiedge ready in {:.2f}s: {}".format(st.ready_s,
                                                        "; ".join(x for x in lines if x)))
    return st


def _http_off(tree: Path | None) -> list[str]:
    """``--http-port off``, unless ``tree`` predates the HTTP listener (no such flag)."""
    if tree is not None and not (tree / "oxiedge" / "http").is_dir():
        return []
    return ["--http-port", "off"]


def _with_repo_on_path(extra: dict[str, str] | None, repo: Path = REPO) -> dict[str, str]:
    """The server runs in its temp dir: make this checkout importable when not installed."""
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(repo), env.get("PYTHONPATH")) if x)
    return env


def external_target(spec: str) -> Target:
    """``NAME=mqtt://HOST:PORT,amqp://HOST:PORT[,pid=N]`` for a broker someone else runs."""
    name, _, rest = spec.partition("=")
    t = Target(name)
    for part in rest.split(","):
        if part.startswith("mqtt://"):
            h, _, p = part[7:].rpartition(":")
            t.mqtt = (h, int(p))
        elif part.startswith("amqp://"):
            h, _, p = part[7:].rpartition(":")
            t.amqp = (h, int(p))
        elif part.startswith("pid="):
            t.pid = int(part[4:])
    if t.pid is None:
        port = (t.mqtt or t.amqp or ("", 0))[1]
        t.pid = procstat.pid_listening_on(port) if port else None
    return t

"""Stands in for ``../../src/mosquitto`` when Mosquitto's broker tests run against oxiedge.

``tests/conformance/run_mosquitto.py`` copies this file to ``src/mosquitto`` of the unpacked
Mosquitto tree (with the project's Python on its first line). The tests start their broker
as ``mosquitto -v -p PORT`` or ``mosquitto -v -c FILE.conf``; this translates that into
``oxiedge serve`` on 127.0.0.1 and then *becomes* that server (``execv``), so the tests'
``terminate()``/``wait()`` reach oxiedge itself. Its log goes to stderr, where the tests
collect the broker's output.

Configuration directives with an oxiedge equivalent are translated; harmless ones are
ignored; any other one ends the start with exit code 3 and a line naming it, so a test
that relies on a Mosquitto feature oxiedge lacks fails visibly (and is listed as an
exclusion in ``tests/conformance/mosquitto_suite.py``).

State: Mosquitto keeps nothing between starts unless ``persistence true``; oxiedge always
persists to its data dir. So each start without persistence gets an empty data dir, and a
``persistence true`` start reuses the data dir named after its ``persistence_file`` - under
``$OXIEDGE_SHIM_STATE``, a directory the runner makes per test script - as long as a file
of that name is in the working directory (where Mosquitto would have saved it; a script
deletes it to start afresh).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: directive -> oxiedge flag taking the directive's value
_MAPPED = {
    "max_queued_messages": "--mqtt-queue-limit",
    "max_queued_bytes": "--mqtt-queue-bytes",
    "max_packet_size": "--mqtt-max-packet-size",
    "max_keepalive": "--mqtt-max-keepalive",
    # per listener in Mosquitto; the shim allows one listener, and AMQP and HTTP are off,
    # so oxiedge's bound on all its connections is the same bound
    "max_connections": "--max-connections",
}
#: directives without effect on what the tests observe here
_IGNORED = {"sys_interval", "log_type", "log_dest", "connection_messages", "persistence_location"}


def _fail(text: str) -> None:
    sys.stderr.write(f"oxiedge mosquitto shim: {text}\n")
    sys.stderr.flush()
    raise SystemExit(3)


def from_config(path: Path, args: list[str]) -> tuple[int | None, bool, str]:
    """Translate a mosquitto.conf; returns ``(port, persistence, persistence_file)``."""
    port: int | None = None
    persistence = False
    pfile = "mosquitto.db"
    listeners = 0
    anonymous_set = False
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        value = value.strip()
        if key in ("listener", "port"):
            listeners += 1
            if listeners > 1:
                _fail("more than one listener (oxiedge has one MQTT listener)")
            parts = value.split()
            port = int(parts[0])
            if len(parts) > 1 and parts[1] not in ("127.0.0.1", "localhost", "0.0.0.0"):
                _fail(f"listener address {parts[1]!r}")
        elif key == "allow_anonymous":
            anonymous_set = True
            args.append("--allow-anonymous" if value == "true" else "--no-allow-anonymous")
        elif key == "persistence":
            persistence = value == "true"
        elif key == "persistence_file":
            pfile = value
        elif key == "per_listener_settings":
            continue  # with the one listener allowed here, per listener is global
        elif key in _MAPPED:
            args += [_MAPPED[key], value]
        elif key in _IGNORED:
            continue
        else:
            _fail(f"unsupported mosquitto.conf directive {line!r}")
    if listeners and not anonymous_set:
        # Mosquitto 2: a configuration that defines a listener refuses anonymous clients
        # unless it says allow_anonymous true (oxiedge's default with no users admits them)
        args.append("--no-allow-anonymous")
    return port, persistence, pfile


def main(argv: list[str]) -> None:
    port: int | None = None
    config: Path | None = None
    it = iter(argv)
    for arg in it:
        if arg == "-p":
            port = int(next(it))
        elif arg == "-c":
            config = Path(next(it))
        elif arg == "-v":
            continue
        else:
            _fail(f"unsupported mosquitto argument {arg!r}")
    extra: list[str] = []
    persistence, pfile = False, ""
    if config is not None:
        conf_port, persistence, pfile = from_config(config, extra)
        port = conf_port if conf_port is not None else port
    if port is None:
        port = 1883
    state = Path(os.environ.get("OXIEDGE_SHIM_STATE", "/tmp/oxiedge-mosquitto-shim"))
    if persistence:
        data = state / f"persist-{pfile}"
        # Mosquitto saves to ``pfile`` in its working directory, and a script deletes that
        # file to start afresh: the shim keeps a file of that name as the sign that the
        # data dir is to be reused.
        marker = Path(pfile)
        if not marker.exists():
            shutil.rmtree(data, ignore_errors=True)
        marker.touch()
    else:
        data = state / f"fresh-{port}"
        shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True, exist_ok=True)
    os.dup2(2, 1)  # Mosquitto logs to stderr; the tests read the broker's stderr
    # (Mosquitto keeps a persistent session for ever unless persistent_client_expiration
    # is set; oxiedge's default is a day, which an MQTT 5 CONNACK would announce)
    cmd = [sys.executable, "-m", "oxiedge", "serve", "--data", str(data), "--bind", "127.0.0.1",
           "--mqtt-port", str(port), "--amqp-port", "off", "--http-port", "off",
           "--mqtt-session-expiry", "never", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXIEDGE_")}
    env["PYTHONUNBUFFERED"] = "1"
    os.chdir(os.environ.get("OXIEDGE_SHIM_REPO", os.getcwd()))
    os.execve(sys.executable, cmd, env)


if __name__ == "__main__":
    main(sys.argv[1:])

"""``oxiedge pub`` / ``oxiedge sub`` through the admin socket against a real server: what a
network client sees of them, durability of ``pub -q 1``, the broker's own refusals, and a
login like any client's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess, clean_env


def _sub(server: ServerProcess, *args: str) -> subprocess.Popen[str]:
    env = clean_env()
    return subprocess.Popen([sys.executable, "-m", "oxiedge", "sub", *args, "--data",
                             str(server.data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _wait_subscribed(server: ServerProcess) -> None:
    """Until an ``oxiedge sub`` client holds a subscription."""
    deadline = time.monotonic() + 15
    while not any(str(json.loads(x)["client"]).startswith("oxiedge-sub-")
                  for x in server.cli("subscriptions", "--json").stdout.splitlines()):
        assert time.monotonic() < deadline, "the subscriber did not subscribe"
        time.sleep(0.1)


def _refused(server: ServerProcess, *args: str, code: int = 1, input: str | None = None) -> str:
    res = server.cli(*args, check=False, input=input)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    return " ".join(res.stderr.split())


def test_pub_and_sub_like_mosquitto(server: ServerProcess, tmp_path: Path) -> None:
    net: list[tuple[str, bytes]] = []
    watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="watcher")
    watcher.on_message = lambda _c, _u, m: net.append((m.topic, m.payload))
    subscribed = threading.Event()
    watcher.on_subscribe = lambda *a: subscribed.set()
    assert server.mqtt_port is not None
    watcher.connect("127.0.0.1", server.mqtt_port)
    watcher.loop_start()
    watcher.subscribe("a/#", qos=1)
    assert subscribed.wait(10)

    verbose = _sub(server, "-t", "a/#", "-v", "-C", "2", "-q", "1")
    _wait_subscribed(server)
    assert "published 5 bytes to 'a/b' (QoS 1)" in server.cli("pub", "-t", "a/b", "-m",
                                                              "hello", "-q", "1").stdout
    server.cli("pub", "-t", "a/c", "-m", "world", "-q", "2", "-r")
    out, err = verbose.communicate(timeout=20)
    assert (verbose.returncode, out, err) == (0, "a/b hello\na/c world\n", "")
    deadline = time.monotonic() + 10
    while len(net) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert net == [("a/b", b"hello"), ("a/c", b"world")]  # a network client saw them too

    # The retained one is replayed to a new subscriber; a binary payload is base64 in JSON.
    blob = tmp_path / "blob"
    blob.write_bytes(b"\xff\x00")
    server.cli("pub", "-t", "bin/x", "-f", str(blob), "-r")
    rows = [json.loads(x) for x in server.cli("sub", "-t", "a/c", "-t", "bin/#", "-C", "2",
                                              "--json").stdout.splitlines()]
    assert sorted(rows, key=lambda r: str(r["topic"])) == [
        {"topic": "a/c", "qos": 0, "retain": True, "payload": "world"},
        {"topic": "bin/x", "qos": 0, "retain": True, "payload": "/wA=",
         "payload_encoding": "base64"}]
    # An interrupted subscriber's clean session ends with it.
    idle = _sub(server, "-t", "idle/#")
    _wait_subscribed(server)
    idle.kill()
    idle.wait(10)
    deadline = time.monotonic() + 10
    while any(str(r["client"]).startswith("oxiedge-sub-") for r in (
            json.loads(x) for x in server.cli("sessions", "--json").stdout.splitlines())):
        assert time.monotonic() < deadline, "the subscriber's session stayed"
        time.sleep(0.1)
    watcher.disconnect()
    watcher.loop_stop()


def test_pub_qos1_is_on_disk_when_it_returns(server: ServerProcess) -> None:
    keeper = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="keeper",
                         clean_session=False)
    subscribed = threading.Event()
    keeper.on_subscribe = lambda *a: subscribed.set()
    assert server.mqtt_port is not None
    keeper.connect("127.0.0.1", server.mqtt_port)
    keeper.loop_start()
    keeper.subscribe("jobs/#", qos=1)
    assert subscribed.wait(10)
    keeper.disconnect()
    keeper.loop_stop()
    server.cli("pub", "-t", "jobs/1", "-m", "print", "-q", "1")
    server.kill()  # a power cut right after the acknowledgement
    server.restart()
    (row,) = [json.loads(x) for x in server.cli("sessions", "--json").stdout.splitlines()]
    assert row["client"] == "keeper" and row["queued"] == 1


def test_sub_resuming_a_session_prints_what_was_queued(server: ServerProcess) -> None:
    """``sub -c -i ID`` takes over a persistent session: the messages queued for it while it
    was offline (sent by the broker before the SUBACK) are printed, none dropped."""
    server.cli("sub", "-t", "q/#", "-q", "1", "-c", "-i", "resumer", "-W", "0.5",
               check=False)
    for n in range(3):
        server.cli("pub", "-t", f"q/{n}", "-m", f"m{n}", "-q", str(1 + n % 2))
    res = server.cli("sub", "-t", "q/#", "-q", "1", "-c", "-i", "resumer", "-C", "3", "-W",
                     "20", "-v")
    assert sorted(res.stdout.splitlines()) == ["q/0 m0", "q/1 m1", "q/2 m2"]
    (row,) = [json.loads(x) for x in server.cli("sessions", "--json").stdout.splitlines()]
    assert row["client"] == "resumer" and row["queued"] == 0


def test_refusals_are_the_brokers(server: ServerProcess) -> None:
    server.cli("limits", "--disk-free-limit", "1000TB")  # publishers held: told at once
    assert "held by a resource alarm: low on disk" in _refused(server, "pub", "-t", "a", "-m",
                                                               "x", "-q", "1")
    assert "held by a resource alarm" in _refused(server, "publish", "-k", "a", "-m", "x")
    server.cli("limits", "--disk-free-limit", "1MB")
    assert "wildcard in topic name" in _refused(server, "pub", "-t", "a/+", "-m", "x", "-q",
                                                "1")
    assert "exactly one of -m" in _refused(server, "pub", "-t", "a", code=2)
    _refused(server, "pub", "-t", "a", "-m", "x", "-q", "3", code=2)
    assert "subscription refused by the broker: a/#/b" in _refused(server, "sub", "-t",
                                                                   "a/#/b")
    assert "timed out after 1 s: 0 of 1 messages" in _refused(server, "sub", "-t", "none/#",
                                                              "-W", "1", "-C", "1")
    assert "needs a client id" in _refused(server, "sub", "-t", "x", "-c", code=2)
    # Once users exist (and MQTT denies what no rule allows), the admin socket's client without
    # -u is still let in as the local administrator, whom no rule restricts; with -u it logs
    # in as that user like any client.
    server.cli("user", "add", "ops", "--password-stdin", input="s3cret\n")
    server.cli("acl", "default", "deny")
    watcher = subprocess.Popen([sys.executable, "-m", "oxiedge", "sub", "-t", "a/#", "-C", "1",
                                "-W", "30", "-v", "--data", str(server.data)],
                               stdout=subprocess.PIPE, text=True, env=clean_env())
    time.sleep(2)  # (its SUBSCRIBE first)
    server.cli("pub", "-t", "a/b", "-m", "x", "-q", "1")
    assert watcher.communicate(timeout=30)[0].strip() == "a/b x"
    assert "bad user name or password" in _refused(server, "pub", "-t", "a", "-m", "x", "-u",
                                                   "ops", "-P", "wrong")
    assert "subscription refused" in _refused(server, "sub", "-t", "a/#", "-u", "ops", "-P",
                                              "s3cret")
    server.cli("pub", "-t", "a", "-m", "x", "-u", "ops", "-P", "s3cret")
    server.stop()
    assert "no server is running" in _refused(server, "sub", "-t", "a")

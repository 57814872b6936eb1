"""Slow: build an image (tests/appliance/qemu.py), boot it in QEMU (TCG), use it, power-cut it.

Opt-in (``-m slow`` / ``bash .ci/run --slow``); < 15 min on a 2-core machine (build ~1 min,
each boot ~1 min under software emulation). Needs root, the tools of image/deps.sh (run
automatically when missing) and the package index for the build. Set
``OXIEDGE_IMAGE_OUT=DIR`` to reuse an image already built there by
``image/build.sh --arch amd64 --board generic --out DIR``
(``OXIEDGE_BOOT_TARGET=rpi-arm64``: the Pi image, booted on QEMU's arm64 virt machine).

What is checked, in order:
1. first boot: hostname oxiedge-XXXX, the data partition grown, a fresh broker credential,
   the unit active after READY=1 (Type=notify) with watchdog pings arriving, SSH by key
   only, `sudo oxiedge status` through the admin socket, TLS on 8883, 5671 and 15671;
2. crash-only on storage failure under the real unit: with an EIO injected into the WAL
   sync (a runtime drop-in sets ``OXIEDGE_TEST_SYNC_EIO_AFTER``, committer.py), a failed
   commit gets no PUBACK, the server logs its ``oxiedge: storage failure:`` line (seen in
   ``journalctl``), exits with status 3, systemd restarts it (``NRestarts`` + 1) and the
   restarted server serves every acknowledged message;
3. fleet provisioning: the definitions.json put on the FAT partition is imported once the
   broker is ready (its queue, exchange and binding exist), renamed, and the outcome is on
   the card (definitions-import.txt);
4. acknowledged data survives a hard power cut (QEMU killed with SIGKILL): MQTT QoS 1
   messages queued for a persistent session and a retained message (paho), persistent
   messages confirmed into a durable AMQP queue (pika), all there after the next boot.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .qemu import (
    BOOT_TIMEOUT,
    VARIANT,
    Guest,
    boot,
    card_put,
    card_read,
    credential,
    make_card,
    mqtt_client,
    ssh,
)

MESSAGES = 20

# Boots under TCG take minutes: far beyond the default per-test timeout (pyproject.toml).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# Fleet provisioning (docs/appliance.md, "First boot"): a definitions document dropped on
# the FAT partition next to authorized_keys is imported once the broker is ready.
DEFINITIONS = {
    "queues": [{"name": "provisioned", "vhost": "/", "durable": True,
                "auto_delete": False, "arguments": {}}],
    "exchanges": [{"name": "fleet", "vhost": "/", "type": "topic", "durable": True,
                   "auto_delete": False, "internal": False, "arguments": {}}],
    "bindings": [{"source": "fleet", "vhost": "/", "destination": "provisioned",
                  "destination_type": "queue", "routing_key": "site.#", "arguments": {}}],
}

@pytest.fixture(scope="module")
def disk(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The "SD card" (qemu.make_card) with a definitions.json on its FAT partition too."""
    card = make_card(image, tmp_path_factory.mktemp("card"))
    doc = card.parent / "definitions.json"
    doc.write_text(json.dumps(DEFINITIONS))
    card_put(card, doc, "definitions.json")
    return card


@pytest.fixture(scope="module")
def first_boot(image: Path, disk: Path) -> Iterator[Guest]:
    # Console logs next to the image: kept for inspection after the run.
    guest = boot(image, disk, image / "console-1.log")
    try:
        print(f"first boot: broker ready {guest.wait_ready():.0f} s after QEMU started")
        yield guest
    finally:
        if guest.proc.poll() is None:
            guest.power_cut()


def test_first_boot_and_operator_access(image: Path, disk: Path, first_boot: Guest) -> None:
    guest = first_boot
    text = guest.text()
    assert re.search(r"oxiedge-firstboot: hostname oxiedge-[0-9a-f]{4}", text)
    assert "oxiedge-firstboot: done" in text
    assert "installed operator SSH key(s) from /boot/firmware/authorized_keys" in text
    auth = credential(guest)
    assert auth is not None, "first boot registered no broker credential"
    # The credential is also readable from the card's FAT partition on a PC.
    on_card = card_read(disk, "oxiedge-credential.txt")
    assert f"password={auth[1]}" in on_card.stdout, on_card.stderr
    assert re.search(r"MQTT listening on 0\.0\.0\.0:1883", text)
    assert re.search(r"AMQP listening on 0\.0\.0\.0:5672", text)

    hostname = ssh(image, guest, "hostname").stdout.strip()
    # The kernel's page size: 16 KiB with linux-image-arm64-16k (generic-arm64-16k).
    page = int(ssh(image, guest, "getconf PAGESIZE").stdout)
    assert page == (16384 if VARIANT == ["16k"] else 4096), page
    assert re.fullmatch(r"oxiedge-[0-9a-f]{4}", hostname)
    check_tls(guest, disk, hostname, auth, image)
    # Type=notify: "active (running)" only after READY=1; watchdog pings are recorded.
    show = ssh(image, guest, "systemctl show -p ActiveState -p SubState -p NRestarts "
                             "-p WatchdogUSec -p User oxiedge.service").stdout
    assert "ActiveState=active" in show and "SubState=running" in show, show
    assert "NRestarts=0" in show and "User=oxiedge" in show, show
    assert "WatchdogUSec=30s" in show, show
    # WATCHDOG=1 pings arrive (sdnotify.watchdog_loop, every 15 s): the manager's last-ping
    # time moves on within 16 s.
    stamps = ssh(image, guest, "for i in 1 2; do systemctl show --value "
                               "-p WatchdogTimestampMonotonic oxiedge; sleep 16; done").stdout
    first, second = (int(v) for v in stamps.split())
    assert 0 < first < second, stamps
    # The data partition was grown from 64 MiB to the rest of the 4 GiB card.
    size = int(ssh(image, guest, "findmnt -bno SIZE /var/lib/oxiedge").stdout)
    assert size > 2 * 1024**3, size
    # The operator CLI on the device, live through the admin socket.
    status = ssh(image, guest, "sudo oxiedge status --json")
    assert status.stdout.strip(), status.stderr
    # Without sudo, as a member of the oxiedge group: works once the server creates the
    # socket 0660 for a group-accessible data dir (docs/appliance.md).
    mode = ssh(image, guest, "sudo stat -c %a /var/lib/oxiedge/admin.sock").stdout.strip()
    assert mode in ("600", "660"), mode
    if mode == "660":
        assert ssh(image, guest, "oxiedge status --json").stdout.strip()
    # The operator's shell: oxiedge sub / pub against the device's own broker, as the local
    # administrator (no -u: the admin socket is the credential, although users exist).
    got = ssh(image, guest, "sudo sh -c 'oxiedge sub -t \"shell/#\" -C 1 -W 30 -v & sleep 2; "
                            "oxiedge pub -t shell/x -m hi -q 1; wait'")
    assert "shell/x hi" in got.stdout, got.stdout + got.stderr
    # The card names the console's address (first boot's notes beside the credential).
    notes = card_read(disk, "oxiedge-console.txt")
    assert f"https://{hostname}.local:15671/" in notes.stdout, notes.stdout + notes.stderr
    # Key only: a password login is not even offered.
    refused = ssh(image, guest, "true", "-o", "PubkeyAuthentication=no",
                  "-o", "PreferredAuthentications=password,keyboard-interactive", check=False)
    assert refused.returncode != 0
    assert "Permission denied (publickey)" in refused.stderr, refused.stderr


def check_tls(guest: Guest, disk: Path, hostname: str, auth: tuple[str, str],
              work: Path) -> None:
    """TLS on at first boot (docs/tls.md): 8883 and 5671 answer with a certificate for
    HOST and HOST.local signed by the device CA that first boot left on the FAT partition."""
    import ssl

    text = guest.text()
    assert re.search(r"MQTT TLS listening on 0\.0\.0\.0:8883", text)
    assert re.search(r"AMQP TLS listening on 0\.0\.0\.0:5671", text)
    ca = work / "oxiedge-ca.pem"
    res = card_read(disk, "oxiedge-ca.pem")
    assert res.returncode == 0 and "BEGIN CERTIFICATE" in res.stdout, res.stderr
    ca.write_text(res.stdout)
    ctx = ssl.create_default_context(cafile=str(ca))
    for name in (hostname, f"{hostname}.local"):
        for port in (guest.ports["mqtt_tls"], guest.ports["amqp_tls"], guest.ports["https"]):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
                    ctx.wrap_socket(raw, server_hostname=name) as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # An MQTT CONNECT over TLS with the first boot's credential (raw: the certificate names
    # the device, not the forwarded 127.0.0.1, so the name to verify is HOST.local).
    raw = socket.create_connection(("127.0.0.1", guest.ports["mqtt_tls"]), timeout=30)
    sock = ctx.wrap_socket(raw, server_hostname=f"{hostname}.local")
    user, password = (part.encode() for part in auth)
    payload = (b"\x00\x04MQTT\x04\xc2\x00\x3c\x00\x09tls-check" + len(user).to_bytes(2, "big")
               + user + len(password).to_bytes(2, "big") + password)
    sock.sendall(bytes([0x10, len(payload)]) + payload)
    assert sock.recv(4) == b"\x20\x02\x00\x00"  # CONNACK accepted
    sock.close()


def test_definitions_imported_from_the_card(image: Path, disk: Path, first_boot: Guest) -> None:
    guest = first_boot
    match = guest.wait_for(r"oxiedge-definitions: imported definitions from "
                           r"/boot/firmware/definitions\.json: ([^\r\n]*)", 300)
    assert "created 3" in match.group(1), match.group(0)
    queues = ssh(image, guest, "sudo oxiedge queues --json").stdout  # JSON lines
    assert '"name": "provisioned"' in queues, queues
    bindings = ssh(image, guest, "sudo oxiedge bindings --json").stdout
    assert "site.#" in bindings and "fleet" in bindings, bindings
    unit = ssh(image, guest, "systemctl show -p Result -p ExecMainStatus "
                             "oxiedge-definitions.service").stdout
    assert "Result=success" in unit and "ExecMainStatus=0" in unit, unit
    # On the card: the file renamed (a second boot does not import it again), the report.
    listing = ssh(image, guest, "sudo ls /boot/firmware").stdout.split()
    assert "definitions.json" not in listing and "definitions.json.imported" in listing, listing
    report = ssh(image, guest, "sudo cat /boot/firmware/definitions-import.txt").stdout
    assert report.startswith("imported ") and "created 3" in report, report


FAULT_DROPIN = "/run/systemd/system/oxiedge.service.d/fault.conf"
FAULT_AFTER = 5


def unit_state(image: Path, guest: Guest) -> dict[str, str]:
    out = ssh(image, guest, "systemctl show -p ActiveState -p SubState -p NRestarts "
                            "-p MainPID oxiedge.service").stdout
    return dict(line.split("=", 1) for line in out.split())


def test_commit_failure_exits_and_systemd_restarts(image: Path, first_boot: Guest) -> None:
    from oxiedge.mqtt.codec import encode
    from oxiedge.mqtt.packets import Puback, Publish
    from tests.mqtt.rawclient import RawSession

    guest = first_boot
    auth = credential(guest)
    assert auth is not None
    # A runtime drop-in (gone at the next boot): the sync thread fails with EIO after
    # FAULT_AFTER good syncs. `systemctl restart` returns once READY=1 arrived.
    ssh(image, guest, f"sudo mkdir -p {Path(FAULT_DROPIN).parent} && printf "
                      f"'[Service]\\nEnvironment=OXIEDGE_TEST_SYNC_EIO_AFTER={FAULT_AFTER}\\n' "
                      f"| sudo tee {FAULT_DROPIN} >/dev/null && sudo systemctl daemon-reload "
                      "&& sudo systemctl restart oxiedge")
    before = unit_state(image, guest)
    assert before["ActiveState"] == "active", before
    client = RawSession(guest.ports["mqtt"])
    client.connect("crash-writer", username=auth[0], password=auth[1].encode())
    acked: list[int] = []
    failed_at = None
    for i in range(1, 4 * FAULT_AFTER):
        client.send(encode(Publish(f"crash/{i}", b"c%d" % i, 1, True, False, i)))
        try:
            reply = client.next(timeout=60)
        except (ConnectionError, TimeoutError, OSError):
            failed_at = i
            break
        assert reply == Puback(i), reply
        acked.append(i)
    client.close()
    assert failed_at is not None and len(acked) <= FAULT_AFTER, (acked, failed_at)
    # systemd notices the exit (status 3) and restarts the unit after RestartSec=2s.
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        state = unit_state(image, guest)
        if (int(state["NRestarts"]) > int(before["NRestarts"])
                and state["ActiveState"] == "active" and state["SubState"] == "running"):
            break
        assert time.monotonic() < deadline, state
        time.sleep(2)
    assert state["MainPID"] != before["MainPID"]
    journal = ssh(image, guest, "sudo journalctl -u oxiedge.service --no-pager -b").stdout
    assert "oxiedge: storage failure: durable writes stopped" in journal, journal[-3000:]
    assert re.search(r"Main process exited, code=exited, status=3", journal), journal[-3000:]
    # Drop the fault and restart cleanly; every acknowledged retained message is there.
    ssh(image, guest, f"sudo rm {FAULT_DROPIN} && sudo systemctl daemon-reload "
                      "&& sudo systemctl restart oxiedge")
    reader = RawSession(guest.ports["mqtt"])
    reader.connect("crash-reader", username=auth[0], password=auth[1].encode())
    reader.subscribe(1, ("crash/#", 1))
    got: set[int] = set()
    while True:
        try:
            msg = reader.next(timeout=10)
        except TimeoutError:
            break
        assert isinstance(msg, Publish) and msg.retain, msg
        if msg.qos:
            reader.send(encode(Puback(msg.packet_id or 0)))
        got.add(int(msg.payload[1:]))
    reader.close()
    assert set(acked) <= got <= set(acked) | {failed_at}, (acked, got)


def test_acknowledged_data_survives_power_cut(image: Path, disk: Path, first_boot: Guest) -> None:
    import pika

    guest = first_boot
    auth = credential(guest)
    assert auth is not None
    host = "127.0.0.1"

    # MQTT: a persistent session subscribed at QoS 1, then offline; QoS 1 publishes to it.
    subscribed = threading.Event()
    sub = mqtt_client("appliance-sub", clean=False, auth=auth)
    sub.on_subscribe = lambda *args: subscribed.set()
    sub.connect(host, guest.ports["mqtt"], keepalive=60)
    sub.loop_start()
    sub.subscribe("appliance/#", qos=1)
    assert subscribed.wait(60), "no SUBACK"
    sub.disconnect()
    sub.loop_stop()

    pub = mqtt_client("appliance-pub", clean=True, auth=auth)
    pub.connect(host, guest.ports["mqtt"], keepalive=60)
    pub.loop_start()
    infos = [pub.publish("appliance/m", f"m{i}".encode(), qos=1) for i in range(MESSAGES)]
    infos.append(pub.publish("retained/state", b"on", qos=1, retain=True))
    for info in infos:
        info.wait_for_publish(timeout=60)
        assert info.is_published(), "no PUBACK"
    pub.disconnect()
    pub.loop_stop()

    # AMQP: persistent messages into a durable queue, each acknowledged by a confirm.
    creds = pika.PlainCredentials(*auth)
    params = pika.ConnectionParameters(host, guest.ports["amqp"], credentials=creds,
                                       blocked_connection_timeout=60, socket_timeout=60)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare("appliance-q", durable=True)
    ch.confirm_delivery()
    for i in range(MESSAGES):
        # With confirms on, basic_publish returns only after the broker's basic.ack.
        ch.basic_publish("", "appliance-q", f"a{i}".encode(),
                         pika.BasicProperties(delivery_mode=2), mandatory=True)
    conn.close()

    # Power cut right after the last acknowledgement.
    guest.power_cut()

    second = boot(image, disk, image / "console-2.log")
    try:
        print(f"boot after the power cut: broker ready {second.wait_ready():.0f} s")
        text = second.text()
        assert "oxiedge-firstboot: hostname" not in text, "first boot ran again"
        assert re.search(r"AMQP listening on 0\.0\.0\.0:5672 - recovered \d+ durable queues?, "
                         rf"{MESSAGES} messages", text), text[-3000:]

        got: list[str] = []
        done = threading.Event()
        session_present: list[bool] = []

        def on_connect(client, userdata, flags, reason, props):  # type: ignore[no-untyped-def]
            session_present.append(bool(flags.session_present))

        def on_message(client, userdata, msg):  # type: ignore[no-untyped-def]
            got.append(msg.payload.decode())
            if len([m for m in got if m.startswith("m")]) >= MESSAGES:
                done.set()

        sub = mqtt_client("appliance-sub", clean=False, auth=auth)
        sub.on_connect = on_connect
        sub.on_message = on_message
        sub.connect(host, second.ports["mqtt"], keepalive=60)
        sub.loop_start()
        try:
            assert done.wait(120), f"only {got} arrived"
        finally:
            sub.disconnect()
            sub.loop_stop()
        assert session_present == [True]
        assert [m for m in got if m.startswith("m")] == [f"m{i}" for i in range(MESSAGES)]

        retained: list[bytes] = []
        have_retained = threading.Event()
        fresh = mqtt_client("appliance-fresh", clean=True, auth=auth)

        def on_retained(client, userdata, msg):  # type: ignore[no-untyped-def]
            retained.append(msg.payload)
            have_retained.set()

        fresh.on_message = on_retained
        fresh.connect(host, second.ports["mqtt"], keepalive=60)
        fresh.loop_start()
        fresh.subscribe("retained/state", qos=1)
        try:
            assert have_retained.wait(60), "retained message lost"
        finally:
            fresh.disconnect()
            fresh.loop_stop()
        assert retained == [b"on"]

        conn = pika.BlockingConnection(
            pika.ConnectionParameters(host, second.ports["amqp"], credentials=creds,
                                      socket_timeout=60))
        ch = conn.channel()
        bodies: list[str] = []
        for _ in range(MESSAGES):
            method, _props, body = ch.basic_get("appliance-q", auto_ack=False)
            assert method is not None, f"queue ran dry after {bodies}"
            bodies.append(body.decode())
            ch.basic_ack(method.delivery_tag)
        assert bodies == [f"a{i}" for i in range(MESSAGES)]
        conn.close()
    finally:
        if second.proc.poll() is None:
            second.power_cut()

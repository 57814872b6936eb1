"""What an MQTT 5 server tells its clients about itself and its neighbours, against a real
``oxiedge serve``: Response Information (a per-client topic prefix for the Response Topics
of its requests, only where the read rules let the client use it) and Server Reference
(``--mqtt-server-reference``: DISCONNECT 0x9C with it at shutdown)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paho.mqtt.packettypes import PacketTypes

from tests.conftest import ServerProcess

from .paho5 import props

Make = Callable[..., Any]
ASK = props(PacketTypes.CONNECT, RequestResponseInformation=1)


def response_information(port: int | None, v5: Make, client_id: str,
                         asked: bool = True) -> str | None:  # fmt: skip
    c = v5(port, client_id)
    _present, p = c.connect(properties=ASK if asked else None)
    c.disconnect()
    return getattr(p, "ResponseInformation", None)


def test_response_information_is_a_prefix_the_client_uses(shared_mqtt: ServerProcess,
                                                          v5: Make) -> None:  # fmt: skip
    port = shared_mqtt.mqtt_port
    asker = v5(port, "rr-asker")
    _present, p = asker.connect(properties=ASK)
    prefix = p.ResponseInformation
    assert prefix == "reply/rr-asker/"
    assert asker.subscribe(prefix + "#", 1) == [1]
    responder = v5(port, "rr-responder")
    responder.connect()
    assert responder.subscribe("rr/requests", 1) == [1]
    request = props(PacketTypes.PUBLISH, ResponseTopic=prefix + "clock", CorrelationData=b"7")
    asker.publish("rr/requests", b"what time is it", 1, properties=request)
    got = responder.get()
    answer = props(PacketTypes.PUBLISH, CorrelationData=got.properties.CorrelationData)
    responder.publish(got.properties.ResponseTopic, b"noon", 1, properties=answer)
    reply = asker.get()
    assert (reply.topic, reply.payload, reply.properties.CorrelationData) == (
        "reply/rr-asker/clock", b"noon", b"7")
    # Not asked (Request Response Information 0, the default): none (3.1.2.11.6).
    assert response_information(port, v5, "rr-quiet", asked=False) is None
    # A client id that is not one topic level gets none (its prefix would reach into
    # other clients' topics, as %c in a pattern line would).
    assert response_information(port, v5, "rr/nested") is None
    assert response_information(port, v5, "rr+") is None


def test_response_information_follows_the_read_rules(
        start_mqtt: Callable[..., ServerProcess], v5: Make, tmp_path: Path) -> None:  # fmt: skip
    data = tmp_path / "acl-data"
    subprocess.run([sys.executable, "-m", "oxiedge", "acl", "add", "readwrite", "rr/#",
                    "--pattern", "--data", str(data)], check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    srv = start_mqtt(data=data)
    # Rules apply to every client and none lets it read reply/...: no prefix it cannot use.
    assert response_information(srv.mqtt_port, v5, "rr-ruled") is None
    srv.cli("acl", "add", "read", "reply/%c/#", "--pattern")  # (the running server reloads)
    assert response_information(srv.mqtt_port, v5, "rr-ruled") == "reply/rr-ruled/"


def test_shutdown_names_the_server_reference(start_mqtt: Callable[..., ServerProcess],
                                             v5: Make) -> None:  # fmt: skip
    srv = start_mqtt("--mqtt-server-reference", "standby.local:1883")
    c = v5(srv.mqtt_port, "moving")
    c.connect()
    srv.stop()  # SIGTERM
    rc, p = c.disconnects.get(timeout=10)
    assert rc == 0x9C  # Use another server (4.11), instead of 0x8B
    assert p.ServerReference == "standby.local:1883"

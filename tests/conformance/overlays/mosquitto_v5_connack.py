# --- appended by tests/conformance/run_mosquitto.py --v5 (oxiedge) ---------------------------
# A successful MQTT 5 CONNACK announces the broker's limits. Mosquitto's helper expects
# Mosquitto's defaults (Topic Alias Maximum 10, Receive Maximum 20, in that order around the
# script's own properties); oxiedge announces its own (Receive Maximum 1024, Topic Alias
# Maximum 64, Maximum Packet Size, Shared Subscription Available), in identifier order, and
# a refusal without properties. This wraps ``gen_connack`` so a script expects what oxiedge
# announces plus the script's own properties; everything else a script checks is unchanged.
import os as _ox_os
import sys as _ox_sys

_ox_sys.path.insert(0, _ox_os.environ.get("OXIEDGE_SHIM_REPO", "."))
from oxiedge.mqtt.encode import encode_varint as _ox_varint
from oxiedge.mqtt.packets import PacketType as _OxType
from oxiedge.mqtt.properties import (
    decode_properties as _ox_decode,
)
from oxiedge.mqtt.properties import (
    encode_properties as _ox_encode,
)
from oxiedge.mqtt.properties import (
    read_varint as _ox_read_varint,
)

_ox_mosquitto_gen_connack = gen_connack  # noqa: F821 (mosq_test's own, above)


def _ox_announced(extra, max_packet=1 << 20):
    props, _ = _ox_decode(_ox_varint(len(extra)) + extra, 0, _OxType.CONNACK)
    props = props._replace(
        receive_maximum=1024 if props.receive_maximum is None else props.receive_maximum,
        topic_alias_maximum=64 if props.topic_alias_maximum is None
        else props.topic_alias_maximum,
        maximum_packet_size=max_packet if props.maximum_packet_size is None
        else props.maximum_packet_size,
        shared_subscription_available=1)
    block = _ox_encode(props, _OxType.CONNACK)
    _length, start = _ox_read_varint(block, 0, len(block))
    return block[start:]


def gen_connack(flags=0, rc=0, proto_ver=4, properties=b"", property_helper=True):
    if proto_ver == 5 and property_helper and properties is not None:
        properties = _ox_announced(properties) if rc == 0 else properties
        property_helper = False
    return _ox_mosquitto_gen_connack(flags, rc, proto_ver, properties, property_helper)

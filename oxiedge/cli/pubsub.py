"""``oxiedge pub`` / ``oxiedge sub``: a quick MQTT publish or subscription through the admin
socket, with mosquitto_pub / mosquitto_sub's options (the image ships no MQTT client).

The server runs them as a local MQTT client (``mqtt/localclient.py``): the same login,
permissions, bounds and durability as a client of the listener; ``pub -q 1`` returns once
the message is on disk.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..admin.client import ServerNotRunning, call_stream
from ..admin.protocol import MAX_REQUEST, AdminError
from .base import DataOpt, JsonOpt, _config, _exit_code, _fail, _live, _print_result, app

TopicOpt = Annotated[list[str], typer.Option("-t", "--topic", help="topic (sub: a filter; repeatable)")]  # noqa: E501
QosOpt = Annotated[int, typer.Option("-q", "--qos", min=0, max=2, help="QoS 0, 1 or 2")]
IdOpt = Annotated[str | None, typer.Option("-i", "--id", help="client id [default: oxiedge-pub-/sub-RANDOM]")]  # noqa: E501
UserOpt = Annotated[str | None, typer.Option("-u", "--username", help="log in as this user (default: the local administrator, whom no permission rule restricts)")]  # noqa: E501
PwOpt = Annotated[str | None, typer.Option("-P", "--pw", help="the user's password")]
#: Room the request's JSON needs besides the base64 payload.
_OVERHEAD = 4096


@app.command()
def pub(
    topic: Annotated[str, typer.Option("-t", "--topic", help="the topic to publish to")],
    message: Annotated[str | None, typer.Option("-m", "--message", help="the payload (text)")] = None,  # noqa: E501
    file: Annotated[Path | None, typer.Option("-f", "--file", help="send this file's contents")] = None,  # noqa: E501
    stdin: Annotated[bool, typer.Option("-s", "--stdin-file", help="send all of stdin")] = False,
    null: Annotated[bool, typer.Option("-n", "--null-message", help="send a zero-length payload")] = False,  # noqa: E501
    qos: QosOpt = 0,
    retain: Annotated[bool, typer.Option("-r", "--retain", help="retain the message")] = False,
    client_id: IdOpt = None,
    username: UserOpt = None,
    password: PwOpt = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Publish one MQTT message (as mosquitto_pub); -q 1/2 returns once it is on disk."""
    given = [x for x in (message is not None, file is not None, stdin, null) if x]
    if len(given) != 1:
        _fail("give exactly one of -m MESSAGE, -f FILE, -s (stdin) or -n (empty)", 2)
    if message is not None:
        payload = message.encode()
    elif file is not None:
        try:
            payload = file.read_bytes()
        except OSError as exc:
            _fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    else:
        payload = sys.stdin.buffer.read() if stdin else b""
    if len(payload) * 4 // 3 + _OVERHEAD > MAX_REQUEST:
        _fail(f"a {len(payload)}-byte message is too large for the admin socket (at most "
              f"{(MAX_REQUEST - _OVERHEAD) * 3 // 4} bytes): use an MQTT client", 2)
    result = _live(data, "mqtt.publish", {
        "topic": topic, "payload": base64.b64encode(payload).decode(), "qos": qos,
        "retain": retain, "client_id": client_id, "username": username, "password": password})
    _print_result(result, as_json, f"published {len(payload)} bytes to '{topic}' (QoS {qos}"
                                   f"{', retained' if retain else ''})")


def _line(event: dict[str, Any], verbose: bool, as_json: bool) -> bytes:
    """One message as mosquitto_sub prints it (``-v``: topic, a space, the payload)."""
    payload = base64.b64decode(event["payload"])
    if as_json:
        row: dict[str, Any] = {"topic": event["topic"], "qos": event["qos"],
                               "retain": event["retain"]}
        try:
            row["payload"] = payload.decode()
        except UnicodeDecodeError:
            row["payload"], row["payload_encoding"] = event["payload"], "base64"
        return json.dumps(row, ensure_ascii=False).encode() + b"\n"
    if verbose:
        return event["topic"].encode() + b" " + payload + b"\n"
    return payload + b"\n"


@app.command()
def sub(
    topics: TopicOpt,
    qos: QosOpt = 0,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="print the topic before each payload")] = False,  # noqa: E501
    count: Annotated[int, typer.Option("-C", "--count", min=0, help="exit after this many messages (0: never)")] = 0,  # noqa: E501
    timeout: Annotated[float | None, typer.Option("-W", "--timeout", min=0.1, help="exit after this many seconds")] = None,  # noqa: E501
    persistent: Annotated[bool, typer.Option("-c", "--disable-clean-session", help="a persistent session (needs -i)")] = False,  # noqa: E501
    client_id: IdOpt = None,
    username: UserOpt = None,
    password: PwOpt = None,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Subscribe and print messages as they arrive (as mosquitto_sub); exits 1 when
    -W passes before -C messages arrived."""
    if persistent and not client_id:
        _fail("-c (a persistent session) needs a client id: -i ID", 2)
    cfg = _config(data)
    out = sys.stdout.buffer

    def show(event: Any) -> None:
        out.write(_line(event, verbose, as_json))
        out.flush()

    args = {"filters": topics, "qos": qos, "count": count, "timeout": timeout,
            "clean": not persistent, "client_id": client_id, "username": username,
            "password": password}
    try:
        result = call_stream(cfg.admin_socket, "mqtt.subscribe", args, show)
    except ServerNotRunning:
        _fail(f"no server is running on {cfg.data}: start it with `oxiedge serve` or pass "
              "--data")
    except AdminError as exc:
        _fail(str(exc), _exit_code(exc))
    except (KeyboardInterrupt, BrokenPipeError):
        raise typer.Exit(0) from None
    if count and result["received"] < count:
        _fail(f"timed out after {timeout:g} s: {result['received']} of {count} messages")

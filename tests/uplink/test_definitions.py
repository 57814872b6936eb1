"""Uplink definitions: validation, URLs and names, the TOML config file, the offline CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from oxiedge.uplink.definitions import load_config_file, parse_definition
from oxiedge.uplink.link import (
    UplinkError,
    local_topic,
    parse_endpoint,
    upstream_filter,
    upstream_name,
)


def test_endpoint_parsing_and_redaction() -> None:
    e = parse_endpoint("amqps://dev:s%40cret@rabbit.example:5671/site%2Fa")
    assert (e.scheme, e.host, e.port, e.username, e.password, e.vhost) == (
        "amqps", "rabbit.example", 5671, "dev", "s@cret", "site/a")
    assert e.tls and e.protocol == "amqp"
    assert "s@cret" not in e.redacted() and "***" in e.redacted()
    assert parse_endpoint("mqtt://h").port == 1883
    assert parse_endpoint("mqtts://h").port == 8883
    assert parse_endpoint("amqp://h").vhost == "/"
    assert parse_endpoint("amqp://h/%2F").vhost == "/"


@pytest.mark.parametrize("url, words", [
    ("http://u:topsecret@h", "scheme"),
    ("amqp://", "no host"),
    ("mqtt://h/path", "no path"),
    ("amqp://h:99999", "invalid host or port"),
    ("amqp://u:top/secret@h", "invalid host or port"),
])
def test_bad_urls_are_named_without_the_password(url: str, words: str) -> None:
    with pytest.raises(UplinkError, match=words) as info:
        parse_endpoint(url)
    assert "topsecret" not in str(info.value)


def test_names_both_ways() -> None:
    assert upstream_name("amqp", "site/d1/", "sensors/t") == "site.d1.sensors.t"
    assert upstream_name("amqp", "", "a.b/c") is None  # '.' cannot be a routing-key word
    assert upstream_name("mqtt", "site/d1/", "sensors/t") == "site/d1/sensors/t"
    assert upstream_filter("amqp", "site/d1/", "cmd/+/#") == "site.d1.cmd.*.#"
    assert upstream_filter("mqtt", "site/d1/", "cmd/#") == "site/d1/cmd/#"
    assert local_topic("amqp", "site/d1/", "site.d1.cmd.valve") == "cmd/valve"
    assert local_topic("mqtt", "site/d1/", "site/d1/cmd/valve") == "cmd/valve"
    assert local_topic("mqtt", "site/d1/", "site/d2/cmd/valve") is None
    assert local_topic("amqp", "", "bad..key") is None


def test_definition_defaults_and_errors() -> None:
    d = parse_definition({"name": "up", "url": "amqp://h", "out": ["sensors/#"]})
    assert (d.window, d.policy, d.exchange, d.queue_type) == (256, "drop-oldest", "amq.topic",
                                                              "quorum")
    assert parse_definition(d.document()) == d  # the stored form round-trips
    d2 = parse_definition({"name": "up", "urls": ["mqtt://a", "mqtt://b"], "in": ["cmd/#"],
                           "max_bytes": "10MB", "policy": "block", "window": 10})
    assert d2.max_bytes == 10 * 1000 * 1000 or d2.max_bytes == 10 << 20
    bad: list[tuple[dict[str, Any], str]] = [
        ({"name": "-x", "url": "amqp://h", "out": ["a"]}, "invalid uplink name"),
        ({"name": "x", "out": ["a"]}, "no upstream URL"),
        ({"name": "x", "url": "amqp://h"}, "at least one"),
        ({"name": "x", "url": "amqp://h", "out": ["a/#/b"]}, "invalid --out filter"),
        ({"name": "x", "urls": ["amqp://h", "mqtt://h"], "out": ["a"]}, "one protocol"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "policy": "spill"}, "policy"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "window": 0}, "window"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "window": "many"}, "number"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "colour": "red"}, "unknown option"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "prefix": "a/+/"}, "prefix"),
        ({"name": "x", "url": "amqp://h", "out": ["a"], "ca_file": "/nonexistent.pem"}, "CA"),
    ]
    for spec, words in bad:
        with pytest.raises(UplinkError, match=words):
            parse_definition(spec)


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "oxiedge.toml"
    path.write_text('[uplink.central]\nurls = ["amqp://a", "amqp://b"]\nout = ["sensors/#"]\n'
                    'in = ["cmd/#"]\nprefix = "site/{device}/"\nheartbeat = 5\n')
    (d,) = load_config_file(path)
    assert (d.name, d.urls, d.inbound, d.heartbeat, d.source) == (
        "central", ("amqp://a", "amqp://b"), ("cmd/#",), 5.0, "config")
    path.write_text("[mqtt]\nport = 1\n")
    with pytest.raises(UplinkError, match="unknown table"):
        load_config_file(path)
    path.write_text("[uplink.x\n")
    with pytest.raises(UplinkError, match="config file"):
        load_config_file(path)


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oxiedge", *args, "--data", str(data)],
                          capture_output=True, text=True, timeout=60)


def test_cli_offline_add_list_status_remove(tmp_path: Path) -> None:
    data = tmp_path / "d"
    r = _cli(data, "uplink", "add", "central", "amqp://dev:hunter2@127.0.0.1:5672/",
             "--out", "sensors/#", "--in", "cmd/#", "--window", "32")
    assert r.returncode == 0, r.stderr
    assert "uplink central added" in r.stdout
    r = _cli(data, "uplink", "list", "--json")
    row = json.loads(r.stdout.splitlines()[0])
    assert row["name"] == "central" and row["window"] == 32 and row["in"] == ["cmd/#"]
    assert "hunter2" not in r.stdout
    r = _cli(data, "uplink", "status", "--json")
    assert json.loads(r.stdout)["central"]["backlog_messages"] == 0
    r = _cli(data, "uplink", "add", "bad", "ftp://x", "--out", "a")
    assert r.returncode == 2 and "scheme" in r.stderr
    r = _cli(data, "uplink", "remove", "nope")
    assert r.returncode != 0 and "no uplink 'nope'" in r.stderr
    r = _cli(data, "uplink", "remove", "central")
    assert r.returncode == 0 and "removed" in r.stdout
    assert _cli(data, "uplink", "list", "--json").stdout.strip() == ""


def test_serve_rejects_a_bad_device_id_and_config(start_server: Any, tmp_path: Path) -> None:
    bad = start_server("--device-id", "has space", expect_ready=False)
    assert bad.proc.wait(timeout=30) == 2
    assert "invalid device id" in bad.wait_for_line("oxiedge: error", 10)
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[uplink.x]\nurl = "amqp://h"\n')
    bad = start_server("--config", str(cfg), expect_ready=False)
    assert bad.proc.wait(timeout=30) == 2
    assert "at least one" in bad.wait_for_line("oxiedge: error", 10)


def test_retired_in_filters_accumulate_until_taken_again() -> None:
    from oxiedge.uplink.definitions import retired_filters

    def d(inbound: list[str], prefix: str = "site/{device}/") -> Any:
        return parse_definition({"name": "up", "url": "mqtt://h", "in": inbound,
                                 "prefix": prefix})

    v1, v2 = d(["cmd/#", "cfg/#"]), d(["cmd/#"])
    v2 = replace(v2, retired_in=retired_filters(v1, v2))
    assert v2.retired_in == ("site/{device}/cfg/#",)
    v3 = d(["cfg/#"], prefix="site/{device}/")
    v3 = replace(v3, retired_in=retired_filters(v2, v3))
    assert v3.retired_in == ("site/{device}/cmd/#",)  # cfg/# is wanted again
    assert parse_definition(v3.document()).retired_in == v3.retired_in  # stored form
    assert v3 == d(["cfg/#"])  # retired filters do not make a definition "changed"

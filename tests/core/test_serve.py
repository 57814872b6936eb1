"""``oxiedge serve`` as a process: start-up lines, configuration errors, signals."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env


def _run_serve(*args: str, env: dict[str, str] | None = None, timeout: float = 30
               ) -> subprocess.CompletedProcess[str]:
    full_env = clean_env()
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "oxiedge", "serve", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)


def test_ready_line_is_last_and_sigterm_is_clean(server) -> None:  # type: ignore[no-untyped-def]
    ready_index = server.log_lines.index("oxiedge ready")
    assert server.admin_socket.exists()
    assert os.stat(server.admin_socket).st_mode & 0o777 == 0o600
    assert server.stop() == 0
    assert server.log_lines[ready_index + 1:].count("oxiedge stopped") == 1
    assert not server.admin_socket.exists()


def test_listening_lines_report_the_real_ports(server) -> None:  # type: ignore[no-untyped-def]
    for label, port in (("MQTT", server.mqtt_port), ("AMQP", server.amqp_port)):
        if server.line(f"{label} listening on") is None:
            pytest.skip(f"{label} broker not in this build yet")
        assert port and port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


def test_ports_off_and_env_vars(tmp_path: Path, start_server) -> None:  # type: ignore[no-untyped-def]
    srv = start_server("--mqtt-port", "off", "--amqp-port", "off")
    assert srv.line("MQTT listening") is None and srv.line("AMQP listening") is None
    srv.stop()


@pytest.mark.parametrize("proto", ["mqtt", "amqp"])
def test_port_in_use_is_a_one_line_error_exit_2(tmp_path: Path, proto: str) -> None:
    if importlib.util.find_spec(f"oxiedge.{proto}.service") is None:
        pytest.skip(f"{proto} broker not in this build yet")
    other = "amqp" if proto == "mqtt" else "mqtt"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = _run_serve("--data", str(tmp_path / "d"), f"--{proto}-port", str(port),
                         f"--{other}-port", "off")
    assert res.returncode == 2, res.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in res.stderr
    assert "oxiedge ready" not in res.stderr
    assert "Traceback" not in res.stderr and "StartupError" not in res.stderr  # one line


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--ingest", "a/#/b:x"], {}, "a/#/b:x"),
        (["--ingest", "sensors/#:"], {}, "empty collection"),
        ([], {"OXIEDGE_MQTT_INGEST": "ok/#:fine,bad/#/x:y"}, "bad/#/x:y"),
        (["--mqtt-port", "99999"], {}, "--mqtt-port"),
        ([], {"OXIEDGE_AMQP_PORT": "five"}, "OXIEDGE_AMQP_PORT"),
        (["--bind", "nowhere"], {}, "--bind"),
        ([], {"OXIEDGE_MQTT_PERSIST": "perhaps"}, "OXIEDGE_MQTT_PERSIST"),
    ],
)
def test_bad_configuration_exits_before_listening(tmp_path: Path, args: list[str],
                                                  env: dict[str, str], needle: str) -> None:
    ports = [flag for key, flag in (("OXIEDGE_MQTT_PORT", ["--mqtt-port", "0"]),
                                    ("OXIEDGE_AMQP_PORT", ["--amqp-port", "0"])) if key not in env]
    res = _run_serve("--data", str(tmp_path / "d"), *[a for p in ports for a in p], *args, env=env)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "listening" not in res.stderr and "oxiedge ready" not in res.stderr


def test_unwritable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    res = _run_serve("--data", str(blocker / "sub"), "--mqtt-port", "0", "--amqp-port", "0")
    assert res.returncode == 2
    assert "data dir" in res.stderr and str(blocker) in res.stderr


def test_second_server_on_same_data_dir_is_refused(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = _run_serve("--data", str(server.data), "--mqtt-port", "0", "--amqp-port", "0")
    assert res.returncode == 2
    assert "in use by another oxiedge process" in res.stderr


def test_unknown_option_is_refused(tmp_path: Path) -> None:
    res = _run_serve("--data", str(tmp_path / "d"), "--no-such-flag")
    assert res.returncode != 0
    assert "no-such-flag" in res.stderr


def test_admin_socket_is_group_accessible_with_a_group_data_dir(tmp_path: Path,
                                                                 start_server) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "grp"
    data.mkdir()
    os.chmod(data, 0o750)
    srv = start_server(data=data)
    assert os.stat(srv.admin_socket).st_mode & 0o777 == 0o660

"""``oxiedge check ...`` exit codes with the server up, in alarm, hung and down (0 ok, 69
failed or no server, 75 timed out, 64 bad usage, as rabbitmq-diagnostics)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.conftest import ServerProcess, run_cli


def _check(server: ServerProcess, *args: str) -> tuple[int, str, str]:
    res = server.cli("check", *args, check=False)
    assert "Traceback" not in res.stderr
    return res.returncode, res.stdout.strip(), res.stderr.strip()


def test_checks_pass_on_a_healthy_server(server: ServerProcess) -> None:
    for name in ("running", "alarms", "durable", "quarantine", "listeners", "ports", "uplink"):
        code, out, err = _check(server, name)
        assert (code, err) == (0, ""), (name, out, err)
        assert len(out.splitlines()) == 1
    assert _check(server, "running", "--quiet") == (0, "", "")
    code, out, _ = _check(server, "listeners")
    assert f"mqtt 127.0.0.1:{server.mqtt_port}" in out
    assert f"amqp 127.0.0.1:{server.amqp_port}" in out
    # a probe sends no byte: no "connection dropped" line per check in the broker's log
    # (a client that does speak and then hangs up is still logged: test_close_handshake)
    server.cli("status")  # (a round trip: the probes' connections have ended by now)
    assert not [line for line in server.log_lines if "connection dropped" in line]


def test_checks_fail_in_an_alarm_and_for_a_stalled_uplink(server: ServerProcess) -> None:
    server.cli("limits", "--disk-free-limit", "1000TB")
    code, _out, err = _check(server, "alarms")
    assert code == 69 and "resource alarm: low on disk" in err and len(err.splitlines()) == 1
    assert _check(server, "running")[0] == 0  # (it still answers)
    server.cli("limits", "--disk-free-limit", "1MB")
    assert _check(server, "alarms")[0] == 0

    server.cli("uplink", "add", "central", "mqtt://127.0.0.1:1", "--out", "x/#")
    code, _out, err = _check(server, "uplink", "central")
    assert code == 69 and "central is " in err
    code, _out, err = _check(server, "uplink", "nowhere")
    assert code == 69 and "no uplink 'nowhere'" in err
    code, _out, err = _check(server, "uplink", "--max-lag", "soon")
    assert code == 64 and "invalid duration" in err


def test_a_hung_server_times_out_and_a_stopped_one_fails(server: ServerProcess) -> None:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        code, _out, err = _check(server, "running", "--timeout", "1")
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert code == 75 and "did not answer within 1 s" in err
    server.stop()
    code, _out, err = _check(server, "running")
    assert code == 69 and "no server is running" in err


def test_without_any_data_dir(tmp_path: Path) -> None:
    res = run_cli(tmp_path / "none", "check", "alarms")
    assert res.returncode == 69 and "no server is running" in res.stderr


def test_usage_errors_exit_64(tmp_path: Path) -> None:
    """typer's own usage errors too (they exit 2 elsewhere), as rabbitmq-diagnostics."""
    for args, words in ((("uplink", "--bogus"), "No such option"),
                        (("bogus",), "No such command"),
                        (("--bogus",), "No such option"),
                        (("running", "--timeout", "soon"), "--timeout"),
                        (("running", "extra"), "unexpected extra argument"),
                        (("uplink", "--max-lag", "soon"), "invalid duration")):
        res = run_cli(tmp_path, "check", *args)
        assert res.returncode == 64, (args, res.stderr)
        assert words in res.stderr and "Traceback" not in res.stderr
    assert run_cli(tmp_path, "check", "running", "--help").returncode == 0
    assert run_cli(tmp_path, "queue", "purge", "--bogus").returncode == 2  # (not a check)

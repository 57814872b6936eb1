"""Invalid TLS settings: ``oxiedge serve`` exits 2 before it listens, naming the bad value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import ServerProcess
from tests.tls.conftest import Pki


def _refused(start_server: Callable[..., ServerProcess], *args: str) -> str:
    srv = start_server(*args, expect_ready=False)
    assert srv.proc is not None and srv.proc.wait(timeout=30) == 2
    srv.wait_for_line("oxiedge: error", 10)
    assert not any("listening on" in ln for ln in srv.log_lines), srv.log_lines
    return " ".join(" ".join(srv.log_lines).split())  # a CLI error may be wrapped


def test_tls_port_without_certificate(start_server: Callable[..., ServerProcess]) -> None:
    text = _refused(start_server, "--mqtt-tls-port", "0")
    assert "--tls-cert" in text and "OXIEDGE_TLS_CERT" in text, text


def test_missing_certificate_and_key_files(start_server: Callable[..., ServerProcess],
                                           pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    text = _refused(start_server, "--amqp-tls-port", "0", "--tls-cert", str(missing))
    assert f"--tls-cert (OXIEDGE_TLS_CERT): cannot read {missing}" in text, text
    text = _refused(start_server, "--amqp-tls-port", "0", "--tls-cert", str(pki.cert),
                    "--tls-key", str(missing))
    assert f"--tls-key (OXIEDGE_TLS_KEY): cannot read {missing}" in text, text


def test_key_that_does_not_match_the_certificate(start_server: Callable[..., ServerProcess],
                                                 pki: Pki) -> None:
    other = pki.dir / "other.key"
    pki.ca.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other))
    text = _refused(start_server, *pki.server_args("--tls-key", str(other)))
    assert "does not match" in text and str(other) in text, text


def test_garbage_ca_and_verify_without_ca(start_server: Callable[..., ServerProcess],
                                          pki: Pki) -> None:
    text = _refused(start_server, *pki.server_args("--tls-verify-client", "required"))
    assert "--tls-verify-client required needs --tls-ca" in text, text
    bad = pki.dir / "bad-ca.pem"
    bad.write_text("not a certificate\n")
    text = _refused(start_server, *pki.server_args("--tls-ca", str(bad)))
    assert f"--tls-ca (OXIEDGE_TLS_CA) {bad}" in text, text


def test_bad_choices_via_environment(start_server: Callable[..., ServerProcess],
                                     pki: Pki) -> None:
    srv = start_server(expect_ready=False, env={
        "OXIEDGE_MQTT_TLS_PORT": "0", "OXIEDGE_TLS_CERT": str(pki.cert),
        "OXIEDGE_TLS_KEY": str(pki.key), "OXIEDGE_TLS_MIN_VERSION": "1.0"})
    assert srv.proc is not None and srv.proc.wait(timeout=30) == 2
    srv.wait_for_line("oxiedge: error", 10)
    text = " ".join(" ".join(srv.log_lines).split())
    assert "OXIEDGE_TLS_MIN_VERSION" in text and "'1.0'" in text, text


def test_environment_turns_tls_on(start_server: Callable[..., ServerProcess], pki: Pki) -> None:
    srv = start_server(env={"OXIEDGE_MQTT_TLS_PORT": "0", "OXIEDGE_AMQP_TLS_PORT": "0",
                            "OXIEDGE_TLS_CERT": str(pki.cert), "OXIEDGE_TLS_KEY": str(pki.key)})
    assert srv.mqtt_tls_port and srv.amqp_tls_port and srv.mqtt_port and srv.amqp_port
    assert srv.line("MQTT TLS listening on 127.0.0.1:") is not None


def test_combined_pem_and_tls_only_listener(start_server: Callable[..., ServerProcess],
                                            pki: Pki) -> None:
    """One PEM with certificate and key (no --tls-key); the plain MQTT port off."""
    both = pki.dir / "both.pem"
    both.write_bytes(pki.cert.read_bytes() + pki.key.read_bytes())
    srv = start_server("--mqtt-port", "off", "--mqtt-tls-port", "0", "--tls-cert", str(both))
    assert srv.mqtt_port is None and srv.mqtt_tls_port is not None

from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.auth import (
    UserFileError,
    UserStore,
    hash_password,
    is_network_address,
    read_user_file,
    write_user_file,
)
from oxiedge.login import LoginThrottle


def test_no_users_means_anonymous(tmp_path: Path) -> None:
    users = UserStore.load(tmp_path / "passwd")
    assert users.authenticate(None, None)
    assert users.authenticate("guest", b"guest")  # no users configured: any name passes


def test_users_file_roundtrip_and_checks(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    write_user_file(path, {"alice": hash_password("s3cret")})
    assert path.stat().st_mode & 0o777 == 0o600
    assert "s3cret" not in path.read_text()
    users = UserStore.load(path)
    assert users.authenticate("alice", b"s3cret")
    assert users.authenticate("alice", b"s3cret")  # cached path
    assert not users.authenticate("alice", b"wrong")
    assert not users.authenticate("bob", b"s3cret")
    assert not users.authenticate(None, None)  # users exist: anonymous refused
    assert users.failures == 3
    assert UserStore.load(path, allow_anonymous=True).authenticate(None, None)


def test_malformed_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("# users\nalice:plaintext\n")
    with pytest.raises(UserFileError, match="passwd:2"):
        read_user_file(path)


def test_network_listener_without_users_is_not_anonymous(tmp_path: Path) -> None:
    # Mosquitto 2.x's rule (issue 14, item 7): a non-loopback listener with no user refuses
    # anonymous clients unless --allow-anonymous is given explicitly.
    assert is_network_address("0.0.0.0") and is_network_address("::")
    assert is_network_address("192.168.1.20")
    assert not is_network_address("127.0.0.1") and not is_network_address("127.0.0.2")
    assert not is_network_address("::1") and not is_network_address("localhost")
    path = tmp_path / "passwd"
    net = UserStore.load(path, network=True)
    assert not net.authenticate(None, None)
    assert not net.authenticate("guest", b"guest")
    assert "refused" in net.mode() and "--allow-anonymous" in net.mode()
    opened = UserStore.load(path, allow_anonymous=True, network=True)
    assert opened.authenticate(None, None) and "WARNING" in opened.mode()
    assert UserStore.load(path, network=False).authenticate(None, None)
    # Removing the last user does not reopen a network listener.
    write_user_file(path, {"alice": hash_password("pw", iterations=1000)})
    net.reload()
    assert not net.authenticate(None, None) and net.authenticate("alice", b"pw")
    write_user_file(path, {})
    net.reload()
    assert not net.authenticate(None, None) and not net.authenticate("alice", b"pw")


def test_unknown_user_costs_a_hash(tmp_path: Path) -> None:
    # No user-name oracle: an unknown name runs PBKDF2 against a dummy hash with the same
    # iteration count as the real users.
    path = tmp_path / "passwd"
    write_user_file(path, {"alice": hash_password("pw", iterations=200_000)})
    users = UserStore.load(path)
    assert users._dummy.split("$")[1] == "200000"
    assert not users.authenticate("mallory", b"pw")
    assert not users.authenticate("alice", b"wrong")
    assert users.failures == 2


def test_login_throttle_grows_caps_forgets_and_is_bounded() -> None:
    now = [1000.0]
    t = LoginThrottle(max_delay=2.0, max_entries=3, clock=lambda: now[0])
    assert t.delay("10.0.0.1", "alice") == 0.0
    delays = []
    for _ in range(8):
        t.failed("10.0.0.1", "alice")
        delays.append(t.delay("10.0.0.1", "alice"))
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    # Per user name: the same name from another address is slowed ...
    assert t.delay("10.0.0.9", "alice") == 2.0
    # ... but not another name from the same address (a neighbour of a misconfigured
    # worker, or a client behind the same NAT), nor anyone else.
    assert t.delay("10.0.0.1", "bob") == 0.0
    assert t.delay("10.0.0.9", "bob") == 0.0
    # A success clears the user name and the pair.
    t.succeeded("10.0.0.1", "alice")
    assert t.delay("10.0.0.9", "alice") == 0.0 and t.delay("10.0.0.1", "alice") == 0.0
    # Forgotten after a quiet period.
    t.failed("10.0.0.1", "alice")
    now[0] += 601
    assert t.delay("10.0.0.1", "alice") == 0.0
    # The tables are bounded: the least recently failed is evicted, and counted.
    for i in range(10):
        t.failed(f"10.0.1.{i}", f"user{i}")
    assert len(t.sources) == 3 and len(t.users) == 3 and len(t.pairs) == 3
    assert t.evicted >= 21
    assert LoginThrottle(max_delay=0).delay("x", "y") == 0.0


def test_an_address_trying_many_names_is_slowed_for_every_name() -> None:
    now = [1000.0]
    t = LoginThrottle(max_delay=2.0, clock=lambda: now[0])
    t.failed("10.0.0.5", "alice")
    t.failed("10.0.0.5", "bob")
    assert t.delay("10.0.0.5", "carol") == 0.0  # two names: could be two workers
    t.failed("10.0.0.5", "carol")  # the third name: a spray
    assert t.delay("10.0.0.5", "dave") == 0.4  # 3 failures from the address
    # A success of one of its accounts does not reset the address's penalty.
    t.succeeded("10.0.0.5", "alice")
    assert t.delay("10.0.0.5", "erin") == 0.4
    assert t.delay("10.0.0.6", "erin") == 0.0  # other addresses are not concerned


def test_connection_limits_count_sources() -> None:
    from oxiedge.connections import ConnectionLimits

    limits = ConnectionLimits(max_total=3, max_per_source=2)
    assert limits.admit("10.0.0.1") is None and limits.admit("10.0.0.1") is None
    assert "per-source" in (limits.admit("10.0.0.1") or "")
    assert limits.admit("10.0.0.2") is None
    assert "--max-connections 3" in (limits.admit("10.0.0.3") or "")
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.3") is None
    status = limits.status()
    assert status["open"] == 3 and status["peak"] == 3 and status["sources"] == 3
    assert status["refused_max_connections"] == 1 and status["refused_max_per_source"] == 1
    for source in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        limits.release(source)
    assert limits.status()["open"] == 0 and limits.by_source == {}

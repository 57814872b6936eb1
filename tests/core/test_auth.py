from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.auth import UserFileError, UserStore, hash_password, read_user_file, write_user_file


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

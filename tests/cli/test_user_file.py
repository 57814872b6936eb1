"""The password file has one writer (``auth.editing_user_file``): ``oxiedge user add``, the
HTTP API's user writes and the definitions import, at the same time, in the server and in
CLI processes, lose no user."""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from oxiedge.auth import UserFileError, hash_password, put_user, read_user_file, remove_user
from tests.conftest import ServerProcess, clean_env, run_cli

#: A cheap stored hash (the import and the HTTP API take hashes as they are).
HASH = hash_password("pw", iterations=1000)


def test_threads_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "passwd"

    def writer(t: int) -> None:
        for i in range(20):
            put_user(path, f"t{t}-{i}", HASH)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(read_user_file(path)) == 120
    assert put_user(path, "t0-0", HASH) is False  # (replaced, not added)
    assert remove_user(path, "t0-0") is True and remove_user(path, "t0-0") is False
    assert len(read_user_file(path)) == 119


def _put_over_http(port: int, name: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    auth = base64.b64encode(b"admin:admin-pw").decode()
    conn.request("PUT", f"/api/users/{name}", json.dumps({"password_hash": HASH, "tags": ""}),
                 {"Authorization": f"Basic {auth}", "Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return status


def test_cli_http_and_import_at_once_lose_no_user(
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    data = tmp_path / "data"
    res = run_cli(data, "user", "add", "admin", "--password-stdin", "--tags", "administrator",
                  input="admin-pw\n")
    assert res.returncode == 0, res.stderr
    server = start_server("--http-port", "0", data=data)
    assert server.http_port is not None
    n = 6
    doc = {"users": [{"name": f"d{i}", "password_hash": HASH, "tags": []} for i in range(n)]}
    (tmp_path / "defs.json").write_text(json.dumps(doc))
    env = {**clean_env(), "COLUMNS": "200"}
    procs = [subprocess.Popen([sys.executable, "-m", "oxiedge", "user", "add", f"c{i}",
                               "--password-stdin", "--data", str(data)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for i in range(n)]
    procs.append(subprocess.Popen([sys.executable, "-m", "oxiedge", "definitions", "import",
                                   str(tmp_path / "defs.json"), "--data", str(data)], env=env,
                                  text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE))
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda i=i: statuses.append(
        _put_over_http(server.http_port or 0, f"h{i}"))) for i in range(n)]
    for th in threads:
        th.start()
    outs = [p.communicate("pw\n", timeout=120) for p in procs]
    for th in threads:
        th.join()
    assert [p.returncode for p in procs] == [0] * (n + 1), outs
    assert statuses == [201] * n
    want = {"admin"} | {f"{k}{i}" for k in "cdh" for i in range(n)}
    assert set(read_user_file(data / "passwd")) == want
    listed = server.cli("user", "list", "--json").stdout.splitlines()
    assert {json.loads(line)["user"] for line in listed} == want


def test_a_name_that_would_break_the_file_is_refused_by_every_writer(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    put_user(path, "alice", HASH)
    for bad in ("a\nb", "a\u2028b", "a:b", " a", "#a", ""):
        try:
            put_user(path, bad, HASH)
        except UserFileError as exc:
            assert "user name" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was written")
    assert read_user_file(path) == {"alice": HASH}  # the file still reads, unchanged
    res = run_cli(tmp_path / "data", "user", "add", "a\u2028b", "--password-stdin", input="pw\n")
    assert res.returncode == 2 and "user name" in res.stderr + res.stdout

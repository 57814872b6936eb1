"""Smoke test of the benchmark harness: every scenario, a tiny count, a real oxiedge server.

Not a performance test: it keeps ``bench/`` from rotting as the brokers change.  A scenario
whose feature is not there yet (e.g. the MQTT→AMQP bridge) is skipped with the harness's
own reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.brokers import Target, mosquitto_exe
from bench.result import Options, Skip
from bench.run import SCENARIOS

REPO = Path(__file__).resolve().parents[2]

TINY = Options(count=300, duration=3.0, fanout=3, connections=2, drain_count=300,
               latency_count=30, rate=500.0, idle_timeout=3.0)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_runs_against_oxiedge(server: Any, scenario: str) -> None:
    target = Target(
        "oxiedge",
        mqtt=("127.0.0.1", server.mqtt_port) if server.mqtt_port else None,
        amqp=("127.0.0.1", server.amqp_port) if server.amqp_port else None,
        pid=server.proc.pid,
    )
    fn = SCENARIOS[scenario][0]
    try:
        r = fn(target, TINY)
    except Skip as e:
        pytest.skip(str(e))
    assert r.skipped is None
    assert r.count > 0, r
    assert r.lost == 0, r
    assert r.value > 0 and r.elapsed > 0, r
    # Broker CPU and RSS come from /proc of the server process.
    assert r.cpu_s is not None and r.cpu_s >= 0
    assert r.rss_mb is not None and r.rss_mb > 5
    if not r.higher_better:
        assert r.p50_ms is not None and r.p99_ms is not None
        assert 0 < r.p50_ms <= r.p99_ms


@pytest.mark.timeout(60)
def test_cli_starts_oxiedge_interleaves_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "res.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--broker", "oxiedge", "-s", "mqtt-qos1",
         "-s", "amqp-confirm-1", "--count", "300", "--duration", "3", "--repeats", "2",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Medians of 2 interleaved run(s)" in proc.stdout
    data = json.loads(out.read_text())
    ran = [r for r in data["runs"] if r["skipped"] is None]
    assert ran, proc.stdout
    assert all(r["count"] > 0 for r in ran)
    assert {m["scenario"] for m in data["medians"]} == {"mqtt-qos1", "amqp-confirm-1"}


@pytest.mark.timeout(60)
def test_placements_give_one_row_each_and_pin_the_broker(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the cross placement needs two CPUs")
    out = tmp_path / "res.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--broker", "oxiedge", "-s", "mqtt-qos1-seq",
         "--latency-count", "200", "--repeats", "1", "--placements", "same,cross",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {m["scenario"] for m in data["medians"]}
    assert rows == {"mqtt-qos1-seq @same", "mqtt-qos1-seq @cross"}
    assert all(m["count"] == 200 for m in data["medians"])
    assert "| mqtt-qos1-seq @cross |" in proc.stdout


def test_free_placement_keeps_the_given_pinning() -> None:
    """``--placements free`` used to unpin what ``--cpus`` / ``--client-cpus`` had pinned."""
    from bench.run import placement_masks

    assert placement_masks("free", "", "") == (None, None)
    assert placement_masks("free", "0", "1-2") == ({0}, {1, 2})
    assert placement_masks("same", "3", "4") == ({0}, {0})  # fixed placements win
    assert placement_masks("cross", "", "") == ({0}, {1})


def test_place_pins_every_thread_of_a_process_tree() -> None:
    from bench.run import place

    every = os.sched_getaffinity(0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        place([child.pid], {min(every)}, None, every)
        tasks = os.listdir(f"/proc/{child.pid}/task")
        assert tasks and all(os.sched_getaffinity(int(t)) == {min(every)} for t in tasks)
        assert os.sched_getaffinity(0) == every  # this process: unpinned
        place([child.pid], None, None, every)
        assert os.sched_getaffinity(child.pid) == every
    finally:
        child.kill()
        child.wait()


def test_started_brokers_run_in_their_own_session() -> None:
    """Each broker the benches start is its own session - its own scheduling autogroup, as
    under systemd - never the load generator's (``brokers.popen_broker``)."""
    from bench import brokers

    st = brokers.start_oxiedge(["--amqp-port", "off"])
    try:
        pid = st.target.pid
        assert pid is not None
        assert os.getsid(pid) == pid != os.getsid(0)
    finally:
        st.stop()
    if os.path.exists(mosquitto_exe()):
        m = brokers.start_mosquitto()
        try:
            assert m.target.pid is not None and os.getsid(m.target.pid) == m.target.pid
        finally:
            m.stop()


@pytest.mark.timeout(30)
def test_store_bench_runs_every_variant(tmp_path: Path) -> None:
    from bench import store_bench

    out = tmp_path / "store.json"
    store_bench.main(["--seconds", "0.1", "--repeats", "1", "--dir", str(tmp_path),
                      "--json", str(out)])
    data = json.loads(out.read_text())
    assert set(data["medians"]) == {name for name, _ in store_bench.VARIANTS}
    for name, m in data["medians"].items():
        assert m["docs_s"] > 0, name
    # The group committer shares rounds: 64 writers must put many documents in one sync.
    assert data["medians"]["store.insert, 64 writers"]["docs_per_commit"] > 8
    assert data["ratio_64_vs_put_sync"] > 0


@pytest.mark.timeout(60)
def test_memory_measures_rss_and_restart(tmp_path: Path) -> None:
    out = tmp_path / "mem.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--broker", "oxiedge", "--clients", "20",
         "--queued", "300", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (r,) = json.loads(out.read_text())["results"]
    assert r["rss_idle_mb"] > 5 and r["rss_clients_mb"] > 5
    if "queued" in r:
        assert r["queued"] == 300
        # Recovery after SIGKILL reports the pending messages it found.
        assert any("300" in line for line in r["log_after_sigkill"]), r
    assert 0 < r["ready_after_sigkill_s"] < 30


@pytest.mark.timeout(120)
def test_uplink_bench_forwards_every_message(tmp_path: Path) -> None:
    """oxiedge's uplink and Mosquitto's bridge, a tiny run: both deliver everything."""
    if not Path(mosquitto_exe()).exists():
        pytest.skip("mosquitto (Debian package) is not installed")
    out = tmp_path / "uplink"
    r = subprocess.run([sys.executable, "-m", "bench.uplink_bench", "--messages", "2000",
                        "--repeats", "1", "--out", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=110)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = (tmp_path / "uplink.txt").read_text()
    assert "oxiedge" in text and "mosquitto" in text
    runs = json.loads((tmp_path / "uplink.json").read_text())["runs"]
    assert {(r["peer"], r["scenario"]) for r in runs} == {
        (p, s) for p in ("oxiedge", "mosquitto") for s in ("live", "backlog")}
    for r in runs:
        assert r["missing"] == 0 and r["unique"] == 2000 and not r["error"], r


@pytest.mark.timeout(120)
def test_backlog_bench_runs() -> None:
    """``python -m bench.backlog`` end to end with a tiny backlog (fill, SIGKILL, drain)."""
    out = subprocess.run([sys.executable, "-m", "bench.backlog", "--messages", "500"],
                         cwd=REPO, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("{"))
    r = json.loads(line)
    assert r["filled"] == r["drained"] == 500, r
    assert r["recovered"] == ["MQTT persistence on - recovered 1 sessions, 500 pending messages"]

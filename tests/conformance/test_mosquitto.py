"""Opt-in: Mosquitto's own broker tests (MQTT 3.1.1 parts, and with their MQTT 5 parts) against
oxiedge must not regress.

Runs ``run_mosquitto.py`` (which archives the pinned ``test/`` tree of eclipse/mosquitto
into its cache and builds a small virtualenv there: ``slow``, out of the default run) and
compares with ``tests/conformance/mosquitto_results.json``: no script that passed there may
fail now, except the listed known differences. Run with
``pytest -m slow tests/conformance/test_mosquitto.py``; the clone is found at
``$OXIEDGE_MOSQUITTO_GIT`` (default: where the ``fetch`` tool puts eclipse/mosquitto).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance import mosquitto_suite as suite
from tests.conformance.run_mosquitto import (
    DEFAULT_CACHE,
    DEFAULT_GIT,
    REPO,
    RESULTS5_JSON,
    RESULTS_JSON,
    tree,
)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_mosquitto_broker_tests_not_below_baseline(tmp_path: Path) -> None:
    if not (DEFAULT_GIT / "HEAD").exists() and not (tree(DEFAULT_CACHE) / "test").exists():
        pytest.skip(f"no eclipse/mosquitto clone at {DEFAULT_GIT} (OXIEDGE_MOSQUITTO_GIT)")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.run_mosquitto",
                           "--json", str(out), "--no-doc"], cwd=REPO, capture_output=True,
                          text=True, timeout=1700)  # fmt: skip
    assert out.exists(), f"no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}" \
                         f"\n{proc.stderr[-3000:]}"
    got = json.loads(out.read_text())
    base = json.loads(RESULTS_JSON.read_text())
    assert got["commit"] == base["commit"] == suite.COMMIT
    regressed = sorted(set(base["passes"]) - set(got["passes"]) - set(suite.FLAKY))
    assert not regressed, f"passed in the baseline, fail now: {regressed}\n" + "\n".join(
        f"{s}: {got['failures'].get(s, '')}" for s in regressed)
    unexplained = sorted(set(got["failures"]) - set(suite.KNOWN_DIFFERENCES) - set(suite.FLAKY))
    assert not unexplained, f"failing without a known reason: {unexplained}"
    assert got["passed"] >= base["passed"]


def test_mosquitto_baseline_is_for_the_pinned_commit() -> None:
    """mosquitto_results.json was recorded at the pinned commit and every failure in it
    is a known difference (documented in docs/conformance.md)."""
    base = json.loads(RESULTS_JSON.read_text())
    assert base["commit"] == suite.COMMIT
    assert set(base["failures"]) <= {*suite.KNOWN_DIFFERENCES, *suite.FLAKY}, \
        base["failures"].keys()
    assert not set(base["passes"]) & set(suite.excluded())


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_mosquitto_mqtt5_broker_tests_not_below_baseline(tmp_path: Path) -> None:
    """The same for ``run_mosquitto --v5`` (every script with its MQTT 5 parts) against
    ``mosquitto5_results.json``, its failures explained by ``KNOWN5``."""
    if not (DEFAULT_GIT / "HEAD").exists() and not (tree(DEFAULT_CACHE, True) / "test").exists():
        pytest.skip(f"no eclipse/mosquitto clone at {DEFAULT_GIT} (OXIEDGE_MOSQUITTO_GIT)")
    out = tmp_path / "results5.json"
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.run_mosquitto", "--v5",
                           "--json", str(out), "--no-doc"], cwd=REPO, capture_output=True,
                          text=True, timeout=2300)  # fmt: skip
    assert out.exists(), f"no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    got = json.loads(out.read_text())
    base = json.loads(RESULTS5_JSON.read_text())
    regressed = sorted(set(base["passes"]) - set(got["passes"]) - set(suite.FLAKY))
    assert not regressed, regressed
    assert not sorted(set(got["failures"]) - set(suite.KNOWN5) - set(suite.FLAKY))


def test_mosquitto_mqtt5_baseline_failures_are_explained() -> None:
    base = json.loads(RESULTS5_JSON.read_text())
    assert base["commit"] == suite.COMMIT
    assert set(base["failures"]) <= {*suite.KNOWN5, *suite.FLAKY}, base["failures"].keys()
    assert not set(base["passes"]) & set(suite.excluded(True))

"""Opt-in: paho.mqtt.testing's MQTT 3.1.1 interoperability tests against oxiedge must not
regress.

Runs ``run_paho.py`` (the pinned ``interoperability/`` tree archived from the clone the
``fetch`` tool made, ``$OXIEDGE_PAHO_TESTING_GIT``; about a minute: ``slow``, out of the
default run) and compares with ``tests/conformance/paho_results.json``: every test that
passed there passes now, and nothing fails without a known reason. Run with
``pytest -m slow tests/conformance/test_paho.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.run_paho import (
    COMMIT,
    DEFAULT_CACHE,
    DEFAULT_GIT,
    EXCLUSIONS,
    KNOWN5,
    KNOWN_DIFFERENCES,
    REPO,
    RESULTS5_JSON,
    RESULTS_JSON,
    tree,
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_paho_interop_tests_not_below_baseline(tmp_path: Path) -> None:
    cached = tree(DEFAULT_CACHE) / "interoperability" / "client_test.py"
    if not (DEFAULT_GIT / "HEAD").exists() and not cached.exists():
        pytest.skip(f"no eclipse/paho.mqtt.testing clone at {DEFAULT_GIT} "
                    "(OXIEDGE_PAHO_TESTING_GIT)")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.run_paho", "--json",
                           str(out), "--no-doc"], cwd=REPO, capture_output=True, text=True,
                          timeout=850)
    assert out.exists(), f"no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}" \
                         f"\n{proc.stderr[-3000:]}"
    got = json.loads(out.read_text())
    base = json.loads(RESULTS_JSON.read_text())
    assert got["status"] == "ok", got["detail"]
    assert got["commit"] == base["commit"] == COMMIT
    regressed = sorted(set(base["passes"]) - set(got["passes"]))
    assert not regressed, f"passed in the baseline, fail now: {regressed}\n" + "\n".join(
        f"{t}: {got['failures'].get(t, '')}" for t in regressed)
    assert not set(got["failures"]) - set(KNOWN_DIFFERENCES), got["failures"]
    # The denied-filter case runs with a configured ACL and passes (issue 16).
    assert "test_subscribe_failure" in got["passes"]


def test_paho_baseline_is_for_the_pinned_commit() -> None:
    """paho_results.json was recorded at the pinned commit with every test collected run."""
    base = json.loads(RESULTS_JSON.read_text())
    assert base["commit"] == COMMIT
    assert base["collected"] == base["passed"] + base["failed"] + base["excluded"]
    assert base["excluded"] == len(EXCLUSIONS)
    assert set(base["failures"]) <= set(KNOWN_DIFFERENCES)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_paho_mqtt5_interop_tests_not_below_baseline(tmp_path: Path) -> None:
    """The same for ``client_test5.py`` (``run_paho --v5``, ``paho5_results.json``): every
    failure has a reason in ``KNOWN5`` (none: all 27 pass), and every test the baseline
    passes passes again."""
    cached = tree(DEFAULT_CACHE) / "interoperability" / "client_test5.py"
    if not (DEFAULT_GIT / "HEAD").exists() and not cached.exists():
        pytest.skip(f"no eclipse/paho.mqtt.testing clone at {DEFAULT_GIT}")
    out = tmp_path / "results5.json"
    subprocess.run([sys.executable, "-m", "tests.conformance.run_paho", "--v5", "--json",
                    str(out), "--no-doc"], cwd=REPO, capture_output=True, text=True,
                   timeout=850)
    got = json.loads(out.read_text())
    base = json.loads(RESULTS5_JSON.read_text())
    assert got["status"] == "ok", got["detail"]
    regressed = sorted(set(base["passes"]) - set(got["passes"]))
    assert not regressed, regressed
    assert not set(got["failures"]) - set(KNOWN5), got["failures"]


def test_paho_mqtt5_baseline_failures_are_explained() -> None:
    base = json.loads(RESULTS5_JSON.read_text())
    assert base["commit"] == COMMIT and base["collected"] == 27
    assert set(base["failures"]) <= set(KNOWN5)

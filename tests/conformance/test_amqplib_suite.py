"""Opt-in: amqplib's own channel and callback API tests against oxiedge must not regress.

Runs ``run_amqplib.py`` (the pinned amqp-node/amqplib tree archived from the clone the
``fetch`` tool made, ``$OXIEDGE_AMQPLIB_GIT``; node needed): ``slow``, out of the default
run. Compares with ``tests/conformance/amqplib_results.json``: every test that passed there
passes now, and nothing fails. Run with ``pytest -m slow tests/conformance/test_amqplib_suite.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.run_amqplib import (
    COMMIT,
    DEFAULT_CACHE,
    DEFAULT_GIT,
    EXCLUSIONS,
    REPO,
    RESULTS_JSON,
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_amqplib_api_tests_pass(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is needed for amqplib's tests")
    cached = DEFAULT_CACHE / f"amqplib-{COMMIT[:12]}" / "package.json"
    if not (DEFAULT_GIT / "HEAD").exists() and not cached.exists():
        pytest.skip(f"no amqp-node/amqplib clone at {DEFAULT_GIT} (OXIEDGE_AMQPLIB_GIT)")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.run_amqplib", "--json",
                           str(out), "--no-doc"], cwd=REPO, capture_output=True, text=True,
                          timeout=850)
    assert out.exists(), f"no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}" \
                         f"\n{proc.stderr[-3000:]}"
    got = json.loads(out.read_text())
    base = json.loads(RESULTS_JSON.read_text())
    assert got["status"] == "ok", got["detail"]
    assert got["failures"] == {}, got["failures"]
    assert not set(base["passes"]) - set(got["passes"])
    assert got["excluded"] == 2 * len(EXCLUSIONS)


def test_amqplib_baseline_is_for_the_pinned_commit() -> None:
    """amqplib_results.json was recorded at the pinned commit, with both files run."""
    base = json.loads(RESULTS_JSON.read_text())
    assert base["commit"] == COMMIT
    assert set(base["per_file"]) == {"channel_api.test.js", "callback_api.test.js"}
    assert all(c["passed"] > 0 for c in base["per_file"].values())

"""Opt-in: the client libraries' own suites against oxiedge must not lose passing tests.

Runs ``run_suites.py`` (which downloads sdists from PyPI and builds virtualenvs in its cache,
so it is ``slow`` and out of the default run) into a temporary results file, then compares
each suite's pass count with the baseline recorded in ``tests/conformance/results.json``.
Run with ``pytest -m slow tests/conformance``; one suite: ``OXIEDGE_CONFORMANCE_SUITE=kombu``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conformance.run_suites import REPO, RESULTS_JSON
from tests.conformance.suites import SUITES, by_name


def _baseline() -> dict[str, dict[str, object]]:
    """The recorded per-suite results (empty when results.json was never written)."""
    if not RESULTS_JSON.exists():
        return {}
    suites: dict[str, dict[str, object]] = json.loads(RESULTS_JSON.read_text())["suites"]
    return suites


BASELINE = _baseline()
_ONLY = os.environ.get("OXIEDGE_CONFORMANCE_SUITE")
#: Whole-run bound: every suite's own timeout plus set-up (venv builds on a cold cache).
RUN_TIMEOUT_S = 2 * 3600


@pytest.fixture(scope="module")
def fresh_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """One run of the selected suites against a fresh server, as results.json-shaped data."""
    out = tmp_path_factory.mktemp("conformance") / "results.json"
    cmd = [sys.executable, "-m", "tests.conformance.run_suites", "--json", str(out), "--no-doc"]
    for s in SUITES:
        if _ONLY is None or s.name == _ONLY:
            cmd += ["--suite", s.name]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert out.exists(), f"run_suites wrote no results (exit {proc.returncode}):\n" \
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    suites: dict[str, dict[str, object]] = json.loads(out.read_text())["suites"]
    return suites


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("name", [s.name for s in SUITES if _ONLY is None or s.name == _ONLY])
def test_suite_pass_count_not_below_baseline(
    name: str, fresh_results: dict[str, dict[str, object]]
) -> None:
    """A suite ran to completion and passed at least as many tests as the baseline."""
    got = fresh_results[name]
    assert got["status"] == "ok", f"{name}: {got['status']}: {got['detail']}"
    assert name in BASELINE, f"no baseline for {name} in {RESULTS_JSON}"
    baseline = BASELINE[name]
    passed, floor = int(str(got["passed"])), int(str(baseline["passed"]))
    newly_failing = sorted({str(f["test"]) for f in got["failures"]}  # type: ignore[attr-defined]
                           - {str(f["test"]) for f in baseline["failures"]})  # type: ignore[attr-defined]
    # Known client-side races may fail this time although they passed in the baseline run.
    flaky = [t for t in newly_failing if any(re.search(p, t) for p in by_name(name).flaky)]
    assert passed + len(flaky) >= floor, (
        f"{name}: {passed} passed, baseline {floor} (flaky forgiven: {len(flaky)}); "
        f"newly failing: {newly_failing[:20]}")


def test_baseline_covers_every_suite() -> None:
    """results.json has an entry for each configured suite at its pinned version."""
    for s in SUITES:
        assert s.name in BASELINE, f"no baseline for {s.name}: run run_suites.py"
        assert BASELINE[s.name]["version"] == s.version, f"{s.name}: baseline is for another pin"


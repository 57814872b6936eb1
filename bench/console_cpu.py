"""What one open browser on the console costs the broker: CPU and RSS (docs/console.md, "Cost").

``python -m bench.console_cpu --seconds 120 --rounds 2``: starts ``oxiedge serve`` with the
HTTP listener (no users: the loopback's anonymous administrator, so no login is involved),
then alternates, ``--rounds`` times, a window with no browser and a window with Debian's
headless Chromium keeping ``--page`` open (its script fetches the live part every 5 s, as a
person's browser would). For each window it reads the broker's CPU time (user + system,
``/proc/PID/stat``) and prints it as a share of one core, and the broker's RSS at its end. The
broker samples its rate history every 5 s in both windows (from start-up), so the difference
is what the browser costs. Chromium's own CPU is not counted: it is the client's.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import urllib.request

from bench.brokers import free_port, start_oxiedge
from bench.procstat import cpu_seconds, rss_bytes, tree


def _window(pid: int, seconds: float) -> tuple[float, int]:
    pids = tree(pid)
    t0, c0 = time.monotonic(), cpu_seconds(pids)
    time.sleep(seconds)
    share = (cpu_seconds(pids) - c0) / (time.monotonic() - t0)
    return share, rss_bytes(pids)


def _browser(url: str) -> object:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='bench-chromium-')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"),
                              options=options)
    driver.get(url)
    return driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--page", default="/")
    a = ap.parse_args()
    port = free_port()
    srv = start_oxiedge(["--http-port", str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200
        pid = srv.target.pid
        assert pid is not None
        time.sleep(5)
        print(f"idle, no page served yet: RSS {rss_bytes(tree(pid)) / 1e6:.1f} MB")
        for _ in range(a.rounds):
            share, rss = _window(pid, a.seconds)
            print(f"no browser: {share * 100:.2f} % of one core over {a.seconds:.0f} s, "
                  f"RSS {rss / 1e6:.1f} MB")
            driver = _browser(base + a.page)
            try:
                share, rss = _window(pid, a.seconds)
            finally:
                driver.quit()  # type: ignore[attr-defined]
            print(f"one browser on {a.page}: {share * 100:.2f} % of one core over "
                  f"{a.seconds:.0f} s, RSS {rss / 1e6:.1f} MB")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()

"""The console in a real browser: Debian's headless Chromium driven by selenium (nothing
downloads a browser). It loads the overview, sees the rate move after MQTT publishes, purges
a queue with its button (answering the confirmation), and checks a screenshot of each page
is not blank. Skipped, saying why, where ``chromium`` / ``chromedriver`` or selenium are
missing (``.ci/run`` installs the Debian packages)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from tests.conftest import ServerProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no headless browser: install Debian's chromium and chromium-driver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install -e '.[test]')")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: The flags that keep Chromium from waiting on a network this machine does not have.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1100,900")
#: A blank page's PNG is a few hundred bytes; a rendered console page is tens of KB.
MIN_SCREENSHOT = 8000
#: OXIEDGE_CONSOLE_SHOTS=DIR keeps the screenshots (docs/console/ holds the README's).
SHOTS = os.environ.get("OXIEDGE_CONSOLE_SHOTS")


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


def _wait(driver: Any, what: Callable[[Any], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(what)


def _shot(driver: Any, name: str, tmp_path: Path) -> None:
    png = driver.get_screenshot_as_png()
    assert len(png) > MIN_SCREENSHOT, f"{name}: the screenshot looks blank"
    for where in (tmp_path, Path(SHOTS) if SHOTS else None):
        if where is not None:
            where.mkdir(parents=True, exist_ok=True)
            (where / f"{name}.png").write_bytes(png)


def _publish(port: int, count: int) -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="browser-test-pub")
    client.connect("127.0.0.1", port)
    client.loop_start()
    for i in range(count):
        client.publish("sensors/a", f'{{"t": {20 + i % 7}}}', qos=1).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def test_console_in_chromium(http_server: ServerProcess, browser: Any, tmp_path: Path
                             ) -> None:
    srv = http_server
    assert srv.http_port and srv.mqtt_port
    base = f"http://127.0.0.1:{srv.http_port}"
    srv.cli("ingest", "add", "sensors/#:readings")
    srv.cli("queue", "declare", "work")
    for i in range(5):
        srv.cli("publish", "-k", "work", "-m", f"job {i}")

    # The overview updates itself: publishes show as a rate without a reload.
    browser.get(base + "/")
    assert browser.find_element(By.ID, "stat-mqtt-in").text.endswith("0")
    _publish(srv.mqtt_port, 40)
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#stat-mqtt-in b").text
          not in ("0", "0.0"))
    assert browser.find_elements(By.CSS_SELECTOR, "#live svg polyline, #live svg circle")
    _shot(browser, "overview", tmp_path)

    # The purge button asks first, then posts its form; the page comes back with a notice.
    browser.get(base + "/queues/work")
    form = browser.find_element(By.CSS_SELECTOR, 'form[data-confirm] input[value="queue.purge"]'
                                ).find_element(By.XPATH, "./..")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, lambda d: d.switch_to.alert).accept()
    notice = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".notice"))
    assert "queue.purge work: done" in notice.text
    rows = srv.cli("queues", "--json").stdout
    assert '"ready": 0' in rows.split('"work"', 1)[1].split("\n", 1)[0]

    # Every page renders, with its chart where it has one.
    pages = {"collection": "/collections/readings?field=t", "sessions": "/mqtt/sessions",
             "retained": "/mqtt/retained", "queues": "/queues", "exchanges": "/exchanges",
             "connections": "/connections", "collections": "/collections",
             "uplinks": "/uplinks", "users": "/users", "queue": "/queues/work"}
    for name, path in pages.items():
        browser.get(base + path)
        assert browser.find_element(By.TAG_NAME, "h1").text
        if name == "collection":
            assert browser.find_elements(By.CSS_SELECTOR, "#live polyline")
        _shot(browser, name, tmp_path)
    browser.set_window_size(390, 844)  # a phone: the table rows become cards
    browser.get(base + "/queues")
    time.sleep(0.2)
    _shot(browser, "queues-phone", tmp_path)

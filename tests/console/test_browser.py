"""The console in a real browser: Debian's headless Chromium driven by selenium (nothing
downloads a browser). It logs in through the form, sees the overview's rate and the
collection chart move while ``mosquitto_pub`` publishes, purges a queue with its button
(answering the confirmation), logs in as a monitoring user and finds no button (and its
forged posts refused), checks a hostile topic name shows as text, and checks a screenshot of
every page is not blank. Skipped, saying why, where ``chromium`` / ``chromedriver``,
``mosquitto_pub`` or selenium are missing (``.ci/run`` installs the Debian packages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
MOSQUITTO_PUB = shutil.which("mosquitto_pub")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason="no headless browser: "
                       "install Debian's chromium and chromium-driver"),
    pytest.mark.skipif(MOSQUITTO_PUB is None, reason="no mosquitto_pub: install Debian's "
                       "mosquitto-clients")]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install -e '.[test]')")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
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
        driver.set_script_timeout(20)
        try:
            yield driver
        finally:
            driver.quit()


def _wait(driver: Any, what: Callable[[Any], Any], timeout: float = 30) -> Any:
    # (a live update replaces the element a check was reading: look again next poll)
    return WebDriverWait(driver, timeout, poll_frequency=0.25,
                         ignored_exceptions=(StaleElementReferenceException,)).until(what)


def _shot(driver: Any, name: str, tmp_path: Path) -> None:
    png = driver.get_screenshot_as_png()
    assert len(png) > MIN_SCREENSHOT, f"{name}: the screenshot looks blank"
    for where in (tmp_path, Path(SHOTS) if SHOTS else None):
        if where is not None:
            where.mkdir(parents=True, exist_ok=True)
            (where / f"{name}.png").write_bytes(png)


#: A topic that would run a script if a page wrote it unescaped.
HOSTILE = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'
ADMIN = ("admin", "admin-pw")
WATCHER = ("watcher", "watcher-pw")


def _mosquitto_pub(port: int, topic: str, messages: list[str], every: float = 0.0,
                   retain: bool = False) -> None:
    """Publish ``messages`` with Debian's ``mosquitto_pub`` (one connection, a line each)."""
    args = [str(MOSQUITTO_PUB), "-h", "127.0.0.1", "-p", str(port), "-u", ADMIN[0], "-P",
            ADMIN[1], "-q", "1", "-t", topic, "-l"] + (["-r"] if retain else [])
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    for line in messages:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        time.sleep(every)
    proc.stdin.close()
    assert proc.wait(30) == 0


def _readings(port: int, count: int, every: float) -> threading.Thread:
    """``count`` readings of ``sensors/a`` over ``count * every`` seconds, in a thread."""
    lines = [f'{{"t": {20 + i % 7}}}' for i in range(count)]
    worker = threading.Thread(target=_mosquitto_pub, args=(port, "sensors/a", lines, every),
                              daemon=True)
    worker.start()
    return worker


def _login(driver: Any, base: str, who: tuple[str, str], path: str = "/") -> None:
    driver.get(base + path)  # not logged in: the browser is sent to the form
    _wait(driver, lambda d: "/console/login" in d.current_url)
    driver.find_element(By.NAME, "user").send_keys(who[0])
    driver.find_element(By.NAME, "password").send_keys(who[1])
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    _wait(driver, lambda d: d.current_url.split("?")[0] == base + path.split("?")[0])
    assert driver.find_element(By.CSS_SELECTOR, "header form button").text == "Log out"


def _post_from_page(driver: Any, path: str, body: str) -> int:
    """A fetch from the page the browser shows, as a script on it would send (the session
    cookie goes along); the answer's status."""
    return int(driver.execute_script(
        "const x = new XMLHttpRequest(); x.open(arguments[1], arguments[0], false);"
        "x.setRequestHeader('content-type', 'application/x-www-form-urlencoded');"
        "x.send(arguments[2]); return x.status;",
        path, "DELETE" if path.startswith("/api/") else "POST", body))


def _points(driver: Any) -> int:
    """How many readings the collection chart draws (points of its line, or its dot)."""
    lines = driver.find_elements(By.CSS_SELECTOR, "#live svg polyline")
    if lines:
        return len((lines[0].get_attribute("points") or "").split())
    return len(driver.find_elements(By.CSS_SELECTOR, "#live svg circle"))


def test_console_in_chromium(users_server: ServerProcess, browser: Any, tmp_path: Path
                             ) -> None:
    srv = users_server
    assert srv.http_port and srv.mqtt_port
    base = f"http://127.0.0.1:{srv.http_port}"
    srv.cli("ingest", "add", "sensors/#:readings")
    srv.cli("queue", "declare", "work")
    for i in range(5):
        srv.cli("publish", "-k", "work", "-m", f"job {i}")
    _mosquitto_pub(srv.mqtt_port, HOSTILE, ["retained"], retain=True)
    _mosquitto_pub(srv.mqtt_port, "sensors/a", ['{"t": 19}'])

    # The login form (the page asked for first comes back after it).
    browser.get(base + "/")
    _wait(browser, lambda d: "/console/login" in d.current_url)
    _shot(browser, "login", tmp_path)
    browser.find_element(By.NAME, "user").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("wrong")
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    assert "Login failed" in _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR,
                                                                     ".notice")).text
    _login(browser, base, ADMIN)

    # The overview updates itself: readings show as a rate without a reload.
    def rate(d: Any) -> float:
        return float(d.find_element(By.CSS_SELECTOR, "#stat-mqtt-in b").text)

    assert rate(browser) < 1  # (the set-up's two messages, if their sample is the last)
    worker = _readings(srv.mqtt_port, 60, 0.1)  # ~10 messages/s for 6 s
    _wait(browser, lambda d: rate(d) >= 3, timeout=40)
    assert browser.find_elements(By.CSS_SELECTOR, "#live svg polyline, #live svg circle")
    worker.join(30)
    _shot(browser, "overview", tmp_path)

    # The collection chart draws the readings as they arrive, without a reload.
    browser.get(base + "/collections/readings?field=t")
    before = _points(browser)
    assert before >= 1
    worker = _readings(srv.mqtt_port, 20, 0.2)
    _wait(browser, lambda d: _points(d) > before, timeout=40)
    worker.join(30)
    _shot(browser, "collection", tmp_path)

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
    for i in range(3):
        srv.cli("publish", "-k", "work", "-m", f"job {i}")

    # The hostile topic is text: no script ran, no element was made from it.
    browser.get(base + "/mqtt/retained")
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "td[data-label=Topic]")]
    assert HOSTILE in cells
    assert browser.title != "pwned"
    assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")

    # Every page renders, with its chart where it has one.
    pages = {"sessions": "/mqtt/sessions", "retained": "/mqtt/retained", "queues": "/queues",
             "queue": "/queues/work", "exchanges": "/exchanges",
             "connections": "/connections", "collections": "/collections",
             "uplinks": "/uplinks", "users": "/users"}
    for name, path in pages.items():
        browser.get(base + path)
        assert browser.find_element(By.TAG_NAME, "h1").text
        _shot(browser, name, tmp_path)
    browser.set_window_size(390, 844)  # a phone: the table rows become cards
    browser.get(base + "/queues")
    _shot(browser, "queues-phone", tmp_path)
    browser.set_window_size(1100, 900)
    # Logout ends the session: the next page asks for the login again.
    browser.find_element(By.CSS_SELECTOR, "header form button").click()
    _wait(browser, lambda d: "/console/login" in d.current_url)
    browser.get(base + "/queues")
    _wait(browser, lambda d: "/console/login" in d.current_url)

    # A monitoring user sees every page without a button, and a forged post is refused.
    _login(browser, base, WATCHER, "/queues/work")
    assert not browser.find_elements(By.CSS_SELECTOR, 'form[action="/console/action"]')
    browser.get(base + "/users")
    assert "watcher" in browser.find_element(By.TAG_NAME, "main").text
    assert not browser.find_elements(By.CSS_SELECTOR, 'form[action="/console/action"]')
    assert _post_from_page(browser, "/console/action", "op=queue.purge&target=work") == 403
    assert _post_from_page(browser, "/api/queues/%2F/work/contents", "") == 403
    rows = srv.cli("queues", "--json").stdout
    assert '"ready": 3' in rows.split('"work"', 1)[1].split("\n", 1)[0]

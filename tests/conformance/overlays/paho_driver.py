"""Run paho.mqtt.testing's ``interoperability/client_test.py`` TestCase against one broker.

Started by ``tests/conformance/run_paho.py`` with the archived ``interoperability/`` directory
as the working directory (its ``mqtt`` package is imported from there)::

    PAHO_EXCLUDE='["name", ...]' python paho_driver.py HOST PORT RESULTS.json [TEST_NAME ...]

``PAHO_MODULE=client_test5`` runs the MQTT 5 suite instead (same globals, plus the
``topic_prefix`` its ``__main__`` sets for the shared subscription test).

``client_test.py``'s own ``__main__`` cannot be used: its ``-h`` is the host option, which
it then hands on to ``unittest.main()`` as "help". So this sets the module globals its
``__main__`` would set (``host``, ``port``, ``topics``, ``wildtopics``,
``nosubscribe_topics``), loads ``client_test.Test`` with the standard loader, writes the
collected test names *before* running (so a hang or crash still leaves the list), runs
them with a buffering result (each test prints its own traceback on stdout before its
final assert; the buffer attaches that to the failure) and writes one outcome per test.
Standard library only: it runs with any Python 3.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import unittest
from typing import Any

#: What client_test.py's ``__main__`` sets, verbatim in meaning (not copied as code).
TOPICS = ("TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA")
WILDTOPICS = ("TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#")
NOSUBSCRIBE = ("test/nosubscribe",)


class Recording(unittest.TestResult):
    """Outcome and duration per test name."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = True
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._started = 0.0

    def startTest(self, test: unittest.TestCase) -> None:
        self._started = time.monotonic()
        print(f"RUN  {test.id()}", file=sys.__stdout__, flush=True)
        super().startTest(test)

    def _record(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        name = test.id().rsplit(".", 1)[-1]
        self.outcomes[name] = {"outcome": outcome, "detail": detail[-4000:],
                               "duration_s": round(time.monotonic() - self._started, 1)}
        print(f"{outcome.upper():7} {name}", file=sys.__stdout__, flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._record(test, "failed", self.failures[-1][1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        # setUpClass errors come with a _ErrorHolder, not a TestCase: no test name of its own.
        if isinstance(test, unittest.TestCase):
            self._record(test, "error", self.errors[-1][1])
        else:
            self.outcomes[str(test)] = {"outcome": "error", "detail": self.errors[-1][1],
                                        "duration_s": 0.0}

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def main(argv: list[str]) -> int:
    host, port, out, only = argv[0], int(argv[1]), argv[2], argv[3:]
    sys.path.insert(0, os.getcwd())
    import importlib

    # the archived interoperability/client_test.py (or client_test5.py)
    client_test = importlib.import_module(os.environ.get("PAHO_MODULE") or "client_test")
    client_test.topic_prefix = "client_test5/"  # (client_test5's __main__ sets it)

    client_test.host = host
    client_test.port = port
    client_test.topics = TOPICS
    client_test.wildtopics = WILDTOPICS
    client_test.nosubscribe_topics = NOSUBSCRIBE
    logging.getLogger().setLevel(logging.ERROR)  # as its __main__ does
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromTestCase(client_test.Test)
    names = [t.id().rsplit(".", 1)[-1] for t in suite]
    exclude = set(json.loads(os.environ.get("PAHO_EXCLUDE") or "[]"))
    suite = unittest.TestSuite(t for t in suite if t.id().rsplit(".", 1)[-1] not in exclude
                               and (not only or t.id().rsplit(".", 1)[-1] in only))
    report: dict[str, Any] = {"collected": names, "selected": [
        t.id().rsplit(".", 1)[-1] for t in suite], "outcomes": {}}
    with open(out, "w") as fh:
        json.dump(report, fh)
    result = Recording()
    suite.run(result)
    report["outcomes"] = result.outcomes
    with open(out, "w") as fh:
        json.dump(report, fh, indent=1)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""pytest plugin loaded into a third-party suite's run (``-p exclude_plugin``).

It deselects the tests that exercise features outside oxiedge's AMQP scope. The runner passes
the rules as a JSON file named by ``OXIEDGE_CONFORMANCE_RULES`` (a list of
``{"pattern": regex on the node id, "reason": text}``) and gets back, in the file named by
``OXIEDGE_CONFORMANCE_DESELECTED``, one ``{"nodeid", "reason"}`` object per deselected test,
so every exclusion in the report carries its reason. Only the standard library is used: the
plugin runs in the suite's own virtualenv.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any


def _rules() -> list[tuple[re.Pattern[str], str]]:
    path = os.environ.get("OXIEDGE_CONFORMANCE_RULES")
    if not path:
        return []
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    return [(re.compile(r["pattern"]), str(r["reason"])) for r in raw]


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Drop the items whose node id matches an exclusion rule, recording why."""
    rules = _rules()
    keep: list[Any] = []
    dropped: list[Any] = []
    record: list[dict[str, str]] = []
    for item in items:
        reason = next((why for pat, why in rules if pat.search(item.nodeid)), None)
        if reason is None:
            keep.append(item)
        else:
            dropped.append(item)
            record.append({"nodeid": item.nodeid, "reason": reason})
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    out = os.environ.get("OXIEDGE_CONFORMANCE_DESELECTED")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)

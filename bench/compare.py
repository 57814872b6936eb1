"""What a change bought: compare two ``python -m bench --json`` result files.

``python -m bench.compare BEFORE.json AFTER.json [--broker oxiedge]``

Prints, per scenario, the broker's median before and after, after ÷ before, and the
broker's ratio against each peer *within* each file (the figure that survives a noisy
machine: both sides of a ratio were measured in the same interleaved run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report import table


def _medians(path: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    data = json.loads(path.read_text())
    med = {(m["scenario"], m["target"]): m for m in data["medians"] if not m["skipped"]}
    return med, data


def _ratio(med: dict[tuple[str, str], dict[str, Any]], scen: str, broker: str) -> str:
    a = med.get((scen, broker))
    if a is None:
        return "-"
    parts = []
    for (s, t), b in med.items():
        if s == scen and t != broker and b["value"]:
            parts.append(f"{a['value'] / b['value']:.2f}x {t}")
    return ", ".join(parts) or "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--broker", default="oxiedge")
    a = p.parse_args(argv)
    before, bdata = _medians(a.before)
    after, adata = _medians(a.after)
    scen = list(dict.fromkeys([s for s, t in before if t == a.broker]
                              + [s for s, t in after if t == a.broker]))
    rows = [["scenario", "unit", "before", "after", "after / before",
             "before vs peers", "after vs peers"]]
    for s in scen:
        b, x = before.get((s, a.broker)), after.get((s, a.broker))
        unit = (x or b or {}).get("unit", "")
        bv = f"{b['value']:,.3f}" if b else "-"
        xv = f"{x['value']:,.3f}" if x else "-"
        ch = f"{x['value'] / b['value']:.2f}x" if b and x and b["value"] else "-"
        rows.append([s, unit, bv, xv, ch, _ratio(before, s, a.broker),
                     _ratio(after, s, a.broker)])
    print(f"before: {a.before} ({bdata.get('when', '?')}, "
          f"{bdata.get('machine', {}).get('oxiedge_rev', '?')})")
    print(f"after:  {a.after} ({adata.get('when', '?')}, "
          f"{adata.get('machine', {}).get('oxiedge_rev', '?')})")
    print("(latency scenarios: the value is p50 in ms, lower is better)")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

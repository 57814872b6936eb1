"""Write one device's RESULTS.md from the JSON files ``run-on-device.sh`` left in a folder.

``python -m bench.arm.results DIR > DIR/RESULTS.md``

The format (one file per device run, kept in ``bench/arm/results/<host>-<UTC stamp>/``):
a device block (every field measured by the script, nothing typed in), the method line,
then the store, suite (medians + ratios against the peers of the same run) and memory
tables.  Figures are only what the JSON files hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import report
from bench.result import Result


def _load(p: Path) -> Any:
    return json.loads(p.read_text()) if p.exists() else None


def _result(d: dict[str, Any]) -> Result:
    keep = {k: v for k, v in d.items() if k in Result.__dataclass_fields__}
    return Result(**keep)


def render(folder: Path) -> str:
    dev = _load(folder / "device.json") or {}
    out = [f"# oxiedge benchmark results: {dev.get('model', '?')} ({dev.get('host', '?')})", ""]
    if dev.get("arch") not in ("aarch64", "arm64"):
        out += [f"**Not an ARM device ({dev.get('arch')}): these figures describe this "
                f"machine, not a Raspberry Pi.**", ""]
    out += ["| field | value |", "|---|---|"]
    for k in ("model", "compatible", "arch", "nproc", "broker_cpus", "mem_cap", "memory",
              "kernel", "page_size", "os", "python", "disk_under_tmp", "storage", "governor",
              "throttled", "temperature", "when", "quick"):
        if k in dev or k not in ("compatible", "page_size", "python", "storage"):
            out.append(f"| {k} | {dev.get(k, '?')} |")
    if (folder / "NO-MEMORY-CAP").exists():
        out.append("| memory cap | not enforced (no systemd scope) |")
    out += ["", "Method: bench/arm/README.md. Brokers pinned with taskset to `broker_cpus`; "
            "the load generator runs on the same device (shares the cores); loopback; "
            "100-byte payloads; medians of interleaved runs.", ""]
    store = _load(folder / "store.json")
    if store:
        out += ["## Store (group committer)", "",
                "| variant | docs/s | synced commits/s | p50 ms | p99 ms | CPU µs/doc |",
                "|---|---|---|---|---|---|"]
        for name, m in store["medians"].items():
            out.append(f"| {name} | {m['docs_s']:,.0f} | {m['commits_s']:,.0f} | "
                       f"{m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us']:.1f} |")
        out += ["", f"64 writers / one synced put per document: "
                    f"**{store['ratio_64_vs_put_sync']:.1f}x** (target >= 20x)", ""]
    suite = _load(folder / "suite.json")
    if suite:
        med = {(m["scenario"], m["target"]): _result(m) for m in suite["medians"]}
        names = list(suite["targets"])
        scen = list(dict.fromkeys(m["scenario"] for m in suite["medians"]))
        out += ["## Suite (medians)", "", report.medians_table(scen, names, med), ""]
        if len(names) > 1:
            out += ["Ratios, same run:", "",
                    report.ratio_table(scen, names[0], names[1:], med), ""]
    mem = _load(folder / "memory.json")
    if mem:
        out += ["## Memory and start-up", "",
                "| broker | RSS idle MB | queued | RSS queued MB | RSS + clients MB |"
                " ready after SIGTERM s | ready after SIGKILL s |", "|---|---|---|---|---|---|---|"]
        for r in mem["results"]:
            def f(k: str, r: dict[str, Any] = r) -> str:
                v = r.get(k)
                return "-" if v is None else f"{v:.2f}"
            out.append(f"| {r['broker']} | {f('rss_idle_mb')} | {r.get('queued', '-')} | "
                       f"{f('rss_queued_mb')} | {f('rss_clients_mb')} | "
                       f"{f('ready_after_sigterm_s')} | {f('ready_after_sigkill_s')} |")
        out.append("")
    backlog = _load(folder / "backlog.json")
    if backlog:
        out += ["## Backlog on disk (one offline MQTT session; bench/README.md's columns)", "",
                backlog_table(backlog["result"]), ""]
    return "\n".join(out) + "\n"


def backlog_table(r: dict[str, Any]) -> str:
    """bench.backlog's result as a row under the header of bench/README.md's backlog table."""
    n = max(1, r.get("filled", 0))
    return "\n".join([
        "| N | RSS idle / full / after SIGKILL + restart / drained MB | RSS per queued msg | "
        "ready after SIGKILL | fill msg/s | drain msg/s | written per msg: fill / drain |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {r['messages']:,} | {r['rss_idle_mb']:.1f} / {r['rss_full_mb']:.1f} / "
        f"{r['rss_after_restart_mb']:.1f} / {r['rss_drained_mb']:.1f} | "
        f"{r['rss_per_msg_b']:.1f} B | {r['ready_after_sigkill_s']:.2f} s | "
        f"{r['fill_msg_s']:,.0f} | {r['drain_msg_s']:,.0f} | "
        f"{r['fill_write_bytes'] / n:.0f} / {r['drain_write_bytes'] / n:.0f} B |",
        f"\ndrained {r.get('drained', 0):,} of {r.get('filled', 0):,} filled"])


def main() -> None:
    sys.stdout.write(render(Path(sys.argv[1])))


if __name__ == "__main__":
    main()

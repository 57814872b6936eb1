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
    seen = f"{dev.get('model', '')} {dev.get('compatible', '')}".lower()
    if dev.get("arch") not in ("aarch64", "arm64"):
        out += [f"**Not an ARM device ({dev.get('arch')}): these figures describe this "
                f"machine, not a Raspberry Pi.**", ""]
    elif "raspberry" not in seen:
        out += [f"**Not a Raspberry Pi ({dev.get('model', '?')}): these figures describe "
                f"this machine.**", ""]
    if "dummy-virt" in seen or "qemu" in seen:
        out += ["**A QEMU virtual machine: under emulation the figures say nothing about "
                "any hardware.**", ""]
    out += ["| field | value |", "|---|---|"]
    for k in ("model", "compatible", "arch", "nproc", "broker_cpus", "mem_cap", "memory",
              "kernel", "page_size", "os", "python", "disk_under_tmp", "storage", "governor",
              "throttled", "temperature", "when", "quick", "oxiedge"):
        if k in dev or k not in ("compatible", "page_size", "python", "storage", "oxiedge"):
            out.append(f"| {k} | {dev.get(k, '?')} |")
    if (folder / "NO-MEMORY-CAP").exists():
        out.append("| memory cap | not enforced (no systemd scope) |")
    out += ["", "Method: bench/arm/README.md. Brokers pinned with taskset to `broker_cpus`; "
            "the load generator runs on the same device (shares the cores); loopback; "
            "100-byte payloads; medians of interleaved runs.", ""]
    store = _load(folder / "store.json")
    if store:
        out += ["## Store (group committer)", "", store_table(store), "",
                f"64 writers / one synced put per document: "
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
        out += ["## Memory and start-up", "", memory_table(mem["results"]), ""]
    backlog = _load(folder / "backlog.json")
    if backlog:
        # bench.backlog writes {"machine", "results": [one dict per tree and round]}.
        rows = backlog.get("results") or [backlog["result"]]
        out += ["## Backlog on disk (one offline MQTT session; bench/README.md's columns)", "",
                backlog_table(rows), ""]
    return "\n".join(out) + "\n"


def store_table(store: dict[str, Any]) -> str:
    """bench.store_bench's medians under the header of bench/README.md's store table."""
    lines = ["| variant | docs/s (min-max) | synced commits/s | docs/commit | p50 ms | p99 ms |"
             " CPU µs/doc |", "|---|---|---|---|---|---|---|"]
    for name, m in store["medians"].items():
        low, high = m.get("range") or (m["docs_s"], m["docs_s"])
        lines.append(f"| {name} | {m['docs_s']:,.0f} ({low:,.0f}-{high:,.0f}) | "
                     f"{m['commits_s']:,.0f} | {m.get('docs_per_commit', 1.0):.1f} | "
                     f"{m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us']:.1f} |")
    return "\n".join(lines)


def memory_table(results: list[dict[str, Any]]) -> str:
    """bench.memory's rows under the header of bench/README.md's memory table."""
    first = results[0] if results else {}
    lines = [f"| broker | RSS idle | + {first.get('queued', 0):,} queued | "
             f"+ {first.get('clients', 0):,} MQTT clients | ready after SIGTERM | "
             "ready after SIGKILL |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        def f(key: str, unit: str, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return "-" if v is None else f"{v:.{1 if unit == 'MB' else 2}f} {unit}"
        lines.append(f"| {r['broker']} | {f('rss_idle_mb', 'MB')} | {f('rss_queued_mb', 'MB')} | "
                     f"{f('rss_clients_mb', 'MB')} | {f('ready_after_sigterm_s', 's')} | "
                     f"{f('ready_after_sigkill_s', 's')} |")
    return "\n".join(lines)


def backlog_table(rows: list[dict[str, Any]]) -> str:
    """bench.backlog's runs under the header of bench/README.md's backlog table (with the
    broker's CPU per drained message and, under a memory cap, the peak RSS)."""
    lines = ["| N | RSS idle / full / after SIGKILL + restart / drained MB | RSS per queued msg | "
             "peak RSS (VmHWM) | ready after SIGKILL | fill msg/s | drain msg/s | "
             "broker CPU per drained msg | written per msg: fill / drain |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    for r in rows:
        n = max(1, r.get("filled", 0))
        peak = f"{r['peak_rss_mb']:.1f} MB" if "peak_rss_mb" in r else "-"
        if "within_cap" in r:
            peak += ": within cap" if r["within_cap"] else ": OVER the cap"
        cpu = f"{r['drain_cpu_us']:.1f} µs" if "drain_cpu_us" in r else "-"
        lines.append(
            f"| {r['messages']:,} | {r['rss_idle_mb']:.1f} / {r['rss_full_mb']:.1f} / "
            f"{r['rss_after_restart_mb']:.1f} / {r['rss_drained_mb']:.1f} | "
            f"{r['rss_per_msg_b']:.1f} B | {peak} | {r['ready_after_sigkill_s']:.2f} s | "
            f"{r['fill_msg_s']:,.0f} | {r['drain_msg_s']:,.0f} | {cpu} | "
            f"{r['fill_write_bytes'] / n:.0f} / {r['drain_write_bytes'] / n:.0f} B |")
        notes.append(f"drained {r.get('drained', 0):,} of {r.get('filled', 0):,} filled")
    return "\n".join([*lines, "", "; ".join(notes)])


def main() -> None:
    sys.stdout.write(render(Path(sys.argv[1])))


if __name__ == "__main__":
    main()

"""Plain-text tables: per-scenario medians side by side, and ratios against the peers."""

from __future__ import annotations

from bench.result import Result


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    if digits == 0:
        return f"{v:,.0f}"
    return "{:,.{d}f}".format(v, d=digits)


def _value(r: Result) -> str:
    if r.skipped is not None:
        return "skip"
    if not r.higher_better:
        return f"{_fmt(r.p50_ms, 3)} / {_fmt(r.p99_ms, 2)} ms"
    return _fmt(r.value)


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def medians_table(scenarios: list[str], targets: list[str],
                  med: dict[tuple[str, str], Result]) -> str:
    """Headline value, broker CPU µs/msg and RSS for every (scenario, broker)."""
    head = ["scenario", "unit"]
    for t in targets:
        head += [t, f"{t} CPU µs/msg", f"{t} RSS MB"]
    rows = [head]
    for s in scenarios:
        unit = next((med[(s, t)].unit for t in targets if (s, t) in med
                     and med[(s, t)].skipped is None), "")
        if not unit and not any((s, t) in med for t in targets):
            continue
        row = [s, "p50 / p99" if unit == "ms p50" else unit]
        for t in targets:
            r = med.get((s, t))
            if r is None:
                row += ["-", "-", "-"]
                continue
            cpu = r.extra.get("cpu_us_per_msg") if r.skipped is None else None
            row += [_value(r), _fmt(cpu, 1), _fmt(r.rss_mb if r.skipped is None else None, 1)]
        rows.append(row)
    return table(rows)


def ratio_table(scenarios: list[str], subject: str, peers: list[str],
                med: dict[tuple[str, str], Result]) -> str:
    """subject ÷ peer for throughput (higher is better), subject p50 ÷ peer p50 for latency
    (lower is better), and the CPU-per-message ratio."""
    rows = [["scenario", *[f"{subject} ÷ {p}" for p in peers],
             *[f"CPU/msg {subject} ÷ {p}" for p in peers]]]
    for s in scenarios:
        a = med.get((s, subject))
        if a is None or a.skipped is not None:
            continue
        vals, cpus = [], []
        for p in peers:
            b = med.get((s, p))
            if b is None or b.skipped is not None or not b.value:
                vals.append("-")
                cpus.append("-")
                continue
            ratio = a.value / b.value
            vals.append("{:.2f}x{}".format(ratio, "" if a.higher_better else " (lower is better)"))
            ca, cb = a.extra.get("cpu_us_per_msg"), b.extra.get("cpu_us_per_msg")
            cpus.append(f"{ca / cb:.2f}x" if ca and cb else "-")
        if any(v != "-" for v in vals):
            rows.append([s, *vals, *cpus])
    if len(rows) == 1:
        return f"(no scenario ran on both {subject} and a peer)"
    return table(rows)

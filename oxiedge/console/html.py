"""HTML pieces of the console (sans-IO): the page frame, tables, forms and the SVG chart.

Everything that came from a client - queue names, topics, client ids, document fields - is
attacker input, so nothing is written into the page but through :func:`esc` (text and
attribute values, quotes included) or :func:`href` (a path segment, percent-encoded, then
escaped). The page carries no inline script or style: the Content-Security-Policy of
:data:`SECURITY_HEADERS` allows only the console's own files, so even a missed escape could
not run a script.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

SECURITY_HEADERS = [
    ("content-security-policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
     "base-uri 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
]

#: The menu: (path, label).
NAV = (("/", "Overview"), ("/mqtt/sessions", "MQTT sessions"), ("/mqtt/retained", "Retained"),
       ("/queues", "Queues"), ("/exchanges", "Exchanges"), ("/connections", "Connections"),
       ("/collections", "Collections"), ("/uplinks", "Uplinks"), ("/users", "Users"))

#: Rows a table shows per page (a row with its buttons is ~700 bytes: a page stays under
#: 100 KB); ``?page=N`` shows the next ones, with links under the table.
MAX_ROWS = 100


def esc(value: Any) -> str:
    """``value`` as HTML text or attribute value (``<``, ``>``, ``&``, both quotes)."""
    return html.escape("" if value is None else str(value), quote=True)


def href(*segments: str, query: str = "") -> str:
    """A path of percent-encoded ``segments`` (a ``/`` in a name stays inside its segment),
    escaped for an attribute."""
    path = "/" + "/".join(quote(s, safe="") for s in segments)
    return esc(path + (f"?{query}" if query else ""))


def link(text: Any, *segments: str) -> str:
    return f'<a href="{href(*segments)}">{esc(text)}</a>'


def page(title: str, body: str, current: str, user: str, notice: str = "") -> str:
    """The whole document: head, menu, the notice of the last action, ``body``."""
    nav = "".join(f'<a href="{esc(p)}"{" aria-current=page" if p == current else ""}>'
                  f"{esc(label)}</a>" for p, label in NAV)
    flash = f'<p class="notice" role="status">{esc(notice)}</p>' if notice else ""
    out = "" if user == "anonymous" else (  # (the anonymous administrator: no users exist)
        '<form method=post action="/console/logout" class="inline">'
        "<button type=submit>Log out</button></form>")
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)} - oxiedge</title>"
            '<link rel=stylesheet href="/console/static/console.css">'
            '<script defer src="/console/static/console.js"></script></head><body>'
            f'<header><strong>oxiedge</strong><nav>{nav}</nav>'
            f'<span class="who">{esc(user)}</span>{out}</header>'
            f"<main><h1>{esc(title)}</h1>{flash}{body}</main></body></html>")


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: the row key, its heading, and whether it is a number."""

    key: str
    label: str
    number: bool = False


def cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, (dict, list)):
        return esc(", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict)
                   else ", ".join(map(str, value)))
    return esc(value)


def table(columns: Sequence[Column], rows: Sequence[dict[str, Any]],
          extra: Any = None, empty: str = "none", label: str = "", page: int = 0) -> str:
    """A table of ``rows`` (the ``page``-th ``MAX_ROWS`` of them, ``page`` > 0 with links to
    the others; 0: the first ``MAX_ROWS``, the rest counted); ``extra(row)`` gives the HTML
    of a last cell (links, buttons). Each cell carries its heading (``data-label``) for the
    narrow-screen layout."""
    if not rows:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f'<th{" class=num" if c.number else ""}>{esc(c.label)}</th>'
                   for c in columns)
    if extra is not None:
        head += "<th></th>"
    body = []
    first = max(0, page - 1) * MAX_ROWS
    for row in rows[first:first + MAX_ROWS]:
        cells = "".join(
            f'<td data-label="{esc(c.label)}"{" class=num" if c.number else ""}>'
            f"{row[c.key] if c.key.startswith('_html') else cell(row.get(c.key))}</td>"
            for c in columns)
        if extra is not None:
            cells += f'<td class="act">{extra(row)}</td>'
        body.append(f"<tr>{cells}</tr>")
    more = _pager(len(rows), first, page)
    caption = f"<caption>{esc(label)}</caption>" if label else ""
    return (f'<div class="tablewrap"><table>{caption}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{more}')


def button(op: str, target: str, label: str, csrf: str, back: str, confirm: str,
           extra: Iterable[tuple[str, str]] = (), danger: bool = True) -> str:
    """A form that posts ``op`` on ``target`` to ``/console/action`` (works without
    JavaScript; with it, the browser asks ``confirm`` first)."""
    fields = "".join(f'<input type=hidden name="{esc(k)}" value="{esc(v)}">'
                     for k, v in (("op", op), ("target", target), ("csrf", csrf),
                                  ("back", back), *extra))
    ask = f' data-confirm="{esc(confirm)}"' if confirm else ""
    return (f'<form method=post action="/console/action" class="inline"{ask}>{fields}'
            f'<button type=submit{" class=danger" if danger else ""}>{esc(label)}</button>'
            "</form>")


def stat(label: str, value: Any, warn: bool = False, key: str = "") -> str:
    ident = f' id="stat-{esc(key)}"' if key else ""
    return (f'<div class="stat{" warn" if warn else ""}"{ident}><span>{esc(label)}</span>'
            f"<b>{cell(value)}</b></div>")


def meter(label: str, used: float, limit: float, unit: str = "MiB") -> str:
    """``used`` against ``limit`` as a bar (SVG-free: a styled ``<meter>``)."""
    if limit <= 0:
        return stat(label, f"{used:.0f} {unit} (no limit)")
    return (f'<div class="stat"><span>{esc(label)}</span><b>{used:.0f} / {limit:.0f} {unit}'
            f'</b><meter min=0 max="{limit:.0f}" value="{min(used, limit):.0f}" '
            f'high="{limit * 0.8:.0f}"></meter></div>')


#: Colours of a chart's lines, in order.
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2")


def chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], unit: str = "",
          width: int = 900, height: int = 220, title: str = "", x_from: float | None = None
          ) -> str:
    """A line chart of ``series`` ((label, [(x, y)...])...), x in seconds before now (<= 0),
    from ``x_from`` (else the oldest point) to now, as inline SVG with its legend. Our own:
    no library, a few dozen lines."""
    points = [p for _, pts in series for p in pts]
    if not points:
        return f'<p class="empty chart-empty">{esc(title or "chart")}: no data yet</p>'
    x0 = min(p[0] for p in points) if x_from is None else x_from
    x1 = 0.0
    top = max(p[1] for p in points)
    low = min(0.0, min(p[1] for p in points))
    top = top if top > low else low + 1
    span = x1 - x0 or 1.0
    pad_l, pad_b, pad_t = 48, 18, 8
    w, h = width - pad_l - 4, height - pad_b - pad_t

    def xy(x: float, y: float) -> str:
        return f"{pad_l + (x - x0) / span * w:.1f},{pad_t + h - (y - low) / (top - low) * h:.1f}"

    lines = []
    for i, (_, pts) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        if len(pts) == 1:
            cx, cy = xy(*pts[0]).split(",")
            lines.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>')
        elif pts:
            lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{" ".join(xy(x, y) for x, y in pts)}"/>')
    grid = "".join(
        f'<line x1="{pad_l}" x2="{width - 4}" y1="{pad_t + h * f:.1f}" y2="{pad_t + h * f:.1f}"'
        f' stroke="#ddd"/><text x="{pad_l - 4}" y="{pad_t + h * f + 4:.1f}" '
        f'text-anchor="end" font-size="11">{_short(top - (top - low) * f)}</text>'
        for f in (0.0, 0.5, 1.0))
    axis = (f'<text x="{pad_l}" y="{height - 2}" font-size="11">-{_ago(span)}</text>'
            f'<text x="{width - 4}" y="{height - 2}" font-size="11" text-anchor="end">now'
            f"</text>")
    legend = "".join(f'<span class="key" data-c="{i % len(PALETTE)}">{esc(label)}</span>'
                     for i, (label, _) in enumerate(series))
    return (f'<figure class="chart"><svg viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{esc(title)}">{grid}{"".join(lines)}'
            f"{axis}</svg><figcaption>{esc(title)}{' (' + esc(unit) + ')' if unit else ''} "
            f"{legend}</figcaption></figure>")


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.3g}"


def _ago(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _pager(total: int, first: int, page: int) -> str:
    if total <= MAX_ROWS:
        return ""
    shown = f"{first + 1}-{min(total, first + MAX_ROWS)} of {total}"
    if not page:
        return f'<p class="more">{shown} shown</p>'
    links = []
    if page > 1:
        links.append(f'<a href="?page={page - 1}">previous</a>')
    if first + MAX_ROWS < total:
        links.append(f'<a href="?page={page + 1}">next</a>')
    return f'<p class="more">{shown} {" ".join(links)}</p>'


def _hidden(csrf: str, back: str, op: str) -> str:
    return "".join(f'<input type=hidden name="{k}" value="{esc(v)}">'
                   for k, v in (("op", op), ("csrf", csrf), ("back", back)))


def user_forms(csrf: str, back: str, users: Sequence[str]) -> str:
    """The users page's two forms (administrators): add a user or change its password and
    tags; set a user's AMQP permissions (regular expressions, as ``oxiedge permissions
    set``)."""
    tags = "".join(f"<option>{t}</option>" for t in
                   ("administrator", "monitoring", "management")) + '<option value="">none</option>'
    names = "".join(f"<option>{esc(u)}</option>" for u in users)
    regex = "".join(f'<label>{op.title()} <input name={op} value=".*" size=8></label>'
                    for op in ("configure", "write", "read"))
    return (
        '<h2>Add a user or change one</h2><form method=post action="/console/action" '
        f'class="edit">{_hidden(csrf, back, "user.put")}'
        "<label>User <input name=target required maxlength=200 autocomplete=off></label>"
        "<label>Password <input name=password type=password required "
        "autocomplete=new-password></label>"
        f"<label>Tags <select name=tags>{tags}</select></label>"
        "<button type=submit>Save user</button></form>"
        + ("" if not users else
           '<h2>Set permissions</h2><form method=post action="/console/action" '
           f'class="edit">{_hidden(csrf, back, "permissions.put")}'
           f"<label>User <select name=target>{names}</select></label>{regex}"
           "<button type=submit>Save permissions</button></form>"))

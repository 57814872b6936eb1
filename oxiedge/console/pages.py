"""The console's pages (sans-IO apart from awaiting the broker's operations).

:class:`Console` is made when the first page is asked for (``console/__init__.py``). Each
page reads what the management API reads - ``oxiedge status``, the admin rows and the
operations of docs/operations.md through ``BrokerView`` - and renders a whole HTML page, or
with ``?fragment=1`` only its live part, which ``console.js`` fetches every few seconds and
swaps in (without JavaScript the page is complete and a reload refreshes it). Buttons are
forms posting to ``/console/action`` (``actions.py``); a user without the ``administrator``
tag sees none.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..http.access import Need, Principal, refusal
from ..http.api import binding_json
from ..http.credentials import Credentials
from ..http.history import SAMPLES
from ..http.messages import Request, Response
from ..http.nodes import permission_rows
from ..http.routes import BrokerView, Router
from ..operations import OperationError
from .actions import Actions
from .assets import asset
from .html import (
    SECURITY_HEADERS,
    Column,
    button,
    chart,
    esc,
    href,
    link,
    meter,
    page,
    stat,
    table,
    user_forms,
)
from .login import Login

#: A page: (request, who, path args) -> (title, menu entry, body HTML).
Page = Callable[[Request, Principal, tuple[str, ...]], Awaitable[tuple[str, str, str]]]
#: Documents the collection page lists, and those its chart reads (the last hour).
LATEST_DOCS = 20
CHART_DOCS = 2000
CHART_WINDOW_MS = 3_600_000
#: Splits a page's body: what is before it is not refreshed (a form being filled in).
LIVE_MARK = "<!--live-->"


def html_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/html; charset=utf-8", list(SECURITY_HEADERS))


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _clock(ms: Any) -> Any:
    """A ``_received_at`` (ms since the epoch) as UTC time of day."""
    if not _numeric(ms):
        return ms
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def _span(points: list[tuple[float, float]], longest: float) -> float:
    """Where a chart of ``points`` (x: seconds before now) starts: its oldest point, with
    a margin, at least a minute and at most ``longest`` back."""
    oldest = min((x for x, _ in points), default=-longest)
    return max(-longest, min(-60.0, oldest * 1.05))


def _latency(ms: Any) -> str:
    """``oxiedge status``'s commit-round quantiles as "p50 / p99" ("none yet" before the
    first round)."""
    if not isinstance(ms, dict) or not _numeric(ms.get("p50")):
        return "none yet"
    return f"{ms['p50']:g} / {ms.get('p99', 0):g}"


def _page(req: Request) -> int:
    """The ``?page=`` of a long table (1 when absent; a bad one is a 400 naming it)."""
    return req.int_param("page", 1, 1, 1 << 30)


def _admin(who: Principal) -> bool:
    return refusal(who, Need.ADMIN) is None


class Console:
    """The pages of one listener (see the module docstring)."""

    def __init__(self, router: Router, broker: BrokerView, credentials: Credentials) -> None:
        self.broker = broker
        self.login = Login(credentials)
        self.history = broker.history  # sampled by the listener since start-up
        self.actions = Actions(router)
        self.pages: dict[str, Page] = {
            "overview": self.overview, "sessions": self.sessions, "retained": self.retained,
            "queues": self.queues, "queue": self.queue, "exchanges": self.exchanges,
            "connections": self.connections, "collections": self.collections,
            "collection": self.collection, "uplinks": self.uplinks, "users": self.users,
        }

    async def serve(self, name: str, req: Request, who: Principal,
                    args: tuple[str, ...]) -> Response:
        if name == "asset":
            return asset(args[0])
        if name == "action":
            return await self.actions.run(req, who)
        if name in ("login", "login.submit", "logout"):
            handler = {"login": self.login.form, "login.submit": self.login.submit,
                       "logout": self.login.logout}[name]
            return await handler(req, who, args)
        try:
            title, current, body = await self.pages[name](req, who, args)
            fixed, _, body = body.rpartition(LIVE_MARK)
        except OperationError as exc:
            return html_response(page("Not available", f"<p>{esc(exc)}</p>", "", who.name),
                                 404 if exc.kind == "not_found" else 503)
        live = f'{fixed}<div id="live" data-live="{esc(req.path)}">{body}</div>'
        if req.query.get("fragment") == "1":
            return html_response(body)
        return html_response(page(title, live, current, who.name, req.query.get("msg", "")[:300]))

    # ------------------------------------------------------------------ helpers
    def _button(self, who: Principal, req: Request, op: str, target: str, label: str,
                confirm: str, danger: bool = True) -> str:
        if not _admin(who):
            return ""
        return button(op, target, label, self.actions.token(who), req.path, confirm,
                      danger=danger)

    async def _rows(self, op: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        try:
            result = await self.broker.operate(op, args or {})
        except OperationError as exc:
            if exc.kind == "unavailable":
                return []
            raise
        return result if isinstance(result, list) else []

    # ------------------------------------------------------------------ overview
    async def overview(self, req: Request, who: Principal, _args: tuple[str, ...]
                       ) -> tuple[str, str, str]:
        s = self.broker.status()
        mqtt, amqp, al = s.get("mqtt") or {}, s.get("amqp") or {}, s.get("alarms") or {}
        store, conns = s.get("store") or {}, s.get("connections") or {}
        rates = self.history.latest()
        alarm = " ".join(n for n, on in (("memory", al.get("memory_alarm")),
                                         ("disk", al.get("disk_alarm"))) if on) or "none"
        uplinks = s.get("uplink") or {}
        lag = max((u.get("lag_seconds") or 0 for u in uplinks.values()
                   if isinstance(u, dict)), default=None)
        figures = "".join((
            stat("MQTT in /s", rates["MQTT in"], key="mqtt-in"),
            stat("MQTT out /s", rates["MQTT out"], key="mqtt-out"),
            stat("AMQP in /s", rates["AMQP in"], key="amqp-in"),
            stat("AMQP out /s", rates["AMQP out"], key="amqp-out"),
            stat("Queued (MQTT)", mqtt.get("queued", 0), key="mqtt-queued"),
            stat("Ready (AMQP)", amqp.get("ready", 0), key="amqp-ready"),
            stat("Unacked (AMQP)", amqp.get("unacked", 0)),
            stat("Connections", conns.get("open", 0), key="connections"),
            stat("MQTT sessions", mqtt.get("sessions", 0)),
            stat("AMQP queues", amqp.get("queues", 0)),
            stat("Alarms", alarm, warn=alarm != "none", key="alarms"),
            stat("Durable writes", store.get("durable_writes", "?"),
                 warn=store.get("durable_writes") != "ok"),
            stat("Commit rounds", store.get("commit_rounds", 0)),
            stat("Commit round p50 / p99 (ms)", _latency(store.get("commit_round_ms")),
                 key="commit-latency"),
            stat("Uplink lag (s)", "no uplink" if lag is None else lag,
                 warn=bool(lag and lag > 60)),
            meter("Memory", float(al.get("rss_mb") or 0),
                  float(al.get("memory_watermark_mb") or 0)),
            stat("Disk free (MiB)", f"{float(al.get('disk_free_mb') or 0):.0f} (limit "
                 f"{float(al.get('disk_free_limit_mb') or 0):.0f})",
                 warn=bool(al.get("disk_alarm")), key="disk"),
        ))
        limit = float(al.get("disk_free_limit_mb") or 0)
        body = (chart(self.history.rates(), "messages/s", title="Message rates",
                      x_from=-SAMPLES * 5.0)
                + f'<div class="stats">{figures}</div>'
                + f'<p class="hint">Disk: the broker stops publishers when less than '
                  f"{limit:.0f} MiB is free. Rates: the broker samples its counters every 5 s "
                  f"and keeps the last 10 minutes.</p>")
        return "Overview", "/", body

    # ------------------------------------------------------------------ MQTT
    async def sessions(self, req: Request, who: Principal, _args: tuple[str, ...]
                       ) -> tuple[str, str, str]:
        rows = await self._rows("sessions")
        subs = await self._rows("subscriptions")

        def actions(row: dict[str, Any]) -> str:
            client = str(row.get("client", ""))
            out = self._button(who, req, "session.delete", client, "Delete",
                               f"Delete the session of {client} and its queued messages?")
            if row.get("connected"):
                out += self._button(who, req, "client.kick", client, "Kick",
                                    f"Disconnect {client}?")
            return out

        cols = [Column("client", "Client"), Column("connected", "Connected"),
                Column("clean", "Clean"), Column("subscriptions", "Subs", True),
                Column("queued", "Queued", True), Column("inflight", "In flight", True),
                Column("dropped", "Dropped", True), Column("expires_in", "Expires in (s)", True)]
        sub_cols = [Column("client", "Client"), Column("filter", "Filter"),
                    Column("qos", "QoS", True), Column("connected", "Connected")]
        body = (table(cols, rows, actions, "no MQTT sessions", "Sessions", _page(req))
                + "<h2>Subscriptions</h2>"
                + table(sub_cols, subs, None, "no subscriptions", "Subscriptions"))
        return "MQTT sessions", "/mqtt/sessions", body

    async def retained(self, req: Request, who: Principal, _args: tuple[str, ...]
                       ) -> tuple[str, str, str]:
        rows = await self._rows("retained")

        def actions(row: dict[str, Any]) -> str:
            topic = str(row.get("topic", ""))
            return self._button(who, req, "retained.clear", topic, "Clear",
                                f"Clear the retained message of {topic}?")

        cols = [Column("topic", "Topic"), Column("qos", "QoS", True),
                Column("bytes", "Bytes", True)]
        return "Retained messages", "/mqtt/retained", table(
            cols, rows, actions, "no retained messages", "Retained", _page(req))

    # ------------------------------------------------------------------ AMQP
    async def queues(self, req: Request, who: Principal, _args: tuple[str, ...]
                     ) -> tuple[str, str, str]:
        rows = [dict(r, _html_name=link(r.get("name", ""), "queues", str(r.get("name", ""))))
                for r in await self._rows("queues")]

        def actions(row: dict[str, Any]) -> str:
            name = str(row.get("name", ""))
            return (self._button(who, req, "queue.purge", name, "Purge",
                                 f"Purge every ready message of {name}?")
                    + self._button(who, req, "queue.delete", name, "Delete",
                                   f"Delete the queue {name} and its messages?"))

        cols = [Column("_html_name", "Name"), Column("durable", "Durable"),
                Column("ready", "Ready", True), Column("unacked", "Unacked", True),
                Column("consumers", "Consumers", True), Column("published", "Published", True),
                Column("delivered", "Delivered", True), Column("arguments", "Arguments")]
        return "Queues", "/queues", table(cols, rows, actions, "no queues", "Queues",
                                          _page(req))

    async def queue(self, req: Request, who: Principal, args: tuple[str, ...]
                    ) -> tuple[str, str, str]:
        name = args[0]
        row = self.broker.queue_row(name)  # one row, not the whole queue table
        if row is None:
            raise OperationError(f"no queue {name!r}", "not_found")
        facts = "".join(stat(k, v) for k, v in row.items() if not isinstance(v, (dict, list)))
        bindings = [dict(b, source=b["source"] or "(default)") for b in map(
            binding_json, await self._rows("bindings", {"queue": name}))]
        consumers = await self._rows("consumers", {"queue": name})
        buttons = (self._button(who, req, "queue.purge", name, "Purge",
                                f"Purge every ready message of {name}?")
                   + self._button(who, req, "queue.delete", name, "Delete",
                                  f"Delete the queue {name}?"))
        if _admin(who):
            token = self.actions.token(who)
            buttons += (
                '<form method=post action="/console/action" class="pick">'
                f'<input type=hidden name=op value="queue.publish">'
                f'<input type=hidden name=target value="{esc(name)}">'
                f'<input type=hidden name=csrf value="{esc(token)}">'
                f'<input type=hidden name=back value="{esc(req.path)}">'
                '<label>Test message <input name=payload maxlength=4096 value="hello"></label> '
                "<button type=submit>Publish</button></form>"
                + button("queue.get", name, "Get one message", token, req.path, "",
                         danger=False))
        # the forms stay out of the live part: a refresh must not wipe a message being typed
        body = (f'<div>{buttons}</div>{LIVE_MARK}<div class="stats">{facts}</div>'
                "<h2>Arguments</h2>"
                + table([Column("k", "Argument"), Column("v", "Value")],
                        [{"k": k, "v": v} for k, v in (row.get("arguments") or {}).items()],
                        None, "no arguments")
                + "<h2>Bindings</h2>"
                + table([Column("source", "Exchange"), Column("routing_key", "Routing key")],
                        bindings, None, "no bindings")
                + "<h2>Consumers</h2>"
                + table([Column("consumer_tag", "Tag"), Column("connection", "Connection"),
                         Column("channel", "Channel", True), Column("prefetch", "Prefetch", True),
                         Column("unacked", "Unacked", True)], consumers, None, "no consumers"))
        return f"Queue {name}", "/queues", body

    async def exchanges(self, _req: Request, _who: Principal, _args: tuple[str, ...]
                        ) -> tuple[str, str, str]:
        rows = [dict(r, name=r.get("name") or "(default)") for r in await self._rows("exchanges")]
        bindings = [binding_json(b) for b in await self._rows("bindings")]
        cols = [Column("name", "Name"), Column("type", "Type"), Column("durable", "Durable"),
                Column("internal", "Internal")]
        bcols = [Column("source", "Source"), Column("destination", "Destination"),
                 Column("destination_type", "Kind"), Column("routing_key", "Routing key")]
        return "Exchanges", "/exchanges", (
            table(cols, rows, None, "no exchanges", "Exchanges") + "<h2>Bindings</h2>"
            + table(bcols, bindings, None, "no bindings", "Bindings"))

    async def connections(self, req: Request, who: Principal, _args: tuple[str, ...]
                          ) -> tuple[str, str, str]:
        rows = await self._rows("connections")

        def actions(row: dict[str, Any]) -> str:
            name = str(row.get("name", ""))
            return self._button(who, req, "connection.close", name, "Close",
                                f"Close the connection {name}?")

        cols = [Column("name", "Peer"), Column("user", "User"), Column("state", "State"),
                Column("channels", "Channels", True), Column("consumers", "Consumers", True),
                Column("unacked", "Unacked", True), Column("published", "Published", True),
                Column("delivered", "Delivered", True)]
        mqtt = [r for r in await self._rows("sessions") if r.get("connected")]

        def kick(row: dict[str, Any]) -> str:
            client = str(row.get("client", ""))
            return self._button(who, req, "client.kick", client, "Kick",
                                f"Disconnect {client}?")

        mcols = [Column("client", "Client"), Column("clean", "Clean"),
                 Column("subscriptions", "Subs", True), Column("inflight", "In flight", True),
                 Column("queued", "Queued", True)]
        return "Connections", "/connections", (
            "<h2>AMQP</h2>" + table(cols, rows, actions, "no AMQP connections", "AMQP",
                                    _page(req))
            + "<h2>MQTT clients</h2>"
            + table(mcols, mqtt, kick, "no MQTT client connected", "MQTT clients"))

    # ------------------------------------------------------------------ data
    async def collections(self, _req: Request, _who: Principal, _args: tuple[str, ...]
                          ) -> tuple[str, str, str]:
        rows = [dict(r, _html_name=link(r.get("name", ""), "collections", str(r.get("name"))))
                for r in await self._rows("collections")]
        routes = await self._rows("ingest.list")
        cols = [Column("_html_name", "Collection"), Column("count", "Documents", True)]
        rcols = [Column("filter", "Topic filter"), Column("collection", "Collection"),
                 Column("max_docs", "Max documents", True), Column("max_age", "Max age")]
        return "Collections", "/collections", (
            table(cols, rows, None, "no collections", "Collections") + "<h2>Ingest routes</h2>"
            + table(rcols, routes, None, "no ingest routes (oxiedge ingest add 'FILTER:NAME')",
                    "Ingest routes"))

    async def collection(self, req: Request, who: Principal, args: tuple[str, ...]
                         ) -> tuple[str, str, str]:
        name = args[0]
        since = int(time.time() * 1000) - CHART_WINDOW_MS
        # The last hour in _id order (ingest stamps _received_at in that order); an index on
        # _received_at makes this read only the hour (docs/console.md).
        docs = await self._rows("find", {"collection": name, "limit": CHART_DOCS,
                                         "filter": {"_received_at": {"$gte": since}}})
        if not docs and name not in await self._collection_names():
            raise OperationError(f"no collection {name!r}", "not_found")
        latest = [dict(d, _received_at=_clock(d.get("_received_at")))
                  for d in reversed(docs[-LATEST_DOCS:])]
        fields = sorted({k for d in docs[-LATEST_DOCS:] for k, v in d.items()
                         if not k.startswith("_") and _numeric(v)})
        field = req.query.get("field") or (fields[0] if fields else "")
        now_ms = time.time() * 1000
        points = [((d["_received_at"] - now_ms) / 1000, float(d[field])) for d in docs
                  if _numeric(d.get("_received_at")) and _numeric(d.get(field))]
        choose = "".join(f'<option{" selected" if f == field else ""}>{esc(f)}</option>'
                         for f in sorted({*fields, field} - {""}))
        form = (f'<form method=get action="{href("collections", name)}" class="pick">'
                f'<label>Field <select name=field>{choose}</select></label> '
                f"<button type=submit>Chart</button></form>") if choose else ""
        keys = sorted({k for d in latest for k in d})[:12]
        indexed = any(i.get("field") == "_received_at"
                      for i in await self._rows("index.list", {"collection": name}))
        if not indexed:  # the chart's find scans the whole collection without one
            form += ('<p class="hint">No index on _received_at: each refresh reads the whole '
                     "collection. " + (self._button(
                         who, req, "index.add", name, "Create the index", "", danger=False)
                         or f"(oxiedge index add {esc(name)} _received_at)") + "</p>")
        body = (form + LIVE_MARK
                + chart([(field, points)], title=f"{field} over the last hour",
                        x_from=_span(points, CHART_WINDOW_MS / 1000))
                + f"<h2>Latest documents (of {len(docs)} in the last hour)</h2>"
                + table([Column(k, k) for k in keys], latest, None,
                        "no documents in the last hour"))
        return f"Collection {name}", "/collections", body

    async def _collection_names(self) -> set[str]:
        """Collections with documents, and those an ingest route will write (listing them
        counts every collection: asked only when a page found no documents)."""
        return {str(r.get("name")) for r in await self._rows("collections")} | {
            str(r.get("collection")) for r in await self._rows("ingest.list")}

    async def uplinks(self, _req: Request, _who: Principal, _args: tuple[str, ...]
                      ) -> tuple[str, str, str]:
        # (the charts: each uplink's backlog and lag as sampled with the overview's rates)
        try:
            status = await self.broker.operate("uplink.status", {})
        except OperationError:
            status = {}
        rows = [dict(v, name=k) for k, v in (status or {}).items() if isinstance(v, dict)]
        cols = [Column("name", "Uplink"), Column("state", "State"),
                Column("backlog_messages", "Backlog", True),
                Column("backlog_bytes", "Backlog bytes", True),
                Column("lag_seconds", "Lag (s)", True)]
        charts = "" if not rows else (
            chart(self.history.uplink_series(0), "messages", title="Backlog",
                  x_from=-SAMPLES * 5.0)
            + chart(self.history.uplink_series(1), "s", title="Lag", x_from=-SAMPLES * 5.0))
        return "Uplinks", "/uplinks", charts + table(
            cols, rows, None, "no uplinks (oxiedge uplink add ...)", "Uplinks")

    async def users(self, req: Request, who: Principal, _args: tuple[str, ...]
                    ) -> tuple[str, str, str]:
        # Names, tags and permissions to every console user (read-only without the
        # administrator tag; never a password hash); the forms call PUT/DELETE /api/users
        # and /api/permissions, which refuse anyone but an administrator anyway.
        users = [{"name": u["name"], "tags": ", ".join(u.get("tags") or [])}
                 for u in self.broker.users()]
        perms = permission_rows(self.broker)

        def drop_user(row: dict[str, Any]) -> str:
            return self._button(who, req, "user.delete", row["name"], "Delete",
                                f"Delete the user {row['name']} and its permissions?")

        def drop_perms(row: dict[str, Any]) -> str:
            return self._button(who, req, "permissions.delete", str(row.get("user", "")),
                                "Delete", f"Delete the permissions of {row.get('user')}?")

        cols = [Column("name", "User"), Column("tags", "Tags")]
        pcols = [Column("user", "User"), Column("vhost", "Vhost"),
                 Column("configure", "Configure"), Column("write", "Write"),
                 Column("read", "Read")]
        forms = user_forms(self.actions.token(who), req.path,
                           [u["name"] for u in users]) if _admin(who) else ""
        return "Users", "/users", (
            forms + LIVE_MARK
            + table(cols, users, drop_user, "no users: anonymous access (loopback only)",
                    "Users")
            + "<h2>Permissions</h2>"
            + table(pcols, perms, drop_perms,
                    "no permission rules: every user may do everything", "Permissions"))

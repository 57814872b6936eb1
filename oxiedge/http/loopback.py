"""The guard of the anonymous loopback default against other web sites.

With no user and the listeners on a loopback address, the broker is open to every local
process (``auth.UserStore.open_by_loopback``). A web page the operator opens in a browser
on the same machine is not such a process, but it can make the browser talk to the
loopback ports: a WebSocket to ``ws://127.0.0.1:PORT/mqtt`` is not bound by the browser's
same-origin rule, and a host name of the page's own that is re-pointed at 127.0.0.1 (DNS
rebinding) makes plain HTTP requests look same-origin. Both carry the page's names: the
``Host`` header of a rebinding request names the attacker's host, the ``Origin`` header of
a WebSocket names the page. So while the default is open, a request is answered only when
both headers name a loopback host: ``localhost`` (and ``*.localhost``), ``127.0.0.0/8`` or
``::1``. A program that sends no ``Origin`` (every MQTT, AMQP and HTTP client library,
``curl``, ``rabbitmqadmin``) is unaffected. Once a user exists, credentials decide instead.

Sans-IO: plain functions over the request's header dictionary.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

REFUSAL = ("no user exists yet, so this listener is open only to this machine's own "
           "programs and pages; {what} names {name!r}, not a loopback host (a guard against "
           "web sites reaching a local broker): use http://localhost or http://127.0.0.1, or "
           "add a user with `oxiedge user add NAME --tags administrator`")


def loopback_name(host: str) -> bool:
    """Whether ``host`` (no port; an IPv6 address without brackets) is a loopback name."""
    name = host.strip().rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_of(url: str) -> str:
    """The host of ``url`` (``//host[:port]``, ``scheme://[v6][:port]``; '' when it has none
    or cannot be split: a client's header, e.g. ``http://[::1`` that ``urlsplit`` refuses)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def foreign_page(headers: dict[str, str]) -> str | None:
    """Why a request to the open loopback default is refused (None: it may be answered).
    ``headers``: lower-case names, as ``messages.Request`` has them."""
    host = headers.get("host")
    if host is not None and not loopback_name(_host_of("//" + host)):
        return REFUSAL.format(what="the Host header", name=host[:100])
    origin = headers.get("origin")  # ("null": a sandboxed or file: page)
    if origin is not None and (origin == "null" or not loopback_name(_host_of(origin))):
        return REFUSAL.format(what="the page's Origin", name=origin[:100])
    return None

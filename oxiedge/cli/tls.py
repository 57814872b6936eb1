"""``oxiedge tls reload``: the running server re-reads its certificate, key and CA."""

from __future__ import annotations

import json
import sys

from .base import DataOpt, JsonOpt, _fail, _request, tls_app


@tls_app.command("reload")
def tls_reload(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Re-read the TLS certificate, key and CA (like SIGHUP); connections stay up, new
    handshakes use the new certificate. A bad file keeps the old one and exits 1."""
    result = _request(data, "tls.reload", {}, None)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    elif result.get("reloaded"):
        sys.stdout.write(f"TLS certificate reloaded from {result.get('cert')}\n")
    if not result.get("reloaded"):
        _fail(f"TLS reload failed, the previous certificate stays in use: {result.get('error')}")


"""The console's tests reuse the HTTP tests' real server fixtures (``tests/http``)."""

from __future__ import annotations

from tests.http.conftest import client_for, http_server, users_server  # noqa: F401

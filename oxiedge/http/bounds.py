"""The HTTP listener's bounds (docs/limits.md, "HTTP"); fixed, like the permission caches:
they bound one connection's input and time, and every one counts what it cut off."""

from __future__ import annotations

#: Request line + headers (h11's ``max_incomplete_event_size``); 431 above it.
MAX_HEADER_BYTES = 16 * 1024
#: Seconds from the accept (first request) or from the first byte (later ones) to the end of
#: the headers: a slowloris client is cut off here (408).
HEADER_TIMEOUT = 10.0
#: Request body (a definitions import is the largest expected); 413 above it.
MAX_BODY = 16 * 1024 * 1024
#: Seconds to receive the whole body (408).
BODY_TIMEOUT = 60.0
#: Seconds a keep-alive connection may wait for its next request.
IDLE_TIMEOUT = 60.0
#: Seconds one answer may take to write (a client that does not read).
WRITE_TIMEOUT = 30.0
#: Requests per connection; the last answer carries ``Connection: close``.
MAX_REQUESTS = 1000

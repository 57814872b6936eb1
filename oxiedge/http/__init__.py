"""The HTTP side of ``oxiedge serve``: health checks, Prometheus metrics and RabbitMQ's
management API on one listener (docs/http.md).

Layers, one way:

* sans-IO - ``messages.py`` (a request and a response as values), ``access.py`` (Basic
  credentials, tags, the per-connection cache), ``routes.py`` (the route table, health and
  metrics endpoints), ``api.py`` (the management API's object reads), ``nodes.py`` (nodes,
  health checks, users and permissions), ``writes.py`` (the writes and the connection
  views, through the operation table), ``definitions.py`` and ``imports.py`` (the definitions export
  and import), ``local_api.py``
  (``/api/mqtt/`` and ``/api/oxiedge/``), ``metrics.py``
  (the Prometheus text format), ``bounds.py`` (the listener's bounds). None imports trio
  or h11.
* I/O - ``credentials.py`` (the password check through ``oxiedge.login``), ``connection.py``
  (h11 on a trio stream, the deadlines), ``listener.py`` (accept, connection limits, TLS;
  h11 is imported when it starts), ``wiring.py`` (the broker view over the running server,
  built by ``server.py``).
"""

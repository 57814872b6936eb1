"""MQTT over WebSockets (RFC 6455) on the HTTP listener (docs/http.md, "WebSocket").

``handshake.py`` decides an upgrade request (sans-IO, no wsproto); ``stream.py`` is the
WebSocket stream the MQTT connection reads and writes through (wsproto, imported at the
first upgrade); ``endpoint.py`` ties an accepted upgrade to an MQTT connection on the same
transport loop as TCP.
"""

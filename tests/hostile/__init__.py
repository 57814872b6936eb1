"""Hostile-client suite (issue 14): each abuse against a real ``oxiedge serve``, with an
innocent client's PINGREQ round trip and the broker's RSS measured alongside.
See ``tests/hostile/conftest.py`` for the shared helpers."""

"""Ingest: MQTT topics into document collections - routes (``routes.py``, ``stored.py``),
payload → document (``documents.py``), the per-publish step (``step.py``), retention
(``retention.py``) and the index admin (``indexes.py``)."""

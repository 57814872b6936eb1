"""Bridges: MQTT topics into document collections (ingest) and MQTT ⇄ AMQP via amq.topic."""

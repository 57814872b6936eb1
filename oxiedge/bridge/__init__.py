"""The MQTT ⇄ AMQP bridge through ``amq.topic`` (``amqp_mqtt.py``); the topic mapping it uses is
``oxiedge.topicmap``, the ingest step is ``oxiedge.ingest``."""

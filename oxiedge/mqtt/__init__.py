"""The MQTT 3.1.1 broker.

One concern per module: ``packets``/``codec`` (sans-IO wire format), ``topics`` (filters and
tries), ``session`` (what is owed to one client id), ``broker`` (sessions, subscriptions,
retained messages, the publish router), ``persist`` (the on-disk layout), ``connection``
(the trio loop of one client), ``service`` (the ``oxiedge serve`` service) and ``views``
(offline listings). See docs/mqtt.md.
"""

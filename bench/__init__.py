"""oxiedge's benchmark harness: broker-agnostic MQTT and AMQP load generators.

Run ``python -m bench --help``; the method and the measured figures are in
``bench/README.md``.
"""

"""Uplink: store-and-forward from this device to an upstream RabbitMQ or MQTT broker."""

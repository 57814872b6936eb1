"""AMQP 0-9-1 broker: sans-IO codec (``codec``, ``fields``, ``spec``) + trio service."""

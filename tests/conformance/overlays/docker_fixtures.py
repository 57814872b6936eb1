# --- oxiedge conformance overlay (appended by tests/conformance/run_suites.py) ---
# aio-pika and aiormq start RabbitMQ in Docker from session fixtures. These definitions come
# after the originals in the same conftest module, so they replace them: no Docker, the broker
# is the oxiedge server the runner started, named by OXIEDGE_AMQP_HOST / OXIEDGE_AMQP_PORT.
import os as _ox_os
from dataclasses import dataclass as _ox_dataclass

import pytest as _ox_pytest
from yarl import URL as _OxURL


@_ox_dataclass
class _OxBroker:
    """Duck-types the suites' ContainerInfo (id, host, ports)."""

    id: str
    host: str
    ports: dict[str, int]


def pytest_configure(config: object) -> None:  # replaces the Docker availability check
    return None


@_ox_pytest.fixture(scope="session")
def rabbitmq_container() -> _OxBroker:
    port = int(_ox_os.environ["OXIEDGE_AMQP_PORT"])
    # 5671: oxiedge's AMQPS listener (--amqp-tls-port), certificate from the runner's CA.
    return _OxBroker(id="oxiedge", host=_ox_os.environ["OXIEDGE_AMQP_HOST"],
                     ports={"5672/tcp": port,
                            "5671/tcp": int(_ox_os.environ["OXIEDGE_AMQP_TLS_PORT"])})


@_ox_pytest.fixture(scope="session")
def amqp_direct_url(rabbitmq_container: _OxBroker) -> _OxURL:
    return _OxURL.build(scheme="amqp", user="guest", password="guest", path="//",
                        host=rabbitmq_container.host,
                        port=rabbitmq_container.ports["5672/tcp"])

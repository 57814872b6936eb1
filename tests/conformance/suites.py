"""The client libraries whose own test suites run against oxiedge, and how each is pointed at it.

Each :class:`Suite` pins a PyPI sdist, names the test files that talk to a broker, the extra
packages its tests import, the environment that carries the broker address, overlays that
replace Docker-based fixtures, and the exclusions. An exclusion is allowed only for a feature
outside oxiedge's scope (``docs/amqp.md``: one vhost ``/``, no streams yet) or for a
harness limit
(Docker, a public host); every one carries its reason into ``docs/conformance.md``. The
server also listens for AMQPS on 5671 (a trustme CA of the runner's: ``tls_material``), so
the suites' TLS tests run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
#: The one user the runner configures on the server (what the suites use by default).
USER = "guest"
PASSWORD = "guest"

# Reasons, shared so the report groups them.
PUBLIC = "dials a public host (badssl.com); this harness reaches only loopback"
DOCKER = "restarts/stops the broker's Docker container: harness limit, not a broker feature"
MGMT = "the management HTTP API: run by the amqpstorm-management suite"
VHOSTS = "creates another vhost: oxiedge has one vhost, '/' (docs/amqp.md)"
RABBIT_HOST = ("asserts the cluster name of the suite's own public RabbitMQ host "
               "('rabbit@rmq.eandersson.net'): harness limit")
LAN = "dials a LAN address (192.168.1.50); this harness reaches only loopback"
MOCKED = "not a broker test: the 'integration' module drives a mocked socket"


@dataclass(frozen=True)
class Exclusion:
    """Deselect the tests whose pytest node id matches ``pattern`` (a regex), for ``reason``."""

    pattern: str
    reason: str


@dataclass(frozen=True)
class Suite:
    """One library's test suite, pinned, and how to aim it at an oxiedge server."""

    name: str
    dist: str
    version: str
    test_paths: tuple[str, ...]
    requirements: tuple[str, ...]
    #: (AMQP port, AMQPS port, directory of tls_material, management API URL) ->
    #: environment of the suite
    env: Callable[[int, int, Path, str], dict[str, str]]
    exclusions: tuple[Exclusion, ...] = ()
    #: relative path in the unpacked sdist -> overlay module (in ``overlays/``) appended to it
    overlays: dict[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()
    note: str = ""
    #: regexes of tests seen to pass and fail against the same server (client-side races);
    #: the baseline gate forgives them, they still count in the table
    flaky: tuple[str, ...] = ()
    #: relative path in the unpacked sdist -> file of ``run_suites.tls_material`` copied there
    tls_files: dict[str, str] = field(default_factory=dict)
    #: the server also serves the management HTTP API, and the suite's user is an
    #: administrator with every permission in '/' (RabbitMQ's default guest)
    management: bool = False
    #: the suite comes from a git commit (owner/name, 40-hex commit) instead of a PyPI sdist:
    #: ``git archive`` of that commit from a local clone (``run_suites.git_dir``)
    git: tuple[str, str] | None = None
    #: a fixed AMQP port for suites that hard-code it (pika dials 127.0.0.1:5672); 0 = free
    amqp_port: int = 0


def _docker_env(port: int, tls_port: int, _tls: Path, _http: str) -> dict[str, str]:
    return {"OXIEDGE_AMQP_HOST": HOST, "OXIEDGE_AMQP_PORT": str(port),
            "OXIEDGE_AMQP_TLS_PORT": str(tls_port)}


def _rabbitmq_env(port: int, tls_port: int, _tls: Path, _http: str) -> dict[str, str]:
    # py-amqp and kombu read RABBITMQ_HOST and the docker-link style RABBITMQ_5672_TCP.
    return {"RABBITMQ_HOST": HOST, "RABBITMQ_5672_TCP": str(port),
            "RABBITMQ_5671_TCP": str(tls_port), "OXIEDGE_AMQP_PORT": str(port)}


def _pika_env(port: int, _tls_port: int, _tls: Path, _http: str) -> dict[str, str]:
    # pika's acceptance tests dial 127.0.0.1:5672 themselves (amqp_port=5672 below).
    return {"OXIEDGE_AMQP_PORT": str(port)}


def _amqpstorm_env(port: int, tls_port: int, tls: Path, http: str) -> dict[str, str]:
    # Every address amqpstorm.tests reads is overridden: its defaults name a public host.
    # Without the management API the HTTP URL is a closed loopback port (a stray management
    # call fails fast).
    uri = f"amqp://guest:guest@{HOST}:{port}/%2F"
    return {"AMQP_HOST": HOST, "AMQP_USERNAME": "guest", "AMQP_PASSWORD": "guest",
            "AMQP_URI": uri, "AMQP_HTTP_URL": http or f"http://{HOST}:9",
            "AMQP_SSL_URI": f"amqps://guest:guest@{HOST}:{tls_port}/%2F", "AMQP_SSL_HOST": HOST,
            "AMQP_CAFILE": str(tls / "ca.pem"), "AMQP_CERTFILE": str(tls / "client.pem"),
            "AMQP_KEYFILE": str(tls / "client.key"), "OXIEDGE_AMQP_PORT": str(port)}


SUITES: tuple[Suite, ...] = (
    Suite(
        # pika's sdist has no tests: its acceptance tests come from the repository at a pinned
        # commit (pika 1.4.0 as of 2026-08-21), run as pika's CI runs them but in one process.
        name="pika", dist="pika", version="1.4.0",
        git=("pika/pika", "2126d43a76c14fb8d365d96bd1bdcef13dad75b5"),
        amqp_port=5672,
        test_paths=("tests/acceptance",),
        requirements=("pytest>=8,<10", "pytest-timeout", "gevent", "tornado", "twisted"),
        env=_pika_env,
        note="From git (the sdist has no tests): tests/acceptance of pika/pika at 2126d43a76c1, "
             "plain TCP on 5672 (the suite's TLS mode, --use-tls, wants RabbitMQ to require "
             "client certificates from its own CA in tests/certs, not run).",
    ),
    Suite(
        name="aiormq", dist="aiormq", version="7.2.4",
        test_paths=("tests",),
        requirements=("pytest>=8.4,<10", "aiomisc-pytest>=2,<3", "pytest-timeout"),
        env=_docker_env,
        overlays={"tests/conftest.py": "docker_fixtures.py"},
        # test_confirm_multiple gives 10 confirms 0.2 s of wall clock: it failed once (amqps)
        # at load average 12 and passes on every other parametrisation.
        flaky=(r"test_closing_waiter_cancellation\[",
               r"test_connection_close_during_publish_drain", r"test_confirm_multiple\["),
        note="The sdist's conftest uses amqp_direct_url/rabbitmq_container without defining "
             "them; the overlay supplies both.",
    ),
    Suite(
        name="aio-pika", dist="aio-pika", version="10.2.1",
        test_paths=("tests",),
        requirements=("pytest>=8.4,<10", "aiomisc", "aiomisc-pytest>=2,<3", "shortuuid",
                      "timeout-decorator", "pytest-timeout"),
        env=_docker_env,
        overlays={"tests/conftest.py": "docker_fixtures.py"},
        exclusions=(
            Exclusion(r"test_robust_recovery\.py::test_(restore_topology_and_consumers|"
                      r"missing_external_queue_retries_until_recreated|"
                      r"pool_consumer_survives_broker_restart)", DOCKER),
        ),
        flaky=(r"test_leak_unclosed_channel\[", r"test_create_channels_during_reconnect"),
    ),
    Suite(
        name="py-amqp", dist="amqp", version="5.4.2",
        test_paths=("t/integration/test_rmq.py",),
        requirements=("pytest>=6.2.5,<=8.0.0", "pytest-timeout"),
        env=_rabbitmq_env,
        exclusions=(
            Exclusion(r"test_rmq\.py::test_tls_(default_certs|no_default_certs_fails)", PUBLIC),
        ),
        # The TLS tests read their CA and client pair from t/certs (made by py-amqp's CI).
        tls_files={"t/certs/ca_certificate.pem": "ca.pem",
                   "t/certs/client_certificate.pem": "client.pem",
                   "t/certs/client_key.pem": "client.key",
                   "t/certs/client_certificate_broken.pem": "broken.pem",
                   "t/certs/client_key_broken.pem": "broken.key"},
        note="t/integration/test_integration.py is not run: " + MOCKED + ".",
    ),
    Suite(
        name="kombu", dist="kombu", version="5.7.0",
        test_paths=("t/integration/test_py_amqp.py",),
        requirements=("amqp==5.4.2", "pytest>=8,<10", "pytest-timeout"),
        env=_rabbitmq_env,
        exclusions=(
        ),
        note="Only the py-amqp transport module; the redis/mongodb/sqs/kafka/pgmq modules test "
             "other brokers.",
    ),
    Suite(
        name="amqpstorm", dist="amqpstorm", version="3.1.4",
        test_paths=("amqpstorm/tests/functional",),
        requirements=("pytest>=8,<10", "pytest-timeout", "requests"),
        env=_amqpstorm_env,
        overlays={"amqpstorm/tests/functional/conftest.py": "amqpstorm_conftest.py"},
        note="The functional tests clean up through the management HTTP API; the overlay "
             "deletes their queues/exchanges over AMQP instead and adds the port.",
        exclusions=(
            Exclusion(r"functional/management/", MGMT),
            Exclusion(r"functional/test_web_based\.py", MGMT),
        ),
    ),
    Suite(
        name="amqpstorm-management", dist="amqpstorm", version="3.1.4",
        test_paths=("amqpstorm/tests/functional/management",
                    "amqpstorm/tests/functional/test_web_based.py"),
        requirements=("pytest>=8,<10", "pytest-timeout", "requests"),
        env=_amqpstorm_env,
        management=True,
        overlays={"amqpstorm/tests/functional/conftest.py": "amqpstorm_conftest.py",
                  "amqpstorm/tests/functional/management/conftest.py":
                      "amqpstorm_management.py"},
        note="AMQPStorm's ManagementApi black-box against oxiedge's HTTP API "
             "(docs/http.md); its tests' own AMQP connections default to the server's port.",
        exclusions=(
            Exclusion(r"test_queue\.py::ApiQueueFunctionalTests::test_api_queue_list_"
                      r"(filter_with_regex|filter_with_regex_boolean|filter_without_regex|"
                      r"no_pagination|pagination)$", VHOSTS),
            Exclusion(r"test_virtual_host\.py::ApiUserFunctionalTests::"
                      r"test_api_virtual_host_create$", VHOSTS),
            Exclusion(r"test_web_based\.py::WebFunctionalTests::"
                      r"test_functional_alternative_virtual_host$", VHOSTS),
            Exclusion(r"test_api\.py::ApiFunctionalTests::test_api_cluster_name$", RABBIT_HOST),
            Exclusion(r"test_api\.py::ApiFunctionalTests::test_api_with_inaccessible$", LAN),
        ),
    ),
)


def by_name(name: str) -> Suite:
    """The suite called ``name`` (KeyError naming the known ones otherwise)."""
    for suite in SUITES:
        if suite.name == name:
            return suite
    raise KeyError(f"unknown suite {name!r}; known: {', '.join(s.name for s in SUITES)}")

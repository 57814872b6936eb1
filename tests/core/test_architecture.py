"""The shape of the package (docs/architecture.md), checked from the source.

The import graph is read statically with ``ast`` (every ``import`` counts, those under
``if TYPE_CHECKING:`` and inside functions too), so a rule cannot be broken by a lazy import
that a test run happens not to execute.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "oxiedge"

#: Modules exempt from the size rule, with the reason.
SIZE_EXEMPT = {"oxiedge.amqp.spec": "generated from the AMQP 0-9-1 spec by tools/"}
#: "No module over ~500 lines" (issue 15).
MAX_LINES = 500


@cache
def modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The package modules one import statement loads."""
    known = modules()
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias.name
        return
    here = module.split(".")
    if known[module].name != "__init__.py":
        here.pop()  # a plain module's relative imports start at its package
    base = here[: len(here) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else []))
    names = [f"{target}.{a.name}" if target else a.name for a in node.names]
    submodules = [n for n in names if n in known]
    if submodules and len(submodules) == len(names):
        yield from submodules  # ``from pkg import mod``: the submodules, not pkg's namespace
    elif target in known:
        yield target
        yield from submodules


@cache
def imports() -> dict[str, frozenset[str]]:
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules().items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(t for t in _targets(name, node) if t != name)
        # A package's __init__ is loaded before any of its modules: not a real edge back.
        graph[name] = frozenset(deps)
    return graph


def closure(module: str) -> set[str]:
    """Every package module ``module`` loads, directly or not (itself included)."""
    seen = {module}
    todo = [module]
    while todo:
        for dep in imports()[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    assert cycles() == []


#: The sans-IO layer: codecs, the generated spec, the protocol objects and the vocabulary
#: they share with the transport loop. None may load an event loop, a socket or the store.
SANS_IO = ["oxiedge.mqtt.codec", "oxiedge.mqtt.bodies", "oxiedge.mqtt.encode",
           "oxiedge.mqtt.codec5", "oxiedge.mqtt.bodies5", "oxiedge.mqtt.encode5",
           "oxiedge.mqtt.packets5", "oxiedge.mqtt.properties", "oxiedge.mqtt.reasons",
           "oxiedge.mqtt.protocol", "oxiedge.mqtt.connect", "oxiedge.mqtt.bounds",
           "oxiedge.durations",
           "oxiedge.amqp.codec", "oxiedge.amqp.spec", "oxiedge.amqp.fields",
           "oxiedge.amqp.properties", "oxiedge.amqp.deadletter", "oxiedge.amqp.routeindex",
           "oxiedge.amqp.protocol", "oxiedge.amqp.handshake", "oxiedge.amqp.burst",
           "oxiedge.amqp.streaming", "oxiedge.amqp.bounds", "oxiedge.amqp.ports",
           "oxiedge.amqp.channel", "oxiedge.amqp.consumers", "oxiedge.amqp.settlement",
           "oxiedge.amqp.channels", "oxiedge.amqp.transaction",
           "oxiedge.amqp.acktimeout",
           "oxiedge.net.actions",
           "oxiedge.uplink.amqp_client", "oxiedge.uplink.amqp_handshake"]
IO_MODULES = ("trio", "socket", "ssl", "asyncio", "rocksdict", "oxiedge.store.committer")


@pytest.mark.parametrize("module", SANS_IO)
def test_codecs_and_protocol_objects_load_no_io(module: str) -> None:
    """Checked in a fresh interpreter, so what counts is what importing really loads
    (package ``__init__`` files included), not only the module's own import lines."""
    assert module in modules(), f"{module} is named in docs/architecture.md but does not exist"
    probe = (f"import sys, {module}\n"
             f"print(' '.join(sorted(m for m in {IO_MODULES!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent)
    assert out.stdout.split() == []


def test_sans_io_list_is_the_documented_one() -> None:
    """Every module checked as sans-IO is named in docs/architecture.md's rule."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    assert [m for m in SANS_IO if f"`{m.removeprefix('oxiedge.')}`" not in doc] == []


def test_store_imports_no_protocol() -> None:
    protocol_packages = ("oxiedge.mqtt", "oxiedge.amqp", "oxiedge.bridge", "oxiedge.uplink",
                         "oxiedge.ingest", "oxiedge.net", "oxiedge.admin")
    loaded = set().union(*(closure(m) for m in modules() if m.startswith("oxiedge.store")))
    assert sorted(m for m in loaded if m.startswith(protocol_packages)) == []


def test_modules_are_small() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES and n not in SIZE_EXEMPT} == {}


# ------------------------------------------------------------------ layering rules
# Each rule yields the import edges that break it, as "importer -> imported". Every import
# counts, inside functions and under TYPE_CHECKING too (``imports()``).

def _in(module: str, *packages: str) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _external_imports(module: str) -> set[str]:
    """The top-level names of what ``module`` imports from outside the package."""
    found: set[str] = set()
    path = modules()[module]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    found.discard("oxiedge")
    return found


def net_outside_net() -> Iterator[str]:
    """``net/`` imports only ``net/`` (the transport knows no protocol, no process part),
    the standard library and trio."""
    for module, deps in imports().items():
        if _in(module, "oxiedge.net"):
            yield from (f"{module} -> {d}" for d in sorted(deps) if not _in(d, "oxiedge.net"))
            yield from (f"{module} -> {name}" for name in sorted(_external_imports(module))
                        if name != "trio" and name not in sys.stdlib_module_names)


#: Who may use the transport (beyond ``net.actions``, the vocabulary the sans-IO protocol
#: objects share with it): the bindings of a protocol onto it and the process wiring
#: (``app`` builds the one ``net.blocked.BlockedWatch``); ``tls`` takes the socket under a
#: TLS stream from ``net.sockets``.
NET_USERS = ("oxiedge.mqtt.connection", "oxiedge.amqp.connection", "oxiedge.server",
             "oxiedge.app", "oxiedge.tls")


def net_users() -> Iterator[str]:
    for module, deps in imports().items():
        if _in(module, "oxiedge.net") or module in NET_USERS:
            continue
        yield from (f"{module} -> {d}" for d in sorted(deps)
                    if _in(d, "oxiedge.net") and d != "oxiedge.net.actions")


def sans_io_wiring() -> Iterator[str]:
    """The sans-IO protocol parts load neither ``oxiedge.app`` nor ``oxiedge.config``
    (directly or not): they are given explicit values."""
    graph = imports()
    for module in sorted(set().union(*(closure(m) for m in SANS_IO))):
        yield from (f"{module} -> {d}" for d in sorted(graph[module])
                    if d in ("oxiedge.app", "oxiedge.config"))


def mqtt_amqp_crossings() -> Iterator[str]:
    """The two brokers meet only through the bus and the bridge."""
    for module, deps in imports().items():
        for a, b in (("oxiedge.mqtt", "oxiedge.amqp"), ("oxiedge.amqp", "oxiedge.mqtt")):
            if _in(module, a):
                yield from (f"{module} -> {d}" for d in sorted(deps) if _in(d, b))


#: The process wiring and the operator's tools: they build and drive the services.
WIRING = ("oxiedge.server", "oxiedge.cli", "oxiedge.admin")


def _is_service(module: str) -> bool:
    """A broker's service module (``oxiedge.mqtt.service``, ``oxiedge.amqp.service``, any
    ``oxiedge.<package>.service``); ``oxiedge.service`` is the Protocol they provide."""
    return module.endswith(".service") and module.count(".") >= 2


def services_outside_wiring() -> Iterator[str]:
    """A service and the bus are imported only by the wiring; anything else that needs one
    of them names a Protocol of what it uses in a leaf module (``staged.py``, ``bus.py``,
    ``uplink/ports.py``, ``bridge.amqp_mqtt.AmqpEntry``)."""
    for module, deps in imports().items():
        if _in(module, *WIRING):
            continue
        yield from (f"{module} -> {d}" for d in sorted(deps)
                    if (_is_service(d) or d == "oxiedge.bus") and not _in(module, d))


def bus_side_wiring() -> Iterator[str]:
    """The bus imports none of its destinations; the bridge and the uplinks import neither
    ``oxiedge.app`` nor ``oxiedge.config`` (they see the process through Protocols)."""
    graph = imports()
    destinations = ("oxiedge.mqtt", "oxiedge.amqp", "oxiedge.bridge", "oxiedge.ingest",
                    "oxiedge.uplink")
    yield from (f"oxiedge.bus -> {d}" for d in sorted(graph["oxiedge.bus"])
                if _in(d, *destinations))
    for module, deps in graph.items():
        if _in(module, "oxiedge.bridge", "oxiedge.uplink"):
            yield from (f"{module} -> {d}" for d in sorted(deps)
                        if d in ("oxiedge.app", "oxiedge.config"))


RULES = {"net imports only net": net_outside_net,
         "only bindings and wiring use net": net_users,
         "sans-IO parts take no app or config": sans_io_wiring,
         "mqtt and amqp never import each other": mqtt_amqp_crossings,
         "services and the bus are wiring": services_outside_wiring,
         "the bus and its destinations": bus_side_wiring}


@pytest.mark.parametrize("rule", RULES)
def test_layering_rule(rule: str) -> None:
    assert sorted(set(RULES[rule]())) == []

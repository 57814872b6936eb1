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
#: "No module over ~500 lines" (issue 15): a few lines of slack, not a second budget.
MAX_LINES = 520


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
           "oxiedge.mqtt.protocol", "oxiedge.mqtt.connect", "oxiedge.mqtt.bounds",
           "oxiedge.durations",
           "oxiedge.amqp.codec", "oxiedge.amqp.spec", "oxiedge.amqp.fields",
           "oxiedge.amqp.properties", "oxiedge.amqp.deadletter", "oxiedge.amqp.routeindex",
           "oxiedge.amqp.protocol", "oxiedge.amqp.handshake", "oxiedge.amqp.burst",
           "oxiedge.amqp.streaming", "oxiedge.amqp.bounds", "oxiedge.amqp.ports",
           "oxiedge.net.actions"]
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


def test_store_imports_no_protocol() -> None:
    protocol_packages = ("oxiedge.mqtt", "oxiedge.amqp", "oxiedge.bridge", "oxiedge.uplink",
                         "oxiedge.ingest", "oxiedge.net", "oxiedge.admin")
    loaded = set().union(*(closure(m) for m in modules() if m.startswith("oxiedge.store")))
    assert sorted(m for m in loaded if m.startswith(protocol_packages)) == []


def test_modules_are_small() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES and n not in SIZE_EXEMPT} == {}

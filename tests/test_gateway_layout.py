"""The gateway's shape: its modules import one way (no cycle, TYPE_CHECKING imports included),
and the entry points reach the gateway only through the pipeline."""

from __future__ import annotations

import ast
from pathlib import Path

import llmbridge.gateway

ROOT = Path(llmbridge.gateway.__file__).parent
PACKAGE = "llmbridge.gateway"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the gateway modules it imports (anywhere in it), with the packages whose
    ``__init__`` such an import runs."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                found = f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                while found in modules and found != name:
                    if not name.startswith(found + "."):  # a module's own package is already running
                        graph[name].add(found)
                    found = found.rsplit(".", 1)[0]
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_gateway_modules_import_without_a_cycle():
    assert _cycles(_imports(_modules())) == []


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_only_the_app_knows_the_gateway_object():
    """Entry points get the pipeline (config, upstreams, teams, traffic), never ``Gateway``."""
    graph = _imports(_modules())
    importers = sorted(m for m, targets in graph.items() if f"{PACKAGE}._app" in targets)
    assert importers == [PACKAGE, f"{PACKAGE}._server"] or importers == [PACKAGE]


def test_every_served_dialect_has_its_gateway_traits_and_endpoints():
    """Each dialect in NAMES carries its gateway traits (dialects.base.Served) and the app
    serves a POST at each of its paths; a dialect added to NAMES without them fails here."""
    from starlette.routing import Match

    from llmbridge import dialects
    from llmbridge.dialects.base import Served
    from llmbridge.gateway import config, create_app

    app = create_app(config.parse({"models": []}))
    for name in dialects.NAMES:
        traits = dialects.served(name)
        assert isinstance(traits, Served) and traits.paths, name
        assert traits.keepalive and traits.models(["m"]) and traits.model("m"), name
        for path in traits.paths:
            concrete = path.replace("{version}", "v1beta").replace("{model}", "m")
            scope = {"type": "http", "method": "POST", "path": concrete, "root_path": ""}
            matches = [route.matches(scope)[0] for route in app.routes]
            assert Match.FULL in matches, (name, concrete)


def test_the_gateway_internals_are_private_modules():
    """``llmbridge.gateway`` and its ``config`` are the public surface; every other module of
    the gateway is private by name (a leading underscore), as h11's are."""
    public = sorted(
        name for name in _modules() if name != PACKAGE and not any(part.startswith("_") for part in name.split(".")[2:])
    )
    assert public == [f"{PACKAGE}.config"]

"""The layers of docs/architecture.md, held against the imports of the code.

Every module of `gateway` belongs to one layer; a module may import its own layer and the
layers below, never one above (a type-checking import counts: it is a dependency a reader
has to follow all the same). A module in no layer fails too, so a new one is placed on
purpose, and the parts of one layer import each other without a circle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gateway"

# Bottom up: each layer, and the units (a module, or a package taken whole) it holds.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "the product's words",
        {
            f"gateway.core.{name}"
            for name in (
                "results",
                "errors",
                "ids",
                "origins",
                "redaction",
                "recording",
                "nested",
                "metrics",
                "admission",
                "private_files",
                "png",
                "sandbox_spec",
                "storage_state",
                "approval_policy",
            )
        },
    ),
    (
        "identity",
        {
            "gateway",
            "gateway.core",
            "gateway.core.identity",
            "gateway.core.tokens",
            "gateway.core.registry",
        },
    ),
    ("records", {"gateway.core.store"}),
    ("evidence and ports", {"gateway.core.evidence", "gateway.core.ports"}),
    ("tasks and people", {"gateway.core.tasks", "gateway.core.approvals"}),
    ("the call", {"gateway.core.pipeline"}),
    (
        "the running gateway",
        {
            "gateway.settings",
            "gateway.parts",
            "gateway.runtime",
            "gateway.serving",
            "gateway.corked",
        },
    ),
    (
        "adapters",
        {
            f"gateway.{name}"
            for name in (
                "bridge",
                "browser",
                "cluster",
                "console",
                "http",
                "mcp_door",
                "sandbox",
                "tabs",
                "workspace",
            )
        },
    ),
    ("composition", {"gateway.app", "gateway.cli", "gateway.testing"}),
]
LAYER_OF = {unit: index for index, (_, units) in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The unit a module belongs to: a package of `gateway.core` or of `gateway` taken whole,
    else the module itself."""
    parts = module.split(".")
    depth = 3 if len(parts) > 2 and parts[1] == "core" else 2
    candidate = ".".join(parts[:depth])
    while candidate not in LAYER_OF and "." in candidate:
        candidate = candidate.rpartition(".")[0]
    return candidate


MODULES = sorted(PACKAGE.rglob("*.py"))
KNOWN = {module_name(p) for p in MODULES}


def imports_of(path: Path) -> set[str]:
    """Every `gateway` module the file imports, relative imports resolved, `from gateway
    import x` read as the module `gateway.x`."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name in KNOWN}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_its_layer_and_the_layers_below(path: Path) -> None:
    unit = unit_of(module_name(path))
    assert unit in LAYER_OF, f"{unit} is in no layer of docs/architecture.md"
    layer = LAYER_OF[unit]
    above = sorted(
        f"{name} ({LAYERS[LAYER_OF[unit_of(name)]][0]})"
        for name in imports_of(path)
        if LAYER_OF.get(unit_of(name), -1) > layer
    )
    assert not above, f"{unit} ({LAYERS[layer][0]}) imports a layer above it: {above}"


def test_the_units_of_a_layer_import_each_other_without_a_circle() -> None:
    arrows: dict[str, set[str]] = defaultdict(set)
    for path in MODULES:
        unit = unit_of(module_name(path))
        for name in imports_of(path):
            other = unit_of(name)
            if other != unit and other != "gateway":
                arrows[unit].add(other)

    def circle_from(start: str) -> list[str] | None:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            unit, trail = stack.pop()
            for nxt in arrows[unit]:
                if nxt == start:
                    return [*trail, start]
                if nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
        return None

    circles = [c for c in (circle_from(u) for u in sorted(arrows)) if c]
    assert not circles, circles[0]

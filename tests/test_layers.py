"""The installed package's import graph: no circle, and no import from a lower layer to a higher one.

The layers, lowest first (a module may import from its own layer's package or from any lower layer):

    specdec                      the version
    specdec.runtime.core         the error type, a request's parameters, the stats schema, the graph I/O names
    specdec.runtime.loading      loading and checking an untrusted export
    specdec.runtime.engine       devices, sessions and buffers
    specdec.runtime.decoding     a round of Algorithm 1, the draft sources, auto, beam search
    specdec.runtime.decoder      the request path (SpeculativeDecoder)
    specdec.runtime              the runtime's public names
    specdec.runtime.tools        specdec-generate, specdec-datastore and the datastore builder
    specdec.models               the bundled pair's recipe
    specdec.export               specdec-export (torch, transformers)
    specdec.bindings, .serve     the C API, Triton serving
    specdec.bench                specdec-bench

The graph is read from the modules' source (the `import` statements, top level or inside functions), so a lazy
import counts as much as an eager one.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import specdec

# the card's folders, mapped to subpackages in pyproject.toml (an editable install maps them without a common
# folder, so they are listed rather than discovered under specdec/)
TOP_PACKAGES = ["specdec.runtime", "specdec.export", "specdec.models", "specdec.bindings", "specdec.serve",
                "specdec.bench"]
LAYERS = [
    ["specdec"],
    ["specdec.runtime.core"],
    ["specdec.runtime.loading"],
    ["specdec.runtime.engine"],
    ["specdec.runtime.decoding"],
    ["specdec.runtime.decoder"],
    ["specdec.runtime"],
    ["specdec.runtime.tools"],
    ["specdec.models"],
    ["specdec.export"],
    ["specdec.bindings", "specdec.serve"],
    ["specdec.bench"],
]


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by name, with its source file (packages are imported to find their
    children, modules are only read)."""
    found = {"specdec": Path(specdec.__file__)}
    for top in TOP_PACKAGES:
        package = importlib.import_module(top)
        found[top] = Path(package.__file__)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            if info.ispkg:
                found[info.name] = Path(importlib.import_module(info.name).__file__)
            else:
                found[info.name] = Path(info.module_finder.path) / (info.name.rsplit(".", 1)[1] + ".py")
    return found


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                children = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
                targets = children or [base]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def _layer(name: str) -> tuple[int, str]:
    """(rank, owning package) of a module: the longest layer prefix that names it."""
    best = None
    for rank, group in enumerate(LAYERS):
        for prefix in group:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read_from_every_module():
    modules = _modules()
    for expected in ("specdec.runtime.decoder", "specdec.runtime.decoding.auto", "specdec.export.cli",
                     "specdec.bench.cli", "specdec.serve.schema", "specdec.bindings._capi"):
        assert expected in modules
    graph = _graph(modules)
    assert "specdec.runtime.core.errors" in graph["specdec.runtime.decoder"]
    assert "specdec.runtime.decoding.verifier" in graph["specdec.runtime.decoding.speculative"]


def test_no_import_circle():
    assert _cycles(_graph(_modules())) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_from_a_lower_layer_to_a_higher_one():
    graph = _graph(_modules())
    upward = []
    for name, edges in graph.items():
        rank, owner = _layer(name)
        for target in edges:
            target_rank, target_owner = _layer(target)
            if target_rank > rank or (target_rank == rank and target_owner != owner):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_runtime_imports_no_export_dependency():
    """`pip install specdec` has onnxruntime, numpy and tokenizers only: nothing under specdec.runtime imports
    torch, transformers or onnx (the graph reader is specdec.runtime.loading.onnxfile's own)."""
    modules = _modules()
    heavy = []
    for name, path in modules.items():
        if not name.startswith("specdec.runtime"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            heavy += [f"{name}: {n}" for n in names if n.split(".")[0] in ("torch", "transformers", "onnx")]
    assert heavy == []

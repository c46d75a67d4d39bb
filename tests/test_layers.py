"""The installed package's import graph: no circle, and no import from a lower layer to a higher one.

The layers, lowest first (a module may import from its own layer's package or from any lower layer):

    specdec                      the version
    specdec.runtime.core         the error type, a request's parameters, the stats schema, the graph I/O names
    specdec.runtime.loading      loading and checking an untrusted export
    specdec.runtime.engine       devices, sessions and buffers
    specdec.runtime.decoding     a round of Algorithm 1, the draft sources, auto, beam search
    specdec.runtime.families     what differs between model families (text, speech) at run time
    specdec.runtime.scheduling   opening an export, admission, the scheduler and the batcher
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
    ["specdec.runtime.families"],
    ["specdec.runtime.scheduling"],
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
    for expected in ("specdec.runtime.decoder", "specdec.runtime.decoding.sources.auto", "specdec.export.cli",
                     "specdec.bench.cli", "specdec.serve.schema", "specdec.bindings._capi"):
        assert expected in modules
    graph = _graph(modules)
    assert "specdec.runtime.core.params" in graph["specdec.runtime.decoder"]
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


# -- the request plan and private names --------------------------------------------------------------------------------

DECODING_PATH = ("specdec.runtime.decoder", "specdec.runtime.decoding", "specdec.runtime.engine")
PLANNER = "specdec.runtime.decoding.plan"
PLANNED = {"gamma", "draft", "num_beams"}       # the request's choices only the planner reads


def _plan_readers(tree: ast.AST) -> list[str]:
    """Every read of a request's gamma, draft or num_beams (an attribute of something named params) and every
    comparison with "auto" in a module's syntax tree."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in PLANNED
                and ast.unparse(node.value).rsplit(".", 1)[-1] == "params"):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            values = [e for o in operands for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])]
            if any(isinstance(v, ast.Constant) and v.value == "auto" for v in values) and \
                    "provider" not in ast.unparse(node):        # the provider's "auto" is another choice
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_planner_alone_reads_gamma_draft_and_num_beams():
    """On the path from SpeculativeDecoder to the ONNX Runtime run, a request's gamma, draft and num_beams are read
    by the planner (decoding/plan.py) only, and nothing else compares with "auto": the strategies get the plan."""
    found = [f"{name}:{line}" for name, path in _modules().items()
             if name.startswith(DECODING_PATH) and name != PLANNER
             for line in _plan_readers(ast.parse(path.read_text()))]
    assert found == []


def test_the_plan_reader_check_catches_planted_reads():
    planted = ast.parse("if request.params.gamma == 'auto': pass\nx = p.draft in ('auto', 'lookup')\ny = plan.gamma\n"
                        "z = provider == 'auto'")
    assert sorted(_plan_readers(planted)) == ["1: request.params.gamma", "1: request.params.gamma == 'auto'",
                                              "2: p.draft in ('auto', 'lookup')"]


# underscored names outside the package's Python modules: onnxruntime's IO binding on a raw session (no public
# form), transformers' T5 relative-position bucketing (export/attention.py), and the C half of the binding itself
NOT_MODULES = {"_iobinding", "_sess", "_get_c_device", "_relative_position_bucket", "_specdec_set_error"}


def _own_names(tree: ast.AST) -> set[str]:
    """The names a module defines: its functions, classes, assignments and the attributes it sets on anything."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def _foreign_private(tree: ast.AST, modules=frozenset()) -> list[str]:
    """Reads of another module's private names: `x._name` (x not self or cls) where the module itself defines no
    `_name`, and `from module import _name` (a private module of a package, `from package import _module`, is the
    package's own)."""
    own = _own_names(tree)
    found = [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
             and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
             and node.attr not in own and node.attr not in NOT_MODULES]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            found += [f"{node.lineno}: from {node.module} import {alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")
                      and f"{node.module}.{alias.name}" not in modules]
    return found


def test_no_module_reads_another_modules_private_names():
    """Modules of the installed package reach each other through public names only (the batcher runs batches through
    the loop the decoder hands it, not by calling the decoder's private _run_batches)."""
    modules = _modules()
    found = [f"{name}:{line}" for name, path in modules.items()
             for line in _foreign_private(ast.parse(path.read_text()), set(modules))]
    assert found == []


# what serving may import of the runtime: its public names (specdec.runtime) and the declarations every layer shares
# (specdec.runtime.core: the error type, the parameters and their checks, the stats schema, the graph I/O names)
RUNTIME_PUBLIC = ("specdec.runtime", "specdec.runtime.core")


def _runtime_internals(graph: dict, importer: str) -> list[str]:
    """Imports by `importer`'s modules of runtime modules outside RUNTIME_PUBLIC."""
    return sorted(f"{name} -> {target}" for name, edges in graph.items()
                  if name == importer or name.startswith(importer + ".")
                  for target in edges if target.startswith("specdec.runtime.")
                  and not target.startswith(RUNTIME_PUBLIC[1]) and target != RUNTIME_PUBLIC[0])


def test_serving_imports_only_the_runtimes_public_api():
    """specdec.serve reaches the runtime through specdec.runtime's public names and core's declarations, never
    through the decoder's internals (decoding/, engine/, loading/, decoder.py)."""
    assert _runtime_internals(_graph(_modules()), "specdec.serve") == []


# the decoder's request methods that serving must not call itself: every served request goes through submit()
# (runtime/scheduling/batcher.py), which decides whether it joins a batch or runs alone
# (a call on anything named decoder or dec)
BYPASSES = ("generate", "stream", "_batchable", "_batch_request", "_run_batches", "generate_batch", "stream_batch")


def _bypasses(tree: ast.AST) -> list[str]:
    return [f"{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BYPASSES
            and ast.unparse(node.func.value).rsplit(".", 1)[-1] in ("decoder", "dec")]


def test_serving_routes_every_request_through_submit():
    modules = _modules()
    serving = {name: path for name, path in modules.items() if name.startswith("specdec.serve")}
    assert serving and [f"{name}:{line}" for name, path in serving.items()
                        for line in _bypasses(ast.parse(path.read_text()))] == []
    assert any(".submit(" in path.read_text() for path in serving.values())
    planted = ast.parse("t = b.submit(x)\nr = self.decoder.generate(params=p)\nq = handler.stream(g)\n")
    assert _bypasses(planted) == ["2: self.decoder.generate"]


# -- the façade and the seams below it -------------------------------------------------------------------------------

FACADE_INTERNALS = ("admit", "batch_request", "batchable", "run_batches", "beam_model")


def _facade_methods() -> list[str]:
    from specdec.runtime import SpeculativeDecoder

    return sorted(name for name, value in vars(SpeculativeDecoder).items()
                  if not name.startswith("_") and not isinstance(value, property))


def test_the_facade_is_thin():
    """SpeculativeDecoder loads, admits and hands over: at most 10 public methods, none of the scheduler's."""
    methods = _facade_methods()
    assert len(methods) <= 10, methods
    assert not set(methods) & set(FACADE_INTERNALS)


def _calls_up(tree: ast.AST, methods: set) -> list[str]:
    """Calls of a SpeculativeDecoder method on anything named decoder or dec (what a module below it must not do)."""
    return [f"{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
            and ast.unparse(node.func.value).rsplit(".", 1)[-1].lstrip("_") in ("decoder", "dec")]


def test_nothing_below_the_facade_calls_up_into_it():
    """The modules below specdec.runtime.decoder (decoding, families, scheduling, ...) never call a SpeculativeDecoder
    method: the façade calls down (admission, scheduler), nothing calls back."""
    modules = _modules()
    facade = _layer("specdec.runtime.decoder")[0]
    methods = set(_facade_methods()) | set(FACADE_INTERNALS)
    below = {name: path for name, path in modules.items() if _layer(name)[0] < facade}
    assert "specdec.runtime.scheduling.batcher" in below and "specdec.runtime.families.whisper" in below
    assert [f"{name}:{line}" for name, path in below.items()
            for line in _calls_up(ast.parse(path.read_text()), methods)] == []
    planted = ast.parse("t = self.decoder.admit(x)\nr = self._decoder.stream(p)\nq = self.scheduler.stream(a)\n")
    assert _calls_up(planted, methods) == ["1: self.decoder.admit", "2: self._decoder.stream"]


def test_the_public_api_check_catches_a_planted_import():
    graph = {"specdec.serve.a": {"specdec.runtime", "specdec.runtime.core.params", "specdec.runtime.decoding.strategies.batch"},
             "specdec.serve": {"specdec.runtime.decoder"}, "specdec.bench.x": {"specdec.runtime.engine.model"}}
    assert _runtime_internals(graph, "specdec.serve") == ["specdec.serve -> specdec.runtime.decoder",
                                                          "specdec.serve.a -> specdec.runtime.decoding.strategies.batch"]


def test_the_private_name_check_catches_a_planted_read():
    planted = ast.parse("class A:\n    def _mine(self): return self._mine\nx = decoder._run_batches(1)\n"
                        "from .auto import Estimates, _Mean\nfrom specdec.bindings import _capi")
    assert _foreign_private(planted, {"specdec.bindings._capi"}) == ["3: decoder._run_batches",
                                                                     "4: from auto import _Mean"]


# -- what a wheel holds ------------------------------------------------------------------------------------------------

def _unlisted_packages(pyproject: dict, root: Path) -> list[str]:
    """Folders with an __init__.py under the mapped top-level folders that pyproject's package list leaves out (a
    wheel, `pip install .`, would miss them; an editable install would not)."""
    setuptools = pyproject["tool"]["setuptools"]
    listed, unlisted = set(setuptools["packages"]), []
    for package, folder in setuptools["package-dir"].items():
        for init in sorted((root / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(root / folder).parts
            if "__pycache__" in parts:
                continue
            name = ".".join((package, *parts))
            if name not in listed:
                unlisted.append(name)
    return unlisted


def test_every_package_is_in_the_wheel():
    import tomllib

    root = Path(__file__).resolve().parents[1]
    assert _unlisted_packages(tomllib.loads((root / "pyproject.toml").read_text()), root) == []


def test_the_wheel_check_catches_an_unlisted_package(tmp_path):
    (tmp_path / "bench" / "drafts").mkdir(parents=True)
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "drafts" / "__init__.py").write_text("")
    pyproject = {"tool": {"setuptools": {"packages": ["p.bench"], "package-dir": {"p.bench": "bench"}}}}
    assert _unlisted_packages(pyproject, tmp_path) == ["p.bench.drafts"]

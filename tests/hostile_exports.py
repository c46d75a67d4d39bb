"""Hostile and corrupted copies of an export directory, and a worker that opens them, for the loader's tests:
tests/runtime/test_untrusted_export.py (named hostile cases), tests/runtime/test_fuzz_export.py (random mutations,
from Python) and tests/bindings/test_capi_untrusted.py (both, through the C API).

    copy_export(src, dst), read_json / write_json, rehash(export, *relative paths)
    with_external_data(export, role, kind)     a graph rewritten to keep its weights in a .data file beside it
    set_external(export, graph_rel, location=..., offset=..., length=...)   edit every external tensor's entry
    KINDS, make_case(base, case_dir, seed, index)    one random mutation (the fuzz harness's cases)
    FuzzSettings.from_env(...)                 case count, seconds, seed (SPECDEC_FUZZ_* environment variables)
    PythonWorker                               a subprocess that opens case directories with SpeculativeDecoder.load
    python tests/hostile_exports.py worker GOOD    the worker's own entry point (one JSON line per case)

Every mutation that edits a file other than manifest.json rewrites its sha256 in the manifest, so what is tested is
the loader's own checks, not the checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
PROMPT = [5, 6, 7, 1]


# -- editing an export ---------------------------------------------------------------------------------------------
def copy_export(src, dst) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return Path(dst)


def read_json(path) -> object:
    return json.loads(Path(path).read_text())


def write_json(path, value) -> None:
    Path(path).write_text(json.dumps(value, indent=1) + "\n")


def manifest_of(export) -> dict:
    return read_json(Path(export) / MANIFEST)


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rehash(export, *relatives) -> None:
    """Rewrite the manifest's sha256 of each file (added to `files` if it is not there)."""
    export = Path(export)
    raw = manifest_of(export)
    for rel in relatives:
        raw["files"][rel] = sha256(export / rel)
    write_json(export / MANIFEST, raw)


def graph_file(raw: dict, role: str, kind: str) -> str:
    return raw["models"][role]["graphs"][kind]["file"]


def with_external_data(export, role: str = "target", kind: str = "encoder") -> str:
    """Rewrite one graph of `export` (in place) to keep its larger tensors in `<graph>.data` beside it, as
    specdec-export does for graphs past protobuf's 2 GiB; manifest updated. Returns the .data file's relative path."""
    import onnx

    export = Path(export)
    rel = graph_file(manifest_of(export), role, kind)
    model = onnx.load(str(export / rel))
    data = rel + ".data"
    onnx.save_model(model, str(export / rel), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=Path(data).name, size_threshold=256)
    rehash(export, rel, data)
    return data


def set_external(export, rel: str, tensors: int | None = None, **entries) -> int:
    """Set external-data entries (location, offset, length: strings) of the first `tensors` external tensors (all
    by default) of the graph file `rel`; checksum rewritten. Returns how many tensors were changed."""
    import onnx

    export = Path(export)
    model = onnx.load(str(export / rel), load_external_data=False)
    changed = 0
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL or (tensors is not None and changed >= tensors):
            continue
        for key, value in entries.items():
            found = [e for e in tensor.external_data if e.key == key]
            if found:
                found[0].value = value
            else:
                tensor.external_data.add(key=key, value=value)
        changed += 1
    onnx.save(model, str(export / rel))
    rehash(export, rel)
    return changed


# -- named hostile directories -------------------------------------------------------------------------------------
# Each builder edits `export` (a copy of a good export whose target encoder keeps its weights in external data, see
# with_external_data) and may use `outside`, an identical copy beside it, so that every path that escapes finds a
# file with the right sha256: only the loader's confinement can stop it. HOSTILE: name -> (builder, the words the
# one-line error must contain).
def _edit(export, change) -> None:
    raw = manifest_of(export)
    change(raw)
    write_json(Path(export) / MANIFEST, raw)


def _repoint_graph(export, role, kind, new, listed=True) -> None:
    def change(raw):
        graph = raw["models"][role]["graphs"][kind]
        if listed:
            raw["files"][new] = raw["files"][graph["file"]]
        graph["file"] = new
    _edit(export, change)


def _relink(path: Path, target) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)


def _external(export) -> tuple[str, str]:
    """(graph, data file) relative paths of the external data that with_external_data made."""
    data = next(f for f in manifest_of(export)["files"] if f.endswith(".data"))
    return data[:-len(".data")], data


def _external_symlink(export, outside, target_of_link, listed=True) -> None:
    graph, data = _external(export)
    link = str(Path(graph).parent / "link.data")
    (Path(export) / link).symlink_to(target_of_link)
    set_external(export, graph, location="link.data")
    if listed:
        _edit(export, lambda raw: raw["files"].__setitem__(link, sha256(Path(export) / link)))


def _external_sibling(export, outside) -> None:
    """The data file copied into another folder of the export, and reached by a symlink from the graph's folder."""
    graph, data = _external(export)
    shutil.copy(Path(export) / data, Path(export) / "draft" / "moved.data")
    _edit(export, lambda raw: raw["files"].__setitem__("draft/moved.data", sha256(Path(export) / data)))
    _external_symlink(export, outside, Path(export) / "draft" / "moved.data")


def _tokenizer_with_id(export, token_id: int) -> None:
    path = Path(export) / "tokenizer.json"
    tree = read_json(path)
    tree["model"]["vocab"]["faraway"] = token_id
    write_json(path, tree)
    rehash(export, "tokenizer.json")


def _rewrite(export, rel: str, data: bytes) -> None:
    (Path(export) / rel).write_bytes(data)
    rehash(export, rel)


def _set_heads(export, role: str, heads: int, shapes_too: bool) -> None:
    def change(raw):
        model = raw["models"][role]
        old = model["architecture"]["heads"]
        model["architecture"]["heads"] = heads
        if shapes_too:
            for graph in model["graphs"].values():
                for tensor in graph["inputs"] + graph["outputs"]:
                    if tensor["name"] in ("past_kv", "cross_kv", "new_kv"):
                        tensor["shape"] = [heads if d == old and i in (3, 4) else d
                                           for i, d in enumerate(tensor["shape"])]
    _edit(export, change)


def _set_tensor(export, role, kind, side, tensor_name, **fields) -> None:
    def change(raw):
        for tensor in raw["models"][role]["graphs"][kind][side]:
            if tensor["name"] == tensor_name:
                tensor.update(fields)
    _edit(export, change)


HOSTILE = {
    # '..'
    "dotdot graph": (lambda e, o: _repoint_graph(e, "target", "decoder", "../outside/target/decoder.onnx"),
                     "has a '..' part"),
    "dotdot graph, not listed": (lambda e, o: _repoint_graph(e, "target", "decoder", "../outside/target/decoder.onnx",
                                                             listed=False), "graph's file \"../outside"),
    "dotdot that stays inside": (lambda e, o: _repoint_graph(e, "draft", "decoder", "draft/../draft/decoder.onnx"),
                                 "has a '..' part"),
    "dotdot files entry": (lambda e, o: _edit(e, lambda r: r["files"].__setitem__(
        "../outside/tokenizer.json", r["files"]["tokenizer.json"])), "has a '..' part"),
    "dotdot tokenizer": (lambda e, o: _edit(e, lambda r: (r["files"].__setitem__(
        "../outside/tokenizer.json", r["files"]["tokenizer.json"]), r.__setitem__(
        "tokenizer", "../outside/tokenizer.json"))), "has a '..' part"),
    # absolute
    "absolute graph": (lambda e, o: _repoint_graph(e, "target", "encoder", str(o / "target" / "encoder.onnx")),
                       "is an absolute path"),
    "absolute tokenizer": (lambda e, o: _edit(e, lambda r: r.__setitem__("tokenizer", str(o / "tokenizer.json"))),
                           "is an absolute path"),
    "absolute files entry": (lambda e, o: _edit(e, lambda r: r["files"].__setitem__("/etc/hostname", "0" * 64)),
                             "is an absolute path"),
    "graph outside a model folder": (lambda e, o: (shutil.copy(e / "draft" / "decoder.onnx", e / "decoder.onnx"),
                                                   _repoint_graph(e, "draft", "decoder", "decoder.onnx")),
                                     "is not in a model folder"),
    "windows path": (lambda e, o: _repoint_graph(e, "draft", "encoder", "C:\\draft\\encoder.onnx"),
                     "is an absolute path"),
    # symlinks out of the directory
    "symlink graph out": (lambda e, o: _relink(e / "target" / "decoder.onnx", o / "target" / "decoder.onnx"),
                          "leads outside the export directory"),
    "symlink folder out": (lambda e, o: _relink(e / "draft", o / "draft"), "leads outside the export directory"),
    "symlink tokenizer out": (lambda e, o: _relink(e / "tokenizer.json", o / "tokenizer.json"),
                              "leads outside the export directory"),
    "symlink manifest out": (lambda e, o: _relink(e / MANIFEST, o / MANIFEST), "leads outside the export directory"),
    "symlink to /dev/zero": (lambda e, o: _relink(e / "tokenizer.json", "/dev/zero"),
                             "leads outside the export directory"),
    # external data
    "external data dotdot": (lambda e, o: set_external(e, _external(e)[0], location="../outside/" + _external(e)[1]),
                             "has a '..' part"),
    "external data absolute": (lambda e, o: set_external(e, _external(e)[0], location=str(o / _external(e)[1])),
                               "is an absolute path"),
    "external data symlink out": (lambda e, o: _external_symlink(e, o, o / _external(e)[1]),
                                  "leads outside the export directory"),
    "external data symlink out, not listed": (lambda e, o: _external_symlink(e, o, o / _external(e)[1], listed=False),
                                              "external data location of tensor"),
    "external data in another folder": (_external_sibling, "leads outside the folder"),
    "external data not checksummed": (lambda e, o: (shutil.copy(e / _external(e)[1], e / "target" / "copy.data"),
                                                    set_external(e, _external(e)[0], location="copy.data")),
                                      "not among manifest.json's checksummed files"),
    "external data past its file": (lambda e, o: set_external(e, _external(e)[0], tensors=1, offset="99999999"),
                                    "which has"),
    "external data memory address": (lambda e, o: set_external(e, _external(e)[0], location="*/_ORT_MEM_ADDR_/*",
                                                               offset="4096"), "has characters other than"),
    # the tokenizer
    "tokenizer truncated": (lambda e, o: _rewrite(e, "tokenizer.json", (e / "tokenizer.json").read_bytes()[:700]),
                            "is not a valid tokenizer"),
    "tokenizer not utf-8": (lambda e, o: _rewrite(e, "tokenizer.json", b"\xff\xfe{}" * 10), "is not UTF-8"),
    "tokenizer empty": (lambda e, o: _rewrite(e, "tokenizer.json", b""), "is not a valid tokenizer"),
    "tokenizer mangled": (lambda e, o: _rewrite(e, "tokenizer.json", (e / "tokenizer.json").read_bytes().replace(
        b'"WordLevel"', b'"NoSuchModel"')), "is not a valid tokenizer"),
    "tokenizer id past the vocabulary": (lambda e, o: _tokenizer_with_id(e, 100), "outside the export's vocabulary"),
    # numbers and ids
    "vocab_size 1e12": (lambda e, o: _edit(e, lambda r: r.__setitem__("vocab_size", 1e12)), "not an integer"),
    "vocab_size 10**12": (lambda e, o: _edit(e, lambda r: r.__setitem__("vocab_size", 10 ** 12)), "outside 1..2097152"),
    "gamma_max -3": (lambda e, o: _edit(e, lambda r: r.__setitem__("gamma_max", -3)), "gamma_max is -3, outside"),
    "gamma_max true": (lambda e, o: _edit(e, lambda r: r.__setitem__("gamma_max", True)), "not an integer"),
    "eos_token_id past the vocabulary": (lambda e, o: _edit(e, lambda r: r["special_ids"].__setitem__(
        "eos_token_id", r["vocab_size"])), '"eos_token_id" is 48, outside 0..47'),
    "negative decoder start": (lambda e, o: _edit(e, lambda r: r["special_ids"].__setitem__(
        "decoder_start_token_id", -1)), "outside 0..47"),
    "buffers too large": (lambda e, o: _edit(e, lambda r: (r.__setitem__("max_length", 1 << 16), [m[
        "architecture"].update(decoder_layers=256, heads=1024, d_kv=4096) for m in r["models"].values()])),
        "GiB of buffers"),
    # shapes and dtypes against the architecture, and the graph files against the manifest
    "cache shape against the architecture": (lambda e, o: _set_heads(e, "target", 4, shapes_too=False),
                                             "but the declared architecture gives"),
    "graph against the manifest": (lambda e, o: _set_heads(e, "target", 4, shapes_too=True),
                                   "does not match manifest.json"),
    "logits dtype": (lambda e, o: _set_tensor(e, "draft", "decoder", "outputs", "logits", dtype="float16"),
                     "but the runtime binds float32"),
    "head dtype": (lambda e, o: _set_tensor(e, "target", "decoder", "inputs", "top_k", dtype="float32"),
                   "but the runtime binds int64"),
    "graph name in the manifest only": (lambda e, o: _set_tensor(e, "draft", "encoder", "inputs", "input_ids",
                                                                 name="source_ids"), "does not match manifest.json"),
    # the manifest itself
    "manifest too large": (lambda e, o: (e / MANIFEST).write_bytes(b" " * (5 << 20) + (e / MANIFEST).read_bytes()),
                           "larger than 4 MiB"),
    "manifest nested deeply": (lambda e, o: (e / MANIFEST).write_bytes(b"[" * 100000 + b"]" * 100000),
                               "corrupt (RecursionError)"),
    "manifest a list": (lambda e, o: (e / MANIFEST).write_text("[]"), "is not a specdec manifest"),
    "too many files": (lambda e, o: _edit(e, lambda r: r["files"].update({f"f{i}": "0" * 64 for i in range(300)})),
                       "entries (1..256)"),
    "line break in a name": (lambda e, o: _set_tensor(e, "target", "decoder", "inputs", "top_k", name="top\nk"),
                             "not printable"),
    # what is not a regular file
    "fifo as a graph": (lambda e, o: ((e / "draft" / "encoder.onnx").unlink(), os.mkfifo(e / "draft" /
                                                                                       "encoder.onnx")),
                        "'draft/encoder.onnx' in '"),
    "folder as the tokenizer": (lambda e, o: ((e / "tokenizer.json").unlink(), (e / "tokenizer.json").mkdir()),
                                "is not a regular file"),
}


def make_hostile(base, case_dir, name: str) -> Path:
    """The HOSTILE case `name`, built in `case_dir`/export (with the copy `case_dir`/outside beside it)."""
    case_dir = Path(case_dir)
    export, outside = copy_export(base, case_dir / "export"), copy_export(base, case_dir / "outside")
    HOSTILE[name][0](export, outside)
    return export


# -- random mutations (the fuzz harness) --------------------------------------------------------------------------
KINDS = ("manifest-type", "manifest-missing", "manifest-number", "manifest-shape", "manifest-path", "manifest-ids",
         "manifest-bytes", "graph-truncate", "graph-bitflip", "graph-external", "graph-semantic", "tokenizer-truncate",
         "tokenizer-bitflip", "tokenizer-json", "symlink-out", "datastore-truncate", "datastore-bitflip",
         "datastore-header")

ODD_VALUES = (None, True, False, 0, -1, 1.5, "", "x", [], {}, [1, 2], {"a": 1}, "w" * 5000, 1e308, -0.0)
ODD_NUMBERS = (0, -1, -3, 1, 2, 10 ** 12, 2 ** 31, 2 ** 63, -2 ** 63, 10 ** 30, 10 ** 400, 1e12, 1e308, 0.5, -1e-300,
               float("nan"), float("inf"), 3.0)
# {rel}: the file's relative path; {out}: the same file in the copy beside the export ("../outside/{rel}" leads to
# it, so a path that escapes finds a file with the right sha256); {dir}, {name}: the parts of {rel}
ODD_PATHS = ("../outside/{rel}", "{dir}/../../outside/{rel}", "{out}", "/{rel}", "./{rel}", "{rel}/",
             "{dir}//{name}", "{dir}/../{rel}", "{dir}/./{name}", "", ".", "..", "~/{rel}",
             "{dir}\\..\\..\\outside\\{rel}", "C:/{rel}", "C:\\{name}", "{rel}\n", " {rel}", "{rel}\u0000",
             "%2e%2e/outside/{rel}", "\u2025/outside/{rel}", "{rel}" + "/x" * 300, "x" * 5000, ".hidden/{name}",
             "*/_ORT_MEM_ADDR_/*", "/dev/zero", "/proc/self/mem", "{dir}", "../outside/{dir}/../{rel}")
ODD_DTYPES = ("float16", "float32", "int32", "int64", "bool", "", "complex128", "float64", 7)


@dataclass
class FuzzSettings:
    cases: int
    seconds: float
    seed: int

    @staticmethod
    def from_env(prefix: str, cases: int, seconds: float) -> "FuzzSettings":
        """CI-sized defaults; SPECDEC_FUZZ_<prefix>CASES, SPECDEC_FUZZ_SECONDS and SPECDEC_FUZZ_SEED make a run
        larger (the time bound stops making new cases, it does not cut one short)."""
        env = os.environ
        return FuzzSettings(int(env.get(f"SPECDEC_FUZZ_{prefix}CASES", cases)),
                            float(env.get("SPECDEC_FUZZ_SECONDS", seconds)), int(env.get("SPECDEC_FUZZ_SEED", 0)))


def finish_fuzz(label: str, file_name: str, summary: dict, results: list, verdict, settings: FuzzSettings) -> None:
    """Print a fuzz run's summary, write it to SPECDEC_FUZZ_REPORT/file_name when that is set, and fail on any case
    whose verdict is not None, or when the time bound left kinds untried."""
    print(f"fuzz ({label}):", json.dumps(summary))
    if os.environ.get("SPECDEC_FUZZ_REPORT"):
        report = Path(os.environ["SPECDEC_FUZZ_REPORT"])
        report.mkdir(parents=True, exist_ok=True)
        (report / file_name).write_text(json.dumps({**summary, "results": results}, indent=1))
    failures = [f"case {r['index']} ({r['kind']}: {r['detail']!s:.80}): {verdict(r)}" for r in results
                if verdict(r) is not None]
    assert not failures, f"{len(failures)} of {len(results)} cases failed:\n" + "\n".join(failures[:20])
    assert len(results) >= min(settings.cases, len(KINDS)), "the time bound left kinds untried"


def _nodes(value, path=()):
    """Every (path, value) of a JSON tree, the root left out."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield path + (key,), child
        yield from _nodes(child, path + (key,))


def _set(tree, path, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _delete(tree, path):
    for key in path[:-1]:
        tree = tree[key]
    del tree[path[-1]]


def _mutate_tree(tree, rng: random.Random, how: str) -> str:
    nodes = list(_nodes(tree))
    if how == "number":
        numbers = [(p, v) for p, v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool)]
        path, old = rng.choice(numbers or nodes)
        new = rng.choice(ODD_NUMBERS)
        _set(tree, path, new)
        return f"{'/'.join(map(str, path))}: {old!r} -> {new!r}"
    if how == "missing":
        path, _ = rng.choice(nodes)
        _delete(tree, path)
        return f"{'/'.join(map(str, path))} removed"
    path, old = rng.choice(nodes)
    new = rng.choice([v for v in ODD_VALUES if type(v) is not type(old)])
    _set(tree, path, new)
    return f"{'/'.join(map(str, path))}: {type(old).__name__} -> {new!r:.40}"


def _flip_bits(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    flips = rng.choice((1, 1, 2, 4, 16))
    for _ in range(flips):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"{flips} bit(s) flipped"


def _truncate(path: Path, rng: random.Random) -> str:
    data = path.read_bytes()
    cut = rng.choice((0, 1, rng.randrange(len(data)), len(data) - 1, len(data) // 2))
    path.write_bytes(data[:cut])
    return f"cut to {cut} of {len(data)} bytes"


def _mutate_graph(path: Path, rng: random.Random) -> str:
    """A well-formed protobuf whose model is wrong (the graph's inputs and outputs left alone, so that what checks
    it is ONNX Runtime's loader): an operator, an attribute, an initializer's dims or data, the opset, a node's
    inputs. External data stays where it is (only the .onnx file is rewritten)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    action = rng.choice(("op_type", "attribute", "dims", "raw_data", "opset", "node_input", "drop_node",
                         "domain", "ir_version", "duplicate_output"))
    node = rng.choice(list(graph.node))
    if action == "op_type":
        node.op_type = rng.choice(("NoSuchOp", "", "Loop", "If", "Constant", "MatMul", "Gather"))
    elif action == "attribute":
        if node.attribute:
            attr = rng.choice(list(node.attribute))
            attr.i = rng.choice((-1, 0, 2 ** 62, 123456789))
            attr.type = rng.choice((attr.type, 0, 1, 2, 3, 4, 5, 7))
        else:
            node.attribute.add(name="axis", type=onnx.AttributeProto.INT, i=rng.choice((-100, 1000)))
    elif action in ("dims", "raw_data") and graph.initializer:
        tensor = rng.choice(list(graph.initializer))
        if action == "dims":
            if tensor.dims:
                tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice((0, -1, 2 ** 40, 3, 1))
            else:
                tensor.dims.append(rng.choice((0, 7, 2 ** 40)))
        elif tensor.data_location != onnx.TensorProto.EXTERNAL:
            tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data) + 1)]
        else:
            tensor.data_type = rng.choice((0, 8, 13, 99))
        action += f" of {tensor.name}"
    elif action == "opset":
        model.opset_import[0].version = rng.choice((0, 1, 7, 999, -1))
    elif action == "node_input":
        if node.input:
            node.input[rng.randrange(len(node.input))] = rng.choice(("", "nowhere", node.output[0] if node.output
                                                                     else "x"))
    elif action == "drop_node":
        graph.node.remove(node)
    elif action == "domain":
        node.domain = rng.choice(("com.microsoft", "ai.onnx.ml", "evil"))
    elif action == "ir_version":
        model.ir_version = rng.choice((0, 1, 3, 99, -1))
    else:
        if node.output:
            other = rng.choice(list(graph.node))
            if other.output:
                other.output[0] = node.output[0]
    path.write_bytes(model.SerializeToString())
    return f"{action} ({node.op_type} {node.name})"


def _hostile_path(rng: random.Random, rel: str, outside: Path) -> str:
    folder, _, name = rel.rpartition("/")
    return rng.choice(ODD_PATHS).format(rel=rel, out=outside / rel, dir=folder or ".", name=name)


def make_case(base, case_dir, seed: int, index: int) -> tuple[str, str]:
    """Copy `base` to `case_dir`/export and mutate it: kind KINDS[index % len(KINDS)], details drawn from a generator
    seeded with (seed, index). A copy of `base` is also made beside it (`case_dir`/outside) for paths and symlinks
    that lead out. Returns (kind, description)."""
    rng = random.Random(f"{seed}-{index}")
    kind = KINDS[index % len(KINDS)]
    case_dir = Path(case_dir)
    export, outside = case_dir / "export", case_dir / "outside"
    copy_export(base, export)
    copy_export(base, outside)
    raw = manifest_of(export)
    files = sorted(raw["files"])
    graphs = [graph_file(raw, role, k) for role in raw["models"] for k in ("encoder", "decoder")]
    area, _, how = kind.partition("-")
    if area == "manifest" and how in ("type", "missing", "number"):
        detail = _mutate_tree(raw, rng, how)
    elif kind == "manifest-shape":
        role, k = rng.choice(list(raw["models"])), rng.choice(("encoder", "decoder"))
        graph = raw["models"][role]["graphs"][k]
        side = rng.choice(("inputs", "outputs"))
        tensor = rng.choice(graph[side])
        action = rng.choice(("axis", "axis", "rank+", "rank-", "dtype", "name", "twice", "drop", "arch"))
        if action == "axis" and tensor["shape"]:
            i = rng.randrange(len(tensor["shape"]))
            tensor["shape"][i] = rng.choice((0, 1, 2, 5, 47, 49, 2 ** 40, -1, "x", None, 1.5, [3]))
        elif action == "rank+":
            tensor["shape"].insert(rng.randrange(len(tensor["shape"]) + 1), rng.choice((1, "extra")))
        elif action == "rank-" and tensor["shape"]:
            tensor["shape"].pop(rng.randrange(len(tensor["shape"])))
        elif action == "dtype":
            tensor["dtype"] = rng.choice(ODD_DTYPES)
        elif action == "name":
            tensor["name"] = rng.choice(("", "x", tensor["name"] + "_", "probs", "past_kv", "a\nb"))
        elif action == "twice":
            graph[side].append(dict(tensor))
        elif action == "drop":
            graph[side].remove(tensor)
        else:
            arch = raw["models"][role]["architecture"]
            key = rng.choice(("decoder_layers", "heads", "d_kv", "vocab_size", "layers"))
            arch[key] = rng.choice((arch.get(key, 1) + 1, max(1, arch.get(key, 1) - 1), 0, 10 ** 9))
        detail = f"{role} {k} {side} {tensor['name']!r:.20}: {action}"
    elif kind == "manifest-path":
        slot = rng.choice(("files", "graph", "tokenizer") + ("datastore",) * ("datastore" in raw))
        rel = rng.choice(graphs) if slot == "graph" else raw[slot] if slot in ("tokenizer", "datastore") else \
            rng.choice(files)
        new = _hostile_path(rng, rel, outside)
        if slot in ("graph", "files") and rng.random() < 0.5:       # the hostile path is listed with a good hash
            raw["files"][new] = raw["files"][rel]
        if slot == "files":
            raw["files"][new] = raw["files"].pop(rel)
        elif slot in ("tokenizer", "datastore"):
            raw[slot] = new
        else:
            for m in raw["models"].values():
                for g in m["graphs"].values():
                    if g["file"] == rel:
                        g["file"] = new
        detail = f"{slot} {rel} -> {new!r:.60}"
    elif kind == "manifest-ids":
        vocab = raw["vocab_size"]
        key = rng.choice(list(raw["special_ids"]) + ["vocab_size"])
        value = rng.choice((-1, vocab, vocab + 1, 2 ** 31, 2 ** 63, "1", None, 1.0, True, 2, 0))
        if key == "vocab_size":
            raw["vocab_size"] = rng.choice((1, 2, vocab - 1, vocab + 1, 10 ** 12, 2 ** 21, 2 ** 21 + 1))
        else:
            raw["special_ids"][key] = value
        detail = f"{key} -> {raw.get('vocab_size') if key == 'vocab_size' else value!r}"
    elif kind == "manifest-bytes":
        text = (export / MANIFEST).read_bytes()
        action = rng.choice(("truncate", "flip", "garbage", "huge", "deep", "array", "bom", "dup"))
        if action == "truncate":
            text = text[:rng.randrange(len(text))]
        elif action == "flip":
            data = bytearray(text)
            for _ in range(rng.choice((1, 3, 10))):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            text = bytes(data)
        elif action == "garbage":
            text = bytes(rng.randrange(256) for _ in range(rng.choice((1, 100, 5000))))
        elif action == "huge":
            text = text[:-2] + b', "padding": "' + b"x" * (5 << 20) + b'"}'
        elif action == "deep":
            depth = rng.choice((1000, 100000))
            text = b"[" * depth + b"]" * depth
        elif action == "array":
            text = b"[" + text + b"]"
        elif action == "bom":
            text = b"\xef\xbb\xbf" + text
        else:
            text = text[:-2] + b', "format_version": "3\\n3"}'
        (export / MANIFEST).write_bytes(text)
        return kind, action
    elif area == "graph":
        if kind == "graph-external":
            externals = [f for f in files if f.endswith(".data")]
            if not externals:
                return kind, "(no external data in the base export)"
            data_rel = rng.choice(externals)
            graph_rel = data_rel[:-len(".data")]
            name = Path(data_rel).name
            choice = rng.choice(("location", "location", "offset", "length", "symlink"))
            if choice == "location":
                value = rng.choice(("../" + name, "../../" + name, str(outside / data_rel), "./" + name,
                                    "sub/../" + name, "*/_ORT_MEM_ADDR_/*", "/dev/zero", "", name + "x",
                                    "../" + data_rel))
                set_external(export, graph_rel, tensors=rng.choice((1, None)), location=value)
                detail = f"location -> {value!r}"
            elif choice == "symlink":
                link = Path(graph_rel).parent / "link.data"
                (export / link).symlink_to(outside / data_rel)
                set_external(export, graph_rel, location="link.data")
                raw = manifest_of(export)
                raw["files"][str(link)] = sha256(outside / data_rel)
                write_json(export / MANIFEST, raw)
                detail = "location -> a symlink out"
            else:
                value = rng.choice(("-1", "1e3", "0x10", str(2 ** 64), str(10 ** 30), "99999999", "abc", "", " 1"))
                set_external(export, graph_rel, tensors=rng.choice((1, None)), **{choice: value})
                detail = f"{choice} -> {value!r}"
            return kind, detail
        if kind == "graph-semantic":
            rel = rng.choice(graphs)
            detail = rel + ": " + _mutate_graph(export / rel, rng)
            rehash(export, rel)
            return kind, detail
        rel = rng.choice(graphs + [f for f in files if f.endswith(".data")])
        detail = rel + ": " + (_truncate if how == "truncate" else _flip_bits)(export / rel, rng)
        rehash(export, rel)
        return kind, detail
    elif area == "datastore":
        rel = raw.get("datastore")
        if rel is None:
            return kind, "(no datastore in the base export)"
        if how == "header":     # one of the header's numbers (runtime/loading/datastore.py HEADER) set to an odd value
            offset, width = rng.choice(((8, 4), (12, 4), (16, 4), (20, 4), (24, 8), (32, 8), (40, 8)))
            value = rng.choice((0, 1, 2, 3, 5, 63, 2 ** 31, 2 ** (8 * width) - 1, 2 ** (8 * width - 1)))
            data = bytearray((export / rel).read_bytes())
            data[offset:offset + width] = value.to_bytes(width, "little")
            (export / rel).write_bytes(bytes(data))
            detail = f"header bytes {offset}..{offset + width} -> {value}"
        else:
            detail = (_truncate if how == "truncate" else _flip_bits)(export / rel, rng)
        rehash(export, rel)
        return kind, f"{rel}: {detail}"
    elif area == "tokenizer":
        rel = raw["tokenizer"]
        if how == "json":
            tree = read_json(export / rel)
            detail = _mutate_tree(tree, rng, rng.choice(("type", "missing", "number")))
            write_json(export / rel, tree)
        else:
            detail = (_truncate if how == "truncate" else _flip_bits)(export / rel, rng)
        rehash(export, rel)
        return kind, detail
    else:                                                # symlink-out: same bytes, but outside the export
        target = rng.choice(files + [MANIFEST] + sorted({g.split("/")[0] for g in graphs if "/" in g}))
        path = export / target
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        path.symlink_to(outside / target)
        return kind, f"{target} -> outside"
    write_json(export / MANIFEST, raw)
    return kind, detail


# -- opening case directories in a worker process --------------------------------------------------------------------
def _worker(good: str) -> int:
    """Read case directories from stdin and open each: answer one JSON line with the load's outcome once the good
    decoder (loaded first) has generated its reference tokens again, then, for a directory that loaded, a second
    line with what generating from it did ("run"). A crash while generating is then told apart from one while
    loading: the first line is out already."""
    import traceback

    from specdec.runtime import SpecdecError, SpeculativeDecoder

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # anything else printed goes to stderr, not into the protocol
    decoder = SpeculativeDecoder.load(good, provider="cpu", threads=1)
    reference = decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        case = line.rstrip("\n")
        result, bad = {"case": case}, None
        try:
            bad = SpeculativeDecoder.load(case, provider="cpu", threads=1)
            result["outcome"] = "loaded"
        except SpecdecError as err:
            result.update(outcome="refused", message=str(err))
        except BaseException as err:  # noqa: BLE001 -- what the harness looks for
            result.update(outcome="traceback", message=f"{type(err).__name__}: {err}"[:2000],
                          traceback=traceback.format_exc()[-3000:])
        try:
            result["good"] = decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids == reference
        except BaseException as err:  # noqa: BLE001
            result["good"] = f"{type(err).__name__}: {err}"
        out.write(json.dumps(result) + "\n")
        if bad is not None:
            try:
                bad.generate(input_ids=PROMPT, max_new_tokens=4, gamma=2)
                run = "ok"
            except SpecdecError as err:
                run = f"refused: {err}"
            except BaseException as err:  # noqa: BLE001
                run = f"raised {type(err).__name__}: {str(err)[:300]}"
            del bad
            out.write(json.dumps({"run": run}) + "\n")
    return 0


class PythonWorker:
    """A worker subprocess (above), restarted after a crash or a hang. open(case, timeout) -> result dict with
    "outcome" (of the load): refused / loaded / traceback / crash (the worker died) / hang (no answer in time);
    "good" (the good decoder's tokens unchanged afterwards); for a loaded case "run" (generating from it): ok,
    "refused: ...", "raised ...", crash or hang."""

    def __init__(self, good, stderr_path):
        self.good, self.stderr_path = str(good), Path(stderr_path)
        self.proc = None
        self.pending = b""          # read from the worker, not yet answered (lines are split here, not by a buffered
                                    # reader, so that select() never waits for a line that is already read)

    def _start(self, timeout: float = 300) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, __file__, "worker", self.good], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, bufsize=0)
        self.pending = b""
        ready = self._answer(timeout)
        if not (ready and ready.get("ready")):
            raise RuntimeError(f"the fuzz worker did not start: {ready}; see {self.stderr_path}")

    def _answer(self, timeout: float):
        """The next JSON line; None after `timeout` seconds without one (the worker is killed), {} if it died."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.close()
                return None
            data = os.read(fd, 1 << 16)
            if not data:
                self.proc.wait()
                return {}
            self.pending += data
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def _failed(self, answer) -> str:
        if answer is None:
            return "hang"
        code = self.proc.returncode if self.proc is not None else None
        self.proc = None
        return "crash" if code is None or code < 0 else f"crash (exit {code})"

    def open(self, case, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        began = time.perf_counter()
        self.proc.stdin.write(f"{case}\n".encode())
        answer = self._answer(timeout)
        if not answer:
            return {"case": str(case), "outcome": self._failed(answer)}
        answer["seconds"] = time.perf_counter() - began
        if answer["outcome"] == "loaded":
            run = self._answer(timeout)
            answer["run"] = run["run"] if run else self._failed(run)
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        sys.exit(_worker(sys.argv[2]))
    sys.exit("usage: python tests/hostile_exports.py worker GOOD_EXPORT")

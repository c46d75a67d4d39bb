"""Random mutations of an export directory, the fuzz harness's cases: the loader must refuse each with one line
or load it and generate as the good export does. Used by tests/runtime/loading/test_fuzz_export.py (from Python) and
tests/bindings/test_capi_untrusted.py (through the C API).

    KINDS, make_case(base, case_dir, seed, index)    one random mutation
    FuzzSettings.from_env(...)                 case count, seconds, seed (SPECDEC_FUZZ_* environment variables)
    finish_fuzz(label, file_name, summary, results, verdict, settings)   the summary line and JSON

Every mutation that edits a file other than manifest.json rewrites its sha256 in the manifest (hostile_exports.py's
helpers), so what is tested is the loader's own checks, not the checksum.
"""

from __future__ import annotations


import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from hostile_exports import MANIFEST, copy_export, graph_file, manifest_of, read_json, rehash, set_external, sha256, \
    write_json




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

"""Hostile copies of an export directory for the loader's tests: tests/runtime/loading/test_untrusted_export.py (named
hostile cases) and tests/bindings/test_capi_untrusted.py (through the C API). The random mutations are in
fuzz_exports.py, the worker process that opens case directories in export_worker.py.

    copy_export(src, dst), read_json / write_json, rehash(export, *relative paths)
    with_external_data(export, role, kind)     a graph rewritten to keep its weights in a .data file beside it
    set_external(export, graph_rel, location=..., offset=..., length=...)   edit every external tensor's entry
    HOSTILE, make_hostile(base, case_dir, name)    the named hostile directories

Every mutation that edits a file other than manifest.json rewrites its sha256 in the manifest, so what is tested is
the loader's own checks, not the checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
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
        b'"WordLevel"', b'"NoSuchModel"')), "is not a valid tokenizer for tokenizers 0."),
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

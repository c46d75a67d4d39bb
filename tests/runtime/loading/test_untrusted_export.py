"""Untrusted export directories: every path stays inside the directory (`..`, absolute paths, symlinks out, external
data pointing out: each refused), the manifest's numbers, ids, shapes and dtypes are sane and agree with the declared
architecture and with the graph files, and a bad tokenizer is refused -- each as one SpecdecError line, before any
graph is opened, with a decoder loaded from a good export still working afterwards. The hostile directories are
built by tests/hostile_exports.py (HOSTILE), which the C API test (tests/bindings/test_capi_untrusted.py) shares;
each escaping path finds a file with the right sha256, so only the loader's own checks stop it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.loading.manifest import load_manifest

from hostile_exports import HOSTILE, PROMPT, copy_export, make_hostile, with_external_data


@pytest.fixture(scope="module")
def good(tiny_export, tmp_path_factory):
    """The tiny export, its target encoder rewritten to keep its weights in external data (as large exports do)."""
    export = copy_export(tiny_export, tmp_path_factory.mktemp("untrusted") / "good")
    with_external_data(export)
    return export


@pytest.fixture(scope="module")
def decoder(good):
    return SpeculativeDecoder.load(good, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def reference(decoder):
    return decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids


def test_external_data_export_loads_and_matches(good, tiny_export, reference):
    """The good base: external data inside the graph's folder, listed in the manifest, gives the same tokens."""
    plain = SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)
    assert plain.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids == reference


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_directory_is_refused_in_one_line(name, good, tmp_path, decoder, reference):
    export = make_hostile(good, tmp_path, name)
    with pytest.raises(SpecdecError) as err:
        SpeculativeDecoder.load(export, provider="cpu", threads=1)
    message = str(err.value)
    assert HOSTILE[name][1] in message, message
    assert "\n" not in message and "\r" not in message and len(message) < 1000, message
    assert "; " in message          # problem; fix
    # the decoder loaded from the good export before is unaffected
    assert decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids == reference


def test_every_hostile_path_kind_is_covered():
    """The four kinds of hostile path, each with at least one case."""
    names = " ".join(HOSTILE)
    for kind in ("dotdot", "absolute", "symlink", "external data dotdot", "external data absolute",
                 "external data symlink out"):
        assert kind in names, kind


def test_symlinks_inside_the_directory_are_fine(good, tmp_path, reference):
    """Confinement resolves symlinks instead of refusing them: a file linked to another inside the export, and the
    export directory itself reached through a symlink, load and give the same tokens."""
    export = copy_export(good, tmp_path / "export")
    real = export / "target" / "decoder-v1.onnx"
    (export / "target" / "decoder.onnx").rename(real)
    (export / "target" / "decoder.onnx").symlink_to("decoder-v1.onnx")
    link = tmp_path / "current"
    link.symlink_to(export)
    dec = SpeculativeDecoder.load(link, provider="cpu", threads=1)
    assert dec.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids == reference


def test_manifest_paths_are_resolved_inside(good):
    """Manifest.path gives the resolved file, and refuses what leads out when it is called, not only at load."""
    manifest = load_manifest(good)
    assert manifest.path("tokenizer.json") == (good / "tokenizer.json").resolve()
    for bad, words in (("../x", "'..' part"), ("/etc/passwd", "absolute"), ("a//b", "not normalized")):
        with pytest.raises(SpecdecError, match=words):
            manifest.path(bad)


def test_a_symlink_swapped_in_after_loading_is_caught(good, tmp_path):
    export = copy_export(good, tmp_path / "export")
    manifest = load_manifest(export)
    (export / "tokenizer.json").unlink()
    (export / "tokenizer.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(SpecdecError, match="leads outside the export directory"):
        manifest.path("tokenizer.json")


def test_checksums_off_still_confines_and_checks(good, tmp_path):
    """verify_checksums=False (benchmarks' cached exports) skips only the sha256s."""
    export = make_hostile(good, tmp_path, "symlink graph out")
    with pytest.raises(SpecdecError, match="leads outside"):
        load_manifest(export, verify_checksums=False)
    export = make_hostile(good, tmp_path / "b", "external data absolute")
    with pytest.raises(SpecdecError, match="absolute"):
        load_manifest(export, verify_checksums=False)


def test_cli_refuses_a_hostile_directory_in_one_line(good, tmp_path):
    export = make_hostile(good, tmp_path, "dotdot graph")
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(export), "--provider", "cpu",
                           "w5"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'..' part" in lines[0], proc.stderr



def test_graph_reader_agrees_with_onnx(good):
    """runtime/loading/onnxfile.py (no onnx dependency) reads the inputs, outputs and external data that onnx reads."""
    import onnx

    from specdec.runtime.loading.onnxfile import read_graph_file

    manifest = load_manifest(good)
    for info in manifest.models.values():
        for graph in (info.encoder, info.decoder):
            path = manifest.path(graph.file)
            model = onnx.load(str(path), load_external_data=False)
            scan = read_graph_file(path)

            def described(values):
                return [(v.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                       for d in v.type.tensor_type.shape.dim)) for v in values]

            assert [(v.name, v.shape) for v in scan.inputs] == described(model.graph.input)
            assert [(v.name, v.shape) for v in scan.outputs] == described(model.graph.output)
            external = {t.name: {e.key: e.value for e in t.external_data} for t in model.graph.initializer
                        if t.data_location == onnx.TensorProto.EXTERNAL}
            assert {e.tensor: (e.location, e.offset, e.length) for e in scan.external} == {
                name: (e["location"], int(e.get("offset", 0)), int(e["length"])) for name, e in external.items()}
    assert any(read_graph_file(manifest.path(i.encoder.file)).external for i in manifest.models.values())


def test_graph_reader_refuses_what_is_not_a_graph(tmp_path):
    """Truncated, empty, deeply nested or shrinking files are a GraphFileError, never a crash or a deep recursion."""
    import os

    from specdec.runtime.loading import onnxfile

    def scan(data: bytes):
        path = tmp_path / "g.onnx"
        path.write_bytes(data)
        return onnxfile.read_graph_file(path)

    for data, words in ((b"", "empty"), (b"\x08\x07", "no graph"), (b"\x3a\x05ab", "runs past the end"),
                        (b"\x3a" + b"\xff" * 11, "longer than 10 bytes"), (b"\x3b", "wire type 3"),
                        (b"\x3a\x02\x0a\x00" * 1 + b"\x3a\x7f", "runs past the end")):
        with pytest.raises(onnxfile.GraphFileError, match=words):
            scan(data)
    deep = b"\x0a\x00"     # graph > node > attribute > graph (a subgraph) > ..., 120 levels, built inside out
    for tag in [b"\x32", b"\x2a", b"\x0a"] * 40:            # attribute.g, node.attribute, graph.node
        deep = tag + _varint(len(deep)) + deep
    with pytest.raises(onnxfile.GraphFileError, match="nested more than"):
        scan(b"\x3a" + _varint(len(deep)) + deep)
    # a file that shrinks while it is read: an error from the bounds check, not SIGBUS
    path = tmp_path / "shrinks.onnx"
    path.write_bytes(b"\x3a\x02\x0a\x00")
    with open(path, "rb") as fh:
        reader = onnxfile._Reader(fh.fileno(), os.fstat(fh.fileno()).st_size + 100)
        with pytest.raises(onnxfile.GraphFileError, match="changed while it was read"):
            onnxfile._walk(reader, "model", (0, reader.size), onnxfile.GraphFile(), 0, main=False)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out

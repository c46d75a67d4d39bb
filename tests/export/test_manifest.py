"""manifest.json and the files of a real export (the session's `tiny_export` of `tiny_pair`)."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from tinymodels import read_manifest

GRAPH_IO = {
    "encoder": (["input_ids", "source_lengths"], ["cross_kv"]),
    "decoder": (["input_ids", "past_kv", "cross_kv", "row_lengths", "source_lengths", "draft_probs", "uniforms",
                 "temperature", "top_k", "top_p", "lenience", "logit_mask", "guess_counts"],
                ["logits", "new_kv", "probs", "accepted", "next_token"]),
}
HEAD = GRAPH_IO["decoder"][0][5:-1]         # the head's inputs every caller binds (guess_counts has a default)
GRAPH_IO["draft-decoder"] = (GRAPH_IO["decoder"][0] + ["steps"], GRAPH_IO["decoder"][1])   # the proposal loop
GRAPH_IO["target-decoder"] = (GRAPH_IO["decoder"][0][:5] + ["tree_depth", "tree_mask"] + GRAPH_IO["decoder"][0][5:]
                              + ["tree_uniforms"], GRAPH_IO["decoder"][1] + ["draws"])      # token trees, format 6
RANKS = {"steps": 1, "input_ids": 2, "cross_kv": 6, "past_kv": 6, "logits": 3, "new_kv": 6, "uniforms": 0, "temperature": 1,
         "top_k": 1, "top_p": 1, "probs": 2, "draft_probs": 0, "lenience": 1, "logit_mask": 2, "accepted": 1, "next_token": 1,
         "tree_depth": 1, "tree_mask": 2, "tree_uniforms": 1, "draws": 1, "row_lengths": 1, "source_lengths": 1,
         "guess_counts": 1}


def rank(kind, name):
    return RANKS[name]


@pytest.fixture(scope="module")
def manifest(tiny_export):
    return read_manifest(tiny_export)


def all_graphs(manifest):
    for role in ("target", "draft"):
        for kind in ("encoder", "decoder"):
            yield f"{role}/{kind}", kind, manifest["models"][role]["graphs"][kind]


def test_format_and_options(manifest):
    assert manifest["format"] == "specdec-export" and manifest["format_version"] == 7
    assert (manifest["gamma_max"], manifest["max_length"], manifest["dtype"]) == (8, 64, "fp32")
    assert manifest["vocab_size"] == 48
    assert manifest["special_ids"] == {"pad_token_id": 0, "eos_token_id": 1, "unk_token_id": 2,
                                       "decoder_start_token_id": 0}
    assert manifest["tokenizer"] == "tokenizer.json"
    assert "samplers" not in manifest
    assert manifest["head"]["inputs"] == HEAD
    assert manifest["head"]["tree"] == {"models": ["target"], "inputs": ["tree_depth", "tree_mask", "tree_uniforms"],
                                        "outputs": ["draws"]}


def test_every_file_is_listed_with_its_sha256(manifest, tiny_export):
    on_disk = {str(p.relative_to(tiny_export)) for p in tiny_export.rglob("*")
               if p.is_file() and p.name != "manifest.json" and not p.name.startswith(".")}
    assert set(manifest["files"]) == on_disk
    expected = {"tokenizer.json", "target/encoder.onnx", "target/decoder.onnx", "draft/encoder.onnx",
                "draft/decoder.onnx"}
    assert expected == on_disk
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((tiny_export / rel).read_bytes()).hexdigest() == digest, rel
    for path, _, entry in all_graphs(manifest):
        assert entry["file"] == path + ".onnx" and entry["file"] in manifest["files"]


def test_graph_io_names_dtypes_and_shapes(manifest, tiny_export):
    import onnx

    for path, kind, entry in all_graphs(manifest):
        inputs, outputs = GRAPH_IO[path.replace("/", "-") if kind == "decoder" else kind]
        assert [t["name"] for t in entry["inputs"]] == inputs, path
        assert [t["name"] for t in entry["outputs"]] == outputs, path
        graph = onnx.load(str(tiny_export / entry["file"])).graph
        assert [i.name for i in graph.input] == inputs and [o.name for o in graph.output] == outputs, path
        for tensor in entry["inputs"] + entry["outputs"]:
            assert tensor["dtype"] == "bool" if tensor["name"] == "tree_mask" else \
                tensor["dtype"] in ("float32", "int64"), (path, tensor)
            assert len(tensor["shape"]) == rank(kind, tensor["name"]), (path, tensor)
            assert all(isinstance(d, str) and d or isinstance(d, int) and d > 0 for d in tensor["shape"]), tensor


@pytest.mark.parametrize("role,arch", [
    ("target", dict(layers=2, decoder_layers=2, heads=3, d_kv=8, d_model=32, variant="t5-v1.1")),
    ("draft", dict(layers=1, decoder_layers=1, heads=2, d_kv=8, d_model=16, variant="t5-v1.1")),
])
def test_architecture_and_cache_shapes(manifest, tiny_pair, role, arch):
    model = manifest["models"][role]
    assert model["source"] == str(tiny_pair[0 if role == "target" else 1])
    assert model["revision"] is None                          # a local directory has no hub revision
    for key, value in arch.items():
        assert model["architecture"][key] == value, key
    assert model["architecture"]["vocab_size"] == 48
    assert model["architecture"]["scale_decoder_outputs"] is False
    layers, heads, d_kv = arch["decoder_layers"], arch["heads"], arch["d_kv"]
    dec = {t["name"]: t for t in model["graphs"]["decoder"]["inputs"] + model["graphs"]["decoder"]["outputs"]}
    enc = {t["name"]: t for t in model["graphs"]["encoder"]["inputs"] + model["graphs"]["encoder"]["outputs"]}
    assert dec["past_kv"]["shape"][1:3] == [layers, 2] and dec["past_kv"]["shape"][4:] == [heads, d_kv]
    assert dec["new_kv"]["shape"][1:3] == [layers, 2] and dec["new_kv"]["shape"][4:] == [heads, d_kv]
    assert isinstance(dec["past_kv"]["shape"][0], str) and isinstance(dec["new_kv"]["shape"][0], str)
    assert dec["logits"]["shape"][2] == 48 and isinstance(dec["logits"]["shape"][1], str)
    assert enc["cross_kv"]["shape"][:2] == [layers, 2] and enc["cross_kv"]["shape"][3] == heads
    assert enc["cross_kv"]["shape"][5] == d_kv and isinstance(enc["cross_kv"]["shape"][4], str)
    assert dec["cross_kv"]["shape"] == enc["cross_kv"]["shape"]


def test_parity_check_is_recorded(manifest):
    for role in ("target", "draft"):
        report = manifest["parity_check"][role]
        assert report["passed"] is True and report["verify_tokens"] == 9
        assert report["step_max_abs_diff"] <= 1e-4 and report["verify_max_abs_diff"] <= 1e-4


def test_exported_tokenizer_encodes_like_the_checkpoint(tiny_export):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_export / "tokenizer.json"))
    assert tok.encode("w5 w6").ids == [5, 6, 1]
    assert tok.encode("w39 nonsense").ids == [39, 2, 1]
    assert tok.encode("w40").ids == [2, 1]      # the real T5 layout: rows 40..47 are padded, no text makes them


def test_runtime_reads_the_manifest_and_catches_a_modified_file(tiny_export, tmp_path):
    from specdec.runtime.core.errors import SpecdecError
    from specdec.runtime.loading.manifest import load_manifest

    m = load_manifest(tiny_export)
    assert (m.gamma_max, m.max_length, m.dtype, m.vocab_size) == (8, 64, "fp32", 48)
    assert (m.vocabulary.rows, m.vocabulary.tokenizer_size, m.vocabulary.padded) == (48, 40, 8)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_export, copy)
    data = bytearray((copy / "draft" / "decoder.onnx").read_bytes())
    data[-1] ^= 0xFF
    (copy / "draft" / "decoder.onnx").write_bytes(bytes(data))
    with pytest.raises(SpecdecError, match="draft/decoder.onnx.*sha256"):
        load_manifest(copy)


@pytest.mark.parametrize("version", [1, 3, 4, 5, 6])
def test_an_older_format_is_refused_with_a_one_line_fix(tiny_export, tmp_path, version):
    """Format 1 (separate sampler graphs), format 3 (a draft run per guess, no proposal loop), format 4 (a
    proposal loop that cannot verify a lower chain level's guesses), format 5 (a target that cannot verify a
    token tree) and format 6 (one length for every batch row, the head on row 0) cannot run on this runtime: say so and how to fix it."""
    import json

    from specdec.runtime.core.errors import SpecdecError
    from specdec.runtime.loading.manifest import load_manifest

    copy = tmp_path / "old"
    shutil.copytree(tiny_export, copy)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["format_version"] = version
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(SpecdecError) as err:
        load_manifest(copy)
    message = str(err.value)
    assert f"format version {version}" in message and "re-export" in message and "\n" not in message


@pytest.mark.parametrize("role", ["target", "draft"])
def test_exported_graphs_match_the_checkpoint_past_32(tiny_export, tiny_pair, role):
    """End to end through the CLI: the written graphs vs the checkpoint on disk, N = 1 and N = gamma_max+1 at
    past 40, inside max_length 64."""
    import torch
    from transformers import T5ForConditionalGeneration

    from specdec.export.check import onnx_logits

    model = T5ForConditionalGeneration.from_pretrained(str(tiny_pair[0 if role == "target" else 1])).eval()
    rng = np.random.default_rng(0)
    source = np.concatenate([rng.integers(3, 48, (1, 15)), [[1]]], 1).astype(np.int64)
    decoder_ids = np.concatenate([[[0]], rng.integers(3, 48, (1, 49))], 1).astype(np.int64)   # 40 + 1 + 9
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(source), decoder_input_ids=torch.from_numpy(decoder_ids)).logits
    ref = ref.numpy()
    outputs = onnx_logits(tiny_export / role / "encoder.onnx", tiny_export / role / "decoder.onnx", source,
                          decoder_ids, [40, 1, 9])
    np.testing.assert_allclose(np.concatenate(outputs, 1), ref, rtol=0, atol=1e-4)


# -- the manifest's keys, declared once (runtime/loading/schema.py) ----------------------------------------------------

def _declared(entry, table, what):
    """Every key of a written entry is declared in its schema table, and every required key is there."""
    from specdec.runtime.loading import schema

    assert set(entry) <= set(table), f"{what}: {sorted(set(entry) - set(table))} not declared"
    assert set(schema.required(table)) <= set(entry), what


def test_the_written_manifest_has_only_declared_keys(manifest):
    from specdec.runtime.loading import schema

    _declared(manifest, schema.TOP, "the manifest")
    _declared(manifest["special_ids"], schema.SPECIAL_IDS, "special_ids")
    for role, model in manifest["models"].items():
        _declared(model, schema.MODEL, role)
        _declared(model["architecture"], schema.ARCHITECTURE, f"{role} architecture")
        for kind, graph in model["graphs"].items():
            _declared(graph, schema.GRAPH, f"{role} {kind}")
            for tensor in graph["inputs"] + graph["outputs"]:
                _declared(tensor, schema.TENSOR, f"{role} {kind} tensor")


def test_the_writer_cannot_write_an_undeclared_key():
    from specdec.runtime.loading.schema import SPECIAL_IDS, TOP, build

    assert build(SPECIAL_IDS, "special_ids", eos_token_id=1, decoder_start_token_id=0, pad_token_id=None) == \
        {"eos_token_id": 1, "decoder_start_token_id": 0, "pad_token_id": None}
    with pytest.raises(ValueError, match="'samplers' is not a declared manifest key"):
        build(TOP, "the manifest", samplers={})
    with pytest.raises(ValueError, match="'eos_token_id' is missing"):
        build(SPECIAL_IDS, "special_ids", decoder_start_token_id=0)
    with pytest.raises(ValueError, match="eos_token_id is bool, not int"):
        build(SPECIAL_IDS, "special_ids", eos_token_id=True, decoder_start_token_id=0)


def test_the_reader_reads_declared_keys_only():
    """Every top-level key runtime/loading/manifest.py reads (raw["..."], raw.get("...")) is declared."""
    import re

    from specdec.runtime.loading import manifest as reader, schema

    source = open(reader.__file__).read()
    read = set(re.findall(r"raw(?:\[|\.get\()\"(\w+)\"", source))
    assert read and read <= set(schema.TOP), sorted(read - set(schema.TOP))


def test_the_validator_takes_its_ranges_from_the_schema():
    from specdec.runtime.loading import audio, schema, validate

    assert validate.NUMBERS == {"gamma_max": (1, 128), "max_length": (3, 1 << 16), "vocab_size": (1, 1 << 21)}
    assert validate.ARCH == {"decoder_layers": (1, 256), "heads": (1, 1024), "d_kv": (1, 4096)}
    assert validate.ARCH_OPTIONAL == {"layers": (1, 256), "d_model": (1, 1 << 16), "d_ff": (1, 1 << 20)}
    assert audio.SPEECH_NUMBERS == {"sampling_rate": (8_000, 48_000), "n_samples": (1, 1 << 24),
                                    "frames": (1, 1 << 16)}
    assert list(validate.CAPTURE_NUMBERS) == ["cache_capacity", "source_capacity", "token_slots"]
    assert set(validate.KV_DTYPES) == set(schema.choices(schema.TOP, "dtype")) == {"fp32", "fp16"}

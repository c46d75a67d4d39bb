"""int8 exports of a checkpoint whose layers are copies of one another (as the widened pairs are): PyTorch's exporter
stores identical weights once and reaches the other uses through Identity nodes, which ONNX Runtime's quantizers
skip. The export points those MatMuls at the weights (export/quantize.py, direct_weights), so every weight MatMul is
quantized but the ones the float32 rules keep, and the rules find the blocks as in a checkpoint of distinct layers."""

from __future__ import annotations

import pytest

from tinymodels import read_manifest, run_export_cli, tiny_t5_model, write_tiny_tokenizer

SHAPE = dict(vocab=48, d_model=32, d_kv=8, heads=4, layers=3, decoder_layers=3)


def copied_layers(path):
    """A 3-block tiny T5 whose blocks 1 and 2 (encoder and decoder) are copies of block 1's weights."""
    model = tiny_t5_model(seed=21, **SHAPE)
    for stack in (model.encoder, model.decoder):
        first = stack.block[1].state_dict()
        stack.block[2].load_state_dict(first)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    write_tiny_tokenizer(path, SHAPE["vocab"])
    return path


def float_weight_matmuls(path) -> tuple[int, int]:
    """(MatMuls whose weight is a 2-D float initializer, directly or through Identity nodes; those through Identity)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name: t for t in graph.initializer if len(t.dims) == 2}
    made_by = {out: node for node in graph.node for out in node.output}

    def root(name):
        while name in made_by and made_by[name].op_type == "Identity":
            name = made_by[name].input[0]
        return name

    found = [n for n in graph.node if n.op_type == "MatMul" and root(n.input[1]) in weights]
    return len(found), sum(n.input[1] not in weights for n in found)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    target = copied_layers(root / "target")
    out = {}
    for name, flags in (("fp32", []), ("int8", ["--dtype", "int8"])):
        code, _, stderr = run_export_cli(["--target", target, "--draft", target, "--export", root / name, *flags,
                                          "--gamma-max", "4", "--max-length", "32"])
        assert code == 0, stderr
        out[name] = root / name
    return out


def test_the_fp32_graphs_reach_shared_weights_through_identity(exports):
    """The premise: the exporter shares the copied blocks' weights (else this file tests nothing)."""
    for graph in ("encoder", "decoder"):
        assert float_weight_matmuls(exports["fp32"] / "target" / f"{graph}.onnx")[1] > 0, graph


def test_every_shared_weight_matmul_is_quantized_but_the_rules_float_ones(exports):
    """int8 target: the float32 weight MatMuls are exactly what the rules keep (the first encoder block's v and o;
    the first decoder block's and the output projection), as the manifest records; none through Identity. The draft
    (the same checkpoint, quantized whole): none."""
    manifest = read_manifest(exports["int8"])
    for role in ("target", "draft"):
        quant = manifest["models"][role]["quantization"]
        for graph in ("encoder", "decoder"):
            kept = quant[graph]["float32_matmuls"]
            count, via_identity = float_weight_matmuls(exports["int8"] / role / f"{graph}.onnx")
            assert via_identity == 0 and count == len(kept), (role, graph, count, kept)
            if role == "target":
                assert kept, (graph, "the rules found no blocks")
            else:
                assert kept == []

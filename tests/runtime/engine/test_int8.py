"""int8 exports (export/quantize.py): an int8 draft (dynamic or weight-only) leaves the output exactly the fp32
target's; an int8 target is exact with respect to itself. Greedy equality and chi-square against enumerated distributions, with a broken
control; the export's own checks and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec.runtime import SpeculativeDecoder
from tinymodels import read_manifest, run_export_cli

import test_distribution as td


def export_int8(target_dir, out, *flags, gamma_max="4", max_length="16"):
    draft = Path(target_dir).parent / "draft"
    code, stdout, stderr = run_export_cli(["--target", target_dir, "--draft", draft, "--export", out, *flags,
                                           "--gamma-max", gamma_max, "--max-length", max_length])
    assert code == 0, stderr
    return out, stdout


@pytest.fixture(scope="module")
def int8_draft(small_vocab_pair, tmp_path_factory):
    return export_int8(small_vocab_pair[0], tmp_path_factory.mktemp("i8d") / "export", "--draft-dtype", "int8")


@pytest.fixture(scope="module")
def int8_wo_draft(small_vocab_pair, tmp_path_factory):
    return export_int8(small_vocab_pair[0], tmp_path_factory.mktemp("i8w") / "export", "--draft-dtype", "int8-wo")


@pytest.fixture(scope="module")
def int8_both(small_vocab_pair, tmp_path_factory):
    return export_int8(small_vocab_pair[0], tmp_path_factory.mktemp("i8b") / "export", "--dtype", "int8")


def plain_nodes(graph):
    """A decoder's nodes as one step runs them: a draft's decoder (export format 4) is If(steps > 1) over its
    proposal loop, and its plain branch holds the format-3 graph's nodes (the loop body repeats them)."""
    wrapper = next((n for n in graph.node if n.name == "proposal_If"), None)
    if wrapper is None:
        return list(graph.node)
    return list(next(a.g for a in wrapper.attribute if a.name == "else_branch").node)


def test_int8_graphs_manifest_and_parity_line(int8_draft, int8_wo_draft, int8_both):
    """Which graphs are quantized, how, and what the manifest and the parity line say: a target in int8 keeps its
    output projection (LM head) in float32 (its first decoder and encoder blocks too, from 3 blocks on:
    test_target_float_nodes_are_the_first_block_and_the_head, tests/export/test_int8_encoder.py; this pair has
    one block each, so its encoder is int8 whole), a draft is quantized whole."""
    import onnx

    for (out, stdout), weights in ((int8_draft, {"target": "fp32", "draft": "int8"}),
                                   (int8_wo_draft, {"target": "fp32", "draft": "int8-wo"}),
                                   (int8_both, {"target": "int8", "draft": "int8"})):
        manifest = read_manifest(out)
        assert manifest["dtype"] == "fp32"                       # activations and KV cache
        assert {role: m["weights"] for role, m in manifest["models"].items()} == weights
        for role, w in weights.items():
            graphs = {kind: onnx.load(str(out / role / f"{kind}.onnx")).graph for kind in ("encoder", "decoder")}
            nodes = {kind: plain_nodes(g) for kind, g in graphs.items()}
            ops = {kind: {n.op_type for n in ns} for kind, ns in nodes.items()}
            assert ("MatMulInteger" in ops["decoder"]) == (w == "int8"), (role, w)
            assert ("MatMulInteger" in ops["encoder"]) == (w == "int8"), (role, w)
            assert ("MatMulNBits" in ops["decoder"]) == ("MatMulNBits" in ops["encoder"]) == (w == "int8-wo")
            assert manifest["parity_check"][role]["weights"] == w
            # float32 weight MatMuls left: the target's LM head in int8, everything in fp32, none in a quantized draft
            dims = {t.name: list(t.dims) for t in graphs["decoder"].initializer}
            vocab = manifest["vocab_size"]
            float_mm = [n for n in nodes["decoder"] if n.op_type == "MatMul" and n.input[1] in dims]
            heads = [n.name.removeprefix("plain/") for n in float_mm if dims[n.input[1]][-1] == vocab]
            if w == "fp32":
                assert len(float_mm) > len(heads) == 1
            elif role == "target":
                assert len(float_mm) == len(heads) == 1
                assert manifest["models"][role]["quantization"]["decoder"]["float32_matmuls"] == heads
                assert manifest["models"][role]["quantization"]["encoder"]["float32_matmuls"] == []
                assert not [n for n in nodes["encoder"] if n.op_type == "MatMul"
                            and n.input[1] in {t.name for t in graphs["encoder"].initializer}]
            else:
                assert float_mm == []
        assert f"parity vs PyTorch float64 ({weights['draft']})" in stdout and "argmax agrees on" in stdout


@pytest.mark.parametrize("draft_dtype", ["int8", "int8-wo"])
def test_int8_draft_greedy_equals_the_fp32_target(tmp_path, draft_dtype):
    """The bundled pair with an int8 draft (dynamic or weight-only): greedy output equals gamma = 0 of the fp32 target and PyTorch's greedy
    generate on 20 test prompts (both tasks), at gamma 2 and 4, with guesses kept and rejected. (Tiny random models
    quantize too poorly for the export's parity check: tiny d_model, peaky activations.)"""
    import specdec.models
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    models = Path(specdec.models.__file__).parent
    rows = [json.loads(line) for line in (models / "prompts" / "test.jsonl").read_text().splitlines()]
    prompts = [r["source"] for r in rows if r["task"] == "summarize"][:10] + \
        [r["source"] for r in rows if r["task"] == "translate"][:10]
    code, stdout, stderr = run_export_cli(["--export", tmp_path / "export", "--draft-dtype", draft_dtype,
                                           "--max-length", "256"])
    assert code == 0, stderr
    dec = SpeculativeDecoder.load(tmp_path / "export", provider="cpu")
    tok = AutoTokenizer.from_pretrained(str(models / "target"))
    model = T5ForConditionalGeneration.from_pretrained(str(models / "target")).eval()
    kept = rejected = 0
    for text in prompts:
        ids = tok(text).input_ids[:256]
        with torch.no_grad():
            ref = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0, 1:].tolist()
        while ref and ref[-1] == 0:
            ref.pop()
        want = dec.generate(input_ids=ids, max_new_tokens=32, gamma=0).token_ids
        assert want == ref, text
        for gamma in (2, 4):
            res = dec.generate(input_ids=ids, max_new_tokens=32, gamma=gamma, draft="draft")
            assert res.token_ids == want, (text, gamma)
            kept += res.stats.accepted
            rejected += res.stats.proposed - res.stats.accepted
    assert kept > 0 and rejected > 0


def test_int8_target_greedy_equals_its_own_target_only_output(tmp_path):
    """The bundled pair in int8 (both models): speculative greedy output equals the int8 target's gamma = 0 output
    on 20 test prompts at gamma 1, 2 and 4. This needs the per-token activation scales (export/quantize.py): with
    ONNX Runtime's one scale per tensor, a verify run's logits depend on the other tokens in it: 55 of 400 test
    prompts came out differently at gamma 1, and 6 of these 20 at gamma 1, 2 or 4 (both measured with the
    per-tensor graphs: this test fails on them)."""
    import specdec.models

    models = Path(specdec.models.__file__).parent
    rows = [json.loads(line) for line in (models / "prompts" / "test.jsonl").read_text().splitlines()]
    prompts = [r["source"] for r in rows if r["task"] == "summarize"][:10] + \
        [r["source"] for r in rows if r["task"] == "translate"][:10]
    code, _, stderr = run_export_cli(["--export", tmp_path / "export", "--dtype", "int8", "--max-length", "256"])
    assert code == 0, stderr
    dec = SpeculativeDecoder.load(tmp_path / "export", provider="cpu")
    kept = 0
    for text in prompts:
        ids = dec.tokenizer.encode(text).ids[:256]
        want = dec.generate(input_ids=ids, max_new_tokens=32, gamma=0).token_ids
        for gamma in (1, 2, 4):
            res = dec.generate(input_ids=ids, max_new_tokens=32, gamma=gamma, draft="draft")
            assert res.token_ids == want, (text, gamma)
            kept += res.stats.accepted
    assert kept > 0


def int8_target_distribution(export_dir, temperature) -> dict:
    """The int8 target's own distribution over the first td.TOKENS tokens, enumerated from its ONNX graphs with
    plain onnxruntime sessions (no specdec runtime): the reference for an int8 target."""
    import onnxruntime as ort

    from specdec.export.head import plain_step_feed

    enc = ort.InferenceSession(str(export_dir / "target" / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(export_dir / "target" / "decoder.onnx"), providers=["CPUExecutionProvider"])
    cross = enc.run(None, {"input_ids": np.array([td.PROMPT], np.int64)})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    vocab = dec.get_outputs()[0].shape[-1]
    dist, frontier = {}, {(): 1.0}
    for _ in range(td.TOKENS):
        nxt = {}
        for prefix, mass in frontier.items():
            ids = np.array([[0, *prefix]], np.int64)
            logits = dec.run(["logits"], {"input_ids": ids, "past_kv": np.zeros((0, layers, 2, 1, heads, d_kv),
                                                                                np.float32),
                                          "cross_kv": cross, **plain_step_feed(vocab, session=dec, new=ids.shape[1])})[0][0, -1].astype(np.float64)
            z = logits / temperature
            p = np.exp(z - z.max())
            p /= p.sum()
            for tok, q in enumerate(p):
                (dist if tok == td.EOS or len(prefix) + 1 == td.TOKENS else nxt)[(*prefix, tok)] = mass * q
        frontier = nxt
    return dist


@pytest.mark.parametrize("export", ["int8_draft", "int8_wo_draft"])
def test_int8_draft_sampling_follows_the_fp32_target(small_vocab_pair, export, request):
    """N = 10,000, gamma 2, temperature 1: chi-square p >= 1e-3 against the fp32 target's enumerated (PyTorch)
    distribution, with the int8 (dynamic or weight-only) draft proposing. The draft's precision changes only q, which
    the sampler handles as test_distribution.py's fp32 tests check at N = 20,000; the control there (a plain draw from
    p after a rejection) is caught on 5,000 samples, half of this N."""
    dec = SpeculativeDecoder.load(request.getfixturevalue(export)[0], provider="cpu")
    settings = td.SETTINGS["temperature"]
    p = td.chi_square_p(td.empirical(dec, settings, 10_000), td.exact_distribution(small_vocab_pair[0], **settings))
    assert p >= td.P_PASS, p


def test_int8_target_sampling_follows_its_own_distribution_and_a_broken_one_is_caught(small_vocab_pair, int8_both,
                                                                                       tmp_path):
    """N = 20,000, gamma 2, temperature 1: an int8 target (int8 draft) against the int8 target's own enumerated
    distribution, p >= 1e-3; the same export with the target's residual draw replaced by a draw from p (then
    quantized the same way) is caught, p < 1e-6."""
    from transformers import T5ForConditionalGeneration

    from specdec.export.families.t5_decoder import export_decoder
    from specdec.export.quantize import quantize_int8, target_float_nodes
    from specdec.runtime.loading.manifest import sha256_file

    settings = td.SETTINGS["temperature"]
    dist = int8_target_distribution(int8_both[0], 1.0)
    dec = SpeculativeDecoder.load(int8_both[0], provider="cpu")
    assert td.chi_square_p(td.empirical(dec, settings), dist) >= td.P_PASS

    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(int8_both[0], broken)
    model = T5ForConditionalGeneration.from_pretrained(str(small_vocab_pair[0])).eval()
    export_decoder(model, broken / "target/decoder.onnx", residual=False, tree=True)
    path = broken / "target/decoder.onnx"
    quantize_int8(path, "target decoder", target_float_nodes(path, model.config.vocab_size,
                                                                    model.config.num_decoder_layers))
    manifest = json.loads((broken / "manifest.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = sha256_file(broken / rel)
    (broken / "manifest.json").write_text(json.dumps(manifest))
    wrong = SpeculativeDecoder.load(broken, provider="cpu")
    _, p_value = td.caught(lambda a, b: td.empirical(wrong, settings, b, start=a), dist, td.N_SAMPLES,
                           label="broken int8 target")
    assert p_value < td.P_TEETH


@pytest.mark.parametrize("flags,message", [
    (["--dtype", "int4"], "--dtype must be one of fp32, fp16, int8, int8-wo (got int4)"),
    (["--draft-dtype", "bf16"], "--draft-dtype must be one of fp32, fp16, int8, int8-wo (got bf16)"),
    (["--dtype", "fp16", "--draft-dtype", "int8"], "the pair shares one KV-cache dtype"),
    (["--dtype", "fp16", "--draft-dtype", "int8-wo"], "the pair shares one KV-cache dtype"),
    (["--dtype", "int8-wo"], "--dtype int8-wo is for drafts only"),
])
def test_bad_dtypes_are_one_line_errors_and_leave_no_directory(small_vocab_pair, tmp_path, flags, message):
    out = tmp_path / "export"
    code, _, stderr = run_export_cli(["--target", small_vocab_pair[0], "--draft",
                                      Path(small_vocab_pair[0]).parent / "draft", "--export", out, *flags])
    assert code != 0 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_a_failed_export_leaves_no_partial_directory(small_vocab_pair, tmp_path):
    """A draft of the same vocabulary size whose tokenizer has other words fails after the export directory was
    made (the tokenizers are compared once both checkpoints are loaded): the directory is removed."""
    from tinymodels import make_tiny_t5, tiny_vocab

    words = {("x" + w[1:] if w.startswith("w") else w): i for w, i in tiny_vocab(8).items()}
    other = make_tiny_t5(tmp_path / "other", vocab=8, d_model=16, d_kv=8, heads=2, layers=1, decoder_layers=1,
                         tokenizer_words=words)
    out = tmp_path / "export"
    code, _, stderr = run_export_cli(["--target", small_vocab_pair[0], "--draft", other, "--export", out,
                                      "--draft-dtype", "int8"])
    assert code != 0 and "tokenizers" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_an_int8_draft_is_never_refused_and_a_drifting_int8_target_only_without_the_flag(tmp_path):
    """An ill-conditioned tiny pair (initializer_factor 7.5: with transformers 5.24's initialisation 4 no longer
    drifts past the tolerance; 3 decoder blocks each, so the int8 target quantizes two and the draft, quantized
    whole, all three; a 1-block draft keeps within the tolerance since int8 weights keep their pairs within 128): its
    int8 draft drifts past the tolerance and is exported with a note (the target verifies every guess, so it cannot
    change the output); its int8 target drifts too, and is refused in one line naming --accept-int8-drift (the
    export removed), then exported with the flag, as that line says."""
    from tinymodels import make_tiny_t5

    spread = dict(vocab=48, tokens=40, d_model=32, layers=1, initializer_factor=7.5)
    target = make_tiny_t5(tmp_path / "target", seed=3, decoder_layers=3, **spread)
    draft = make_tiny_t5(tmp_path / "draft", seed=4, decoder_layers=3, **spread)
    base = ["--target", target, "--draft", draft, "--gamma-max", "4", "--max-length", "16"]
    code, stdout, stderr = run_export_cli([*base, "--export", tmp_path / "d8", "--draft-dtype", "int8"])
    assert code == 0, stderr
    assert "note: the int8 draft's logits drift" in stdout and "an int8 draft cannot change the output" in stdout
    code, _, stderr = run_export_cli([*base, "--export", tmp_path / "t8", "--dtype", "int8"])
    assert code == 1 and len(stderr.strip().splitlines()) == 1, stderr
    assert "int8 target's logits drift" in stderr and "argmax agrees on" in stderr and "--accept-int8-drift" in stderr
    assert not (tmp_path / "t8").exists() and "was removed" in stderr         # nothing refused stays to be loaded
    code, _, stderr = run_export_cli([*base, "--export", tmp_path / "t8", "--dtype", "int8", "--accept-int8-drift"])
    assert code == 0, stderr
    dec = SpeculativeDecoder.load(tmp_path / "t8", provider="cpu")
    want = dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids
    assert dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=3, draft="draft").token_ids == want


def test_target_float_nodes_are_the_first_block_and_the_head(tmp_path):
    """In a 3-block decoder, target_float_nodes names the LM head and exactly the weight MatMuls whose weights are
    PyTorch's first decoder block's (compared by value, not by name); with 2 blocks only the head."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from transformers import T5ForConditionalGeneration

    from specdec.export.families.t5_decoder import export_decoder
    from specdec.export.quantize import target_float_nodes
    from tinymodels import make_tiny_t5

    for layers in (3, 2):
        root = tmp_path / f"l{layers}"
        make_tiny_t5(root, vocab=8, d_model=16, d_kv=8, heads=2, layers=1, decoder_layers=layers, seed=3)
        model = T5ForConditionalGeneration.from_pretrained(str(root)).eval()
        path = root / "decoder.onnx"
        export_decoder(model, path)
        graph = onnx.load(str(path)).graph
        weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        by_name = {n.name: n for n in graph.node}
        # block 0's weight matrices in the decoder graph (cross-attention k/v are computed in the encoder graph)
        block0 = [p.detach().numpy().T for name, p in model.decoder.block[0].named_parameters()
                  if name.endswith(".weight") and p.dim() == 2 and "relative_attention_bias" not in name
                  and not name.startswith(("layer.1.EncDecAttention.k.", "layer.1.EncDecAttention.v."))]
        kept = target_float_nodes(path, model.config.vocab_size, layers)
        head = [n for n in kept if weights[by_name[n].input[1]].shape[-1] == model.config.vocab_size]
        assert len(head) == 1
        first = [weights[by_name[n].input[1]] for n in kept if n not in head]
        if layers == 2:
            assert first == []
            continue
        assert len(first) == len(block0) == 8
        for w in block0:
            assert sum(a.shape == w.shape and np.array_equal(a, w) for a in first) == 1

"""Encoder/decoder graphs vs Hugging Face's own T5 forward pass on the whole decoder sequence (no cache).

Tiny random configs: v1.0 and v1.1, d_kv != d_model / heads, odd head counts, num_decoder_layers != num_layers,
small relative-position buckets (so that past lengths > 32 are well beyond max_distance) and the default buckets.
The relative-position bias tables are scaled up so that a bias at a wrong position shows in the logits."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tinymodels import tiny_t5_model

FP32_TOL = 1e-4

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

CONFIGS = {
    "v10-small-buckets": dict(v11=False, d_model=32, d_kv=8, heads=3, layers=2, decoder_layers=2,
                              relative_attention_num_buckets=8, relative_attention_max_distance=16),
    "v11-odd-heads": dict(v11=True, vocab=61, d_model=24, d_kv=7, heads=5, layers=2, decoder_layers=2,
                          relative_attention_num_buckets=10, relative_attention_max_distance=20),
    "enc1-dec3": dict(v11=True, d_model=16, d_kv=12, heads=1, layers=1, decoder_layers=3,
                      relative_attention_num_buckets=6, relative_attention_max_distance=12),
    "enc3-dec1": dict(v11=False, d_model=16, d_kv=4, heads=3, layers=3, decoder_layers=1,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16),
    "v10-default-buckets": dict(v11=False, d_model=32, d_kv=8, heads=4, layers=2, decoder_layers=2),
}
PASTS = {name: (0, 1, 40) for name in CONFIGS}
PASTS["v10-default-buckets"] = (0, 1, 40, 140)      # 140 > max_distance 128
GAMMA = 4


class Exported:
    """A tiny model, its encoder/decoder graphs (fp32 or fp16) and ORT sessions."""

    def __init__(self, name, model, directory, dtype="fp32"):
        import onnxruntime as ort
        import torch

        from specdec.export.families import t5_decoder as decoder, t5_encoder as encoder
        from specdec.export.attention import cast_for_export

        self.name, self.model, self.config = name, model, model.config
        torch_dtype = torch.float16 if dtype == "fp16" else torch.float32
        cast = cast_for_export(model, torch_dtype)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder_path, self.decoder_path = directory / "encoder.onnx", directory / "decoder.onnx"
        encoder.export_encoder(cast, self.encoder_path)
        decoder.export_decoder(cast, self.decoder_path, torch_dtype)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.enc = ort.InferenceSession(str(self.encoder_path), opts, providers=["CPUExecutionProvider"])
        self.dec = ort.InferenceSession(str(self.decoder_path), opts, providers=["CPUExecutionProvider"])

    def encode(self, source):
        return self.enc.run(None, {"input_ids": source})[0]

    def empty_cache(self, cross):
        layers, _, batch, heads, _, d_kv = cross.shape
        return np.zeros((0, layers, 2, batch, heads, d_kv), cross.dtype)

    def step(self, ids, cache, cross):
        """The fused graph's decoder outputs (its head runs a plain step on the side); batch 1 only."""
        from specdec.export.head import plain_step_feed

        logits, new_kv = self.dec.run(["logits", "new_kv"], {"input_ids": ids, "past_kv": cache, "cross_kv": cross,
                                                             **plain_step_feed(self.config.vocab_size)})
        return logits, new_kv

    def run(self, source, decoder_ids, steps):
        """Calls of `steps` tokens each, appending to the cache; -> list of logits per call, final cache."""
        cross = self.encode(source)
        cache, outputs, pos = self.empty_cache(cross), [], 0
        for n in steps:
            logits, new_kv = self.step(decoder_ids[:, pos:pos + n], cache, cross)
            assert logits.shape == (decoder_ids.shape[0], n, self.config.vocab_size)
            assert new_kv.shape == (n, *cache.shape[1:])
            cache = np.concatenate([cache, new_kv])
            outputs.append(logits)
            pos += n
        return outputs, cache


def reference_logits(model, source, decoder_ids):
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(source), decoder_input_ids=torch.from_numpy(decoder_ids))
    return out.logits.float().numpy()


def sequences(config, src_len, length, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(3, config.vocab_size, size=(batch, src_len)).astype(np.int64)
    source[:, -1] = config.eos_token_id
    body = rng.integers(3, config.vocab_size, size=(batch, length - 1))
    decoder_ids = np.concatenate([np.full((batch, 1), config.decoder_start_token_id), body], 1).astype(np.int64)
    return source, decoder_ids


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cache = {}

    def get(name, dtype="fp32"):
        if (name, dtype) not in cache:
            model = tiny_t5_model(seed=len(cache) + 3, bias_scale=4.0, **CONFIGS[name])
            cache[name, dtype] = Exported(name, model, tmp_path_factory.mktemp(f"{name}-{dtype}"), dtype)
        return cache[name, dtype]

    return get


def src_len_for(config):
    return config.relative_attention_max_distance + 7     # the encoder's bidirectional buckets overflow too


CASES = [(name, past, new) for name in CONFIGS for past in PASTS[name] for new in (1, GAMMA + 1)]


@pytest.mark.parametrize("name,past,new", CASES, ids=[f"{n}-past{p}-N{k}" for n, p, k in CASES])
def test_decoder_logits_match_pytorch(exported, name, past, new):
    ex = exported(name)
    source, decoder_ids = sequences(ex.config, src_len_for(ex.config), past + new, seed=past + new)
    ref = reference_logits(ex.model, source, decoder_ids)
    assert np.abs(ref).max() > 0.05, "degenerate logits make the tolerance meaningless"
    steps = [past, new] if past else [new]
    outputs, cache = ex.run(source, decoder_ids, steps)
    if past:
        np.testing.assert_allclose(outputs[0], ref[:, :past], rtol=0, atol=FP32_TOL, err_msg="prefill")
    np.testing.assert_allclose(outputs[-1], ref[:, past:past + new], rtol=0, atol=FP32_TOL)
    assert cache.shape[0] == past + new


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_token_steps_then_verify_match_pytorch(exported, name):
    """The runtime's pattern: a cache grown one token per call to past 40 (> 32), then a gamma+1 verify."""
    ex = exported(name)
    past = 40
    source, decoder_ids = sequences(ex.config, 9, past + GAMMA + 1, seed=5)
    ref = reference_logits(ex.model, source, decoder_ids)
    outputs, _ = ex.run(source, decoder_ids, [1] * past + [GAMMA + 1])
    got = np.concatenate(outputs, axis=1)
    np.testing.assert_allclose(got, ref, rtol=0, atol=FP32_TOL)


def test_rollback_is_truncating_the_cache(exported):
    """After a verify pass, keeping only the accepted rows of new_kv and continuing with other tokens gives the
    logits of the new sequence: rows of the rejected guesses leave nothing behind."""
    ex = exported("v11-odd-heads")
    source, decoder_ids = sequences(ex.config, 11, 36 + GAMMA + 1, seed=8)
    cross = ex.encode(source)
    _, cache = ex.run(source, decoder_ids, [36])
    _, new_kv = ex.step(decoder_ids[:, 36:36 + GAMMA + 1], cache, cross)
    accepted = 2
    cache = np.concatenate([cache, new_kv[:accepted + 1]])        # accepted guesses + the token before them
    rng = np.random.default_rng(1)
    other = rng.integers(3, ex.config.vocab_size, size=(1, GAMMA + 1)).astype(np.int64)
    logits, _ = ex.step(other, cache, cross)
    full = np.concatenate([decoder_ids[:, :36 + accepted + 1], other], axis=1)
    ref = reference_logits(ex.model, source, full)
    np.testing.assert_allclose(logits, ref[:, -(GAMMA + 1):], rtol=0, atol=FP32_TOL)


def test_batch_of_two_in_the_decoder_trunk(exported, tmp_path):
    """The traced decoder (before the head, which is batch 1) keeps a batch axis for later batched decoding."""
    import onnxruntime as ort

    from specdec.export.families.t5_decoder import trace_decoder

    ex = exported("v10-small-buckets")
    trace_decoder(ex.model, tmp_path / "trunk.onnx")
    trunk = ort.InferenceSession(str(tmp_path / "trunk.onnx"), providers=["CPUExecutionProvider"])
    source, decoder_ids = sequences(ex.config, 13, 40, batch=2, seed=4)
    ref = reference_logits(ex.model, source, decoder_ids)
    cross = ex.encode(source)
    cache, outputs, pos = ex.empty_cache(cross), [], 0
    for n in (34, 1, GAMMA + 1):
        logits, new_kv = trunk.run(None, {"input_ids": decoder_ids[:, pos:pos + n], "past_kv": cache,
                                          "cross_kv": cross})
        cache, pos = np.concatenate([cache, new_kv]), pos + n
        outputs.append(logits)
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), ref, rtol=0, atol=FP32_TOL)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_fused_head_reads_the_decoders_own_logits_and_guesses(exported, temperature):
    """One run of the fused graph over [current, x_1 .. x_G]: its probs rows are the standardized PyTorch logits of
    those positions and its verdict is the NumPy reference's on the PyTorch logits."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import numpy_sampler as ref_sampler

    ex = exported("v11-odd-heads")
    past, gamma = 20, GAMMA
    source, decoder_ids = sequences(ex.config, 9, past + gamma + 1, seed=6)
    ref = reference_logits(ex.model, source, decoder_ids)[0]
    cross = ex.encode(source)
    _, cache = ex.run(source, decoder_ids, [past])
    rng = np.random.default_rng(2)
    vocab = ex.config.vocab_size
    q = rng.dirichlet(np.ones(vocab), size=gamma).astype(np.float32)
    uniforms = rng.random(gamma + 1).astype(np.float32)
    uniforms[:2] = 0.0                                              # two kept guesses at least at T > 0
    feed = {"input_ids": decoder_ids[:, past:], "past_kv": cache, "cross_kv": cross, "draft_probs": q,
            "uniforms": uniforms, "temperature": np.array([temperature], np.float32),
            "top_k": np.zeros(1, np.int64), "top_p": np.ones(1, np.float32), "lenience": np.ones(1, np.float32),
            "logit_mask": np.zeros((0, vocab), np.float32)}
    if temperature == 0:    # guesses: the target's own argmax for the first two positions, then something else
        ids = decoder_ids.copy()
        for i in range(3):            # each guess changes the logits after it: set them one at a time
            best = int(reference_logits(ex.model, source, ids)[0, past + i].argmax())
            ids[0, past + 1 + i] = best if i < 2 else (best + 1) % vocab
        feed["input_ids"] = ids[:, past:]
        ref = reference_logits(ex.model, source, ids)[0]
    probs, accepted, next_token = ex.dec.run(["probs", "accepted", "next_token"], feed)
    guesses = feed["input_ids"][0, 1:]
    want_n, want_token, detail = ref_sampler.verify(ref[past:], q, guesses, uniforms, temperature)
    np.testing.assert_allclose(probs, detail["p"], rtol=0, atol=1e-5)
    assert (int(accepted[0]), int(next_token[0])) == (want_n, want_token)
    if temperature == 0:
        assert want_n == 2


@pytest.mark.parametrize("name", ["v10-small-buckets", "v11-odd-heads", "enc1-dec3", "enc3-dec1"])
def test_encoder_returns_cross_kv_of_every_decoder_layer(exported, name):
    import torch

    ex = exported(name)
    cfg = ex.config
    source, _ = sequences(cfg, 23, 2, batch=2, seed=2)
    cross = ex.encode(source)
    assert cross.shape == (cfg.num_decoder_layers, 2, 2, cfg.num_heads, 23, cfg.d_kv)
    with torch.no_grad():
        hidden = ex.model.encoder(input_ids=torch.from_numpy(source)).last_hidden_state
        for layer, block in enumerate(ex.model.decoder.block):
            ca = block.layer[1].EncDecAttention
            for j, proj in enumerate((ca.k, ca.v)):
                want = proj(hidden).reshape(2, 23, cfg.num_heads, cfg.d_kv).transpose(1, 2).numpy()
                np.testing.assert_allclose(cross[layer, j], want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["v10-small-buckets", "v11-odd-heads", "enc3-dec1"])
def test_padded_sources_in_one_run_give_each_source_alone(exported, name):
    """A batch's sources padded to the longest and encoded in one run with their source_lengths: each row's first
    source_lengths[b] K/V positions are Hugging Face's encoder on that source alone (unpadded), within 1e-5. Control:
    the same run without source_lengths (every key attended) moves the padded rows' K/V by far more."""
    import torch

    ex = exported(name)
    cfg = ex.config
    lengths = [23, 9, 1, 17]
    source = np.zeros((len(lengths), max(lengths)), np.int64)
    rows = [sequences(cfg, n, 2, seed=10 + n)[0][0] for n in lengths]
    for b, row in enumerate(rows):
        source[b, :len(row)] = row
    cross = ex.enc.run(None, {"input_ids": source, "source_lengths": np.array(lengths, np.int64)})[0]
    unmasked = ex.encode(source)
    for b, row in enumerate(rows):
        with torch.no_grad():
            hidden = ex.model.encoder(input_ids=torch.from_numpy(row[None])).last_hidden_state
        n = len(row)
        for layer, block in enumerate(ex.model.decoder.block):
            ca = block.layer[1].EncDecAttention
            for j, proj in enumerate((ca.k, ca.v)):
                want = proj(hidden).detach().reshape(n, cfg.num_heads, cfg.d_kv).transpose(0, 1).numpy()
                np.testing.assert_allclose(cross[layer, j, b, :, :n], want, rtol=0, atol=1e-5, err_msg=f"row {b}")
                if n < source.shape[1]:
                    assert np.abs(unmasked[layer, j, b, :, :n] - want).max() > 1e-3, "the control attends padding"


@pytest.mark.parametrize("name,past", [("v10-small-buckets", 40), ("enc1-dec3", 40), ("v10-default-buckets", 140)])
def test_positions_beyond_max_distance_are_exercised(exported, name, past):
    """Control: changing only the decoder's last relative-position bucket (distances >= max_distance) moves the
    reference logits at these past lengths far beyond the tolerance, so the parity tests above would see a
    bucket error there."""
    import torch

    ex = exported(name)
    cfg = ex.config
    source, decoder_ids = sequences(cfg, 9, past + GAMMA + 1, seed=1)
    ref = reference_logits(ex.model, source, decoder_ids)
    changed = copy.deepcopy(ex.model)
    with torch.no_grad():
        changed.decoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight[-1] += 1.0
    moved = reference_logits(changed, source, decoder_ids)
    exact = cfg.relative_attention_num_buckets // 2                     # distances below this have own buckets
    assert np.abs(moved[:, :exact] - ref[:, :exact]).max() < FP32_TOL
    assert np.abs(moved[:, past:] - ref[:, past:]).max() > 100 * FP32_TOL


def fp16_tolerance(reference):
    """fp16 keeps 11 significant bits (unit roundoff 2^-11 ~ 4.9e-4). The graph rounds weights, K/V caches and the
    inputs of most matrix products to fp16 (norms, softmax, residuals and FFN `wo` stay fp32), so each layer adds
    errors of a few roundoffs relative to the activations it touches; over ~2x(layers) such stages the logits are
    off by some 10^-3 of their scale. 1e-2 x max|logit| (what specdec-export's own check uses) leaves a margin of
    several times that, while still failing on any structural mistake (those move logits by O(max|logit|))."""
    return 1e-2 * max(1.0, float(np.abs(reference).max()))


@pytest.mark.parametrize("name", ["v11-odd-heads", "v10-small-buckets"])
def test_fp16_export_parity(exported, name):
    ex16 = exported(name, "fp16")
    assert {i.name: i.type for i in ex16.dec.get_inputs()} == {
        "input_ids": "tensor(int64)", "past_kv": "tensor(float16)", "cross_kv": "tensor(float16)",
        "draft_probs": "tensor(float)", "uniforms": "tensor(float)", "temperature": "tensor(float)",
        "top_k": "tensor(int64)", "top_p": "tensor(float)", "lenience": "tensor(float)",
        "logit_mask": "tensor(float)"}
    # the head works on the fp32 logits: only the cache is fp16
    assert [o.type for o in ex16.dec.get_outputs()] == ["tensor(float)", "tensor(float16)", "tensor(float)",
                                                         "tensor(int64)", "tensor(int64)"]
    assert ex16.enc.get_outputs()[0].type == "tensor(float16)"
    past = 40
    source, decoder_ids = sequences(ex16.config, src_len_for(ex16.config), past + 1 + GAMMA + 1, seed=6)
    ref = reference_logits(ex16.model, source, decoder_ids)
    outputs, _ = ex16.run(source, decoder_ids, [past, 1, GAMMA + 1])
    got = np.concatenate(outputs, axis=1)
    diff = float(np.abs(got - ref).max())
    tol = fp16_tolerance(ref)
    print(f"fp16 {name}: max|dlogit| {diff:.2e}, tolerance {tol:.2e}, max|logit| {np.abs(ref).max():.2f}")
    assert diff <= tol, (diff, tol)
    assert diff > 1e-6, "the fp16 graph gives fp32-exact logits: it is not running in fp16"


def test_mt5_checkpoint_matches_its_own_model_class(tmp_path):
    """An mT5 checkpoint (as transformers >= 5 saves it: tie_word_embeddings true, no scale_decoder_outputs)
    exports to graphs that match MT5ForConditionalGeneration, which never scales the decoder output."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, MT5Config, MT5ForConditionalGeneration

    from tinymodels import write_tiny_tokenizer
    from specdec.export.families import load_source

    torch.manual_seed(0)
    cfg = MT5Config(vocab_size=48, d_model=16, d_kv=8, num_heads=2, num_layers=1, d_ff=32, dropout_rate=0.0,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    MT5ForConditionalGeneration(cfg).save_pretrained(str(tmp_path / "mt5"))
    write_tiny_tokenizer(tmp_path / "mt5", 48)
    source_model = load_source(str(tmp_path / "mt5")).model
    ex = Exported("mt5", source_model, tmp_path / "graphs")
    reference = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "mt5")).eval()
    assert type(reference).__name__ == "MT5ForConditionalGeneration"
    source, decoder_ids = sequences(reference.config, 8, 9, seed=3)
    ref = reference_logits(reference, source, decoder_ids)
    outputs, _ = ex.run(source, decoder_ids, [4, GAMMA + 1])
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), ref, rtol=0, atol=FP32_TOL)

"""Whisper's graphs against their references, on tiny random Whisper models built here (no checkpoint is fetched):
the in-graph log-mel features against transformers' WhisperFeatureExtractor on synthetic audio, the encoder's
cross-attention K/V and the decoder's logits against Hugging Face's PyTorch forward, a token tree against plain
runs over each node's path, and rows of different lengths in one run. Deliberately broken front ends (a symmetric
window, no reflect padding) are shown to fail the feature tolerance."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from transformers import WhisperFeatureExtractor  # noqa: E402

from tinymodels import tiny_whisper_model as tiny_whisper, whisper_audio as audio  # noqa: E402

from specdec.export.check import cross_feed  # noqa: E402
from specdec.export.head import plain_step_feed  # noqa: E402
from specdec.export.families.whisper_decoder import export_whisper_decoder  # noqa: E402
from specdec.export.families.whisper_encoder import LogMel, export_whisper_encoder  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

RATE = 16_000
# the extractor's features lie in about [-1.5, 1.5]; float32 framing and DFT in the graph vs float64 numpy
FEATURE_TOL = 1e-4
FP32_TOL = 1e-4


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def log_mel_graph(front: torch.nn.Module, path) -> ort.InferenceSession:
    with torch.no_grad():
        torch.onnx.export(front.eval(), (torch.zeros(1, RATE),), str(path), input_names=["audio"],
                          output_names=["features"], dynamic_axes={"audio": {0: "batch", 1: "samples"}},
                          opset_version=17, dynamo=False)
    return session(path)


@pytest.fixture(scope="module")
def extractor():
    return WhisperFeatureExtractor(feature_size=80)


@pytest.fixture(scope="module")
def features_graph(extractor, tmp_path_factory):
    return log_mel_graph(LogMel(extractor), tmp_path_factory.mktemp("logmel") / "logmel.onnx")


@pytest.mark.parametrize("seconds", [0.3, 3.7, 30.0])
def test_log_mel_graph_matches_the_feature_extractor(features_graph, extractor, seconds):
    wave = audio(seconds, seed=int(seconds * 10))
    expected = extractor(wave, sampling_rate=RATE, return_tensors="np").input_features
    got = features_graph.run(None, {"audio": wave[None]})[0]
    assert got.shape == expected.shape == (1, 80, 3000)
    assert np.abs(got - expected).max() <= FEATURE_TOL


def test_log_mel_graph_rows_of_a_batch_are_their_own(features_graph, extractor):
    """Two clips of one length in one run: each row's floor (max - 8) is its own."""
    loud, quiet = audio(2.0, seed=1), 0.01 * audio(2.0, seed=2)
    expected = extractor([loud, quiet], sampling_rate=RATE, return_tensors="np").input_features
    got = features_graph.run(None, {"audio": np.stack([loud, quiet])})[0]
    assert np.abs(got - expected).max() <= FEATURE_TOL


class SymmetricWindow(LogMel):
    def __init__(self, extractor):
        super().__init__(extractor)
        n = np.arange(self.n_fft)
        wrong = 0.5 - 0.5 * np.cos(2 * np.pi * n / (self.n_fft - 1))      # the symmetric Hann window
        right = 0.5 - 0.5 * np.cos(2 * np.pi * n / self.n_fft)
        with torch.no_grad():
            self.dft.mul_(torch.tensor(np.divide(wrong, right, out=np.zeros_like(wrong), where=right > 0),
                                       dtype=torch.float32))


class NoReflectPadding(LogMel):
    pad_mode = "constant"


@pytest.mark.parametrize("broken", [SymmetricWindow, NoReflectPadding])
def test_the_feature_tolerance_catches_a_broken_front_end(broken, extractor, tmp_path):
    wave = audio(3.7, seed=37)
    expected = extractor(wave, sampling_rate=RATE, return_tensors="np").input_features
    got = log_mel_graph(broken(extractor), tmp_path / "broken.onnx").run(None, {"audio": wave[None]})[0]
    assert np.abs(got - expected).max() > 10 * FEATURE_TOL


# -- encoder and decoder ----------------------------------------------------------------------------------------------
class Exported:
    def __init__(self, model, extractor, directory, tree=False):
        self.model, self.config, self.extractor = model, model.config, extractor
        export_whisper_encoder(model, extractor, directory / "encoder.onnx")
        export_whisper_decoder(model, directory / "decoder.onnx", tree=tree)
        self.enc, self.dec = session(directory / "encoder.onnx"), session(directory / "decoder.onnx")

    def encode(self, wave):
        return self.enc.run(None, {"audio": wave[None]})[0]

    def step(self, ids, cache, cross, **rows):
        feed = {"input_ids": ids, "past_kv": cache, **cross_feed(self.dec, cross), **rows,
                **plain_step_feed(self.config.vocab_size, session=self.dec, new=ids.shape[1])}
        return self.dec.run(["logits", "new_kv", "next_token"], feed)

    def reference(self, wave, ids):
        """Hugging Face's logits for decoder ids [B, T] on the extractor's features of `wave`."""
        feats = self.extractor(wave, sampling_rate=RATE, return_tensors="pt").input_features
        with torch.no_grad():
            return self.model(input_features=feats.expand(ids.shape[0], -1, -1),
                              decoder_input_ids=torch.from_numpy(ids)).logits.numpy()


@pytest.fixture(scope="module")
def whisper(extractor, tmp_path_factory):
    return Exported(tiny_whisper(seed=5), extractor, tmp_path_factory.mktemp("whisper"))


def decoder_ids(config, length, seed, batch=1):
    rng = np.random.default_rng(seed)
    body = rng.integers(4, config.vocab_size, size=(batch, length - 1))
    return np.concatenate([np.full((batch, 1), config.decoder_start_token_id), body], 1).astype(np.int64)


def test_encoder_cross_kv_matches_pytorch(whisper):
    wave = audio(5.0, seed=3)
    feats = whisper.extractor(wave, sampling_rate=RATE, return_tensors="pt").input_features
    model, cfg = whisper.model, whisper.config
    heads = cfg.decoder_attention_heads

    def split(x):
        return x.reshape(1, -1, heads, cfg.d_model // heads).transpose(1, 2)

    with torch.no_grad():
        h = model.model.encoder(feats).last_hidden_state
        expected = torch.stack([torch.stack([split(layer.encoder_attn.k_proj(h)), split(layer.encoder_attn.v_proj(h))])
                                for layer in model.model.decoder.layers]).numpy()
    got = whisper.encode(wave)
    assert got.shape == expected.shape == (cfg.decoder_layers, 2, 1, heads, 1500, cfg.d_model // heads)
    assert np.abs(got - expected).max() <= FP32_TOL


@pytest.mark.parametrize("past,new", [(0, 1), (0, 5), (1, 1), (1, 5), (40, 1), (40, 5)])
def test_decoder_logits_and_greedy_token_match_pytorch(whisper, past, new):
    wave = audio(2.5, seed=past + new)
    ids = decoder_ids(whisper.config, past + new, seed=past * 7 + new)
    expected = whisper.reference(wave, ids)
    assert np.abs(expected).max() > 0.05, "degenerate logits make the tolerance meaningless"
    cross = whisper.encode(wave)
    layers, _, _, heads, _, d_kv = cross.shape
    cache = np.zeros((0, layers, 2, 1, heads, d_kv), np.float32)
    if past:
        logits, new_kv, _ = whisper.step(ids[:, :past], cache, cross)
        np.testing.assert_allclose(logits, expected[:, :past], rtol=0, atol=FP32_TOL, err_msg="prefill")
        cache = new_kv
    logits, new_kv, next_token = whisper.step(ids[:, past:], cache, cross)
    np.testing.assert_allclose(logits, expected[:, past:], rtol=0, atol=FP32_TOL)
    assert new_kv.shape[0] == new
    assert int(next_token[0]) == int(expected[0, -1].argmax())


def test_rows_of_different_lengths_in_one_run(whisper):
    """Row 0 holds 7 tokens, row 1 the first 4 of its own: one run appends one token to each, at its own position,
    each row attending to its own slots (row_lengths) and its own encoder output."""
    waves = [audio(1.5, seed=11), audio(4.0, seed=12)]
    ids = decoder_ids(whisper.config, 8, seed=13, batch=2)
    lengths = [7, 4]
    cross = np.concatenate([whisper.encode(w) for w in waves], axis=2)
    layers, _, _, heads, _, d_kv = cross.shape
    cache = np.zeros((7, layers, 2, 2, heads, d_kv), np.float32)
    for b, n in enumerate(lengths):         # each row's cache from a run of its own
        _, kv, _ = whisper.step(ids[b:b + 1, :n], cache[:0, :, :, :1], cross[:, :, b:b + 1])
        cache[:n, :, :, b] = kv[:, :, :, 0]
    new = np.array([[ids[0, 7]], [ids[1, 4]]])
    logits, _, _ = whisper.step(new, cache, cross, row_lengths=np.array(lengths, np.int64))
    for b, n in enumerate(lengths):
        expected = whisper.reference(waves[b], ids[b:b + 1, :n + 1])[0, -1]
        np.testing.assert_allclose(logits[b, 0], expected, rtol=0, atol=FP32_TOL)


def test_a_token_tree_equals_plain_runs_over_each_path(extractor, tmp_path):
    """Target graph (tree inputs): nodes in shuffled slots, each at past + its depth, seeing its ancestors only;
    every node's logits equal a plain run over its path."""
    ex = Exported(tiny_whisper(seed=9), extractor, tmp_path, tree=True)
    wave = audio(2.0, seed=21)
    cross = ex.encode(wave)
    layers, _, _, heads, _, d_kv = cross.shape
    prefix = decoder_ids(ex.config, 6, seed=22)
    _, cache, _ = ex.step(prefix, np.zeros((0, layers, 2, 1, heads, d_kv), np.float32), cross)
    # the tree: slot -> (token, parent slot); depths 0, 1, 1, 2, 2 in slots 0, 3, 1, 4, 2
    nodes = {0: (10, None), 3: (11, 0), 1: (12, 0), 4: (13, 3), 2: (14, 1)}
    depth = np.zeros(5, np.int64)
    mask = np.zeros((5, 5), np.bool_)
    for slot in nodes:
        walk = slot
        while walk is not None:
            mask[slot, walk] = True
            depth[slot] += walk != slot
            walk = nodes[walk][1]
    tokens = np.array([[nodes[s][0] for s in range(5)]], np.int64)
    feed = {"tree_depth": depth, "tree_mask": mask}
    logits, _, _ = ex.dec.run(["logits", "new_kv", "next_token"],
                              {"input_ids": tokens, "past_kv": cache, **cross_feed(ex.dec, cross),
                               **plain_step_feed(ex.config.vocab_size, session=ex.dec, new=5), **feed})
    for slot in nodes:
        path = [s for s in range(5) if mask[slot, s]]
        path.sort(key=lambda s: depth[s])
        ids = np.concatenate([prefix, [[nodes[s][0] for s in path]]], axis=1)
        expected = ex.reference(wave, ids)[0, -1]
        np.testing.assert_allclose(logits[0, slot], expected, rtol=0, atol=FP32_TOL, err_msg=f"node {slot}")


@pytest.mark.parametrize("setting", [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.8, 5, 1.0)], ids=["greedy", "T=1", "top-k"])
def test_a_whisper_drafts_proposal_loop_matches_pytorch_and_the_numpy_sampler(extractor, tmp_path, setting):
    """The draft's k steps in one run (export/loop.py wraps the Whisper decoder + head as it wraps T5's): tokens
    and q rows of k = 4 autoregressive steps equal PyTorch's logits standardized and drawn by the NumPy sampler
    with the same uniforms."""
    import numpy_sampler as ref

    from specdec.export import loop

    temperature, top_k, top_p = setting
    ex = Exported(tiny_whisper(seed=13), extractor, tmp_path)
    loop.add_proposal_loop_file(tmp_path / "decoder.onnx")
    dec = session(tmp_path / "decoder.onnx")
    wave, prefix, k = audio(1.8, seed=31), [2, 17, 42], 4
    cross = ex.encode(wave)
    layers, _, _, heads, _, d_kv = cross.shape
    agree = 0
    for seed in range(4):
        uniforms = np.random.default_rng(seed).random(k, dtype=np.float32)
        seq, want_tokens, want_rows = list(prefix), [], []
        for u in uniforms:
            q = ref.standardize_row(ex.reference(wave, np.array([seq]))[0, -1].astype(np.float64), temperature,
                                    top_k, top_p)
            want_rows.append(q)
            want_tokens.append(ref.draw(q, u))
            seq.append(want_tokens[-1])
        feed = {**plain_step_feed(ex.config.vocab_size, temperature, session=dec), "input_ids": np.array([prefix]),
                "past_kv": np.zeros((0, layers, 2, 1, heads, d_kv), np.float32), **cross_feed(dec, cross),
                "uniforms": uniforms, "top_k": np.array([top_k], np.int64), "top_p": np.array([top_p], np.float32),
                "steps": np.array([k], np.int64)}
        tokens, probs = dec.run(["next_token", "probs"], feed)
        differs = tokens != np.array(want_tokens)
        same = int(np.argmax(differs)) if differs.any() else k       # a draw may flip within float32 rounding
        agree += same == k
        np.testing.assert_allclose(probs[:same + 1], np.array(want_rows)[:same + 1], atol=2e-5)
    assert agree >= 3, f"the loop's draws differ from the reference's on {4 - agree} of 4 seeds"


def test_a_draft_that_keeps_the_targets_encoder_is_recognised_by_its_digest():
    """distil-whisper's layout: the teacher's encoder, a 1-layer decoder. Equal encoders give equal digests; a
    random encoder, and one weight moved by one float32 step, do not."""
    from specdec.export.families.whisper_encoder import encoder_sha256

    target = tiny_whisper(seed=1)
    draft = tiny_whisper(seed=2, decoder_layers=1)
    assert encoder_sha256(draft) != encoder_sha256(target)
    draft.model.encoder.load_state_dict(target.model.encoder.state_dict())
    assert encoder_sha256(draft) == encoder_sha256(target)
    with torch.no_grad():
        w = draft.model.encoder.layers[0].fc1.weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(float("inf")))
    assert encoder_sha256(draft) != encoder_sha256(target)

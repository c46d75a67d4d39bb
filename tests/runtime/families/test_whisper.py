"""Whisper exports decoded by the runtime, on tiny random Whisper pairs built here (a 1-second window, so a request's
encoder run is cheap): greedy output equals a PyTorch greedy loop with Whisper's prompt and suppressed tokens, and
transformers' generate(), for target-only decoding, the draft model, the lookup, a chain and auto; the language is
detected as transformers detects it; sampled output follows the target's distribution, fp32 and int8 (chi-square
against exact enumeration, with a broken residual that the test catches); bad audio and bad requests are one-line
errors that leave the decoder usable."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from test_distribution import caught, chi_square_p
from tinymodels import (WHISPER_BEGIN_SUPPRESS, WHISPER_SUPPRESS, WHISPER_WINDOW, export_pair,
                        exported_whisper_pair, save_tiny_whisper, tiny_whisper_model, whisper_audio)

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.core.errors import SpecdecError

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

SOT, EOT, EN, DE, TRANSCRIBE, TRANSLATE, NO_TIMESTAMPS = 2, 1, 3, 4, 5, 6, 7


@pytest.fixture(scope="module")
def pair(whisper_pair):
    """(target model, root): exported_whisper_pair's defaults, built once per run (tests/conftest.py)."""
    return whisper_pair


@pytest.fixture(scope="module")
def decoder(pair):
    return SpeculativeDecoder.load(pair[1] / "export", provider="cpu")


def features(wave):
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=80, chunk_length=1)(wave, sampling_rate=16_000,
                                                                    return_tensors="pt").input_features


def banned(generated: int) -> list:
    return WHISPER_SUPPRESS + (WHISPER_BEGIN_SUPPRESS if generated == 0 else [])


def torch_greedy(model, wave, prompt, n: int) -> list:
    """Greedy decoding with PyTorch's forward over the whole sequence, Whisper's suppressed tokens masked."""
    seq, feats = list(prompt), features(wave)
    for i in range(n):
        with torch.no_grad():
            logits = model(input_features=feats, decoder_input_ids=torch.tensor([seq])).logits[0, -1]
        logits[banned(i)] = -float("inf")
        seq.append(int(logits.argmax()))
        if seq[-1] == EOT:
            break
    return seq[len(prompt):]


WAVES = [whisper_audio(0.8, seed=1), whisper_audio(1.0, seed=2), whisper_audio(0.35, seed=3)]
DRAFTS = [("none", 0), ("draft", 3), ("draft", "auto"), ("lookup", 3), ("lookup,draft", 2), ("auto", "auto")]


@pytest.mark.parametrize("draft,gamma", DRAFTS, ids=[f"{d}-{g}" for d, g in DRAFTS])
def test_greedy_equals_pytorch(pair, decoder, draft, gamma):
    target, _ = pair
    for i, wave in enumerate(WAVES):
        language = (EN, DE)[i % 2]
        want = torch_greedy(target, wave, [SOT, language, TRANSCRIBE, NO_TIMESTAMPS], 24)
        got = decoder.generate(audio=wave, language=("en", "de")[i % 2], max_new_tokens=24, temperature=0,
                               draft=draft, gamma=gamma)
        assert got.token_ids == want, f"audio {i}"
    assert len(set(map(tuple, (torch_greedy(target, w, [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS], 24)
                                 for w in WAVES)))) > 1, "the audio must matter to the outputs"


def test_the_draft_proposes_and_is_partly_kept(decoder):
    stats = decoder.generate(audio=WAVES[0], language="en", max_new_tokens=24, temperature=0, draft="draft",
                             gamma=3).stats
    assert 0 < stats.accepted < stats.proposed


@pytest.mark.parametrize("draft,gamma", [("none", 0), ("draft", 3), ("lookup", 3), ("auto", "auto")])
def test_greedy_equals_transformers_generate(pair, decoder, draft, gamma):
    target, _ = pair
    for i, wave in enumerate(WAVES):
        with torch.no_grad():
            want = target.generate(features(wave), language="en", task="translate", do_sample=False,
                                   max_new_tokens=12)[0].tolist()
        got = decoder.generate(audio=wave, language="<|en|>", task="translate", max_new_tokens=12, temperature=0,
                               draft=draft, gamma=gamma)
        assert got.token_ids == want[:12]


def test_the_language_is_detected_as_transformers_detects_it(pair, decoder):
    target, _ = pair
    found = set()
    for wave in WAVES:
        with torch.no_grad():
            language = int(target.detect_language(features(wave))[0])
        found.add(language)
        want = torch_greedy(target, wave, [SOT, language, TRANSCRIBE, NO_TIMESTAMPS], 16)
        for draft in ("none", "draft"):
            got = decoder.generate(audio=wave, max_new_tokens=16, temperature=0, draft=draft)
            assert got.token_ids == want


def test_a_draft_that_keeps_the_targets_encoder_runs_none(decoder):
    """One encoder run per request: the target's, which also writes the draft's cross K/V. And a draft round is one
    draft run, the suppressed tokens being one mask row of its proposal loop."""
    stats = decoder.generate(audio=WAVES[0], language="en", max_new_tokens=24, temperature=0, draft="draft",
                             gamma=3).stats
    assert stats.draft_calls > 0
    assert stats.ort_runs == stats.target_calls + stats.draft_calls + 1
    assert stats.draft_calls == stats.sources["draft"].rounds < stats.proposed


@pytest.fixture(scope="module")
def own_encoder(pair, tmp_path_factory):
    """The target of `pair` with a random draft of its own encoder (whisper-tiny under a larger Whisper)."""
    root = tmp_path_factory.mktemp("whisper-own")
    save_tiny_whisper(tiny_whisper_model(seed=21, vocab=40, position_scale=1.0, init_std=0.2, decoder_layers=1,
                                         **WHISPER_WINDOW), root / "draft", tokens=36)     # pair's tokenizer
    export_pair(str(pair[1] / "target"), str(root / "draft"), str(root / "export"), "--gamma-max", "4",
                "--max-length", "64")
    return SpeculativeDecoder.load(root / "export", provider="cpu")


@pytest.mark.parametrize("draft", ["draft", "auto"])
def test_a_draft_with_its_own_encoder(pair, own_encoder, draft):
    target, root = pair
    assert own_encoder.manifest.speech["shares_target_encoder"] == []
    for wave in WAVES:
        want = torch_greedy(target, wave, [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS], 24)
        got = own_encoder.generate(audio=wave, language="en", max_new_tokens=24, temperature=0, draft=draft,
                                   gamma=3 if draft == "draft" else "auto")
        assert got.token_ids == want
    stats = own_encoder.generate(audio=WAVES[0], language="en", max_new_tokens=24, temperature=0, draft="draft",
                                 gamma=3).stats
    assert stats.ort_runs == stats.target_calls + stats.draft_calls + 2      # two encoders


def test_the_manifest_records_the_shared_encoder(pair):
    manifest = json.loads((pair[1] / "export" / "manifest.json").read_text())
    speech = manifest["speech"]
    assert speech["shares_target_encoder"] == ["draft"]
    assert speech["languages"] == {"<|en|>": EN, "<|de|>": DE}
    assert speech["suppress_tokens"] == WHISPER_SUPPRESS and speech["begin_suppress_tokens"] == WHISPER_BEGIN_SUPPRESS
    assert manifest["models"]["target"]["graphs"]["encoder"]["inputs"][0]["name"] == "audio"
    assert "encoder" not in manifest["models"]["draft"]["graphs"]
    assert [o["name"] for o in manifest["models"]["target"]["graphs"]["encoder"]["outputs"]] == ["cross_kv",
                                                                                                 "cross_kv_draft"]


def write_wav(path, samples):
    """16-bit mono 16 kHz PCM of float samples; returns the int16 samples written."""
    import wave as wavefile

    pcm = np.round(samples * 32767).astype(np.int16)
    with wavefile.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(pcm.tobytes())
    return pcm


def test_a_wav_file_reads_as_its_samples(decoder, tmp_path):
    path = tmp_path / "clip.wav"
    pcm = write_wav(path, WAVES[1])
    got = decoder.generate(audio=str(path), language="en", max_new_tokens=12, temperature=0)
    want = decoder.generate(audio=pcm.astype(np.float32) / 32768, language="en", max_new_tokens=12, temperature=0)
    assert got.token_ids == want.token_ids


BAD = [(dict(audio=WAVES[0].astype(np.float64)), "float64"),
       (dict(audio=WAVES[0][None, None]), "shape"),
       (dict(audio=np.zeros(0, np.float32)), "no samples"),
       (dict(audio=np.full(100, np.nan, np.float32)), "NaN"),
       (dict(audio=whisper_audio(1.5), timestamps=True), "no timestamp tokens"),   # long audio itself is taken
       (dict(audio=[0.0, 0.1]), "array"),
       (dict(audio=WAVES[0], language="xx"), "language"),
       (dict(audio=WAVES[0], task="summarize"), "task"),
       (dict(prompt="w10 w11"), "audio"),
       (dict(input_ids=[10, 11]), "audio"),
       (dict(audio=WAVES[0], prompt="w10"), "not a prompt"),
       (dict(audio=WAVES[0], num_beams=2, draft="lookup"), "beam"),
       (dict(audio="/no/such/file.wav"), "file.wav")]


@pytest.mark.parametrize("kwargs,word", BAD, ids=[w for _, w in BAD])
def test_bad_requests_are_one_line_errors_and_the_decoder_goes_on(decoder, kwargs, word):
    with pytest.raises(SpecdecError) as err:
        decoder.generate(max_new_tokens=4, **kwargs)
    assert "\n" not in str(err.value) and word.lower() in str(err.value).lower(), str(err.value)
    assert decoder.generate(audio=WAVES[0], language="en", max_new_tokens=4).token_ids


def test_batches_and_text_exports_refuse_what_they_do_not_run(decoder, tiny_export):
    (result,) = decoder.generate_batch(input_ids=[[10, 11]])
    assert "Whisper" in result.error and not result.token_ids
    text = SpeculativeDecoder.load(tiny_export, provider="cpu")
    with pytest.raises(SpecdecError, match="Whisper exports"):
        text.generate(audio=WAVES[0])


def test_a_whisper_draft_with_a_t5_target_is_a_one_line_error(pair, tiny_t5_factory, tmp_path):
    from tinymodels import run_export_cli

    t5 = tiny_t5_factory(tmp_path / "t5")
    code, _, stderr = run_export_cli(["--target", str(t5), "--draft", str(pair[1] / "draft"), "--export",
                                      str(tmp_path / "out")])
    assert code == 2 and "whisper" in stderr and len(stderr.strip().splitlines()) == 1, stderr


# -- distribution --------------------------------------------------------------------------------------------------
# A 16-token pair; outcomes are the first TOKENS generated tokens (EOT-terminated). N = 5,000 requests per test,
# p >= P_PASS for the real sampler; the broken control (the target draws from p instead of norm(max(0, p - q))
# after a rejection) must give p < P_TEETH (measured 1.8e-20 on its first 1,250 samples).
TOKENS, N, P_PASS, P_TEETH = 2, 5_000, 1e-3, 1e-6


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-small")
    target, _ = exported_whisper_pair(root, vocab=16, seed=11, gamma_max=3, max_length=32, noise=1.0, tokens=14)
    return target, root


def exact_distribution(model, wave, prompt) -> dict:
    """P(first TOKENS generated tokens = outcome) at T = 1 with the suppressed tokens masked, by enumeration."""
    feats = features(wave)
    dist, frontier = {}, [((), 1.0)]
    for step in range(TOKENS):
        nxt = []
        for outcome, prob in frontier:
            with torch.no_grad():
                logits = model(input_features=feats,
                               decoder_input_ids=torch.tensor([list(prompt) + list(outcome)])).logits[0, -1].double()
            logits[banned(step)] = -float("inf")
            p = torch.softmax(logits, -1).numpy()
            for tok in np.nonzero(p)[0]:
                item = (outcome + (int(tok),), prob * float(p[tok]))
                (dist.__setitem__(*item) if tok == EOT or step == TOKENS - 1 else nxt.append(item))
        frontier = nxt
    return dist


def sampled(decoder, wave, start=0, stop=N) -> tuple[dict, int, int]:
    counts, proposed, accepted = {}, 0, 0
    for seed in range(start, stop):
        r = decoder.generate(audio=wave, language="en", max_new_tokens=TOKENS, temperature=1.0, draft="draft",
                             gamma=2, seed=seed)
        counts[tuple(r.token_ids)] = counts.get(tuple(r.token_ids), 0) + 1
        proposed, accepted = proposed + r.stats.proposed, accepted + r.stats.accepted
    return counts, proposed, accepted


def test_sampling_follows_the_target_distribution(small):
    target, root = small
    wave = WAVES[0]
    dist = exact_distribution(target, wave, [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS])
    counts, proposed, accepted = sampled(SpeculativeDecoder.load(root / "export", provider="cpu"), wave)
    assert 0 < accepted < proposed, "the draft's guesses must be both kept and rejected"
    p_value = chi_square_p(counts, dist)
    print(f"Whisper sampling: N = {N}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"chi-square p = {p_value:.3g}"


def test_the_distribution_test_catches_a_broken_residual(small, tmp_path):
    from specdec.export.families.whisper_decoder import export_whisper_decoder
    from specdec.runtime.loading.manifest import sha256_file

    target, root = small
    broken = tmp_path / "broken"
    shutil.copytree(root / "export", broken)
    export_whisper_decoder(target, broken / "target" / "decoder.onnx", residual=False, tree=True)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(broken / rel) for rel in manifest["files"]}
    (broken / "manifest.json").write_text(json.dumps(manifest))
    dist = exact_distribution(target, WAVES[0], [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS])
    wrong = SpeculativeDecoder.load(broken, provider="cpu")
    _, p_value = caught(lambda a, b: sampled(wrong, WAVES[0], a, b)[0], dist, N, P_TEETH, "broken Whisper residual")
    assert p_value < P_TEETH, f"the broken residual passed the chi-square test (p = {p_value:.3g})"


# -- int8: the encoders in int8, the decoders fp32 (WhisperFamily.int8_stages); the reference is the int8 export's
# own distribution, enumerated from its graphs with plain onnxruntime sessions. Same N and thresholds as above.

@pytest.fixture(scope="module")
def small_int8(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-small-int8")
    exported_whisper_pair(root, vocab=16, seed=11, gamma_max=3, max_length=32, noise=1.0, tokens=14,
                          extra=("--dtype", "int8", "--accept-int8-drift"))
    return root / "export"


def int8_distribution(export_dir, wave, prompt) -> dict:
    """P(first TOKENS generated tokens = outcome) at T = 1 with the suppressed tokens masked, enumerated from the
    export's int8 encoder and its decoder graph (onnxruntime alone, no specdec runtime)."""
    import onnxruntime as ort

    from specdec.export.check import cross_feed
    from specdec.export.head import plain_step_feed

    enc = ort.InferenceSession(str(export_dir / "target" / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(export_dir / "target" / "decoder.onnx"), providers=["CPUExecutionProvider"])
    cross = enc.run(None, {"audio": wave[None]})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    vocab = dec.get_outputs()[0].shape[-1]
    dist, frontier = {}, [((), 1.0)]
    for step in range(TOKENS):
        nxt = []
        for outcome, prob in frontier:
            ids = np.array([list(prompt) + list(outcome)], np.int64)
            logits = dec.run(["logits"], {"input_ids": ids, "past_kv": np.zeros((0, layers, 2, 1, heads, d_kv),
                                                                                np.float32),
                                          **cross_feed(dec, cross),
                                          **plain_step_feed(vocab, session=dec, new=ids.shape[1])})[0][0, -1]
            logits = logits.astype(np.float64)
            logits[banned(step)] = -np.inf
            p = np.exp(logits - logits.max())
            p /= p.sum()
            for tok in np.nonzero(p)[0]:
                item = (outcome + (int(tok),), prob * float(p[tok]))
                (dist.__setitem__(*item) if tok == EOT or step == TOKENS - 1 else nxt.append(item))
        frontier = nxt
    return dist


def test_int8_sampling_follows_the_int8_target_and_a_broken_residual_is_caught(small, small_int8, tmp_path):
    from specdec.export.families.whisper_decoder import export_whisper_decoder
    from specdec.runtime.loading.manifest import sha256_file

    target, _ = small
    wave = WAVES[0]
    dist = int8_distribution(small_int8, wave, [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS])
    counts, proposed, accepted = sampled(SpeculativeDecoder.load(small_int8, provider="cpu"), wave)
    assert 0 < accepted < proposed, "the draft's guesses must be both kept and rejected"
    p_value = chi_square_p(counts, dist)
    print(f"Whisper int8 sampling: N = {N}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"chi-square p = {p_value:.3g}"

    broken = tmp_path / "broken"                # the fp32 decoder, its residual draw replaced by a draw from p
    shutil.copytree(small_int8, broken)
    export_whisper_decoder(target, broken / "target" / "decoder.onnx", residual=False, tree=True)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(broken / rel) for rel in manifest["files"]}
    (broken / "manifest.json").write_text(json.dumps(manifest))
    wrong = SpeculativeDecoder.load(broken, provider="cpu")
    _, p_value = caught(lambda a, b: sampled(wrong, wave, a, b)[0], dist, N, P_TEETH, "broken int8 Whisper residual")
    assert p_value < P_TEETH, f"the broken residual passed the chi-square test (p = {p_value:.3g})"


def test_specdec_generate_transcribes_a_wav_file(pair, decoder, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "clip.wav"
    write_wav(path, WAVES[0])
    want = decoder.generate(audio=str(path), language="de", max_new_tokens=8, temperature=0)
    cli = [sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(pair[1] / "export")]
    out = subprocess.run(cli + ["--audio", str(path), "--language", "de", "--max-new-tokens", "8", "--temperature",
                                "0", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["token_ids"] == want.token_ids
    bad = subprocess.run(cli + ["--audio", str(tmp_path / "missing.wav")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    both = subprocess.run(cli + ["hello", "--audio", str(path)], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "either" in both.stderr, both.stderr


def test_a_padded_whisper_export_with_a_datastore_loads_and_decodes_exactly(pair, decoder, tmp_path):
    """The real layout (the shared pair: 40 rows, a tokenizer of 36 ids) exported with a datastore: the export
    loads, in Python and through specdec-generate, and greedy output with the datastore's lookup equals target-only
    decoding. The datastore holds the target's own outputs as text, so the lookup copies from it."""
    import subprocess
    import sys

    from tinymodels import export_pair

    assert (decoder.vocab_size, decoder.vocabulary.tokenizer_size) == (40, 36)
    wants = {i: decoder.generate(audio=wave, language="en", max_new_tokens=16, temperature=0, draft="none")
             for i, wave in enumerate(WAVES)}
    text = tmp_path / "text.txt"
    text.write_text("".join(decoder.tokenizer.decode([t for t in want.token_ids if t < 36]) + "\nw9 w10 w11\n"
                            for want in wants.values()))
    out = export_pair(str(pair[1] / "target"), str(pair[1] / "draft"), str(tmp_path / "export"), "--gamma-max", "4",
                      "--max-length", "64", "--datastore-text", str(text))
    dec = SpeculativeDecoder.load(out, provider="cpu")
    assert dec.datastore is not None and dec.datastore.tokenizer_size == 36
    copied = 0
    for i, wave in enumerate(WAVES):
        for draft, gamma in (("lookup", 4), ("lookup,draft", 3), ("auto", "auto")):
            got = dec.generate(audio=wave, language="en", max_new_tokens=16, temperature=0, draft=draft, gamma=gamma)
            assert got.token_ids == wants[i].token_ids, (i, draft, gamma)
            copied += got.stats.accepted if draft == "lookup" else 0
    assert copied > 0, "the datastore holds these outputs: the lookup must copy some"
    path = tmp_path / "clip.wav"
    write_wav(path, WAVES[0])
    cli = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(out), "--audio",
                          str(path), "--language", "en", "--max-new-tokens", "16", "--temperature", "0", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["token_ids"] == wants[0].token_ids

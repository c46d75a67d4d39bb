"""export/families/ctranslate2_whisper.py against an independent reference, CTranslate2 itself: tiny random transformers
Whispers are converted to CTranslate2 folders by ctranslate2's own converter (faster-whisper's layout: tokenizer.json
and preprocessor_config.json copied beside model.bin), read back, and compared with the originals: every parameter
(exactly for float32; the rounded original for float16 and bfloat16), the logits, the generation config, the
tokenizer, and CTranslate2's own greedy decoding against transformers' generate of the converted model. Quantized,
non-Whisper, truncated and corrupt folders fail with one line; the cache reuses only complete conversions."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2", reason="the CTranslate2 reference needs the ctranslate2 package "
                                  "(pip install 'specdec[bench]')")
torch = pytest.importorskip("torch")

from transformers import (AutoTokenizer, WhisperFeatureExtractor,  # noqa: E402
                          WhisperForConditionalGeneration)

from tinymodels import make_tiny_t5, save_tiny_whisper, tiny_whisper_model, WHISPER_WINDOW  # noqa: E402

from specdec.export.families import ctranslate2_whisper as ct2w  # noqa: E402
from specdec.runtime.core.errors import SpecdecError  # noqa: E402

VOCAB = 120
SUPPRESSED, BEGIN_SUPPRESSED = 36, 105
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
GENERATION_KEYS = ("suppress_tokens", "begin_suppress_tokens", "lang_to_id", "task_to_id", "no_timestamps_token_id",
                   "decoder_start_token_id", "eos_token_id", "pad_token_id", "bos_token_id", "is_multilingual")


def random_whisper(seed: int, tied: bool = True):
    """A tiny Whisper (1-second window) whose every parameter is random: no zero bias or unit layer norm is left
    for a wrong mapping to hide behind (CTranslate2 aliases equal variables, so fresh ones would collapse)."""
    model = tiny_whisper_model(seed=seed, vocab=VOCAB, position_scale=1.0, tie_word_embeddings=tied,
                               **WHISPER_WINDOW)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + noise if "layer_norm" in name and name.endswith("weight") else noise)
    return model


def ct2_convert(hf_dir, out, quantization=None):
    """ctranslate2's converter, with the files faster-whisper's folders carry copied over."""
    from ctranslate2.converters import TransformersConverter

    files = [f for f in ("tokenizer.json", "preprocessor_config.json") if (hf_dir / f).is_file()]
    TransformersConverter(str(hf_dir), copy_files=files).convert(str(out), quantization=quantization, force=True)
    return out


def with_lang_ids(ct2_dir, model):
    """ctranslate2's converter reads the languages from the loaded GenerationConfig's lang_to_id; transformers 5 drops
    that field on loading, so the converter writes lang_ids [] where under transformers 4 it wrote the ids (as in
    faster-whisper's published folders). Put them back as those folders have them."""
    path = ct2_dir / "config.json"
    config = json.loads(path.read_text())
    if not config.get("lang_ids"):
        config["lang_ids"] = sorted(model.generation_config.lang_to_id.values())
        path.write_text(json.dumps(config))
    return ct2_dir


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{name: (original model, hf folder, ct2 folder)}: float32 (tied output projection), float16 and bfloat16
    (an untied one), built once."""
    root = tmp_path_factory.mktemp("ct2-whisper")
    tied, untied = random_whisper(3), random_whisper(4, tied=False)
    # the tokens this model's greedy decoding starts with on probe(seed=2): suppressing them changes its output
    tied.generation_config.suppress_tokens = [8, SUPPRESSED]
    tied.generation_config.begin_suppress_tokens = [1, 9, BEGIN_SUPPRESSED]
    save_tiny_whisper(tied, root / "hf-tied")
    save_tiny_whisper(untied, root / "hf-untied")
    out = {}
    for name, model, hf, q in (("float32", tied, "hf-tied", None), ("float16", untied, "hf-untied", "float16"),
                               ("bfloat16", untied, "hf-untied", "bfloat16")):
        ct2 = with_lang_ids(ct2_convert(root / hf, root / f"ct2-{name}", q), model)
        out[name] = (model, root / hf, ct2)
    return out


def reload(path):
    return WhisperForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32).eval()


def logits(model, features, ids):
    with torch.no_grad():
        return model(input_features=features, decoder_input_ids=ids).logits


def probe(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    frames = 2 * model.config.max_source_positions
    features = torch.randn((2, model.config.num_mel_bins, frames), generator=gen)
    ids = torch.randint(0, VOCAB, (2, 7), generator=gen)
    ids[:, 0] = model.generation_config.decoder_start_token_id
    return features, ids


def test_float32_round_trip_is_exact(folders, tmp_path):
    original, hf, ct2 = folders["float32"]
    out = ct2w.convert_ct2_whisper(ct2, tmp_path / "back")
    back = reload(out)
    assert back.config.tie_word_embeddings
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                "encoder_ffn_dim", "decoder_ffn_dim", "num_mel_bins", "max_source_positions",
                "max_target_positions", "vocab_size"):
        assert getattr(back.config, key) == getattr(original.config, key), key
    ours, theirs = back.state_dict(), original.state_dict()
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    features, ids = probe(original)
    assert torch.equal(logits(back, features, ids), logits(original, features, ids))

    gen, want = (json.loads((d / "generation_config.json").read_text()) for d in (out, hf))
    for key in GENERATION_KEYS:
        assert gen.get(key) == want.get(key), key
    assert gen["alignment_heads"] == json.loads((ct2 / "config.json").read_text())["alignment_heads"]

    tok, ref = AutoTokenizer.from_pretrained(str(out)), AutoTokenizer.from_pretrained(str(hf))
    assert tok.backend_tokenizer is not None and tok.get_vocab() == ref.get_vocab()
    assert tok("w8 w9 <|en|>").input_ids == ref("w8 w9 <|en|>").input_ids
    assert (WhisperFeatureExtractor.from_pretrained(str(out)).to_dict()
            == WhisperFeatureExtractor.from_pretrained(str(hf)).to_dict())


@pytest.mark.parametrize("name,dtype", [("float16", torch.float16), ("bfloat16", torch.bfloat16)])
def test_half_precision_folders_widen_exactly(folders, tmp_path, name, dtype):
    original, _, ct2 = folders[name]
    spec, variables, _ = ct2w.read_model_bin(ct2 / "model.bin")
    assert spec == "WhisperSpec"
    assert variables["decoder/embeddings/weight"].dtype == (np.float16 if name == "float16" else np.float32)
    back = reload(ct2w.convert_ct2_whisper(ct2, tmp_path / "back"))
    assert not back.config.tie_word_embeddings
    rounded = reload(folders[name][1])
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(dtype).float())
    ours = back.state_dict()
    for key, value in rounded.state_dict().items():
        assert torch.equal(ours[key], value), key
    assert not torch.equal(ours["proj_out.weight"], original.state_dict()["proj_out.weight"])   # it was rounded
    features, ids = probe(original, seed=1)
    assert torch.equal(logits(back, features, ids), logits(rounded, features, ids))


def test_the_reader_keeps_ctranslate2s_aliases(folders):
    _, _, ct2 = folders["float32"]
    _, variables, aliases = ct2w.read_model_bin(ct2)
    assert aliases["decoder/projection/weight"] == "decoder/embeddings/weight"    # the tied output projection
    assert variables["encoder/num_heads"].item() == 2 and variables["decoder/num_heads"].item() == 4
    fused = variables["encoder/layer_0/self_attention/linear_0/bias"]
    assert fused.shape == (96,) and not np.any(fused[32:64])     # q | k (zeros: k_proj has no bias) | v


def test_ctranslate2_greedy_equals_transformers_generate(folders, tmp_path):
    """CTranslate2 suppresses config.json's suppress_ids (suppress_ids_begin at the first step) by default, as
    transformers does generation_config.json's suppress_tokens and begin_suppress_tokens: the same tokens come out.
    transformers' generic greedy generate (GenerationMixin's: WhisperForConditionalGeneration.generate adds its own
    length handling on top) from the same prompt; CTranslate2's own defaults to a beam of 5, so beam_size=1."""
    from transformers import GenerationMixin

    original, _, ct2 = folders["float32"]
    back = reload(ct2w.convert_ct2_whisper(ct2, tmp_path / "back"))
    features, _ = probe(original, seed=2)
    reference = ctranslate2.models.Whisper(str(ct2), device="cpu", compute_type="float32")
    steps = 9                       # CTranslate2 decodes min(max_length / 2, max_length - 3) tokens after the prompt
    results = reference.generate(ctranslate2.StorageView.from_array(features.numpy()), [PROMPT] * 2,
                                 max_length=2 * steps, beam_size=1)
    prompt = torch.tensor([AutoTokenizer.from_pretrained(str(ct2)).convert_tokens_to_ids(PROMPT)] * 2)
    with torch.no_grad():
        ours = GenerationMixin.generate(back, input_features=features, decoder_input_ids=prompt,
                                        max_new_tokens=steps, do_sample=False, num_beams=1)[:, prompt.shape[1]:]
    eos = original.generation_config.eos_token_id
    for row, result in zip(ours.tolist(), results):
        ids = result.sequences_ids[0]
        assert ids and row[:len(ids)] == ids
        assert len(ids) == steps or row[len(ids)] == eos      # CTranslate2 leaves the end of text out
        assert SUPPRESSED not in ids and ids[0] != BEGIN_SUPPRESSED
    unsuppressed = reference.generate(ctranslate2.StorageView.from_array(features.numpy()), [PROMPT] * 2,
                                      max_length=2 * steps, beam_size=1, suppress_tokens=[], suppress_blank=False)
    assert [r.sequences_ids[0][0] for r in unsuppressed] == [SUPPRESSED, BEGIN_SUPPRESSED]


def test_english_only_without_lang_ids(folders, tmp_path):
    """The converter's own output under transformers 5 (lang_ids []): a small vocabulary without languages is
    English-only, so specdec's prompt has no language or task token."""
    _, _, ct2 = folders["float32"]
    bare = shutil.copytree(ct2, tmp_path / "bare")
    config = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**config, "lang_ids": []}))
    gen = json.loads((ct2w.convert_ct2_whisper(bare, tmp_path / "back") / "generation_config.json").read_text())
    assert gen["is_multilingual"] is False and "lang_to_id" not in gen and "task_to_id" not in gen
    assert gen["no_timestamps_token_id"] == 7 and gen["decoder_start_token_id"] == 2


def test_is_ct2_folder(folders, tmp_path):
    _, hf, ct2 = folders["float32"]
    assert ct2w.is_ct2_folder(ct2) and ct2w.is_ct2_folder(str(ct2))
    assert not ct2w.is_ct2_folder(hf) and not ct2w.is_ct2_folder(ct2 / "model.bin")
    assert not ct2w.is_ct2_folder(tmp_path / "nothing")


# -- one-line refusals -------------------------------------------------------------------------------------------------

def refusal(path, tmp_path) -> str:
    with pytest.raises(SpecdecError) as err:
        ct2w.convert_ct2_whisper(path, tmp_path / "out")
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("quantization", ["int8", "int8_float16"])
def test_a_quantized_folder_is_refused(folders, tmp_path, quantization):
    _, hf, _ = folders["float32"]
    text = refusal(ct2_convert(hf, tmp_path / quantization, quantization), tmp_path)
    assert f"holds {quantization} weights" in text and "--quantization" in text and "float16/float32" in text


def test_a_model_that_is_not_whisper_is_refused(tmp_path):
    t5 = ct2_convert(make_tiny_t5(tmp_path / "t5"), tmp_path / "ct2-t5")
    text = refusal(t5, tmp_path)
    assert "TransformerSpec" in text and "not Whisper" in text and "T5" in text


def damaged(folders, tmp_path, edit):
    _, _, ct2 = folders["float32"]
    copy = shutil.copytree(ct2, tmp_path / "damaged")
    data = (copy / "model.bin").read_bytes()
    (copy / "model.bin").write_bytes(edit(data))
    return copy


@pytest.mark.parametrize("edit,expected", [
    (lambda b: b[:len(b) // 2], "is truncated (read "),
    (lambda b: b[:3], "is truncated (read 3 of at least 4 bytes"),
    (lambda b: b"", "is truncated (read 0 of"),
    (lambda b: b + b"\0" * 5, "5 bytes follow its last entry"),
    (lambda b: (7).to_bytes(4, "little") + b[4:], "newer CTranslate2 (binary version 7"),
    (lambda b: b"PK\3\4" + b[4:], "not a readable CTranslate2 model.bin"),
])
def test_a_damaged_model_bin_is_named(folders, tmp_path, edit, expected):
    text = refusal(damaged(folders, tmp_path, edit), tmp_path)
    assert "model.bin" in text and expected in text


def test_missing_files_are_named(folders, tmp_path):
    _, _, ct2 = folders["float32"]
    for name, expected in (("model.bin", "has no model.bin"), ("tokenizer.json", "has no tokenizer.json"),
                           ("vocabulary.json", "has no vocabulary.json or vocabulary.txt")):
        copy = shutil.copytree(ct2, tmp_path / f"no-{name}")
        (copy / name).unlink()
        assert expected in refusal(copy, tmp_path)


def test_vocabulary_txt_and_a_tokenizer_without_timestamps(folders, tmp_path):
    """Older faster-whisper folders: vocabulary.txt, and a tokenizer.json that stops before the vocabulary's last
    tokens (the timestamps): those are added at their ids."""
    _, _, ct2 = folders["float32"]
    copy = shutil.copytree(ct2, tmp_path / "old")
    tokens = json.loads((copy / "vocabulary.json").read_text())
    tokens[-2:] = ["<|0.00|>", "<|0.02|>"]
    (copy / "vocabulary.json").unlink()
    (copy / "vocabulary.txt").write_text("\n".join(tokens) + "\n")
    tok = json.loads((copy / "tokenizer.json").read_text())
    for token in ("w118", "w119"):
        del tok["model"]["vocab"][token]
    (copy / "tokenizer.json").write_text(json.dumps(tok))
    out = ct2w.convert_ct2_whisper(copy, tmp_path / "back")
    vocab = AutoTokenizer.from_pretrained(str(out)).get_vocab()
    assert vocab["<|0.00|>"] == VOCAB - 2 and vocab["<|0.02|>"] == VOCAB - 1 and len(vocab) == VOCAB

    tok["model"]["vocab"]["w118"] = 118
    tok["model"]["vocab"]["w42"], tok["model"]["vocab"]["w43"] = 43, 42
    (copy / "tokenizer.json").write_text(json.dumps(tok))
    assert "does not match the model's vocabulary: id 42 is 'w43' there" in refusal(copy, tmp_path)


# -- the cache ---------------------------------------------------------------------------------------------------------

def test_cached_conversion_reuses_only_complete_conversions(folders, tmp_path, monkeypatch):
    _, _, ct2 = folders["float32"]
    cache = tmp_path / "cache"
    real = ct2w.convert_ct2_whisper

    def interrupted(path, out):
        real(path, out)
        raise KeyboardInterrupt       # killed after writing every file, before the stamp and the rename

    monkeypatch.setattr(ct2w, "convert_ct2_whisper", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ct2w.cached_conversion(ct2, cache)
    assert list(cache.iterdir()) == []

    monkeypatch.setattr(ct2w, "convert_ct2_whisper", real)
    first = ct2w.cached_conversion(ct2, cache)
    assert (first / ct2w.STAMP).is_file() and (first / "model.safetensors").is_file()

    def refuse(path, out):
        raise AssertionError("converted again")

    monkeypatch.setattr(ct2w, "convert_ct2_whisper", refuse)
    assert ct2w.cached_conversion(ct2, cache) == first

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "env"))
    assert ct2w.default_cache_root() == tmp_path / "env" / "ct2"
    changed = shutil.copytree(ct2, tmp_path / "changed")
    assert ct2w.conversion_key(changed) != ct2w.conversion_key(ct2)


# -- a real faster-whisper folder --------------------------------------------------------------------------------------

def test_a_real_faster_whisper_folder(tmp_path):
    """Whisper tiny.en as faster-whisper publishes it (float16, vocabulary.txt, a tokenizer.json without the
    timestamp tokens, lang_ids listed though the model is English-only), when `specdec-bench` has fetched it
    (python -m specdec.bench.whisper_models fetch tiny.en): the converted model decodes as CTranslate2 does."""
    from transformers import GenerationMixin

    from specdec.bench.whisper_models import path_of

    folder = path_of("tiny.en")
    if folder is None:
        pytest.skip("Whisper tiny.en is not fetched (python -m specdec.bench.whisper_models fetch tiny.en)")
    out = ct2w.convert_ct2_whisper(folder, tmp_path / "tiny.en")
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["is_multilingual"] is False and "lang_to_id" not in gen and "task_to_id" not in gen
    assert (gen["decoder_start_token_id"], gen["eos_token_id"], gen["no_timestamps_token_id"]) == (50257, 50256, 50362)
    vocab = AutoTokenizer.from_pretrained(str(out)).get_vocab()
    assert len(vocab) == 51864 and vocab["<|0.00|>"] == 50363 and vocab["<|30.00|>"] == 51863

    model = reload(out)
    assert (model.config.d_model, model.config.encoder_attention_heads, model.config.max_source_positions) == (
        384, 6, 1500)
    extractor = WhisperFeatureExtractor.from_pretrained(str(out))
    t = np.arange(2 * 16_000) / 16_000
    wave = (0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)
    features = extractor(wave, sampling_rate=16_000, return_tensors="np").input_features
    reference = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="float32")
    prompt = ["<|startoftranscript|>", "<|notimestamps|>"]
    ids = reference.generate(ctranslate2.StorageView.from_array(features), [prompt], max_length=24,
                             beam_size=1)[0].sequences_ids[0]
    with torch.no_grad():
        ours = GenerationMixin.generate(model, input_features=torch.from_numpy(features),
                                        decoder_input_ids=torch.tensor([[50257, 50362]]), max_new_tokens=len(ids) + 1,
                                        do_sample=False, num_beams=1)[0, 2:].tolist()
    assert ids and ours[:len(ids)] == ids

"""The speech pair's vocabulary (models/speech_vocab.py): the bundled text tokenizer's ids unchanged, Whisper's special
tokens after them, rows padded; and a tiny random Whisper on it with the speech pair's 10 s window goes through
specdec-export and decodes synthesized speech exactly (speculative greedy = target-only = transformers' generate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from specdec.models import speech_vocab as sv
from specdec.models.speech_data import WINDOW_S
from specdec.models.speech_synth import synthesize
from specdec.models.whisper_checkpoint import set_generation, write_extractor
from specdec.runtime.core.errors import SpecdecError

TEXT = "Fast and Secure Tunneling Daemon"


def test_text_ids_stay_and_the_special_tokens_follow(tmp_path):
    from transformers import AutoTokenizer

    specials = sv.write_speech_tokenizer(tmp_path)
    text = Tokenizer.from_file(sv.TEXT_TOKENIZER)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    ids = tok(TEXT).input_ids
    assert ids == [i for i in text.encode(TEXT).ids if i != text.token_to_id("</s>")]     # no appended </s>
    size = text.get_vocab_size()
    assert [specials.ids[w] for w in sv.WORDS] == list(range(size, size + len(sv.WORDS)))
    stamps = [sv.timestamp_id(specials, i * sv.TIME_STEP) for i in range(round(WINDOW_S / sv.TIME_STEP) + 1)]
    assert stamps == list(range(size + len(sv.WORDS), size + len(sv.WORDS) + len(stamps)))
    assert tok.convert_ids_to_tokens(sv.timestamp_id(specials, 3.42)) == "<|3.42|>"
    assert sv.model_rows(specials) % sv.ROW_MULTIPLE == 0 and sv.model_rows(specials) > stamps[-1]
    full = [specials.start, specials.languages["<|en|>"], specials.tasks["transcribe"], stamps[0], *ids,
            sv.timestamp_id(specials, 2.5), specials.eos]
    assert tok.decode(full, skip_special_tokens=True).strip() == TEXT
    assert specials.suppress == sorted(text.token_to_id(t) for t in ("<pad>", "</s>", "<unk>"))
    with pytest.raises(SpecdecError, match="outside the window"):
        sv.timestamp_id(specials, WINDOW_S + 1)


@pytest.fixture(scope="module")
def speech_pair_export(tmp_path_factory):
    """A random Whisper (d_model 32, 1 + 1 layers) on the speech vocabulary and window, a noisy copy of its decoder
    as the draft, exported."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from tinymodels import export_pair, noisy_whisper_draft

    root = tmp_path_factory.mktemp("speech_pair")
    specials = sv.write_speech_tokenizer(root / "target", WINDOW_S)
    torch.manual_seed(3)
    config = WhisperConfig(vocab_size=sv.model_rows(specials), num_mel_bins=80, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64,
                           decoder_ffn_dim=64, max_source_positions=WINDOW_S * 50, max_target_positions=64,
                           pad_token_id=specials.eos, bos_token_id=specials.eos, eos_token_id=specials.eos,
                           decoder_start_token_id=specials.start, init_std=0.2)
    target = WhisperForConditionalGeneration(config).eval()
    set_generation(target, specials)
    draft = noisy_whisper_draft(target, 0.2, 4)
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(str(root / name))
        write_extractor(root / name, model.config)
        sv.write_speech_tokenizer(root / name, WINDOW_S)
    out = export_pair(str(root / "target"), str(root / "draft"), str(root / "export"), "--gamma-max", "3",
                      "--max-length", "32")
    return target, specials, Path(out)


def test_a_whisper_on_the_speech_vocabulary_exports_and_decodes_exactly(speech_pair_export):
    import torch

    from specdec.runtime import SpeculativeDecoder

    target, specials, export = speech_pair_export
    speech = json.loads((export / "manifest.json").read_text())["speech"]
    assert speech["n_samples"] == WINDOW_S * 16_000 and speech["no_timestamps_token_id"] == specials.no_timestamps
    dec = SpeculativeDecoder.load(export, provider="cpu")
    pcm = synthesize(TEXT).pcm
    plain = dec.generate(audio=pcm, language="en", max_new_tokens=12, draft="none")
    for draft in ("draft", "auto"):
        assert dec.generate(audio=pcm, language="en", max_new_tokens=12, draft=draft).token_ids == plain.token_ids
    from transformers import WhisperFeatureExtractor

    feats = WhisperFeatureExtractor(feature_size=80, chunk_length=WINDOW_S)(pcm, sampling_rate=16_000,
                                                                           return_tensors="pt").input_features
    with torch.no_grad():
        want = target.generate(feats, language="en", task="transcribe", do_sample=False, max_new_tokens=12)[0].tolist()
    assert plain.token_ids == want[:12] and len(set(plain.token_ids)) > 1

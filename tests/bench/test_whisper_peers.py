"""specdec.bench.common.whisper_peers on a tiny random Whisper with the official multilingual vocabulary layout
(51,865 ids: <|endoftext|> at 50,257, 99 languages, 1,501 timestamps; d_model 32, one layer each side, a 30 s
window), saved with transformers and converted to CTranslate2:

  * exactness: CTranslate2's greedy on transformers' own features equals transformers' greedy; faster-whisper fp32
    equals transformers' greedy on a 30 s clip ending in silence (where the two front ends give the same features)
  * the mel padding: on a 3 s clip the two front ends give different features (waveform vs log-mel padding)
  * int8, language detection, both long forms and the batched pipeline return well-formed results
  * one-line errors: faster_whisper missing, a folder that is not a CTranslate2 conversion or does not load, too long

The random model stops by itself: its decoder position embeddings from position STOP on carry a large multiple of
<|endoftext|>'s embedding (tied to the output layer), so every window ends after a few tokens."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("transformers")

from tinymodels import whisper_audio  # noqa: E402

from specdec.bench.common.whisper_peers import (FasterWhisperPeer, PeerResult, TransformersPeer,  # noqa: E402
                                                import_faster_whisper)
from specdec.runtime.core.errors import SpecdecError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

VOCAB = 51865
EOT = 50257
STOP = 24                # decoder positions from here on push <|endoftext|>: 21 text tokens after the 4-token prompt


def build(root):
    """(transformers checkpoint folder, CTranslate2 folder) of the tiny random multilingual Whisper."""
    import ctranslate2
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from specdec.bench.shapes.whisper import COMMON, layout
    from specdec.models import whisper_checkpoint

    specials = layout(VOCAB)
    assert specials.eos == EOT
    torch.manual_seed(0)
    config = WhisperConfig(**{**COMMON, "vocab_size": VOCAB, "num_mel_bins": 80, "d_model": 32, "encoder_layers": 1,
                              "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                              "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "init_std": 0.2,
                              "pad_token_id": EOT, "bos_token_id": EOT, "eos_token_id": EOT,
                              "decoder_start_token_id": specials.start})
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        positions, embed = model.model.decoder.embed_positions.weight, model.model.decoder.embed_tokens.weight
        positions.mul_(10.0)                          # a different token each step
        embed[EOT] = 0.2 * torch.randn(32)            # the padding row (pad = <|endoftext|>) starts at zero
        positions[STOP:] += 40.0 * embed[EOT] / embed[EOT].norm()
    whisper_checkpoint.set_generation(model, specials)
    gen = model.generation_config
    # as the official generation configs: transformers 5 keeps lang_to_id etc. on loading only when the config is
    # not marked as derived from the model config
    gen._from_model_config, gen.max_length, gen.max_initial_timestamp_index = False, 448, 50
    hf = whisper_checkpoint.save(model, root / "hf", specials)
    # CTranslate2 >= 4.7 calls a Whisper multilingual when its vocabulary holds the empty string as a token (openai's
    # multilingual vocabularies have it as their last text token)
    tokenizer = json.loads((hf / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"][""] = tokenizer["model"]["vocab"].pop(f"w{EOT - 1}")
    (hf / "tokenizer.json").write_text(json.dumps(tokenizer))
    ct2 = root / "ct2"
    ctranslate2.converters.TransformersConverter(
        str(hf), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(str(ct2), quantization="float32")
    return hf, ct2


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    hf, ct2 = build(tmp_path_factory.mktemp("whisper-peers"))
    yield hf, ct2, TransformersPeer(hf, threads=1), FasterWhisperPeer(ct2, "float32", 1)
    torch.set_num_threads(threads)          # TransformersPeer set it process-wide


def clip_30s_silent_tail():
    """30 s exactly, its last 50 ms digital silence: both front ends see the same waveform up to its end."""
    wave = whisper_audio(30.0, seed=1)
    wave[-800:] = 0.0
    return wave


def well_formed(result: PeerResult, peer: str):
    assert isinstance(result, PeerResult), peer
    assert result.ms > 0 and (result.encoder_ms is None or 0 < result.encoder_ms <= result.ms), peer
    assert result.token_ids and all(isinstance(t, int) and 0 <= t < EOT for t in result.token_ids), peer
    assert EOT not in result.generated_ids and result.token_ids == [t for t in result.generated_ids if t < EOT], peer
    assert result.text == result.text.strip() and result.text.split()[0].startswith("w"), peer


def test_ctranslate2_greedy_on_transformers_features_equals_transformers(peers):
    import ctranslate2

    hf_dir, ct2_dir, hf, _ = peers
    wave = whisper_audio(3.0, seed=2)                               # short: padding matters to faster-whisper only
    want = hf.transcribe(wave, language="en")
    well_formed(want, "transformers")
    assert want.generated_ids == want.token_ids and len(want.token_ids) == STOP - 3   # stopped by itself, no specials
    features = hf.processor.feature_extractor(wave, sampling_rate=16_000, return_tensors="np").input_features
    model = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32", intra_threads=1)
    assert model.is_multilingual
    prompt = [50258, 50259, 50359, 50363]              # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    suppress = json.loads((ct2_dir / "config.json").read_text())["suppress_ids"]
    got = model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(features)), [prompt], beam_size=1,
                         suppress_tokens=suppress)[0].sequences_ids[0]
    assert got == want.generated_ids


def test_faster_whisper_fp32_equals_transformers_where_padding_does_not_matter(peers):
    _, _, hf, fw = peers
    wave = clip_30s_silent_tail()
    want, got = hf.transcribe(wave), fw.transcribe(wave)
    well_formed(want, "transformers")
    well_formed(got, "faster-whisper")
    assert got.token_ids == want.token_ids and got.generated_ids == want.generated_ids
    assert got.text == want.text and got.encoder_calls == want.encoder_calls == 1 and got.segments == 1
    assert fw.compute_type == "float32" and fw.multilingual and hf.multilingual
    detected = fw.transcribe(wave, language=None)       # language detection runs the encoder once more
    assert detected.token_ids == got.token_ids and detected.encoder_calls == 2
    assert hf.transcribe(wave, language=None).token_ids == want.token_ids


def test_the_front_ends_differ_by_their_padding(peers):
    _, _, hf, fw = peers

    def both(wave):
        ours = fw.model.feature_extractor(wave)[:, :3000]
        ours = np.pad(ours, ((0, 0), (0, 3000 - ours.shape[1])))      # faster-whisper pads the log-mel with zeros
        theirs = hf.processor.feature_extractor(wave, sampling_rate=16_000, return_tensors="np").input_features[0]
        return np.abs(ours - theirs).max()

    assert both(clip_30s_silent_tail()) < 1e-3
    assert both(whisper_audio(3.0, seed=2)) > 0.1


def test_int8_and_long_forms_are_well_formed(peers):
    _, ct2_dir, hf, fw = peers
    int8 = FasterWhisperPeer(ct2_dir, "int8", 1)
    assert int8.compute_type in ("int8", "int8_float32")
    well_formed(int8.transcribe(clip_30s_silent_tail()), "faster-whisper int8")
    wave = np.concatenate([whisper_audio(30.0, seed=3), whisper_audio(25.0, seed=4)])        # 55 s: two windows
    for name, result in (("transformers long", hf.transcribe_long(wave)),
                         ("faster-whisper long", fw.transcribe_long(wave)),
                         ("faster-whisper batched", fw.transcribe_long(wave, batched=True, batch_size=2))):
        well_formed(result, name)
        assert result.encoder_calls == (1 if "batched" in name else 2), name
    stamped = fw.transcribe_long(wave)
    assert any(t > 50363 for t in stamped.generated_ids)                 # timestamp tokens, kept out of token_ids


def test_one_line_errors(peers, tmp_path, monkeypatch):
    hf_dir, ct2_dir, _, fw = peers

    def error(call) -> str:
        with pytest.raises(SpecdecError) as err:
            call()
        text = str(err.value)
        assert "\n" not in text
        return text

    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "faster_whisper", None)          # what `import faster_whisper` meets uninstalled
        assert "pip install faster-whisper" in error(import_faster_whisper)
        assert "pip install faster-whisper" in error(lambda: FasterWhisperPeer(ct2_dir, "float32", 1))
    assert "not a folder" in error(lambda: FasterWhisperPeer(tmp_path / "absent", "float32", 1))
    text = error(lambda: FasterWhisperPeer(hf_dir, "float32", 1))     # a transformers checkpoint, not converted
    assert "model.bin" in text and "ct2-transformers-converter" in text
    broken = tmp_path / "broken"
    shutil.copytree(ct2_dir, broken)
    (broken / "model.bin").write_bytes(b"not a model")
    assert "faster-whisper cannot load" in error(lambda: FasterWhisperPeer(broken, "float32", 1))
    assert "compute_type" in error(lambda: FasterWhisperPeer(ct2_dir, "float128", 1))
    assert "not a transformers checkpoint" in error(lambda: TransformersPeer(ct2_dir / "absent", 1))
    assert "transcribe_long" in error(lambda: fw.transcribe(np.zeros(31 * 16_000, np.float32)))

"""Beam search on Whisper exports, on a tiny random Whisper pair (a 1-second window): target-only beam search equals
transformers' generate(num_beams=...) with Whisper's prompt and suppressed tokens, the language detected as
transformers detects it; speculative beam search with the draft (which keeps the target's encoder) returns the same
sequences and scores as target-only beam search."""

from __future__ import annotations

import pytest
import torch

from test_beam import same
from test_whisper import DE, EN, EOT, NO_TIMESTAMPS, SOT, TRANSCRIBE, TRANSLATE, WAVES, features
from tinymodels import WHISPER_WINDOW, export_pair, noisy_whisper_draft, save_tiny_whisper, tiny_whisper_model

from specdec.runtime import SpeculativeDecoder

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

MAX_NEW = 16
# (num_beams, early_stopping, length_penalty, language, task)
CASES = {
    "w4-en": (4, False, 1.0, "en", "transcribe"),
    "w3-de-translate-early": (3, True, 1.0, "de", "translate"),
    "w4-detect-lp2": (4, False, 2.0, None, "transcribe"),
    "w2-never-lp-neg": (2, "never", -0.5, "en", "transcribe"),
}


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """(PyTorch target, decoder). Vocabulary 12 (8 specials), end of text close to a frequent token: it is often among
    the beams, so finished hypotheses, early stopping and the length penalty all matter."""
    root = tmp_path_factory.mktemp("whisper-beams")
    target = tiny_whisper_model(seed=11, vocab=12, position_scale=1.0, init_std=0.2, **WHISPER_WINDOW)
    with torch.no_grad():             # end of text is the padding id, whose embedding starts at zero: give it one
        emb = target.model.decoder.embed_tokens.weight
        emb[EOT] = 0.9 * emb[DE]
    save_tiny_whisper(target, root / "target")
    save_tiny_whisper(noisy_whisper_draft(target, 0.2, 12), root / "draft")
    export_pair(str(root / "target"), str(root / "draft"), str(root / "export"), "--gamma-max", "4",
                "--max-length", "32")
    return target, SpeculativeDecoder.load(root / "export", provider="cpu")


def hf_beams(model, wave, case):
    """transformers' beam search (GenerationMixin.generate) from Whisper's prompt, with the checkpoint's
    suppress_tokens and begin_suppress_tokens as its processors: the best sequence's generated tokens and score.
    WhisperForConditionalGeneration.generate runs this same search, but then reads every id above <|notimestamps|>
    as a timestamp and cuts the audio into segments where two follow each other; in the tiny vocabulary those ids
    are words, so it is called one level down. The language, when not given, is its detect_language's."""
    from transformers import GenerationMixin

    width, early, lp, language, task = case
    feats = features(wave)
    with torch.no_grad():
        lang = int(model.detect_language(feats)[0]) if language is None else {"en": EN, "de": DE}[language]
        prompt = [SOT, lang, {"transcribe": TRANSCRIBE, "translate": TRANSLATE}[task], NO_TIMESTAMPS]
        out = GenerationMixin.generate(model, input_features=feats, decoder_input_ids=torch.tensor([prompt]),
                                       num_beams=width, do_sample=False, max_new_tokens=MAX_NEW,
                                       early_stopping=early, length_penalty=lp, return_dict_in_generate=True,
                                       output_scores=True)
    length = int((out.beam_indices[0] >= 0).sum())
    return [(out.sequences[0, len(prompt):len(prompt) + length].tolist(), float(out.sequences_scores[0]))]


def ours(decoder, wave, case, **extra):
    width, early, lp, language, task = case
    res = decoder.generate(audio=wave, num_beams=width, max_new_tokens=MAX_NEW, early_stopping=early,
                           length_penalty=lp, language=language, task=task, **extra)
    return list(zip(res.sequences, res.scores))[:1], res


@pytest.mark.parametrize("name", list(CASES))
def test_target_only_beam_search_equals_transformers(whisper, name):
    model, decoder = whisper
    ended = 0
    for wave in WAVES:
        want = hf_beams(model, wave, CASES[name])
        got, res = ours(decoder, wave, CASES[name], draft="none")
        assert same(got, want), (got, want)
        ended += want[0][0][-1] == decoder.eos_id
    assert ended or name == "w4-detect-lp2", "end of text must be reached on some audio"


@pytest.mark.parametrize("gamma", [1, 3, "auto"])
@pytest.mark.parametrize("name", ["w4-en", "w3-de-translate-early", "w4-detect-lp2"])
def test_speculative_beam_search_equals_target_only(whisper, name, gamma):
    _, decoder = whisper
    for wave in WAVES:
        want, _ = ours(decoder, wave, CASES[name], draft="none")
        got, res = ours(decoder, wave, CASES[name], draft="draft", gamma=gamma)
        assert same(got, want), (got, want)
        if gamma == 3:
            assert res.stats.draft_calls > 0
            assert res.stats.ort_runs == res.stats.target_calls + res.stats.draft_calls + 1, \
                "the draft keeps the target's encoder: one encoder run a request"


def test_the_prompt_and_suppressed_tokens_reach_the_beams(whisper):
    """Control: the same search with another language gives other sequences (the prompt is read), and no returned
    sequence holds a suppressed token or begins with a begin-suppressed one."""
    _, decoder = whisper
    en = [ours(decoder, w, CASES["w4-en"])[0][0][0] for w in WAVES]
    de = [ours(decoder, w, (4, False, 1.0, "de", "transcribe"))[0][0][0] for w in WAVES]
    assert en != de
    gen = decoder.manifest.speech
    for seq in en + de:
        assert not set(seq) & set(gen["suppress_tokens"])
        assert seq[0] not in gen["begin_suppress_tokens"]

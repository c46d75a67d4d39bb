"""The bundled speech pair (models/speech): made into checkpoints and exported as a user would, it transcribes the
bundled example (three windows of synthesized sentences, models/speech/example.wav) window by window: segments in
more than one window, their times monotone and inside the audio, the default (draft model, auto) and the draft
model at a fixed gamma giving target-only decoding's tokens, and the subtitles through specdec-generate those of the
Python API. The pair's accuracy is measured by `specdec-models speech-evaluate` (models/README.md), not here: the
word error rate is printed."""

from __future__ import annotations

import json

import pytest
from tinymodels import export_pair

from specdec.models import speech_pack
from specdec.models.evaluate import edit_distance
from specdec.models.speech_eval import words

EXAMPLE = speech_pack.PACK / "example.wav"
TRUTH = json.loads((speech_pack.PACK / "example.json").read_text())


@pytest.fixture(scope="module")
def speech_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech_pair")
    paths = speech_pack.checkpoints(root / "pair")
    return export_pair(str(paths["target"]), str(paths["draft"]), str(root / "export"), "--gamma-max", "8",
                       "--max-length", "160")


@pytest.fixture(scope="module")
def transcripts(speech_export):
    from specdec.runtime import SpeculativeDecoder

    dec = SpeculativeDecoder.load(speech_export, provider="cpu")
    return dec, {mode: dec.generate(audio=str(EXAMPLE), language="en", timestamps=True, max_new_tokens=128,
                                    draft=draft, gamma=gamma)
                 for mode, (draft, gamma) in {"target": ("none", 0), "default": ("auto", "auto"),
                                              "draft": ("draft", 3)}.items()}


def test_the_example_is_transcribed_window_by_window(transcripts):
    _, runs = transcripts
    got = runs["default"]
    reference = " ".join(s["text"] for s in TRUTH)
    wer = edit_distance(words(reference), words(got.text)) / len(words(reference))
    print(f"bundled example: WER {wer:.3f}, {len(got.segments)} segments for {len(TRUTH)} sentences")
    print("\n".join(f"  [{s.start:.2f} --> {s.end:.2f}] {s.text}" for s in got.segments))
    duration = TRUTH[-1]["end"] + 0.5
    assert got.segments and max(s.start for s in got.segments) > 20.0, "segments from the third window"
    assert all(0 <= s.start <= s.end <= duration for s in got.segments)
    assert all(a.end <= b.start for a, b in zip(got.segments, got.segments[1:]))
    assert got.text == " ".join(s.text for s in got.segments if s.text)
    assert wer < 1.0, "the transcript shares words with what was said"


def test_the_default_decodes_what_target_only_decodes(transcripts):
    _, runs = transcripts
    for mode in ("default", "draft"):
        assert runs[mode].token_ids == runs["target"].token_ids
        assert runs[mode].segments == runs["target"].segments
    assert runs["draft"].stats.accepted > 0 and runs["draft"].stats.accepted < runs["draft"].stats.proposed


def test_specdec_generate_prints_the_same_subtitles(speech_export, transcripts, capsys):
    from specdec.runtime.tools.generate import main
    from specdec.runtime.tools.subtitles import srt

    _, runs = transcripts
    assert main(["--export", str(speech_export), "--audio", str(EXAMPLE), "--language", "en", "--format", "srt",
                 "--max-new-tokens", "128", "--provider", "cpu"]) == 0
    assert capsys.readouterr().out == srt(runs["default"].segments)

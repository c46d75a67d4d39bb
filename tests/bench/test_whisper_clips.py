"""`python -m specdec.bench.whisper_clips`: three held-out clips in a temporary folder, 2 to 8 s of 16 kHz mono
audio each, their clips.jsonl as the benchmark's prompts reader takes it, the voices none of the training ones, and
the same lines again for the same seed. Needs espeakng-loader (the models extra); skipped without it."""

from __future__ import annotations

import json
import wave

import pytest

from specdec.bench.common.prompts import read_prompts
from specdec.bench.whisper_clips import HELD_OUT_SPEEDS, SENTENCES, main, make_clips

pytest.importorskip("espeakng_loader")


def test_three_clips_are_2_to_8_seconds_and_clips_jsonl_reads_as_prompts(tmp_path, capsys):
    from specdec.models.speech_synth import SPEEDS, VOICES

    assert main(["--out", str(tmp_path), "--count", "3", "--seed", "7"]) == 0
    assert "3 clips" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "clips.jsonl").read_text().splitlines()]
    assert [item["audio"] for item in lines] == ["0001.wav", "0002.wav", "0003.wav"]
    sentences = {text for _, text in SENTENCES}
    for item in lines:
        assert {"audio", "reference", "voice", "task"} <= set(item) and item["task"] == "everyday"
        assert item["reference"] in sentences and "language" not in item
        name, rate = item["voice"].split()[:2]
        assert name not in VOICES and int(rate) not in SPEEDS and int(rate) in HELD_OUT_SPEEDS
        with wave.open(str(tmp_path / item["audio"])) as fh:
            assert (fh.getnchannels(), fh.getframerate(), fh.getsampwidth()) == (1, 16_000, 2)
            seconds = fh.getnframes() / fh.getframerate()
        assert 2.0 <= seconds <= 8.0 and seconds == pytest.approx(item["seconds"], abs=1e-3)
    prompts = read_prompts(tmp_path / "clips.jsonl")
    assert [p.reference for p in prompts] == [item["reference"] for item in lines]
    assert all(p.audio.dtype.name == "float32" and 0 < abs(p.audio).max() <= 1 for p in prompts)
    # the same seed, the same sentences and voices; in this process, lengths within a few milliseconds (espeak-ng's
    # waveform state carries over; a fresh process gives the same samples)
    again = [c.line() for c in make_clips(tmp_path / "again", count=3, seed=7)]
    assert [{**a, "seconds": 0} for a in again] == [{**item, "seconds": 0} for item in lines]
    assert [a["seconds"] for a in again] == pytest.approx([item["seconds"] for item in lines], abs=0.05)


def test_a_bad_count_is_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--count", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --count 0 makes no clip") and err.count("\n") == 1


def test_human_recordings_are_taken_with_their_transcripts_and_resampled(tmp_path):
    """A made-up tree laid out as the Debian packages unpack: one 8 kHz prompt of 3 s with its transcript, one too
    short, one bracketed (a tone, not speech), and one 16 kHz audiobook sentence of 2.5 s."""
    import gzip

    import numpy as np

    from specdec.bench.whisper_clips import HUMAN_SOURCES

    def tone(path, seconds, rate):
        path.parent.mkdir(parents=True, exist_ok=True)
        with wave.open(str(path), "wb") as fh:
            fh.setnchannels(1)
            fh.setsampwidth(2)
            fh.setframerate(rate)
            t = np.arange(int(seconds * rate)) / rate
            fh.writeframes((0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes())

    root = tmp_path / "debs"
    (_, prompts, prompt_text, _, _), (_, book, book_text, _, _) = HUMAN_SOURCES
    tone(root / prompts / "agent-pass.wav", 3.0, 8000)
    tone(root / prompts / "added.wav", 0.8, 8000)
    tone(root / prompts / "beep.wav", 3.0, 8000)
    (root / prompt_text).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(f"{root / prompt_text}.gz", "wt") as fh:
        fh.write("; Core Asterisk Sounds in English\n\nadded: Added.\nbeep: [this is a simple beep tone]\n"
                 "agent-pass: Please enter your password followed by the pound key.\n")
    tone(root / book / "reading-0001.wav", 2.5, 16000)
    (root / book_text).write_text("<s> he was not an ill disposed young man </s> (reading-0001)\n")
    assert main(["--out", str(tmp_path / "out"), "--human", str(root)]) == 0
    lines = sorted((json.loads(line) for line in (tmp_path / "out" / "clips.jsonl").read_text().splitlines()),
                   key=lambda item: item["seconds"])
    assert [(item["reference"], item["task"], item["seconds"]) for item in lines] == [
        ("he was not an ill disposed young man", "human", 2.5),
        ("Please enter your password followed by the pound key.", "human", 3.0)]
    assert "CC-BY-SA-3.0" in lines[1]["voice"]
    with wave.open(str(tmp_path / "out" / lines[1]["audio"])) as fh:
        assert fh.getframerate() == 16_000 and fh.getnframes() == 48_000
    assert main(["--out", str(tmp_path / "none"), "--human", str(tmp_path / "empty")]) == 2

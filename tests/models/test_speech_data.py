"""The speech pair's data stage (models/speech_data.py) on a few clips: English sentences only, a split per sentence,
clips inside the window with the silences and timestamps they claim (checked against the log-mel features' own
energy), shards that resume without rewriting and rebuild with the same clips, one-line errors."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from specdec.models import speech_data as sd
from specdec.models.speech_synth import HELD_OUT
from specdec.runtime.core.errors import SpecdecError

LINES = ["Useful template functions for Go templates (library)", "RSVG renderer bindings for the Ruby language",
         "Nützliche Vorlagenfunktionen für Go", "Bibliothek zum Lesen der Dateien und mehr",   # German: out
         "Fast and Secure Tunneling Daemon", "Fast and Secure Tunneling Daemon",                 # a repeat: once
         "two words", "документация пакета для разработчиков",                                    # short; Cyrillic
         "IP geolocation query library (CLI utilities)", "GNU R radix trees in Rcpp",
         "Puppet module for mapping files to resources and back", "SOCKS (v4 and v5) proxy daemon (danted)"]
FRAMES_PER_S = 100             # Whisper's hop: 160 samples at 16 kHz


def _corpus(path, lines) -> str:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 400 lines of the bundled corpus (each split gets clips)."""
    with gzip.open(sd.CORPUS, "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(400)]
    return _corpus(tmp_path_factory.mktemp("corpus") / "lines.txt.gz", lines)


def test_english_sentences_once_each(tmp_path):
    got = sd.english_sentences(_corpus(tmp_path / "lines.txt.gz", LINES))
    assert got == [LINES[0], LINES[1], LINES[4], LINES[8], LINES[9], LINES[10], LINES[11]]
    counts = {s: 0 for s in ("train", "validation", "test")}
    for sentence in sd.english_sentences():                     # the bundled corpus: about 90 / 5 / 5
        counts[sd.split_of(sentence)] += 1
    total = sum(counts.values())
    assert total > 40_000 and abs(counts["train"] / total - 0.9) < 0.01 and abs(counts["test"] / total - 0.05) < 0.01


def _clips(work, split):
    out = []
    for info in sorted((work / "speech" / split).glob("shard-*.json")):
        feats = np.load(str(info).replace(".json", ".npz"))["features"]
        out += list(zip(json.loads(info.read_text())["clips"], feats))
    return out


def test_clips_fit_the_window_and_their_timestamps_match_the_audio(corpus, tmp_path):
    done = sd.build(tmp_path, {"train": 4, "test": 3}, shard_clips=3, corpus=corpus, log=lambda *_: None)
    assert done == {"train": 2, "test": 1}
    clips = _clips(tmp_path, "train")
    assert len(clips) == 4
    for clip, feats in clips:
        assert feats.shape == (sd.N_MELS, sd.WINDOW_S * FRAMES_PER_S) and feats.dtype == np.float16
        assert 0 < clip["seconds"] <= sd.WINDOW_S
        segments = clip["segments"]
        assert clip["text"] == " ".join(text for _, _, text in segments)
        ends = [0.0] + [end for _, end, _ in segments]
        for (start, end, text), before in zip(segments, ends):
            assert start < end <= clip["seconds"] + 1e-3
            assert start == 0.0 if before == 0.0 else 0.2 - 1e-3 <= start - before <= 0.8 + 1e-3
            inside = [s for s, _ in clip["words"] if start - 1e-3 <= s < end]
            assert inside and abs(inside[0] - start) < 0.05, (text, inside)
        # the features say the same: speech where a segment is, silence in the gaps and after the clip
        frames = feats.astype(np.float32).mean(axis=0)
        speech = np.concatenate([frames[int(a * FRAMES_PER_S):int(b * FRAMES_PER_S)] for a, b, _ in segments])
        quiet = [frames[int(b * FRAMES_PER_S) + 3:int(a * FRAMES_PER_S) - 3]
                 for (_, b, _), (a, _, _) in zip(segments, segments[1:])]
        quiet.append(frames[int(clip["seconds"] * FRAMES_PER_S) + 3:])
        for gap in quiet:                       # each gap, and the padding after the clip
            assert gap.size and gap.mean() < speech.mean() - 0.3, (gap.mean(), speech.mean())
    test_voices = {clip["voice"] for clip, _ in _clips(tmp_path, "test")}
    assert HELD_OUT[0] not in {clip["voice"] for clip, _ in clips} and test_voices


def test_shards_resume_and_rebuild_with_the_same_clips(corpus, tmp_path):
    sd.build(tmp_path, {"train": 5}, shard_clips=2, corpus=corpus, log=lambda *_: None)
    shards = sorted((tmp_path / "speech" / "train").glob("shard-*"))
    assert len(shards) == 6                                      # 3 shards, .npz and .json each
    before = {p.name: p.stat().st_mtime_ns for p in shards}
    first = json.loads((tmp_path / "speech" / "train" / "shard-00001.json").read_text())["clips"]
    (tmp_path / "speech" / "train" / "shard-00001.json").unlink()       # an interrupted shard: its .json missing
    said = []
    sd.build(tmp_path, {"train": 5}, shard_clips=2, corpus=corpus, log=said.append)
    assert len(said) == 1 and "shard 2/3" in said[0]
    for p in sorted((tmp_path / "speech" / "train").glob("shard-*")):
        assert (p.stat().st_mtime_ns == before[p.name]) == ("00001" not in p.name), p.name
    again = json.loads((tmp_path / "speech" / "train" / "shard-00001.json").read_text())["clips"]
    assert again == first                     # made again after the others, in a process that spoke nothing before
    assert not list((tmp_path / "speech" / "train").glob("*.tmp"))


def test_shards_made_by_several_processes_hold_the_same_clips(corpus, tmp_path):
    said = []
    sd.build(tmp_path / "one", {"train": 5}, shard_clips=2, corpus=corpus, log=lambda *_: None)
    sd.build(tmp_path / "two", {"train": 5}, shard_clips=2, corpus=corpus, workers=2, log=said.append)
    assert sorted(m.split(" (")[0] for m in said) == [f"speech-data train: shard {n}/3" for n in (1, 2, 3)]
    for n in range(3):
        one, two = (json.loads((tmp_path / w / "speech" / "train" / f"shard-{n:05d}.json").read_text())["clips"]
                    for w in ("one", "two"))
        assert one == two and one
        f1, f2 = (np.load(tmp_path / w / "speech" / "train" / f"shard-{n:05d}.npz")["features"] for w in ("one", "two"))
        assert np.array_equal(f1, f2)


def test_no_shard_is_begun_after_the_deadline_and_the_next_call_makes_the_rest(corpus, tmp_path):
    import time

    said = []
    for workers in (1, 2):
        folder = tmp_path / f"w{workers}"
        got = sd.build(folder, {"train": 8}, shard_clips=1, corpus=corpus, workers=workers, deadline=time.time() - 1,
                       log=said.append)
        made = len(list((folder / "speech" / "train").glob("shard-*.json")))
        assert got == {"train": made} and made == 0, (workers, made)
        assert said[-1] == f"speech-data train: {made} of 8 shards by the deadline; the next run makes the rest"
        assert sd.build(folder, {"train": 8}, shard_clips=1, corpus=corpus, workers=workers,
                        log=said.append) == {"train": 8}


def test_each_shard_is_made_in_a_process_of_its_own_and_none_is_begun_once_late():
    import os

    pids = []
    sd._each_in_a_fresh_process(os.getpid, [()] * 5, 2, lambda: False, pids.append)
    assert len(set(pids)) == 5 and os.getpid() not in pids
    late = []                                   # late from the first shard's end: the one running with it still ends
    sd._each_in_a_fresh_process(os.getpid, [()] * 5, 2, lambda: bool(late), late.append)
    assert len(late) == 2


def test_a_failing_or_dying_shard_process_is_an_error_not_a_hang():
    import os

    with pytest.raises(ValueError, match="invalid literal"):        # raised in the process, raised here
        sd._each_in_a_fresh_process(int, [("1",), ("x",), ("2",)], 2, lambda: False, lambda _: None)
    with pytest.raises(SpecdecError) as err:                          # killed (SIGABRT): no word from it
        sd._each_in_a_fresh_process(os.abort, [()], 1, lambda: False, lambda _: None)
    assert "ended without its shard (exit code -6)" in str(err.value) and "run again" in str(err.value)


def test_bad_arguments_are_one_line(corpus, tmp_path):
    sd.build(tmp_path, {"validation": 1}, shard_clips=2, corpus=corpus, log=lambda *_: None)
    for call, words in ((lambda: sd.build(tmp_path, {"dev": 2}, corpus=corpus), "unknown split"),
                        (lambda: sd.english_sentences(str(tmp_path / "none.gz")), "missing"),
                        (lambda: sd.build(tmp_path, {"validation": 3}, shard_clips=2, corpus=corpus), "clips 1 -> 3"),
                        (lambda: sd.build(tmp_path, {"validation": 1}, seed=5, corpus=corpus), "other settings"),
                        (lambda: sd.build(tmp_path, {"validation": 1}, corpus=corpus, workers=0), "--workers 0")):
        with pytest.raises(SpecdecError) as err:
            call()
        assert words in str(err.value) and "\n" not in str(err.value)


def test_a_sentence_longer_than_the_window_is_left_out(monkeypatch):
    from specdec.models.speech_synth import Voice

    monkeypatch.setattr(sd, "WINDOW_S", 2)
    long, short = "Puppet module for mapping files to resources and back", "Fast Daemon"
    pcm, segments, words = sd.speak({"sentences": [long, short], "gaps": [0.5], "voice": Voice()})
    assert [text for _, _, text in segments] == [short] and segments[0][0] == 0.0
    assert abs(pcm.size / 16_000 - segments[0][1]) < 1e-3 and segments[0][1] <= 2 and [w for _, w in words] == short.split()
    assert sd.speak({"sentences": [long], "gaps": [], "voice": Voice()}) is None

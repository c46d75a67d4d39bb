"""Whisper's timestamps and long audio: the timestamp rules are transformers' (WhisperTimeStampLogitsProcessor without
its log-probability rule), greedy decoding with timestamps equals PyTorch's greedy decoding under those rules and
is the same speculative or target-only, sampling with timestamps follows the target's distribution (chi-square
against exact enumeration, with a control that leaves the rules out of the target's rows and is caught), segments
and subtitles are read and written as they should be, and audio longer than the window is decoded window by window,
each window exactly as target-only decoding decodes it."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from test_distribution import chi_square_p
from tinymodels import (BEGIN, EN, EOT, NO_TIMESTAMPS, SOT, STAMPS, TRANSCRIBE,
                        exported_stamped_whisper_pair, whisper_audio)

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.decoding.processors import Processors
from specdec.runtime.families.whisper.transcript import MAX_FILL, MIN_FILL, Segment, pause_cut, quietest_cut, segments
from specdec.runtime.tools.subtitles import lines, srt, vtt

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

PROMPT = [SOT, EN, TRANSCRIBE]


def reference_processor(begin_index: int, initial: int = 50):
    """transformers' WhisperTimeStampLogitsProcessor, its log-probability rule off (the runtime leaves it out)."""
    from transformers import GenerationConfig
    from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor

    config = GenerationConfig(no_timestamps_token_id=NO_TIMESTAMPS, eos_token_id=EOT,
                              max_initial_timestamp_index=initial)
    return WhisperTimeStampLogitsProcessor(config, begin_index, _detect_timestamp_from_logprob=False)


def reference_banned(seq, vocab: int, initial: int = 50) -> set:
    scores = reference_processor(len(PROMPT), initial)(torch.tensor([seq]), torch.zeros(1, vocab))
    return set(np.nonzero(np.isinf(scores[0].numpy()))[0].tolist())


@pytest.mark.parametrize("count,initial", [(STAMPS, 50), (60, 5)])
def test_the_timestamp_rules_are_transformers(count, initial):
    """Random sequences of words, end of text and timestamps: the same tokens banned over the vocabulary (the
    timestamps the model has: transformers bans the rows past them too, which the runtime leaves to the model)."""
    rows = BEGIN + count
    ours = Processors(eos_id=EOT, prompt=len(PROMPT), timestamps=(BEGIN, count, initial, NO_TIMESTAMPS))
    rng = np.random.default_rng(0)
    kinds = {"stamp": list(range(BEGIN, rows)), "word": list(range(1, EOT))}
    differing = 0
    for _ in range(400):
        seq = list(PROMPT)
        for _ in range(int(rng.integers(0, 7))):
            seq.append(int(rng.choice(kinds["stamp" if rng.random() < 0.5 else "word"])))
        assert set(ours.banned(seq)) == reference_banned(seq, rows, initial), seq
        differing += set(ours.banned(seq)) != set(ours.banned(seq[:-1])) if len(seq) > 3 else 0
    assert differing > 100, "the sequences must exercise rules that change with the tokens"
    # a proposal's row (one for all its steps) bans only what every position bans
    assert ours.banned(PROMPT + [BEGIN], repeats=False) == [NO_TIMESTAMPS]


def test_segments_are_read_from_timestamp_tokens():
    names = dict(enumerate("-abcde", 0))
    tokens = [BEGIN, 1, 2, BEGIN + 3, BEGIN + 3, 3, BEGIN + 6, BEGIN + 7, 4, EOT, 5]
    got = segments(tokens, BEGIN, STAMPS, 0.02, EOT, lambda t: " ".join(names[i] for i in t), offset=10.0)
    assert [(s.start, s.end, s.text) for s in got] == [(10.0, 10.06, "a b"), (10.06, 10.12, "c"), (10.14, None, "d")]
    assert got[0].token_ids == (1, 2)
    # text after a segment's end that no timestamp opens starts where that segment ended
    assert [(s.start, s.end) for s in segments([BEGIN, 1, BEGIN + 2, 2, EOT], BEGIN, STAMPS, 0.02, EOT,
                                               lambda t: "x")] == [(0.0, 0.04), (0.04, None)]


def test_subtitles_are_well_formed():
    segs = [Segment(0.0, 3.95, "Useful template\nfunctions"), Segment(4.31, 7.75, "RSVG renderer"),
            Segment(8.0, 8.0, ""), Segment(3725.5, None, "late")]
    out = srt(segs)
    cues = out.strip("\n").split("\n\n")
    assert len(cues) == 3
    for n, cue in enumerate(cues, 1):
        index, times, text = cue.split("\n")
        assert index == str(n) and re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}", times) and text
    assert "00:00:00,000 --> 00:00:03,950\nUseful template functions" in out
    assert "01:02:05,500 --> 01:02:05,500\nlate" in out
    web = vtt(segs)
    assert web.startswith("WEBVTT\n\n") and "00:00:04.310 --> 00:00:07.750\nRSVG renderer\n\n" in web
    assert lines(segs).splitlines()[0] == "[0.00 --> 3.95] Useful template functions"


def test_the_chunked_fallback_cuts_at_the_quietest_frame():
    rate = 16_000
    loud = 0.5 * np.sin(np.arange(5 * rate) * 0.3).astype(np.float32)
    loud[int(4.30 * rate):int(4.36 * rate)] = 0.0
    loud[int(1.0 * rate):int(1.2 * rate)] = 0.0          # quieter, longer, but too early: not where a window is cut
    cut = quietest_cut(loud, rate)
    assert int(4.30 * rate) <= cut <= int(4.36 * rate)


# ---------------------------------------------------------------------------------------------------- a tiny pair
@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    """tinymodels.exported_stamped_whisper_pair: (target model, its decoder, the export)."""
    target, export = exported_stamped_whisper_pair(tmp_path_factory.mktemp("stamped"))
    return target, SpeculativeDecoder.load(export, provider="cpu"), export


def features(wave):
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=80, chunk_length=1)(wave, sampling_rate=16_000,
                                                                    return_tensors="pt").input_features


def torch_greedy(model, wave, n: int) -> list:
    """Greedy decoding with PyTorch's forward over the whole sequence and transformers' timestamp rules."""
    seq, feats, rules = list(PROMPT), features(wave), reference_processor(len(PROMPT))
    for _ in range(n):
        with torch.no_grad():
            logits = model(input_features=feats, decoder_input_ids=torch.tensor([seq])).logits[:, -1]
        seq.append(int(rules(torch.tensor([seq]), logits)[0].argmax()))
        if seq[-1] == EOT:
            break
    return seq[len(PROMPT):]


WAVES = [whisper_audio(0.8, seed=1), whisper_audio(1.0, seed=2)]


@pytest.mark.parametrize("draft,gamma", [("none", 0), ("draft", 3), ("auto", "auto")])
def test_greedy_with_timestamps_equals_pytorch(stamped, draft, gamma):
    target, dec, _ = stamped
    for wave in WAVES:
        got = dec.generate(audio=wave, language="en", max_new_tokens=12, draft=draft, gamma=gamma, timestamps=True)
        assert got.token_ids == torch_greedy(target, wave, 12)
        assert got.token_ids[0] in range(BEGIN, BEGIN + STAMPS)
        assert all(a.start <= (a.end or a.start) for a in got.segments)


def test_a_model_without_timestamp_tokens_says_so(decoder_without_stamps):
    with pytest.raises(SpecdecError, match="no timestamp tokens") as err:
        decoder_without_stamps.generate(audio=WAVES[0], language="en", timestamps=True)
    assert "\n" not in str(err.value)
    assert decoder_without_stamps.generate(audio=WAVES[0], language="en", max_new_tokens=3).token_ids


@pytest.fixture(scope="module")
def decoder_without_stamps(whisper_pair):
    return SpeculativeDecoder.load(whisper_pair[1] / "export", provider="cpu")


# Sampling with timestamps at T = 1: the first TOKENS tokens against exact enumeration under transformers' rules.
# N and the thresholds as tests/runtime/families/test_whisper.py's: the control (the target's rows without the rules, so it
# draws what they ban) must give p < P_TEETH.
TOKENS, N, P_PASS, P_TEETH = 3, 5_000, 1e-3, 1e-6


def exact_distribution(model, wave) -> dict:
    feats, rules = features(wave), reference_processor(len(PROMPT))
    dist, frontier = {}, [((), 1.0)]
    for step in range(TOKENS):
        nxt = []
        for outcome, prob in frontier:
            seq = torch.tensor([PROMPT + list(outcome)])
            with torch.no_grad():
                logits = model(input_features=feats, decoder_input_ids=seq).logits[:, -1].double()
            p = torch.softmax(rules(seq, logits)[0], -1).numpy()
            for tok in np.nonzero(p)[0]:
                item = (outcome + (int(tok),), prob * float(p[tok]))
                (dist.__setitem__(*item) if tok == EOT or step == TOKENS - 1 else nxt.append(item))
        frontier = nxt
    return dist


def sampled(dec, wave, start, stop) -> tuple[dict, int, int]:
    counts, proposed, accepted = {}, 0, 0
    for seed in range(start, stop):
        r = dec.generate(audio=wave, language="en", max_new_tokens=TOKENS, temperature=1.0, draft="draft", gamma=2,
                         seed=seed, timestamps=True)
        counts[tuple(r.token_ids)] = counts.get(tuple(r.token_ids), 0) + 1
        proposed, accepted = proposed + r.stats.proposed, accepted + r.stats.accepted
    return counts, proposed, accepted


def test_sampling_with_timestamps_follows_the_target_distribution(stamped):
    target, dec, _ = stamped
    dist = exact_distribution(target, WAVES[0])
    counts, proposed, accepted = sampled(dec, WAVES[0], 0, N)
    assert 0 < accepted < proposed, "the draft's guesses must be both kept and rejected"
    p_value = chi_square_p(counts, dist)
    print(f"Whisper sampling with timestamps: N = {N}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"chi-square p = {p_value:.3g}"


def test_the_timestamp_distribution_test_catches_rules_left_out(stamped, monkeypatch):
    """The control: the rules only where a proposal's row has them (<|notimestamps|> banned) in the target's rows too.
    Every rule bans tokens, so a sampler that leaves one out draws outcomes of probability 0 under the target: the
    chi-square test refuses those first (N / 16 samples are enough)."""
    target, dec, _ = stamped
    dist = exact_distribution(target, WAVES[0])
    original = Processors._timestamp_bans
    monkeypatch.setattr(Processors, "_timestamp_bans", lambda self, generated, exact: original(self, generated, False))
    counts = sampled(dec, WAVES[0], 0, N // 16)[0]
    impossible = sum(c for outcome, c in counts.items() if outcome not in dist)
    print(f"timestamp rules left out: {impossible} of {N // 16} outcomes impossible under the target")
    with pytest.raises(AssertionError, match="an outcome the target cannot produce"):
        chi_square_p(counts, dist)


# ---------------------------------------------------------------------------------------------------- long audio
def test_long_audio_is_decoded_window_by_window_exactly(stamped):
    _, dec, _ = stamped
    long = np.concatenate([whisper_audio(0.9, seed=s) for s in range(3)])      # 2.7 s: three 1 s windows or more
    runs = {d: dec.generate(audio=long, language="en", max_new_tokens=10, draft=d, gamma=g, timestamps=True)
            for d, g in (("none", 0), ("draft", 3), ("auto", "auto"))}
    plain = runs["none"]
    for r in runs.values():
        assert r.token_ids == plain.token_ids and r.segments == plain.segments and r.text == plain.text
    starts = [s.start for s in plain.segments]
    assert plain.segments and starts == sorted(starts) and starts[-1] >= 1.0, "more than one window"
    assert all(0 <= s.start <= s.end <= long.size / 16_000 for s in plain.segments)
    assert plain.stats.new_tokens >= sum(len(s.token_ids) for s in plain.segments)
    # each window is the request it would be alone: the first window ends in the first clip's silent stretch, and
    # its own transcript opens the recording
    pause = pause_cut(long[:16_000 + 4_000], 16_000, 16_000)
    assert pause is not None and 0.3 <= pause[0] / 16_000 <= 0.6, "the first window ends in the first clip's pause"
    first = dec.generate(audio=long[:pause[0]], language="en", max_new_tokens=10, timestamps=True)
    closed = [s if s.end is not None else replace(s, end=round(pause[0] / 16_000, 2)) for s in first.segments]
    assert first.segments and plain.segments[:len(closed)] == closed
    pieces = list(dec.stream(audio=long, language="en", max_new_tokens=10, timestamps=True))
    assert [t for p in pieces for t in p.token_ids] == plain.token_ids
    assert [s for p in pieces for s in p.segments] == plain.segments and pieces[-1].stop_reason


def test_long_audio_without_timestamp_tokens_is_cut_at_quiet_points(decoder_without_stamps):
    dec = decoder_without_stamps
    long = np.concatenate([whisper_audio(0.8, seed=1), np.zeros(3_200, np.float32), whisper_audio(0.8, seed=2)])
    got = dec.generate(audio=long, language="en", max_new_tokens=4)
    cut = quietest_cut(long[:16_000], 16_000)
    one = dec.generate(audio=long[:cut], language="en", max_new_tokens=4)
    two = dec.generate(audio=long[cut:], language="en", max_new_tokens=4, seed=1)
    assert got.token_ids == one.token_ids + two.token_ids
    assert got.stats.new_tokens == one.stats.new_tokens + two.stats.new_tokens


def test_audio_past_the_limit_is_a_one_line_error(decoder_without_stamps, monkeypatch):
    from specdec.runtime.families.whisper import transcript

    monkeypatch.setattr(transcript, "MAX_AUDIO_S", 2)
    with pytest.raises(SpecdecError, match="the audio is 3 s long, longer than the 2 s a request takes") as err:
        decoder_without_stamps.generate(audio=np.zeros(3 * 16_000, np.float32), language="en")
    assert "\n" not in str(err.value)
    assert decoder_without_stamps.generate(audio=WAVES[0], language="en", max_new_tokens=2).token_ids


def test_a_duration_past_the_limit_never_reads_as_the_limit():
    from specdec.runtime.families.whisper.transcript import MAX_AUDIO_S, _span

    assert _span(MAX_AUDIO_S) == "4 h" and _span(MAX_AUDIO_S + 1) == "4 h 1 s" and _span(MAX_AUDIO_S + 0.3) != "4 h"
    assert [_span(s) for s in (2, 59.9, 125.5, 5000)] == ["2 s", "59.9 s", "2 min 5.5 s", "1 h 23 min 20 s"]


def test_specdec_generate_prints_subtitles_and_json(stamped, tmp_path, capsys):
    import json

    from scipy.io import wavfile

    from specdec.runtime.tools.generate import main

    _, dec, export = stamped
    wave = np.concatenate([WAVES[0], WAVES[1], WAVES[0]])
    wav = tmp_path / "clip.wav"
    wavfile.write(str(wav), 16_000, (np.clip(wave, -1, 1) * 32767).astype(np.int16))
    want = dec.generate(audio=str(wav), language="en", max_new_tokens=10, timestamps=True)
    base = ["--export", str(export), "--audio", str(wav), "--language", "en", "--max-new-tokens", "10",
            "--provider", "cpu"]
    assert main(base + ["--format", "srt"]) == 0
    assert capsys.readouterr().out == srt(want.segments)
    assert main(base + ["--format", "vtt"]) == 0
    assert capsys.readouterr().out == vtt(want.segments)
    assert main(base + ["--timestamps"]) == 0
    assert capsys.readouterr().out == lines(want.segments)
    assert main(base + ["--format", "json", "--timestamps"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["segments"] == [{"start": s.start, "end": s.end, "text": s.text} for s in want.segments]
    assert got["text"] == want.text
    assert main(["--export", str(export), "--timestamps", "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "for transcripts" in err and "\n" not in err


def test_a_window_ends_in_its_latest_pause_and_the_next_starts_before_the_speech():
    """pause_cut on noise bursts with silences between them (NumPy: the silences are where they were put)."""
    rate = 16_000
    rng = np.random.default_rng(0)
    loud = lambda s: (0.3 * rng.standard_normal(int(s * rate))).astype(np.float32)    # noqa: E731
    quiet = lambda s: np.zeros(int(s * rate), np.float32)                              # noqa: E731
    # speech 0-2 s, a 0.5 s pause, speech 2.5-4 s, a 0.4 s pause, speech 4.4-6 s: a 5 s window ends in the 1st pause
    # (the latest that begins before MAX_FILL of the window), and in the 2nd when the 1st is too short
    audio = np.concatenate([loud(2.0), quiet(0.5), loud(1.5), quiet(0.4), loud(2.0)])
    assert MIN_FILL * 5 < 2.0 < MAX_FILL * 5 < 4.0
    cut, resume = pause_cut(audio[:int(5.25 * rate)], 5 * rate, rate)
    assert 2.0 < cut / rate < 2.5 and resume / rate == pytest.approx(2.5, abs=0.02)
    audio = np.concatenate([loud(2.0), quiet(0.2), loud(1.8), quiet(0.4), loud(2.0)])
    cut, resume = pause_cut(audio[:int(5.25 * rate)], 5 * rate, rate)
    assert 4.0 < cut / rate < 4.4 and resume / rate == pytest.approx(4.4, abs=0.02)
    # a pause shorter than PAUSE_S, or in the window's first part, is not one: continuous speech has none
    assert pause_cut(np.concatenate([loud(2.0), quiet(0.2), loud(3.25)]), 5 * rate, rate) is None
    assert pause_cut(np.concatenate([loud(0.5), quiet(0.6), loud(4.15)]), 5 * rate, rate) is None
    assert pause_cut(loud(5.25), 5 * rate, rate) is None
    # a pause running past the window's end counts: the cut is inside the window, the speech resumes after it
    cut, resume = pause_cut(np.concatenate([loud(4.9), quiet(0.35)]), 5 * rate, rate)
    assert 4.9 <= cut / rate <= 5.0 and resume == int(5.25 * rate)
    # a noise floor 30 dB below the speech is quiet too
    noisy = audio + (0.01 * rng.standard_normal(audio.size)).astype(np.float32)
    cut, resume = pause_cut(noisy[:int(5.25 * rate)], 5 * rate, rate)
    assert 4.0 < cut / rate < 4.4 and resume / rate == pytest.approx(4.4, abs=0.02)


def test_stitching_at_pauses_keeps_every_sentence_once_at_its_times():
    """windows() on sentences with pauses between them (0.3 to 0.8 s) and a decode that transcribes perfectly: each
    window ends in a pause, so every sentence is decoded whole in one window, once, in order, at its times; a
    stretch of continuous speech longer than a window (no pause) goes on by the timestamp rule."""
    from specdec.runtime.core.stats import Result, Stats
    from specdec.runtime.families.whisper.transcript import windows

    rate, window_s, step = 100, 10.0, 0.02
    speech = {"sampling_rate": rate, "n_samples": int(window_s * rate), "frames": int(window_s / step),
              "timestamps": {"begin": 1000, "count": 501}}
    rng = np.random.default_rng(1)
    sentences, at = [], 0.3
    for word in range(1, 40):
        length = 14.0 if word == 20 else round(float(rng.uniform(0.5, 6.0)), 2)   # sentence 20: no pause in 10 s
        sentences.append((round(at, 2), round(at + length, 2), word))
        at += length + round(float(rng.uniform(0.3, 0.8)), 2)
    total = int((at + 0.5) * rate)
    # speech samples are 1e6 + their index (loud), silent ones their index * 1e-6 (quiet): decode reads its seek
    index = np.arange(total, dtype=np.float64)
    pcm = index * 1e-6
    for a, b, _ in sentences:
        pcm[int(round(a * rate)):int(round(b * rate))] = 1e6 + index[int(round(a * rate)):int(round(b * rate))]
    pcm = pcm.astype(np.float32)
    seen = []

    def decode(window, stamps, seed):
        v = float(window[0])
        seek = (v - 1e6 if v >= 1e5 else round(v * 1e6)) / rate
        seen.append((seek, window.size / rate))
        ids = []
        for a, b, word in sentences:
            if b <= seek + step or a - seek >= window.size / rate:
                continue
            ids += [1000 + max(0, round((a - seek) / step)), word]
            if b - seek > window.size / rate:
                break                                                # cut: no end timestamp
            ids.append(1000 + round((b - seek) / step))
        return Result("", ids + [0], Stats(), "eos")

    found = [s for _, _, segs in windows(pcm, speech, decode, 0, 0, lambda ids: " ".join(map(str, ids)))
             for s in segs]
    texts = [int(s.text) for s in found]
    assert texts[:19] == list(range(1, 20)) and texts[-19:] == list(range(21, 40))
    assert set(texts[19:-19]) == {20}, "the long sentence comes out in pieces, by the timestamp rule"
    for s, (a, b, _) in zip(found[:19] + found[-19:], sentences[:19] + sentences[-19:]):
        assert abs(s.start - a) <= step and abs(s.end - b) <= step
    ends_in_pause = [seek + size for seek, size in seen[:-1]
                     if not any(a < seek + size - 0.05 < b for a, b, _ in sentences)]
    assert len(ends_in_pause) >= len(seen) - 4, "windows end in pauses, but those by the long sentence"


@pytest.mark.parametrize("closes_cut", [False, True])
def test_stitching_keeps_every_sentence_once_across_windows(closes_cut):
    """windows() with a decode that transcribes perfectly (each sentence a word id, its times exact; a sentence
    the window's end cuts written as Whisper writes it: its start timestamp and no end): every sentence comes out
    once, in order, at its times, whatever window boundary it straddles. `closes_cut`: the model closes the cut
    sentence at the window's end instead, with only its first words (id + 500): that segment is decoded again from its
    start in the next window, so the whole sentence still comes out once."""
    from specdec.runtime.core.stats import Result, Stats
    from specdec.runtime.families.whisper.transcript import windows

    rate, window_s, step = 100, 10.0, 0.02
    speech = {"sampling_rate": rate, "n_samples": int(window_s * rate), "frames": int(window_s / step),
              "timestamps": {"begin": 1000, "count": 501}}
    rng = np.random.default_rng(0)
    sentences, at = [], 0.3
    for word in range(1, 40):                      # 39 sentences of 0.5 to 6 s with 0.2 to 0.8 s between them
        length = round(float(rng.uniform(0.5, 6.0)), 2)
        sentences.append((round(at, 2), round(at + length, 2), word))
        at += length + float(rng.uniform(0.2, 0.8))
    pcm = np.arange(int((at + 0.5) * rate), dtype=np.float32)       # each sample's value is its index

    def decode(window, stamps, seed):
        seek = int(window[0]) / rate
        ids = []
        for a, b, word in sentences:
            if a < seek - step or a - seek >= window.size / rate:      # (a timestamp rounds by up to a step)
                continue
            ids += [1000 + max(0, round((a - seek) / step)), word]
            if b - seek > window.size / rate:
                if closes_cut and window.size / rate - (a - seek) > 0.5:
                    ids[-1] += 500                                   # its first words, closed at the window's end
                    ids.append(1000 + round(window.size / rate / step))
                break                                                # cut: no end timestamp
            ids.append(1000 + round((b - seek) / step))
        return Result("", ids + [0], Stats(), "eos")

    found = [s for _, _, segs in windows(pcm, speech, decode, 0, 0, lambda ids: " ".join(map(str, ids)))
             for s in segs]
    assert [int(s.text) for s in found] == [w for _, _, w in sentences]
    for s, (a, b, _) in zip(found, sentences):
        assert abs(s.start - a) <= step and abs(s.end - b) <= step

"""Stage `speech-evaluate`: the bundled speech pair (models/speech) measured on held-out synthesized speech.

The pair is made into checkpoints (speech_pack.checkpoints: what users get) and exported with specdec-export into
the work directory; then, on this machine, one decoder:

* Short clips: the test split's clips (sentences no training clip holds; every voice and speed, and the voice and
  speed left out of training, HELD_OUT), spoken again by espeak-ng. Each clip is decoded greedily target-only
  (draft="none", gamma=0) and with the default (draft="auto", gamma="auto"), by turns; the two must give the same
  tokens (exactness). Word error rate of the transcript against the spoken text (lowercase, punctuation dropped),
  for the trained voices and for the held-out one apart; alpha; decoder time (all but the encoders) of each mode.
* Timestamps: the same clips with timestamps=True; each segment's start and end against the synthesized sentence
  boundaries.
* A long recording: test sentences read one after another with 0.2 to 0.8 s pauses (voices by turns) to LONG_S
  seconds, transcribed window by window; its WER and real-time factor; the peak resident memory of a process that
  transcribes the first minute against one that transcribes all of it. The same WAV file is also transcribed with
  Whisper's timestamp rule alone (windows not cut at pauses: runtime/families/whisper/transcript.py), to compare the
  rules on the same audio; `syntheses` > 1 does both again for other syntheses of the recording (seed xor 1, 2, ...),
  since this weak model's WER moves a few points with the synthesis.

Writes <work>/speech-eval/evaluation.json and prints a summary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .evaluate import edit_distance
from .speech_data import RATE, clip_plan, english_sentences, long_recording, speak, split_of, write_wav
from .speech_synth import HELD_OUT

LONG_S = 600
MAX_NEW_TOKENS = 128


def words(text: str) -> list:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def wer(pairs) -> float:
    """Word error rate over (reference, hypothesis) texts: edits / reference words."""
    e = n = 0
    for ref, hyp in pairs:
        e += edit_distance(words(ref), words(hyp))
        n += len(words(ref))
    return e / max(n, 1)


def export_pair(work: Path, pack_dir=None) -> Path:
    """The packed pair as checkpoints under work/speech-eval/pair, exported to work/speech-eval/export."""
    from .speech_pack import PACK, checkpoints

    root = work / "speech-eval"
    paths = checkpoints(root / "pair", pack_dir or PACK)
    export = root / "export"
    cmd = [sys.executable, "-m", "specdec.export.cli", "--target", str(paths["target"]), "--draft",
           str(paths["draft"]), "--export", str(export), "--gamma-max", "8", "--max-length", "160", "--force"]
    subprocess.run(cmd, check=True)
    return export


def test_clips(count: int, seed: int) -> list:
    sentences = [s for s in english_sentences() if split_of(s) == "test"]
    return clip_plan(sentences, "test", seed)[:count]


def evaluate(out_dir: str, work: str, threads: int = 2, seed: int = 0, clips: int = 500,
             long_s: float = LONG_S, pack_dir=None, syntheses: int = 1) -> dict:
    from specdec.runtime import SpeculativeDecoder

    work = Path(work)
    export = export_pair(work, pack_dir or Path(out_dir) / "speech")
    dec = SpeculativeDecoder.load(export, provider="cpu", threads=threads)
    plans = test_clips(clips, seed)
    bench_prompts(plans, work / "speech-eval" / "clips")
    rows, held = [], HELD_OUT[0]
    dec.generate(audio=speak(plans[0])[0], language="en", max_new_tokens=8)        # warm the sessions
    t0 = time.time()
    for n, plan in enumerate(plans):
        spoken = speak(plan)
        if spoken is None:
            continue
        pcm, segs, _ = spoken
        text = " ".join(t for _, _, t in segs)
        modes = [("none", 0), ("auto", "auto")] if n % 2 == 0 else [("auto", "auto"), ("none", 0)]
        got = {d: dec.generate(audio=pcm, language="en", draft=d, gamma=g, max_new_tokens=MAX_NEW_TOKENS)
               for d, g in modes}
        stamped = dec.generate(audio=pcm, language="en", timestamps=True, max_new_tokens=MAX_NEW_TOKENS)
        decoder_s = {d: r.stats.total_s - r.stats.encoder_s for d, r in got.items()}
        rows.append({"voice": plan["voice"].name, "rate": plan["voice"].rate, "held_out": plan["voice"].name == held,
                     "reference": text, "hypothesis": got["none"].text, "same": got["none"].token_ids ==
                     got["auto"].token_ids, "decoder_s": decoder_s, "tokens": len(got["none"].token_ids),
                     "proposed": got["auto"].stats.proposed, "accepted": got["auto"].stats.accepted,
                     "segments": [(s.start, s.end) for s in stamped.segments], "truth": [(a, b) for a, b, _ in segs]})
        if (n + 1) % 50 == 0:
            print(f"speech-evaluate: {n + 1}/{len(plans)} clips ({(time.time() - t0) / (n + 1):.2f} s a clip)",
                  flush=True)
    report = summary(rows)
    report["long"] = long_form(export, threads, seed, long_s)
    report["long_syntheses"] = [long_rules(export, threads, seed ^ k, long_s) for k in range(syntheses)]
    report["clips"] = len(rows)
    path = work / "speech-eval" / "evaluation.json"
    path.write_text(json.dumps({"summary": report, "rows": rows}, indent=1))
    print(json.dumps(report, indent=1), flush=True)
    return report


def bench_prompts(plans: list, folder: Path) -> Path:
    """The clips as 16-bit WAV files and a prompts file specdec-bench takes (`--prompts folder/prompts.jsonl`)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, plan in enumerate(plans):
        spoken = speak(plan)
        if spoken is None:
            continue
        write_wav(folder / f"{n:04d}.wav", spoken[0])
        lines.append(json.dumps({"audio": f"{n:04d}.wav", "reference": " ".join(t for _, _, t in spoken[1]),
                                 "task": "held-out voice" if plan["voice"].name == HELD_OUT[0] else "speech"}))
    (folder / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "prompts.jsonl"


def boundary_errors(rows) -> list:
    """|segment time - sentence boundary| for clips whose segment count matches the sentences'."""
    out = []
    for r in rows:
        if len(r["segments"]) == len(r["truth"]):
            for (a, b), (ta, tb) in zip(r["segments"], r["truth"]):
                out += [abs(a - ta), abs(b - tb) if b is not None else float("inf")]     # None: never closed
    return out


def summary(rows) -> dict:
    trained = [r for r in rows if not r["held_out"]]
    held = [r for r in rows if r["held_out"]]
    plain = sum(r["decoder_s"]["none"] for r in rows)
    auto = sum(r["decoder_s"]["auto"] for r in rows)
    errors = boundary_errors(rows)
    accepted, proposed = sum(r["accepted"] for r in rows), sum(r["proposed"] for r in rows)
    return {"wer_trained_voices": round(wer((r["reference"], r["hypothesis"]) for r in trained), 4),
            "wer_held_out_voice": round(wer((r["reference"], r["hypothesis"]) for r in held), 4) if held else None,
            "clips_trained_voices": len(trained), "clips_held_out_voice": len(held),
            "exact": sum(r["same"] for r in rows), "alpha": round(accepted / max(proposed, 1), 4),
            "decoder_ms_a_clip": {"target_only": round(1000 * plain / len(rows), 2),
                                  "default": round(1000 * auto / len(rows), 2)},
            "decoder_speedup": round(plain / auto, 3),
            "timestamps": {"segments_matched": len(errors) // 2,
                           "clips_matched": sum(len(r["segments"]) == len(r["truth"]) for r in rows),
                           "within_0.5_s": round(float(np.mean(np.array(errors) <= 0.5)), 4) if errors else None,
                           "median_s": round(float(np.median(errors)), 3) if errors else None}}


def long_form(export: Path, threads: int, seed: int, seconds: float) -> dict:
    """The long recording (written as a 16-bit WAV file) transcribed by a process of its own, as a user would pass
    it; its WER, real-time factor and peak resident memory, and the same for its first minute."""
    pcm, spans = long_recording(seconds, seed)
    out = {}
    for label, length in (("1 min", 60.0), ("full", pcm.size / RATE)):
        out[label] = _transcribed(export, threads, pcm, spans, length)
    out["rss_ratio_full_over_1_min"] = round(out["full"]["peak_rss_mb"] / out["1 min"]["peak_rss_mb"], 3)
    return out


def long_rules(export: Path, threads: int, seed: int, seconds: float) -> dict:
    """One synthesis of the long recording transcribed whole with the runtime's windows, and with Whisper's
    timestamp rule alone: WER, real-time factor and windows of each."""
    pcm, spans = long_recording(seconds, seed)
    return {"seed": seed, **{rule: {k: v for k, v in _transcribed(export, threads, pcm, spans, pcm.size / RATE,
                                                                   rule).items()
                                    if k in ("wer", "rtf", "windows", "seconds", "sentences")}
                             for rule in ("pauses", "timestamps")}}


def _transcribed(export: Path, threads: int, pcm: np.ndarray, spans: list, length: float, rule: str = "pauses"):
    cut = int(length * RATE)
    kept = [s for s in spans if s[1] * RATE <= cut]
    path = export.parent / f"long-{int(length)}s.wav"
    write_wav(path, pcm[:cut])
    cmd = [sys.executable, "-m", "specdec.models.speech_eval", str(export), str(path), str(threads), rule]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    reference = " ".join(s for _, _, s in kept)
    starts = [a for a, _, _ in got.pop("segments")]
    return {"seconds": round(length, 1), "sentences": len(kept), "wer": round(wer([(reference, got["text"])]), 4),
            "monotone": starts == sorted(starts), **{k: v for k, v in got.items() if k != "text"}}


def _long_child(export: str, wav: str, threads: int, rule: str) -> None:
    """One process: transcribe a WAV file with timestamps, print one JSON line (text, segments, time, memory,
    windows). `rule` "timestamps": windows not cut at pauses (Whisper's timestamp rule alone), to compare with."""
    import resource

    from specdec.runtime import SpeculativeDecoder
    from specdec.runtime.families.whisper import transcript

    if rule == "timestamps":
        transcript.PAUSE_S = 1e6                    # no quiet run is that long: every window by the timestamp rule
    windows, counted = [0], transcript.windows

    def counting(*args, **kwargs):
        for item in counted(*args, **kwargs):
            windows[0] += 1
            yield item

    import specdec.runtime.decoder as decoder_module

    decoder_module.windows = counting
    dec = SpeculativeDecoder.load(export, provider="cpu", threads=threads)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    res = dec.generate(audio=wav, language="en", timestamps=True, max_new_tokens=MAX_NEW_TOKENS)
    took = time.perf_counter() - t0
    seconds = os.path.getsize(wav) / 2 / RATE
    print(json.dumps({"text": res.text, "segments": [(s.start, s.end, s.text) for s in res.segments],
                      "rtf": round(took / seconds, 4), "peak_rss_mb": round(
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "rss_after_load_mb": round(base, 1), "windows_tokens": res.stats.new_tokens,
                      "windows": windows[0]}), flush=True)


if __name__ == "__main__":
    _long_child(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "pauses")

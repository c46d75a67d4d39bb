"""The speech pair's data (specdec-models speech-data): English sentences of the bundled corpus spoken by espeak-ng
(models/speech_synth.py), cut into clips of at most WINDOW_S seconds, and their log-mel features cached in shards.

- Sentences: the English lines of models/datastore/train-targets.txt.gz (the package synopses; German lines and
  lines with other scripts left out), 3 to 16 words, each once; split by the md5 of the sentence (90 / 5 / 5), so a
  sentence is in one split only.
- Clips: one to three consecutive sentences of a split with 0.2 to 0.8 s of silence between them, in one voice and
  speed (VOICES x SPEEDS by turns; the test split also has clips in HELD_OUT). Each clip records its segments
  (start, end, text) and words (start, word) in seconds: the timestamps to train and to measure against.
- Features: Whisper's log-mel spectrogram (transformers' WhisperFeatureExtractor, N_MELS bins, the clip padded to
  the window), float16, [clips, N_MELS, frames].
- Shards: `<work>/speech/<split>/shard-NNNNN.npz` (features) beside `.json` (texts, segments, words, voices), each
  written whole under a temporary name and renamed. A shard that exists is kept, so an interrupted run resumes where
  it stopped (with the settings that began it: settings.json; other settings are a one-line error). Each shard is
  made in a process of its own that has spoken nothing before (espeak-ng's samples depend on what its process spoke
  before), so a shard's contents depend only on its clips' plan: a shard made again, or by another number of
  workers, is byte for byte the same.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from .speech_synth import HELD_OUT, RATE, SPEEDS, VOICES, Voice, synthesize

WINDOW_S = 10                  # the encoder's window: clips are at most this long
N_MELS = 80
SHARD_CLIPS = 256
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datastore", "train-targets.txt.gz")
_GERMAN = frozenset("der die das und für mit von zu den dem des ein eine einer eines ist im auf aus bei nicht sich "
                    "werden wird zum zur über oder als auch".split())
_ENGLISH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ,.;:'()/+-]*$")


def english_sentences(path: str = CORPUS) -> list[str]:
    """The corpus's English lines of 3 to 16 words, each once, in the file's order."""
    if not os.path.exists(path):
        raise SpecdecError(f"the corpus {path} is missing", "check out models/datastore/ (it is committed)")
    seen, out = set(), []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            text = " ".join(line.split())
            words = text.lower().replace("(", " ").replace(")", " ").split()
            if not _ENGLISH.match(text) or not 3 <= len(words) <= 16 or _GERMAN.intersection(words):
                continue
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def split_of(sentence: str) -> str:
    bucket = int(hashlib.md5(sentence.encode()).hexdigest(), 16) % 100
    return "train" if bucket < 90 else "validation" if bucket < 95 else "test"


def clip_plan(sentences: list[str], split: str, seed: int) -> list[dict]:
    """The split's clips: consecutive sentences (1 to 3), the silences between them, and the voice."""
    rng = np.random.default_rng([seed, ("train", "validation", "test").index(split)])
    voices = [Voice(v, r) for r in SPEEDS for v in VOICES]
    if split == "test":
        voices.append(Voice(*HELD_OUT))
    plans, i = [], 0
    while i < len(sentences):
        take = int(rng.integers(1, 4))
        plans.append({"sentences": sentences[i:i + take], "gaps": rng.uniform(0.2, 0.8, take - 1).round(3).tolist(),
                      "voice": voices[len(plans) % len(voices)]})
        i += take
    return plans


def speak(plan: dict) -> tuple:
    """A planned clip: (pcm, segments [(start, end, text)], words [(start, word)]), cut to the whole sentences that
    fit the window; a sentence longer than the window by itself is left out (None when no sentence is left)."""
    pcm, segments, words, at = [], [], [], 0.0
    for k, sentence in enumerate(plan["sentences"]):
        speech = synthesize(sentence, plan["voice"])
        gap = plan["gaps"][k - 1] if k else 0.0
        if speech.seconds > WINDOW_S:
            continue                        # longer than the window alone (rare: a long spelled-out name)
        if segments and at + gap + speech.seconds > WINDOW_S:
            break
        gap = gap if segments else 0.0
        if gap:
            pcm.append(np.zeros(int(round(gap * RATE)), np.float32))
            at = sum(p.size for p in pcm) / RATE
        segments.append((round(at, 3), round(at + speech.seconds, 3), sentence))
        words += [(round(at + start, 3), word) for start, word in speech.words]
        pcm.append(speech.pcm)
        at = sum(p.size for p in pcm) / RATE
    return (np.concatenate(pcm), segments, words) if segments else None


def features(clips: list) -> np.ndarray:
    """Whisper's log-mel features of each clip padded to the window: [clips, N_MELS, frames] float16."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=N_MELS, sampling_rate=RATE, chunk_length=WINDOW_S)
    out = extractor([c.astype(np.float32) for c in clips], sampling_rate=RATE, return_tensors="np")
    return out["input_features"].astype(np.float16)


def build(work: str, clips: dict, seed: int = 0, shard_clips: int = SHARD_CLIPS, corpus: str = CORPUS,
          workers: int = 1, deadline: float | None = None, log=print) -> dict:
    """Write the shards of `clips` ({split: number of clips}) under work/speech; returns {split: shards there}. Shards
    that exist are kept. `workers`: how many processes make shards side by side (each shard in a fresh one, so the
    shards are the same whatever the number). `deadline` (a time.time()): no shard is begun after it (those begun
    are finished); the next call makes the rest."""
    if workers < 1:
        raise SpecdecError(f"--workers {workers} is not a process count", "pass 1 or more")
    sentences = english_sentences(corpus)
    by_split = {s: [t for t in sentences if split_of(t) == s] for s in ("train", "validation", "test")}
    written = {}
    for split, count in clips.items():
        if split not in by_split:
            raise SpecdecError(f"unknown split {split!r}", "use train, validation or test")
        plans = clip_plan(by_split[split], split, seed)[:count]
        folder = os.path.join(work, "speech", split)
        _same_settings(folder, {"clips": len(plans), "seed": seed, "shard_clips": shard_clips, "window_s": WINDOW_S,
                                "n_mels": N_MELS, "sentences": len(by_split[split])})
        shards = range(0, len(plans), shard_clips)
        todo = [(os.path.join(folder, f"shard-{n:05d}"), plans[first:first + shard_clips], seed)
                for n, first in enumerate(shards)]
        todo = [job for job in todo if not os.path.exists(job[0] + ".json")]   # renamed last: its shard is whole
        t0, count = time.time(), 0

        def made(stem):
            nonlocal count
            count += 1
            log(f"speech-data {split}: shard {int(stem[-5:]) + 1}/{len(shards)} ({count}/{len(todo)} made, "
                f"{(time.time() - t0) / count:.1f} s a shard)")

        def late() -> bool:
            return deadline is not None and time.time() > deadline

        _each_in_a_fresh_process(make_shard, todo, workers, late, made)
        written[split] = len(glob.glob(os.path.join(folder, "shard-*.json")))
        if written[split] < len(shards):
            log(f"speech-data {split}: {written[split]} of {len(shards)} shards by the deadline; the next run makes the "
                f"rest")
    return written


def _each_in_a_fresh_process(make, jobs: list, workers: int, late, made) -> None:
    """make(*job) for each job, each in a process of its own, at most `workers` at a time; none begun once late();
    made(result) as each ends. The processes fork from a server that imported what a shard needs (this module, scipy's
    resampler, transformers' feature extractor) but never spoke: every shard's espeak-ng starts from the same state,
    and a shard costs a fork, not the imports' two seconds. A process that fails raises its error here, one that dies
    (killed) a one-line error; the others are stopped either way."""
    import multiprocessing
    from multiprocessing.connection import wait

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__, "scipy.signal", "transformers.models.whisper.feature_extraction_whisper"])
    waiting, running = list(reversed(jobs)), {}
    try:
        while True:
            while waiting and len(running) < workers and not late():
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_one_job, args=(make, waiting.pop(), send), daemon=True)
                process.start()
                send.close()
                running[receive] = process
            if not running:
                return
            for receive in wait(list(running)):
                process = running.pop(receive)
                try:
                    ok, value = receive.recv()
                except EOFError:
                    process.join()
                    raise SpecdecError(f"a speech-data process ended without its shard (exit code {process.exitcode}"
                                       f"{', killed: out of memory?' if process.exitcode == -9 else ''})",
                                       "run again: the shards made are kept; fewer --workers if memory ran out")
                process.join()
                receive.close()
                if not ok:
                    raise value
                made(value)
    finally:
        for process in running.values():
            process.terminate()


def _one_job(make, job: tuple, send) -> None:
    try:
        said = (True, make(*job))
    except BaseException as err:       # sent back whole, raised in the parent
        said = (False, err)
    try:
        send.send(said)
    except Exception:                  # an error that does not pickle: its type and text
        send.send((False, RuntimeError(f"{type(said[1]).__name__}: {said[1]}")))
    send.close()


def make_shard(stem: str, plans: list, seed: int) -> str:
    """One shard: its planned clips spoken, their features and records written (_write); returns `stem`."""
    spoken = [(speak(p), p) for p in plans]
    spoken = [(clip, p) for clip, p in spoken if clip is not None]
    _write(stem, features([pcm for (pcm, _, _), _ in spoken]), {
        "window_s": WINDOW_S, "n_mels": N_MELS, "seed": seed,
        "clips": [{"seconds": round(pcm.size / RATE, 3), "segments": seg, "words": words,
                   "text": " ".join(t for _, _, t in seg), "voice": p["voice"].name, "rate": p["voice"].rate}
                  for (pcm, seg, words), p in spoken]})
    return stem


def _same_settings(folder: str, settings: dict) -> None:
    """A split's shards resume only with the settings that began them (settings.json, written first)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "settings.json")
    if os.path.exists(path):
        with open(path) as f:
            before = json.load(f)
        if before != settings:
            changed = ", ".join(f"{k} {before.get(k)} -> {v}" for k, v in settings.items() if before.get(k) != v)
            raise SpecdecError(f"the shards in {folder} were made with other settings ({changed})",
                               "use another --work-dir, or delete that folder to make them again")
        return
    with open(path + ".tmp", "w") as f:
        json.dump(settings, f)
    os.replace(path + ".tmp", path)


def _write(stem: str, feats: np.ndarray, info: dict) -> None:
    with open(stem + ".npz.tmp", "wb") as f:
        np.savez(f, features=feats)
    os.replace(stem + ".npz.tmp", stem + ".npz")
    with open(stem + ".json.tmp", "w") as f:
        json.dump(info, f)
    os.replace(stem + ".json.tmp", stem + ".json")


def run_speech_data(work: str, train: int, validation: int, test: int, seed: int = 0, workers: int = 1) -> None:
    done = build(work, {"train": train, "validation": validation, "test": test}, seed, workers=workers)
    print(f"speech-data: {done} shards of at most {SHARD_CLIPS} clips in {os.path.join(work, 'speech')}", flush=True)


def long_recording(seconds: float, seed: int) -> tuple:
    """(pcm, [(start, end, sentence)]) of test sentences read one after another with pauses, voices by turns."""
    sentences = [s for s in english_sentences() if split_of(s) == "test"]
    rng = np.random.default_rng([seed, 99])
    voices = [Voice(v, r) for r in SPEEDS for v in VOICES]
    pcm, spans, at = [], [], 0
    for k, sentence in enumerate(sentences):
        speech = synthesize(sentence, voices[k % len(voices)])
        if speech.seconds > WINDOW_S - 1:
            continue
        gap = np.zeros(int(rng.uniform(0.2, 0.8) * RATE), np.float32)
        spans.append((round((at + gap.size) / RATE, 3), round((at + gap.size + speech.pcm.size) / RATE, 3), sentence))
        pcm += [gap, speech.pcm]
        at += gap.size + speech.pcm.size
        if at >= seconds * RATE:
            break
    return np.concatenate(pcm), spans


def write_wav(path: Path, pcm: np.ndarray) -> None:
    from scipy.io import wavfile

    wavfile.write(str(path), RATE, (np.clip(pcm, -1, 1) * 32767).astype(np.int16))


EXAMPLE_S = 25          # the bundled example: three windows of the speech pair


def write_example(out: Path, seed: int = 0) -> Path:
    """models/speech/example.wav: test sentences read one after another (EXAMPLE_S seconds, three windows), and
    example.json: each sentence's start, end and text."""
    pcm, spans = long_recording(EXAMPLE_S, seed + 1)
    write_wav(Path(out) / "example.wav", pcm)
    (Path(out) / "example.json").write_text(json.dumps([{"start": a, "end": b, "text": t} for a, b, t in spans],
                                                       indent=1) + "\n")
    return Path(out) / "example.wav"

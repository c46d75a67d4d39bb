"""Transcripts with times, and audio longer than the encoder's window.

`segments(tokens, ...)`: a Whisper transcript's timestamp tokens read into Segment(start, end, text): each segment is
opened by a timestamp, closed by the next, and the text between them is its own; a segment the window cut (opened,
never closed) has `end` None.

`windows(pcm, ...)`: long audio, one window at a time. A window ends in a pause when its audio has one: the latest
stretch of at least PAUSE_S seconds of quiet (QUIET_DB below the window's loud frames) that begins after MIN_FILL of
the window and before MAX_FILL of it (or after MAX_FILL, when none does); the rest of the window is padded with
silence, as a short clip is, and the next window starts LEAD_S before the speech after the pause. Windows then hold
whole sentences with silence after them, as the clips a model is trained on do (WhisperX and faster-whisper's VAD
filter cut long audio at pauses for the same reason), and not more speech than those clips mostly held: a window
filled to its end makes a long transcript, where a small model is likelier to fall into repeating itself. On the
bundled pair's 10-minute recordings (four syntheses) this gave 41-44 % word error against 53-57 % for the timestamp
rule alone (the latest pause anywhere in the window: 47-57 %).
A window without such a pause (continuous speech, music, noise) is decoded whole and continued as Whisper's own
long-form transcription does: a model with timestamp tokens decodes each window with them; the window's complete
segments are kept and the next window starts where the last segment the window cut began. A last segment the model
closed within AGAIN_S of the window's end counts as cut too: models close a sentence the window cut often enough,
and the words after the window's end were then lost. When the window ended with a segment closed earlier, or the
cut segment began in its first MIN_ADVANCE_S, the next window starts at the window's end (a cut segment kept ends
there). A model without timestamp tokens gets the chunked fallback: the window cut at its quietest 20 ms in the last
QUIET_S seconds (the last quarter of a shorter window), so a cut falls between words where the audio has a pause;
one segment per window.

Each window is an ordinary request, decoded by the caller's `decode(pcm, timestamps, seed)` (the decoder's exact
speculative decoding, window by window: the same tokens as target-only decoding for the same window); the k-th window
is seeded with seed + k. Memory stays that of one window: the recording itself is the only thing of its length.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from ...core.errors import SpecdecError
from ...core.stats import Segment, SourceStats, Stats
from .prompt import time_step

QUIET_S = 2.0                 # the chunked fallback looks for its cut in the window's last seconds
FRAME_S = 0.02
MIN_WINDOW_S = 0.1            # audio left over shorter than this is not decoded (no word fits in it)
MIN_ADVANCE_S = 1.0           # a window moves on at least this far (a cut segment that starts sooner is kept)
AGAIN_S = 2.0                 # a last segment closed this close to the window's end is decoded again in the next
PAUSE_S = 0.25                # the shortest quiet a window ends in (espeak-ng's pauses inside a sentence are shorter)
MIN_FILL = 0.3                # ... and it begins after this part of the window
MAX_FILL = 0.7                # ... and, when one does, before this part
QUIET_DB = -35.0              # quiet: this far below the window's loud frames (its 95th percentile of 20 ms RMS) ...
FLOOR_DB = 6.0                # ... or within this of its quietest tenth (a noise floor), but at least
LOUD_GAP_DB = 20.0            # ... this far below its loud frames
LEAD_S = 0.1                  # a window starts this long before the speech after a pause
MAX_AUDIO_S = 4 * 3600        # the longest recording a request takes


def segments(tokens, begin: int, count: int, step: float, eos_id: int, decode, offset: float = 0.0) -> list:
    """The Segments of a window's generated tokens (timestamp ids begin .. begin+count-1, `step` seconds apart),
    their times shifted by `offset` seconds; text a timestamp does not open starts where the last segment ended."""
    out, start, text, last_end = [], None, [], 0.0
    for t in tokens:
        t = int(t)
        if t == eos_id:
            break
        if begin <= t < begin + count:
            time = round((t - begin) * step, 2)
            if start is None:
                start = time
            else:
                out.append(Segment(round(start + offset, 2), round(time + offset, 2), decode(text).strip(),
                                   tuple(text)))
                start, text, last_end = None, [], time
        else:
            if start is None:
                start = last_end
            text.append(t)
    if start is not None and text:
        out.append(Segment(round(start + offset, 2), None, decode(text).strip(), tuple(text)))
    return out


def windows(pcm: np.ndarray, speech: dict, decode, seed: int, eos_id: int, detokenize):
    """Yield (window's start in seconds, its Result, its Segments) for each window of `pcm` (module docstring).
    `decode(window_pcm, timestamps, seed)` returns a Result; `detokenize(ids)` is the tokenizer's decode."""
    rate, size = int(speech["sampling_rate"]), int(speech["n_samples"])
    if pcm.size > MAX_AUDIO_S * rate:
        limit = _span(MAX_AUDIO_S)
        raise SpecdecError(f"the audio is {_span(pcm.size / rate)} long, longer than the {limit} a request takes",
                           f"split the recording into parts of at most {limit} and transcribe each")
    stamps = speech.get("timestamps")
    step = time_step(speech)
    seek, k = 0, 0
    while pcm.size - seek >= MIN_WINDOW_S * rate or seek == 0:
        last = seek + size >= pcm.size
        pause = None if last else pause_cut(pcm[seek:seek + size + int(PAUSE_S * rate)], size, rate)
        if pause is not None:                  # the window ends in a pause: all of it is kept
            cut = seek + pause[0]
        elif stamps is None:                   # the chunked fallback
            cut = pcm.size if last else seek + quietest_cut(pcm[seek:seek + size], rate)
        else:                                  # the timestamp rule: the whole window, advance read from its segments
            cut = min(seek + size, pcm.size)
        result = decode(pcm[seek:cut], stamps is not None, seed + k)
        end = round(cut / rate, 2)
        advance = cut - seek if pause is None else max(pause[0], pause[1] - int(LEAD_S * rate))
        if stamps is None:
            found = [Segment(round(seek / rate, 2), end, result.text.strip(), tuple(result.token_ids))]
        else:
            found = segments(result.token_ids, int(stamps["begin"]), int(stamps["count"]), step,
                             eos_id, detokenize, seek / rate)
            if pause is None and found and not last and (found[-1].end is None or found[-1].end >= end - AGAIN_S):
                start = int(round((found[-1].start - seek / rate) * rate))
                if start >= MIN_ADVANCE_S * rate:     # the window cut this segment: the next window starts at it
                    found, advance = found[:-1], start
            found = [s if s.end is not None else Segment(s.start, end, s.text, s.token_ids) for s in found]
        yield seek / rate, result, found
        seek += advance
        k += 1
        if last or seek >= pcm.size:
            return


def pause_cut(audio: np.ndarray, size: int, rate: int):
    """Where a window of `size` samples ends in a pause: (cut, resume) in samples from the window's start, or None.
    `audio`: the window and PAUSE_S seconds after it (a pause may run past the window's end). The pause is the
    latest run of quiet 20 ms frames at least PAUSE_S long that begins after MIN_FILL of the window and before
    MAX_FILL of it, or, when none does, before its end; the cut is PAUSE_S / 2 into it (or the window's end),
    `resume` where the speech after it begins (the first loud frame after the cut; the end of `audio` when none
    is)."""
    frame = int(FRAME_S * rate)
    n = audio.size // frame
    if n == 0 or audio.size <= size:
        return None
    rms = np.sqrt(np.square(audio[:n * frame].reshape(n, frame), dtype=np.float64).mean(axis=1))
    loud, floor = np.percentile(rms[:size // frame], [95, 10])
    threshold = max(min(max(loud * 10 ** (QUIET_DB / 20), floor * 10 ** (FLOOR_DB / 20)),
                        loud * 10 ** (-LOUD_GAP_DB / 20)), 1e-5)
    quiet = np.concatenate([[False], rms < threshold, [False]])
    edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))      # (begin, end) frame pairs of the quiet runs
    need, first = int(round(PAUSE_S / FRAME_S)), int(MIN_FILL * size) // frame
    runs = [(b, e) for b, e in edges.reshape(-1, 2).tolist() if e - b >= need and first <= b and b * frame < size]
    if not runs:
        return None
    begin, end = ([r for r in runs if r[0] * frame < MAX_FILL * size] or runs)[-1]
    cut = min((begin + need // 2) * frame, size)
    resume = end * frame if end < n else audio.size
    return cut, max(cut, resume)


def _span(seconds: float) -> str:
    """A duration as people say it: 3 s, 2 min 5.5 s, 4 h 1 s (never rounded to the limit it is compared with)."""
    if seconds < 60:
        return f"{seconds:.4g} s"
    hours, rest = divmod(seconds, 3600)
    minutes, left = divmod(rest, 60)
    parts = [f"{int(hours)} h"] * bool(hours) + [f"{int(minutes)} min"] * bool(minutes)
    return " ".join(parts + [f"{left:.1f}".removesuffix(".0") + " s"] * (left >= 0.05))


def quietest_cut(window: np.ndarray, rate: int) -> int:
    """Where the chunked fallback cuts a full window: the middle of its quietest 20 ms frame in the last QUIET_S
    seconds, or the last quarter of a shorter window (samples from the window's start: a window always moves on by
    at least three quarters of its length)."""
    frame = int(FRAME_S * rate)
    tail_start = window.size - min(int(QUIET_S * rate), window.size // 4)
    tail = window[tail_start:tail_start + (window.size - tail_start) // frame * frame].reshape(-1, frame)
    if tail.shape[0] == 0:
        return window.size
    quiet = int(np.argmin(np.square(tail, dtype=np.float64).mean(axis=1)))
    return tail_start + quiet * frame + frame // 2


def merged(stats: list) -> Stats:
    """One Stats for a recording: every window's counts and seconds added up."""
    total = Stats()
    for s in stats:
        for f in fields(Stats):
            if "unit" in f.metadata:
                setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
        for name, src in s.sources.items():
            mine = total.sources.setdefault(name, SourceStats())
            for f in fields(SourceStats):
                setattr(mine, f.name, getattr(mine, f.name) + getattr(src, f.name))
    return total

"""Transcripts with times, and audio longer than the encoder's window.

`segments(tokens, ...)`: a Whisper transcript's timestamp tokens read into Segment(start, end, text): each segment is
opened by a timestamp, closed by the next, and the text between them is its own; a segment the window cut (opened,
never closed) has `end` None.

`windows(pcm, ...)`: long audio, one window at a time, as Whisper's own long-form transcription does it. A model with
timestamp tokens decodes each window with them; the window's complete segments are kept and the next window starts
where the last segment the window cut began. A last segment the model closed within AGAIN_S of the window's end
counts as cut too: models close a sentence the window cut often enough, and the words after the window's end were
then lost (on the bundled pair's 10-minute recordings, 6 to 8 points of WER). When the window ended with a segment
closed earlier, or the cut segment began in its first MIN_ADVANCE_S, the next window starts at the window's end (a
cut segment kept ends there).
A model without timestamp tokens gets the chunked fallback: consecutive windows, each cut at its quietest 20 ms in
the last QUIET_S seconds (the last quarter of a shorter window), so a cut falls between words where the audio has a
pause; one segment per window.

Each window is an ordinary request, decoded by the caller's `decode(pcm, timestamps, seed)` (the decoder's exact
speculative decoding, window by window: the same tokens as target-only decoding for the same window); the k-th window
is seeded with seed + k. Memory stays that of one window: the recording itself is the only thing of its length.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..core.errors import SpecdecError
from ..core.stats import SourceStats, Stats
from .speech import time_step

QUIET_S = 2.0                 # the chunked fallback looks for its cut in the window's last seconds
FRAME_S = 0.02
MIN_WINDOW_S = 0.1            # audio left over shorter than this is not decoded (no word fits in it)
MIN_ADVANCE_S = 1.0           # a window moves on at least this far (a cut segment that starts sooner is kept)
AGAIN_S = 2.0                 # a last segment closed this close to the window's end is decoded again in the next
MAX_AUDIO_S = 4 * 3600        # the longest recording a request takes


@dataclass(frozen=True)
class Segment:
    """A stretch of the transcript: seconds from the start of the audio, and its text."""
    start: float
    end: float | None
    text: str
    token_ids: tuple = ()


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
        if stamps is None:
            cut = pcm.size if last else seek + quietest_cut(pcm[seek:seek + size], rate)
            result = decode(pcm[seek:cut], False, seed + k)
            found = [Segment(round(seek / rate, 2), round(cut / rate, 2), result.text.strip(),
                             tuple(result.token_ids))]
            advance = cut - seek
        else:
            result = decode(pcm[seek:seek + size], True, seed + k)
            found = segments(result.token_ids, int(stamps["begin"]), int(stamps["count"]), step,
                             eos_id, detokenize, seek / rate)
            advance = size
            window_end = round(min(seek + size, pcm.size) / rate, 2)
            if found and not last and (found[-1].end is None or found[-1].end >= window_end - AGAIN_S):
                start = int(round((found[-1].start - seek / rate) * rate))
                if start >= MIN_ADVANCE_S * rate:     # the window cut this segment: the next window starts at it
                    found, advance = found[:-1], start
            found = [s if s.end is not None else Segment(s.start, window_end, s.text, s.token_ids) for s in found]
        yield seek / rate, result, found
        seek += advance
        k += 1
        if last or seek >= pcm.size:
            return


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.4g} h" if seconds >= 3600 else f"{seconds:.4g} s"


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

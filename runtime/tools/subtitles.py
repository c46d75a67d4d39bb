"""A transcript's segments as subtitles: SubRip (.srt), WebVTT (.vtt), or lines of text with their times.

    srt(result.segments)     # "1\n00:00:00,000 --> 00:00:03,950\nUseful template functions\n\n2\n..."
    vtt(result.segments)     # "WEBVTT\n\n00:00:00.000 --> 00:00:03.950\nUseful template functions\n\n..."
    lines(result.segments)   # "[0.00 --> 3.95] Useful template functions\n..."

A cue's text is the segment's with its line breaks made spaces (a blank line would end the cue); a segment with no
text is left out; a cue's end is never before its start.
"""

from __future__ import annotations


def clock(seconds: float, mark: str = ",") -> str:
    """hh:mm:ss,mmm (SubRip; WebVTT: mark ".")."""
    ms = max(0, int(round(seconds * 1000)))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{mark}{ms:03d}"


def _cues(segments):
    for s in segments:
        text = " ".join(s.text.split())
        if text:
            end = s.start if s.end is None else max(s.end, s.start)
            yield s.start, end, text


def srt(segments) -> str:
    return "".join(f"{i}\n{clock(a)} --> {clock(b)}\n{text}\n\n" for i, (a, b, text) in enumerate(_cues(segments), 1))


def vtt(segments) -> str:
    return "WEBVTT\n\n" + "".join(f"{clock(a, '.')} --> {clock(b, '.')}\n{text}\n\n" for a, b, text in _cues(segments))


def lines(segments) -> str:
    return "".join(f"[{a:.2f} --> {b:.2f}] {text}\n" for a, b, text in _cues(segments))

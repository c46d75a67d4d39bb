"""specdec-generate's part of the speech family (a Whisper export): its flags (--audio, --language, --task,
--timestamps, and the subtitle formats of --format), their reading into generate() keywords, and its output: the
transcript's segments in the JSON object, as lines with their times, or as subtitles (subtitles.py)."""

from __future__ import annotations

import argparse

from ..core.errors import SpecdecError
from .subtitles import lines, srt, vtt

# what the prompt's help and the "pass either" error say of this family's input
INSTEAD = "a Whisper export takes --audio instead"
INPUT = "--audio FILE.wav (for a Whisper export)"

# the --format values it adds after text and json, and what --format's help says of them and of text
FORMATS = ("srt", "vtt")
TEXT_FORMAT = "with --timestamps one line per segment"
FORMATS_HELP = "subtitles: srt or vtt (these imply --timestamps)"

# The runtime's errors speak its Python API; from the command they speak its flags (whole phrases, replaced before
# each keyword is named by its flag).
PHRASES = (("pass audio= (a float32 16 kHz array or a WAV file's path)", "pass --audio FILE.wav (16 kHz)"),
           ("audio, language, task and timestamps are for Whisper exports",
            "--audio, --language, --task and --timestamps are for Whisper exports"),
           ("or None to detect it", "or leave out --language to detect it"))


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audio", metavar="FILE.wav", help="a Whisper export: the 16 kHz WAV file to transcribe")
    p.add_argument("--language", help="a Whisper export: the audio's language code, e.g. en (default: detected)")
    p.add_argument("--task", choices=("transcribe", "translate"),
                   help="a Whisper export: transcribe (the default) or translate into English")
    p.add_argument("--timestamps", action="store_true",
                   help="a Whisper export with timestamp tokens: segments with start and end times")


def given(args) -> bool:
    """Whether the command line gives this family's input (--audio), which takes the place of a prompt."""
    return args.audio is not None


def _timestamps(args) -> bool:
    return args.timestamps or args.format in FORMATS


def keywords(args) -> dict:
    """The generate() keywords of its flags; a one-line SpecdecError for a flag of its that has no --audio, or a
    subtitle format with --stream. args.json already holds --format json."""
    timestamps = _timestamps(args)
    if args.audio is None and (timestamps or args.format != "text" and not args.json):
        raise SpecdecError(f"--{'timestamps' if args.timestamps else 'format ' + args.format} is for transcripts",
                           "pass --audio FILE.wav with a Whisper export, or leave it out")
    if args.audio is None and (args.language or args.task):
        flag = "--language" if args.language else "--task"
        raise SpecdecError(f"{flag} is for transcripts",
                           f"pass --audio FILE.wav with a Whisper export, or leave out {flag}")
    if args.stream and args.format in FORMATS:
        raise SpecdecError(f"--format {args.format} prints the whole transcript at its end", "leave out --stream")
    found = {"audio": args.audio, "language": args.language, "task": args.task} if args.audio else {}
    if timestamps:
        found["timestamps"] = True
    return found


def json_fields(args, res) -> dict:
    """Its keys of the --json object: the segments, with --timestamps."""
    return {"segments": [{"start": s.start, "end": s.end, "text": s.text} for s in res.segments]} \
        if _timestamps(args) else {}


def output(args, res) -> str | None:
    """What it prints of a Result in place of its text (the segments as lines with their times, or subtitles), or
    None when the text is printed."""
    if not _timestamps(args):
        return None
    return (srt if args.format == "srt" else vtt if args.format == "vtt" else lines)(res.segments)

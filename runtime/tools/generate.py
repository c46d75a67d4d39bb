"""`specdec-generate`: run an export directory on a prompt (or, for a Whisper export, a WAV file) and print the
output and one stats line (with --num-return-sequences N > 1: the N best beams, numbered, each with its score)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..core import options
from ..core.errors import OneLineParser, SpecdecError, run_cli
from ..core.params import PARAMETERS, add_flags, from_flags
from .subtitles import lines, srt, vtt


RENAMED = {"--engine": "--export"}     # earlier flag names, accepted for one release
FORMATS = ("text", "json", "srt", "vtt")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="specdec-generate", renamed=RENAMED,
                      description="Exact speculative decoding with an export from specdec-export.")
    p.add_argument("text", nargs="?", help="the prompt, e.g. 'translate English to German: The house is small.' "
                   "(a Whisper export takes --audio instead)")
    p.add_argument("--audio", metavar="FILE.wav", help="a Whisper export: the 16 kHz WAV file to transcribe")
    p.add_argument("--language", help="a Whisper export: the audio's language code, e.g. en (default: detected)")
    p.add_argument("--task", choices=("transcribe", "translate"),
                   help="a Whisper export: transcribe (the default) or translate into English")
    p.add_argument("--timestamps", action="store_true",
                   help="a Whisper export with timestamp tokens: segments with start and end times")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (the default; with --timestamps one line per segment), json (as --json), or "
                        "subtitles: srt or vtt (these imply --timestamps)")
    p.add_argument("--export", default="exported", metavar="DIR", help="the export directory (default: ./exported)")
    options.add_flags(p, "generate")     # one flag per load option it takes, from its declaration
    add_flags(p)     # one flag per request parameter, from its declaration (runtime/core/params.py)
    p.add_argument("--stream", action="store_true", help="print text as soon as it is accepted (not with beams)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text and a stats line")
    return p


def sources_line(stats) -> str:
    """Each source's tokens and rounds with its alpha, the chance that one guess is kept (accepted / (accepted +
    rejections): it does not fall with gamma as kept/proposed does); then each chain's lower level: how many of
    its guesses the model above it (not the target) kept."""
    parts = [f"{name}: {s.tokens} tokens in {s.rounds} rounds" + (f", alpha (per guess) {s.alpha:.2f}"
                                                                 if s.proposed else "")
             for name, s in sorted(stats.sources.items()) if not name.endswith(">")]
    parts += [f"{name[:-1]} (a chain's lower level): {s.accepted}/{s.proposed} guesses kept by the model above it"
              for name, s in sorted(stats.sources.items()) if name.endswith(">")]
    return "sources: " + "; ".join(parts)


def stats_line(stats, provider: str) -> str:
    """Two lines: the request's totals (kept/proposed: Stats.acceptance_rate, the share of all guesses kept) and
    sources_line."""
    ms = stats.total_s * 1000
    return (f"[{provider}] {stats.new_tokens} tokens in {ms:.1f} ms ({ms / max(stats.new_tokens, 1):.2f} ms/token), "
            f"target calls {stats.target_calls}, draft calls {stats.draft_calls}, "
            f"kept/proposed {stats.accepted}/{stats.proposed} = {stats.acceptance_rate:.2f}, "
            f"{stats.tokens_per_target_call:.2f} tokens/target call; time: encoder {stats.encoder_s * 1000:.1f} ms, "
            f"draft runs {stats.draft_s * 1000:.1f}, target runs {stats.target_s * 1000:.1f}, "
            f"host {stats.host_s * 1000:.1f}; {stats.ort_runs} onnxruntime runs\n" + sources_line(stats))


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if (args.text is None) == (args.audio is None):      # before the export is loaded
        raise SpecdecError("pass either a prompt text or --audio FILE.wav (for a Whisper export)",
                           "e.g. specdec-generate 'translate English to German: Hello.'")
    from ..decoder import SpeculativeDecoder

    dec = SpeculativeDecoder.load(args.export, options.LoadOptions.from_args(args, "generate"))
    params = from_flags(args)
    args.json = args.json or args.format == "json"
    timestamps = args.timestamps or args.format in ("srt", "vtt")
    if args.audio is None and (timestamps or args.format != "text" and not args.json):
        raise SpecdecError(f"--{'timestamps' if args.timestamps else 'format ' + args.format} is for transcripts",
                           "pass --audio FILE.wav with a Whisper export, or leave it out")
    if args.audio is None and (args.language or args.task):
        flag = "--language" if args.language else "--task"
        raise SpecdecError(f"{flag} is for transcripts",
                           f"pass --audio FILE.wav with a Whisper export, or leave out {flag}")
    if args.stream and args.format in ("srt", "vtt"):
        raise SpecdecError(f"--format {args.format} prints the whole transcript at its end", "leave out --stream")
    speech = {"audio": args.audio, "language": args.language, "task": args.task} if args.audio else {}
    if timestamps:
        speech["timestamps"] = True
    if args.stream and params.num_beams > 1:
        raise SpecdecError("--stream cannot show a beam search: every beam may still lose until the search ends",
                           "leave out --stream with --num-beams > 1")
    if args.stream and not args.json:
        piece = None
        for piece in dec.stream(args.text, params=params, **speech):
            print(piece.text, end="", flush=True)
        print()
        print(stats_line(piece.stats, dec.provider), file=sys.stderr)   # the last piece holds the request's stats
        return 0
    res = dec.generate(args.text, params=params, **speech)
    scores = res.scores or [None] * len(res.sequences)      # no beam score without beams
    if args.json:
        print(json.dumps({"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason,
                          "sequences": [{"text": dec.decode(seq), "token_ids": seq, "score": score}
                                        for seq, score in zip(res.sequences, scores)],
                          **({"segments": [{"start": s.start, "end": s.end, "text": s.text} for s in res.segments]}
                             if timestamps else {}),
                          "provider": dec.provider, "stats": res.stats.as_dict()}))
    elif args.format in ("srt", "vtt") or timestamps:
        print((srt if args.format == "srt" else vtt if args.format == "vtt" else lines)(res.segments), end="")
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    elif len(res.sequences) > 1:
        for i, (seq, score) in enumerate(zip(res.sequences, scores), 1):
            print(f"{i}. [{score:.4f}] {dec.decode(seq)}")
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    else:
        print(res.text)
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    return 0


# The runtime's errors speak its Python API (audio=, input_ids, top_p, temperature=0); from this command they speak
# its flags. Whole phrases first, then each keyword the command has a flag for.
PHRASES = (("pass audio= (a float32 16 kHz array or a WAV file's path)", "pass --audio FILE.wav (16 kHz)"),
           ("audio, language, task and timestamps are for Whisper exports",
            "--audio, --language, --task and --timestamps are for Whisper exports"),
           ("a prompt text or input_ids", "a prompt text"),
           ("or None to detect it", "or leave out --language to detect it"))
FLAGS = {**{declared.name: declared.flag for declared in PARAMETERS},
         **{d.name: d.flag for d in options.OPTIONS if "generate" in d.surfaces},
         **{name: "--" + name.replace("_", "-") for name in ("audio", "language", "task", "timestamps")}}


def in_flags(text: str) -> str:
    """A runtime error's text as this command's user reads it: keyword=value as --flag value, a snake_case keyword
    as its --flag, and a keyword that starts the message or follows "leave out" as its --flag."""
    for python, cli in PHRASES:
        text = text.replace(python, cli)

    def assigned(m):
        value = m[2].strip("'\"")
        return m[0] if m[1] not in FLAGS else FLAGS[m[1]] + ("" if value in ("", "True") else f" {value}")

    text = re.sub(r"(?<![-\w.])(\w+)=('[^']*'|\"[^\"]*\"|[^\s,;)]*)", assigned, text)
    text = re.sub(r"(?<![-\w.'\"])([a-z]+(?:_[a-z]+)+)(?![-\w'\"])", lambda m: FLAGS.get(m[1], m[0]), text)
    return re.sub(r"(^|\bleave out )([a-z]+)\b(?!-)", lambda m: m[1] + FLAGS.get(m[2], m[2]), text)


def _main_in_flags(argv) -> int:
    try:
        return _main(argv)
    except SpecdecError as err:
        raise type(err)(in_flags(err.problem), in_flags(err.fix) if err.fix else None) from None


def main(argv=None) -> int:
    return run_cli(_main_in_flags, argv)


if __name__ == "__main__":
    sys.exit(main())

"""`specdec-generate`: run an export directory on a prompt (or on the input an export of another model family takes,
such as a WAV file) and print the output and one stats line (with --num-return-sequences N > 1: the N best beams,
numbered, each with its score). Each family other than text adds its flags, their reading and its output from its
own module beside this one (FAMILIES)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..core import options
from ..core.errors import OneLineParser, SpecdecError, run_cli
from ..core.params import PARAMETERS, add_flags, from_flags
from ..families import INPUTS
from . import speech

# the command's part of each model family other than text: a module with its flags (add_flags), what the prompt's
# help and the "pass either" error say of its input (INSTEAD, INPUT), whether the command line gives that input
# (given), the generate() keywords of its flags (keywords), its --format values (FORMATS, with their help and what
# the text format does for it), its keys of the JSON object (json_fields), what it prints in place of the text
# (output) and the phrases of the runtime's errors in its flags' words (PHRASES)
FAMILIES = (speech,)

RENAMED = {"--engine": "--export"}     # earlier flag names, accepted for one release
FORMATS = ("text", "json", *(name for family in FAMILIES for name in family.FORMATS))


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="specdec-generate", renamed=RENAMED,
                      description="Exact speculative decoding with an export from specdec-export.")
    p.add_argument("text", nargs="?", help="the prompt, e.g. 'translate English to German: The house is small.'"
                   + "".join(f" ({family.INSTEAD})" for family in FAMILIES))
    for family in FAMILIES:
        family.add_flags(p)
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (the default" + "".join(f"; {family.TEXT_FORMAT}" for family in FAMILIES)
                        + "), json (as --json)" + "".join(f", or {family.FORMATS_HELP}" for family in FAMILIES))
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
    parts = [f"{name}: {_count(s.tokens, 'token')} in {_count(s.rounds, 'round')}"
             + (f", alpha (per guess) {s.alpha:.2f}" if s.proposed else "")
             for name, s in sorted(stats.sources.items()) if not name.endswith(">")]
    parts += [f"{name[:-1]} (a chain's lower level): {s.accepted}/{s.proposed} guesses kept by the model above it"
              for name, s in sorted(stats.sources.items()) if name.endswith(">")]
    return "sources: " + "; ".join(parts)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


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
    if (args.text is None) != (sum(family.given(args) for family in FAMILIES) == 1):   # before the export is loaded
        raise SpecdecError("pass either a prompt text or " + " or ".join(family.INPUT for family in FAMILIES),
                           "e.g. specdec-generate 'translate English to German: Hello.'")
    from ..decoder import SpeculativeDecoder

    dec = SpeculativeDecoder.load(args.export, options.LoadOptions.from_args(args, "generate"))
    params = from_flags(args)
    args.json = args.json or args.format == "json"
    keywords = {}
    for family in FAMILIES:
        keywords.update(family.keywords(args))
    if args.stream and params.num_beams > 1:
        raise SpecdecError("--stream cannot show a beam search: every beam may still lose until the search ends",
                           "leave out --stream with --num-beams > 1")
    if args.stream and args.json:
        raise SpecdecError("--stream prints the text as it is accepted and --json one object at the end",
                           "pass one of them")
    if args.stream:
        piece = None
        for piece in dec.stream(args.text, params=params, **keywords):
            print(piece.text, end="", flush=True)
        print()
        print(stats_line(piece.stats, dec.provider), file=sys.stderr)   # the last piece holds the request's stats
        return 0
    res = dec.generate(args.text, params=params, **keywords)
    scores = res.scores or [None] * len(res.sequences)      # no beam score without beams
    printed = next((out for family in FAMILIES if (out := family.output(args, res)) is not None), None)
    if args.json:
        print(json.dumps({"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason,
                          "sequences": [{"text": dec.decode(seq), "token_ids": seq, "score": score}
                                        for seq, score in zip(res.sequences, scores)],
                          **{key: value for family in FAMILIES for key, value in family.json_fields(args, res).items()},
                          "provider": dec.provider, "stats": res.stats.as_dict()}))
    elif printed is not None:
        print(printed, end="")
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    elif len(res.sequences) > 1:
        for i, (seq, score) in enumerate(zip(res.sequences, scores), 1):
            print(f"{i}. [{score:.4f}] {dec.decode(seq)}")
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    else:
        print(res.text)
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    return 0


# The runtime's errors speak its Python API (input_ids, top_p, temperature=0, a family's keywords); from this command
# they speak its flags. Whole phrases first (the families' own, then the command's), then each keyword the command
# has a flag for (a family's input keywords: --keyword).
PHRASES = (*(phrase for family in FAMILIES for phrase in family.PHRASES),
           ("a prompt text or input_ids", "a prompt text"))
FLAGS = {**{declared.name: declared.flag for declared in PARAMETERS},
         **{d.name: d.flag for d in options.OPTIONS if "generate" in d.surfaces},
         **{name: "--" + name.replace("_", "-") for name in INPUTS}}


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

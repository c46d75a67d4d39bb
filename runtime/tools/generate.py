"""`specdec-generate`: run an export directory on a prompt and print the output and one stats line (with
--num-return-sequences N > 1: the N best beams, numbered, each with its score)."""

from __future__ import annotations

import argparse
import json
import sys

from ..core.errors import SpecdecError, run_cli


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """A bad command line is one line on stderr and exit status 2, like every other error (no usage block)."""
        self.exit(2, f"error: {message}; see {self.prog} --help.\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="specdec-generate",
                description="Exact speculative decoding with an export from specdec-export.")
    p.add_argument("text", help="the prompt, e.g. 'translate English to German: The house is small.'")
    p.add_argument("--engine", default="exported", help="export directory (default: ./exported)")
    p.add_argument("--provider", default="auto", choices=("auto", "cpu", "cuda", "tensorrt"))
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per model (0: onnxruntime's default)")
    p.add_argument("--gamma", type=_gamma, default="auto",
                   help="guesses per target call: auto (default: chosen each round from measured acceptance and "
                        "costs), or 0 .. the export's gamma_max (0 = target only)")
    p.add_argument("--draft", default="auto",
                   help="auto (default: the best of none, lookup, draft and lookup,draft each round), none, lookup "
                        "(copy from the source and the output so far), draft (the draft model), another draft model "
                        "of the export, or a chain lowest level first, e.g. lookup,draft")
    p.add_argument("--datastore", metavar="PATH",
                   help="the datastore the lookup searches (default: the export's own, if any; 'none': no datastore)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--lenience", type=float, default=1.0,
                   help="in (0, 1]; 1 = exact (default). Lower keeps more guesses (paper A.5): at temperature > 0 q "
                        "is multiplied by l; at temperature 0 a guess x is kept iff p(x) >= l * max p")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--min-new-tokens", type=int, default=0, help="no EOS before this many tokens (default 0)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0,
                   help="> 0: no n-gram of this size occurs twice in the output (default 0: off)")
    beams = p.add_argument_group("beam search (greedy only; transformers' semantics)")
    beams.add_argument("--num-beams", type=int, default=1,
                       help="1 (default): no beam search; 2..16: beam search over that many beams. Speculates with a "
                            "draft model (--draft auto, none or a model name; --gamma auto or fixed); the result is "
                            "target-only beam search's")
    beams.add_argument("--length-penalty", type=float, default=1.0,
                       help="a finished beam scores sum log p / length ** this (default 1; > 0 favours longer "
                            "outputs, < 0 shorter)")
    beams.add_argument("--early-stopping", default="false", metavar="{true,false,never}",
                       help="true: stop once num_beams beams have finished; false (default): also stop when no "
                            "running beam can beat them (a heuristic); never: only when none can at any length")
    beams.add_argument("--num-return-sequences", type=int, default=1,
                       help="print the best N beams (1..num_beams), best first, each with its score (default 1)")
    p.add_argument("--stream", action="store_true", help="print text as soon as it is accepted (not with beams)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text and a stats line")
    return p


EARLY_STOPPING = {"true": True, "false": False, "never": "never"}


def _early_stopping(text: str):
    try:
        return EARLY_STOPPING[text.lower()]
    except KeyError:
        raise SpecdecError(f"--early-stopping must be true, false or never (got {text!r})") from None


def _gamma(text: str):
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer (got {text!r})") from None


def sources_line(stats) -> str:
    parts = [f"{name}: {s.tokens} tokens in {s.rounds} rounds" + (f", alpha {s.alpha:.2f}" if s.proposed else "")
             for name, s in sorted(stats.sources.items()) if not name.endswith(">")]
    parts += [f"{name[:-1]} checked by the level above: {s.accepted}/{s.proposed} kept"
              for name, s in sorted(stats.sources.items()) if name.endswith(">")]
    return "sources: " + "; ".join(parts)


def stats_line(stats, provider: str) -> str:
    ms = stats.total_s * 1000
    return (f"[{provider}] {stats.new_tokens} tokens in {ms:.1f} ms ({ms / max(stats.new_tokens, 1):.2f} ms/token), "
            f"target calls {stats.target_calls}, draft calls {stats.draft_calls}, "
            f"accepted {stats.accepted}/{stats.proposed} (alpha {stats.acceptance_rate:.2f}), "
            f"{stats.tokens_per_target_call:.2f} tokens/target call; time: encoder {stats.encoder_s * 1000:.1f} ms, "
            f"draft runs {stats.draft_s * 1000:.1f}, target runs {stats.target_s * 1000:.1f}, "
            f"host {stats.host_s * 1000:.1f}; {stats.ort_runs} onnxruntime runs\n" + sources_line(stats))


def _main(argv) -> int:
    args = parser().parse_args(argv)
    from ..loading.datastore import load_option
    from ..decoder import SpeculativeDecoder
    from ..core.params import Params

    dec = SpeculativeDecoder.load(args.engine, provider=args.provider, threads=args.threads,
                                  datastore=load_option(args.datastore))
    params = Params(max_new_tokens=args.max_new_tokens, gamma=args.gamma, draft=args.draft,
                    temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, lenience=args.lenience, seed=args.seed,
                    num_beams=args.num_beams, length_penalty=args.length_penalty,
                    early_stopping=_early_stopping(args.early_stopping),
                    num_return_sequences=args.num_return_sequences, min_new_tokens=args.min_new_tokens,
                    no_repeat_ngram_size=args.no_repeat_ngram_size)
    if args.stream and params.num_beams > 1:
        raise SpecdecError("--stream cannot show a beam search: every beam may still lose until the search ends",
                           "leave out --stream with --num-beams > 1")
    if args.stream and not args.json:
        piece = None
        for piece in dec.stream(args.text, params=params):
            print(piece.text, end="", flush=True)
        print()
        print(stats_line(piece.stats, dec.provider), file=sys.stderr)   # the last piece holds the request's stats
        return 0
    res = dec.generate(args.text, params=params)
    scores = res.scores or [None] * len(res.sequences)      # no beam score without beams
    if args.json:
        print(json.dumps({"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason,
                          "sequences": [{"text": dec.decode(seq), "token_ids": seq, "score": score}
                                        for seq, score in zip(res.sequences, scores)],
                          "provider": dec.provider, "stats": res.stats.as_dict()}))
    elif len(res.sequences) > 1:
        for i, (seq, score) in enumerate(zip(res.sequences, scores), 1):
            print(f"{i}. [{score:.4f}] {dec.decode(seq)}")
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    else:
        print(res.text)
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

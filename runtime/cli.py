"""`specdec-generate`: run an export directory on a prompt and print the output and one stats line."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import run_cli


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdec-generate",
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
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--lenience", type=float, default=1.0,
                   help="in (0, 1]; 1 = exact (default). Lower keeps more guesses (paper A.5): at temperature > 0 q "
                        "is multiplied by l; at temperature 0 a guess x is kept iff p(x) >= l * max p")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--stream", action="store_true", help="print text as soon as it is accepted")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text and a stats line")
    return p


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
    from .decoder import SpeculativeDecoder
    from .params import Params

    dec = SpeculativeDecoder.load(args.engine, provider=args.provider, threads=args.threads)
    params = Params(max_new_tokens=args.max_new_tokens, gamma=args.gamma, draft=args.draft,
                    temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, lenience=args.lenience, seed=args.seed)
    if args.stream and not args.json:
        piece = None
        for piece in dec.stream(args.text, params=params):
            print(piece.text, end="", flush=True)
        print()
        print(stats_line(piece.stats, dec.provider), file=sys.stderr)   # the last piece holds the request's stats
        return 0
    res = dec.generate(args.text, params=params)
    if args.json:
        print(json.dumps({"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason,
                          "provider": dec.provider, "stats": res.stats.as_dict()}))
    else:
        print(res.text)
        print(stats_line(res.stats, dec.provider), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

"""What a fresh decoder costs: the default's speedup over target-only decoding in a decoder's first requests against
its later ones, while what draft="auto" learns converges (docs/explanation/auto.md, "A kind of sampling starts
young"):

    python -m benchmarks.fresh --export DIR --prompts FILE [--num-prompts 8] [--passes 3] [--temperature 0,1]

One decoder; per temperature its estimates are reset, then `passes` passes over the prompts, the default and
target-only interleaved prompt by prompt, with new seeds each pass. Prints per pass the ms a token of each and the
speedup; pass 1 is a fresh decoder's first requests."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specdec.runtime.core import options as load_options
from specdec.runtime.core.errors import run_cli

from .common import prompts as bench_prompts


def passes(decoder, prompts: list, temperature: float, count: int, max_new_tokens: int) -> list[dict]:
    """Reset the decoder's estimates, then `count` passes: per pass the default's and target-only's ms a token."""
    decoder.reset_estimates()
    out = []
    for n in range(count):
        spent, tokens = {"auto": 0.0, "none": 0.0}, {"auto": 0, "none": 0}
        for i, prompt in enumerate(prompts):
            for draft in ("auto", "none"):
                began = time.perf_counter()
                result = decoder.generate(**prompt.kwargs(), draft=draft, temperature=temperature,
                                          max_new_tokens=max_new_tokens, seed=1000 * n + i)
                spent[draft] += time.perf_counter() - began
                tokens[draft] += result.stats.new_tokens
        ms = {k: 1e3 * spent[k] / max(tokens[k], 1) for k in spent}
        out.append({"pass": n + 1, "auto_ms_per_token": ms["auto"], "none_ms_per_token": ms["none"],
                    "speedup": ms["none"] / ms["auto"]})
    return out


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fresh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", required=True, help="export directory made by specdec-export")
    ap.add_argument("--prompts", required=True, help="JSONL ({\"source\": ..., \"task\": ...} a line) or plain text, "
                    "as specdec-bench --prompts")
    ap.add_argument("--num-prompts", type=int, default=8, help="prompts a pass, round-robin over the tasks (default 8)")
    ap.add_argument("--passes", type=int, default=3, help="passes over the prompts (default 3)")
    ap.add_argument("--temperature", default="0,1", help="comma-separated temperatures (default 0,1)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="tokens a request (default 48)")
    load_options.add_flags(ap, "bench", leave_out=("graph_capture",), defaults={"provider": "cpu"})
    ap.add_argument("--json", help="also write the passes to this JSON file")
    args = ap.parse_args(argv)
    from specdec.runtime import SpeculativeDecoder

    decoder = SpeculativeDecoder.load(args.export, load_options.LoadOptions.from_args(args, "bench"))
    prompts, _ = bench_prompts.load(args.prompts, args.num_prompts, decoder, every_task=True)
    report = {}
    print("| T | " + " | ".join(f"pass {n + 1}" for n in range(args.passes)) + " |")
    print("|---:|" + "---:|" * args.passes)
    for t in (float(v) for v in args.temperature.split(",")):
        rows = report[str(t)] = passes(decoder, prompts, t, args.passes, args.max_new_tokens)
        print(f"| {t:g} | " + " | ".join(f"{r['speedup']:.2f}x ({r['auto_ms_per_token']:.1f} / "
                                          f"{r['none_ms_per_token']:.1f} ms)" for r in rows) + " |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def main(argv=None) -> int:
    """A bad export or prompts file is one line on stderr and exit status 2 (run_cli)."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())

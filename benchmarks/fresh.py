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
from collections import defaultdict
from pathlib import Path


def load_prompts(path: str, count: int) -> list:
    """`count` prompts round-robin over the file's tasks (JSONL with "task" and "source" text or "input_ids", or
    plain lines of text)."""
    by_task = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line) if line.lstrip().startswith("{") else {"source": line.strip()}
        by_task[row.get("task", "")].append(row["source"] if "source" in row else list(row["input_ids"]))
    lists = list(by_task.values())
    out = [p for group in zip(*lists) for p in group] + [p for group in lists for p in group[min(map(len, lists)):]]
    return out[:count]


def passes(decoder, prompts: list, temperature: float, count: int, max_new_tokens: int) -> list[dict]:
    """Reset the decoder's estimates, then `count` passes: per pass the default's and target-only's ms a token."""
    decoder.reset_estimates()
    out = []
    for n in range(count):
        spent, tokens = {"auto": 0.0, "none": 0.0}, {"auto": 0, "none": 0}
        for i, prompt in enumerate(prompts):
            for draft in ("auto", "none"):
                began = time.perf_counter()
                given = {"input_ids": prompt} if isinstance(prompt, list) else {"prompt": prompt}
                result = decoder.generate(**given, draft=draft, temperature=temperature,
                                          max_new_tokens=max_new_tokens, seed=1000 * n + i)
                spent[draft] += time.perf_counter() - began
                tokens[draft] += result.stats.new_tokens
        ms = {k: 1e3 * spent[k] / max(tokens[k], 1) for k in spent}
        out.append({"pass": n + 1, "auto_ms_per_token": ms["auto"], "none_ms_per_token": ms["none"],
                    "speedup": ms["none"] / ms["auto"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fresh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", required=True, help="export directory made by specdec-export")
    ap.add_argument("--prompts", required=True, help="JSONL ({\"source\": ..., \"task\": ...} a line) or plain text")
    ap.add_argument("--num-prompts", type=int, default=8, help="prompts a pass, round-robin over the tasks (default 8)")
    ap.add_argument("--passes", type=int, default=3, help="passes over the prompts (default 3)")
    ap.add_argument("--temperature", default="0,1", help="comma-separated temperatures (default 0,1)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="tokens a request (default 48)")
    ap.add_argument("--provider", default="cpu", help="onnxruntime provider (default cpu)")
    ap.add_argument("--json", help="also write the passes to this JSON file")
    args = ap.parse_args(argv)
    from specdec.runtime import SpeculativeDecoder

    decoder = SpeculativeDecoder.load(args.export, provider=args.provider)
    prompts = load_prompts(args.prompts, args.num_prompts)
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


if __name__ == "__main__":
    raise SystemExit(main())

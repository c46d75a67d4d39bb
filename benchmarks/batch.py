"""Batched decoding: tokens/s and per-token latency at each batch size B, speculative against target-only.

    specdec-bench batch --export DIR [--batch 1,4,16] [--draft none auto] [--temperature 0,1]
                        [--num-prompts 128] [--repeat 3] [--max-new-tokens 64]

Each cell decodes every prompt once through `generate_batch(..., max_batch=B)` (continuous batching: B requests share
every target run, the others wait for a row); cells run interleaved (repeat, temperature, B, draft). Per cell:
tokens/s (all tokens / the cell's wall time), the mean per-token latency a request sees (from taking a row to its last
token), tokens per request per target run, the encoders' share of the wall time, tokens/s over `none`'s at the same B
and at the smallest B, greedy rows checked against `none` at the same B, `lookup rounds`: the share of the rounds
that verified guesses (the batch's switch keeps lookup rounds only where they are measured to pay), and the
process's resident memory after the cell's calls (the most of its repeats; beam searches and batches hand their
buffers' pages back when they end, so it is what the process holds between requests).
"""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np

from specdec.runtime import SpecdecError
from specdec.runtime.core import options as load_options

from .common.machine import resident_mib
from .common.options import PROMPT_FILE
from .common.tables import Table, fmt


def add_arguments(p) -> None:
    p.add_argument("--export", dest="engine", required=True, metavar="DIR", help="export directory")
    p.add_argument("--batch", default="1,4,16", help="batch sizes B, comma-separated (default 1,4,16)")
    p.add_argument("--draft", nargs="+", action="extend", metavar="NAME[:G]",
                   help="the configurations, separated by spaces: none (target only, always added), lookup[:G] (the "
                        "lookup at gamma G, default 4), auto (the lookup where it pays); default none auto. Each B "
                        "and configuration first runs one untimed pass over the prompts")
    p.add_argument("--temperature", default="0,1", help="comma-separated (default 0,1)")
    p.add_argument("--prompts", metavar="FILE", help=PROMPT_FILE)
    p.add_argument("--num-prompts", type=int, default=128, help="prompts taken from it (default 128)")
    p.add_argument("--repeat", type=int, default=3, help="timed passes over the prompts (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    # batches run the eager graphs: no --graph-capture
    load_options.add_flags(p, "bench", leave_out=("graph_capture",), defaults={"provider": "cpu"})
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the table as Markdown")


SUMS = ("encoder", "tokens", "runs", "lookup_runs", "accepted", "proposed")     # summed over a cell's requests


def _configs(texts) -> list:
    """(label, draft, gamma) of the --draft configurations (also the earlier form, a comma-separated list)."""
    out = [("none", "none", 0)]
    for item in (i.strip() for text in texts or ["auto"] for i in text.split(",")):
        name, _, gamma = item.partition(":")
        if name == "none" or not item:
            continue
        if name not in ("lookup", "auto"):
            raise SpecdecError(f"unknown draft {item!r} for specdec-bench batch", "use none, lookup[:G] or auto")
        out.append((item, name, int(gamma) if gamma else "auto"))
    return out


def run(args) -> int:
    from specdec.runtime import Params, SpeculativeDecoder

    from .common import prompts as prompts_mod, running

    try:
        batches = [int(x) for x in args.batch.split(",") if x.strip()]
    except ValueError:
        raise SpecdecError(f"--batch takes comma-separated integers (got {args.batch!r})", "e.g. --batch 1,4,16") \
            from None
    temperatures = [float(t) for t in args.temperature.split(",")]
    configs = _configs(args.draft)
    dec = SpeculativeDecoder.load(args.engine, load_options.LoadOptions.from_args(args, "bench"))
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec)
    ids = [p.ids for p in prompts]
    mach = running.begin(f"specdec-bench batch: {args.engine}", dec.provider, args.threads)
    # one untimed warm-up pass per B and configuration over every prompt: sessions, buffers, and what each batch's
    # switch learns (its first rounds measure both modes half and half)
    grid = list(itertools.product(temperatures, batches, configs))
    for t, b, (_, draft, gamma) in grid:
        dec.generate_batch(input_ids=ids, max_new_tokens=args.max_new_tokens, max_batch=b, draft=draft, gamma=gamma,
                           temperature=t)
    cells, outputs = {}, {}
    for rep, (t, b, (label, draft, gamma)) in itertools.product(range(args.repeat), grid):
        params = [Params(max_new_tokens=args.max_new_tokens, draft=draft, gamma=gamma, temperature=t,
                         seed=rep * 100_000 + i) for i in range(len(ids))]
        began = time.perf_counter()
        results = dec.generate_batch(input_ids=ids, params=params, max_batch=b)
        c = cells.setdefault((t, b, label), {"wall": 0.0, "latency": [], "rss": 0.0, **dict.fromkeys(SUMS, 0)})
        c["wall"] += time.perf_counter() - began
        c["rss"] = max(c["rss"], resident_mib().get("process_mib", 0.0))
        c["latency"] += [r.stats.total_s / max(1, len(r.token_ids)) for r in results]
        for key, value in zip(SUMS, np.sum([(r.stats.encoder_s, len(r.token_ids), r.stats.target_calls,
                                             r.stats.target_calls - r.stats.source("none").rounds,
                                             r.stats.accepted, r.stats.proposed) for r in results], 0)):
            c[key] += float(value)
        if t == 0 and rep == 0:
            outputs[(b, label)] = [r.token_ids for r in results]
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    tps = {key: c["tokens"] / c["wall"] for key, c in cells.items()}
    rows = [{"temperature": t, "batch": b, "draft": label, "tokens_per_s": tps[(t, b, label)],
             "latency_ms_per_token": 1e3 * float(np.mean(c["latency"])),
             "vs_none": tps[(t, b, label)] / tps[(t, b, "none")],
             "vs_none_first_batch": tps[(t, b, label)] / tps[(t, batches[0], "none")],
             "tokens_per_row_run": c["tokens"] / max(1, c["runs"]), "encoder_share": c["encoder"] / c["wall"],
             "lookup_share": c["lookup_runs"] / max(1, c["runs"]),
             "alpha": c["accepted"] / c["proposed"] if c["proposed"] else None,
             "greedy_equal": outputs[(b, label)] == outputs[(b, "none")] if t == 0 else None,
             "rss_mib": c["rss"] or None}
            for t, b, (label, _, _) in grid for c in [cells[(t, b, label)]]]
    out = {"rows": rows, "first_batch": batches[0], "machine": mach, "engine": str(args.engine),
           "prompts": len(ids), "origin": origin, "max_new_tokens": args.max_new_tokens, "repeat": args.repeat}
    running.report(out, args, sections)
    return 0


def sections(report: dict) -> list:
    return [Table(f"batched decoding: {report['prompts']} prompts from {report['origin']}; max_new_tokens "
                  f"{report['max_new_tokens']}, repeats {report['repeat']}",
                  ("T", "B", "draft", "tokens/s", "ms/token (request)", "× none (same B)",
                   f"× none (B = {report['first_batch']})", "tokens/row/run", "lookup rounds", "α", "encoder share",
                   "greedy = none", "RSS MiB"),
                  [[f"{r['temperature']:g}", str(r["batch"]), r["draft"], f"{r['tokens_per_s']:.0f}",
                    f"{r['latency_ms_per_token']:.2f}", f"{r['vs_none']:.2f}", f"{r['vs_none_first_batch']:.2f}",
                    f"{r['tokens_per_row_run']:.2f}", f"{100 * r['lookup_share']:.0f} %", fmt(r["alpha"], ".2f", ""),
                    f"{100 * r['encoder_share']:.0f} %",
                    {None: "", True: "yes", False: "NO"}[r["greedy_equal"]], fmt(r.get("rss_mib"), ".0f", "")]
                   for r in report["rows"]])]

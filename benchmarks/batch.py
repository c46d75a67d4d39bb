"""Batched decoding: tokens/s and per-token latency at each batch size B, speculative against target-only.

    specdec-bench batch --export DIR [--batch 1,4,16] [--draft none auto] [--temperature 0,1]
                        [--num-prompts 128] [--repeat 3] [--max-new-tokens 64]

Each cell decodes every prompt once through `generate_batch(..., max_batch=B)`: B requests share every target run
and the others wait for a row (continuous batching). Cells run interleaved (repeat, temperature, B, draft), so
each ratio compares cells measured side by side. Reported per cell: tokens/s (all generated tokens / the cell's
wall time), the mean per-token latency a request sees (its time from taking a row to its last token / its tokens;
the wait for a row is not counted), tokens per request per target run, the encoders' share of the wall time, and
the ratios: tokens/s against `none` at the same B, and against `none` at the smallest B.
Greedy rows are checked against `none` at the same B (exactness per row). `lookup rounds` is the share of the
requests' rounds that verified guesses of theirs: the batch's switch (runtime/decoding/switch.py) keeps lookup
rounds only where they are measured to pay, and a row whose lookup finds nothing has none to verify.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from specdec.runtime import PROVIDER_CHOICES, PROVIDER_HELP, SpecdecError

from .common.options import PROMPT_FILE, write_figures


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
    p.add_argument("--provider", default="cpu", choices=PROVIDER_CHOICES, help=f"{PROVIDER_HELP}; default cpu")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads of the target (0: onnxruntime's default)")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the table as Markdown")


def _configs(texts) -> list:
    """The --draft configurations (a comma-separated list, the earlier form, is accepted too)."""
    out = [("none", "none", 0)]
    for item in [i for text in texts or ["auto"] for i in text.split(",")]:
        item = item.strip()
        name, _, gamma = item.partition(":")
        if name == "none" or not item:
            continue
        if name not in ("lookup", "auto"):
            raise SpecdecError(f"unknown draft {item!r} for specdec-bench batch", "use none, lookup[:G] or auto")
        out.append((item, name, int(gamma) if gamma else "auto"))
    return out


def _ints(text: str, what: str) -> list:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecdecError(f"--{what} takes comma-separated integers (got {text!r})", "e.g. --batch 1,4,16") from None
    return values


def run(args) -> int:
    from specdec.runtime import Params, SpeculativeDecoder

    from .common import machine, prompts as prompts_mod

    batches = _ints(args.batch, "batch")
    temperatures = [float(t) for t in args.temperature.split(",")]
    configs = _configs(args.draft)
    dec = SpeculativeDecoder.load(args.engine, provider=args.provider, threads=args.threads)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec)
    ids = [p.ids for p in prompts]
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench batch: {args.engine}")
    print(f"machine: {machine.one_line(mach)}")
    print(f"prompts: {len(ids)} from {origin}; max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, "
          f"B {','.join(map(str, batches))}, draft {','.join(c[0] for c in configs)}")
    cells: dict = {}
    outputs: dict = {}
    # one untimed warm-up pass per B and configuration over every prompt: sessions, buffers, and what each
    # batch's switch learns (its first rounds measure both modes half and half)
    for t in temperatures:
        for b in batches:
            for _, draft, gamma in configs:
                dec.generate_batch(input_ids=ids, max_new_tokens=args.max_new_tokens, max_batch=b, draft=draft,
                                   gamma=gamma, temperature=t)
    for rep in range(args.repeat):
        for t in temperatures:
            for b in batches:
                for label, draft, gamma in configs:
                    params = [Params(max_new_tokens=args.max_new_tokens, draft=draft, gamma=gamma, temperature=t,
                                     seed=rep * 100_000 + i) for i in range(len(ids))]
                    began = time.perf_counter()
                    results = dec.generate_batch(input_ids=ids, params=params, max_batch=b)
                    wall = time.perf_counter() - began
                    cell = cells.setdefault((t, b, label), {"wall": 0.0, "tokens": 0, "latency": [], "runs": 0,
                                                            "lookup_runs": 0, "accepted": 0, "proposed": 0,
                                                            "encoder": 0.0})
                    cell["wall"] += wall
                    cell["encoder"] += sum(r.stats.encoder_s for r in results)
                    cell["tokens"] += sum(len(r.token_ids) for r in results)
                    cell["latency"] += [r.stats.total_s / max(1, len(r.token_ids)) for r in results]
                    cell["runs"] += sum(r.stats.target_calls for r in results)
                    cell["lookup_runs"] += sum(r.stats.target_calls - r.stats.source("none").rounds
                                               for r in results)
                    cell["accepted"] += sum(r.stats.accepted for r in results)
                    cell["proposed"] += sum(r.stats.proposed for r in results)
                    if t == 0 and rep == 0:
                        outputs[(b, label)] = [r.token_ids for r in results]
                    sys.stdout.write(".")
                    sys.stdout.flush()
    print()
    report = _report(cells, outputs, temperatures, batches, configs)
    report.update(machine=mach, engine=str(args.engine), prompts=len(ids), origin=origin,
                  max_new_tokens=args.max_new_tokens, repeat=args.repeat)
    text = table(report)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text + "\n")
    write_figures(args.json, report)
    return 0


def _report(cells, outputs, temperatures, batches, configs) -> dict:
    rows = []
    for t in temperatures:
        for b in batches:
            base = cells[(t, b, "none")]
            first = cells[(t, batches[0], "none")]
            for label, _, _ in configs:
                c = cells[(t, b, label)]
                tps = c["tokens"] / c["wall"]
                rows.append({
                    "temperature": t, "batch": b, "draft": label, "tokens_per_s": tps,
                    "latency_ms_per_token": 1e3 * float(np.mean(c["latency"])),
                    "vs_none": tps / (base["tokens"] / base["wall"]),
                    "vs_none_first_batch": tps / (first["tokens"] / first["wall"]),
                    "tokens_per_row_run": c["tokens"] / max(1, c["runs"]),
                    "encoder_share": c["encoder"] / c["wall"],
                    "lookup_share": c["lookup_runs"] / max(1, c["runs"]),
                    "alpha": c["accepted"] / c["proposed"] if c["proposed"] else None,
                    "greedy_equal": (outputs[(b, label)] == outputs[(b, "none")]) if t == 0 else None})
    return {"rows": rows, "first_batch": batches[0]}


def table(report: dict) -> str:
    first = report["first_batch"]
    lines = ["| T | B | draft | tokens/s | ms/token (request) | × none (same B) | × none (B = %d) | tokens/row/run "
             "| lookup rounds | α | encoder share | greedy = none |" % first,
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        alpha = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        equal = "" if r["greedy_equal"] is None else ("yes" if r["greedy_equal"] else "NO")
        lines.append(f"| {r['temperature']:g} | {r['batch']} | {r['draft']} | {r['tokens_per_s']:.0f} | "
                     f"{r['latency_ms_per_token']:.2f} | {r['vs_none']:.2f} | {r['vs_none_first_batch']:.2f} | "
                     f"{r['tokens_per_row_run']:.2f} | {100 * r['lookup_share']:.0f} % | {alpha} | "
                     f"{100 * r['encoder_share']:.0f} % | {equal} |")
    return "\n".join(lines)

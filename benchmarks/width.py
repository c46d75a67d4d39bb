"""Would several candidates per round pay? An exact T = 0 replay of multi-candidate lookups, and the measured cost of
the wider target run they need.

    specdec-bench width --export DIR [--wide-export DIR64] [--num-prompts 128] [--gamma 8]

(`python -m specdec.bench.width` takes the same flags.)

At T = 0 a round keeps the longest candidate prefix equal to the target's greedy continuation, plus one token, so the
tokens per target run of B candidates replay exactly from each prompt's greedy output: at each position the lookup
proposes its candidate of up to gamma tokens and the datastore's next-ranked continuations (distinct first tokens)
fill up to B. B = 1 is today's lookup, and its replay must match the decoder's own target runs.

A tree of B candidates costs one target run over 1 + their tokens. `--wide-export` (the same pair with a larger
--gamma-max, e.g. 64) has its runs over 1 .. gamma_max + 1 tokens timed by the cost probe; the prediction per B is
(tokens per run) / (T(nodes) / T(1)), the lookup's host work (tens of microseconds) left out.
"""

from __future__ import annotations

import sys

import numpy as np

from .common.options import PROMPT_FILE, show, tool_main
from .common.tables import Table


def candidates(lookup, seq: list, gamma: int, width: int) -> list:
    """Up to `width` candidates: the lookup's own, then the datastore's next-ranked continuations of the context."""
    first = lookup.match(seq, [], gamma)
    out = [first] if first else []
    store = lookup.datastore
    if store is not None and width > len(out):
        context = ([store.sep] + seq[1:])[-store.width:]        # SEP (the start) only while the output is short
        _, more = store.continuations(context, gamma, width + 1)
        for c in more:
            if len(out) < width and all(c[0] != o[0] for o in out):
                out.append(c)
    return out


def replay(lookup, source_ids, greedy: list, start_id: int, gamma: int, width: int) -> tuple[int, int, int]:
    """(target runs, tokens, candidate tokens verified) for one prompt."""
    lookup.start(source_ids, None)
    pos, runs, nodes = 0, 0, 0
    while pos < len(greedy):
        seq = [start_id] + greedy[:pos]
        found = candidates(lookup, seq, min(gamma, len(greedy) - pos - 1), width) if pos < len(greedy) - 1 else []
        kept = 0
        for c in found:
            same = [a == b for a, b in zip(c, greedy[pos:])] + [False]
            kept = max(kept, same.index(False))
        runs += 1
        nodes += sum(len(c) for c in found)
        pos += kept + 1
    return runs, len(greedy), nodes


def sections(report: dict) -> list:
    ratios, line = report.get("verify_ratio"), None
    headers = ["task", "setting", "tokens per target run", "nodes per run (1 + candidate tokens)"]
    title = ""
    if ratios:
        line = (np.array([int(k) for k in ratios], float), np.array(list(ratios.values()), float))
        headers += ["T(nodes)/T(1)", "tokens per run ÷ T(nodes)/T(1)"]
        title = (f"T(n)/T(1): the probe's median target run over n tokens / its 1-token run, linear between measured "
                 f"n (n = 1..{int(line[0].max())}); " + ", ".join(f"n = {int(k)}: {v:.2f}" for k, v in zip(*line)
                                                                if int(k) in (2, 5, 9, 17, 25, 33, 41)))
    rows = []
    for task, row in report["tasks"].items():
        rows.append([task, f'the decoder, draft="lookup", gamma {report["gamma"]}',
                     f"{row['runtime_lookup_tokens_per_run']:.3f}"] + [""] * (len(headers) - 3))
        for name, v in ((n, v) for n, v in row.items() if isinstance(v, dict)):
            cost = float(np.interp(v["nodes_per_run"], *line)) if line else None
            rows.append([task, name, f"{v['tokens_per_run']:.3f}", f"{v['nodes_per_run']:.1f}"]
                        + ([f"{cost:.2f}", f"{v['tokens_per_run'] / cost:.2f}"] if line else []))
    checks = ", ".join(f"{t}: {'yes' if r['replay_matches_runtime'] else 'NO'}" for t, r in report["tasks"].items())
    return [Table(title, headers, rows), f"replay of B = 1 equals the decoder's target runs: {checks}"]


def add_arguments(p) -> None:
    p.add_argument("--export", dest="engine", required=True, metavar="DIR",
                   help="export directory (with a datastore for B > 1)")
    p.add_argument("--wide-export", dest="wide_engine", metavar="DIR",
                   help="the same pair exported with a larger --gamma-max, for the cost of wide runs")
    p.add_argument("--prompts", metavar="FILE", help=PROMPT_FILE)
    p.add_argument("--num-prompts", type=int, default=128, help="prompts taken from it (default 128)")
    p.add_argument("--gamma", type=int, default=8, help="the candidates' length (default 8)")
    p.add_argument("--widths", default="1,2,4,8", help="candidates per round B (default 1,2,4,8)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--probe-repeats", type=int, default=20,
                   help="repeats of each per-call cost measurement (default 20)")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")


def run(args) -> int:
    from specdec.runtime import LookupDraft, SpeculativeDecoder

    from .common import costs, prompts as prompts_mod

    widths = [int(w) for w in args.widths.split(",")]
    dec = SpeculativeDecoder.load(args.engine, provider="cpu")
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True)
    report = {"engine": args.engine, "prompts": origin, "gamma": args.gamma, "widths": widths, "tasks": {}}
    for task in sorted({p.task or "-" for p in prompts}):
        chosen = [p for p in prompts if (p.task or "-") == task]
        runs, tokens, greedy = 0, 0, []
        for p in chosen:
            ref = dec.generate(input_ids=p.ids, draft="none", max_new_tokens=args.max_new_tokens)
            res = dec.generate(input_ids=p.ids, draft="lookup", gamma=args.gamma, max_new_tokens=args.max_new_tokens)
            if res.token_ids != ref.token_ids:
                raise SystemExit("error: the lookup's greedy output differs from target-only decoding")
            runs, tokens = runs + res.stats.target_calls, tokens + res.stats.new_tokens
            greedy.append(ref.token_ids)
        row = {"prompts": len(chosen), "runtime_lookup_runs": runs, "runtime_lookup_tokens_per_run": tokens / runs}
        stores = [("lookup", None, 1)] + [("datastore", dec.datastore, w) for w in widths if dec.datastore is not None]
        for name, store, width in stores:
            r, t, n = np.sum([replay(LookupDraft(datastore=store), np.asarray(p.ids), g, dec.start_id, args.gamma,
                                     width) for p, g in zip(chosen, greedy)], axis=0).tolist()
            row[f"{name} B={width}"] = {"tokens_per_run": t / r, "nodes_per_run": 1 + n / r, "runs": r}
        last = "datastore B=1" if dec.datastore is not None else "lookup B=1"
        row["replay_matches_runtime"] = row[last]["runs"] == runs
        report["tasks"][task] = row
    if args.wide_engine:
        wide = SpeculativeDecoder.load(args.wide_engine, provider="cpu")
        report["verify_ratio"] = costs.probe(wide, prompts[0].ids, past=32, repeats=args.probe_repeats)["verify_ratio"]
    show(sections(report), args.json, report)
    return 0


def main(argv=None) -> int:
    return tool_main("python -m specdec.bench.width", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""`specdec-bench dtypes T:D --dtypes fp32,int8-draft,int8,...`: the weight variants of one pair of random-weight
real-shape checkpoints and CTranslate2 int8 and float32 on the same target, in one interleaved run at temperature 0
(variants.py has the method, runs.py the run)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import machine, options, running as common

HELP = "int8 and weight-only variants of real-shape models against fp32 and CTranslate2, one interleaved run"


def add_parser(commands) -> None:
    p = options.command(commands, "dtypes", HELP, run, [
        options.random_prompts(),
        options.run(max_new_tokens=32, repeat=3, repeat_help="rounds", past="64"),
        options.output(),
        options.export_shapes(keep=False)])
    options.pair(p)
    p.add_argument("--dtypes", required=True, metavar="fp32,int8-draft,int8-wo-draft,int8,int8-wo,int8-wo-fp32",
                   help="the weight variants of the same random checkpoints (kept in the workdir): fp32 (always "
                        "measured, the reference), int8-draft (specdec-export --draft-dtype int8), int8-wo-draft "
                        "(--draft-dtype int8-wo), int8 (--dtype int8: dynamic int8, both models; the target's "
                        "encoder and LM head fp32), int8-wo and int8-wo-fp32 (weight-only int8 through onnxruntime's "
                        "MatMulNBitsQuantizer, accuracy_level 4: int8 compute, and 0: fp32 compute; made by the "
                        "benchmark from the fp32 export; need onnx-ir); per variant target step, draft step, c, "
                        "verify ratio, target-only and speculative ms/token, with CTranslate2 greedy at "
                        "compute_type int8 and float32 on the same target checkpoint when ctranslate2 is installed")
    p.add_argument("--gamma", type=options.int_list, default=[0, 4], metavar="0,G",
                   help="0 and the one speculative gamma (at most the exports' gamma_max; default 0,4)")


def run(args) -> int:
    from ..common import peer_engines, prompts as prompts_mod
    from ..common.tables import table
    from ..shapes import measure as shapes
    from . import runs as variant_runs, variants

    if len([g for g in args.gamma if g > 0]) > 1:
        raise SpecdecError(f"dtypes measures one speculative gamma (got --gamma {','.join(map(str, args.gamma))})",
                           "e.g. --gamma 0,4")
    names = variants.parse(args.dtypes)
    common.runs_checked(args, past=64)
    args.gamma = common.with_baseline(args.gamma)
    target, draft = shapes.parse_pair(args.pair)
    common.needs_torch("dtypes")
    log = variant_runs.log_stderr
    dirs, infos, ckpts = variants.ensure_variants(target, draft, Path(args.work_dir), args.gamma_max,
                                                   args.max_length, names, log=log)
    decs = {n: common.load(d, args.provider, args.threads) for n, d in dirs.items()}
    gamma_max = min(d.gamma_max for d in decs.values())
    gamma = max(g for g in args.gamma if g <= gamma_max)
    first = decs["fp32"]
    threads = args.threads or os.cpu_count() or 1
    ct2, ct2_status = peer_engines.ct2_engines(ckpts["target"]["path"], Path(args.work_dir), threads, first.tokenizer,
                                               prompts_mod.special_id(first, "eos_token_id"), log,
                                               variant_runs.CT2_TYPES)
    mach = machine.describe(first.provider, args.threads)
    print(f"specdec-bench dtypes {target}:{draft} --dtypes {','.join(names)} (random weights, official "
          f"configurations, the same checkpoints for every variant: target sha256 {ckpts['target']['sha256'][:12]}, "
          f"draft {ckpts['draft']['sha256'][:12]})")
    common.print_machine(mach)
    for n, d in dirs.items():
        print(f"  {n}: {d}")
    for t, why in ct2_status.items():
        if why != "ok":
            print(f"  ctranslate2 {t}: {why}")
    eos = prompts_mod.special_id(first, "eos_token_id")
    prompts = prompts_mod.random_prompts(first.vocabulary.tokenizer_size, args.num_prompts if args.num_prompts > 0 else 4,
                                         length=args.source_length, eos_id=eos)
    prompts = prompts_mod.tokenize(prompts, first.tokenizer, first.max_length)
    print(f"{len(prompts)} random prompts of {args.source_length} tokens, {args.max_new_tokens} new tokens, T=0, "
          f"{args.repeat} rounds, speculative gamma {gamma}, probe at past {args.past} with {args.probe_repeats} "
          f"repeats over the rounds; target threads {args.threads or 'default'}, draft 1, CTranslate2 intra_threads "
          f"{threads}")
    started = time.perf_counter()
    with common.progress(args, 1 + args.repeat * (len(decs) + len(decs) * (2 if gamma else 1) + len(ct2)),
                         "specdec-bench dtypes") as bar:
        raw = variant_runs.measure(decs, ct2, prompts, gamma, args.max_new_tokens, args.repeat, args.probe_repeats,
                                   args.past, args.threads, bar)
    weights = {n: variants.export_weights(d) for n, d in dirs.items()}
    result = variant_runs.summarize(raw, weights)
    print()
    print(f"variants (median over {result['rounds']} rounds, (min-max); steps at past {args.past}, fused runs with "
          f"their heads; vs fp32: fp32 target step / this one's, per round; c: draft step / this variant's target "
          f"step; verify 5 ×: 5-token target pass / one-token step; ms/tok: wall time per generated token incl. "
          f"encoders; spec: gamma {gamma}; tok/call: tokens per target call of the speculative runs (random weights: "
          f"what two random models happen to agree on, not a trained pair's alpha); "
          f"Thm3.8: predicted speedup over its own target-only at alpha {variant_runs.ALPHA} from this c, best "
          f"gamma; same tokens: prompts whose greedy output at gamma 0 (g0) and at gamma {gamma} (spec) equals fp32 "
          f"target-only's, and spec=own g0: the speculative output equals this variant's own target-only output)")
    print(table(*variant_runs.table_lines(result, gamma)))
    print()
    for line in variant_runs.verdict_lines(result):
        print(line)
    out = {"mode": "dtypes", "machine": mach,
           "shapes": {"target": target, "draft": draft, "configs": {n: shapes.CONFIGS[n] for n in (target, draft)}},
           "checkpoints": ckpts, "exports": {n: str(d) for n, d in dirs.items()}, "export_info": infos,
           "ct2_status": ct2_status,
           "settings": {"dtypes": names, "gamma": gamma, "max_new_tokens": args.max_new_tokens,
                        "rounds": args.repeat, "prompts": len(prompts), "source_length": args.source_length,
                        "probe_past": args.past, "probe_repeats": args.probe_repeats,
                        "probe_repeats_per_round": raw["probe_repeats_per_round"], "threads": args.threads,
                        "ct2_intra_threads": threads,
                        "weight_only": {"bits": variants.WO_BITS, "block_size": variants.WO_BLOCK,
                                        "accuracy_level": {n: variants.WO_ACCURACY[n] for n in names
                                                           if n in variants.WO_ACCURACY}}},
           "notes": {"method": variants.__doc__.strip()},
           **result, "per_round": {"probes": raw["probes"],
                                   "ms_per_token": {k: [1000.0 * s / max(n, 1) for s, n in v]
                                                    for k, v in raw["times"].items()}},
           "elapsed_s": time.perf_counter() - started}
    common.finish(out, args, variant_runs.markdown_sections)
    return 0

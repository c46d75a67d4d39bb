"""Quality of an int8 target on the bundled pair's test prompts: greedy outputs of the fp32 and the int8
ONNX exports compared token for token, chrF of both, and greedy alpha (gamma = 1) of the fp32 and int8 drafts.

    specdec-export --export /tmp/q8/fp32
    specdec-export --export /tmp/q8/int8 --dtype int8
    specdec-export --export /tmp/q8/fp32_dwo --draft-dtype int8-wo      (or --draft-dtype int8)
    python -m specdec.models.quality_int8 --fp32 /tmp/q8/fp32 --int8 /tmp/q8/int8 --fp32-draft-int8 /tmp/q8/fp32_dwo

Tokenization, max_new_tokens (48), detokenization and chrF settings are those of ``specdec.models.evaluate`` (the
model card's results table), so the fp32 figures are comparable with the card's PyTorch ones; the PyTorch greedy
outputs (``evaluate.decode``) are recomputed and compared too.
"""

from __future__ import annotations

import json
import os
import time

from specdec.runtime.core.errors import OneLineParser, run_cli

from .data import load_jsonl
from .evaluate import MAX_NEW_TOKENS, decode, edit_distance

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = ("summarize", "translate")


def _first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _greedy(dec, ids_list, gamma=0, draft=None):
    outs, proposed, accepted = [], 0, 0
    for ids in ids_list:
        kw = {"draft": draft} if draft else {}
        res = dec.generate(input_ids=ids, max_new_tokens=MAX_NEW_TOKENS, gamma=gamma, **kw)
        outs.append(list(res.token_ids))
        proposed += res.stats.proposed
        accepted += res.stats.accepted
    return outs, proposed, accepted


def main(argv=None) -> int:
    return run_cli(_main, argv)


def _main(argv=None) -> int:
    ap = OneLineParser(prog="python -m specdec.models.quality_int8", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp32", required=True, help="fp32 export of the bundled pair")
    ap.add_argument("--int8", required=True, help="--dtype int8 export of the bundled pair")
    ap.add_argument("--fp32-draft-int8", help="--draft-dtype int8 or int8-wo export (fp32 target, int8 draft), for alpha")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="first N prompts per task (0: all 200)")
    ap.add_argument("--out", default=os.path.join(HERE, ".work", "quality_int8.json"))
    a = ap.parse_args(argv)

    import sacrebleu
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    from specdec.runtime import SpeculativeDecoder

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(os.path.join(HERE, "target"))
    prompts = load_jsonl(os.path.join(HERE, "prompts", "test.jsonl"))
    if a.limit:
        prompts = [p for t in TASKS for p in [q for q in prompts if q["task"] == t][:a.limit]]
    srcs = [p["source"] for p in prompts]
    ids_list = [tok(s).input_ids[:256] for s in srcs]
    res = {"n_prompts": len(prompts), "max_new_tokens": MAX_NEW_TOKENS, "date": time.strftime("%Y-%m-%d")}

    t0 = time.time()
    d32 = SpeculativeDecoder.load(a.fp32, provider="cpu", threads=a.threads)
    d8 = SpeculativeDecoder.load(a.int8, provider="cpu", threads=a.threads)
    hyp = {}
    hyp["fp32"], _, _ = _greedy(d32, ids_list)
    hyp["int8"], _, _ = _greedy(d8, ids_list)
    print(f"target-only greedy decoded ({time.time() - t0:.0f} s)", flush=True)

    model = T5ForConditionalGeneration.from_pretrained(os.path.join(HERE, "target"), dtype=torch.float32).eval()
    hyp["pytorch"] = decode(model, tok, srcs)   # the card's decoding (batched, padded)
    print(f"PyTorch greedy decoded ({time.time() - t0:.0f} s)", flush=True)

    # Greedy alpha at gamma = 1, and the outputs must stay the target's.
    alpha = {}
    runs = [("fp32 target + fp32 draft", d32, "fp32"), ("int8 target + int8 draft", d8, "int8")]
    if a.fp32_draft_int8:
        runs.append(("fp32 target + int8 draft", SpeculativeDecoder.load(a.fp32_draft_int8, provider="cpu",
                                                                         threads=a.threads), "fp32"))
    for name, dec, ref in runs:
        row = {}
        tp = ta = 0
        for task in TASKS:
            idx = [i for i, p in enumerate(prompts) if p["task"] == task]
            outs, prop, acc = _greedy(dec, [ids_list[i] for i in idx], gamma=1, draft="draft")
            row[task] = round(acc / prop, 4)
            row[f"{task}_same_as_target_only"] = sum(o == hyp[ref][i] for o, i in zip(outs, idx))
            tp, ta = tp + prop, ta + acc
        row.update(all=round(ta / tp, 4), accepted=ta, proposed=tp)
        alpha[name] = row
        print(f"alpha {name}: {row} ({time.time() - t0:.0f} s)", flush=True)
    res["alpha_gamma1"] = alpha

    # Speculative greedy (gamma 1 and 4) against target-only greedy: exact for fp32; for the int8 target, exact
    # while a k-token verify call gives each position a 1-token step's logits (per-token activation scales; see
    # models/README.md for the prompts where float kernel differences still cross an int8 rounding boundary).
    spec = {}
    for name, dec, ref in runs[:2]:
        for gamma in (1, 4):
            outs, _, _ = _greedy(dec, ids_list, gamma=gamma, draft="draft")
            spec[f"{name}, gamma {gamma}"] = {
                "same_as_own_target_only": sum(o == h for o, h in zip(outs, hyp[ref])),
                "same_as_fp32_target_only": sum(o == h for o, h in zip(outs, hyp["fp32"])),
                "chrf": round(sacrebleu.corpus_chrf(tok.batch_decode(outs, skip_special_tokens=True),
                                                    [[p["reference"] for p in prompts]]).score, 2)}
            print(f"speculative {name}, gamma {gamma}: {spec[f'{name}, gamma {gamma}']}", flush=True)
    res["speculative_vs_target_only"] = spec

    # Where int8 and fp32 differ: the fp32 logit margin at the first divergence (fp32 top-1 minus the int8 token's
    # logit, PyTorch fp32 teacher-forced on the fp32 output) against all positions' top-1 - top-2 margins.
    margins_all, margins_div, min_margin = [], [], []
    with torch.no_grad():
        for i, ids in enumerate(ids_list):
            seq = hyp["fp32"][i]
            dec_in = torch.tensor([[0] + seq[:-1]])
            lg = model(input_ids=torch.tensor([ids]), decoder_input_ids=dec_in).logits[0].float()
            top2 = lg.topk(2, -1).values
            margins_all += (top2[:, 0] - top2[:, 1]).tolist()
            min_margin.append(float((top2[:, 0] - top2[:, 1]).min()))
            s8 = hyp["int8"][i]
            if s8 != seq:
                d = _first_diff(seq, s8)
                if d < len(seq) and d < len(s8):
                    margins_div.append(float(lg[d, seq[d]] - lg[d, s8[d]]))
    margins_all.sort()

    def pct(v, q):
        return round(v[min(len(v) - 1, int(q * len(v)))], 3) if v else None

    res["fp32_margin_top1_top2_all_positions"] = {"n": len(margins_all), "p10": pct(margins_all, 0.1),
                                                  "median": pct(margins_all, 0.5)}
    res["fp32_margin_at_first_divergence"] = sorted(round(m, 3) for m in margins_div)
    res["prompts_whose_fp32_output_has_a_margin_below"] = {
        str(x): sum(m < x for m in min_margin) for x in (0.05, 0.1, 0.25, 0.5)}

    by_task = {}
    examples = []
    for task in list(TASKS) + ["all"]:
        idx = [i for i, p in enumerate(prompts) if task in ("all", p["task"])]
        refs = [prompts[i]["reference"] for i in idx]
        row = {"n": len(idx)}
        for name in ("pytorch", "fp32", "int8"):
            texts = tok.batch_decode([hyp[name][i] for i in idx], skip_special_tokens=True)
            row[f"chrf_{name}"] = round(sacrebleu.corpus_chrf(texts, [refs]).score, 2)
        row["onnx_fp32_same_as_pytorch"] = sum(hyp["fp32"][i] == hyp["pytorch"][i] for i in idx)
        same = [i for i in idx if hyp["int8"][i] == hyp["fp32"][i]]
        diff = [i for i in idx if hyp["int8"][i] != hyp["fp32"][i]]
        row["int8_identical"] = len(same)
        row["int8_identical_share"] = round(len(same) / len(idx), 4)
        row["int8_identical_text"] = sum(tok.decode(hyp["int8"][i], skip_special_tokens=True) ==
                                         tok.decode(hyp["fp32"][i], skip_special_tokens=True) for i in idx)
        if diff:
            ed = [edit_distance(hyp["fp32"][i], hyp["int8"][i]) for i in diff]
            fd = [_first_diff(hyp["fp32"][i], hyp["int8"][i]) for i in diff]
            suffix = [max(len(hyp["fp32"][i]), len(hyp["int8"][i])) - f for i, f in zip(diff, fd)]
            row["differing_mean_token_edit_distance"] = round(sum(ed) / len(ed), 2)
            row["differing_mean_first_divergence_position"] = round(sum(fd) / len(fd), 2)
            row["differing_mean_tokens_after_divergence"] = round(sum(suffix) / len(suffix), 2)
            row["differing_mean_len_fp32"] = round(sum(len(hyp["fp32"][i]) for i in diff) / len(diff), 2)
            row["differing_mean_len_int8"] = round(sum(len(hyp["int8"][i]) for i in diff) / len(diff), 2)
        row["mean_len_fp32"] = round(sum(len(hyp["fp32"][i]) for i in idx) / len(idx), 2)
        row["fp32_hit_max_new_tokens"] = sum(1 not in hyp["fp32"][i] for i in idx)
        by_task[task] = row
        if task != "all":
            for i in diff[:3]:
                examples.append({"task": task, "prompt_index": i, "source": prompts[i]["source"],
                                 "reference": prompts[i]["reference"],
                                 "fp32": tok.decode(hyp["fp32"][i], skip_special_tokens=True),
                                 "int8": tok.decode(hyp["int8"][i], skip_special_tokens=True),
                                 "first_divergence": _first_diff(hyp["fp32"][i], hyp["int8"][i]),
                                 "edit_distance": edit_distance(hyp["fp32"][i], hyp["int8"][i])})
    res["by_task"] = by_task
    res["examples"] = examples
    res["seconds"] = round(time.time() - t0, 1)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(json.dumps(res, indent=1, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

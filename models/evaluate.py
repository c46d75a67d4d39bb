"""Stages `package` and `evaluate`.

* `package`: store both models in fp16 (safetensors) under ``models/target`` and ``models/draft`` with the
  shared tokenizer, and write ``models/prompts/test.jsonl`` (test split only, both tasks).
* `evaluate`: on the prompts (held-out test split), chrF (sacrebleu) of greedy outputs for target, draft,
  a copy-the-input baseline and a first-sentence-of-the-input baseline, and alpha per Corollary 3.6 of Leviathan et al. (2023):
  alpha = E[sum_x min(p(x), q(x))] over target-generated positions (greedy for T=0, sampled for T=1).

Decoding uses a simple batched loop over ``model(encoder_outputs=..., decoder_input_ids=..., cache=...)``
(the cache is created by the forward pass itself) rather than ``generate()``, because ``generate()`` in
transformers 5.x sizes its cache from ``num_layers`` and breaks for the draft (3 encoder layers, 1 decoder layer).
"""

from __future__ import annotations

import json
import os
import random

from .data import MAX_SRC, MAX_TGT, SUMMARIZE_PREFIX, TRANSLATE_PREFIX, load_jsonl, write_jsonl

N_PROMPTS_PER_TASK = 200
MAX_NEW_TOKENS = 48


# --------------------------------------------------------------------------- prompts
def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences (token ids, words)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _fit_source(tok, source: str, max_tokens: int) -> str:
    """Cut a prompt at a word boundary so that it tokenizes (with </s>) to at most max_tokens."""
    if len(tok(source).input_ids) <= max_tokens:
        return source
    words = source.split(" ")
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tok(" ".join(words[:mid])).input_ids) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def make_prompts(work_dir: str, out_path: str, tok, seed: int = 0, n_per_task: int = N_PROMPTS_PER_TASK,
                 split: str = "test"):
    rows = load_jsonl(os.path.join(work_dir, "data", f"{split}.jsonl"))
    rng = random.Random(seed)
    out = []
    for task in ("summarize", "translate"):
        cand = [r for r in rows if r["task"] == task]
        rng.shuffle(cand)
        picked, used_pkgs = [], set()
        for r in cand:
            if len(picked) >= n_per_task:
                break
            # At most one prompt per source package per task, for variety.
            if r["package"] in used_pkgs:
                continue
            if len(tok(r["reference"]).input_ids) > MAX_TGT[task]:
                continue
            src = r["source"]
            if task == "translate" and len(tok(src).input_ids) > MAX_SRC[task]:
                continue
            src = _fit_source(tok, src, MAX_SRC[task])
            used_pkgs.add(r["package"])
            picked.append({"task": task, "source": src, "reference": r["reference"], "package": r["package"]})
        out.extend(picked)
    if out_path:
        write_jsonl(out_path, out)
    return out


# --------------------------------------------------------------------------- packaging
def package(work_dir: str, out_dir: str, seed: int = 0):
    import torch
    from transformers import T5ForConditionalGeneration

    from .tok import load_tokenizer

    tok = load_tokenizer(os.path.join(work_dir, "tokenizer"))
    for name in ("target", "draft"):
        m = T5ForConditionalGeneration.from_pretrained(os.path.join(work_dir, name), dtype=torch.float32)
        dst = os.path.join(out_dir, name)
        os.makedirs(dst, exist_ok=True)
        m.half().save_pretrained(dst, safe_serialization=True)
        tok.save_pretrained(dst)
        info = os.path.join(work_dir, name, "train_info.json")
        if os.path.exists(info):
            with open(info) as f:
                ti = json.load(f)
            with open(os.path.join(dst, "train_info.json"), "w") as f:
                json.dump(ti, f, indent=1)
        print(f"packaged {name} -> {dst}", flush=True)
    prompts = make_prompts(work_dir, os.path.join(out_dir, "prompts", "test.jsonl"), tok, seed=seed)
    print(f"wrote {len(prompts)} prompts", flush=True)


# --------------------------------------------------------------------------- decoding
def _encode_batch(tok, sources):
    enc = tok(sources, return_tensors="pt", padding=True)
    return enc.input_ids, enc.attention_mask


def decode(model, tok, sources, temperature: float = 0.0, max_new_tokens: int = MAX_NEW_TOKENS,
           batch_size: int = 32, generator=None):
    """Greedy (T=0) or ancestral sampling (T>0); returns list of token-id lists ending in </s> if produced."""
    import torch

    outs = []
    with torch.no_grad():
        for i in range(0, len(sources), batch_size):
            ids, mask = _encode_batch(tok, sources[i: i + batch_size])
            outs += decode_batch(model, ids, mask, temperature, max_new_tokens, generator)
    return outs


def _cache_name(model) -> str:
    """The forward's name for the decoder's cache, argument and output alike: `cache` from transformers 5.24 on
    (where `past_key_values` warns, to go in 5.40), `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def decode_batch(model, ids, mask, temperature: float = 0.0, max_new_tokens: int = MAX_NEW_TOKENS, generator=None):
    """One padded batch (input_ids, attention_mask tensors) -> token-id lists, each ending in </s> if produced."""
    import torch

    enc = model.get_encoder()(input_ids=ids, attention_mask=mask)
    b = ids.size(0)
    dec = torch.zeros(b, 1, dtype=torch.long)
    done = torch.zeros(b, dtype=torch.bool)
    past, cache = None, _cache_name(model)
    for _ in range(max_new_tokens):
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec[:, -1:], use_cache=True,
                    **{cache: past})
        past = getattr(out, cache)
        logits = out.logits[:, -1].float()
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        dec = torch.cat([dec, nxt[:, None]], 1)
        done |= nxt == 1
        if bool(done.all()):
            break
    outs = []
    for row in dec[:, 1:].tolist():
        outs.append(row[: row.index(1) + 1] if 1 in row else row)
    return outs


def alpha(target, draft, tok, sources, seqs, temperature: float, batch_size: int = 32):
    """Per-position sum_x min(p, q) on the target's own sequences; returns list of per-position values."""
    import torch

    vals = []
    with torch.no_grad():
        for i in range(0, len(sources), batch_size):
            ids, mask = _encode_batch(tok, sources[i: i + batch_size])
            ss = seqs[i: i + batch_size]
            L = max(len(s) for s in ss)
            dec = torch.zeros(len(ss), L, dtype=torch.long)
            valid = torch.zeros(len(ss), L, dtype=torch.bool)
            for j, s in enumerate(ss):
                dec[j, 1: len(s)] = torch.tensor(s[:-1], dtype=torch.long) if len(s) > 1 else dec[j, 1:1]
                valid[j, : len(s)] = True
            lp = target(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits.float()
            lq = draft(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits.float()
            if temperature == 0:
                v = (lp.argmax(-1) == lq.argmax(-1)).float()
            else:
                p = torch.softmax(lp / temperature, -1)
                q = torch.softmax(lq / temperature, -1)
                v = torch.minimum(p, q).sum(-1)
            vals.extend(v[valid].tolist())
    return vals


def _strip_prefix(s: str) -> str:
    for p in (SUMMARIZE_PREFIX, TRANSLATE_PREFIX):
        if s.startswith(p):
            return s[len(p):]
    return s


def decoder_step_flops(cfg, cache_len: int = 16, src_len: int = 64) -> dict:
    """Multiply-adds x2 for one incremental decoder step (KV cache of cache_len, encoder length src_len)."""
    d, inner, ff, V = cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.d_ff, cfg.vocab_size
    ffn_mats = 3 if cfg.is_gated_act else 2
    per_layer = (
        4 * d * inner                 # self-attention q, k, v, o for the new token
        + 2 * inner * (cache_len + 1)  # self-attention scores + weighted sum
        + 2 * d * inner               # cross-attention q, o (encoder k, v precomputed once per prompt)
        + 2 * inner * src_len         # cross-attention scores + weighted sum
        + ffn_mats * d * ff
    )
    layers = cfg.num_decoder_layers * per_layer
    head = d * V
    return {"decoder_layers_flops": 2 * layers, "lm_head_flops": 2 * head, "total_flops": 2 * (layers + head)}


def evaluate(out_dir: str, work_dir: str, threads: int, seed: int = 0, limit: int | None = None):
    import sacrebleu
    import torch
    from tqdm import tqdm
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(os.path.join(out_dir, "target"))
    tok_d = AutoTokenizer.from_pretrained(os.path.join(out_dir, "draft"))
    assert tok.get_vocab() == tok_d.get_vocab(), "target and draft must share the tokenizer"
    target = T5ForConditionalGeneration.from_pretrained(os.path.join(out_dir, "target"), dtype=torch.float32).eval()
    draft = T5ForConditionalGeneration.from_pretrained(os.path.join(out_dir, "draft"), dtype=torch.float32).eval()
    assert target.config.vocab_size == draft.config.vocab_size
    prompts = load_jsonl(os.path.join(out_dir, "prompts", "test.jsonl"))
    if limit:
        prompts = prompts[:limit] + [p for p in prompts if p["task"] == "translate"][:limit]
    res = {"n_prompts": len(prompts), "max_new_tokens": MAX_NEW_TOKENS}

    # fp16 storage check: the fp32 training checkpoint and the fp16-stored model give the same greedy outputs?
    fp32_dir = os.path.join(work_dir, "target")
    by_task = {}
    hyps = {}
    for name, model in tqdm([("target", target), ("draft", draft)], desc="greedy decode"):
        seqs = decode(model, tok, [p["source"] for p in prompts])
        hyps[name] = seqs
    for task in ("summarize", "translate"):
        idx = [i for i, p in enumerate(prompts) if p["task"] == task]
        refs = [prompts[i]["reference"] for i in idx]
        row = {"n": len(idx)}
        for name in ("target", "draft"):
            texts = tok.batch_decode([hyps[name][i] for i in idx], skip_special_tokens=True)
            row[f"chrf_{name}"] = round(sacrebleu.corpus_chrf(texts, [refs]).score, 2)
        copy = [_strip_prefix(prompts[i]["source"]) for i in idx]
        row["chrf_copy_input"] = round(sacrebleu.corpus_chrf(copy, [refs]).score, 2)
        # Lead baseline (CNN/DM's lead-3 in miniature): the input's first sentence.
        lead = [c.split(". ")[0] for c in copy]
        row["chrf_first_sentence"] = round(sacrebleu.corpus_chrf(lead, [refs]).score, 2)
        by_task[task] = row
    res["chrf"] = by_task

    # alpha at T=0 (on greedy target outputs) and T=1 (on sampled target outputs).
    res["alpha"] = {}
    gen = torch.Generator().manual_seed(seed)
    for temp in (0.0, 1.0):
        seqs = hyps["target"] if temp == 0 else decode(target, tok, [p["source"] for p in prompts], temperature=temp,
                                                       generator=gen)
        row = {}
        allv = []
        for task in ("summarize", "translate"):
            idx = [i for i, p in enumerate(prompts) if p["task"] == task]
            v = alpha(target, draft, tok, [prompts[i]["source"] for i in idx], [seqs[i] for i in idx], temp)
            row[task] = round(sum(v) / len(v), 4)
            allv += v
        row["all"] = round(sum(allv) / len(allv), 4)
        row["positions"] = len(allv)
        res["alpha"][f"T={temp:g}"] = row

    # Cost of one decoder step.
    ft, fd = decoder_step_flops(target.config), decoder_step_flops(draft.config)
    res["decoder_step_flops"] = {"target": ft, "draft": fd,
                                 "ratio_total": round(ft["total_flops"] / fd["total_flops"], 2)}
    res["parameters"] = {"target": sum(p.numel() for p in target.parameters()),
                         "draft": sum(p.numel() for p in draft.parameters())}

    if os.path.isdir(fp32_dir):
        t32 = T5ForConditionalGeneration.from_pretrained(fp32_dir, dtype=torch.float32).eval()
        sub = [p["source"] for p in prompts[:: max(1, len(prompts) // 100)]]
        a = decode(t32, tok, sub)
        b = decode(target, tok, sub)
        res["fp16_storage_same_greedy_target"] = f"{sum(x == y for x, y in zip(a, b))}/{len(sub)}"

    # Example outputs for the card.
    ex = []
    for task in ("summarize", "translate"):
        for i in [i for i, p in enumerate(prompts) if p["task"] == task][:3]:
            ex.append({"source": prompts[i]["source"], "reference": prompts[i]["reference"],
                       "target": tok.decode(hyps["target"][i], skip_special_tokens=True),
                       "draft": tok.decode(hyps["draft"][i], skip_special_tokens=True)})
    res["examples"] = ex
    path = os.path.join(work_dir, "eval.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(json.dumps({k: v for k, v in res.items() if k != "examples"}, indent=1), flush=True)
    return res

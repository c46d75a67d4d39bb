"""Sequence-level distillation data (Kim & Rush, 2016): the target's own greedy outputs.

α at temperature 0 is the rate at which the draft's argmax agrees with the target's along the *target's*
greedy sequences (Leviathan et al., 2023, Cor. 3.6), so the draft is also trained on (source, target
greedy output) pairs, not only on the human references.  ``target_outputs`` decodes a seeded subset of the
training sources with the trained target and caches the pairs under ``<work>/distill/``; the cache is
appended batch by batch, so an interrupted run picks up where it stopped, and it is rebuilt when the target
checkpoint, the subset size or the seed change.
"""

from __future__ import annotations

import json
import os
import random

from .data import load_jsonl

BATCH = 64


def _fingerprint(target_dir: str, n: int, seed: int) -> dict:
    st = os.stat(os.path.join(target_dir, "model.safetensors"))
    return {"target_size": st.st_size, "target_mtime": int(st.st_mtime), "n": n, "seed": seed}


def target_outputs(work_dir: str, tok, n: int, seed: int, threads: int) -> list[tuple[list[int], list[int]]]:
    """(source ids, target greedy output ids) for n seeded training sources (cached, resumable)."""
    import torch
    from tqdm import tqdm
    from transformers import T5ForConditionalGeneration

    from .evaluate import decode_batch
    from .data import MAX_TGT, encode_rows

    if n <= 0:
        return []
    target_dir = os.path.join(work_dir, "target")
    out_dir = os.path.join(work_dir, "distill")
    os.makedirs(out_dir, exist_ok=True)
    meta_path, pairs_path = os.path.join(out_dir, "meta.json"), os.path.join(out_dir, "target_outputs.jsonl")
    fp = _fingerprint(target_dir, n, seed)
    if not (os.path.exists(meta_path) and json.load(open(meta_path)) == fp):
        if os.path.exists(pairs_path):
            os.remove(pairs_path)
        with open(meta_path, "w") as f:
            json.dump(fp, f)
    done = load_jsonl(pairs_path) if os.path.exists(pairs_path) else []

    # The subset: seeded sample of the training rows, grouped by task and sorted by length for batching.
    rows = load_jsonl(os.path.join(work_dir, "data", "train.jsonl"))
    rows = random.Random(seed).sample(rows, min(n, len(rows)))
    todo = []
    for task in ("summarize", "translate"):
        srcs = [s for s, _ in encode_rows(tok, [r for r in rows if r["task"] == task])]
        srcs.sort(key=len)
        todo += [(task, b) for b in (srcs[i: i + BATCH] for i in range(0, len(srcs), BATCH))]
    n_done_batches = sum(1 for d in done if d.get("batch_end"))

    torch.set_num_threads(threads)
    model = T5ForConditionalGeneration.from_pretrained(target_dir, dtype=torch.float32).eval()
    with open(pairs_path, "a", encoding="utf-8") as f, torch.no_grad():
        for bi, (task, batch) in enumerate(tqdm(todo, desc="target outputs", initial=n_done_batches,
                                               total=len(todo), mininterval=5)):
            if bi < n_done_batches:
                continue
            enc = tok.pad({"input_ids": batch}, return_tensors="pt")
            outs = decode_batch(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=MAX_TGT[task])
            # Outputs cut off by the length limit (no </s>) are left out.
            recs = [{"src": s, "out": o} for s, o in zip(batch, outs) if o[-1] == 1]
            if recs:
                recs[-1]["batch_end"] = True
            else:
                recs = [{"src": [], "out": None, "batch_end": True}]
            for r in recs:
                f.write(json.dumps(r) + "\n")
            f.flush()
            done += recs
    pairs = [(d["src"], d["out"]) for d in done if d["out"] is not None]
    print(f"[distill] {len(pairs)} target greedy outputs for {len(rows)} training sources", flush=True)
    return pairs

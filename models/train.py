"""Stages `train-target` and `train-draft`: T5ForConditionalGeneration from scratch on 2 CPU cores.

* Target: T5 v1.0-style (relu FFN), d_model 320, d_ff 1280, 4 encoder + 4 decoder layers.
* Draft:  d_model 128, d_ff 768, 3 encoder layers + 1 decoder layer (t5-efficient style), same tokenizer.
  Trained on a mixture of the reference cross-entropy and the KL divergence to the target's
  next-token distribution on the same teacher-forced batch (teacher forward only, no generation).

Data order is a pure function of (seed, step), so `--resume` continues on the same batches.  The lr schedule
follows steps or the time budget, whichever is further along, so a run that hits its time budget depends on the
machine's speed (fewer steps on a slower one, but always annealed).
"""

from __future__ import annotations

import math
import os
import random
import time

from .data import encode_rows, load_jsonl

VOCAB_SIZE = 4096

TARGET_CONFIG = dict(d_model=320, d_kv=64, num_heads=5, d_ff=1280, num_layers=4, num_decoder_layers=4)
DRAFT_CONFIG = dict(d_model=128, d_kv=32, num_heads=4, d_ff=768, num_layers=3, num_decoder_layers=1)


def make_config(arch: dict, vocab_size: int = VOCAB_SIZE, dropout: float = 0.0):
    from transformers import T5Config

    return T5Config(
        vocab_size=vocab_size,
        feed_forward_proj="relu",
        dropout_rate=dropout,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        layer_norm_epsilon=1e-6,
        initializer_factor=1.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        tie_word_embeddings=True,
        is_encoder_decoder=True,
        use_cache=True,
        **arch,
    )


# --------------------------------------------------------------------------- data
class Batches:
    """Deterministic length-bucketed batches: batch(step) depends only on (seed, step)."""

    def __init__(self, examples, batch_size: int, seed: int, chunk: int = 64):
        self.ex = examples
        self.bs = batch_size
        self.seed = seed
        self.chunk = chunk
        self.per_epoch = len(examples) // batch_size
        self._epoch = None
        self._order = None

    def _build(self, epoch):
        rng = random.Random(self.seed * 1000003 + epoch)
        idx = list(range(len(self.ex)))
        rng.shuffle(idx)
        batches = []
        span = self.bs * self.chunk
        for i in range(0, self.per_epoch * self.bs, span):
            group = sorted(idx[i: i + span], key=lambda j: (len(self.ex[j][0]), len(self.ex[j][1])))
            for k in range(0, len(group) - self.bs + 1, self.bs):
                batches.append(group[k: k + self.bs])
        rng.shuffle(batches)
        self._epoch, self._order = epoch, batches

    def __call__(self, step):
        epoch, i = divmod(step, self.per_epoch)
        if self._epoch != epoch:
            self._build(epoch)
        return collate([self.ex[j] for j in self._order[i % len(self._order)]])


def _logits(model, batch):
    """Teacher-forced next-token logits (fp32) for a collated batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 decoder_input_ids=batch["decoder_input_ids"]).logits.float()


def _chunks(xs, n):
    return [xs[i: i + n] for i in range(0, len(xs), n)]


def collate(pairs):
    import torch

    ls = max(len(s) for s, _ in pairs)
    lt = max(len(t) for _, t in pairs)
    src = torch.zeros(len(pairs), ls, dtype=torch.long)
    mask = torch.zeros(len(pairs), ls, dtype=torch.long)
    labels = torch.full((len(pairs), lt), -100, dtype=torch.long)
    dec_in = torch.zeros(len(pairs), lt, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        labels[i, : len(t)] = torch.tensor(t)
        dec_in[i, 1: len(t)] = torch.tensor(t[:-1])
    return {"input_ids": src, "attention_mask": mask, "decoder_input_ids": dec_in, "labels": labels}


# --------------------------------------------------------------------------- training
def lr_at(step, total, peak, warmup, time_frac: float = 0.0):
    """Linear warmup, then cosine to 10 % of peak over whichever runs out first: the steps or the time budget
    (time_frac = elapsed / max_minutes), so a slower machine still ends its run with an annealed model."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = max((step - warmup) / max(1, total - warmup), time_frac)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train_model(
    name: str,
    work_dir: str,
    arch: dict,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seed: int,
    threads: int,
    resume: bool,
    teacher_dir: str | None = None,
    kl_weight: float = 0.0,
    ckpt_minutes: float = 4.0,
    max_minutes: float | None = None,
    precision: str = "bf16",
    rms_scaling: bool = True,
    seq_kd_sources: int = 0,
    seq_kd_repeat: int = 1,
    dropout: float = 0.0,
):
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm
    from transformers import T5ForConditionalGeneration

    from .tok import load_tokenizer

    torch.set_num_threads(threads)
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"precision must be bf16 or fp32, not {precision!r}")
    # bf16 autocast: weights, optimizer state and the loss stay fp32, matmuls run in bf16 (2x on CPUs with
    # AVX512-BF16/AMX, e.g. Zen 4; on older CPUs pass --precision fp32).
    autocast = dict(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    tok_dir = os.path.join(work_dir, "tokenizer")
    tok = load_tokenizer(tok_dir)
    rows = load_jsonl(os.path.join(work_dir, "data", "train.jsonl"))
    examples = encode_rows(tok, rows)
    if teacher_dir is not None and seq_kd_sources > 0:
        from .distill import target_outputs

        kd = target_outputs(work_dir, tok, seq_kd_sources, seed, threads)
        examples = examples + kd * seq_kd_repeat
    batches = Batches(examples, batch_size, seed)
    val_rows = load_jsonl(os.path.join(work_dir, "data", "validation.jsonl"))
    val_rows = random.Random(seed).sample(val_rows, min(512, len(val_rows)))
    val_batches = [collate(c) for c in _chunks(encode_rows(tok, val_rows), 64)]
    print(f"[{name}] {len(examples)} training pairs, {batches.per_epoch} batches/epoch, {steps} steps", flush=True)

    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(make_config(arch, vocab_size=len(tok), dropout=dropout))
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[{name}] parameters: {n_params / 1e6:.2f} M", flush=True)
    teacher = None
    if teacher_dir is not None:
        teacher = T5ForConditionalGeneration.from_pretrained(teacher_dir, dtype=torch.float32)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)

    # One group per tensor so that each can get its own step size.  rms_scaling (Adafactor's relative step,
    # as nanoT5 does with AdamW): a tensor's step is lr x RMS(tensor), because HF's T5 init spans two orders
    # of magnitude (embeddings std 1, attention projections ~0.007) and one absolute lr fits neither.
    groups = []
    for n, p in model.named_parameters():
        no_wd = "layer_norm" in n or "shared" in n or "relative_attention_bias" in n
        groups.append({"params": [p], "weight_decay": 0.0 if no_wd else 0.01})
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-8)

    ckpt_dir = os.path.join(work_dir, "ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt_path = os.path.join(ckpt_dir, f"{name}.pt")
    start, elapsed_before = 0, 0.0
    if resume and os.path.exists(ckpt_path):
        st = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start, elapsed_before = st["step"], st.get("elapsed", 0.0)
        torch.set_rng_state(st["torch_rng"])
        print(f"[{name}] resumed at step {start}", flush=True)

    def save_ckpt(step, elapsed):
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                    "torch_rng": torch.get_rng_state()}, tmp)
        os.replace(tmp, ckpt_path)

    def val_loss():
        """Reference cross-entropy (nats/token) on 512 fixed validation pairs."""
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad(), torch.autocast(**autocast):
            for vb in val_batches:
                lg = _logits(model, vb)
                tot += F.cross_entropy(lg.view(-1, lg.size(-1)), vb["labels"].view(-1), ignore_index=-100,
                                       reduction="sum").item()
                n += int((vb["labels"] != -100).sum())
        model.train()
        return tot / max(n, 1)

    t0 = time.time()
    last_ckpt = t0
    ema = None
    done_steps = steps
    bar = tqdm(range(start, steps), initial=start, total=steps, desc=name, dynamic_ncols=True, mininterval=5)
    for step in bar:
        time_frac = (elapsed_before + time.time() - t0) / (max_minutes * 60) if max_minutes else 0.0
        base = lr_at(step, steps, lr, warmup, time_frac)
        for g in opt.param_groups:
            scale = max(1e-3, g["params"][0].detach().pow(2).mean().sqrt().item()) if rms_scaling else 1.0
            g["lr"] = base * scale
        b = batches(step)
        with torch.autocast(**autocast):
            logits = _logits(model, b)
        valid = b["labels"] != -100
        ce = F.cross_entropy(logits.view(-1, logits.size(-1)), b["labels"].view(-1), ignore_index=-100)
        loss = ce
        if teacher is not None and kl_weight > 0:
            with torch.no_grad(), torch.autocast(**autocast):
                t_logits = _logits(teacher, b)
                t_logp = F.log_softmax(t_logits, -1)
            s_logp = F.log_softmax(logits, -1)
            kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1)
            kl = (kl * valid).sum() / valid.sum()
            loss = (1 - kl_weight) * ce + kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{ema:.3f}", ce=f"{ce.item():.3f}", lr=f"{base:.2e}")
        if step % 200 == 0:
            vl = f" val_ce {val_loss():.4f}" if step % 1000 == 0 else ""
            print(f"[{name}] step {step} loss {ema:.4f} ce {ce.item():.4f}{vl} "
                  f"elapsed {elapsed_before + time.time() - t0:.0f}s", flush=True)
        if max_minutes is not None and elapsed_before + time.time() - t0 > max_minutes * 60:
            print(f"[{name}] time budget of {max_minutes} min reached at step {step + 1}/{steps}; stopping",
                  flush=True)
            done_steps = step + 1
            break
        if time.time() - last_ckpt > ckpt_minutes * 60:
            save_ckpt(step + 1, elapsed_before + time.time() - t0)
            last_ckpt = time.time()
    bar.close()
    elapsed = elapsed_before + time.time() - t0
    save_ckpt(done_steps, elapsed)
    final_val = val_loss()
    print(f"[{name}] validation cross-entropy {final_val:.4f} nats/token", flush=True)
    final_dir = os.path.join(work_dir, name)
    model.eval()
    model.save_pretrained(final_dir, safe_serialization=True)
    tok.save_pretrained(final_dir)
    with open(os.path.join(final_dir, "train_info.json"), "w") as f:
        import json

        json.dump({"steps": done_steps, "scheduled_steps": steps, "batch_size": batch_size, "lr": lr, "warmup": warmup,
                   "seed": seed, "threads": threads, "dropout": dropout, "precision": precision, "rms_scaling": rms_scaling,
                   "train_seconds": round(elapsed, 1), "parameters": n_params,
                   "kl_weight": kl_weight, "teacher": bool(teacher_dir), "final_loss_ema": ema,
                   "seq_kd_sources": seq_kd_sources if teacher_dir else 0, "seq_kd_repeat": seq_kd_repeat,
                   "val_ce": round(final_val, 4),
                   "train_pairs": len(examples)}, f, indent=1)
    print(f"[{name}] done in {elapsed / 60:.1f} min -> {final_dir}", flush=True)
    return final_dir

"""Stages `speech-target` and `speech-draft`: the speech pair trained on the clips of `speech-data`.

* Target: a Whisper (WhisperForConditionalGeneration) with d_model 256, 4 encoder + 4 decoder layers, 4 heads, FFN
  1024, 80 mel bins and a 10 s window (500 encoder positions), on the speech vocabulary (models/speech_vocab.py).
* Draft: distil-whisper's layout: the target's encoder (copied, frozen) and a decoder of DRAFT_LAYERS layers
  initialised from the target's first and last, trained on the target's next-token distributions (KL) mixed with the
  reference cross-entropy, teacher-forced on the same clips. The frozen encoder runs once for both models.

A clip's transcript is the decoder's target in Whisper's format: start of transcript, <|en|>, <|transcribe|>, then
either <|notimestamps|> and the text, or each segment between its start and end timestamps (rounded to 0.02 s), then
<|endoftext|>. Half the clips (chosen by the clip's index and the seed) are written each way, so one model does both.
The prompt's predictions (language, task, no timestamps) carry no loss.

Data order is a function of (seed, step), and a checkpoint is written every few minutes, so `--resume` continues a
run on the same batches after an interruption. The lr schedule ends at the step count or the time budget, whichever
comes first (as models/train.py).
"""

from __future__ import annotations

import glob
import json
import math
import os
import random
import time

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from . import speech_vocab as sv
from .speech_data import N_MELS, WINDOW_S

TARGET = dict(d_model=256, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=1024, decoder_ffn_dim=1024)
DRAFT_LAYERS = 2
MAX_TOKENS = 224                # decoder positions (the longest transcript of a 10 s clip is ~110 tokens)


# --------------------------------------------------------------------------- data
def load_split(work: str, split: str, limit: int | None = None):
    """(features [clips, N_MELS, frames] float16, clip records) of a split's shards, in shard order."""
    folder = os.path.join(work, "speech", split)
    stems = sorted(p[:-5] for p in glob.glob(os.path.join(folder, "shard-*.json")))
    if not stems:
        raise SpecdecError(f"no speech shards in {folder}", "run `specdec-models speech-data` first")
    feats, clips = [], []
    for stem in stems:
        with open(stem + ".json") as f:
            info = json.load(f)
        if info["window_s"] != WINDOW_S or info["n_mels"] != N_MELS:
            raise SpecdecError(f"{stem}.json was made for another window or mel count",
                               "make the shards again with this version (delete the folder)")
        with np.load(stem + ".npz") as z:
            feats.append(z["features"])
        clips += info["clips"]
        if limit is not None and len(clips) >= limit:
            break
    out = np.concatenate(feats)
    return (out[:limit], clips[:limit]) if limit is not None else (out, clips)


CUT_SHARE = 0.3                 # of the clips written with timestamps: cut inside their last sentence
FRAMES_A_SECOND = 100


def transcript(tok, specials, clip: dict, timestamps: bool, cut: float | None = None) -> list:
    """The decoder's token sequence of a clip, from start of transcript to end of text (module docstring). `cut`: the
    audio ends at that time, inside the last segment: that segment is written as Whisper writes a segment the window
    cuts, its start timestamp and the words begun before the cut, no end timestamp."""
    ids = [specials.start, specials.languages["<|en|>"], specials.tasks["transcribe"]]
    if not timestamps:
        return ids + [specials.no_timestamps] + tok.encode(clip["text"]).ids + [specials.eos]
    segments = clip["segments"]
    for start, end, text in segments[:-1] if cut is not None else segments:
        ids += [sv.timestamp_id(specials, start)] + tok.encode(text).ids + [sv.timestamp_id(specials, min(end, WINDOW_S))]
    if cut is not None:
        start, _, text = segments[-1]
        heard = [w for t, w in clip["words"] if start <= t < cut - 0.1]
        ids += [sv.timestamp_id(specials, start)] + tok.encode(_prefix(text, heard)).ids
    return ids + [specials.eos]


def _prefix(text: str, words: list) -> str:
    """`text` up to the end of the last of `words` (espeak-ng's word events, found in order)."""
    at = 0
    for w in words:
        k = text.find(w, at)
        if k < 0:
            break
        at = k + len(w)
    return text[:at]


def examples(tok, specials, clips: list, seed: int) -> tuple:
    """(token sequences, cut frame or None) of every clip: half without timestamps, half with; CUT_SHARE of those
    cut at a random time inside their last sentence (from its first word on)."""
    rng = random.Random(seed)
    seqs, cuts = [], []
    for clip in clips:
        timestamps = rng.random() < 0.5
        cut = None
        start, end, _ = clip["segments"][-1]
        if timestamps and rng.random() < CUT_SHARE and end - start > 1.0:
            cut = round(rng.uniform(start + 0.4, end - 0.3), 2)
        seqs.append(transcript(tok, specials, clip, timestamps, cut))
        cuts.append(None if cut is None else int(cut * FRAMES_A_SECOND))
    return seqs, cuts


def collate(feats: np.ndarray, seqs: list, cuts: list, idx: list, no_timestamps: int):
    """(features, decoder inputs, labels) of the clips `idx`; a cut clip's frames from its cut on are the padding's
    (the log-mel of silence past the clip's end: its last frame). The predictions of <|en|>, <|transcribe|> and
    <|notimestamps|> (the prompt the runtime writes) carry no loss (-100)."""
    import torch

    length = max(len(seqs[i]) for i in idx) - 1
    dec = torch.full((len(idx), length), seqs[idx[0]][-1], dtype=torch.long)
    labels = torch.full((len(idx), length), -100, dtype=torch.long)
    x = feats[idx].astype(np.float32)
    for row, i in enumerate(idx):
        s = seqs[i][:MAX_TOKENS + 1]
        dec[row, :len(s) - 1] = torch.tensor(s[:-1])
        labels[row, :len(s) - 1] = torch.tensor(s[1:])
        labels[row, :3 if s[3] == no_timestamps else 2] = -100
        if cuts[i] is not None:
            x[row, :, cuts[i]:] = x[row, :, -1:]
    return torch.from_numpy(x), dec, labels


def batch_order(n: int, batch: int, seed: int, step: int) -> list:
    """The clips of `step`: an epoch is a permutation of the clips by (seed, epoch)."""
    per_epoch = n // batch
    epoch, i = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[i * batch:(i + 1) * batch].tolist()


def lr_at(step: int, warmup: int, total: int, peak: float, time_frac: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = max((step - warmup) / max(1, total - warmup), time_frac)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# --------------------------------------------------------------------------- models
def target_config(specials):
    from transformers import WhisperConfig

    return WhisperConfig(vocab_size=sv.model_rows(specials), num_mel_bins=N_MELS, max_source_positions=WINDOW_S * 50,
                         max_target_positions=MAX_TOKENS, pad_token_id=specials.eos, bos_token_id=specials.eos,
                         eos_token_id=specials.eos, decoder_start_token_id=specials.start, dropout=0.0,
                         suppress_tokens=None, begin_suppress_tokens=None, **TARGET)


def draft_from(target):
    """The draft: the target's encoder and embeddings, DRAFT_LAYERS decoder layers copied from the target's first and
    last (distil-whisper's initialisation)."""
    import copy

    import torch
    from transformers import WhisperForConditionalGeneration

    cfg = copy.deepcopy(target.config)
    cfg.decoder_layers = DRAFT_LAYERS
    draft = WhisperForConditionalGeneration(cfg)
    state = target.state_dict()
    picks = [0, target.config.decoder_layers - 1] if DRAFT_LAYERS == 2 else [target.config.decoder_layers - 1]
    mapped = {}
    for k, v in state.items():
        if k.startswith("model.decoder.layers."):
            layer = int(k.split(".")[3])
            if layer in picks:
                mapped[k.replace(f"layers.{layer}.", f"layers.{picks.index(layer)}.", 1)] = v
        else:
            mapped[k] = v
    missing, unexpected = draft.load_state_dict(mapped, strict=False)
    if [m for m in missing if m != "proj_out.weight"] or unexpected:
        raise RuntimeError(f"draft init: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        draft.proj_out.weight = draft.model.decoder.embed_tokens.weight
    return draft


# --------------------------------------------------------------------------- training
CTC_CHARS = " abcdefghijklmnopqrstuvwxyz0123456789'"       # the CTC head's classes after the blank (0)


def characters(text: str) -> list:
    """A transcript's characters as CTC classes (1 ..): lowercase letters, digits, apostrophes; anything else a space,
    spaces merged."""
    keep = "".join(c if c in CTC_CHARS else " " for c in text.lower())
    return [CTC_CHARS.index(c) + 1 for c in " ".join(keep.split())]


def ctc_targets(chars: list, idx: list):
    """The clips' character classes concatenated, and their lengths (F.ctc_loss's targets)."""
    import torch

    rows = [chars[i] for i in idx]
    return torch.tensor([t for r in rows for t in r], dtype=torch.long), torch.tensor([len(r) for r in rows])


def train(name: str, work: str, minutes: float, steps: int, batch: int, lr: float, warmup: int, seed: int,
          threads: int, resume: bool, kl_weight: float = 0.8, precision: str = "bf16", ckpt_minutes: float = 4.0,
          ctc_weight: float = 0.3, log=print) -> str:
    """Train the speech target (name "speech-target") or draft ("speech-draft", from the trained target); returns the
    saved checkpoint directory work/<name>."""
    import torch
    import torch.nn.functional as F
    from transformers import WhisperForConditionalGeneration

    from .whisper_checkpoint import set_generation, write_extractor

    torch.set_num_threads(threads)
    autocast = dict(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    tok_dir = os.path.join(work, "speech", "tokenizer")
    specials = sv.write_speech_tokenizer(tok_dir, WINDOW_S)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    feats, clips = load_split(work, "train")
    seqs, cuts = examples(tok, specials, clips, seed)
    vfeats, vclips = load_split(work, "validation", 256)
    vseqs, vcuts = examples(tok, specials, vclips, seed + 7)
    log(f"[{name}] {len(clips)} training clips, {len(clips) // batch} batches an epoch")

    torch.manual_seed(seed)
    teacher = None
    if name == "speech-target":
        model = WhisperForConditionalGeneration(target_config(specials))
    else:
        tdir = os.path.join(work, "speech-target")
        if not os.path.exists(os.path.join(tdir, "config.json")):
            raise SpecdecError(f"no trained speech target in {tdir}", "run `specdec-models speech-target` first")
        teacher = WhisperForConditionalGeneration.from_pretrained(tdir, dtype=torch.float32).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        model = draft_from(teacher)
        for p in model.model.encoder.parameters():
            p.requires_grad_(False)
    # The target's encoder also learns a character CTC head (dropped after training): a monotone alignment signal from
    # the first step, which an attention decoder trained alone finds only after thousands of steps (hybrid
    # CTC/attention training). Its targets are the transcript's characters (class 0 the blank).
    ctc = torch.nn.Linear(model.config.d_model, len(CTC_CHARS) + 1) if teacher is None and ctc_weight else None
    chars = [characters(tok.decode([t for t in s if t < specials.eos])) for s in seqs] if ctc else None
    model.train()
    params = [p for p in model.parameters() if p.requires_grad] + (list(ctc.parameters()) if ctc else [])
    log(f"[{name}] parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M "
        f"({sum(p.numel() for p in params) / 1e6:.2f} M trained)")
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not (p.ndim >= 2 and "embed" not in n)]
    decay += list(ctc.parameters()) if ctc else []
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.98), eps=1e-8)

    ckpt = os.path.join(work, "ckpt", f"{name}.pt")
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    start, before = 0, 0.0
    if resume and os.path.exists(ckpt):
        st = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(st["model"])
        if ctc is not None:
            ctc.load_state_dict(st["ctc"])
        opt.load_state_dict(st["opt"])
        start, before = st["step"], st["elapsed"]
        log(f"[{name}] resumed at step {start} ({before / 60:.1f} min trained)")

    def save_ckpt(step, elapsed):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                    "ctc": ctc.state_dict() if ctc else None}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    def forward(m, x, dec, enc=None):
        if enc is None:
            return m(input_features=x, decoder_input_ids=dec).logits.float()
        return m(encoder_outputs=(enc,), decoder_input_ids=dec).logits.float()

    def val_ce():
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad(), torch.autocast(**autocast):
            for k in range(0, len(vseqs), 32):
                x, dec, labels = collate(vfeats, vseqs, vcuts, list(range(k, min(k + 32, len(vseqs)))),
                                              specials.no_timestamps)
                lg = forward(model, x, dec)
                tot += F.cross_entropy(lg.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum").item()
                n += int((labels != -100).sum())
        model.train()
        return tot / n

    t0, last, ema, step = time.time(), time.time(), None, start
    while step < steps:
        elapsed = before + time.time() - t0
        if elapsed > minutes * 60:
            log(f"[{name}] time budget of {minutes} min reached at step {step}/{steps}")
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, warmup, steps, lr, elapsed / (minutes * 60))
        idx = batch_order(len(seqs), batch, seed, step)
        x, dec, labels = collate(feats, seqs, cuts, idx, specials.no_timestamps)
        with torch.autocast(**autocast):
            if teacher is None:
                enc = model.model.encoder(x).last_hidden_state
                logits = forward(model, None, dec, enc)
                if ctc is not None:
                    frames = F.log_softmax(ctc(enc).float(), -1).transpose(0, 1)
                    targets, lengths = ctc_targets(chars, idx)
                    ctc_loss = F.ctc_loss(frames, targets, torch.full((len(idx),), frames.shape[0]), lengths,
                                          zero_infinity=True)
            else:
                with torch.no_grad():
                    enc = teacher.model.encoder(x).last_hidden_state
                    t_logp = F.log_softmax(forward(teacher, None, dec, enc), -1)
                logits = forward(model, None, dec, enc)
        ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss = ce if ctc is None else (1 - ctc_weight) * ce + ctc_weight * ctc_loss
        if teacher is not None:
            valid = labels != -100
            kl = (t_logp.exp() * (t_logp - F.log_softmax(logits, -1))).sum(-1)
            loss = (1 - kl_weight) * ce + kl_weight * (kl * valid).sum() / valid.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 100 == 0:
            vl = f" val_ce {val_ce():.4f}" if step % 1000 == 0 else ""
            vl += f" ctc {ctc_loss.item():.3f}" if ctc is not None else ""
            log(f"[{name}] step {step} loss {ema:.4f} ce {ce.item():.4f}{vl} "
                f"lr {opt.param_groups[0]['lr']:.2e} elapsed {(before + time.time() - t0) / 60:.1f} min")
        if time.time() - last > ckpt_minutes * 60:
            save_ckpt(step, before + time.time() - t0)
            last = time.time()
    elapsed = before + time.time() - t0
    save_ckpt(step, elapsed)
    final = val_ce()
    out = os.path.join(work, name)
    model.eval()
    set_generation(model, specials)
    model.save_pretrained(out)
    write_extractor(out, model.config)
    sv.write_speech_tokenizer(out, WINDOW_S)
    with open(os.path.join(out, "train_info.json"), "w") as f:
        json.dump({"steps": step, "batch": batch, "lr": lr, "warmup": warmup, "seed": seed, "threads": threads,
                   "ctc_weight": ctc_weight if ctc else None,
                   "precision": precision, "minutes": round(elapsed / 60, 1), "clips": len(clips),
                   "kl_weight": kl_weight if teacher is not None else None, "val_ce": round(final, 4)}, f, indent=1)
    log(f"[{name}] validation cross-entropy {final:.4f}; {elapsed / 60:.1f} min -> {out}")
    return out

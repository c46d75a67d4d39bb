"""Stages `speech-target` and `speech-decoders`: the speech pair trained on the clips of `speech-data`.

* Target: a Whisper (WhisperForConditionalGeneration) with d_model 256, 4 encoder + 4 decoder layers, 4 heads, FFN
  1024, 80 mel bins and a 10 s window (500 encoder positions), on the speech vocabulary (models/speech_vocab.py);
  phase 2 can grow its decoder deeper (`--speech-target-layers`, deepen), as the committed pair's 12 layers were.
* Draft: distil-whisper's layout: the target's encoder and a decoder of 2 layers (at width 384: 1,
  DRAFT_LAYERS_OF) initialised from the target's first and last (one layer: the last), trained on the target's
  next-token distributions (KL) mixed with the reference cross-entropy.

Two phases, because the encoder is most of a step's cost on this CPU (500 positions a clip against ~30 tokens):
1. `speech-target` (`train`): encoder and decoder together from scratch, batches of 8 clips, with a character CTC
   head on the encoder (hybrid CTC/attention training: the CTC loss gives the encoder an alignment from the first
   steps; the head is dropped after). Checkpoints every few minutes; `--resume` continues on the same batches.
2. `speech-decoders` (`train_decoders`): the encoder is frozen, its outputs computed once for every clip, and the
   target's decoder goes on training on them in batches of 64 clips (8x the clips a step, each step cheaper than one
   of phase 1); then the draft's decoder is distilled from the target's on the same outputs.

A clip's transcript is the decoder's target in Whisper's format: start of transcript, <|en|>, <|transcribe|>, then
either <|notimestamps|> and the text, or each segment between its start and end timestamps (rounded to 0.02 s), then
<|endoftext|>. Half the clips (chosen by the clip's index and the seed) are written each way, so one model does both;
CUT_SHARE of the timestamped ones end inside their last sentence, written as Whisper writes a segment its window
cuts (for long recordings). The prompt's predictions (language, task, no timestamps) carry no loss.

Data order is a function of (seed, step). The lr schedules end at the step count or the time budget, whichever comes
first (as models/train.py).
"""

from __future__ import annotations

import glob
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from . import speech_vocab as sv
from .speech_data import N_MELS, WINDOW_S

# The target's shape by width (`--speech-width`), and the draft's decoder layers beside it (DRAFT_LAYERS_OF). 256: the
# committed pair's start (phase 2 grew its decoder to 12 layers; a 2-layer draft). 384: whisper-tiny's width and
# encoder with a 12-layer decoder and a 1-layer draft, for a GPU machine: on the CPU a draft step costs 0.16 of its
# target step, against 0.27 with a 2-layer draft and 0.21 with a 2-layer draft before a 16-layer target (random
# weights, the runtime's default threads; models/README.md).
SIZES = {
    256: dict(d_model=256, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=1024, decoder_ffn_dim=1024),
    384: dict(d_model=384, encoder_layers=4, decoder_layers=12, encoder_attention_heads=6, decoder_attention_heads=6,
              encoder_ffn_dim=1536, decoder_ffn_dim=1536),
}
DRAFT_LAYERS_OF = {256: 2, 384: 1}
TARGET = SIZES[256]
DRAFT_LAYERS = 2                # the draft's decoder layers where nothing else says (checkpoints before widths)
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


def decoder_tokens(seqs: list, idx: list, no_timestamps: int):
    """(decoder inputs, labels) of the clips `idx`, padded with end of text; the predictions of <|en|>,
    <|transcribe|> and <|notimestamps|> (the prompt the runtime writes) carry no loss (-100)."""
    import torch

    length = max(len(seqs[i]) for i in idx) - 1
    dec = torch.full((len(idx), length), seqs[idx[0]][-1], dtype=torch.long)
    labels = torch.full((len(idx), length), -100, dtype=torch.long)
    for row, i in enumerate(idx):
        s = seqs[i][:MAX_TOKENS + 1]
        dec[row, :len(s) - 1] = torch.tensor(s[:-1])
        labels[row, :len(s) - 1] = torch.tensor(s[1:])
        labels[row, :3 if s[3] == no_timestamps else 2] = -100
    return dec, labels


def _rows(array, idx: list):
    """Rows `idx` of a numpy array or a tensor as a float32 tensor, where the rows are (a numpy array: the CPU)."""
    import torch

    if isinstance(array, np.ndarray):
        return torch.from_numpy(array[idx]).float()
    return array[torch.tensor(idx, device=array.device)].float()


def clip_features(feats, cuts: list, idx: list, device: str | None = None):
    """The features of the clips `idx` as float32 on `device` (default: where `feats` is); a cut clip's frames from
    its cut on are the padding's (the log-mel of silence past the clip's end: its last frame)."""
    x = _rows(feats, idx)
    if device is not None:
        x = x.to(device)
    for row, i in enumerate(idx):
        if cuts[i] is not None:
            x[row, :, cuts[i]:] = x[row, :, -1:]
    return x


def collate(feats, seqs: list, cuts: list, idx: list, no_timestamps: int):
    """(features, decoder inputs, labels) of the clips `idx` (clip_features, decoder_tokens), on the device `feats` is
    on (a numpy array: the CPU; a tensor: its device)."""
    x = clip_features(feats, cuts, idx)
    dec, labels = decoder_tokens(seqs, idx, no_timestamps)
    return x, dec.to(x.device), labels.to(x.device)


def update(opt, loss, params) -> None:
    """One optimizer step on `loss`, gradients clipped to norm 1."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def batch_order(n: int, batch: int, seed: int, step: int) -> list:
    """The clips of `step`: an epoch is a permutation of the clips by (seed, epoch); a batch of more than `n` clips is
    all of them."""
    batch = min(batch, n)
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
def target_config(specials, width: int | None = None):
    """The target's Whisper configuration: SIZES[width] (TARGET when None) on the speech vocabulary."""
    from transformers import WhisperConfig

    if width is not None and width not in SIZES:
        raise SpecdecError(f"--speech-width {width} is not a trained shape", f"pass one of {', '.join(map(str, SIZES))}")
    shape = TARGET if width is None else SIZES[width]
    return WhisperConfig(vocab_size=sv.model_rows(specials), num_mel_bins=N_MELS, max_source_positions=WINDOW_S * 50,
                         max_target_positions=MAX_TOKENS, pad_token_id=specials.eos, bos_token_id=specials.eos,
                         eos_token_id=specials.eos, decoder_start_token_id=specials.start, dropout=0.0,
                         suppress_tokens=None, begin_suppress_tokens=None, **shape)


def device_of(device: str = "auto") -> str:
    """"cuda" or "cpu": `auto` takes a CUDA GPU when PyTorch sees one; `cuda` without one is a one-line error."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise SpecdecError(f"--device {device!r} is not auto, cpu or cuda", "pass --device auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecdecError("--device cuda: PyTorch sees no CUDA GPU here",
                           "pass --device cpu, or run on a GPU machine with PyTorch's CUDA build")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _setup(device: str, threads: int) -> None:
    """Threads for the CPU; TF32 matmuls on a GPU (the products that bf16 autocast leaves in fp32)."""
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def on_device(feats: np.ndarray, device: str):
    """A split's features where the steps index them: the numpy array on the CPU, one float16 tensor on a GPU
    (24,000 clips are 3.8 GB; each step then gathers its clips there instead of copying them over)."""
    import torch

    return feats if device == "cpu" else torch.from_numpy(feats).to(device)


def checkpoint_config(state: dict, specials):
    """The target configuration a phase-1 checkpoint was trained with (checkpoints before widths: TARGET's)."""
    from transformers import WhisperConfig

    return WhisperConfig(**state["config"]) if state.get("config") else target_config(specials)


def draft_from(target, layers: int | None = None):
    """The draft: the target's encoder and embeddings, `layers` (default DRAFT_LAYERS) decoder layers copied from the
    target's first and last (distil-whisper's initialisation; one layer: the last)."""
    layers = layers or DRAFT_LAYERS
    if layers not in (1, 2):
        raise SpecdecError(f"a draft of {layers} decoder layers", "use 1 or 2 (copied from the target's last, or "
                           "first and last)")
    picks = [0, target.config.decoder_layers - 1] if layers == 2 else [target.config.decoder_layers - 1]
    mapped = {}
    for k, v in target.state_dict().items():
        if k.startswith("model.decoder.layers."):
            layer = int(k.split(".")[3])
            if layer in picks:
                mapped[k.replace(f"layers.{layer}.", f"layers.{picks.index(layer)}.", 1)] = v
        else:
            mapped[k] = v
    return _with_decoder_layers(target.config, layers, mapped, "draft init")


def _with_decoder_layers(config, layers: int, state: dict, what: str):
    """A Whisper of `config` with `layers` decoder layers holding `state` (every tensor but the output projection,
    which is tied to the decoder's embedding)."""
    import copy

    import torch
    from transformers import WhisperForConditionalGeneration

    cfg = copy.deepcopy(config)
    cfg.decoder_layers = layers
    model = WhisperForConditionalGeneration(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if [m for m in missing if m != "proj_out.weight"] or unexpected:
        raise RuntimeError(f"{what}: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        model.proj_out.weight = model.model.decoder.embed_tokens.weight
    return model


def _save(model, out: str) -> None:
    """A checkpoint directory of `model` (on any device: a GPU's is saved from a CPU copy) that specdec-export takes."""
    import copy

    on_cpu = next(model.parameters()).device.type == "cpu"
    sv.save_speech_checkpoint(model if on_cpu else copy.deepcopy(model).cpu(), out, WINDOW_S)


def device_name(device: str) -> str:
    """What the training records say it ran on: the GPU's name, or the CPU's architecture."""
    import platform

    import torch

    return torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.processor() or platform.machine()})"


# --------------------------------------------------------------------------- training
REWARM = 100
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
          threads: int, resume: bool, precision: str = "bf16", ckpt_minutes: float = 4.0,
          ctc_weight: float = 0.3, width: int | None = None, device: str = "auto", log=print) -> str:
    """The first phase: the speech target, encoder and decoder together (with the encoder's CTC head), from scratch
    at `width` (SIZES; None: TARGET), on `device` (device_of); a checkpoint every `ckpt_minutes`
    (work/ckpt/<name>.pt, with its configuration), which train_decoders starts from; `resume` goes on from it at the
    width it was trained at (another `width` is a one-line error). Returns the saved checkpoint directory
    work/<name>."""
    import torch
    import torch.nn.functional as F
    from transformers import WhisperForConditionalGeneration

    device = device_of(device)
    _setup(device, threads)
    autocast = dict(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16")
    tok_dir = os.path.join(work, "speech", "tokenizer")
    specials = sv.write_speech_tokenizer(tok_dir, WINDOW_S)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    feats, clips = load_split(work, "train")
    seqs, cuts = examples(tok, specials, clips, seed)
    vfeats, vclips = load_split(work, "validation", 256)
    vseqs, vcuts = examples(tok, specials, vclips, seed + 7)
    feats, vfeats = on_device(feats, device), on_device(vfeats, device)
    log(f"[{name}] {len(clips)} training clips, {len(clips) // batch} batches an epoch, on {device}")

    ckpt = os.path.join(work, "ckpt", f"{name}.pt")
    st = torch.load(ckpt, map_location=device, weights_only=False) if resume and os.path.exists(ckpt) else None
    if st is None:
        config = target_config(specials, width)
    else:
        config = checkpoint_config(st, specials)
        if width is not None and config.d_model != width:
            raise SpecdecError(f"{ckpt} was trained at width {config.d_model}, not {width}",
                               f"pass --speech-width {config.d_model} to go on with it, or use another --work-dir")
    draft_layers = (st or {}).get("draft_layers") or DRAFT_LAYERS_OF.get(config.d_model, DRAFT_LAYERS)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    # The target's encoder also learns a character CTC head (dropped after training): a monotone alignment signal from
    # the first step, which an attention decoder trained alone finds only after thousands of steps (hybrid
    # CTC/attention training). Its targets are the transcript's characters (class 0 the blank).
    ctc = torch.nn.Linear(model.config.d_model, len(CTC_CHARS) + 1) if ctc_weight else None
    model.to(device)
    if ctc is not None:
        ctc.to(device)
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

    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    start, before, fresh_opt = 0, 0.0, False
    if st is not None:
        model.load_state_dict(st["model"])
        if ctc is not None and st.get("ctc") is not None:
            ctc.load_state_dict(st["ctc"])
        if st.get("opt") is not None:
            opt.load_state_dict(st["opt"])
        fresh_opt = st.get("opt") is None     # a checkpoint made from a pack (seed_from_pack): no optimizer state
        start, before = st["step"], st["elapsed"]
        log(f"[{name}] resumed at step {start} ({before / 60:.1f} min trained"
            f"{'; the optimizer and the CTC head start afresh' if fresh_opt else ''})")

    def save_ckpt(step, elapsed):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                    "ctc": ctc.state_dict() if ctc else None, "config": model.config.to_dict(), "batch": batch,
                    "draft_layers": draft_layers},
                   ckpt + ".tmp")
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
        # a fresh optimizer on trained weights warms up again over REWARM steps
        rewarm = min(1.0, (step - start + 1) / REWARM) if fresh_opt else 1.0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, warmup, steps, lr, elapsed / (minutes * 60)) * rewarm
        idx = batch_order(len(seqs), batch, seed, step)
        x, dec, labels = collate(feats, seqs, cuts, idx, specials.no_timestamps)
        with torch.autocast(**autocast):
            enc = model.model.encoder(x).last_hidden_state
            logits = forward(model, None, dec, enc)
            if ctc is not None:
                frames = F.log_softmax(ctc(enc).float(), -1).transpose(0, 1)
                targets, lengths = ctc_targets(chars, idx)
                ctc_loss = F.ctc_loss(frames, targets.to(device), torch.full((len(idx),), frames.shape[0],
                                      device=device), lengths.to(device), zero_infinity=True)
        ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss = ce if ctc is None else (1 - ctc_weight) * ce + ctc_weight * ctc_loss
        update(opt, loss, params)
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
    _save(model, out)
    with open(os.path.join(out, "train_info.json"), "w") as f:
        json.dump({"steps": step, "batch": batch, "lr": lr, "warmup": warmup, "seed": seed, "threads": threads,
                   "ctc_weight": ctc_weight if ctc else None, "device": device_name(device),
                   "width": model.config.d_model, "draft_layers": draft_layers,
                   "precision": precision, "minutes": round(elapsed / 60, 1), "clips": len(clips),
                   "val_ce": round(final, 4)}, f, indent=1)
    log(f"[{name}] validation cross-entropy {final:.4f}; {elapsed / 60:.1f} min -> {out}")
    return out


# --------------------------------------------------------------------------- decoders on a frozen encoder
def encoder_cache(model, feats: np.ndarray, cuts: list, batch: int = 32, log=print):
    """The encoder's output of every clip (cut clips cut first), float16 [clips, positions, d_model]: what the
    decoders train on once the encoder is frozen. On the model's device: a numpy array on the CPU, a tensor on a GPU
    (24,000 clips at width 384 are 9.2 GB)."""
    import torch

    model.eval()
    device = next(model.parameters()).device.type
    shape = (len(feats), model.config.max_source_positions, model.config.d_model)
    out = np.empty(shape, np.float16) if device == "cpu" else torch.empty(shape, dtype=torch.float16, device=device)
    t0 = time.time()
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        for k in range(0, len(feats), batch):
            idx = list(range(k, min(k + batch, len(feats))))
            hidden = model.model.encoder(clip_features(feats, cuts, idx, device)).last_hidden_state
            if device == "cpu":
                out[k:k + len(idx)] = hidden.float().numpy()
            else:
                out[k:k + len(idx)] = hidden.to(torch.float16)
            if k // batch % 50 == 0:
                log(f"encoder outputs: {k + len(idx)}/{len(feats)} clips ({time.time() - t0:.0f} s)")
    return out


def decoder_from(model, directory: str):
    """`model`'s encoder with the decoder (its embeddings and the tied output projection with it, and its depth) of
    the checkpoint in `directory`; None when there is no such checkpoint."""
    from transformers import WhisperForConditionalGeneration

    if not os.path.exists(os.path.join(directory, "config.json")):
        return None
    done = WhisperForConditionalGeneration.from_pretrained(directory)
    done.model.encoder.load_state_dict(model.model.encoder.state_dict())
    return done


def deepen(model, layers: int):
    """`model` with `layers` decoder layers and the same function: its own layers spread evenly over the new stack,
    each added layer a copy of the one before it with the outputs of its attentions and of its feed-forward block
    zeroed, so that it adds nothing to the residual stream until training gives it something to add (a target grown
    deeper than its draft costs more a step, as Whisper's large decoders do against distil-whisper's two layers)."""
    import torch

    have = model.config.decoder_layers
    if layers < have:
        raise SpecdecError(f"--speech-target-layers {layers} is fewer than the trained decoder's {have} layers",
                           f"pass {have} or more (layers are added, never removed)")
    if layers == have:
        return model
    slots = [i * layers // have for i in range(have)]
    mapped = {}
    for k, v in model.state_dict().items():
        if not k.startswith("model.decoder.layers."):
            mapped[k] = v
            continue
        i, rest = int(k.split(".")[3]), k.split(".", 4)[4]
        end = slots[i + 1] if i + 1 < have else layers
        for slot in range(slots[i], end):
            outputs = rest.rsplit(".", 1)[0] in ("self_attn.out_proj", "encoder_attn.out_proj", "fc2")
            added = slot != slots[i] and outputs
            mapped[f"model.decoder.layers.{slot}.{rest}"] = torch.zeros_like(v) if added else v
    return _with_decoder_layers(model.config, layers, mapped, "deepen")


def previous_decoders(work: str, log=print, roles: tuple = ("target", "draft")) -> dict:
    """{role: checkpoint directory} of the decoders phase 2 goes on from: the work directory's last phase-2 results
    (their train_info has decoder_steps; phase 1 writes work/speech-target over the target's), else the committed pair
    (models/speech, unpacked into work/committed): so training adds up over runs and over sittings. `roles` other
    than both: only the work directory's results of those roles (the GPU run's draft; its target goes on in phase 1)."""
    from .speech_pack import checkpoints

    found = {}
    for role in roles:
        info = os.path.join(work, f"speech-{role}", "train_info.json")
        if os.path.exists(info) and "decoder_steps" in json.loads(Path(info).read_text()):
            found[role] = os.path.join(work, f"speech-{role}")
    if len(found) < 2 and set(roles) == {"target", "draft"}:
        found = {role: str(path) for role, path in checkpoints(os.path.join(work, "committed")).items()}
        log("[decoders] going on from the committed pair's decoders (models/speech)")
    return found


def train_decoders(work: str, target_minutes: float, draft_minutes: float, batch: int = 64, seed: int = 0,
                   threads: int = 2, lr: float = 1e-3, kl_weight: float = 0.8, resume: bool = False,
                   target_layers: int | None = None, device: str = "auto", go_on: tuple = ("target", "draft"),
                   log=print) -> tuple:
    """The second phase: the encoder of the target trained so far (work/ckpt/speech-target.pt) is frozen, its outputs
    computed once for every training clip, and the target's decoder trained on them for `target_minutes`, batches of
    `batch` clips (the encoder is most of a step's cost, so a step without it takes 8x the clips in less time); then
    the draft's decoder (draft_from: the target's first and last layers) is distilled from the target's on the same
    outputs for `draft_minutes`. `resume`: each decoder starts from the last phase 2's (previous_decoders: the work
    directory's, else the committed pair's; `go_on`: only those roles, previous_decoders), so phase 2 goes on across
    runs. `target_layers`: the target's decoder grown to that many layers first (deepen). `device`: as train's
    (device_of). Saves work/speech-target and work/speech-draft; returns their paths."""
    import torch
    import torch.nn.functional as F
    from tokenizers import Tokenizer
    from transformers import WhisperForConditionalGeneration

    device = device_of(device)
    _setup(device, threads)
    tok_dir = os.path.join(work, "speech", "tokenizer")
    specials = sv.write_speech_tokenizer(tok_dir, WINDOW_S)
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    ckpt = os.path.join(work, "ckpt", "speech-target.pt")
    if not os.path.exists(ckpt):
        raise SpecdecError(f"no speech target checkpoint {ckpt}", "run `specdec-models speech-target` first")
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    target = WhisperForConditionalGeneration(checkpoint_config(state, specials))
    target.load_state_dict(state["model"])
    log(f"[decoders] the target's encoder after {state['step']} steps ({state['elapsed'] / 60:.1f} min)")
    previous = previous_decoders(work, log, go_on) if resume else {}
    went_on = decoder_from(target, previous["target"]) if "target" in previous else None
    if went_on is not None:
        target = went_on
        log(f"[decoders] the target's decoder ({target.config.decoder_layers} layers) goes on from "
            f"{previous['target']}")
    if target_layers and target_layers != target.config.decoder_layers:
        log(f"[decoders] the target's decoder grown from {target.config.decoder_layers} to {target_layers} layers")
        target = deepen(target, target_layers)
    target.to(device)
    feats, clips = load_split(work, "train")
    seqs, cuts = examples(tok, specials, clips, seed)
    vfeats, vclips = load_split(work, "validation", 256)
    vseqs, vcuts = examples(tok, specials, vclips, seed + 7)
    cache = encoder_cache(target, feats, cuts, log=log)
    del feats
    vcache = encoder_cache(target, vfeats, vcuts, log=log)
    autocast = dict(device_type=device, dtype=torch.bfloat16)

    def logits(m, enc, dec):
        return m(encoder_outputs=(enc,), decoder_input_ids=dec).logits.float()

    def val_ce(m):
        m.eval()
        tot = n = 0
        with torch.no_grad(), torch.autocast(**autocast):
            for k in range(0, len(vseqs), 64):
                idx = list(range(k, min(k + 64, len(vseqs))))
                dec, labels = (t.to(device) for t in decoder_tokens(vseqs, idx, specials.no_timestamps))
                lg = logits(m, _rows(vcache, idx), dec)
                tot += F.cross_entropy(lg.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum").item()
                n += int((labels != -100).sum())
        m.train()
        return tot / n

    def phase(name, student, teacher, minutes, peak):
        for p in student.model.encoder.parameters():
            p.requires_grad_(False)
        params = [p for p in student.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=peak, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
        student.train()
        log(f"[{name}] decoder on frozen encoder outputs: {sum(p.numel() for p in params) / 1e6:.2f} M trained, "
            f"batches of {batch}, val_ce {val_ce(student):.4f} before")
        t0, step, ema = time.time(), 0, None
        while time.time() - t0 < minutes * 60:
            for g in opt.param_groups:
                g["lr"] = lr_at(step, 100, 10 ** 9, peak, (time.time() - t0) / (minutes * 60))
            idx = sorted(batch_order(len(seqs), batch, seed + 11, step))
            dec, labels = (t.to(device) for t in decoder_tokens(seqs, idx, specials.no_timestamps))
            enc = _rows(cache, idx)
            with torch.autocast(**autocast):
                lg = logits(student, enc, dec)
                if teacher is not None:
                    with torch.no_grad():
                        t_logp = F.log_softmax(logits(teacher, enc, dec), -1)
            ce = F.cross_entropy(lg.flatten(0, 1), labels.flatten(), ignore_index=-100)
            loss = ce
            if teacher is not None:
                valid = labels != -100
                kl = (t_logp.exp() * (t_logp - F.log_softmax(lg, -1))).sum(-1)
                loss = (1 - kl_weight) * ce + kl_weight * (kl * valid).sum() / valid.sum()
            update(opt, loss, params)
            step += 1
            ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
            if step % 100 == 0:
                log(f"[{name}] step {step} loss {ema:.4f} ce {ce.item():.4f} lr {opt.param_groups[0]['lr']:.2e} "
                    f"elapsed {(time.time() - t0) / 60:.1f} min")
        final = val_ce(student)
        student.eval()
        out = os.path.join(work, name)
        _save(student, out)
        with open(os.path.join(out, "train_info.json"), "w") as f:
            json.dump({"encoder_steps": state["step"], "encoder_minutes": round(state["elapsed"] / 60, 1),
                       "encoder_batch": state.get("batch", 8), "ctc_weight": 0.3, "decoder_steps": step,
                       "decoder_batch": batch,
                       "decoder_minutes": round((time.time() - t0) / 60, 1), "lr": peak, "seed": seed,
                       "kl_weight": kl_weight if teacher is not None else None, "clips": len(seqs),
                       "device": device_name(device),
                       "val_ce": round(final, 4)}, f, indent=1)
        log(f"[{name}] validation cross-entropy {final:.4f} after {step} steps -> {out}")
        return student

    if target_minutes > 0 or went_on is not None or target_layers:
        target = phase("speech-target", target, None, target_minutes, lr)
    else:
        log("[decoders] the target's decoder stays as phase 1 left it (no minutes for it)")
    for p in target.parameters():
        p.requires_grad_(False)
    draft = draft_from(target, state.get("draft_layers"))
    went_on = decoder_from(draft, previous["draft"]) if "draft" in previous else None
    if went_on is not None:
        draft = went_on
        log(f"[decoders] the draft's decoder goes on from {previous['draft']}")
    phase("speech-draft", draft.to(device), target.eval(), draft_minutes, lr / 2)
    return os.path.join(work, "speech-target"), os.path.join(work, "speech-draft")

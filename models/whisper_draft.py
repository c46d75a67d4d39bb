"""A distilled draft for a real Whisper target (specdec-models whisper-draft): its data, its training and its package.

    specdec-models whisper-draft --target ~/.cache/specdec/whisper/base --out models/whisper-base-draft

The draft is the target's decoder cut to two layers (the first and the last), sharing the target's encoder, token
and position embeddings (its output projection is the token embedding, as in Whisper) and trained to imitate the
target:

1. data: everyday sentences (models/everyday.py) spoken by espeak-ng voices and speeds that the benchmark's clips
   do not use (TRAIN_VOICES x TRAIN_SPEEDS, benchmarks/whisper_clips.py keeps the others), each clip's log-mel
   features through the target's encoder, the target's own greedy transcript (sequence-level distillation) and its
   TOP_K most likely tokens and log-probabilities at each step of that transcript (token-level distillation).
   Shards of SHARD clips under `<work>/whisper-draft/data/`, each written whole and renamed: a run that stops
   resumes at the first missing shard. The last VALIDATION_SHARDS hold sentences and voices apart for the α curve.
2. train: the draft's layers and final norm (the cross-attention's key and value projections stay the target's
   layers', so the target's encoder outputs are read once a clip), loss = (1 - w) CE(transcript) + w KL(target's
   top-k || draft), AdamW on a cosine schedule over `minutes`. A checkpoint every CHECKPOINT_S seconds (draft,
   optimizer, step, time spent, the α curve): a run that stops resumes from it, its time budget counting the time
   spent before.
3. package: the draft's own tensors in float16 (`draft.safetensors`) and `draft.json` (the target's fingerprint,
   export/families/whisper_drafts.py; the layers kept; the training record and the α curve) in `out`.
   specdec-export attaches it to a target whose weights have that fingerprint.

α on the validation shards is the mean over transcript steps of sum_x min(p(x), q(x)) with p the target's top-k
renormalized (T = 1) and the share of steps where the draft's argmax is the target's token (T = 0).
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from pathlib import Path

import numpy as np
from specdec.runtime.core.errors import SpecdecError

from .everyday import sentences

SHARD = 64                    # clips a data shard
VALIDATION_SHARDS = 2          # the last shards: sentences and voices kept apart from training
TOP_K = 64                     # the target's most likely tokens kept a step
CHECKPOINT_S = 120.0
# espeak-ng voices and speeds that the benchmark's held-out clips (benchmarks/whisper_clips.py HELD_OUT_VOICES,
# HELD_OUT_SPEEDS) do not use; the validation shards use VALIDATION_VOICES, which training does not
TRAIN_VOICES = ("en-us", "en", "en-gb-scotland", "en-029", "en-us-nyc", "en-gb-x-gbclan", "en-us+f3",
                "en-gb-x-rp+m3", "en-us+m1", "en+m3", "en-029+f2", "en-gb-x-gbclan+f1", "en-us-nyc+m4",
                "en-gb-scotland+m6", "en+f4")
VALIDATION_VOICES = ("en-us+m5", "en-gb-x-rp+f5")
TRAIN_SPEEDS = (135, 145, 160, 175, 185, 200)
PITCHES = (30, 70)
MIN_S, MAX_S = 1.5, 12.0
MAX_NEW = 96                   # tokens a transcript (a clip is at most MAX_S)
KEEP_LAYERS = "first,last"


def _log(message: str) -> None:
    print(message, flush=True)


def load_target(target: str, threads: int):
    """The target (a Hugging Face Whisper folder or a CTranslate2 / faster-whisper folder), its feature extractor and
    tokenizer, in float32 on the CPU."""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    torch.set_num_threads(threads)
    if not os.path.isdir(target):
        raise SpecdecError(f"--target {target} is not a folder",
                           "pass a Whisper model's folder (Hugging Face or CTranslate2 / faster-whisper), e.g. "
                           "~/.cache/specdec/whisper/base after `python -m specdec.bench.whisper_models fetch base`")
    folder = target if os.path.isfile(os.path.join(target, "config.json")) and not \
        os.path.isfile(os.path.join(target, "model.bin")) else _transformers_folder(target)
    model = WhisperForConditionalGeneration.from_pretrained(folder, torch_dtype=torch.float32).eval()
    return model, WhisperFeatureExtractor.from_pretrained(folder), folder


def _plan(clips: int, seed: int) -> list:
    """Each clip's (kind, sentence, voice name, rate, pitch), the last VALIDATION_SHARDS * SHARD in the validation
    voices."""
    rng = np.random.default_rng(seed + 1)
    plan = []
    for i, (kind, text) in enumerate(sentences(clips, seed)):
        voices = VALIDATION_VOICES if i >= clips - VALIDATION_SHARDS * SHARD else TRAIN_VOICES
        plan.append((kind, text, str(rng.choice(voices)), int(rng.choice(TRAIN_SPEEDS)),
                     int(rng.integers(PITCHES[0], PITCHES[1] + 1))))
    return plan


def make_data(work: Path, target: str, clips: int, seed: int, threads: int, log=_log) -> Path:
    """Write the data shards that are missing (see the module's docstring); their folder."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    from .speech_synth import RATE, Voice, synthesize

    if clips < (VALIDATION_SHARDS + 1) * SHARD:
        raise SpecdecError(f"--clips {clips} is too few: {VALIDATION_SHARDS} shards of {SHARD} clips are kept "
                           "for validation", f"pass --clips {(VALIDATION_SHARDS + 8) * SHARD} or more")
    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"target": os.path.abspath(os.path.expanduser(target)), "clips": clips, "seed": seed,
                "top_k": TOP_K, "shard": SHARD}
    _same_settings(folder / "settings.json", settings, "data")
    plan = _plan(clips, seed)
    shards = math.ceil(clips / SHARD)
    missing = [i for i in range(shards) if not (folder / f"shard-{i:05d}.npz").exists()]
    if not missing:
        return folder
    model, extractor, path = load_target(target, threads)
    generation = json.loads((Path(path) / "generation_config.json").read_text())
    prompt = _prompt(generation)
    t0 = time.time()
    for done, index in enumerate(missing):
        rows = plan[index * SHARD:(index + 1) * SHARD]
        pcms, meta = [], []
        for kind, text, name, rate, pitch in rows:
            quiet = np.zeros(int(0.2 * RATE), np.float32)
            pcm = np.concatenate([quiet, synthesize(text, Voice(name, rate, pitch)).pcm, quiet])
            if not MIN_S * RATE <= pcm.size <= MAX_S * RATE:
                continue
            pcms.append(pcm)
            meta.append({"kind": kind, "text": text, "voice": f"{name} {rate} wpm pitch {pitch}",
                         "seconds": round(pcm.size / RATE, 3)})
        feats = extractor(pcms, sampling_rate=RATE, return_tensors="pt").input_features
        encs, seqs, tops, logps = [], [], [], []
        with torch.inference_mode():
            for start in range(0, len(pcms), 8):
                enc = model.model.encoder(feats[start:start + 8]).last_hidden_state
                for row, seq in enumerate(greedy(model, enc, prompt, MAX_NEW, generation)):
                    logits = model(encoder_outputs=BaseModelOutput(last_hidden_state=enc[row:row + 1]),
                                   decoder_input_ids=torch.tensor([seq[:-1]])).logits[0, len(prompt) - 1:]
                    lp = torch.log_softmax(logits.float(), -1)
                    v, ix = lp.topk(TOP_K, -1)
                    seqs.append(seq)
                    tops.append(ix.numpy().astype(np.int32))
                    logps.append(v.numpy().astype(np.float16))
                encs.append(enc.numpy().astype(np.float16))
        lengths = np.array([len(s) for s in seqs], np.int32)
        width = int(lengths.max())
        tokens = np.full((len(seqs), width), -1, np.int32)
        top = np.zeros((len(seqs), width - len(prompt), TOP_K), np.int32)
        logp = np.full((len(seqs), width - len(prompt), TOP_K), -np.inf, np.float16)
        for r, (s, ix, v) in enumerate(zip(seqs, tops, logps)):
            tokens[r, :len(s)] = s
            top[r, :len(ix)] = ix
            logp[r, :len(v)] = v
        for m, s in zip(meta, seqs):
            m["transcript_ids"] = len(s) - len(prompt)
        tmp = folder / f".shard-{index:05d}.npz"
        with open(tmp, "wb") as f:
            np.savez(f, encoder=np.concatenate(encs), tokens=tokens, lengths=lengths, top=top, logp=logp,
                     prompt=np.array(prompt, np.int32))
        (folder / f"shard-{index:05d}.json").write_text(json.dumps(meta))
        os.replace(tmp, folder / f"shard-{index:05d}.npz")
        rate = (time.time() - t0) / (done + 1)
        log(f"data: shard {index + 1}/{shards} ({len(seqs)} clips), {rate:.0f} s a shard, "
            f"{rate * (len(missing) - done - 1) / 60:.0f} min to go")
    return folder


def greedy(model, enc, prompt: list, max_new: int, generation: dict) -> list:
    """The target's greedy transcripts (prompt, tokens, end of text) of a batch of encoder outputs, with the
    suppressed tokens of its generation config (`generation`, generation_config.json), as the runtime decodes them."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    n, eos = enc.shape[0], generation["eos_token_id"]
    ids = torch.tensor([prompt] * n)
    encoded = BaseModelOutput(last_hidden_state=enc)
    out = model(encoder_outputs=encoded, decoder_input_ids=ids, use_cache=True)
    seqs = [list(prompt) for _ in range(n)]
    done = torch.zeros(n, dtype=torch.bool)
    for step in range(max_new):
        logits = out.logits[:, -1].clone()
        logits[:, list(generation.get("suppress_tokens") or [])] = -float("inf")
        if step == 0:
            logits[:, list(generation.get("begin_suppress_tokens") or [])] = -float("inf")
        nxt = logits.argmax(-1)
        for r in range(n):
            if not done[r]:
                seqs[r].append(int(nxt[r]))
        done |= nxt == eos
        if bool(done.all()):
            break
        out = model(encoder_outputs=encoded, decoder_input_ids=nxt[:, None], past_key_values=out.past_key_values,
                    use_cache=True)
    return [s if s[-1] == eos else s + [eos] for s in seqs]


def _transformers_folder(target: str) -> str:
    """A CTranslate2 / faster-whisper folder's transformers conversion, made (once, cached) by specdec-export's reader
    in a process of its own: the recipe sits below the exporter and does not import it."""
    import subprocess
    import sys

    code = ("import sys; from specdec.export.families import checkpoint_path; "
            "print(checkpoint_path(sys.argv[1], lambda *_: None))")
    done = subprocess.run([sys.executable, "-c", code, target], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise SpecdecError(f"--target {target} could not be read ({lines[-1] if lines else 'no reason given'})",
                           "pass a Whisper model's folder (Hugging Face or CTranslate2 / faster-whisper)")
    return done.stdout.strip().splitlines()[-1]


def _prompt(generation: dict) -> list:
    """The decoder prompt the runtime gives an English transcription without timestamps."""
    prompt = [generation["decoder_start_token_id"]]
    if generation.get("lang_to_id"):
        prompt.append(generation["lang_to_id"]["<|en|>"])
    if generation.get("task_to_id"):
        prompt.append(generation["task_to_id"]["transcribe"])
    if generation.get("no_timestamps_token_id") is not None:
        prompt.append(generation["no_timestamps_token_id"])
    return prompt


def _same_settings(path: Path, settings: dict, what: str) -> None:
    if path.exists():
        before = json.loads(path.read_text())
        if before != settings:
            changed = ", ".join(k for k in settings if before.get(k) != settings[k])
            raise SpecdecError(f"the {what} in {path.parent} were begun with other settings ({changed})",
                               "pass the same settings to resume, or another --work-dir to start afresh")
    else:
        path.write_text(json.dumps(settings, indent=1))


FORMAT = "specdec-whisper-draft"    # a shipped draft's folder: RECORD and TENSORS (export/families/whisper_drafts.py)
RECORD = "draft.json"
TENSORS = "draft.safetensors"


def fingerprint(model) -> str:
    """The sha256 of a Whisper model's tensors, each rounded to float16, in name order: a CTranslate2 /
    faster-whisper folder (float16) and the float32 checkpoint it was converted from have the same one."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to(torch.float16).contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def keep_layers(n: int) -> list:
    return [0, n - 1] if n > 1 else [0]


def draft_decoder(model):
    """The draft: a copy of the target's decoder with its first and last layers; which tensors it trains."""
    import copy

    import torch

    decoder = copy.deepcopy(model.model.decoder)
    decoder.layers = torch.nn.ModuleList([decoder.layers[i] for i in keep_layers(len(decoder.layers))])
    for name, p in decoder.named_parameters():
        p.requires_grad = own_tensor(name) and not (".encoder_attn.k_proj." in name or ".encoder_attn.v_proj." in name)
    return decoder


def own_tensor(name: str) -> bool:
    """Whether a decoder tensor is the draft's own (shipped) rather than the target's (shared)."""
    return name.startswith(("layers.", "layer_norm."))


class _Data:
    def __init__(self, folder: Path):
        files = sorted(glob.glob(str(folder / "shard-*.npz")))
        if len(files) <= VALIDATION_SHARDS:
            raise SpecdecError(f"{folder} holds {len(files)} data shards", "run the data step first")
        self.shards = [dict(np.load(f)) for f in files]
        self.train, self.val = self.shards[:-VALIDATION_SHARDS], self.shards[-VALIDATION_SHARDS:]
        self.prompt = len(self.shards[0]["prompt"])
        self.index = [(s, r) for s, sh in enumerate(self.train) for r in range(len(sh["lengths"]))]

    def batch(self, items, shards):
        import torch

        rows = [(shards[s], r) for s, r in items]
        width = max(int(sh["lengths"][r]) for sh, r in rows)
        n = len(rows)
        inp = torch.zeros((n, width - 1), dtype=torch.long)
        tgt = torch.full((n, width - 1), -100, dtype=torch.long)
        top = torch.zeros((n, width - 1, TOP_K), dtype=torch.long)
        logp = torch.full((n, width - 1, TOP_K), -float("inf"))
        enc = torch.from_numpy(np.stack([sh["encoder"][r] for sh, r in rows]).astype(np.float32))
        for i, (sh, r) in enumerate(rows):
            L = int(sh["lengths"][r])
            seq = torch.from_numpy(sh["tokens"][r, :L].astype(np.int64))
            inp[i, :L - 1] = seq[:-1]
            tgt[i, self.prompt - 1:L - 1] = seq[self.prompt:]
            k = L - self.prompt
            top[i, self.prompt - 1:L - 1] = torch.from_numpy(sh["top"][r, :k].astype(np.int64))
            logp[i, self.prompt - 1:L - 1] = torch.from_numpy(sh["logp"][r, :k].astype(np.float32))
        return enc, inp, tgt, top, logp


def _losses(decoder, embed, enc, inp, tgt, top, logp):
    import torch

    hidden = decoder(input_ids=inp, encoder_hidden_states=enc).last_hidden_state
    logits = hidden @ embed.weight.T
    logq = torch.log_softmax(logits, -1)
    mask = tgt != -100
    ce = torch.nn.functional.cross_entropy(logits[mask], tgt[mask])
    p = torch.softmax(logp[mask], -1)                         # the target's top-k, renormalized
    kl = (p * (torch.log(p.clamp_min(1e-12)) - logq[mask].gather(-1, top[mask]))).sum(-1).mean()
    return ce, kl, logq, mask


def validate(decoder, embed, data: _Data) -> dict:
    import torch

    agree = accept = steps = 0
    with torch.inference_mode():
        for s, sh in enumerate(data.val):
            n = len(sh["lengths"])
            for start in range(0, n, 16):
                enc, inp, tgt, top, logp = data.batch([(s, r) for r in range(start, min(n, start + 16))], data.val)
                _, _, logq, mask = _losses(decoder, embed, enc, inp, tgt, top, logp)
                q = logq[mask].exp()
                agree += int((q.argmax(-1) == tgt[mask]).sum())
                p = torch.softmax(logp[mask], -1)
                accept += float(torch.minimum(p, q.gather(-1, top[mask])).sum())
                steps += int(mask.sum())
    return {"alpha_t0": round(agree / steps, 4), "alpha_t1": round(accept / steps, 4), "steps": steps}


def train(work: Path, target: str, minutes: float, seed: int, threads: int, kl_weight: float = 0.5,
          lr: float = 5e-4, batch: int = 16, log=_log) -> Path:
    """Train (or go on training) the draft on the data shards; the checkpoint's path."""
    import torch

    torch.manual_seed(seed)
    data = _Data(work / "data")
    model, _, _ = load_target(target, threads)
    decoder = draft_decoder(model)
    embed = model.model.decoder.embed_tokens
    params = [p for p in decoder.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    path = work / "train.pt"
    state = {"step": 0, "seconds": 0.0, "curve": []}
    if path.exists():
        saved = torch.load(path, weights_only=False)
        decoder.load_state_dict(saved["decoder"])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]
        log(f"train: resuming at step {state['step']}, {state['seconds'] / 60:.1f} of {minutes:g} min spent")
    budget = minutes * 60
    rng = np.random.default_rng(seed + state["step"])
    if not state["curve"]:
        state["curve"].append({"step": 0, "minutes": 0.0, **validate(decoder, embed, data)})
        log(f"train: before training {state['curve'][-1]}")
    t_start, last_ckpt = time.time(), time.time()
    spent0 = state["seconds"]
    order = []
    while state["seconds"] < budget:
        if not order:
            order = list(rng.permutation(len(data.index)))
        items = [data.index[i] for i in order[:batch]]
        order = order[batch:]
        frac = state["seconds"] / budget
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (state["step"] + 1) / 50) * 0.5 * (1 + math.cos(math.pi * frac))
        ce, kl, _, _ = _losses(decoder, embed, *data.batch(items, data.train))
        loss = (1 - kl_weight) * ce + kl_weight * kl
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] += 1
        state["seconds"] = spent0 + time.time() - t_start
        if state["step"] % 20 == 0:
            log(f"train: step {state['step']}, {state['seconds'] / 60:.1f} min, ce {ce.item():.3f}, kl {kl.item():.3f}")
        if time.time() - last_ckpt > CHECKPOINT_S or state["seconds"] >= budget:
            state["curve"].append({"step": state["step"], "minutes": round(state["seconds"] / 60, 2),
                                   **validate(decoder, embed, data)})
            log(f"train: {state['curve'][-1]}")
            tmp = work / ".train.pt"
            torch.save({"decoder": decoder.state_dict(), "optimizer": opt.state_dict(), "state": state}, tmp)
            os.replace(tmp, path)
            last_ckpt = time.time()
    return path


def package(work: Path, target: str, out: Path, threads: int, log=_log) -> Path:
    """Write the trained draft's own tensors (float16) and draft.json into `out`."""
    import torch

    path = work / "train.pt"
    if not path.exists():
        raise SpecdecError(f"no trained draft in {work}", "run the train part first (--only train)")
    model, _, _ = load_target(target, threads)
    decoder = draft_decoder(model)
    saved = torch.load(path, weights_only=False)
    decoder.load_state_dict(saved["decoder"])
    data = json.loads((work / "data" / "settings.json").read_text())
    shards = [json.loads(Path(f).read_text()) for f in sorted(glob.glob(str(work / "data" / "shard-*.json")))]
    metas = [m for shard in shards for m in shard]
    validation = sum(len(shard) for shard in shards[-VALIDATION_SHARDS:])
    training = {"clips": len(metas) - validation, "validation_clips": validation,
                "audio_hours": round(sum(m["seconds"] for m in metas) / 3600, 2),
                "steps": saved["state"]["step"], "train_minutes": round(saved["state"]["seconds"] / 60, 1),
                "seed": data["seed"], "top_k": data["top_k"], "voices": list(TRAIN_VOICES),
                "validation_voices": list(VALIDATION_VOICES), "speeds": list(TRAIN_SPEEDS),
                "alpha_curve": saved["state"]["curve"]}
    write_draft(model, decoder, out, training)
    size = (out / "draft.safetensors").stat().st_size
    log(f"package: {out} ({size / 1e6:.1f} MB), last validation {training['alpha_curve'][-1]}")
    return out


def write_draft(model, decoder, out: Path, training: dict) -> Path:
    """A shipped draft's folder (export/families/whisper_drafts.py): the `decoder`'s own tensors in float16 and
    draft.json, with `model`'s fingerprint and the `training` record."""
    import torch
    from safetensors.torch import save_file


    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in decoder.state_dict().items() if own_tensor(k)}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / TENSORS))
    record = {"format": FORMAT, "version": 1, "target_fingerprint": fingerprint(model),
              "target_layers": model.config.decoder_layers, "d_model": model.config.d_model,
              "layers": keep_layers(model.config.decoder_layers),
              "parameters": sum(int(v.numel()) for v in tensors.values()), "training": training}
    (out / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return out


def run(work: str, target: str, out: str, clips: int, minutes: float, seed: int, threads: int,
        steps=("data", "train", "package"), log=_log) -> None:
    folder = Path(work) / "whisper-draft"
    folder.mkdir(parents=True, exist_ok=True)
    if "data" in steps:
        make_data(folder, target, clips, seed, threads, log)
    if "train" in steps:
        train(folder, target, minutes, seed, threads, log=log)
    if "package" in steps:
        package(folder, target, Path(out), threads, log)

"""Real shapes for Whisper: the official configurations written down (nothing downloaded), random-initialised
checkpoints built from them one model at a time, and what a request costs at real sizes. A pair is measured with the
target's vocabulary (the runtime needs one tokenizer for both); a distil-whisper draft keeps a copy of its teacher's
encoder and gets no encoder graph of its own. Requests are random audio filling the encoder's 30 s window.
"""

from __future__ import annotations

import gc
import statistics
from pathlib import Path

import numpy as np

from specdec.models.whisper_checkpoint import Specials, save, set_generation
from specdec.runtime.core.errors import SpecdecError

from . import measure as shapes

ALPHAS = (0.7, 0.8)
AUDIO_REQUESTS = 2              # --num-prompts' default for a Whisper pair (each request runs the encoder)
LABEL = "prediction (Theorem 3.8 with measured c; random weights)"
# The export's parity check runs PyTorch's float64 forward: 12 GB for large-v3 alone, past a 24 GB machine.
SKIP_CHECK = ("random-weight Whisper at a real size, measured for costs only; the graphs' parity against PyTorch is "
              "tested on tiny Whisper models")
# config.json of the official checkpoints: 1,500 encoder positions (30 s of 16 kHz audio), 448 decoder positions
COMMON = dict(activation_function="gelu", scale_embedding=False, max_source_positions=1500, max_target_positions=448,
              tie_word_embeddings=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
              apply_spec_augment=False, use_cache=True, is_encoder_decoder=True, suppress_tokens=None,
              begin_suppress_tokens=None)


def _dims(d_model: int, heads: int, layers: int, decoder_layers: int | None = None, mel: int = 80,
          vocab: int = 51865) -> dict:
    return dict(d_model=d_model, encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_layers=layers,
                decoder_layers=layers if decoder_layers is None else decoder_layers, encoder_ffn_dim=4 * d_model,
                decoder_ffn_dim=4 * d_model, num_mel_bins=mel, vocab_size=vocab)


CONFIGS = {
    "whisper-tiny": _dims(384, 6, 4),                                   # 37.8M parameters
    "whisper-base": _dims(512, 8, 6),                                   # 72.6M
    "whisper-small": _dims(768, 12, 12),                                # 242M
    "whisper-medium": _dims(1024, 16, 24),                              # 764M
    "whisper-large-v3": _dims(1280, 20, 32, mel=128, vocab=51866),      # 1.54B
    "distil-large-v3": _dims(1280, 20, 32, decoder_layers=2, mel=128, vocab=51866),     # 756M
}
HUB = {"openai": ("whisper-tiny", "whisper-base", "whisper-small", "whisper-medium", "whisper-large-v3"),
       "distil-whisper": ("distil-large-v3",)}
ENCODER_OF = {"distil-large-v3": "whisper-large-v3"}        # a distil-whisper model keeps its teacher's encoder

TEXT_TOKENS = 50257             # the GPT-2 BPE's; the special tokens follow (layout)
TIMESTAMPS = 1501
# the text tokens the official generation configs suppress (symbols that are not speech), all models alike
TEXT_SUPPRESS = (1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522,
                 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268, 3536, 3846, 3961,
                 4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157,
                 14635, 15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279,
                 29464, 31650, 32302, 32470, 36865, 42863, 47425, 49870, 50254)
SPACE = 220                     # " ": suppressed as the first generated token, with <|endoftext|>


def canonical(name: str) -> str | None:
    """`whisper-large-v3` for `whisper-large-v3` or `openai/whisper-large-v3` (likewise distil-whisper/...)."""
    if name in CONFIGS:
        return name
    org, _, short = name.partition("/")
    return short if short in HUB.get(org, ()) and short in CONFIGS else None


def hub_id(name: str) -> str:
    return next((f"{org}/{name}" for org, models in HUB.items() if name in models), name)


def parse_pair(text: str) -> tuple[str, str, str]:
    """(family, target, draft) of `specdec-bench shapes TARGET:DRAFT`: two T5 names or two Whisper names."""
    parts = text.split(":")
    families = [("T5" if p in shapes.CONFIGS else "Whisper" if canonical(p) else None) for p in parts]
    example = "e.g. t5-large:t5-small or openai/whisper-large-v3:distil-whisper/distil-large-v3"
    if len(parts) != 2 or None in families:
        whisper = ", ".join(hub_id(n) for n in CONFIGS)
        raise SpecdecError(f"TARGET:DRAFT names two of {', '.join(shapes.CONFIGS)} or two of {whisper} "
                           f"(got '{text}')", example)
    if families[0] != families[1]:
        raise SpecdecError(f"'{parts[0]}' is a {families[0]} model but '{parts[1]}' is a {families[1]} model: a pair "
                           f"is two T5 or two Whisper models", example)
    if families[0] == "T5":
        return "t5", parts[0], parts[1]
    return "whisper", canonical(parts[0]), canonical(parts[1])


def shares_encoder(target: str, draft: str) -> bool:
    return ENCODER_OF.get(draft) == target


def layout(vocab_size: int) -> Specials:
    """Whisper's special tokens for `vocab_size` tokens, one id after another from TEXT_TOKENS (the languages in
    transformers' LANGUAGES order)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    languages = vocab_size - TEXT_TOKENS - 8 - TIMESTAMPS
    if not 1 <= languages <= len(LANGUAGES):
        raise SpecdecError(f"a Whisper vocabulary of {vocab_size} tokens has no room for its languages",
                           f"use {TEXT_TOKENS + 8 + TIMESTAMPS + 99} or {TEXT_TOKENS + 8 + TIMESTAMPS + 100} tokens")
    codes = [f"<|{code}|>" for code in list(LANGUAGES)[:languages]]
    named = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
             "<|nospeech|>" if languages == len(LANGUAGES) else "<|nocaptions|>"]
    order = ["<|endoftext|>", "<|startoftranscript|>", *codes, *named, "<|notimestamps|>",
             *(f"<|{0.02 * i:.2f}|>" for i in range(TIMESTAMPS))]
    ids = {name: TEXT_TOKENS + i for i, name in enumerate(order)}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    return Specials(ids=ids, unk="<|endoftext|>", start=sot, eos=eot, languages={c: ids[c] for c in codes},
                    tasks={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
                    no_timestamps=ids["<|notimestamps|>"],
                    suppress=[t for t in TEXT_SUPPRESS if t < eot] + [sot] + [ids[n] for n in named],
                    begin_suppress=[t for t in (SPACE, eot) if t <= eot])


def whisper_config(name: str, vocab_size: int):
    from transformers import WhisperConfig

    specials = layout(vocab_size)
    return WhisperConfig(**COMMON, **{**CONFIGS[name], "vocab_size": vocab_size}, pad_token_id=specials.eos,
                         bos_token_id=specials.eos, eos_token_id=specials.eos, decoder_start_token_id=specials.start)


def vocabulary_note(target: str, draft: str) -> str | None:
    """What the report says when the real draft does not share the real target's vocabulary."""
    own, theirs = CONFIGS[draft]["vocab_size"], CONFIGS[target]["vocab_size"]
    if own == theirs:
        return None
    return (f"{hub_id(draft)}'s own vocabulary ({own:,} tokens) is not {hub_id(target)}'s ({theirs:,}): target and "
            f"draft must share one tokenizer, so this real pair cannot be exported; {hub_id(draft)} is measured with "
            f"the target's vocabulary ({theirs:,} tokens) and its own {CONFIGS[draft]['num_mel_bins']}-mel encoder")


def build_checkpoint(name: str, path: Path, seed: int, vocab_size: int, encoder_from: Path | None = None) -> Path:
    """A random-initialised Whisper saved like a real checkpoint; `encoder_from`: a saved checkpoint whose encoder
    weights it takes, tensor by tensor (no second model in memory)."""
    import torch
    from safetensors import safe_open
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(whisper_config(name, vocab_size)).eval()
    if encoder_from is not None:
        own, prefix, done = model.model.encoder.state_dict(), "model.encoder.", set()
        with torch.no_grad():
            for file in sorted(Path(encoder_from).glob("*.safetensors")):
                with safe_open(str(file), framework="pt") as weights:
                    for key in (k for k in weights.keys() if k.startswith(prefix) and k[len(prefix):] in own):
                        own[key[len(prefix):]].copy_(weights.get_tensor(key))
                        done.add(key[len(prefix):])
        if set(own) - done:
            raise SpecdecError(f"the checkpoint in {encoder_from} lacks encoder weights ({min(set(own) - done)}, ...)",
                               "delete the --work-dir cache of this pair and run again")
    specials = layout(vocab_size)
    set_generation(model, specials)
    path.mkdir(parents=True, exist_ok=True)
    save(model, path, specials)
    del model
    gc.collect()
    return path


def build_pair(target: str, draft: str, ckpt: Path, log, bar) -> tuple[Path, Path]:
    """Both checkpoints (seeds 1 and 2): the draft with the target's vocabulary, and its encoder where the real
    draft keeps it."""
    vocab, shared = CONFIGS[target]["vocab_size"], shares_encoder(target, draft)
    log(f"building random-initialised {hub_id(target)} and {hub_id(draft)} (official configurations, the target's "
        f"{vocab:,}-token vocabulary{'; the draft keeps the target encoder' if shared else ''}) in {ckpt}")
    tdir = build_checkpoint(target, ckpt / f"target-{target}", seed=1, vocab_size=vocab)
    bar.update(1)
    ddir = build_checkpoint(draft, ckpt / f"draft-{draft}", seed=2, vocab_size=vocab,
                            encoder_from=tdir if shared else None)
    bar.update(1)
    return tdir, ddir


def parameters(name: str, vocab_size: int) -> int:
    """Parameters (the tied output projection once), counted on the meta device: nothing is allocated."""
    import torch
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(whisper_config(name, vocab_size))
    return sum(p.numel() for p in model.parameters())


def time_encoders(dec, audio, repeats: int, progress) -> dict:
    """Each encoder run per request, median of `repeats` after one untimed, target and draft interleaved: the
    target's graph (its run writes a sharing draft's cross K/V too) and the draft's own."""
    from specdec.runtime import Stats

    draft = dec.models.get("draft")
    own = draft is not None and draft.encoder is not None
    pcm = np.asarray(audio, dtype=np.float32)
    models = {"target": dec.target} | ({"draft": draft} if own else {})
    times = {role: [] for role in models}
    for rep in range(1 + repeats):
        for role, model in models.items():
            stats = Stats()
            model.encode(pcm, stats)
            if rep:
                times[role].append(stats.encoder_s)
        progress.update(1)
    speech = dec.manifest.speech
    return {"target_encoder_ms": 1000.0 * statistics.median(times["target"]),
            "draft_encoder_ms": 1000.0 * statistics.median(times["draft"]) if own else None,
            "draft_keeps_target_encoder": not own, "repeats": repeats,
            "audio_seconds": pcm.size / int(speech["sampling_rate"]), "encoder_frames": int(speech["frames"])}


def request_predictions(analysis: dict, probe: dict, runs: dict, encoders: dict, tokens: int) -> dict:
    """A whole request's speedup for every alpha and gamma of `analysis` (shapes.analyse), the encoders included."""
    step = probe["target_step_ms"]
    per_token = {"theorem_3_8": step, "with_costs": step + runs["0"]["host_ms_per_iteration"]}
    e_target, e_draft = encoders["target_encoder_ms"], encoders["draft_encoder_ms"] or 0.0
    predictions, best = {}, {}
    for alpha, curve in analysis["predictions"].items():
        predictions[alpha] = {g: {kind: (e_target + tokens * t) / (e_target + e_draft + tokens * t / point[kind])
                                  for kind, t in per_token.items()}
                              for g, point in curve.items()}
        best[alpha] = {}
        for kind in per_token:          # gamma = 0 (target-only, speedup 1) unless a gamma beats it
            g, s = max([(0, 1.0)] + [(int(g), v[kind]) for g, v in predictions[alpha].items()],
                       key=lambda gs: (gs[1], -gs[0]))
            best[alpha] |= {f"{kind}_best_gamma": g, f"{kind}_best_speedup": s}
    baseline = e_target + tokens * per_token["theorem_3_8"]
    return {"tokens": tokens, "label": LABEL, "predictions": predictions, "best": best,
            "baseline_request_ms": baseline, "encoder_share_of_baseline": e_target / baseline,
            "formula": "(E_target + N t) / (E_target + E_draft + N t / S); t: target step (with_costs: + baseline host "
                       "ms per iteration); S: the decoder speedup (theorem_3_8 or with_costs); E_draft: 0 when the "
                       "draft keeps the target's encoder"}

"""Real shapes for Whisper (`specdec-bench shapes openai/whisper-large-v3:distil-whisper/distil-large-v3`): the
official configurations written down (nothing downloaded), random-initialised checkpoints built from them one model at
a time, and what a request costs at real sizes.

A pair is measured with the *target's* vocabulary (the runtime needs one tokenizer for both): a draft whose own
differs (whisper-tiny has 51,865 tokens, large-v3 51,866) is built with the target's and its own encoder, and the
report says so. A distil-whisper draft keeps its teacher's encoder: built with a copy of the target's encoder weights,
it gets no encoder graph of its own. Requests are random audio filling the encoder's 30 s window. Predicted: the
decoder's speedup (Theorem 3.8) and a whole request's of N tokens, the encoders included:

    request speedup = (E_target + N t) / (E_target + E_draft + N t / S)

(t: the target step (with costs: + the baseline's host time per iteration); S: the decoder speedup; E_draft: 0 for a
draft that keeps the target's encoder, whose cross K/V come with the target's run).
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
# The export's parity check runs PyTorch's float64 forward: 12 GB for large-v3 alone, past a 24 GB machine. The graphs'
# parity is what the test suite checks on tiny Whisper models.
SKIP_CHECK = ("random-weight Whisper at a real size, measured for costs only; the graphs' parity against PyTorch is "
              "tested on tiny Whisper models")
# config.json of the official checkpoints. All: GELU, no embedding scaling, 1,500 encoder positions (30 s of 16 kHz
# audio at 2 feature frames per position), 448 decoder positions, tied output projection, pad = bos = eos =
# <|endoftext|> (50257), decoder start <|startoftranscript|> (50258).
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
# a distil-whisper model keeps its teacher's encoder (frozen while its decoder was distilled)
ENCODER_OF = {"distil-large-v3": "whisper-large-v3"}

# Whisper's vocabulary: the GPT-2 byte-level BPE's 50,257 text tokens, then <|endoftext|>, <|startoftranscript|>,
# one token per language, <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>
# (<|nocaptions|> before v3), <|notimestamps|> and 1,501 timestamps <|0.00|> ... <|30.00|>. large-v3 has 100 languages
# (51,866 tokens), the earlier models 99 (51,865).
TEXT_TOKENS = 50257
TIMESTAMPS = 1501
# the text tokens the official generation configs suppress (symbols that are not speech), all models alike
TEXT_SUPPRESS = (1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522,
                 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268, 3536, 3846, 3961,
                 4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157,
                 14635, 15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279,
                 29464, 31650, 32302, 32470, 36865, 42863, 47425, 49870, 50254)
SPACE = 220                     # " ": suppressed as the first generated token, with <|endoftext|>


def canonical(name: str) -> str | None:
    """The configuration a name means: `whisper-large-v3` or `openai/whisper-large-v3`, `distil-large-v3` or
    `distil-whisper/distil-large-v3`; None for anything else."""
    if name in CONFIGS:
        return name
    org, _, short = name.partition("/")
    return short if short in HUB.get(org, ()) and short in CONFIGS else None


def hub_id(name: str) -> str:
    return next((f"{org}/{name}" for org, models in HUB.items() if name in models), name)


def parse_pair(text: str) -> tuple[str, str, str]:
    """(family, target, draft) of `specdec-bench shapes TARGET:DRAFT`: two T5 names or two Whisper names."""
    parts = text.split(":")
    families = [("t5" if p in shapes.CONFIGS else "whisper" if canonical(p) else None) for p in parts]
    if len(parts) == 2 and families[0] and families[1] and families[0] != families[1]:
        kinds = {"t5": "T5", "whisper": "Whisper"}
        raise SpecdecError(f"'{parts[0]}' is a {kinds[families[0]]} model but '{parts[1]}' is a "
                           f"{kinds[families[1]]} model: a pair is two T5 or two Whisper models",
                           "e.g. t5-large:t5-small or openai/whisper-large-v3:distil-whisper/distil-large-v3")
    if len(parts) != 2 or None in families:
        whisper = ", ".join(hub_id(n) for n in CONFIGS)
        raise SpecdecError(f"TARGET:DRAFT names two of {', '.join(shapes.CONFIGS)} or two of {whisper} "
                           f"(got '{text}')",
                           "e.g. t5-large:t5-small or openai/whisper-large-v3:distil-whisper/distil-large-v3")
    if families[0] == "t5":
        return "t5", parts[0], parts[1]
    return "whisper", canonical(parts[0]), canonical(parts[1])


def shares_encoder(target: str, draft: str) -> bool:
    """Does the real draft keep the real target's encoder (distil-whisper and its teacher)?"""
    return ENCODER_OF.get(draft) == target


def layout(vocab_size: int) -> Specials:
    """Whisper's special tokens for a vocabulary of `vocab_size` tokens (TEXT_TOKENS text tokens first, TIMESTAMPS
    timestamps last, the languages in between: transformers' LANGUAGES order)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    languages = vocab_size - TEXT_TOKENS - 8 - TIMESTAMPS
    if not 1 <= languages <= len(LANGUAGES):
        raise SpecdecError(f"a Whisper vocabulary of {vocab_size} tokens has no room for its languages",
                           f"use {TEXT_TOKENS + 8 + TIMESTAMPS + 99} or {TEXT_TOKENS + 8 + TIMESTAMPS + 100} tokens")
    eot, sot = TEXT_TOKENS, TEXT_TOKENS + 1
    langs = {f"<|{code}|>": sot + 1 + i for i, code in enumerate(list(LANGUAGES)[:languages])}
    after = sot + languages + 1
    named = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
             "<|nospeech|>" if languages == len(LANGUAGES) else "<|nocaptions|>", "<|notimestamps|>"]
    rest = {name: after + i for i, name in enumerate(named)}
    no_ts = rest["<|notimestamps|>"]
    stamps = {f"<|{0.02 * i:.2f}|>": no_ts + 1 + i for i in range(TIMESTAMPS)}
    ids = {"<|endoftext|>": eot, "<|startoftranscript|>": sot, **langs, **rest, **stamps}
    return Specials(ids=ids, unk="<|endoftext|>", start=sot, eos=eot, languages=langs,
                    tasks={"translate": rest["<|translate|>"], "transcribe": rest["<|transcribe|>"]},
                    no_timestamps=no_ts,
                    suppress=[t for t in TEXT_SUPPRESS if t < eot] + [sot] + list(range(after, no_ts)),
                    begin_suppress=[t for t in (SPACE, eot) if t <= eot])


def whisper_config(name: str, vocab_size: int):
    """The official configuration of `name`, with `vocab_size` tokens (the pair's target's)."""
    from transformers import WhisperConfig

    specials = layout(vocab_size)
    spec = {**CONFIGS[name], "vocab_size": vocab_size}
    return WhisperConfig(**COMMON, **spec, pad_token_id=specials.eos, bos_token_id=specials.eos,
                         eos_token_id=specials.eos, decoder_start_token_id=specials.start)


def vocabulary_note(target: str, draft: str) -> str | None:
    """What the report says when the real draft does not share the real target's vocabulary."""
    own, theirs = CONFIGS[draft]["vocab_size"], CONFIGS[target]["vocab_size"]
    if own == theirs:
        return None
    return (f"{hub_id(draft)}'s own vocabulary ({own:,} tokens) is not {hub_id(target)}'s ({theirs:,}): target and "
            f"draft must share one tokenizer, so this real pair cannot be exported; {hub_id(draft)} is measured with "
            f"the target's vocabulary ({theirs:,} tokens) and its own {CONFIGS[draft]['num_mel_bins']}-mel encoder")


def build_checkpoint(name: str, path: Path, seed: int, vocab_size: int, encoder_from: Path | None = None) -> Path:
    """A random-initialised Whisper with the official configuration of `name` and `vocab_size` tokens, saved like a
    real checkpoint (weights, generation config, feature extractor, tokenizer) and freed; `encoder_from`: a saved
    checkpoint whose encoder weights it takes, tensor by tensor (no second model in memory)."""
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
    """Both checkpoints under `ckpt`, one after the other (seeds 1 and 2; `bar` counts them): the draft takes the
    target's vocabulary, and the target's encoder when the real draft keeps it."""
    vocab, shared = CONFIGS[target]["vocab_size"], shares_encoder(target, draft)
    log(f"building random-initialised {hub_id(target)} and {hub_id(draft)} (official configurations, the target's "
        f"{vocab:,}-token vocabulary{'; the draft keeps the target encoder' if shared else ''}) in {ckpt}")
    out = []
    for role, name, seed in (("target", target, 1), ("draft", draft, 2)):
        out.append(build_checkpoint(name, ckpt / f"{role}-{name}", seed=seed, vocab_size=vocab,
                                    encoder_from=out[0] if role == "draft" and shared else None))
        bar.update(1)
    return out[0], out[1]


def parameters(name: str, vocab_size: int) -> int:
    """Parameters of the model `name` with `vocab_size` tokens (the tied output projection once), counted on the meta
    device: nothing is allocated."""
    import torch
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(whisper_config(name, vocab_size))
    return sum(p.numel() for p in model.parameters())


def time_encoders(dec, audio, repeats: int, progress=None) -> dict:
    """Each encoder run per request (Stats.encoder_s), median of `repeats` after one untimed, target and draft
    interleaved: the target's encoder graph (its run writes a sharing draft's cross K/V too) and the draft's own."""
    from specdec.runtime import Stats

    draft = dec.models.get("draft")
    own = draft is not None and draft.encoder is not None
    pcm = np.asarray(audio, dtype=np.float32)
    times = {"target": [], "draft": []}
    for rep in range(1 + repeats):
        for role, model in (("target", dec.target), ("draft", draft if own else None)):
            if model is not None:
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
    """The speedup of a whole request of `tokens` tokens, the encoders included (module docstring), for every alpha
    and gamma of `analysis` (shapes.analyse): Theorem 3.8's and the one with the measured costs."""
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
            g, s = max(((int(g), v[kind]) for g, v in predictions[alpha].items()), key=lambda gs: (gs[1], -gs[0]),
                       default=(0, 1.0))
            best[alpha][f"{kind}_best_gamma"], best[alpha][f"{kind}_best_speedup"] = (g, s) if s > 1.0 else (0, 1.0)
    baseline = e_target + tokens * per_token["theorem_3_8"]
    return {"tokens": tokens, "label": LABEL, "predictions": predictions, "best": best,
            "baseline_request_ms": baseline, "encoder_share_of_baseline": e_target / baseline,
            "formula": "(E_target + N t) / (E_target + E_draft + N t / S); t: target step (with_costs: + baseline host "
                       "ms per iteration); S: the decoder speedup (theorem_3_8 or with_costs); E_draft: 0 when the "
                       "draft keeps the target's encoder"}

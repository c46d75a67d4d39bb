"""Real shapes for Whisper (`specdec-bench shapes openai/whisper-large-v3:distil-whisper/distil-large-v3`): the
official configurations written down (nothing downloaded), random-initialised checkpoints built from them one model at
a time (each saved to disk and freed before the next is built), and the pair's names checked.

A pair is measured with the *target's* vocabulary: the runtime needs one tokenizer for target and draft. A draft
whose own vocabulary differs (whisper-tiny has 51,865 tokens, large-v3 51,866) cannot be paired with that target
for real, so it is built here with the target's vocabulary and its own encoder (its own mel bins: each model's
encoder graph computes its own features from the same PCM), and the report says so. A distil-whisper draft of the
target keeps the target's encoder: it is built with a copy of the target's encoder weights (read back from the
target's saved checkpoint), so the export finds the same encoder digest and gives the draft no encoder graph.
"""

from __future__ import annotations

import gc
from pathlib import Path

from specdec.models.whisper_checkpoint import Specials, save, set_generation
from specdec.runtime.core.errors import SpecdecError

from . import measure as shapes

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


def names() -> list[str]:
    return list(CONFIGS)


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


def copy_encoder(model, checkpoint: Path) -> None:
    """Load the encoder weights of the saved checkpoint at `checkpoint` into `model`'s encoder, tensor by tensor (no
    second model in memory)."""
    import torch
    from safetensors import safe_open

    own, prefix, done = model.model.encoder.state_dict(), "model.encoder.", set()
    with torch.no_grad():
        for file in sorted(Path(checkpoint).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as weights:
                for key in weights.keys():
                    name = key[len(prefix):]
                    if key.startswith(prefix) and name in own:
                        own[name].copy_(weights.get_tensor(key))
                        done.add(name)
    missing = sorted(set(own) - done)
    if missing:
        raise SpecdecError(f"the checkpoint in {checkpoint} lacks encoder weights ({missing[0]}, ...)",
                           "delete the --work-dir cache of this pair and run again")


def build_checkpoint(name: str, path: Path, seed: int, vocab_size: int, encoder_from: Path | None = None) -> Path:
    """A random-initialised Whisper with the official configuration of `name` and `vocab_size` tokens, saved like a
    real checkpoint (weights, generation config, feature extractor, tokenizer) and freed; `encoder_from`: a saved
    checkpoint whose encoder weights it takes."""
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(whisper_config(name, vocab_size)).eval()
    if encoder_from is not None:
        copy_encoder(model, encoder_from)
    specials = layout(vocab_size)
    set_generation(model, specials)
    path.mkdir(parents=True, exist_ok=True)
    save(model, path, specials)
    del model
    gc.collect()
    return path


def build_pair(target: str, draft: str, ckpt: Path, log=print, bar=None) -> tuple[Path, Path]:
    """Both checkpoints of the pair, one after the other (the target's seed 1, the draft's 2), under `ckpt`; the
    draft takes the target's vocabulary, and the target's encoder when the real draft keeps it. `bar`: a progress bar
    over the two models (update(1) after each)."""
    vocab = CONFIGS[target]["vocab_size"]
    shared = shares_encoder(target, draft)
    log(f"building random-initialised {hub_id(target)} and {hub_id(draft)} (official configurations, the target's "
        f"{vocab:,}-token vocabulary{'; the draft keeps the target encoder' if shared else ''}) in {ckpt}")
    tdir = build_checkpoint(target, ckpt / f"target-{target}", seed=1, vocab_size=vocab)
    if bar is not None:
        bar.update(1)
    ddir = build_checkpoint(draft, ckpt / f"draft-{draft}", seed=2, vocab_size=vocab,
                            encoder_from=tdir if shared else None)
    if bar is not None:
        bar.update(1)
    return tdir, ddir


def parameters(name: str, vocab_size: int) -> int:
    """Parameters of the model `name` with `vocab_size` tokens (the tied output projection once), counted on the meta
    device: nothing is allocated."""
    import torch
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(whisper_config(name, vocab_size))
    return sum(p.numel() for p in model.parameters())

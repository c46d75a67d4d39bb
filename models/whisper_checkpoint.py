"""The pieces of a Whisper checkpoint directory besides its weights, for random models that have no real ones: a
word-level tokenizer over the whole vocabulary with Whisper's special tokens at their ids, the generation config's
prompt tokens (languages, tasks, no timestamps, suppressed tokens) and a WhisperFeatureExtractor that matches the
encoder. `specdec-export` reads exactly these (export/source.py). Used by `specdec-bench shapes` for the official
Whisper configurations and by the tests' tiny Whisper models."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Specials:
    """A Whisper vocabulary's special tokens: name -> id (the tokenizer's), the prompt tokens the generation config
    lists, and the tokens generation suppresses."""

    ids: dict                       # every special token, name -> id (timestamps included)
    unk: str                        # the tokenizer's unknown token (one of `ids`)
    start: int                      # <|startoftranscript|>: decoder_start_token_id
    eos: int                        # <|endoftext|>: eos, pad and bos
    languages: dict = field(default_factory=dict)      # "<|en|>" -> id
    tasks: dict = field(default_factory=dict)          # "transcribe" -> id
    no_timestamps: int | None = None
    suppress: list = field(default_factory=list)
    begin_suppress: list = field(default_factory=list)


def vocabulary(specials: dict, vocab_size: int) -> dict:
    """Token -> id over 0..vocab_size-1: the special tokens at their ids, `w{i}` at every other id i."""
    taken = set(specials.values())
    words = dict(specials)
    words.update({f"w{i}": i for i in range(vocab_size) if i not in taken})
    return words


def write_tokenizer(path, specials: Specials, vocab_size: int) -> Path:
    """A fast WordLevel tokenizer (whitespace split) over the whole vocabulary; the special tokens but the unknown
    one are added as special tokens, end of text is eos and pad."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    eos = next(name for name, i in specials.ids.items() if i == specials.eos)
    tok = Tokenizer(models.WordLevel(vocab=vocabulary(specials.ids, vocab_size), unk_token=specials.unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(name, special=True) for name in specials.ids if name != specials.unk])
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=specials.unk, eos_token=eos,
                            pad_token=eos).save_pretrained(str(path))
    return path


def write_extractor(path, config) -> Path:
    """The WhisperFeatureExtractor of an encoder with `config`'s mel bins and window (2 feature frames per encoder
    position, 160 samples a frame at 16 kHz: 1,500 positions are 30 s)."""
    from transformers import WhisperFeatureExtractor

    seconds = config.max_source_positions * 2 * 160 // 16_000
    WhisperFeatureExtractor(feature_size=config.num_mel_bins, chunk_length=seconds).save_pretrained(str(path))
    return Path(path)


def set_generation(model, specials: Specials) -> None:
    """The generation config of a multilingual Whisper with these special tokens (saved as generation_config.json
    by save_pretrained; export/source.py reads it as JSON)."""
    gen = model.generation_config
    gen.decoder_start_token_id, gen.eos_token_id, gen.pad_token_id = specials.start, specials.eos, specials.eos
    gen.bos_token_id = specials.eos
    gen.lang_to_id, gen.task_to_id = dict(specials.languages), dict(specials.tasks)
    gen.is_multilingual, gen.no_timestamps_token_id = bool(specials.languages), specials.no_timestamps
    gen.suppress_tokens, gen.begin_suppress_tokens = list(specials.suppress), list(specials.begin_suppress)
    gen.forced_decoder_ids = None


def save(model, path, specials: Specials, tokens: int | None = None) -> Path:
    """`model` (a WhisperForConditionalGeneration) saved as a checkpoint directory specdec-export takes: weights,
    config, generation config, feature extractor, tokenizer. `tokens`: the ids the tokenizer makes (default: the
    model's vocab_size; fewer leaves the rows past them padded, as in large-v3's 51,866 rows for 51,865 ids)."""
    path = Path(path)
    model.save_pretrained(str(path))
    write_extractor(path, model.config)
    write_tokenizer(path, specials, tokens or model.config.vocab_size)
    return path

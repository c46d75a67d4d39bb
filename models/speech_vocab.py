"""The speech pair's vocabulary: the bundled text tokenizer (models/target/tokenizer.json: its 4,096 pieces keep
their ids) with Whisper's special tokens after it: end of text, start of transcript, the one language (<|en|>), the
two tasks, no timestamps, and a timestamp token every TIME_STEP seconds over the window (<|0.00|> .. <|10.00|>). The
model's rows are padded past the tokenizer's ids to a multiple of ROW_MULTIPLE, as real checkpoints are.

    specials = write_speech_tokenizer(checkpoint_dir)           # tokenizer files; a whisper_checkpoint.Specials
    rows = model_rows(specials)                                  # the model's vocab_size
    timestamp_id(specials, 3.42)                                 # the id of <|3.42|>

The text tokenizer's own end-of-sequence appending is dropped (a transcript ends with <|endoftext|>), and its pad,
end-of-sequence and unknown pieces are suppressed in generation.
"""

from __future__ import annotations

import os
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from .whisper_checkpoint import Specials

TEXT_TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "target", "tokenizer.json")
TIME_STEP = 0.02               # Whisper's timestamp resolution
ROW_MULTIPLE = 64
WORDS = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>", "<|notimestamps|>")


def timestamp_name(seconds: float) -> str:
    return f"<|{seconds:.2f}|>"


def speech_specials(text_size: int, window_s: float, unk: tuple = ("<unk>", 2), suppressed=()) -> Specials:
    """Specials of a vocabulary whose first `text_size` ids are the text tokenizer's; `unk`: its unknown piece's
    (name, id)."""
    steps = round(window_s / TIME_STEP)
    names = list(WORDS) + [timestamp_name(i * TIME_STEP) for i in range(steps + 1)]
    ids = {name: text_size + k for k, name in enumerate(names)}
    return Specials(ids={unk[0]: unk[1], **ids}, unk=unk[0], start=ids["<|startoftranscript|>"], eos=ids["<|endoftext|>"],
                    languages={"<|en|>": ids["<|en|>"]},
                    tasks={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
                    no_timestamps=ids["<|notimestamps|>"], suppress=sorted(suppressed),
                    begin_suppress=[ids["<|endoftext|>"]])


def write_speech_tokenizer(path, window_s: float = 10, text_tokenizer: str = TEXT_TOKENIZER) -> Specials:
    """The speech tokenizer saved in `path` (tokenizer.json and its config, as transformers saves them)."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    if not os.path.exists(text_tokenizer):
        raise SpecdecError(f"the text tokenizer {text_tokenizer} is missing", "check out models/target/")
    tok = Tokenizer.from_file(text_tokenizer)
    text_size = tok.get_vocab_size()
    pieces = {"pad": tok.token_to_id("<pad>"), "eos": tok.token_to_id("</s>"), "unk": tok.token_to_id("<unk>")}
    specials = speech_specials(text_size, window_s, ("<unk>", pieces["unk"]),
                               [i for i in pieces.values() if i is not None])
    tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    names = [name for name in specials.ids if name != "<unk>"]
    tok.add_special_tokens([AddedToken(name, special=True) for name in names])
    got = {name: tok.token_to_id(name) for name in names}
    if got != {name: specials.ids[name] for name in names}:
        raise SpecdecError("the text tokenizer already holds some of Whisper's special tokens",
                           "start from the bundled text tokenizer")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(str(path))
    return specials


def save_speech_checkpoint(model, path, window_s: float = 10) -> Path:
    """A speech Whisper saved as a checkpoint directory specdec-export takes: the speech tokenizer, the generation
    config of its special tokens, the weights and configuration, the feature extractor of its window."""
    from .whisper_checkpoint import set_generation, write_extractor

    specials = write_speech_tokenizer(path, window_s)
    set_generation(model, specials)
    model.save_pretrained(str(path))
    write_extractor(path, model.config)
    return Path(path)


def model_rows(specials: Specials) -> int:
    """The model's vocab_size: every id of the tokenizer, padded up to a multiple of ROW_MULTIPLE."""
    ids = max(specials.ids.values()) + 1
    return -(-ids // ROW_MULTIPLE) * ROW_MULTIPLE


def timestamp_id(specials: Specials, seconds: float) -> int:
    """The token of the timestamp nearest `seconds` (inside the window)."""
    name = timestamp_name(round(seconds / TIME_STEP) * TIME_STEP)
    if name not in specials.ids:
        raise SpecdecError(f"{seconds:.2f} s is outside the window's timestamps", "pass a time inside the window")
    return specials.ids[name]

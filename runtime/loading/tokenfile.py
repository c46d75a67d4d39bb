"""Load an export's tokenizer.json so that a truncated, mangled or mismatched file is one SpecdecError line.

The file's path is confined to the export (Manifest.path) and its checksum verified already; this module checks
what the checksum cannot: that it is at most MAX_TOKENIZER_BYTES, UTF-8, a tokenizer the `tokenizers` library
accepts, that it encodes and decodes a probe text, and that every id it can produce is inside the export's
vocabulary (an id past it would reach the graphs' embedding lookups; the tokenizer may make fewer ids than the model
has rows, as every real T5's does: vocabulary.py). Errors from the tokenizers library (Python
exceptions, and Rust panics, which pyo3 raises as a BaseException) become the SpecdecError.
"""

from __future__ import annotations

from ..core.errors import SpecdecError
from .confine import shown
from .vocabulary import tokenizer_size

MAX_TOKENIZER_BYTES = 256 << 20
PROBE = "a b 1, x."
FIX = "re-run specdec-export, or copy the export again from a trusted source"
# the oldest tokenizers that reads what today's writes (Metaspace's prepend_scheme and split: tokenizers 0.19)
OLDEST_TOKENIZERS = "0.19"


def load_tokenizer(manifest):
    """The export's tokenizers.Tokenizer, checked as above."""
    from tokenizers import Tokenizer

    relative = manifest.raw["tokenizer"]
    path = manifest.path(relative)
    what = f"the tokenizer {shown(relative)}"
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TOKENIZER_BYTES + 1)
    except OSError as err:
        raise SpecdecError(f"{what} cannot be read ({err.strerror or type(err).__name__})", FIX) from None
    if len(data) > MAX_TOKENIZER_BYTES:
        raise SpecdecError(f"{what} is larger than {MAX_TOKENIZER_BYTES >> 20} MiB", FIX)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecdecError(f"{what} is not UTF-8 text (byte {err.start})", FIX) from None
    try:
        tokenizer = Tokenizer.from_str(text)
        largest = tokenizer_size(tokenizer) - 1
        tokenizer.decode(tokenizer.encode(PROBE).ids)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 -- tokenizers raises Exception, and pyo3 PanicException
        import tokenizers

        detail = (str(err).strip().splitlines() or [""])[0]
        raise SpecdecError(f"{what} is not a valid tokenizer for tokenizers {tokenizers.__version__} "
                           f"({type(err).__name__}: {shown(detail, 160)})",
                           f"with tokenizers older than {OLDEST_TOKENIZERS}: pip install -U 'tokenizers>="
                           f"{OLDEST_TOKENIZERS}'; else {FIX}") from None
    if largest >= manifest.vocab_size:
        raise SpecdecError(f"{what} has token id {largest}, outside the export's vocabulary "
                           f"0..{manifest.vocab_size - 1}", FIX)
    return tokenizer

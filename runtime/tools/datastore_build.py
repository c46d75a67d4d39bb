"""Build a datastore file (runtime/loading/datastore.py's format) from text: one segment a line in .txt (or .txt.gz), or
one field of each record in .jsonl (or .jsonl.gz), tokenized with an export's tokenizer.json.

Building sorts one 64-bit key per token (numpy, in memory: about 65 bytes a token at the peak, 6.5 GB at 100 M
tokens, measured by specdec.bench.datastore_scale); the file it writes is then only mapped by the decoder. The file
is written beside its destination and renamed into place, so an interrupted build never leaves a half-written
datastore under the final name.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np

from ..loading.datastore import HEADER, HEADER_BYTES, MAGIC, MAX_TOKENS, VERSION, Datastore, Layout, digit_bits, \
    token_bytes_for
from ..core.errors import SpecdecError
from ..loading.manifest import sha256_file
from ..loading.vocabulary import tokenizer_size

BATCH = 4096          # lines tokenized per call


def check_text(path, field: str | None, what: str = "datastore text", flag: str = "--field") -> bool:
    """What a text file must be before it is read: a regular file, and for .jsonl(.gz) a `field` named (`what` and
    `flag` name the file and the option in the messages). Returns whether it is JSON lines."""
    path = Path(path)
    if not path.is_file():
        raise SpecdecError(f"{what} '{path}' " + ("is not a regular file" if path.exists() else "does not exist"),
                           "check the path")
    jsonl = path.name.lower().endswith((".jsonl", ".jsonl.gz"))
    if jsonl and not field:
        raise SpecdecError(f"{what} '{path}' is JSON lines: say which field holds the text",
                           f"pass {flag} NAME (e.g. {flag} reference)")
    return jsonl


def read_segments(path, field: str | None = None):
    """Yield the text segments of one file: its non-empty lines, or, for .jsonl, each record's `field`."""
    path = Path(path)
    jsonl = check_text(path, field)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                if not jsonl:
                    yield line
                    continue
                try:
                    value = json.loads(line)[field]
                except (ValueError, KeyError, TypeError, IndexError):
                    raise SpecdecError(f"'{path}' line {number} is not a JSON record with a {field!r} field",
                                       "fix the file or pass the right --field") from None
                if isinstance(value, str) and value.strip():
                    yield value.strip()
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise SpecdecError(f"cannot read datastore text '{path}' ({type(err).__name__}: "
                           f"{getattr(err, 'strerror', None) or str(err)[:80]})",
                           "pass UTF-8 text, one segment a line") from None


def load_tokenizer(tokenizer_json):
    """(Tokenizer, its tokenizer_size (the ids it makes, runtime/loading/vocabulary.py), sha256 of the file) for a
    tokenizer.json or an export directory holding one."""
    from tokenizers import Tokenizer

    path = Path(tokenizer_json)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise SpecdecError(f"no tokenizer at '{path}'", "pass an export directory or its tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:      # tokenizers raises its own Exception type for malformed files
        raise SpecdecError(f"'{path}' is not a valid tokenizer ({str(err).splitlines()[0][:80] if str(err) else ''})",
                           "pass the tokenizer.json of the export") from None
    return tokenizer, tokenizer_size(tokenizer), sha256_file(path)


def tokenize(tokenizer, texts, progress=None) -> list:
    """Token id lists of `texts` (an iterable of strings), BATCH at a time."""
    out, batch = [], []
    for text in texts:
        batch.append(text)
        if len(batch) == BATCH:
            out += [e.ids for e in tokenizer.encode_batch(batch)]
            batch = []
            if progress:
                progress(len(out))
    if batch:
        out += [e.ids for e in tokenizer.encode_batch(batch)]
    if progress:
        progress(len(out))
    return out


def write(path, segments: list, vocab_size: int, tokenizer_sha256: str) -> Path:
    """Index `segments` (lists of token ids below `vocab_size`, the tokenizer's size: vocabulary.py) and write the
    datastore file `path`; returns its path."""
    path = Path(path)
    segments = [s for s in segments if len(s)]
    if not segments:
        raise SpecdecError("the datastore text holds no segments", "pass at least one non-empty line")
    n_tokens = sum(len(s) for s in segments) + len(segments) + 1
    if n_tokens > MAX_TOKENS:
        raise SpecdecError(f"the datastore would hold {n_tokens} tokens, more than {MAX_TOKENS}",
                           "split the text into several datastores")
    sep = vocab_size
    stream = np.empty(n_tokens, np.int64)
    stream[0], at = sep, 1
    for s in segments:
        stream[at:at + len(s)] = s
        stream[at + len(s)] = sep
        at += len(s) + 1
    if stream.min() < 0 or stream.max() > sep or np.count_nonzero(stream == sep) != len(segments) + 1:
        raise SpecdecError(f"the datastore text has token ids outside the tokenizer's vocabulary of {vocab_size}",
                           "use the export's own tokenizer")
    bits, width = digit_bits(vocab_size), 64 // digit_bits(vocab_size)
    keys = _keys(stream, sep, bits, width)[:-1]        # every position but the last SEP
    order = np.argsort(keys, kind="stable")
    token_bytes = token_bytes_for(vocab_size)
    layout = Layout.of(token_bytes, n_tokens, n_tokens - 1)
    header = HEADER.pack(MAGIC, VERSION, token_bytes, bits, width, vocab_size, n_tokens, len(segments),
                         bytes.fromhex(tokenizer_sha256))
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as fh:
            fh.write(header.ljust(HEADER_BYTES, b"\0"))
            fh.write(stream.astype(layout.token_dtype).tobytes())
            fh.write(b"\0" * (layout.keys_at - fh.tell()))
            fh.write(keys[order].astype("<u8").tobytes())
            fh.write(order.astype("<u4").tobytes())
        os.replace(partial, path)
    except OSError as err:
        partial.unlink(missing_ok=True)
        raise SpecdecError(f"cannot write the datastore '{path}': {err.strerror or err}",
                           "pick a path you can write, with room for the file") from None
    return path


def _keys(stream: np.ndarray, sep: int, bits: int, width: int) -> np.ndarray:
    """Each position's key: digits token + 1 of the next `width` tokens (a SEP only as the first), 0 from the next
    SEP on."""
    n = len(stream)
    keys = np.zeros(n, np.uint64)
    alive = np.ones(n, bool)
    for j in range(min(width, n)):
        ahead = np.full(n, sep, np.int64)
        ahead[:n - j] = stream[j:]
        if j:
            alive &= ahead != sep
        digit = np.where(alive, ahead + 1, 0).astype(np.uint64)
        keys |= digit << np.uint64(bits * (width - 1 - j))
    return keys


def build(out, texts, tokenizer_json, field: str | None = None, add_to: Datastore | None = None,
          quiet: bool = False) -> Datastore:
    """Tokenize the files `texts` and write the datastore `out` (after the segments of `add_to`, when given);
    returns it opened."""
    tokenizer, vocab_size, sha = load_tokenizer(tokenizer_json)
    if add_to is not None and (add_to.tokenizer_size != vocab_size or add_to.tokenizer_sha256 != sha):
        raise SpecdecError(f"datastore '{add_to.path}' was made with another tokenizer than '{tokenizer_json}'",
                           "add text with the tokenizer it was built with, or build a new one")
    segments = list(add_to.segments_tokens()) if add_to is not None else []
    for text in texts:
        note = _progress(f"tokenizing {Path(text).name}", quiet)
        segments += tokenize(tokenizer, read_segments(text, field), note)
        if not quiet:
            print(file=sys.stderr)
    path = write(out, segments, vocab_size, sha)
    return Datastore.open(path, vocab_size, sha)


def _progress(label: str, quiet: bool):
    if quiet:
        return None

    def show(done: int) -> None:
        print(f"\r{label}: {done:,} segments", end="", file=sys.stderr, flush=True)
    return show

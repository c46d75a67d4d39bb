"""A datastore the lookup searches: token ids of text in the output's language, indexed so that the continuations of
an n-gram (n < the key's m digits) are found with one binary search, whatever the size, on a memory-mapped file.

The ids. A datastore holds ids its tokenizer makes, 0 .. T - 1 with T its tokenizer_size (vocabulary.py: a real
T5's tokenizer makes 32,100 ids for the model's 32,128 rows; the padded rows never occur in text).

The index. The stream is the segments with a separator SEP = T before each and after the last, so that
"the start of a segment" can be matched like a token (the lookup's context begins with SEP while the output is
shorter than the n-grams: the first token is guessed from how segments start). Every position i but the last gets a
64-bit key: the digits d = token + 1 of tokens i .. i+m-1 (SEP's digit is T + 1; m = 64 // bits, bits =
the bits of T + 1; m = 4 for T5's 32,100 ids and for 4,096), first token in the highest bits, the digits
from the next SEP on 0. A context holding an id the tokenizer does not make matches nothing before it. Keys are
sorted (positions alongside), so:
  - the occurrences of an n-gram g (n < m) followed by at least one more token are the contiguous range of keys
    in [(g, 1, 0 ..), (g + 1, 0 ..)): two `searchsorted` probes into the mapped array (log2 N page reads), one
    numpy call for every n at once;
  - inside the range the keys are sorted by the next m - n tokens, so counting equal keys ranks continuations by
    frequency (the range is sampled at a fixed stride beyond SAMPLE entries, so the host cost stays bounded:
    a 1-gram such as "the" may have millions of occurrences);
  - the continuation itself is copied from the token stream after the chosen occurrence (up to its segment's end).

The file (little-endian; written by datastore_build.py, `specdec-datastore build`):

    header   HEADER bytes: MAGIC, version, token width (2 or 4 bytes), bits, m, T, N tokens (segment
             separators included), segments, the sha256 of the tokenizer.json that made the ids
    tokens   N x uint16/uint32: SEP, segment 1, SEP, segment 2, ..., SEP
    keys     (N - 1) x uint64, sorted
    positions (N - 1) x uint32: the stream position of each key

The file is not trusted (it may come from anywhere, or be corrupt): `Datastore.open` checks the header's numbers
against each other and the file's size, then reads the three arrays once, in chunks (the process does not keep
them: resident memory stays flat), checking that every token is an id below T or the separator, that the
stream starts and ends with one, that every position points into the stream and that the keys are sorted. Any problem
is a one-line SpecdecError before generation. What a lookup may then read is in bounds by construction.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import SpecdecError

MAGIC = b"SPDCSTOR"
VERSION = 1
HEADER = struct.Struct("<8sIIIIQQQ32s")           # magic, version, token bytes, bits, m, T, N, segments, sha
HEADER_BYTES = 128
SAMPLE = 64                  # a match range longer than this is ranked on SAMPLE keys taken at a fixed stride
MAX_TOKENS = (1 << 32) - 1    # positions are uint32
CHUNK = 1 << 22               # entries per chunk when the file is checked


def load_option(value):
    """A datastore option as specdec-generate and the C API spell it (absent, "none" or a path) in the terms of
    SpeculativeDecoder.load(datastore=): None (the export's own), False (none) or the path."""
    return None if value is None else False if value == "none" else value


def digit_bits(vocab_size: int) -> int:
    """Bits of one key digit: 0 (past the segment's end), token + 1 for ids 0 .. vocab_size - 1, vocab_size + 1 for
    SEP."""
    return (int(vocab_size) + 1).bit_length()


@dataclass(frozen=True)
class Layout:
    """Where the arrays are, from the header's counts (the file must be exactly this long)."""
    token_dtype: np.dtype
    tokens_at: int
    keys_at: int
    positions_at: int
    size: int

    @staticmethod
    def of(token_bytes: int, n_tokens: int, n_keys: int) -> "Layout":
        tokens_at = HEADER_BYTES
        keys_at = -(-(tokens_at + token_bytes * n_tokens) // 8) * 8
        positions_at = keys_at + 8 * n_keys
        return Layout(np.dtype("<u2" if token_bytes == 2 else "<u4"), tokens_at, keys_at, positions_at,
                      positions_at + 4 * n_keys)


def token_bytes_for(vocab_size: int) -> int:
    return 2 if vocab_size < 0xFFFF else 4          # the separator, vocab_size, must fit


class Datastore:
    """An opened, checked datastore file: `continuations(context, k)` ranks what followed the context's longest
    suffix (at most `width` = m - 1 tokens) in the indexed text. Attributes: path, tokenizer_size (T: its ids are
    0 .. T - 1, and `sep` = T), tokens (of text),
    segments, stream_length (N: tokens and separators), width, digits (m), tokenizer_sha256, file_bytes."""

    def __init__(self, path: Path, header: tuple, layout: Layout):
        _, _, token_bytes, bits, width, vocab, n_tokens, segments, sha = header
        self.path, self.tokenizer_size, self.segments = path, vocab, segments
        self.tokens, self.stream_length = n_tokens - segments - 1, n_tokens
        self.digits, self.bits, self.tokenizer_sha256 = width, bits, sha.hex()
        self.width = width - 1          # the longest n-gram matched: a key also holds the token after it
        self.file_bytes = layout.size
        self.sep = vocab
        n_keys = n_tokens - 1
        # One read-only mapping, no read-ahead (a lookup reads a few scattered pages; read-ahead would map whole
        # neighbourhoods of them), and plain ndarray views of it (np.memmap's indexing costs microseconds a lookup).
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            self._map.madvise(mmap.MADV_RANDOM)
        self._stream = np.frombuffer(self._map, layout.token_dtype, n_tokens, layout.tokens_at)
        self._keys = np.frombuffer(self._map, "<u8", n_keys, layout.keys_at)
        self._positions = np.frombuffer(self._map, "<u4", n_keys, layout.positions_at)

    # -- opening -----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path, tokenizer_size: int | None = None, tokenizer_sha256: str | None = None,
             fix: str = "rebuild it with specdec-datastore build") -> "Datastore":
        """Open and check `path`; with `tokenizer_size` (vocabulary.py) / `tokenizer_sha256` given, it must have
        been made with that tokenizer. Every problem is a one-line SpecdecError naming the file and `fix`."""
        path = Path(path)
        shown = str(path)[:200]
        try:
            if not path.is_file():
                raise SpecdecError(f"datastore '{shown}' " + ("is not a regular file" if path.exists()
                                                             else "does not exist"),
                                   "check the path, or build one with specdec-datastore build --export DIR")
            size = path.stat().st_size
            with open(path, "rb") as fh:
                raw = fh.read(HEADER_BYTES)
                header, layout = _check_header(raw, size, shown, fix)
                _check_arrays(fh, header, layout, shown, fix)
        except OSError as err:
            raise SpecdecError(f"cannot read datastore '{shown}' ({err.strerror or type(err).__name__})",
                               "check the path and its permissions") from None
        store = cls(path, header, layout)
        if tokenizer_size is not None and store.tokenizer_size != tokenizer_size:
            raise SpecdecError(f"datastore '{shown}' holds ids of a tokenizer of {store.tokenizer_size} ids, this "
                               f"export's tokenizer makes {tokenizer_size} (made with another tokenizer)",
                               "build it with this export's tokenizer: specdec-datastore build --export DIR")
        if tokenizer_sha256 is not None and store.tokenizer_sha256 != tokenizer_sha256:
            raise SpecdecError(f"datastore '{shown}' was made with another tokenizer (sha256 "
                               f"{store.tokenizer_sha256[:12]}.., this export's is {tokenizer_sha256[:12]}..)",
                               "build it with this export's tokenizer: specdec-datastore build --export DIR")
        return store

    # -- lookups -----------------------------------------------------------------------------------------------
    def continuations(self, context, k: int, count: int = 1, min_n: int = 1) -> tuple[int, list]:
        """(n, [continuation, ...]): the longest n in min_n .. width such that the last n tokens of `context` (ids, and
        `sep` for the start of the text: only as the first of them) occur followed by more text, and up to `count`
        continuations of up to k tokens after them, with distinct first tokens, the most frequent first token first
        (each the most frequent continuation of that first token's occurrences). (0, []) when nothing matches. An id
        the tokenizer does not make (a padded row, vocabulary.py) occurs in no text: only what follows it is matched."""
        bits, width, sep = self.bits, self.width, self.sep
        for i in range(len(context) - 1, -1, -1):
            t = int(context[i])
            if not (0 <= t < sep or (t == sep and i == 0)):
                context = context[i + 1:]
                break
        top = min(len(context), width)
        if top < min_n or k < 1 or not len(self._keys):
            return 0, []
        digits = [int(t) + 1 for t in context[len(context) - top:]]
        bounds = []
        for n in range(top, min_n - 1, -1):
            prefix = 0
            for d in digits[top - n:]:
                prefix = (prefix << bits) | d
            rest = bits * (self.digits - n - 1)       # the key's digits after g's and the first next token's
            bounds += [((prefix << bits) | 1) << rest, (prefix + 1) << (rest + bits)]
        edge = 1 << 64
        probes = np.searchsorted(self._keys, np.array([min(b, edge - 1) for b in bounds], np.uint64))
        for j, n in enumerate(range(top, min_n - 1, -1)):
            lo = int(probes[2 * j])
            hi = len(self._keys) if bounds[2 * j + 1] >= edge else int(probes[2 * j + 1])
            if hi > lo:
                found = self._ranked(lo, hi, n, k, count)
                if found:
                    return n, found
        return 0, []

    def _ranked(self, lo: int, hi: int, n: int, k: int, count: int) -> list:
        stride = max(1, -(-(hi - lo) // SAMPLE))
        keys = self._keys[lo:hi:stride]                                    # sorted: equal keys are runs
        firsts = keys >> np.uint64(self.bits * (self.digits - n - 1))     # g and the next token
        starts, sizes = _runs(firsts)
        out = []
        for group in np.argsort(-sizes, kind="stable")[:count]:           # the most frequent next tokens first
            a = int(starts[group])
            sub_starts, sub_sizes = _runs(keys[a:a + int(sizes[group])])
            j = lo + (a + int(sub_starts[int(np.argmax(sub_sizes))])) * stride    # its most frequent continuation
            pos = int(self._positions[j]) + n
            tail = self._stream[pos:pos + k].tolist()
            if self.sep in tail:
                tail = tail[:tail.index(self.sep)]
            if tail:
                out.append(tail)
        return out

    def segments_tokens(self):
        """Yield each segment's token ids (a list), in order (for `specdec-datastore add`)."""
        start = None
        for begin in range(0, self.stream_length, CHUNK):
            block = np.asarray(self._stream[begin:begin + CHUNK])
            for end in np.flatnonzero(block == self.sep) + begin:
                if start is not None:
                    yield np.asarray(self._stream[start:end]).tolist()
                start = int(end) + 1

    def info(self) -> dict:
        return {"path": str(self.path), "tokens": self.tokens, "segments": self.segments,
                "tokenizer_size": self.tokenizer_size, "width": self.width, "bytes": self.file_bytes,
                "tokenizer_sha256": self.tokenizer_sha256}


def _runs(sorted_values: np.ndarray) -> tuple:
    """(start, length) of each run of equal values in a sorted array (in plain Python for the short arrays most
    matches have: numpy's per-call overhead is the larger cost there)."""
    n = len(sorted_values)
    if n <= 32:
        values, starts = sorted_values.tolist(), [0]
        starts += [i for i in range(1, n) if values[i] != values[i - 1]]
        return np.array(starts), np.diff(starts + [n])
    starts = np.concatenate(([0], np.flatnonzero(sorted_values[1:] != sorted_values[:-1]) + 1))
    return starts, np.diff(np.append(starts, n))


def _check_header(raw: bytes, size: int, shown: str, fix: str) -> tuple:
    def bad(problem: str):
        raise SpecdecError(f"datastore '{shown}' {problem}", fix)

    if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
        bad("is not a specdec datastore (no datastore header)")
    header = HEADER.unpack_from(raw)
    _, version, token_bytes, bits, width, vocab, n_tokens, segments, _ = header
    if version != VERSION:
        bad(f"is of format version {version}, this specdec reads {VERSION}")
    if not 1 <= vocab < (1 << 31):
        bad(f"says its vocabulary has {vocab} ids")
    if token_bytes != token_bytes_for(vocab) or bits != digit_bits(vocab) or width != 64 // bits:
        bad("has a header whose token width, bits or n-gram width do not follow from its vocabulary (corrupt)")
    if not (1 <= segments and 2 * segments + 1 <= n_tokens <= MAX_TOKENS):
        bad(f"says it holds {n_tokens} tokens in {segments} segments (corrupt)")
    layout = Layout.of(token_bytes, n_tokens, n_tokens - 1)
    if size != layout.size:
        bad(f"is {size} bytes, its header says {layout.size} (truncated or corrupt)")
    return header, layout


def _check_arrays(fh, header: tuple, layout: Layout, shown: str, fix: str) -> None:
    """One chunked pass over the arrays (plain reads: nothing stays resident)."""
    vocab, n_tokens, segments = header[5], header[6], header[7]
    n_keys = n_tokens - 1

    def bad(problem: str):
        raise SpecdecError(f"datastore '{shown}' {problem} (corrupt)", fix)

    seps, first, last = 0, None, None
    for block in _chunks(fh, layout.tokens_at, layout.token_dtype, n_tokens):
        if int(block.max()) > vocab:
            bad(f"holds token id {int(block.max())}, outside its vocabulary of {vocab}")
        seps += int(np.count_nonzero(block == vocab))
        first = int(block[0]) if first is None else first
        last = int(block[-1])
    if first != vocab or last != vocab or seps != segments + 1:
        bad(f"has {seps} separators in its stream (starting and ending with one), its header says {segments} "
            "segments")
    previous = None
    for block in _chunks(fh, layout.keys_at, np.dtype("<u8"), n_keys):
        if (previous is not None and block[0] < previous) or bool(np.any(block[1:] < block[:-1])):
            bad("has keys out of order")
        previous = block[-1]
    for block in _chunks(fh, layout.positions_at, np.dtype("<u4"), n_keys):
        if int(block.max()) >= n_tokens:
            bad(f"has a position {int(block.max())} outside its {n_tokens} tokens")


def _chunks(fh, offset: int, dtype: np.dtype, count: int):
    fh.seek(offset)
    left = count
    while left:
        n = min(left, CHUNK)
        block = np.frombuffer(fh.read(n * dtype.itemsize), dtype)
        if len(block) != n:
            raise OSError(0, "the file ended early")
        yield block
        left -= n



"""The datastore index (runtime/loading/datastore.py) against a brute-force search of the same token stream, and its file
checks: every corrupt or foreign file is a one-line SpecdecError when it is opened."""

from __future__ import annotations

import collections
import struct

import numpy as np
import pytest

from specdec.runtime import SpecdecError
from specdec.runtime.loading.datastore import HEADER_BYTES, SAMPLE, Datastore
from specdec.runtime.tools.datastore_build import write

SHA = "ab" * 32


def stream_of(segments, sep):
    out = [sep]
    for seg in segments:
        out += list(seg) + [sep]
    return out


def brute(segments, sep, context, k, width, min_n=1):
    """The longest n (min_n..width) whose n-gram ends `context` and occurs in the stream (SEP, segment, SEP, ...;
    a SEP only as its first token) followed by a token, with, per next token, each occurrence's continuation (up
    to k, to its segment's end) and key tail (the next width + 1 - n tokens)."""
    stream = stream_of(segments, sep)
    for n in range(min(width, len(context)), min_n - 1, -1):
        gram = list(context[len(context) - n:])
        if sep in gram[1:]:
            continue
        follows = collections.defaultdict(list)
        for i in range(len(stream) - n):
            if stream[i:i + n] == gram and sep not in stream[i + 1:i + n + 1]:
                after = stream[i + n:]
                after = after[:after.index(sep)]
                follows[after[0]].append((after[:k], tuple(after[:width + 1 - n])))
        if follows:
            return n, follows
    return 0, {}


@pytest.mark.parametrize("vocab, seed", [(5, 0), (7, 1), (40, 2), (300, 3), (70000, 4)])
def test_index_matches_brute_force(vocab, seed, tmp_path):
    """Random streams (300 segments of 1..30 tokens, a few ids so that matches are long and repeated): the longest
    match, the ranking of first tokens by count and the continuation, for 300 random contexts, 100 cut from the
    stream and 100 starts of a text (SEP first)."""
    rng = np.random.default_rng(seed)
    alphabet = min(vocab, 9)      # ids drawn from a few values, spread over the vocabulary (70000: 4-byte tokens)
    values = rng.choice(vocab, alphabet, replace=False)
    segments = [values[rng.integers(0, alphabet, rng.integers(1, 31))].tolist() for _ in range(300)]
    store = Datastore.open(write(tmp_path / "s.sdds", segments, vocab, SHA), vocab, SHA)
    assert store.tokens == sum(map(len, segments)) and store.segments == len(segments)
    contexts = [values[rng.integers(0, alphabet, rng.integers(1, 8))].tolist() for _ in range(300)]
    for seg in segments[:100]:
        cut = int(rng.integers(1, len(seg) + 1))
        contexts.append(seg[max(0, cut - 6):cut])
        contexts.append([vocab] + seg[:cut - 1])     # the start of a text: SEP, then what it has so far
    matched = 0
    for context in contexts:
        k, count = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        n, found = store.continuations(context, k, count)
        ref_n, follows = brute(segments, vocab, context, k, store.width)
        assert n == ref_n, (context, n, ref_n)
        if not n:
            assert found == []
            continue
        matched += 1
        total = sum(len(v) for v in follows.values())
        firsts = [c[0] for c in found]
        assert len(set(firsts)) == len(firsts) and len(found) == min(count, len(follows))
        if total <= SAMPLE:      # counted exactly: the most frequent next tokens, ties to the smaller id
            ranked = sorted(follows, key=lambda t: (-len(follows[t]), t))
            assert firsts == ranked[:count], (context, firsts, ranked)
        for cont in found:
            occurrences = follows[cont[0]]
            tails = collections.Counter(tail for _, tail in occurrences)
            best = max(tails.values())
            assert any(c == cont and (total > SAMPLE or tails[tail] == best) for c, tail in occurrences), \
                (context, cont)
    assert matched > 200


def test_long_ranges_are_sampled_not_scanned(tmp_path):
    """A 1-gram with 200,000 occurrences: the ranking reads SAMPLE keys, and still finds the dominant next token
    (3 of 4 occurrences of 1 are followed by 2)."""
    rng = np.random.default_rng(0)
    seg = []
    for _ in range(200_000):
        seg += [1, 2 if rng.random() < 0.75 else 3]
    store = Datastore.open(write(tmp_path / "s.sdds", [seg], 10, SHA))
    n, found = store.continuations([5, 1], 3, count=2)
    assert n == 1 and [c[0] for c in found] == [2, 3]


def test_segments_do_not_run_together(tmp_path):
    store = Datastore.open(write(tmp_path / "s.sdds", [[1, 2], [3, 4, 5]], 10, SHA))
    assert store.continuations([1, 2], 4) == (0, [])          # 2 ends its segment: nothing follows it
    assert store.continuations([2, 3], 4) == (1, [[4, 5]])    # "2 3" never occurs: the 1-gram "3" does
    assert store.continuations([10], 4, 2) == (1, [[1, 2], [3, 4, 5]])    # how texts start (SEP = 10)
    assert store.continuations([10, 3], 4) == (2, [[4, 5]])
    assert list(store.segments_tokens()) == [[1, 2], [3, 4, 5]]


def test_a_context_holding_a_padded_row_is_matched_from_after_it(tmp_path):
    """The real T5 layout: a model has more rows than its tokenizer makes ids (here a tokenizer of 10 ids, the
    separator 10). A padded row's id (10 .. the rows, or anything larger) occurs in no text, so a context holding
    one is matched from after it, and a continuation never holds one."""
    store = Datastore.open(write(tmp_path / "s.sdds", [[1, 2, 3, 4], [5, 2, 3, 6]], 10, SHA))
    assert store.continuations([1, 2, 3], 2) == (3, [[4]])
    for padded in (11, 13, 300):        # 300: wider than a key's digit
        assert store.continuations([padded, 2, 3], 2)[0] == 2
        assert store.continuations([1, padded, 3], 2)[0] == 1
        assert store.continuations([1, 2, padded], 2) == (0, [])
    assert store.continuations([7, 10, 3], 2)[0] == 1           # the separator's value past the context's start
    assert store.continuations([10, 5], 3) == (2, [[2, 3, 6]])    # ... and as its start: the start of a text


# -- untrusted files ----------------------------------------------------------------------------------------------
def _good(tmp_path, vocab=50):
    rng = np.random.default_rng(0)
    segments = [rng.integers(0, vocab, rng.integers(1, 20)).tolist() for _ in range(50)]
    return write(tmp_path / "good.sdds", segments, vocab, SHA)


def _refused(path, *expected, **kwargs):
    with pytest.raises(SpecdecError) as err:
        Datastore.open(path, **kwargs)
    message = str(err.value)
    assert "\n" not in message and all(e in message for e in expected), message
    return message


def test_corrupt_files_are_refused_with_one_line(tmp_path):
    good = _good(tmp_path)
    data = good.read_bytes()
    header = bytearray(data[:HEADER_BYTES])
    n_tokens = struct.unpack_from("<Q", data, 32)[0]
    n_keys = n_tokens - struct.unpack_from("<Q", data, 40)[0]
    keys_at = len(data) - 12 * n_keys
    cases = {
        "empty": (b"", "not a specdec datastore"),
        "text": (b"hello world\n" * 20, "not a specdec datastore"),
        "truncated": (data[:-1], "truncated or corrupt"),
        "longer": (data + b"\0", "truncated or corrupt"),
        "header only": (data[:HEADER_BYTES], "truncated or corrupt"),
        "version": (data[:8] + struct.pack("<I", 9) + data[12:], "format version 9"),
        "vocab": (data[:24] + struct.pack("<Q", 0) + data[32:], "vocabulary has 0 ids"),
        "bits": (data[:16] + struct.pack("<I", 3) + data[20:], "do not follow"),
        "token count": (data[:32] + struct.pack("<Q", n_tokens + 1) + data[40:], "truncated or corrupt"),
        "segments": (data[:40] + struct.pack("<Q", 0) + data[48:], "segments"),
        "token out of range": (data[:HEADER_BYTES] + struct.pack("<H", 60000) + data[HEADER_BYTES + 2:],
                               "outside its vocabulary"),
        "keys out of order": (data[:keys_at] + b"\xff" * 8 + data[keys_at + 8:], "keys out of order"),
        "position outside": (data[:-4] + struct.pack("<I", n_tokens + 5), "outside its"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / f"{name}.sdds"
        path.write_bytes(content)
        _refused(path, expected, str(path))
    del header
    _refused(tmp_path / "missing.sdds", "does not exist")
    _refused(tmp_path, "is not a regular file")
    _refused(good, "tokenizer of 50 ids", "another tokenizer", tokenizer_size=51)
    _refused(good, "another tokenizer", tokenizer_sha256="cd" * 32)
    assert Datastore.open(good, 50, SHA).segments == 50          # the good file still opens


def test_random_bit_flips_never_crash(tmp_path):
    """500 copies with 1..16 random bits flipped: each opens (a harmless flip, e.g. in a token that stays a valid id)
    or is refused with one line; an opened one answers lookups with valid ids only."""
    good = _good(tmp_path)
    data = good.read_bytes()
    rng = np.random.default_rng(1)
    refused = 0
    for case in range(500):
        flipped = bytearray(data)
        for _ in range(int(rng.choice([1, 2, 4, 16]))):
            i = int(rng.integers(len(flipped)))
            flipped[i] ^= 1 << int(rng.integers(8))
        path = tmp_path / f"flip{case % 4}.sdds"
        path.write_bytes(bytes(flipped))
        try:
            store = Datastore.open(path, 50, SHA)
        except SpecdecError as err:
            assert "\n" not in str(err)
            refused += 1
            continue
        for context in ([1, 2, 3], [int(t) for t in rng.integers(0, 50, 4)]):
            _, found = store.continuations(context, 5, 3)
            assert all(0 <= t < 50 for c in found for t in c)
    assert refused > 100

"""One exported T5 run over many sequences at once, for beam search: a KV cache with a beam (batch) axis that is
reordered between steps.

The decoder graph is the same file the speculative loop runs (its head samples every row and is ignored here),
in the model's session without the batch-1 shape override (CachedSeq2Seq.free_session: opened on first use, it
then runs the model's batched and single requests too). Its cache is two flat buffers of
[positions, layers, 2, rows, heads, d_kv] for up to `capacity` rows (three for a draft) and up to `positions`
positions, both grown to what requests use (`reserve`): the live one holds the
first `length` positions of `rows` sequences; `gather(order)` writes rows order[0], order[1], ... of the live cache
into a spare one, which becomes live (numpy.take with `out=`: no allocation per step; on a GPU provider the two buffers are
device memory and the gather copies through the host staging copy: that path is unrun, see docs/guides/beam-search.md).
The cross-attention K/V are computed once (batch 1) and repeated for every row. A search's working memory does not
outlive it: each run hands ONNX Runtime's unused arena chunks back as it ends, and `release()` after a search
returns the buffers' pages to the system (they keep their size: the next search allocates nothing).
"""

from __future__ import annotations

import time

import numpy as np

from ..core.graph_io import INPUT_IDS, LOGITS, NEW_KV, PAST_KV, STEPS, bind_cross
from ..core.stats import Stats
from .device import Binder, Buffer, arena_shrinking, release_freed_memory
from .head import Head, View
from .model import CachedSeq2Seq
from .positions import ChainPositions

FIRST_POSITIONS = 32        # cache positions per row at first; doubled when a sequence needs more (max_length at most)


class BeamModel:
    def __init__(self, model: CachedSeq2Seq, buffers: int = 2):
        self.model = model
        self.device = model.device
        self.decoder = Binder(model.free_session(), self.device)     # shared with batched requests
        self.capacity = self.tokens_cap = 0
        self.positions = 0        # cache positions the buffers hold per row (grown to what requests use)
        self.src_cap = self.cross_rows = 0      # source positions and rows the cross K/V buffer holds
        self.src = 0
        self.live, self.pinned = 0, None
        self.buffers = buffers    # 3 for a draft, whose round-start cache stays pinned while it proposes
        self.rows = 1
        self.length = 0
        self.vocab = model.vocab
        # each run hands the arena's unused chunks back as it ends: a beam run's working memory (W or W x (gamma+1)
        # rows) would otherwise stay in the session's arena after the search (measured on a t5-large-sized export)
        self.shrink = arena_shrinking(self.device)
        self._head_buffers()

    def _head_buffers(self) -> None:
        """The head's inputs, bound once: no guesses, no mask, one zero uniform and the idle (greedy, unfiltered)
        sampling parameters for every row; beam search reads the logits and ignores what the head samples."""
        dev = self.device
        self.head = Head(1, self.vocab, dev)
        self.decoder.views(self.head.inputs(), {})
        self.steps = Buffer((1,), np.int64, dev)                # a draft's proposal loop: plain steps (export/loop.py)
        self.steps.write([1])
        self.decoder.input(STEPS, self.steps, (1,))
        self._head_outputs(1)
        self.chain = ChainPositions(dev)              # a target's tree inputs: the chain's

    def _head_outputs(self, rows: int) -> None:
        """The head's outputs for up to `rows` rows (one per row: a plain step, G = 0), bound at each run's rows."""
        self.head_out = (Buffer((rows, self.vocab), np.float32, self.device), Buffer((rows,), np.int64, self.device),
                         Buffer((rows,), np.int64, self.device))
        self._outputs = {}          # rows -> the head's output views

    def reserve(self, rows: int, tokens: int, positions: int = 0) -> None:
        """Buffers for `rows` sequences of up to `positions` cache positions, runs of up to `tokens` tokens and the
        source's K/V: grown (keeping what the caches and the cross K/V hold) when a request or a round needs more,
        never shrunk, and no larger than what requests use: the cache's positions and the source's grow with the
        longest sequence and source seen (doubling, at most max_length), not to max_length at once. A speculative
        round may score up to W x (gamma + 1) rows; buffers grow to what the rounds actually use."""
        m = self.model
        grow_rows = rows > self.capacity
        grow_positions = positions > self.positions
        if grow_rows or grow_positions or not self.positions:       # (no buffers before the first request)
            rows_cap = max(rows, 2 * self.capacity) if grow_rows else self.capacity
            positions_cap = min(m.max_length, max(positions, 2 * self.positions, FIRST_POSITIONS)) \
                if grow_positions or not self.positions else self.positions
            per = positions_cap * m.layers * 2 * rows_cap * m.heads * m.d_kv
            old = getattr(self, "caches", [])
            self.caches = [Buffer((per,), m.cache.dtype, self.device) for _ in range(self.buffers)]
            for new, buf in zip(self.caches, old):      # the layouts depend on the rows in use, not on capacity
                new.write(buf.flat())
            self.capacity, self.positions = rows_cap, positions_cap
            if grow_rows:
                self._head_outputs(rows_cap)
        src = max(self.src, 1)
        if self.capacity > self.cross_rows or src > self.src_cap:
            cross = getattr(self, "cross", None)
            if src > self.src_cap:        # an encoder's fixed frames may exceed max_length
                self.src_cap = max(src, min(2 * self.src_cap, max(m.max_length, m.frames or 0)))
            self.cross_rows = self.capacity
            self.cross = Buffer((m.layers * 2 * self.capacity * m.heads * self.src_cap * m.d_kv,), m.cache.dtype,
                                self.device)
            if cross is not None:         # the layout depends on the rows and source in use, not on capacity
                self.cross.write(cross.flat())
        if rows * tokens > self.tokens_cap:
            self.logits = Buffer((rows * tokens * self.vocab,), np.float32, self.device)
            self.input_ids = Buffer((rows * tokens,), np.int64, self.device)
            self.tokens_cap = rows * tokens

    def _kv(self, rows: int) -> tuple:
        m = self.model
        return m.layers, 2, rows, m.heads, m.d_kv

    def cache_view(self, which: int | None = None, length: int | None = None, rows: int | None = None) -> np.ndarray:
        """A cache buffer (default: the live one) as a host array [length, layers, 2, rows, heads, d_kv]."""
        rows = self.rows if rows is None else rows
        length = self.length if length is None else length
        shape = (length, *self._kv(rows))
        which = self.live if which is None else which
        return self.caches[which].flat()[:int(np.prod(shape))].reshape(shape)

    def encode(self, ids: np.ndarray, rows: int, stats: Stats, capacity: int = 0, tokens: int = 1) -> None:
        """The encoder once (batch 1, the model's own session), its K/V repeated for `rows` sequences; buffers for
        up to `capacity` rows and runs of `tokens` tokens. The runs from here on count in `stats`."""
        m = self.model
        m.encode(ids, stats)
        self.decoder.charged = (stats,)
        self.src = m.src_len
        self.length = 0
        self.reserve(max(rows, capacity), tokens)
        self.set_rows(rows)

    def set_rows(self, rows: int) -> None:
        """Bind the cross-attention K/V for `rows` sequences (every row attends to the same source)."""
        m = self.model
        self.reserve(rows, 1)
        one = m.cross.flat()[:m.layers * 2 * m.heads * self.src * m.d_kv].reshape(m.layers, 2, 1, m.heads, self.src,
                                                                                   m.d_kv)
        shape = self._cross_shape(rows)
        if self.device == "cpu":
            np.copyto(self.cross.host[:int(np.prod(shape))].reshape(shape), one)
        else:
            self.cross.write(np.broadcast_to(one, shape))
        bind_cross(self.decoder, self.cross, shape)
        self.rows = rows

    def _cross_shape(self, rows: int) -> tuple:
        m = self.model
        return m.layers, 2, rows, m.heads, self.src, m.d_kv

    def run(self, tokens: np.ndarray) -> np.ndarray:
        """Append tokens [rows, N] to every row's sequence; the logits [rows, N, V] (a host view on the CPU). The
        run counts itself in the stats given to `encode`."""
        rows, count = tokens.shape
        assert rows == self.rows, (rows, self.rows)
        m = self.model
        if self.length + count > m.max_length:
            raise AssertionError("beam run past max_length")
        self.reserve(rows, count, self.length + count)
        self.input_ids.write(tokens)
        b = self.decoder
        kv = self._kv(rows)
        b.input(INPUT_IDS, self.input_ids, (rows, count))
        live = self.caches[self.live]
        b.input(PAST_KV, live, (self.length, *kv))
        b.output(NEW_KV, live, (count, *kv), self.length * int(np.prod(kv)))
        b.output(LOGITS, self.logits, (rows, count, self.vocab))
        head = self._outputs.get(rows)
        if head is None:
            probs, accepted, following = self.head_out
            head = self._outputs[rows] = self.head.outputs(View(probs, (rows, self.vocab)), View(accepted, (rows,)),
                                                           View(following, (rows,)))
        b.views({}, head)
        self.chain.bind(b, count)
        t = time.perf_counter()
        b.run(self.shrink)
        self.elapsed = time.perf_counter() - t
        self.length += count
        return self.logits.flat()[:rows * count * self.vocab].reshape(rows, count, self.vocab)

    def pin(self) -> None:
        """Keep the live cache (rows and length as they are now) until `gather(..., from_pinned=True)`."""
        self.pinned = (self.live, self.rows)

    def gather(self, order, length: int | None = None, from_pinned: bool = False) -> None:
        """Row i of the new live cache = row order[i] of the live one (or of the pinned one, which is then
        released), positions 0 .. length-1 (default all)."""
        order = np.asarray(order, np.int64)
        length = self.length if length is None else length
        if len(order) > self.capacity:
            self.reserve(len(order), 1)
            bind_cross(self.decoder, self.cross, self._cross_shape(self.rows))
        if from_pinned:
            (source, rows), self.pinned = self.pinned, None
        else:
            source, rows = self.live, self.rows
        keep = {source, self.pinned[0] if self.pinned else source}
        dest = next(i for i in range(len(self.caches)) if i not in keep)
        src = self.cache_view(source, length, rows)
        if self.device == "cpu":
            np.take(src, order, axis=3, out=self.cache_view(dest, length, len(order)))
        else:
            self.caches[dest].write(np.take(src, order, axis=3))
        self.live, self.length = dest, length
        if len(order) != self.rows:
            self.set_rows(len(order))

    def release(self) -> None:
        """After a search: the caches, the cross K/V and the logits hold nothing a later search reads (each
        encodes and writes before it reads), so their pages go back to the system; the buffers keep their size and
        address (device.Buffer.release), and the C heap's freed pages go too (what the arena handed back)."""
        for buf in (*getattr(self, "caches", ()), getattr(self, "cross", None), getattr(self, "logits", None)):
            if buf is not None:
                buf.release()
        self.pinned = None
        release_freed_memory()

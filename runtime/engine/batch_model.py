"""One exported T5 decoding many requests at once: B rows of different lengths share every decoder run.

Row b owns cache slots 0 .. length_b - 1 of the one KV buffer [max_length, layers, 2, capacity, heads, d_kv] and
encoder positions 0 .. source_b - 1 of the cross-attention buffer; a run binds `row_lengths` and `source_lengths`
(the decoders' per-row lengths, export/tracing.py) so each row attends to its own positions with its own relative-position bias.
A run appends N tokens to every row: their K/V land in slots past .. past+N-1 of all rows (past = the longest row),
and the rows' kept tokens then move down to their own lengths (a copy of a few slots per shorter row). The head
(export/head.py) verifies each row's guesses with that row's parameters and uniforms, so one run returns every
row's accepted count and next token.

Every row of the capacity is bound in every run; a row that holds no request is idle (length 0, one source
position, temperature 0) and costs its share of the run. `resize` lays the live rows out for another capacity in
the same buffers, so a batch that shrinks stops paying for rows it no longer has.

The session is the model's batch-free one (CachedSeq2Seq.free_session, shared with beam search and, once open,
with single requests). On a GPU provider the moves between slots go through the host staging copy: that path is
unrun (docs/guides/batching.md).
"""

from __future__ import annotations

import time

import numpy as np

from ..core.graph_io import (ACCEPTED, DRAFT_PROBS, GUESS_COUNTS, INPUT_IDS, LOGITS, NEW_KV, NEXT_TOKEN,
                             PAST_KV, PROBS, ROW_INPUTS, STEPS, UNIFORMS, bind_cross)
from .device import Binder, Buffer, arena_shrinking, release_freed_memory
from .head import Head, View
from .model import CachedSeq2Seq
from .positions import ChainPositions

ROW_LENGTHS, SOURCE_LENGTHS = ROW_INPUTS
# An encoder run's fixed cost, in padded source tokens: measured on the CPU at t5-large size (int8), a run took about
# 16-29 ms plus 2 ms a source token (16 sources of 12 tokens: 0.83 s one by one, 0.40 s in one run; of 40 tokens:
# 1.66 s and 1.33-1.54 s), and padding costs what real tokens do: 16 sources of 4-90 tokens (674) padded to 1,424
# took 1.9x the time of encoding them one by one
RUN_TOKENS = 16


def encoder_groups(lengths: list) -> list:
    """The sources of `lengths` split into encoder runs, as lists of indices: sorted by length and cut where that
    lowers RUN_TOKENS a run plus the padded tokens (a run's sources times its longest). Dynamic programming over the
    sorted lengths, O(n^2); a cheapest split of all is one of sorted neighbours (a source moved from a run of longer
    ones to a run of shorter ones never adds padding), which the test checks against every partition."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best, cut = [0] + [None] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        width = lengths[order[j - 1]]
        for i in range(j):
            cost = best[i] + RUN_TOKENS + (j - i) * width
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


class BatchModel:
    """Buffers for up to `most` rows and sources of up to max_length positions, allocated once; `layout(capacity,
    source_cap)` lays a batch out in them (a smaller batch, or shorter sources, use their first elements), so a
    decoder keeps one BatchModel for every batch it runs and its memory does not grow from call to call."""

    def __init__(self, model: CachedSeq2Seq, most: int, gamma: int):
        self.model, self.device = model, model.device
        self.vocab, self.max_length = model.vocab, model.max_length
        self.kv = (model.layers, 2, model.heads, model.d_kv)
        self.decoder = Binder(model.free_session(), self.device)
        self.most = most
        self.gamma = gamma                       # most guesses a row may have in one run
        self.chain = ChainPositions(self.device, gamma + 1)
        c, v, n, dev = most, self.vocab, gamma + 1, self.device
        row = int(np.prod(self.kv))              # one position of one row
        dtype = model.cache.dtype
        self.cache = Buffer((self.max_length * row * c,), dtype, dev)
        self.cross = Buffer((self.max_length * row * c,), dtype, dev)
        self.buf = {name: Buffer((size,), dtype_, dev) for name, size, dtype_ in (
            (INPUT_IDS, c * n, np.int64), (ROW_LENGTHS, c, np.int64), (SOURCE_LENGTHS, c, np.int64),
            (GUESS_COUNTS, c, np.int64), (DRAFT_PROBS, c * (n - 1) * v, np.float32),
            (UNIFORMS, c * n, np.float32), (LOGITS, c * n * v, np.float32), (PROBS, c * n * v, np.float32),
            (ACCEPTED, c, np.int64), (NEXT_TOKEN, c, np.int64))}
        self.head = Head(c, v, dev)              # each row's sampling parameters: its request's, or idle
        self.capacity = 0
        self.shrink = arena_shrinking(dev)       # each run hands the arena's unused chunks back as it ends
        # the sources of rows that join together are encoded in one run when the encoder takes their lengths
        self.batched_encoder = model.batches_sources
        if self.batched_encoder:                 # free_session() above made the encoder batch-free too
            self.staging = None                  # a run's K/V before they are copied into their rows
            self.sources_in = Buffer((c * self.max_length,), np.int64, dev, host_only=True)
            self.source_rows = Buffer((c,), np.int64, dev, host_only=True)

    def release(self) -> None:
        """Hand the KV cache's and the cross-attention buffer's pages back to the system between batches (they keep
        their addresses and sizes and read as zeros: `layout` empties every row and `join` writes each row's K/V)."""
        self.cache.release()
        self.cross.release()
        if self.batched_encoder:
            self.staging = None
        release_freed_memory()

    def fits(self, capacity: int, gamma: int) -> bool:
        return capacity <= self.most and gamma <= self.gamma

    # -- layout -------------------------------------------------------------------------------------------------
    def layout(self, capacity: int, source_cap: int) -> None:
        """A new batch of `capacity` rows (all idle) whose sources are at most `source_cap` positions."""
        self._views(capacity, source_cap)
        self.lengths = np.zeros(capacity, np.int64)   # host copies; the buffers are what a run binds
        self.active = np.zeros(capacity, np.bool_)    # rows that hold a request
        self.sources = np.ones(capacity, np.int64)
        self.head.reorder([], capacity)
        self.stats = [None] * capacity                # each row's request's stats (None: idle)
        self._charge()
        self.buf[SOURCE_LENGTHS].write(self.sources)
        self.buf[DRAFT_PROBS].host[...] = 0.0
        self._q_set = []                              # flat indices of the one-hot q entries written last run
        self._sync(self.buf[DRAFT_PROBS])

    def _views(self, capacity: int, source_cap: int) -> None:
        layers, two, heads, d_kv = self.kv
        self.capacity, self.source_cap = capacity, source_cap
        cache_shape = (self.max_length, layers, two, capacity, heads, d_kv)
        cross_shape = (layers, two, capacity, heads, source_cap, d_kv)
        self.cache_rows = self.cache.host[:int(np.prod(cache_shape))].reshape(cache_shape)
        self.cross_rows = self.cross.host[:int(np.prod(cross_shape))].reshape(cross_shape)

    def resize(self, capacity: int, rows: list, source_cap: int | None = None) -> None:
        """Lay the batch out for `capacity` rows (and sources of up to `source_cap` positions: at least the old
        layout's), keeping rows[i] (old index) as row i; the others are dropped."""
        if capacity > self.most:
            raise ValueError(f"a batch of {capacity} rows does not fit buffers for {self.most}")
        self._pull(self.cache, self.cross)
        lengths, sources, active = self.lengths[rows], self.sources[rows], self.active[rows]
        stats = [self.stats[r] for r in rows]
        past = int(lengths.max(initial=0))
        cache = self.cache_rows[:past, :, :, rows].copy()         # the live part, in the old layout
        cross = self.cross_rows[:, :, rows].copy()
        old_cap = self.source_cap
        self._views(capacity, max(source_cap or 0, old_cap))
        keep = len(rows)
        self.cache_rows[:past, :, :, :keep] = cache
        self.cross_rows[:, :, :keep, :, :old_cap] = cross
        self.lengths, self.sources, self.active = (np.zeros(capacity, np.int64), np.ones(capacity, np.int64),
                                                   np.zeros(capacity, np.bool_))
        self.lengths[:keep], self.sources[:keep], self.active[:keep] = lengths, sources, active
        self.buf[SOURCE_LENGTHS].write(self.sources)
        self.head.reorder(rows, capacity)
        self.stats = stats + [None] * (capacity - keep)
        self._charge()
        self._q_set = []
        self.buf[DRAFT_PROBS].host[...] = 0.0
        self._sync(self.cache, self.cross, self.buf[SOURCE_LENGTHS], self.buf[DRAFT_PROBS])

    def _charge(self) -> None:
        """Every run counts in the stats of each request that holds a row (device.Binder.run)."""
        self.decoder.charged = tuple(s for s in self.stats if s is not None)

    @staticmethod
    def _pull(*buffers) -> None:
        for buf in buffers:          # unrun: the staging copy takes the device buffer's content
            if buf.value is not None:
                buf.host[...] = buf.value.numpy().reshape(buf.host.shape)

    @staticmethod
    def _sync(*buffers) -> None:
        for buf in buffers:          # unrun: device buffers take the staging copy's content
            if buf.value is not None:
                buf.value.update_inplace(buf.host)

    # -- rows ---------------------------------------------------------------------------------------------------
    def join(self, joining: list) -> None:
        """Requests take rows: `joining` holds (row, source ids, params, stats). Their sources are encoded together
        (`_encode`), each row's cross-attention K/V land in the row, and the row takes its request's sampling
        parameters."""
        self._pull(self.cross)
        if self.batched_encoder:
            self._encode(joining)
        else:                                    # an encoder without source lengths: one run per source
            model = self.model
            for row, ids, _, stats in joining:
                model.encode(ids, stats)
                src = len(ids)
                cross = model.cross.flat()[:model.layers * 2 * model.heads * src * model.d_kv]
                self.cross_rows[:, :, row, :, :src] = cross.reshape(model.layers, 2, model.heads, src, model.d_kv)
        for row, ids, params, stats in joining:
            self.lengths[row], self.sources[row], self.active[row] = 0, len(ids), True
            self.buf[SOURCE_LENGTHS].write([len(ids)], row)
            self.head.set(params, row)
            self.stats[row] = stats
        self._charge()
        self._sync(self.cross)

    def _encode(self, joining: list) -> None:
        """The joining sources in as few encoder runs as pay (`encoder_groups`), each run's sources padded to its
        longest (export/families/t5_encoder.py). Each run writes a staging buffer, grown to the largest run, and each
        row's positions are copied into place; but when one run takes them all, they fill the layout's rows in order
        and the longest is the layout's source_cap, the run writes the batch's cross-attention buffer itself. Each
        request's encoder_s gets its share of its run (the run's seconds over the run's rows), and the run counts in
        every joined request's ort_runs."""
        layers, two, heads, d_kv = self.kv
        rows, lengths = [j[0] for j in joining], [len(j[1]) for j in joining]
        groups = encoder_groups(lengths)
        if len(groups) == 1 and rows == list(range(self.capacity)) and max(lengths) == self.source_cap:
            self._encoder_run(joining, self.cross, self.source_cap)
            self._pull(self.cross)               # unrun: the staging copy takes what the run wrote on the device
            return
        for group in groups:
            part = [joining[i] for i in group]
            width = max(lengths[i] for i in group)
            size = layers * two * len(part) * heads * width * d_kv
            if self.staging is None or self.staging.size < size:      # grown to the largest run, released with us
                self.staging = None
                self.staging = Buffer((size,), self.cache.dtype, self.device)
            self._encoder_run(part, self.staging, width)
            staged = self.staging.flat()[:size]
            staged = staged.reshape(layers, two, len(part), heads, width, d_kv)
            for i, (row, ids, _, _) in enumerate(part):
                self.cross_rows[:, :, row, :, :len(ids)] = staged[:, :, i, :, :len(ids)]

    def _encoder_run(self, part: list, out: Buffer, width: int) -> None:
        k, model = len(part), self.model
        ids = np.zeros((k, width), np.int64)
        for i, (_, source, _, _) in enumerate(part):
            ids[i, :len(source)] = source
        self.sources_in.write(ids)
        self.source_rows.write([len(j[1]) for j in part])
        encoder, (inp, name) = model.encoder, model.enc_names
        encoder.input(inp, self.sources_in, (k, width))
        encoder.input(SOURCE_LENGTHS, self.source_rows, (k,))
        encoder.output(name, out, (self.kv[0], self.kv[1], k, self.kv[2], width, self.kv[3]))
        encoder.charged = tuple(j[3] for j in part)
        t = time.perf_counter()
        encoder.run()
        share = (time.perf_counter() - t) / k
        for _, _, _, stats in part:
            stats.encoder_s += share

    def leave(self, row: int) -> None:
        """The row holds no request: idle until another joins."""
        self.lengths[row], self.sources[row], self.active[row] = 0, 1, False
        self.buf[SOURCE_LENGTHS].write([1], row)
        self.head.set(None, row)
        self.stats[row] = None
        self._charge()

    # -- a run --------------------------------------------------------------------------------------------------
    def run(self, pending: np.ndarray, guesses: list, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """One decoder + head run over every row: row b appends its pending token and its guesses (point masses,
        q = delta; none for a plain step) and the head judges them with uniforms [capacity, G+1] (G: the most
        guesses of any row): row b's r_1 .. r_Gb in its first columns, its final draw's in the last. Returns
        (accepted [capacity], next token [capacity], the run's seconds); each row's cache then holds its pending
        token and its accepted guesses."""
        c, v = self.capacity, self.vocab
        g = max((len(x) for x in guesses), default=0)
        n = g + 1
        past = int(self.lengths.max(initial=0))
        if past + n > self.max_length:
            raise ValueError(f"a batched run of {n} tokens at length {past} does not fit max_length "
                             f"{self.max_length}")
        ids = np.zeros((c, n), np.int64)
        ids[:, 0] = pending
        counts = np.zeros(c, np.int64)
        q = self.buf[DRAFT_PROBS]
        flat = q.host.reshape(-1)
        flat[self._q_set] = 0.0                  # last run's one-hot q entries, in its layout
        self._q_set = []
        for b, row in enumerate(guesses):
            if row:
                ids[b, 1:1 + len(row)] = row
                counts[b] = len(row)
                # q rows of this run's layout [c, g, v]: one-hot at each guess
                cells = (b * g + np.arange(len(row))) * v + np.asarray(row, np.int64)
                flat[cells] = 1.0
                self._q_set += cells.tolist()
        self.buf[INPUT_IDS].write(ids)
        self.buf[ROW_LENGTHS].write(self.lengths)
        self.buf[GUESS_COUNTS].write(counts)
        self.buf[UNIFORMS].write(uniforms)
        self._sync(q)
        kv = self.kv
        bind = self.decoder
        bind.input(INPUT_IDS, self.buf[INPUT_IDS], (c, n))
        bind.input(PAST_KV, self.cache, (past, kv[0], kv[1], c, kv[2], kv[3]))
        bind_cross(bind, self.cross, (kv[0], kv[1], c, kv[2], self.source_cap, kv[3]))
        for name in (ROW_LENGTHS, SOURCE_LENGTHS, GUESS_COUNTS):
            bind.input(name, self.buf[name], (c,))
        if STEPS in bind.names:
            bind.input(STEPS, self.model.steps, (1,))
        self.chain.bind(bind, n)
        bind.output(LOGITS, self.buf[LOGITS], (c, n, v))
        bind.output(NEW_KV, self.cache, (n, kv[0], kv[1], c, kv[2], kv[3]),
                    past * kv[0] * kv[1] * c * kv[2] * kv[3])
        bind.views(self.head.inputs(q=View(q, (c, g, v)), uniforms=View(self.buf[UNIFORMS], (c, n)), rows=c),
                   self.head.outputs(View(self.buf[PROBS], (c * n, v)), View(self.buf[ACCEPTED], (c,)),
                                     View(self.buf[NEXT_TOKEN], (c,))))
        t = time.perf_counter()
        bind.run(self.shrink)
        elapsed = time.perf_counter() - t
        accepted = self.buf[ACCEPTED].flat()[:c].copy()
        following = self.buf[NEXT_TOKEN].flat()[:c].copy()
        self._keep(past, accepted + 1)
        return accepted, following, elapsed

    def _keep(self, past: int, kept: np.ndarray) -> None:
        """Row b's first kept[b] new slots (at past ..) move to its own length; lengths grow by kept."""
        self._pull(self.cache)                   # unrun: a device cache goes through the staging copy
        cache = self.cache_rows
        for b in np.flatnonzero(self.active):
            start, count = int(self.lengths[b]), int(kept[b])
            if start != past:
                cache[start:start + count, :, :, b] = cache[past:past + count, :, :, b]
            self.lengths[b] = start + count
        self._sync(self.cache)

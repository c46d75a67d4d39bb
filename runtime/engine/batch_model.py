"""One exported T5 decoding many requests at once: B rows of different lengths share every decoder run.

Row b owns cache slots 0 .. length_b - 1 of the one KV buffer [max_length, layers, 2, capacity, heads, d_kv] and
encoder positions 0 .. source_b - 1 of the cross-attention buffer; a run binds `row_lengths` and `source_lengths`
(export format 7, export/decoder.py) so each row attends to its own positions with its own relative-position bias.
A run appends N tokens to every row: their K/V land in slots past .. past+N-1 of all rows (past = the longest row),
and the rows' kept tokens then move down to their own lengths (a copy of a few slots per shorter row). The head
(export/head.py) verifies each row's guesses with that row's parameters and uniforms, so one run returns every
row's accepted count and next token.

Every row of the capacity is bound in every run; a row that holds no request is idle (length 0, one source
position, temperature 0) and costs its share of the run. `resize` moves the live rows into a buffer laid out for
another capacity, so a batch that shrinks stops paying for rows it no longer has.

The session is the model's batch-free one (CachedSeq2Seq.free_session, shared with beam search). On a GPU provider
the moves between slots go through the host staging copy: that path is unrun (docs/guides/batching.md).
"""

from __future__ import annotations

import time

import numpy as np

from ..core.graph_io import GUESS_COUNTS, ROW_INPUTS
from .device import Binder, Buffer
from .model import CachedSeq2Seq
from .positions import ChainPositions

ROW_LENGTHS, SOURCE_LENGTHS = ROW_INPUTS


class BatchModel:
    def __init__(self, model: CachedSeq2Seq, capacity: int, source_cap: int, gamma: int):
        self.model, self.device = model, model.device
        self.vocab, self.max_length = model.vocab, model.max_length
        self.kv = (model.layers, 2, model.heads, model.d_kv)
        self.decoder = Binder(model.free_session(), self.device)
        self.source_cap = source_cap
        self.gamma = gamma                       # most guesses a row may have in one run
        self.chain = ChainPositions(self.device, gamma + 1)
        self.capacity = 0
        self._allocate(capacity)

    # -- buffers ------------------------------------------------------------------------------------------------
    def _allocate(self, capacity: int) -> None:
        c, v, n, dev = capacity, self.vocab, self.gamma + 1, self.device
        layers, two, heads, d_kv = self.kv
        dtype = self.model.cache.dtype
        self.capacity = c
        self.cache = Buffer((self.max_length, layers, two, c, heads, d_kv), dtype, dev)
        self.cross = Buffer((layers, two, c, heads, self.source_cap, d_kv), dtype, dev)
        self.lengths = np.zeros(c, np.int64)          # host copies; the buffers below are what a run binds
        self.active = np.zeros(c, np.bool_)           # rows that hold a request
        self.sources = np.ones(c, np.int64)
        self.buf = {name: Buffer(shape, dtype_, dev) for name, shape, dtype_ in (
            ("input_ids", (c, n), np.int64), (ROW_LENGTHS, (c,), np.int64), (SOURCE_LENGTHS, (c,), np.int64),
            (GUESS_COUNTS, (c,), np.int64), ("draft_probs", (c, n - 1, v), np.float32),
            ("uniforms", (c, n), np.float32), ("temperature", (c,), np.float32), ("top_k", (c,), np.int64),
            ("top_p", (c,), np.float32), ("lenience", (c,), np.float32), ("logit_mask", (1, v), np.float32),
            ("logits", (c, n, v), np.float32), ("probs", (c * n, v), np.float32), ("accepted", (c,), np.int64),
            ("next_token", (c,), np.int64))}
        self.buf["top_p"].write(np.ones(c))
        self.buf["lenience"].write(np.ones(c))
        self.buf[SOURCE_LENGTHS].write(self.sources)
        self._q_set = [[] for _ in range(c)]          # flat indices of the one-hot q entries written per row

    def resize(self, capacity: int, rows: list) -> None:
        """Lay the buffers out for `capacity` rows, keeping rows[i] (old index) as row i; the others are dropped."""
        old_cache, old_cross = self.cache, self.cross
        lengths, sources, active = self.lengths[rows], self.sources[rows], self.active[rows]
        params = {name: self.buf[name].host[rows].copy() for name in ("temperature", "top_k", "top_p", "lenience")}
        past = int(lengths.max(initial=0))
        self._allocate(capacity)
        keep = len(rows)
        self.cache.host[:past, :, :, :keep] = old_cache.host[:past, :, :, rows]
        self.cross.host[:, :, :keep] = old_cross.host[:, :, rows]
        self.lengths[:keep], self.sources[:keep], self.active[:keep] = lengths, sources, active
        self.buf[SOURCE_LENGTHS].write(self.sources)
        for name, values in params.items():
            self.buf[name].host[:keep] = values
        self._sync(self.cache, self.cross, self.buf[SOURCE_LENGTHS], *(self.buf[n] for n in params))

    @staticmethod
    def _sync(*buffers) -> None:
        for buf in buffers:          # unrun: device buffers take the staging copy's content
            if buf.value is not None:
                buf.value.update_inplace(buf.host)

    # -- rows ---------------------------------------------------------------------------------------------------
    def join(self, row: int, ids: np.ndarray, params, stats) -> None:
        """A request takes `row`: its encoder run (batch 1, the model's own session), its cross-attention K/V copied
        into the row, its sampling parameters."""
        model = self.model
        model.encode(ids, stats)
        src = len(ids)
        cross = model.cross.flat()[:model.layers * 2 * model.heads * src * model.d_kv]
        self.cross.host[:, :, row, :, :src] = cross.reshape(model.layers, 2, model.heads, src, model.d_kv)
        self.lengths[row], self.sources[row], self.active[row] = 0, src, True
        self.buf[SOURCE_LENGTHS].write([src], row)
        for name, value in (("temperature", params.temperature), ("top_k", params.top_k), ("top_p", params.top_p),
                            ("lenience", params.lenience)):
            self.buf[name].write([value], row)
        self._sync(self.cross)

    def leave(self, row: int) -> None:
        """The row holds no request: idle until another joins."""
        self.lengths[row], self.sources[row], self.active[row] = 0, 1, False
        self.buf[SOURCE_LENGTHS].write([1], row)
        self.buf["temperature"].write([0.0], row)

    # -- a run --------------------------------------------------------------------------------------------------
    def run(self, pending: np.ndarray, guesses: list, uniforms: np.ndarray, stats) -> tuple[np.ndarray, np.ndarray]:
        """One decoder + head run over every row: row b appends its pending token and its guesses (point masses,
        q = delta; none for a plain step) and the head judges them with uniforms [capacity, G+1] (G: the most
        guesses of any row): row b's r_1 .. r_Gb in its first columns, its final draw's in the last. Returns (accepted [capacity], next token [capacity]); each row's
        cache then holds its pending token and its accepted guesses."""
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
        q = self.buf["draft_probs"]
        flat = q.host.reshape(-1)
        for cells in self._q_set:                 # last run's one-hot q entries, in its layout
            flat[cells] = 0.0
        self._q_set = [[] for _ in range(c)]
        for b, row in enumerate(guesses):
            if row:
                ids[b, 1:1 + len(row)] = row
                counts[b] = len(row)
                # q rows of this run's layout [c, g, v]: one-hot at each guess
                cells = (b * g + np.arange(len(row))) * v + np.asarray(row, np.int64)
                flat[cells] = 1.0
                self._q_set[b] = cells.tolist()
        self.buf["input_ids"].write(ids)
        self.buf[ROW_LENGTHS].write(self.lengths)
        self.buf[GUESS_COUNTS].write(counts)
        self.buf["uniforms"].write(uniforms)
        self._sync(q)
        kv = self.kv
        bind = self.decoder
        bind.input("input_ids", self.buf["input_ids"], (c, n))
        bind.input("past_kv", self.cache, (past, kv[0], kv[1], c, kv[2], kv[3]))
        bind.input("cross_kv", self.cross, (kv[0], kv[1], c, kv[2], self.source_cap, kv[3]))
        for name in (ROW_LENGTHS, SOURCE_LENGTHS, GUESS_COUNTS, "temperature", "top_k", "top_p", "lenience"):
            bind.input(name, self.buf[name], (c,))
        bind.input("draft_probs", q, (c, g, v))
        bind.input("uniforms", self.buf["uniforms"], (c, n))
        bind.input("logit_mask", self.buf["logit_mask"], (0, v))
        if "steps" in bind.names:
            bind.input("steps", self.model.steps, (1,))
        self.chain.bind(bind, n)
        bind.output("logits", self.buf["logits"], (c, n, v))
        bind.output("new_kv", self.cache, (n, kv[0], kv[1], c, kv[2], kv[3]),
                    past * kv[0] * kv[1] * c * kv[2] * kv[3])
        bind.output("probs", self.buf["probs"], (c * n, v))
        bind.output("accepted", self.buf["accepted"], (c,))
        bind.output("next_token", self.buf["next_token"], (c,))
        t = time.perf_counter()
        bind.run()
        stats.target_s += time.perf_counter() - t
        stats.ort_runs += 1
        accepted = self.buf["accepted"].flat().copy()
        following = self.buf["next_token"].flat().copy()
        self._keep(past, accepted + 1)
        return accepted, following

    def _keep(self, past: int, kept: np.ndarray) -> None:
        """Row b's first kept[b] new slots (at past ..) move to its own length; lengths grow by kept."""
        cache = self.cache.host if self.cache.value is None else None
        if cache is None:                        # unrun: a device cache goes through the staging copy
            self.cache.host[...] = self.cache.value.numpy()
            cache = self.cache.host
        for b in np.flatnonzero(self.active):
            start, count = int(self.lengths[b]), int(kept[b])
            if start != past:
                cache[start:start + count, :, :, b] = cache[past:past + count, :, :, b]
            self.lengths[b] = start + count
        self._sync(self.cache)

"""One exported T5 (encoder + cached decoder with its speculative head) and its device buffers: encode once, run N
tokens at a time (each run samples or verifies inside the graph), roll back.

The KV cache is one buffer [max_length, layers, 2, 1, heads, d_kv]. A decoder call binds rows [0, length) as
`past_kv` and rows [length, length+N) as `new_kv`, so the graph writes the new keys and values in place; rolling
back rejected tokens is `rollback(length)`: no copy, no allocation.
"""

from __future__ import annotations

import time

import numpy as np

from ..core.errors import SpecdecError
from ..core.graph_io import (DRAFT_PROBS, INPUT_IDS, LOGITS, NEW_KV, PAST_KV, ROW_INPUTS, STEPS, TREE_INPUTS,
                             bind_cross, shared_cross)
from ..core.stats import Stats
from ..loading.manifest import Manifest
from .device import Binder, Buffer, create_session, release_freed_memory
from .positions import ChainPositions

_NP = {"fp32": np.float32, "fp16": np.float16}
TREE_DEPTH = TREE_INPUTS[0]      # bound by a tree round's views; the chain's otherwise (positions.py)
SOURCE_LENGTHS = ROW_INPUTS[1]   # the encoder's rows' source lengths (and the decoder's)


class CachedSeq2Seq:
    """One model of an export (the target or a draft) on a device: its encoder, its cached decoder with the fused
    sampling head, and the KV cache buffer above. A custom DraftSource gets the draft models this way
    (`decoder.models`); most users never build one."""

    def __init__(self, manifest: Manifest, role: str, provider: str, device: str, rows: int, threads: int = 0,
                 max_length: int | None = None, options: dict | None = None):
        info = manifest.models[role]
        arch = info.arch
        self.role, self.device = role, device
        self.layers, self.heads, self.d_kv = arch["decoder_layers"], arch["heads"], arch["d_kv"]
        self.vocab, self.max_length = manifest.vocab_size, max_length or manifest.max_length
        dtype = _NP[manifest.dtype]
        self.decoder_path, self.provider, self.threads = manifest.path(info.decoder.file), provider, threads
        self.options = options          # the provider's options (device.checked_provider_options)
        # no encoder: a draft that keeps the target's, whose encoder run writes our K/V (share_encoder)
        self.encoder = self.enc_names = self.encoder_path = None
        if info.encoder is not None:
            self.enc_names = (next(iter(info.encoder.inputs)), next(iter(info.encoder.outputs)))
            self.encoder_path = manifest.path(info.encoder.file)
            self.encoder = Binder(create_session(self.encoder_path, provider, threads, spin=False, options=options),
                                  device)
        # an encoder that encodes a batch's padded sources in one run (export/families/t5_encoder.py) takes each
        # row's length; a batch-1 run binds its one length here (the binding outlives a batched run's)
        self._lengths_input = self.encoder is not None and SOURCE_LENGTHS in self.encoder.names
        self.source_length = Buffer((1,), np.int64, device, host_only=True)
        self._sharers = []       # drafts whose cross K/V our encoder run also writes
        self.row = self.layers * 2 * self.heads * self.d_kv             # one cache position, batch 1
        self._open_decoder(manifest, info, dtype)
        # an encoder that reads a fixed window of samples gives a fixed number of frames
        window = manifest.encoder_window
        self.frames = window[0] if window else None
        positions = max(self.max_length, self.frames or 0)
        self.cross = Buffer((self.layers * 2 * self.heads * positions * self.d_kv,), dtype, device)
        self.logits = Buffer((rows, self.vocab), np.float32, device)   # rows = most tokens per decoder call
        self.source = Buffer((window[1],), np.float32, device, host_only=True) if window else \
            Buffer((self.max_length,), np.int64, device, host_only=True)
        self.length = 0          # decoder positions whose K/V are in the cache
        self.src_len = 0
        # a draft with its proposal loop: `steps` > 1 runs a whole proposal in one run (export/loop.py). Not with
        # weight-only int8 weights: ONNX Runtime prepacks MatMulNBits weights in the plain branch but not inside the
        # Loop, where each step then dequantizes them (measured on the bundled draft: 1.17 ms per guess in the loop,
        # 0.28 ms as single steps), so such a draft proposes one run per guess
        self.steps_input = STEPS in self.decoder.names
        self.loops = self.steps_input and info.weights != "int8-wo"
        self.steps = Buffer((1,), np.int64, device, host_only=True)
        self._steps = 0
        self.chain = ChainPositions(device, rows)     # the tree inputs of a target's plain (chain) runs
        self.trees = TREE_DEPTH in self.decoder.names
        self._free = None        # free_session()

    def _open_decoder(self, manifest: Manifest, info, dtype) -> None:
        """The decoder's session (`self.decoder`, a Binder) and its KV cache buffer (`self.cache`)."""
        self.decoder = Binder(create_session(manifest.path(info.decoder.file), self.provider, self.threads,
                                             options=self.options), self.device)
        self.cache = Buffer((self.max_length, self.layers, 2, 1, self.heads, self.d_kv), dtype, self.device)

    def free_session(self):
        """The decoder graph in a session without the batch-1 shape override, opened on the first beam search or
        batched request. From then on it is the model's only decoder session: batch-1 runs move to it and the
        batch-1 session is dropped, so the weights are held once. Batch-1 requests run there as fast as on the
        batch-1 session (measured on the bundled pair): the fixed shape's folding no longer shows. An encoder that
        takes its rows' source lengths goes batch-free with it (batch_model.py encodes a batch's sources in shared
        runs), so the encoder's weights are held once too."""
        if self._free is None:
            self._free = create_session(self.decoder_path, self.provider, self.threads, batch=None,
                                        options=self.options)
            self.decoder.move(self._free)
            if self.batches_sources:
                self.encoder.move(create_session(self.encoder_path, self.provider, self.threads, spin=False,
                                                 batch=None, options=self.options))
            release_freed_memory()
        return self._free

    @property
    def batches_sources(self) -> bool:
        """Our encoder encodes a batch's padded sources in one run: it takes their lengths and writes no draft's
        cross K/V besides ours."""
        return self._lengths_input and not self._sharers

    def encode(self, ids: np.ndarray, stats: Stats) -> None:
        """Run the encoder once per request; its cross-attention K/V stay bound for every decoder call. `ids`: the
        source's token ids, or the samples of an encoder that reads a window (float32, at most its size): its K/V cover
        the encoder's fixed number of frames. Every run of the model from here on (this encoder run, the decoder runs)
        counts in `stats.ort_runs` (device.Binder.run)."""
        self.src_len = self.frames or len(ids)
        self.charge(stats)
        if self.encoder is not None:       # else this request's target encoder run wrote our K/V
            self.source.write(ids)
            inp, out = self.enc_names
            self.encoder.input(inp, self.source, (1, len(ids)))
            if self._lengths_input:
                self.source_length.write([len(ids)])
                self.encoder.input(SOURCE_LENGTHS, self.source_length, (1,))
            self.encoder.output(out, self.cross, self.cross_shape())
            for draft in self._sharers:
                self.encoder.output(shared_cross(draft.role), draft.cross, draft.cross_shape(self.src_len))
            t = time.perf_counter()
            self.encoder.run()
            stats.encoder_s += time.perf_counter() - t
        bind_cross(self.decoder, self.cross, self.cross_shape())
        self.length = 0

    def charge(self, stats: Stats) -> None:
        """The model's runs (encoder and decoder) count in `stats.ort_runs` from now on: a request's, from its
        encode on."""
        self.decoder.charged = (stats,)
        if self.encoder is not None:
            self.encoder.charged = (stats,)

    def cross_shape(self, src_len: int | None = None) -> tuple:
        """The shape of one row's cross-attention K/V: (layers, 2 for K and V, 1, heads, source positions, d_kv), for
        `src_len` source positions (default: the export's own)."""
        return (self.layers, 2, 1, self.heads, self.src_len if src_len is None else src_len, self.d_kv)

    def share_encoder(self, draft: "CachedSeq2Seq") -> None:
        """Our encoder run also writes `draft`'s cross K/V (a draft that keeps this target's encoder): the
        draft runs no encoder. The target encodes every request before its draft is used."""
        self._sharers.append(draft)

    def run(self, inputs: dict, outputs: dict, steps: int = 1) -> float:
        """One decoder + speculative-head run: append the `input_ids` view's N tokens to the sequence, with the
        head's views (workspace.py) bound as given. The logits land in rows 0..N-1 of `self.logits`. Seconds.
        `steps` = k > 1 (a draft with its proposal loop): the whole proposal in one run, k tokens (after verifying the
        last G input tokens against `draft_probs` when G > 0: a chain level); the cache gains the N - G tokens before
        the guesses and the first k-1 of the k (rejected guesses' keys and values are dropped in the graph), and no
        logits are written. The run counts in the stats of the request that encoded the model (`charge`)."""
        count = int(inputs[INPUT_IDS].shape[1])
        guesses = int(inputs[DRAFT_PROBS].shape[0]) if steps > 1 else 0
        rows = count - guesses + steps - 1            # a proposal keeps what it kept and its draws but the last
        if self.length + rows > self.max_length or (steps > 1 and not self.loops):
            raise SpecdecError(f"internal error: a {self.role} run of {count} tokens and {steps} steps at length "
                               f"{self.length} does not fit (max_length {self.max_length}, proposal loop "
                               f"{self.loops}); nothing was run",
                               "this is a specdec bug, please report it; the decoder stays usable")
        kv = (self.layers, 2, 1, self.heads, self.d_kv)
        binder = self.decoder
        for name, view in inputs.items():
            binder.input(name, *view)
        for name, view in outputs.items():
            binder.output(name, *view)
        if self.steps_input:
            if steps != self._steps:
                self.steps.write([steps])
                self._steps = steps
            binder.input(STEPS, self.steps, (1,))
        if self.trees and TREE_DEPTH not in inputs:
            self.chain.bind(binder, count)
        binder.input(PAST_KV, self.cache, (self.length, *kv))
        binder.output(LOGITS, self.logits, (1, count if steps == 1 else 0, self.vocab))
        binder.output(NEW_KV, self.cache, (rows, *kv), self.length * self.row)
        t = time.perf_counter()
        binder.run()
        elapsed = time.perf_counter() - t
        self.length += rows
        return elapsed

    def keep(self, start: int, slots: list) -> None:
        """After a tree run: the cache rows of the accepted path's nodes (at start + slot) move to start + 1, ...,
        in path order (slots ascend and slot i >= i, so no row is overwritten before it is read)."""
        for i, slot in enumerate(slots, 1):
            if slot != i:
                self.cache.copy_within((start + slot) * self.row, (start + i) * self.row, self.row)

    def rollback(self, length: int) -> None:
        """Forget every position from `length` on (rejected draft tokens)."""
        self.length = min(self.length, length)

"""One model of an export run through its capturable graphs (specdec-export --graph-capture, export/capture.py):
every decoder run binds the same buffers at the same addresses, so the CUDA provider records each width's run once
as a CUDA graph and replays it after (SpeculativeDecoder.load(..., graph_capture=True)).

What a run binds, and where:
    tokens         the workspace's whole token buffer; the run's tokens are those at position + 0 .. N-1
    position       [1] the cache length, written before each run (the only per-run write: one host-to-device copy)
    offsets        [N] a view of one buffer holding 0 .. rows-1: N, the run's width, is its shape
    past_*/present_*   each layer's K and V in one cache buffer [layers, 2, 1, heads, C, d_kv], bound whole as input
                   and output: the graph writes the new tokens' K/V in place at slots position ..
    cross_*        each layer's cross K/V in the cross buffer [layers, 2, 1, heads, S, d_kv], written once per request
                   by the encoder and the cross_pad graph
    logits         rows 0 .. N-1 of the logits buffer
On the CUDA provider a run of width N passes gpu_graph_id N: onnxruntime runs a width's first run uncaptured
(its allocations), captures the next and replays it from then on, on one thread (OneThread: onnxruntime keeps a
thread's graphs apart from another's). The speculative head then runs eagerly over the
logits (capture_head: its own session, the same nodes as the eager graph's fused head), bound to the workspace's
views as the fused head is. On the CPU provider the same graphs run without capture.

Not here: the proposal loop (a draft proposes one run per guess), token trees (a lookup verifies one candidate a
round), and beam search and batches, which run the eager graphs (load without graph_capture for them).
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import onnxruntime as ort

from ..core.errors import SpecdecError
from ..core.graph_io import (CAPTURE_INPUTS, CROSS_PAD_INPUTS, CROSS_PAD_OUTPUTS, INPUT_IDS, LOGITS,
                             capture_cache_names)
from ..core.stats import Stats
from ..loading.manifest import Manifest
from .device import Binder, Buffer, create_session
from .model import CachedSeq2Seq

TOKENS, POSITION, OFFSETS, SOURCE_LENGTH = CAPTURE_INPUTS
(PAD_IN,), (PAD_OUT,) = CROSS_PAD_INPUTS, CROSS_PAD_OUTPUTS
NO_EAGER = ("beam search and batched requests run the export's eager graphs, which a decoder loaded with "
            "graph_capture=True does not open")
NO_EAGER_FIX = "load the export without graph_capture for beams and batches"


class OneThread:
    """Runs calls on one thread of its own, for whichever thread asks. onnxruntime's CUDA provider keeps captured
    graphs per thread: a run from another thread would capture every width again (and hold its memory twice), so
    every captured run of a model goes through the thread it was captured on. A daemon thread, started on first use;
    an exception in the call is raised in the caller."""

    def __init__(self):
        self._jobs = None
        self.ident = None

    def call(self, fn, *args):
        if threading.get_ident() == self.ident:
            return fn(*args)
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            worker = threading.Thread(target=self._serve, name="specdec-device", daemon=True)
            worker.start()
            self.ident = worker.ident
        done, box = threading.Event(), []
        self._jobs.put((fn, args, done, box))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _serve(self) -> None:
        while True:
            fn, args, done, box = self._jobs.get()
            try:
                box.append(fn(*args))
            except BaseException as err:       # handed to the caller, which raises it
                box.append(err)
            done.set()


class CapturedSeq2Seq(CachedSeq2Seq):
    """CachedSeq2Seq (model.py) over the capturable graphs: the same interface to the decoding loop (encode, run,
    rollback), a run being the captured step and then the head."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # bound once, now that the base class made the cross and logits buffers: the cross_* views, and offsets,
        # whose first N elements (0 .. N-1) a run of width N binds
        for name, offset in self._cross_views:
            self.decoder.input(name, self.cross, (1, self.heads, self.source_capacity, self.d_kv), offset)
        self.offsets = Buffer((self.logits.shape[0],), np.int64, self.device, host_only=True)
        self.offsets.write(np.arange(self.logits.shape[0]))

    def _open_decoder(self, manifest: Manifest, info, dtype) -> None:
        capture = manifest.graph_capture
        if info.capture is None or capture is None:
            raise SpecdecError(f"export '{manifest.root}' has no capturable graphs",
                               "re-export it with specdec-export ... --graph-capture, or load it without graph_capture")
        self.capacity, self.source_capacity = int(capture["cache_capacity"]), int(capture["source_capacity"])
        captured = dict(self.options or {})
        if self.provider == "cuda":
            captured["enable_cuda_graph"] = "1"
        elif self.provider != "cpu":
            raise SpecdecError(f"graph_capture runs on provider cuda (or cpu, uncaptured), not {self.provider}",
                               "load with provider='cuda', or without graph_capture")
        self.decoder = Binder(create_session(manifest.path(info.capture["capture_decoder"].file), self.provider,
                                             self.threads, batch=None, options=captured), self.device)
        self.head = Binder(create_session(manifest.path(info.capture["capture_head"].file), self.provider,
                                          self.threads, options=self.options), self.device)
        self.pad = Binder(create_session(manifest.path(manifest.cross_pad.file), self.provider, self.threads,
                                         spin=False, batch=None, options=self.options), self.device)
        shape = (self.layers, 2, 1, self.heads, self.capacity, self.d_kv)
        self.cache = Buffer(shape, dtype, self.device)
        self.raw_cross = Buffer((self.layers * 2 * self.heads * self.source_capacity * self.d_kv,), dtype,
                                self.device)
        self.position = Buffer((1,), np.int64, self.device, host_only=True)
        self.source_length = Buffer((1,), np.int64, self.device, host_only=True)
        self._options = {}           # width -> RunOptions (gpu_graph_id), made on first use
        # where a run's time goes: the (captured) step and the eager head, summed since load (benchmarks read it)
        self.split = {"runs": 0, "step_s": 0.0, "head_s": 0.0}
        # captured graphs live per thread (OneThread): on CUDA every captured run goes through one thread
        self.device_thread = OneThread() if self.provider == "cuda" else None
        past, present, cross = capture_cache_names(self.layers)
        block, src_block = self.heads * self.capacity * self.d_kv, self.heads * self.source_capacity * self.d_kv
        for j, (p, q) in enumerate(zip(past, present)):
            self.decoder.input(p, self.cache, (1, self.heads, self.capacity, self.d_kv), j * block)
            self.decoder.output(q, self.cache, (1, self.heads, self.capacity, self.d_kv), j * block)
        self._cross_views = [(name, j * src_block) for j, name in enumerate(cross)]
        self.decoder.input(POSITION, self.position, (1,))
        self.decoder.input(SOURCE_LENGTH, self.source_length, (1,))

    def free_session(self):
        raise SpecdecError(NO_EAGER, NO_EAGER_FIX)

    def charge(self, stats: Stats) -> None:
        super().charge(stats)
        self.head.charged = self.pad.charged = (stats,)

    def encode(self, ids: np.ndarray, stats: Stats) -> None:
        """The encoder's K/V for `ids`, padded to the graphs' S positions; the request's length in source_length."""
        if len(ids) > self.source_capacity:
            raise SpecdecError(f"internal error: a source of {len(ids)} tokens does not fit the capturable graphs' "
                               f"{self.source_capacity} positions", "this is a specdec bug, please report it")
        self.src_len = len(ids)
        self.charge(stats)
        self.source.write(ids)
        inp, out = self.enc_names
        self.encoder.input(inp, self.source, (1, len(ids)))
        self.encoder.output(out, self.raw_cross, self.cross_shape())
        self.pad.input(PAD_IN, self.raw_cross, self.cross_shape())
        self.pad.output(PAD_OUT, self.cross, self.cross_shape(self.source_capacity))
        t = time.perf_counter()
        self.encoder.run()
        self.pad.run()
        stats.encoder_s += time.perf_counter() - t
        self.source_length.write([len(ids)])
        self.length = 0

    def _run_options(self, width: int):
        """The CUDA provider's graph for runs of `width` tokens (None on the CPU: nothing is captured)."""
        if self.provider != "cuda":
            return None
        if width not in self._options:
            options = ort.RunOptions()
            options.add_run_config_entry("gpu_graph_id", str(width))
            self._options[width] = options
        return self._options[width]

    def run(self, inputs: dict, outputs: dict, steps: int = 1) -> float:
        """One captured step over the `input_ids` view's N tokens (which start at the cache length), then the head
        over its logits with the views given, as CachedSeq2Seq.run. Seconds."""
        ids = inputs[INPUT_IDS]
        count = int(ids.shape[1])
        if steps != 1 or ids.offset != self.length or self.length + count > self.capacity \
                or count > self.logits.shape[0]:
            raise SpecdecError(f"internal error: a captured {self.role} run of {count} tokens from slot {ids.offset} "
                               f"at length {self.length} ({steps} steps) does not fit (capacity {self.capacity}); "
                               "nothing was run", "this is a specdec bug, please report it; the decoder stays usable")
        d = self.decoder
        d.input(TOKENS, ids.buffer, (ids.buffer.size,))
        d.input(OFFSETS, self.offsets, (count,))
        d.output(LOGITS, self.logits, (1, count, self.vocab))
        self.position.write([self.length])
        self.head.views(inputs, outputs)
        self.head.input(LOGITS, self.logits, (1, count, self.vocab))
        t = time.perf_counter()
        if self.device_thread is None:
            d.run(self._run_options(count))
        else:
            self.device_thread.call(d.run, self._run_options(count))
        stepped = time.perf_counter()
        self.head.run()
        elapsed = time.perf_counter() - t
        self.split["runs"] += 1
        self.split["step_s"] += stepped - t
        self.split["head_s"] += t + elapsed - stepped
        self.length += count
        return elapsed

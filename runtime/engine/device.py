"""Execution providers, sessions and device buffers: the only module that knows where memory lives.

Every tensor the graphs exchange lives in a `Buffer` allocated once on the provider's device. Graph inputs and
outputs are bound as (pointer, shape) views into those buffers through ONNX Runtime IO binding, so a run reads
and writes device memory in place: no per-step allocation, no host round trip for logits or distributions.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import onnxruntime as ort

from ..core.errors import RunFailed, SpecdecError, first_line
from ..core.options import DECLARED

PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}
# what every command's --provider takes, and says of it ("auto": resolve_provider's choice)
PROVIDER_CHOICES = ("auto", *PROVIDERS)
PROVIDER_HELP = DECLARED["provider"].doc       # what every command line's --provider says (the load option's line)
# the order "auto" tries: TensorRT is left out (no run of it has been recorded) and is used only when named
AUTO_ORDER = ("cuda", "cpu")


def _first_provider(provider: str) -> str:
    """The name of the provider's first ONNX Runtime provider."""
    return PROVIDERS[provider][0]


def resolve_provider(provider: str, available=None) -> str:
    """'auto' -> cuda if this onnxruntime has it, else cpu (TensorRT only when named: no run of it has been
    recorded); an unavailable explicit choice is an error. `available`: onnxruntime's provider names (default: this
    onnxruntime's get_available_providers())."""
    available = set(ort.get_available_providers() if available is None else available)
    if provider == "auto":
        for name in AUTO_ORDER:
            if _first_provider(name) in available:
                return name
    if provider not in PROVIDERS:
        raise SpecdecError(f"unknown provider '{provider}'", "use cpu, cuda, tensorrt or auto")
    if _first_provider(provider) not in available:
        raise SpecdecError(f"provider '{provider}' is not available in this onnxruntime "
                           f"({', '.join(sorted(available))})",
                           "install onnxruntime-gpu for cuda/tensorrt, or use provider='cpu'")
    return provider


def device_of(provider: str) -> str:
    return "cpu" if provider == "cpu" else "cuda"


def release_freed_memory() -> None:
    """Hand the C heap's freed pages back to the system (glibc's malloc_trim; nothing elsewhere). Opening a session
    reads the whole graph, copies its weights and frees the reading buffers, but glibc keeps most of what was freed
    (a t5-large-sized export stayed at 1.46x its graphs resident after loading, 1.07x once trimmed: the figures are
    in benchmarks/results). Called after sessions are opened."""
    global _TRIM
    if _TRIM is None:
        import ctypes

        try:        # the symbols the process already has: glibc's malloc_trim on Linux; absent on musl and macOS
            _TRIM = getattr(ctypes.CDLL(None), "malloc_trim", False)
        except (OSError, TypeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None


def arena_shrinking(device: str):
    """onnxruntime RunOptions under which a run hands the CPU arena's chunks it no longer uses back to the C heap
    as it ends (None on a GPU: unrun there). A beam search's runs take more working memory than a batch-1 step (its
    rows, a speculative round's W x (gamma + 1) of them), which the arena would otherwise keep for the process's
    life; release_freed_memory() then returns it to the system."""
    if device != "cpu":
        return None
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _release_pages(array: np.ndarray) -> None:
    """Zero a contiguous array, handing its whole pages back to the system (madvise MADV_DONTNEED: they read as
    zeros and come back as they are written; the allocation stays) and writing zeros in the parts of pages at its
    ends. Without madvise (not Linux) the array is only zeroed."""
    global _MADVISE
    if _MADVISE is None:
        import ctypes
        import sys

        _MADVISE = False
        if sys.platform.startswith("linux"):
            try:
                _MADVISE = ctypes.CDLL(None, use_errno=True).madvise
                _MADVISE.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            except (OSError, AttributeError):
                _MADVISE = False
    raw = array.reshape(-1).view(np.uint8)
    address = array.ctypes.data
    head = min(-address % _PAGE, raw.size)              # bytes before the first whole page
    whole = (raw.size - head) // _PAGE * _PAGE
    if not _MADVISE or not whole or _MADVISE(address + head, whole, _DONTNEED) != 0:
        raw[...] = 0
        return
    raw[:head] = 0
    raw[head + whole:] = 0


_MADVISE = None
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_DONTNEED = 4           # MADV_DONTNEED (Linux)


THREADS_VARIABLE = "SPECDEC_THREADS"


def default_threads() -> int:
    """The intra-op threads of a session whose caller passes 0: SPECDEC_THREADS when set, else 0 (onnxruntime's
    choice, one per physical core, whose threads spin-wait between runs). Several decoders on one machine (processes,
    serving instances, test workers) each take every core that way; measured on 2 cores, two processes decoding the
    tiny distribution-test pair at once: 9.9 ms a request each at onnxruntime's choice, 2.8 ms with one thread."""
    raw = os.environ.get(THREADS_VARIABLE, "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise SpecdecError(f"{THREADS_VARIABLE}={raw!r} is not a number of threads",
                           f"set {THREADS_VARIABLE} to a whole number (0: onnxruntime's choice), or unset it")
    return int(raw)


def checked_provider_options(options) -> dict:
    """`provider_options` of a load (None or a dict of option names to strings, numbers or booleans; the load option
    `provider_options` refuses anything else with its one line) as onnxruntime takes them, given to the provider's
    first onnxruntime provider (e.g. {"enable_cuda_graph": "1"} for cuda)."""
    DECLARED["provider_options"].refuse(options)
    return {k: str(int(v)) if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}


def session_providers(provider: str, path, options: dict | None = None) -> list:
    """onnxruntime's provider list for a session of the graph at `path` on `provider`, with `options`
    (checked_provider_options) merged into its first provider's."""
    providers = list(PROVIDERS[provider])
    if provider == "tensorrt":
        # TensorRT builds its engines from the same ONNX graphs; keep them next to the export so the build
        # (minutes for a large model) happens once per machine
        from pathlib import Path

        cache = Path(path).resolve().parent.parent / "engines"
        providers = [("TensorrtExecutionProvider", {"trt_engine_cache_enable": True,
                                                    "trt_engine_cache_path": str(cache),
                                                    "trt_timing_cache_enable": True}), *providers[1:]]
    if options:
        first = providers[0] if isinstance(providers[0], tuple) else (providers[0], {})
        providers = [(first[0], {**first[1], **options}), *providers[1:]]
    return providers


def create_session(path, provider: str, threads: int = 0, spin: bool = True,
                   batch: int | None = 1, options: dict | None = None) -> ort.InferenceSession:
    """A session of the graph at `path` on `provider`; `options`: checked_provider_options, for its first
    onnxruntime provider. `spin=False`: a graph that runs once per request (an encoder): its pool threads do not
    spin-wait after a run and it has no CPU arena."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or default_threads()
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4         # fatal only: a failed run is our one-line error, not ONNX Runtime's log lines
    # the speculative loop binds batch 1 only: fixing the axis lets the optimizer fold shape arithmetic (measured
    # 1.02-1.13x on the bundled pair's decoder runs when it was added); beam search and batches open the
    # batch-free session (batch=None), which then replaces it (model.py)
    if batch is not None:
        opts.add_free_dimension_override_by_name("batch", batch)
    if not spin:
        # ONNX Runtime's pool threads spin-wait after a run for the next one. An encoder runs once per request, so
        # its spinning threads only take cores from the decoder runs that follow (measured on the bundled pair with
        # 2 cores: target steps 2.5-2.9 ms with a spinning encoder pool, 1.9-2.1 ms without)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # nor does its arena pay: it would keep the working memory of the longest source (or batch of sources) seen
        # for the process's life, where a run without it hands that memory back to the C heap as it ends (measured
        # on a t5-large-sized export after 20 mixed requests: 0.09 GiB less resident)
        opts.enable_cpu_mem_arena = False
    providers = session_providers(provider, path, options)
    try:
        return ort.InferenceSession(str(path), opts, providers=providers)
    except Exception as err:  # onnxruntime raises its own exception types
        raise SpecdecError(f"onnxruntime cannot load '{path}': {ort_reason(err)}",
                           "re-run specdec-export; if it persists, check the onnxruntime version") from None


def ort_reason(err: BaseException, limit: int = 200) -> str:
    """What onnxruntime said went wrong, in one line and without what hides it: its error-code prefix, the path of a
    model it could not load (the caller names it), the nodes a failing node sits inside (its If and Loop) and the C++
    source location and signature. "[ONNXRuntimeError] : 1 : FAIL : Load model from P failed:/onnxruntime_src/...
    /model.cc:256 onnxruntime::Model::Model(...) Unsupported model IR version: 14, ..." gives "Unsupported model IR
    version: 14, ..."; a run error nested in If and Loop nodes gives "Gather node 'loop//Gather_3': indices element
    out of data bounds, ..."."""
    text = first_line(err, 10_000)
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"^(?:Error in execution: |Load model from .*? failed: ?)", "", text)
    innermost = list(re.finditer(r"running (\w+) node\. Name:'([^']*)' Status Message: ", text))
    node = ""
    if innermost:
        last = innermost[-1]
        node, text = f"{last.group(1)} node '{last.group(2)}': ", text[last.end():]
    text = re.sub(r"^\S+\.(?:cc|cpp|h):\d+ \S*?\(.*?\) ", "", text)
    return (node + text)[:limit].rstrip(": ") or first_line(err, limit)


class Buffer:
    """A fixed-size tensor on the device, addressed by element offset. On the CPU it is a NumPy array.
    `host_only`: no graph ever writes it (the host's guesses, uniforms, masks, parameters): a write on a GPU then
    copies the staging copy to the device without reading the device first."""

    def __init__(self, shape, dtype, device: str, host_only: bool = False):
        self.shape, self.dtype, self.device = tuple(shape), np.dtype(dtype), device
        self.host_only = host_only
        if device == "cpu":
            self.host = np.zeros(self.shape, self.dtype)
            self.value = None
            self.base = self.host.ctypes.data
        else:
            self.host = np.zeros(self.shape, self.dtype)        # staging copy for small writes and reads
            self.value = ort.OrtValue.ortvalue_from_shape_and_type(self.shape, self.dtype, device, 0)
            self.base = self.value.data_ptr()
        self.itemsize = self.dtype.itemsize
        self.size = int(np.prod(self.shape))

    def release(self) -> None:
        """Drop the contents and hand the memory's pages back to the system: the buffer keeps its address and size
        and reads as zeros, and pages return as it is written again (on the CPU; a GPU buffer stays as it is). For
        buffers that hold nothing between requests (beam search's caches)."""
        if self.value is None:
            _release_pages(self.host)

    def ptr(self, offset: int = 0) -> int:
        return self.base + offset * self.itemsize

    def flat(self) -> np.ndarray:
        """The contents as a flat host array (a view on the CPU, a copy from a GPU)."""
        if self.value is None:
            return self.host.reshape(-1)
        return self.value.numpy().reshape(-1)

    def write(self, values, offset: int = 0) -> None:
        values = np.asarray(values, dtype=self.dtype).reshape(-1)
        self._patch(slice(offset, offset + values.size), values)

    def copy_within(self, source: int, dest: int, count: int) -> None:
        """Elements source .. source+count-1 copied to dest .. (the ranges may overlap only if dest <= source)."""
        if self.value is None:
            flat = self.host.reshape(-1)
            flat[dest:dest + count] = flat[source:source + count]
            return
        if not self.host_only:
            self.host[...] = self.value.numpy()      # unrun: device memory goes through the staging copy
        flat = self.host.reshape(-1)
        flat[dest:dest + count] = flat[source:source + count]
        self.value.update_inplace(self.host)

    def scatter(self, indices, values) -> None:
        """Set single elements (flat indices; a later index wins over an earlier equal one)."""
        self._patch(np.asarray(indices, dtype=np.int64), np.asarray(values, dtype=self.dtype))

    def _patch(self, index, values: np.ndarray) -> None:
        if self.value is not None and not self.host_only:   # graphs write device memory: refresh the staging copy
            self.host[...] = self.value.numpy()
        self.host.reshape(-1)[index] = values
        if self.value is not None:
            self.value.update_inplace(self.host)


class Binder:
    """IO binding of one session to buffer views; names come from the manifest.

    A binding stays in place between runs, so a view identical to the one already bound (same buffer, offset and
    shape: the sampling parameters, most of a draft step's head) is not bound again; the bounds check runs
    whenever a view changes.

    `run` is the one place a graph runs, and each run counts itself: `ort_runs` + 1 in each of `charged`, the stats
    of the requests the binder's runs are for now (one request's, set when its model encodes; every live row's for
    a batch)."""

    def __init__(self, session: ort.InferenceSession, device: str):
        self.device = device
        self.charged: tuple = ()        # core.stats.Stats (or anything with ort_runs) charged for each run
        self.bound: dict = {}           # name -> (pointer, shape) bound now
        self._kinds: dict = {}          # name -> ("input" or "output", dtype) of what is bound now
        self._open(session)

    def move(self, session: ort.InferenceSession) -> None:
        """Run another session of the same graph from now on, with every view bound now bound there too (the
        model's batch-1 session gives way to its batch-free one: one copy of the weights, CachedSeq2Seq)."""
        views = [(name, *self._kinds[name], *key) for name, key in self.bound.items()]
        self.bound = {}
        self._open(session)
        for name, kind, dtype, ptr, shape in views:
            self._raw_bind(kind, name, dtype, ptr, shape)
            self.bound[name] = (ptr, shape)

    def _open(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.binding = session.io_binding()
        # inputs with a default (the per-row row_lengths, source_lengths, guess_counts) are bound like the others
        self.names = {i.name for i in (*session.get_inputs(), *session.get_overridable_initializers())}
        self.outputs = {o.name for o in session.get_outputs()}
        # The public bind_* methods rebuild an OrtDevice on every call, which is most of the host time of a
        # small model's step; bind through the pybind objects with one prebuilt device when this onnxruntime has it.
        try:
            self._raw = self.binding._iobinding
            self._dev = ort.OrtDevice.make(self.device, 0)._get_c_device()
            self._run = lambda options=None: session._sess.run_with_iobinding(self._raw, options)
        except AttributeError:
            self._raw = None
            self._run = lambda options=None: session.run_with_iobinding(self.binding, options)

    def _view(self, name: str, buf: Buffer, shape, offset: int):
        """(pointer, shape) of a view, refused unless it lies inside its buffer: a view past the end would let the
        graph read or write memory that is not ours (a crash, or silent corruption)."""
        shape = tuple(int(d) for d in shape)
        count = math.prod(shape)
        if offset < 0 or min(shape, default=0) < 0 or offset + count > buf.size:
            raise SpecdecError(f"internal error: '{name}' view of {count} elements at offset {offset} does not fit "
                               f"its buffer of {buf.size} (shape {shape}); nothing was run",
                               "this is a specdec bug, please report it; the decoder stays usable")
        return buf.ptr(offset), shape

    def input(self, name: str, buf: Buffer, shape, offset: int = 0) -> None:
        if name in self.names:       # graphs may drop inputs they do not use
            self._bind("input", name, buf, shape, offset)

    def output(self, name: str, buf: Buffer, shape, offset: int = 0) -> None:
        self._bind("output", name, buf, shape, offset)

    def _bind(self, kind: str, name: str, buf: Buffer, shape, offset: int) -> None:
        key = (buf.ptr(offset), shape)
        if self.bound.get(name) == key:
            return
        ptr, shape = self._view(name, buf, shape, offset)
        self._raw_bind(kind, name, buf.dtype, ptr, shape)
        self.bound[name], self._kinds[name] = key, (kind, buf.dtype)

    def _raw_bind(self, kind: str, name: str, dtype, ptr: int, shape) -> None:
        if self._raw is not None:
            getattr(self._raw, "bind_" + kind)(name, self._dev, dtype, shape, ptr)
        else:
            getattr(self.binding, "bind_" + kind)(name, self.device, 0, dtype, list(shape), ptr)

    def run(self, options=None) -> None:
        """One run of the session on what is bound now, counted in the charged stats once it succeeded. `options`:
        onnxruntime RunOptions (a captured graph's gpu_graph_id), or None."""
        try:
            self._run(options)
        except Exception as err:  # onnxruntime's own exception types: a graph that loads but cannot run
            raise RunFailed(f"onnxruntime failed running a graph of this export: {ort_reason(err)}",
                            "the export may be corrupt: re-export it, or compare its files with a trusted "
                            "manifest") from None
        for stats in self.charged:
            stats.ort_runs += 1

    def views(self, inputs: dict, outputs: dict) -> None:
        """Bind name -> (buffer, shape[, offset]) views: graph inputs, then outputs."""
        for name, view in inputs.items():
            self.input(name, *view)
        for name, view in outputs.items():
            self.output(name, *view)

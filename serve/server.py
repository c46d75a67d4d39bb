"""The PyTriton binding: a real Triton Inference Server (the tritonserver binary PyTriton ships) with two models on
one export, both fed to one SpeculativeDecoder and its batcher (schema.Handler):

    specdec          one request -> one response (schema.outputs). Triton's dynamic batching: requests that arrive
                     together (within --queue-delay-us) reach the decoder as one call, and every input and output
                     has a batch dimension in front ([1, 1] for one prompt). At most --max-queue wait in Triton's
                     queue; past it Triton refuses a request at once.
    specdec_stream   decoupled: one response per accepted piece as soon as it exists, then Triton's final flag.
                     Every request in flight joins the same batch.

Rows join and leave the running batch between rounds (continuous batching); requests a batch cannot run (a draft
model, beams, a request of an export whose family a batch does not run) run alone between batches. The inputs and
outputs are the export's family's (schema.serving_of: `prompt` and schema.OUTPUTS for a text export; another family's
inputs, and its own outputs beside those). A request that fails (bad parameters, an unknown draft, a bad input) is
an error response for that request only (inside a batch of good ones: its `error` output); the server keeps
serving."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sysconfig
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError, first_line
from specdec.runtime.core.options import LoadOptions
from specdec.runtime.core.params import checked_max_batch

from . import schema


def require_pytriton():
    """Import pytriton, or a one-line SpecdecError saying how to install it."""
    try:
        import pytriton.triton  # noqa: F401
    except ImportError as err:
        raise SpecdecError(f"specdec-serve needs PyTriton, which is not installed ({err})",
                           'pip install -e ".[serve]"') from None


def _libpython_on_path() -> None:
    """PyTriton's tritonserver loads a Python backend stub that links against libpython; Python builds that keep it
    outside the system's library path (pyenv, conda) need its directory in LD_LIBRARY_PATH before the server
    starts. Set it here so users need not."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir or not Path(libdir).is_dir():
        return
    parts = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if libdir not in parts:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([*parts, libdir])


class RequestError(Exception):
    """A failed request's error as its client reads it. PyTriton answers an inference callable's exception with the
    text traceback.format_exception makes of it; this one makes the line alone, as the command line prints it:
    `error: <problem>; <fix>.` Its type reads as `error` (a name of the builtins module, which the traceback module
    does not prefix), its __traceback__ as None, and it is raised from None, so no frame and no earlier exception is
    shown. PyTriton's log line for it still has the frames from this module up."""

    __module__ = "builtins"
    __qualname__ = "error"

    @property
    def __traceback__(self):
        return None

    @__traceback__.setter
    def __traceback__(self, value):
        pass


def _getter(request):
    data = request.data
    return lambda name: data.get(name)


def _generate_fn(handler: schema.Handler):
    """One Triton batch of `specdec`. PyTriton fails all requests of a batch or none: a request that failed beside
    good ones answers with its `error` output (stop_reason "error"); when all failed, their error is raised."""
    def infer(requests):
        answers = schema.batch_answers(handler, [_getter(r) for r in requests])
        errors = [error for _, error in answers]
        if all(error is not None for error in errors):
            raise RequestError(" | ".join(dict.fromkeys(str(error) for error in errors))) from None
        return [outputs for outputs, _ in answers]
    return infer


_END = object()


def _stream_fn(handler: schema.Handler):
    """An async generator for PyTriton's decoupled mode: Triton hands the instance each request as it comes, so
    every request in flight is one call of this. Each request has its own thread, which takes every piece and
    closes the stream (a request that runs alone holds the decoder's gate, which belongs to the thread that took
    it). A call that is cancelled (the server stopping) closes its stream, which cancels its request."""

    async def infer(requests):
        if len(requests) != 1:
            raise RequestError(str(SpecdecError(f"{schema.STREAM_MODEL} takes one request at a time (got "
                                                f"{len(requests)})")))
        loop = asyncio.get_running_loop()
        worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specdec-stream")
        pieces = handler.stream(_getter(requests[0]))       # a generator: nothing runs before its first piece
        try:
            while True:
                try:
                    piece = await loop.run_in_executor(worker, next, pieces, _END)
                except SpecdecError as err:
                    raise RequestError(str(err)) from None
                if piece is _END:
                    return
                yield [piece]
        finally:
            worker.submit(pieces.close)      # after a piece still being taken: one thread, never at once
            worker.shutdown(wait=False)

    return infer


def _tensors(fields):
    import numpy as np
    from pytriton.model_config import Tensor

    return [Tensor(name=f.name, dtype=np.bytes_ if f.dtype is np.object_ else f.dtype, shape=f.shape,
                   optional=f.optional) for f in fields]


# Triton's exit timeout spans both the wait for requests in flight and the unloading of the models after it, and a
# PyTriton model's stub process takes about 2 s to unload (its proxy looks for the stop once a second). Cut short, the
# server exits first and the stubs it leaves end non-gracefully: an exit 1, at times an abort (std::terminate) or a
# stub stuck for good. So Triton gets this much more than exit_timeout_s (a stop takes no longer for it: Triton
# exits as soon as its models are unloaded).
UNLOAD_S = 5


def _handshake_race(err: BaseException) -> bool:
    """PyTriton 0.7 starts a model's instances at once, and an instance after the first may connect to the first's
    handshake socket after the file exists but before it listens (ConnectionRefusedError in its initialize)."""
    text = str(err)
    return "get_config_from_handshake_server" in text or ("handshake" in text and "refused" in text.lower())


class Server:
    """specdec on PyTriton's Triton Inference Server. `start()` returns once both models are ready; `stop()`
    stops the server and its tritonserver process. Also a context manager.

    instances: Triton instances of `specdec` (each takes one dynamic batch at a time; they share the one decoder,
    so a second lets the next batch join while the last drains). threads: intra-op threads of the decoder (0:
    onnxruntime's default, the physical cores). max_batch: rows decoded at once and Triton's max_batch_size.
    max_queue: requests that may wait (in Triton's queue for `specdec`, in the batcher for streams).
    queue_delay_us: how long Triton holds a request for others to batch with. options and/or keywords: the decoder's
    load options that serve takes (provider, threads, graph_capture: specdec.runtime.core.options declares them;
    with graph_capture every request runs alone, one at a time, none in a batch). address: where it listens
    (127.0.0.1: this machine only).
    exit_timeout_s: how long a stopping server waits for requests in flight; its models then have UNLOAD_S more to
    unload, so that every process of the server ends cleanly."""

    def __init__(self, engine, *, instances: int = 1, max_batch: int = schema.MAX_BATCH,
                 max_queue: int = schema.MAX_QUEUE, queue_delay_us: int = 500, http_port: int = 8000,
                 grpc_port: int = 8001, metrics_port: int = 8002, address: str = "127.0.0.1", exit_timeout_s: int = 5,
                 log_verbose: int = 0, options: LoadOptions | None = None, **load):
        for name, value, least in (("instances", instances, 1), ("max_queue", max_queue, 1),
                                   ("queue_delay_us", queue_delay_us, 0)):
            if type(value) is not int or value < least:
                raise SpecdecError(f"{name} must be an integer >= {least} (got {value!r})")
        self.options = schema.load_options(options, **load)
        checked_max_batch(max_batch)
        self.engine, self.instances = Path(engine), instances
        self.max_batch, self.max_queue, self.queue_delay_us = max_batch, max_queue, queue_delay_us
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.address, self.exit_timeout_s, self.log_verbose = address, exit_timeout_s, log_verbose
        self.triton = None
        self.handler: schema.Handler | None = None

    def start(self) -> "Server":
        require_pytriton()
        _libpython_on_path()
        for what, port in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port),
                           ("--metrics-port", self.metrics_port)):
            _port_free(self.address, port, what)
        # load first: a bad export fails before Triton starts
        self.handler = schema.Handler(schema.load_decoder(self.engine, self.options), self.max_batch, self.max_queue)
        try:
            for attempt in range(3):
                try:
                    self._run_triton()
                    return self
                except Exception as err:
                    self._stop_triton()
                    if attempt == 2 or not _handshake_race(err):
                        raise
        except Exception as err:
            self.stop()
            if isinstance(err, SpecdecError):
                raise
            raise SpecdecError(f"the Triton server did not start: {type(err).__name__}: {first_line(err, 300)}",
                               "see the server log above") from err
        except BaseException:
            self.stop()
            raise

    def _run_triton(self) -> None:
        from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy
        from pytriton.triton import Triton, TritonConfig

        config = TritonConfig(http_address=self.address, http_port=self.http_port, grpc_address=self.address,
                              grpc_port=self.grpc_port, metrics_address=self.address, metrics_port=self.metrics_port,
                              allow_metrics=True, exit_timeout_secs=self.exit_timeout_s + UNLOAD_S,
                              log_verbose=self.log_verbose)
        self.triton = Triton(config=config)
        inputs, outputs = _tensors(self.handler.inputs), _tensors(self.handler.outputs)  # the export's kind's
        batcher = DynamicBatcher(max_queue_delay_microseconds=self.queue_delay_us,
                                 default_queue_policy=QueuePolicy(max_queue_size=self.max_queue))
        self.triton.bind(model_name=schema.MODEL, infer_func=[_generate_fn(self.handler)] * self.instances,
                         inputs=inputs, outputs=outputs, strict=True,
                         config=ModelConfig(batching=True, max_batch_size=self.max_batch, batcher=batcher))
        self.triton.bind(model_name=schema.STREAM_MODEL, infer_func=_stream_fn(self.handler), inputs=inputs,
                         outputs=outputs, config=ModelConfig(batching=False, decoupled=True), strict=True)
        self.triton.run()

    def is_alive(self) -> bool:
        return self.triton is not None and self.triton.is_alive()

    def _stop_triton(self) -> None:
        if self.triton is not None:
            self.triton.stop()
            self.triton = None

    def stop(self) -> None:
        self._stop_triton()
        if self.handler is not None:
            self.handler.close()
            self.handler = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _port_free(address: str, port: int, what: str) -> None:
    """A one-line SpecdecError if something already listens on `port` (Triton would fail, or PyTriton would wait
    for a server that is not its own)."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as err:
            raise SpecdecError(f"cannot listen on {address}:{port} ({what}): {err.strerror or err}",
                               f"stop what uses it, or pick another port with {what}") from None


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports nobody listens on right now (for tests and benchmarks on 127.0.0.1). The sockets
    are bound all at once: ports taken one at a time may come back equal, and a server given the same port twice
    does not start."""
    import contextlib
    import socket

    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    """One port as free_ports gives them."""
    return free_ports(1)[0]


__all__ = ["Server", "require_pytriton", "free_port", "free_ports"]

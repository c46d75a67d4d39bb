"""The PyTriton binding: a real Triton Inference Server (the tritonserver binary PyTriton ships) with two models on
one export:

    specdec          one request -> one response (schema.OUTPUTS)
    specdec_stream   decoupled: one response per accepted piece as soon as it exists, then Triton's final flag

Each model has N instances and each instance its own SpeculativeDecoder and its own thread, so N requests run at
once (onnxruntime releases the GIL while a graph runs). A request that fails (bad parameters, an unknown draft) is
an error response for that request only; the instance keeps serving."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sysconfig
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError, first_line

from . import schema


def require_pytriton():
    """Import pytriton, or a one-line SpecdecError saying how to install it."""
    try:
        import pytriton.triton  # noqa: F401
    except ImportError as err:
        raise SpecdecError(f"specdec-serve needs PyTriton, which is not installed ({err})",
                           "pip install 'specdec[serve]'") from None


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


def threads_per_instance(instances: int, threads: int = 0) -> int:
    """Intra-op threads for each instance's decoder: `threads` if given, else the cores split between instances
    (on 2 cores: 2 threads for one instance, 1 each for two), so N concurrent requests do not oversubscribe."""
    if threads > 0:
        return threads
    return max(1, (os.cpu_count() or 1) // max(1, instances))


def _getter(request):
    data = request.data
    return lambda name: data.get(name)


def _generate_fn(handler: schema.Handler):
    def infer(requests):
        return [handler.generate(_getter(r)) for r in requests]
    return infer


_END = object()


def _stream_fn(handler: schema.Handler):
    """An async generator for PyTriton's decoupled mode. The decoder runs in this instance's own worker thread, one
    request at a time (an asyncio lock: Triton may hand a decoupled instance its next request before the last
    one's responses are all sent); each piece is yielded as soon as the decoder returns it."""
    worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specdec-stream")
    lock = None

    async def infer(requests):
        nonlocal lock
        lock = lock or asyncio.Lock()
        if len(requests) != 1:
            raise SpecdecError(f"{schema.STREAM_MODEL} takes one request at a time (got {len(requests)})")
        loop = asyncio.get_running_loop()
        async with lock:
            pieces = await loop.run_in_executor(worker, handler.stream, _getter(requests[0]))
            while True:
                piece = await loop.run_in_executor(worker, next, pieces, _END)
                if piece is _END:
                    return
                yield [piece]

    infer.worker = worker
    return infer


def _tensors(fields):
    import numpy as np
    from pytriton.model_config import Tensor

    return [Tensor(name=f.name, dtype=np.bytes_ if f.dtype is np.object_ else f.dtype, shape=f.shape,
                   optional=f.optional) for f in fields]


class Server:
    """specdec on PyTriton's Triton Inference Server. `start()` returns once both models are ready; `stop()`
    stops the server and its tritonserver process. Also a context manager."""

    def __init__(self, engine, *, instances: int = 1, threads: int = 0, http_port: int = 8000,
                 grpc_port: int = 8001, metrics_port: int = 8002, address: str = "0.0.0.0",
                 exit_timeout_s: int = 5, log_verbose: int = 0):
        if not isinstance(instances, int) or instances < 1:
            raise SpecdecError(f"instances must be a positive integer (got {instances!r})")
        self.engine, self.instances = Path(engine), instances
        self.threads = threads_per_instance(instances, threads)
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.address, self.exit_timeout_s, self.log_verbose = address, exit_timeout_s, log_verbose
        self.triton = None
        self._stream_fns = []

    def _decoders(self):
        return [schema.Handler(schema.load_decoder(self.engine, self.threads)) for _ in range(self.instances)]

    def start(self) -> "Server":
        require_pytriton()
        _libpython_on_path()
        for what, port in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port),
                           ("--metrics-port", self.metrics_port)):
            _port_free(self.address, port, what)
        from pytriton.model_config import ModelConfig
        from pytriton.triton import Triton, TritonConfig

        generate = [_generate_fn(h) for h in self._decoders()]     # load first: a bad export fails before Triton
        self._stream_fns = [_stream_fn(h) for h in self._decoders()]
        config = TritonConfig(http_address=self.address, http_port=self.http_port, grpc_address=self.address,
                              grpc_port=self.grpc_port, metrics_address=self.address, metrics_port=self.metrics_port,
                              allow_metrics=True, exit_timeout_secs=self.exit_timeout_s, log_verbose=self.log_verbose)
        self.triton = Triton(config=config)
        try:
            inputs, outputs = _tensors(schema.INPUTS), _tensors(schema.OUTPUTS)
            self.triton.bind(model_name=schema.MODEL, infer_func=generate, inputs=inputs, outputs=outputs,
                             config=ModelConfig(batching=False), strict=True)
            self.triton.bind(model_name=schema.STREAM_MODEL, infer_func=self._stream_fns, inputs=inputs,
                             outputs=outputs, config=ModelConfig(batching=False, decoupled=True), strict=True)
            self.triton.run()
        except Exception as err:
            self.stop()
            if isinstance(err, SpecdecError):
                raise
            raise SpecdecError(f"the Triton server did not start: {type(err).__name__}: {first_line(err, 300)}",
                               "see the server log above") from err
        except BaseException:
            self.stop()
            raise
        return self

    def is_alive(self) -> bool:
        return self.triton is not None and self.triton.is_alive()

    def stop(self) -> None:
        if self.triton is not None:
            self.triton.stop()
            self.triton = None
        for fn in self._stream_fns:
            fn.worker.shutdown(wait=False, cancel_futures=True)
        self._stream_fns = []

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


__all__ = ["Server", "require_pytriton", "threads_per_instance", "free_port", "free_ports"]

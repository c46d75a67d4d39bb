"""`specdec-serve`: serve an export on a Triton Inference Server started through PyTriton (models `specdec` and
`specdec_stream`), or write a model repository for a stand-alone Triton server (--write-model-repository)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from specdec.runtime.core import options as load_options
from specdec.runtime.core.errors import OneLineParser, SpecdecError, run_cli


RENAMED = {"--engine": "--export", "--address": "--host"}     # earlier flag names, accepted for one release

# The integer options after --host, in --help's order: flag, default, help.
COUNTS = (
    ("--max-batch", 16, "requests decoded together in one batch, and Triton's max_batch_size for 'specdec' "
                        "(default 16)"),
    ("--max-queue", 64, "requests that may wait for a row; past it a request is refused at once (default 64)"),
    ("--queue-delay-us", 500, "microseconds Triton holds a request for others to batch with (default 500)"),
    ("--instances", 1, "Triton instances of 'specdec'; they share one decoder and its batch (default 1)"),
    ("--exit-timeout", 5, "seconds a stopping server waits for requests in flight (default 5)"),
)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="specdec-serve", renamed=RENAMED,
                      description="Serve an export from specdec-export on Triton Inference Server (PyTriton): model "
                                  "'specdec' (one response per request) and 'specdec_stream' (decoupled: one response "
                                  "per accepted piece). Stops cleanly on SIGTERM or Ctrl-C.")
    p.add_argument("--export", default="exported", metavar="DIR", help="the export directory (default: ./exported)")
    # the decoder's load options serve takes, from their declaration (runtime/core/options.py)
    load_options.add_flags(p, "serve", notes={"threads": "with --write-model-repository, per instance",
                                              "graph_capture": "every request then runs alone, none in a batch"})
    p.add_argument("--http-port", type=int, default=8000, help="Triton's HTTP/REST port (default 8000)")
    p.add_argument("--grpc-port", type=int, default=8001, help="Triton's gRPC port (default 8001)")
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics at /metrics (default 8002)")
    p.add_argument("--host", dest="address", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)")
    for flag, default, text in COUNTS:
        p.add_argument(flag, type=int, default=default, help=text)
    p.add_argument("--write-model-repository", metavar="DIR",
                   help="instead of serving, write a Triton model repository (Python backend: config.pbtxt and "
                        "model.py for both models) that runs --export on a stand-alone tritonserver")
    return p


def _serve(args, options) -> int:
    from .server import Server

    stop, serving = threading.Event(), threading.Event()

    def on_signal(signum, frame):
        stop.set()
        if not serving.is_set():        # still starting (loading, waiting for Triton): abandon the start
            raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    server = Server(args.export, instances=args.instances, max_batch=args.max_batch, max_queue=args.max_queue,
                    queue_delay_us=args.queue_delay_us, http_port=args.http_port, grpc_port=args.grpc_port,
                    metrics_port=args.metrics_port, address=args.address, exit_timeout_s=args.exit_timeout,
                    options=options)
    try:
        server.start()
        serving.set()
        print(f"specdec-serve: serving {args.export} as models 'specdec' and 'specdec_stream' (batches of up to "
              f"{args.max_batch}, {args.max_queue} waiting at most, {args.instances} instance(s)) on http "
              f"{args.address}:{args.http_port}, grpc "
              f"{args.address}:{args.grpc_port}, metrics {args.address}:{args.metrics_port}", flush=True)
        while not stop.wait(1.0):
            if not server.is_alive():
                raise SpecdecError("the Triton server stopped unexpectedly", "see its log above")
    finally:
        server.stop()
    print("specdec-serve: stopped", flush=True)
    return 0


def _main(argv) -> int:
    args = parser().parse_args(argv)
    for flag, value, least in (("--instances", args.instances, 1), ("--max-batch", args.max_batch, 1),
                               ("--max-queue", args.max_queue, 1), ("--queue-delay-us", args.queue_delay_us, 0)):
        if value < least:
            raise SpecdecError(f"{flag} must be >= {least} (got {value})")
    if args.max_batch > 256:
        raise SpecdecError(f"--max-batch must be <= 256 (got {args.max_batch})")
    options = load_options.LoadOptions.from_args(args, "serve").checked(flags=True)
    if args.write_model_repository:
        from .repository import write_model_repository

        out = write_model_repository(args.write_model_repository, args.export, instances=args.instances,
                                     max_batch=args.max_batch, max_queue=args.max_queue,
                                     queue_delay_us=args.queue_delay_us, options=options)
        print(f"wrote a Triton model repository for {args.export} to {out} (models specdec, specdec_stream); run "
              f"it with: tritonserver --model-repository {out}")
        return 0
    return _serve(args, options)


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Load on specdec-serve: requests/s and p50/p99 latency of the `specdec` model by client and instance count (the
same prompts and parameters in every cell), with the batch's occupancy and resident memory. Needs the serve extra.

    specdec-bench serve-load --export DIR [--instances 1] [--clients 1,4,16,64] [--requests 160]
                             [--max-new-tokens 32] [--max-batch 16] [--queue-delay-us 500] [--protocol http|grpc]
                             [--soak N] [--json OUT]

(`python -m specdec.bench.serve_load` takes the same flags.)

Per instance count it starts the real server (specdec.serve.Server: PyTriton's tritonserver, 127.0.0.1, free ports)
and warms it up; per client count, C client threads take the next of the --requests prompts until all are answered.
Latency: send to answer; requests/s: requests / the cell's wall time; rows/round: rows decoded per target run.
Resident memory after each cell: this process (PyTriton runs the decoder in it), and with its children (tritonserver,
the backend stubs). --soak N then starts `specdec-serve` in its own process with the same flags and sends it N
requests from 16 clients: its memory with its children after every 1,000. Every answer is checked against the first
answer to its prompt (greedy: one output per prompt). The clients take CPU from the server on the same machine."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import threading
import time

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from .common.tables import Table, render


def _ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers (got {text!r})") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be positive integers (got {text!r})")
    return values


def add_arguments(p) -> None:
    p.add_argument("--export", dest="engine", required=True, metavar="DIR", help="export directory")
    p.add_argument("--instances", type=_ints, default=[1],
                   help="Triton instances of 'specdec', sharing one decoder (default 1)")
    p.add_argument("--clients", type=_ints, default=[1, 4, 16, 64], help="concurrent clients (default 1,4,16,64)")
    p.add_argument("--max-batch", type=int, default=16, help="the server's --max-batch (default 16)")
    p.add_argument("--queue-delay-us", type=int, default=500,
                   help="the server's --queue-delay-us: how long Triton holds a request to batch it (default 500)")
    p.add_argument("--soak", type=int, default=0, metavar="N",
                   help="after the cells, N requests from 16 clients to specdec-serve in its own process, its "
                        "memory after every 1,000 (default 0)")
    p.add_argument("--requests", type=int, default=160, help="requests per cell (default 160)")
    p.add_argument("--prompts", default=None, metavar="FILE",
                   help="JSONL ({\"source\": ...}) or text file of prompts (default: the bundled test prompts)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens per request (default 32)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http", help="the clients' protocol (default http)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads of the decoder (0: onnxruntime's)")
    p.add_argument("--warmup", type=int, default=16, help="untimed requests before the cells (default 16)")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures and the machine as JSON")


def run_cell(port: int, protocol: str, clients: int, prompts: list, max_new_tokens: int) -> dict:
    """C clients share the prompts; a request is one row, [1, 1] (Triton's dynamic batching adds the batch dim)."""
    module = importlib.import_module(f"tritonclient.{protocol}")
    latencies, answers = [None] * len(prompts), [None] * len(prompts)
    errors, lock, next_index = [], threading.Lock(), iter(range(len(prompts)))

    def work():
        client = module.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                began = time.perf_counter()
                text = module.InferInput("prompt", [1, 1], "BYTES")
                text.set_data_from_numpy(np.array([[prompts[i].encode()]], dtype=np.object_))
                limit = module.InferInput("max_new_tokens", [1, 1], "INT64")
                limit.set_data_from_numpy(np.array([[max_new_tokens]], dtype=np.int64))
                answers[i] = client.infer("specdec", [text, limit]).as_numpy("text")[0, 0].decode()
                latencies[i] = time.perf_counter() - began
        except Exception as err:       # reported, not raised in a thread
            errors.append(repr(err))
        finally:
            client.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, began + 600 - time.perf_counter()))
    wall = time.perf_counter() - began
    if errors or any(t.is_alive() for t in threads):
        raise SpecdecError(f"a load cell failed ({clients} clients): {errors[:1] or ['timed out after 600 s']}")
    lat = np.array(latencies)
    return {"clients": clients, "requests": len(prompts), "wall_s": wall, "requests_per_s": len(prompts) / wall,
            "p50_ms": float(np.percentile(lat, 50) * 1000), "p99_ms": float(np.percentile(lat, 99) * 1000),
            "mean_ms": float(lat.mean() * 1000), "answers": answers}


def run_soak(args, instances: int, prompts: list) -> list:
    import subprocess
    import tempfile
    import urllib.request

    from specdec.serve.server import free_ports

    from .common.machine import resident_mib

    http, grpc, metrics = free_ports(3)
    argv = [sys.executable, "-m", "specdec.serve.cli", "--export", str(args.engine), "--host", "127.0.0.1",
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
            "--instances", str(instances), "--threads", str(args.threads), "--max-batch", str(args.max_batch),
            "--queue-delay-us", str(args.queue_delay_us), "--exit-timeout", "2"]
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)

    def ready() -> bool:
        try:
            return all(urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/{model}/ready", timeout=2).status
                       == 200 for model in ("specdec", "specdec_stream"))
        except OSError:
            return False
    try:
        deadline = time.monotonic() + 180
        while not ready():
            if proc.poll() is not None:
                log.seek(0)
                raise SpecdecError(f"specdec-serve exited before it was ready: {log.read().strip()[-300:]}")
            if time.monotonic() > deadline:
                raise SpecdecError("specdec-serve was not ready after 180 s", "check the export with specdec-check")
            time.sleep(0.25)
        port = http if args.protocol == "http" else grpc
        run_cell(port, args.protocol, 16, prompts[:args.warmup], args.max_new_tokens)
        out = []
        for done in range(0, args.soak, 1000):
            chunk = [prompts[i % len(prompts)] for i in range(done, min(args.soak, done + 1000))]
            run_cell(port, args.protocol, 16, chunk, args.max_new_tokens)
            out.append({"instances": instances, "requests": done + len(chunk), "server_memory": resident_mib(proc.pid)})
            print(f"soak, specdec-serve with {instances} instance(s): {done + len(chunk)} requests, memory "
                  f"{out[-1]['server_memory']}", flush=True)
        return out
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def run(args) -> int:
    from specdec.serve.server import Server, free_ports

    from .common import prompts as prompt_files, running
    from .common.machine import describe, load_average, resident_mib

    path = args.prompts or prompt_files.bundled_prompts_file()
    if path is None:
        raise SpecdecError("no prompts: the bundled test prompts are not installed", "pass --prompts FILE")
    texts = [p.text for p in prompt_files.read_prompts(path) if p.text]
    if not texts:
        raise SpecdecError(f"{path} holds no text prompts", "use a JSONL with \"source\" or a text file")
    prompts = [texts[i % len(texts)] for i in range(args.requests)]
    machine = describe("cpu")
    results, soak, first_answer = [], [], {}
    for instances in args.instances:
        gc.collect()                         # the last server's decoder goes before the next one's is measured
        http, grpc, metrics = free_ports(3)
        with Server(args.engine, instances=instances, threads=args.threads, max_batch=args.max_batch,
                    queue_delay_us=args.queue_delay_us, address="127.0.0.1", exit_timeout_s=2, http_port=http,
                    grpc_port=grpc, metrics_port=metrics) as server:
            port = server.http_port if args.protocol == "http" else server.grpc_port
            counters = server.handler.batcher.counters
            for clients in (1, 16):          # untimed: both the one-row and the many-row layouts
                run_cell(port, args.protocol, clients, prompts[:args.warmup], args.max_new_tokens)
            for clients in args.clients:
                before = dict(counters)
                cell = run_cell(port, args.protocol, clients, prompts, args.max_new_tokens)
                mismatches = sum(first_answer.setdefault(p, a) != a for p, a in zip(prompts, cell.pop("answers")))
                rounds = counters["rounds"] - before["rounds"]
                cell.update(instances=instances, mismatches=mismatches, load_average_after=load_average(),
                            rows_per_round=(counters["rows"] - before["rows"]) / rounds if rounds else 0.0,
                            memory=resident_mib())
                results.append(cell)
                print(f"instances {instances}, clients {clients:2d}: {cell['requests_per_s']:6.2f} req/s, p50 "
                      f"{cell['p50_ms']:7.1f} ms, p99 {cell['p99_ms']:7.1f} ms, rows/round "
                      f"{cell['rows_per_round']:5.2f}, memory {cell['memory'].get('with_children_mib')} MiB, "
                      f"mismatches {mismatches}", flush=True)
        if args.soak:
            soak += run_soak(args, instances, prompts)
    out = {"command": args.command_line, "machine": machine, "protocol": args.protocol,
           "max_new_tokens": args.max_new_tokens, "max_batch": args.max_batch, "queue_delay_us": args.queue_delay_us,
           "requests_per_cell": args.requests, "results": results, "soak": soak}
    out["table"] = render(sections(out)[:1], markdown=True).splitlines()      # the cells' table, as Markdown
    running.report(out, args, sections)
    return 0 if all(r["mismatches"] == 0 for r in results) else 1


def sections(report: dict) -> list:
    parts = [Table("", ("instances", "clients", "requests/s", "p50 ms", "p99 ms", "mean ms", "rows/round",
                        "resident MiB (with tritonserver)", "mismatches"),
                   [[str(r["instances"]), str(r["clients"]), f"{r['requests_per_s']:.2f}", f"{r['p50_ms']:.1f}",
                     f"{r['p99_ms']:.1f}", f"{r['mean_ms']:.1f}", f"{r['rows_per_round']:.2f}",
                     f"{r['memory'].get('process_mib')} ({r['memory'].get('with_children_mib')})",
                     str(r["mismatches"])] for r in report["results"]])]
    if report["soak"]:
        parts.append(Table("specdec-serve in its own process (--soak), resident MiB with its children:",
                           ("instances", "requests", "resident MiB"),
                           [[str(s["instances"]), f"{s['requests']:,}",
                             str(s["server_memory"].get("with_children_mib"))] for s in report["soak"]]))
    return parts


def main(argv=None) -> int:
    from .common.options import tool_main

    return tool_main("python -m specdec.bench.serve_load", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())

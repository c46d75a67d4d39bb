"""Resident memory of a decoder after mixed requests, against its export's graph bytes:

    python -m benchmarks.memory --export DIR --prompts FILE [--num-prompts 16] [--requests 20] [--json OUT]

Loads DIR on the CPU provider and runs --requests requests in turn: a single request (the default draft), a beam
search (4 beams) and a generate_batch of 4 prompts, cycling over the prompts (read as specdec-bench reads them).
Prints the process's VmRSS after loading, after each of the first three requests and after the last, the bytes of
the export's graphs (.onnx and external data) and RSS after the last over those bytes. RSS includes the Python
interpreter with the runtime's libraries imported (0.06 GiB on the machine of benchmarks/results), the tokenizer and
the datastore's pages read: a t5-large-sized export held 0.17-0.18 GiB more than its graphs after loading, fp32 or
int8 alike.
"""

from __future__ import annotations

import json
import os
import sys

from specdec.runtime.core.errors import OneLineParser, SpecdecError, run_cli

from .common import prompts as bench_prompts
from .common.machine import resident_mib

GIB = 2 ** 30
KINDS = ("single", "beam 4", "batch of 4")


def rss_gib() -> float:
    """This process's VmRSS (machine.resident_mib)."""
    mib = resident_mib().get("process_mib")
    if not mib:
        raise SpecdecError("this process's resident memory cannot be read (/proc/self/status)",
                           "run python -m benchmarks.memory on Linux")
    return mib / 1024


def graph_gib(export: str) -> float:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(export) for name in names
               if name.endswith((".onnx", ".data", ".onnx_data"))) / GIB


def measure(decoder, prompts: list, requests: int, max_new_tokens: int) -> dict:
    """RSS after each of the first three requests and after the last (GiB), and after the last over the graphs."""
    export = str(decoder.manifest.root)
    out = {"export": export, "graphs_gib": graph_gib(export), "loaded_gib": rss_gib(), "after_gib": {}}
    for i in range(requests):
        kind, prompt = KINDS[i % 3], prompts[(4 * i) % len(prompts)]
        if kind == "single":
            decoder.generate(**prompt.kwargs(), max_new_tokens=max_new_tokens)
        elif kind == "beam 4":
            decoder.generate(**prompt.kwargs(), max_new_tokens=max_new_tokens, num_beams=4)
        else:
            decoder.generate_batch(input_ids=[prompts[(4 * i + j) % len(prompts)].ids for j in range(4)],
                                   max_new_tokens=max_new_tokens)
        if i < 3 or i + 1 == requests:
            out["after_gib"][f"{i + 1} ({kind})"] = rss_gib()
    out["ratio"] = rss_gib() / out["graphs_gib"]
    return out


def _main(argv=None) -> int:
    from specdec.runtime import SpeculativeDecoder

    parser = OneLineParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="export directory made by specdec-export")
    parser.add_argument("--prompts", required=True, help="JSONL ({\"source\": ...} a line) or plain text, as "
                        "specdec-bench --prompts")
    parser.add_argument("--num-prompts", type=int, default=16, help="prompts, round-robin over the tasks (default 16)")
    parser.add_argument("--requests", type=int, default=20, help="mixed requests (default 20)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="new tokens a request (default 48)")
    parser.add_argument("--json", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.requests < 1:
        raise SpecdecError(f"--requests {args.requests} is not a number of requests", "pass 1 or more")
    decoder = SpeculativeDecoder.load(args.export, provider="cpu")
    prompts, _ = bench_prompts.load(args.prompts, args.num_prompts, decoder, every_task=True)
    out = measure(decoder, prompts, args.requests, args.max_new_tokens)
    print(f"graphs {out['graphs_gib']:.3f} GiB; RSS after loading {out['loaded_gib']:.3f} GiB")
    for label, value in out["after_gib"].items():
        print(f"RSS after request {label}: {value:.3f} GiB")
    print(f"RSS after {args.requests} requests / graphs: {out['ratio']:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


def main(argv=None) -> int:
    """A bad export or prompts file is one line on stderr and exit status 2 (run_cli)."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

"""int8 on different CPUs: the measurements behind docs/guides/int8.md, "The same int8 on every CPU".

    python -m benchmarks.int8_cpus logits --export DIR --role target --out A.npy      # an export's probe logits
    qemu-x86_64 -cpu Haswell .venv/bin/python -m benchmarks.int8_cpus logits --export DIR --out B.npy   # no VNNI
    python -m benchmarks.int8_cpus compare A.npy B.npy                               # max |difference|
    python -m benchmarks.int8_cpus u8u8                 # MatMulInteger with int8 against uint8 weights
    python -m benchmarks.int8_cpus interleaved --export NAME=DIR NAME=DIR --prompts U  # ms/token, rounds rotated

`logits` runs an export's encoder and decoder graphs on a fixed probe (a 5-token prefill, a step, a 5-token verify)
with ONNX Runtime on whatever CPU runs it, QEMU's emulated one included (user mode: `apt install qemu-user`), so
two CPUs' results can be compared; `u8u8` times ONNX Runtime's MatMulInteger at t5-large shapes with int8 weights
(the export's) and with uint8 weights (which no CPU saturates either); `interleaved` times target-only and default
greedy generation of several exports of the same checkpoints, one block each per round in rotating order, round 0
as warm-up, and prints medians over rounds and the per-round ratios to the first export.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def probe_logits(export: str, role: str) -> np.ndarray:
    from specdec.export.check import onnx_logits

    manifest = json.load(open(f"{export}/manifest.json"))
    graphs = manifest["models"][role]["graphs"]
    encoder = (graphs.get("encoder") or manifest["models"]["target"]["graphs"]["encoder"])["file"]
    words = int(manifest["vocab_size"]) // 8
    rng = np.random.default_rng(0)
    source = rng.integers(3, words, size=(1, 12))
    special = manifest["special_ids"]
    source[0, -1] = special.get("eos_token_id", 1)
    ids = np.concatenate([[[special.get("decoder_start_token_id", 0)]], rng.integers(3, words, size=(1, 10))], axis=1)
    out = onnx_logits(f"{export}/{encoder}", f"{export}/{graphs['decoder']['file']}", source, ids, [5, 1, 5])
    return np.concatenate(out[1:], axis=1)


def u8u8(threads: int = 2, runs: int = 200) -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def session(k, n, signed):
        b = rng.integers(-127, 128, (k, n)).astype(np.int8) if signed else rng.integers(0, 256, (k, n)).astype(np.uint8)
        zb = np.zeros(n, np.int8) if signed else np.full(n, 128, np.uint8)
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B", "azp", "bzp"], ["Y"])], "g",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, k])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, n])],
            [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array(128, np.uint8), "azp"),
             numpy_helper.from_array(zb, "bzp")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    print(f"MatMulInteger, {threads} threads, median of {runs} runs each, alternating")
    for k, n in ((1024, 4096), (4096, 1024), (1024, 1024)):
        for m in (1, 9, 40):
            a = rng.integers(0, 256, (m, k)).astype(np.uint8)
            sessions = {"U8S8": session(k, n, True), "U8U8": session(k, n, False)}
            times = {name: [] for name in sessions}
            for _ in range(runs):
                for name, s in sessions.items():
                    start = time.perf_counter()
                    s.run(None, {"A": a})
                    times[name].append(time.perf_counter() - start)
            s8, u8 = (statistics.median(times[name]) * 1e3 for name in ("U8S8", "U8U8"))
            print(f"K={k} N={n} M={m}: U8S8 {s8:.3f} ms, U8U8 {u8:.3f} ms, U8U8 / U8S8 {u8 / s8:.2f}")


def interleaved(exports: dict, prompts: str, count: int, tokens: int, rounds: int, threads: int) -> None:
    from specdec.runtime import SpeculativeDecoder

    texts = [json.loads(line)["source"] for line in open(prompts)][:count]
    decoders = {name: SpeculativeDecoder.load(path, provider="cpu", threads=threads) for name, path in exports.items()}
    modes = {"target-only": {"gamma": 0}, "default": {}}
    times = {(name, mode): [] for name in decoders for mode in modes}
    outputs = {}
    names = list(decoders)
    for r in range(rounds + 1):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for mode, kwargs in modes.items():
                made, start = 0, time.perf_counter()
                for i, text in enumerate(texts):
                    ids = decoders[name].generate(text, max_new_tokens=tokens, **kwargs).token_ids
                    made += len(ids)
                    outputs[name, mode, i] = ids
                if r:
                    times[name, mode].append((time.perf_counter() - start) * 1e3 / made)
    first = names[0]
    for (name, mode), values in times.items():
        same = sum(outputs[name, mode, i] == outputs[name, "target-only", i] for i in range(len(texts)))
        ratios = [v / w for v, w in zip(values, times[first, mode])]
        print(f"{name} {mode}: ms/token median {statistics.median(values):.2f} "
              f"(rounds {', '.join(f'{v:.2f}' for v in values)}); ÷ {first} per round median "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}); "
              f"same as its own target-only {same}/{len(texts)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.int8_cpus", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("logits")
    p.add_argument("--export", required=True)
    p.add_argument("--role", default="target")
    p.add_argument("--out", required=True)
    p = sub.add_parser("compare")
    p.add_argument("files", nargs=2)
    p = sub.add_parser("u8u8")
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("interleaved")
    p.add_argument("--export", nargs="+", required=True, metavar="NAME=DIR")
    p.add_argument("--prompts", required=True)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.command == "logits":
        np.save(args.out, probe_logits(args.export, args.role))
    elif args.command == "compare":
        a, b = (np.load(f) for f in args.files)
        print(f"max |difference| {np.abs(a - b).max():.3g} (max |logit| {np.abs(a).max():.3g}); argmax equal on "
              f"{int((a.argmax(-1) == b.argmax(-1)).sum())}/{a.shape[1]} positions")
    elif args.command == "u8u8":
        u8u8(args.threads)
    else:
        interleaved(dict(e.split("=", 1) for e in args.export), args.prompts, args.num_prompts,
                    args.max_new_tokens, args.rounds, args.threads)


if __name__ == "__main__":
    main()

"""The GPU check's main subject (specdec-bench gpu, benchmarks/gpu.py): the bundled pair widened to real T5 shapes
(`specdec-models widen`, same function at t5-large : t5-small cost), exported fp16 and fp32 with --graph-capture and
run eager and captured (SpeculativeDecoder.load(..., graph_capture=True): each decoder width a CUDA graph on the
CUDA provider, the same graphs uncaptured on the CPU).

Pieces here, each usable alone: the widened checkpoints and exports (made once into the work dir, reused after),
timed passes over the prompts, the widths a captured decoder ran, the device's memory, transformers' greedy and
assisted generate on the same weights, and the kernels per step (the capturable decoder's nodes after onnxruntime's
optimizations, where onnxruntime placed them, and what it warned about when the session was made).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from specdec.runtime.core.errors import first_line

TARGET_ONLY = {"draft": "none"}
DEFAULT = {"draft": "auto", "gamma": "auto"}


# -- the widened pair and its exports --------------------------------------------------------------------------------
def parse_pair(text: str) -> tuple[str, str]:
    """'t5-large:t5-small' -> the two shapes, each one of specdec.models.shapes.CONFIGS."""
    from specdec.models.shapes import CONFIGS
    from specdec.runtime.core.errors import SpecdecError

    target, sep, draft = text.partition(":")
    if not sep or target not in CONFIGS or draft not in CONFIGS:
        raise SpecdecError(f"--widen {text!r} is not TARGET:DRAFT of known shapes",
                           f"use two of {', '.join(CONFIGS)}, e.g. --widen t5-large:t5-small, or --widen none")
    return target, draft


def widened_dir(work: Path, pair: tuple, source) -> Path:
    """Where the widened checkpoints go: one folder per pair of shapes (and source, when not the bundled pair)."""
    tag = f"widened-{pair[0]}-{pair[1]}" + (f"-from-{Path(source).resolve().name}" if source else "")
    return Path(work) / tag


def ensure_widened(work: Path, pair: tuple, source=None, log=print) -> dict:
    """DIR/target and DIR/draft widened from the bundled pair (or `source`: a folder with target/ and draft/),
    reused when a finished widening of the same shapes is there."""
    from specdec.models.widen import widen

    root = widened_dir(work, pair, source)
    done = [root / role / "widen_info.json" for role in ("target", "draft")]
    if all(f.is_file() for f in done) and \
            [json.loads(f.read_text())["shape"] for f in done] == list(pair):
        return {"dir": str(root), "reused": True, "seconds": 0.0}
    started = time.perf_counter()
    for f in done:                      # a widening cut short is done again whole
        f.unlink(missing_ok=True)
    widen(pair[0], pair[1], root, source=source, log=log)
    return {"dir": str(root), "reused": False, "seconds": time.perf_counter() - started}


VARIANTS = ("fp16", "fp32", "fp16-fused", "fp32-fused")     # --dtypes: the weights, and -fused for fused attention


def split_variant(variant: str) -> tuple[str, str]:
    """'fp16-fused' -> ('fp16', 'fused'); 'fp32' -> ('fp32', 'plain'): the export's --dtype and --capture-attention."""
    dtype, _, attention = variant.partition("-")
    return dtype, attention or "plain"


def export_dir(widened: Path, dtype: str, gamma_max: int, max_length: int) -> Path:
    return Path(f"{widened}-{dtype}-g{gamma_max}-l{max_length}")


def export_ready(path: Path, dtype: str) -> bool:
    """An export with capturable graphs of `dtype` is already there (the loader's checks pass)."""
    from specdec.runtime import load_manifest
    from specdec.runtime.core.errors import SpecdecError

    try:
        manifest = load_manifest(path)
    except (SpecdecError, OSError, ValueError):
        return False
    base, attention = split_variant(dtype)
    return manifest.graph_capture is not None and manifest.dtype == base and \
        manifest.graph_capture.get("attention", "plain") == attention


def export_command(widened: Path, out: Path, dtype: str, gamma_max: int, max_length: int, datastore: list) -> list:
    """specdec-export of the widened pair with --graph-capture, as a command line (python -m specdec.export.cli);
    `dtype` one of VARIANTS."""
    return [sys.executable, "-m", "specdec.export.cli", "--target", str(Path(widened) / "target"),
            "--draft", str(Path(widened) / "draft"), "--dtype", split_variant(dtype)[0], "--graph-capture",
            "--capture-attention", split_variant(dtype)[1],
            "--gamma-max", str(gamma_max), "--max-length", str(max_length), "--export", str(out), "--force",
            "--datastore-text", *(datastore or ["none"])]


class Export:
    """One dtype's export: reused, made here (foreground) or made by a process started now (background: a GPU
    machine's cores export the fp32 pair while the fp16 one is measured). `wait()` -> its record."""

    def __init__(self, widened: Path, dtype: str, gamma_max: int, max_length: int, datastore: list,
                 background: bool = False, threads: int | None = None, log=print):
        self.dtype, self.path = dtype, export_dir(widened, dtype, gamma_max, max_length)
        self.record = {"dir": str(self.path), "dtype": dtype, "reused": export_ready(self.path, dtype),
                       "background": False}
        self.proc = None
        if self.record["reused"]:
            self.record["seconds"] = 0.0
            return
        cmd = export_command(widened, self.path, dtype, gamma_max, max_length, datastore)
        self.started = time.perf_counter()
        self.log_path = Path(f"{self.path}.log")
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = env["SPECDEC_THREADS"] = str(threads)
            self.record["threads"] = threads
        log(f"export {dtype}: {' '.join(cmd[1:])}" + (" (in the background)" if background else ""))
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.record["background"] = background
        if not background:
            self.wait()

    def wait(self, timeout: float | None = None) -> dict:
        from specdec.runtime.core.errors import SpecdecError

        if self.proc is not None and "seconds" not in self.record:
            try:
                code = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise SpecdecError(f"the {self.dtype} export did not finish in its {timeout:.0f} s") from None
            self.record["seconds"] = time.perf_counter() - self.started
            if code != 0:
                lines = [x for x in self.log_path.read_text(errors="replace").splitlines() if x.strip()]
                raise SpecdecError(f"the {self.dtype} export failed (exit {code}): "
                                   f"{lines[-1][:200] if lines else 'no output'} (log: {self.log_path})")
        return self.record


# -- timed passes ----------------------------------------------------------------------------------------------------
def timed(dec, prompts, max_new_tokens: int, repeats: int, **kw) -> dict:
    """One untimed pass over every prompt (each width captured before timing), then `repeats` timed passes:
    ms per generated token of each pass and their median, the outputs, and the last pass's rounds. At T > 0 each
    prompt's request has its own seed (its index), the same in every pass."""
    def one(i, ids):
        seeded = {"seed": i} if kw.get("temperature") else {}
        return dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, **seeded, **kw)

    warm = [one(i, p).token_ids for i, p in enumerate(prompts)]
    passes, results = [], []
    for _ in range(max(repeats, 1)):
        t = time.perf_counter()
        results = [one(i, p) for i, p in enumerate(prompts)]
        seconds = time.perf_counter() - t
        passes.append(1e3 * seconds / max(sum(len(r.token_ids) for r in results), 1))
    calls = sum(r.stats.target_calls for r in results)
    tokens = sum(len(r.token_ids) for r in results)
    return {"ms_per_token": statistics.median(passes), "passes": passes, "tokens": tokens,
            "tokens_per_target_call": tokens / max(calls, 1), "outputs": [r.token_ids for r in results],
            "warm_identical": sum(a == r.token_ids for a, r in zip(warm, results)),
            "proposed": sum(r.stats.proposed for r in results), "accepted": sum(r.stats.accepted for r in results)}


def identical(a: list, b: list) -> int:
    return sum(x == y for x, y in zip(a, b))


def gamma_sweep(dec, want: list, prompts, max_new_tokens: int, gamma_max: int, own: list | None = None) -> list:
    """Greedy output of fixed-gamma runs (the draft model, the lookup chained before it, and auto's choice of
    source, at gamma 1 .. gamma_max) against `want` (target-only's outputs): every width of the captured target runs,
    and the draft's widths up to gamma + 1; its widest runs (catching up gamma_max + 1 tokens) come only when auto's
    choices leave it behind, which the width counts show. `own`: the same decoder's target-only outputs, a second
    reference (the eager and captured graphs may round differently; speculation must not change either's output)."""
    rows = []
    for draft in ("draft", "lookup,draft", "auto"):
        if "draft" not in dec.models:
            continue
        for gamma in range(1, gamma_max + 1):
            got = [dec.generate(input_ids=p, max_new_tokens=max_new_tokens, draft=draft, gamma=gamma).token_ids
                   for p in prompts]
            rows.append({"draft": draft, "gamma": gamma, "identical": identical(got, want), "prompts": len(prompts),
                         "identical_to_captured": identical(got, own if own is not None else want)})
    return rows


# -- the widths a captured decoder ran -------------------------------------------------------------------------------
def count_widths(dec) -> dict:
    """Counts every decoder run of `dec`'s models by its width (tokens a run): {role: Counter}, filled as the decoder
    runs. On the CUDA provider a width's first run is not captured, its second is captured (and replayed at once),
    later ones replay."""
    from specdec.runtime.core.graph_io import INPUT_IDS

    counts = {}
    for role, model in (("target", dec.target), *dec.models.items()):
        seen = counts[role] = Counter()

        def run(inputs, outputs, steps=1, real=model.run, seen=seen):
            seen[int(inputs[INPUT_IDS].shape[1])] += 1
            return real(inputs, outputs, steps)

        model.run = run
    return counts


def widths_report(dec, counts: dict) -> dict:
    """Per model: its widths (1 .. its logits rows) with their run counts, and those run fewer than twice (never
    captured and replayed)."""
    out = {}
    for role, model in (("target", dec.target), *dec.models.items()):
        rows = int(model.logits.shape[0])
        runs = {n: int(counts[role].get(n, 0)) for n in range(1, rows + 1)}
        out[role] = {"widths": rows, "runs": runs, "short": [n for n, c in runs.items() if c < 2]}
    return out


# -- the device -------------------------------------------------------------------------------------------------------
def device_memory(on_gpu: bool) -> dict:
    """The device's memory in use now (all of it: this process's onnxruntime and torch, anything else running):
    torch.cuda.mem_get_info where torch sees the GPU, else nvidia-smi; on the CPU provider not measured."""
    if not on_gpu:
        return {"note": "not measured on the CPU"}
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return {"used_mib": (total - free) / 2**20, "total_mib": total / 2**20,
                    "how": "torch.cuda.mem_get_info (the whole device)"}
    except Exception:       # noqa: BLE001 - torch without CUDA: try nvidia-smi
        pass
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20)
        used, total = (float(x) for x in done.stdout.strip().splitlines()[0].split(","))
        return {"used_mib": used, "total_mib": total, "how": "nvidia-smi (the whole device)"}
    except Exception:       # noqa: BLE001 - neither: say so
        return {"note": "not measured: neither torch.cuda nor nvidia-smi answered"}


# -- kernels per step -----------------------------------------------------------------------------------------------
@contextmanager
def stderr_to(path: Path):
    """File descriptor 2 (where onnxruntime's C++ logger writes) into `path` for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)


PLACED = re.compile(r"(?:All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)")
NODE = re.compile(r"\]\s{2,}(\S+) \(")          # a placement line's node: "  OpType (name)"
WARNING = re.compile(r"\[([WE]):onnxruntime:[^\]]*\] (.*)")


def read_session_log(text: str) -> dict:
    """onnxruntime's verbose session log -> nodes placed per provider, op types per provider, and the warnings."""
    placed, ops, warnings, current = {}, {}, [], None
    for line in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        m = PLACED.search(line)
        if m:
            current = m.group(1)
            placed[current] = placed.get(current, 0) + int(m.group(2))
            ops.setdefault(current, Counter())
            continue
        m = NODE.search(line)
        if m and current is not None and "VerifyEachNodeIsAssignedToAnEp" in line:
            ops[current][m.group(1)] += 1
            continue
        if "VerifyEachNodeIsAssignedToAnEp" not in line:
            current = None
        w = WARNING.search(line)
        if w and w.group(2) not in warnings:
            warnings.append(w.group(2)[:400])
    return {"placed": placed, "ops_by_provider": {p: dict(c.most_common()) for p, c in ops.items()},
            "warnings": warnings}


def kernel_census(graph: Path, provider: str, scratch: Path, top: int = 12) -> dict:
    """The capturable decoder step as onnxruntime runs it on `provider`: a session made as the captured decoder's
    (the CUDA provider with enable_cuda_graph), its optimized graph saved (optimized_model_filepath) and counted by
    op type, and its verbose log (nodes per provider, op types per provider, warnings such as memcpy or shape
    nodes placed on the CPU). The saved graph's nodes carry no provider: the placement comes from the log."""
    import onnx
    import onnxruntime as ort

    from specdec.runtime.engine.device import default_threads, session_providers

    scratch.mkdir(parents=True, exist_ok=True)
    saved = scratch / f"optimized-{provider}.onnx"
    log_path = scratch / f"session-{provider}.log"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = default_threads()
    opts.log_severity_level = 0
    opts.log_verbosity_level = 0
    opts.optimized_model_filepath = str(saved)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", saved.name + ".data")
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    options = {"enable_cuda_graph": "1"} if provider == "cuda" else None
    out = {"graph": str(graph), "provider": provider}
    started = time.perf_counter()
    for attempt in (options, None) if options else (None,):
        try:
            with stderr_to(log_path):
                session = ort.InferenceSession(str(graph), opts, providers=session_providers(provider, graph, attempt))
            out["session_providers"] = session.get_providers()
            if provider == "cuda":
                out["enable_cuda_graph"] = session.get_provider_options().get("CUDAExecutionProvider", {}) \
                    .get("enable_cuda_graph")
            del session
            break
        except Exception as err:     # noqa: BLE001 - onnxruntime refusing the session is the finding
            # refused with enable_cuda_graph: the same session without it still shows the nodes and placements
            out["error" if attempt is None else "error_with_cuda_graph"] = \
                f"{type(err).__name__}: {first_line(err, 300, '')}"
    out["session_s"] = time.perf_counter() - started
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    out.update(read_session_log(text))
    out["log_lines"] = len(text.splitlines())
    if saved.is_file():
        model = onnx.load(str(saved), load_external_data=False)
        ops = Counter(n.op_type for n in model.graph.node)
        out["nodes"] = sum(ops.values())
        out["top_ops"] = dict(ops.most_common(top))
        out["memcpy_nodes"] = sum(c for op, c in ops.items() if op.startswith("Memcpy"))
        out["op_types"] = len(ops)
    for f in scratch.glob(f"optimized-{provider}.onnx*"):
        f.unlink()
    return out


def placement_excerpt(text: str, limit: int = 400) -> str:
    """The lines of a verbose session log worth keeping beside the results: placements, memcpy, warnings."""
    keep = [re.sub(r"\x1b\[[0-9;]*m", "", x) for x in text.splitlines()
            if "VerifyEachNodeIsAssignedToAnEp" in x or "Memcpy" in x or re.search(r"\[[WE]:onnxruntime", x)]
    return "\n".join(keep[:limit]) + ("\n" if keep else "")


def decoder_bytes(export: Path) -> int:
    """The target's capturable decoder step file(s): every weight, the embedding and the head (what a step reads)."""
    return sum(f.stat().st_size for f in (Path(export) / "target").iterdir() if f.name.startswith("capture_decoder"))

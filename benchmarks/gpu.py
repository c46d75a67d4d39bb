"""The runtime on a GPU provider, checked and timed against the CPU provider and PyTorch in one command (an NVIDIA
GPU and onnxruntime-gpu; the tests run it with --provider cpu, and on a GPU only the provider changes):

    specdec-bench gpu --provider cuda [--widen t5-large:t5-small] [--dtypes fp16,fp32] [--out gpu-check.md]

Its subject is the bundled pair widened to --widen's official shapes (`specdec-models widen`: the same function at
t5-large : t5-small cost), exported with --graph-capture in fp16 and fp32 into --work-dir (reused when there), run
eager and captured (SpeculativeDecoder.load(..., graph_capture=True): each decoder width a CUDA graph). In the order
the steps run, the most valuable first:

  1. fp16, captured   ms/token target-only and with the default (draft and gamma auto) at T = 0, on the bundled
                      test prompts; the capture session onnxruntime made (enable_cuda_graph) and device memory;
  2. fp16, greedy     eager at T = 0 (timed): captured output identical to eager target-only for target-only, the
                      default, and fixed gamma 1 .. gamma_max of the draft, lookup,draft and auto (every width of the
                      captured target runs at least twice: captured, then replayed); the widths' run counts;
  3. fp16, T = 1      ms/token captured and eager, target-only and the default (seeded requests). From here on a
                      GPU machine exports fp32 in the background (the steps it ran beside are marked);
  4. transformers     greedy generate and assisted generation (assistant_model = the widened draft) in fp16 on the
                      same weights and device;
  5. kernels          the capturable target step after onnxruntime's optimizations (optimized_model_filepath): its
                      nodes and top op types, where onnxruntime placed them (its verbose session log) and what it
                      warned about (memcpy, shape nodes on the CPU), on the provider and on the CPU;
  6. sampling         the distribution test at T = 1 (below) on the captured fp16 decoder, the exact distribution
                      from the eager fp16 decoder's logits, as many requests as fit a quarter of the time left;
  7. copies           host <-> device copies a round of the captured fp16 decoder (the draft at gamma 4);
  8. bound            the capturable target step's weight bytes / the measured copy bandwidth, per dtype;
  9. fp32             captured greedy output identical to the CPU provider's fp32 output and to eager, every width;
                      ms/token as in 1-3.

With --export DIR (or `bundled`): the earlier eager checks on that export: greedy output identical to the CPU
provider's, the distribution test (the first token of N speculative requests, the draft at gamma 3, seeds 0..N-1,
over the 4 prompts whose first-token distributions spread widest, against the softmax of the CPU provider's logits:
Pearson chi-square summed over the prompts, each over the outcomes expected >= 5 times, the rest pooled; p >= 1e-3
with >= 4 degrees of freedom passes) and the copies of a round. With --shapes T:D: random weights at official
shapes, ms/token target-only and default against transformers' greedy generate and the bandwidth bound.

Steps start while --budget-s lasts; one left out says so. The results file and --json (default: beside --out)
hold the device, the command and every figure, rewritten after every step so that a run cut short keeps what it did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import numpy as np

from specdec.runtime.core.errors import SpecdecError, first_line

from .common.tables import Table, render

P_PASS = 1e-3


def add_arguments(p) -> None:
    p.add_argument("--provider", default="cuda", choices=("cuda", "tensorrt", "cpu"),
                   help="the provider under test (default cuda); the CPU provider is the reference")
    p.add_argument("--widen", default="t5-large:t5-small", metavar="TARGET:DRAFT",
                   help="the bundled pair widened to these official shapes is the subject (default "
                        "t5-large:t5-small; 'none' leaves it out)")
    p.add_argument("--widen-from", metavar="DIR",
                   help="widen the pair in DIR/target and DIR/draft instead of the bundled pair (its prompts are "
                        "then random ids unless --prompts)")
    p.add_argument("--dtypes", default="fp16,fp32", metavar="LIST",
                   help="the widened exports, measured in this order: one or two of fp16, fp32, fp16-fused, fp32-fused "
                        "(-fused: --capture-attention fused) (default fp16,fp32)")
    p.add_argument("--gamma-max", type=int, default=8, help="the widened exports' gamma_max (default 8)")
    p.add_argument("--max-length", type=int, default=256,
                   help="the widened exports' longest prompt and decoder sequence (default 256)")
    p.add_argument("--prompts", metavar="FILE",
                   help="prompts (default: the bundled test prompts for the bundled pair, else random ids)")
    p.add_argument("--background-export", default="auto", choices=("auto", "on", "off"),
                   help="export the second dtype in a process of its own while the first is measured (auto: on a "
                        "GPU provider with 8 or more cores; the report says so)")
    p.add_argument("--export", dest="engine", default="none", metavar="DIR",
                   help="also the eager checks (greedy and sampling against the CPU provider, copies) on this export; "
                        "'bundled': the bundled pair, exported into --work-dir (default none)")
    p.add_argument("--shapes", default="none", metavar="TARGET:DRAFT",
                   help="also random weights at these official shapes, eager (default none)")
    p.add_argument("--work-dir", default="bench-results", metavar="DIR",
                   help="where checkpoints and exports are made and kept (default bench-results)")
    p.add_argument("--num-prompts", type=int, default=4, help="prompts per check (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per request (default 32)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed passes over the prompts after an untimed one; the median is reported (default 3)")
    p.add_argument("--samples", type=int, default=2000,
                   help="requests in the distribution test, fewer when the budget is short (default 2000)")
    p.add_argument("--bandwidth-gbs", type=float,
                   help="the device's memory bandwidth in GB/s (default: measured with a large copy)")
    p.add_argument("--budget-s", type=float, default=420.0, help="steps start while this lasts (default 420 s)")
    p.add_argument("--out", default="gpu-check.md", metavar="FILE.md", help="the results file (default gpu-check.md)")
    p.add_argument("--json", metavar="OUT.json", help="the figures as JSON (default: --out with .json)")


@contextmanager
def counted_copies():
    """Yields {(direction, buffer): (copies, bytes)}: a read (Buffer.flat) copies to the host; a write (write,
    scatter, copy_within) to the host and back, as on a GPU (the CPU provider touches host memory in place), or only
    to the device for a buffer no graph writes (host_only, or written with put where Buffer has it)."""
    from specdec.runtime.engine import device

    counts: dict = {}

    def counting(name: str, real):
        def call(buf, *args, **kwargs):
            key = ("device->host" if name == "flat" else "host->device", f"{list(buf.shape)} {buf.dtype.name}")
            once = name in ("flat", "put") or getattr(buf, "host_only", False)
            n, b = counts.get(key, (0, 0))
            counts[key] = (n + 1, b + buf.size * buf.itemsize * (1 if once else 2))
            return real(buf, *args, **kwargs)
        return call

    with ExitStack() as patches:
        for name in ("flat", "write", "scatter", "copy_within", "put"):
            if hasattr(device.Buffer, name):
                patches.enter_context(mock.patch.object(device.Buffer, name,
                                                        counting(name, getattr(device.Buffer, name))))
        yield counts


def copies_per_round(dec, prompt_ids, max_new_tokens: int) -> dict:
    """One warm request of Algorithm 1's loop (the draft model at gamma 4, or gamma_max when smaller; target-only
    without a draft), its copies counted per round (target run) and in all. Not the default: `auto` picks its
    sources by measured time, so which kinds of rounds it runs (and what they read) would depend on the machine's
    load."""
    draft, gamma = ("draft", min(4, dec.manifest.gamma_max)) if dec.draft is not None else ("none", 0)
    kw = dict(input_ids=prompt_ids, max_new_tokens=max_new_tokens, draft=draft, gamma=gamma)
    dec.generate(**kw)
    with counted_copies() as counts:
        result = dec.generate(**kw)
    rounds = max(result.stats.target_calls, 1)
    items = [{"direction": d, "buffer": buf, "per_round": n / rounds, "bytes_per_round": b / rounds}
             for (d, buf), (n, b) in sorted(counts.items())]
    return {"draft": draft, "gamma": gamma, "rounds": rounds, "tokens": len(result.token_ids), "copies": items,
            "copies_per_round": sum(i["per_round"] for i in items),
            "bytes_per_round": sum(i["bytes_per_round"] for i in items)}


def greedy_identity(ref, dec, prompts, max_new_tokens: int) -> dict:
    rows = []
    for draft, gamma in (("none", 0), ("draft", 4), ("auto", "auto")):
        if draft != "draft" or dec.draft is not None:
            kw = dict(max_new_tokens=max_new_tokens, draft=draft, gamma=gamma)
            same = sum(ref.generate(input_ids=p, **kw).token_ids == dec.generate(input_ids=p, **kw).token_ids
                       for p in prompts)
            rows.append({"draft": draft, "gamma": gamma, "identical": same, "prompts": len(prompts)})
    return {"rows": rows, "passed": all(r["identical"] == r["prompts"] for r in rows)}


def sampling_test(ref, dec, candidates, samples: int) -> dict:
    """Step 3 (the default without a draft) on the 4 of `candidates` whose distributions spread widest."""
    each = max(samples // 4, 1)
    dists = []
    for prompt in candidates:       # the exact first-token distribution: the CPU provider's logits of a 1-token run
        ref.generate(input_ids=prompt, max_new_tokens=1, draft="none", temperature=0)
        logits = ref.target.logits.flat()[:ref.vocab_size].astype(np.float64)
        p = np.exp(logits - logits.max())
        dists.append((np.asarray(prompt), p / p.sum()))
    dists.sort(key=lambda item: -int((item[1] * each >= 5).sum()))
    draft, gamma = ("draft", min(3, dec.gamma_max)) if dec.draft is not None else ("auto", "auto")
    stat, dof, bins, seed, proposed, accepted = 0.0, 0, 0, 0, 0, 0
    for prompt, p in dists[:4]:
        counts = np.zeros(len(p))
        for _ in range(each):
            r = dec.generate(input_ids=prompt, max_new_tokens=4, temperature=1.0, seed=seed, draft=draft, gamma=gamma)
            counts[r.token_ids[0]] += 1
            seed, proposed, accepted = seed + 1, proposed + r.stats.proposed, accepted + r.stats.accepted
        expected = p * each
        big = expected >= 5
        observed, wanted = np.append(counts[big], counts[~big].sum()), np.append(expected[big], expected[~big].sum())
        keep = wanted > 1e-9
        stat += float((((observed - wanted) ** 2)[keep] / wanted[keep]).sum())
        dof += int(keep.sum()) - 1
        bins += int(keep.sum())
    p_value = chi2_sf(stat, dof) if dof > 0 else None
    return {"draft": draft, "gamma": gamma, "samples": seed, "prompts": min(4, len(dists)), "bins": bins,
            "dof": dof, "p_value": p_value, "passed": p_value is not None and dof >= 4 and p_value >= P_PASS,
            "proposed": proposed, "accepted": accepted}


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x), X ~ chi-square(dof): torch's regularized upper incomplete gamma Q(dof/2, x/2) (scipy may be
    missing on a GPU machine)."""
    import torch

    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(max(x, 0.0) / 2.0, dtype=torch.float64)))


def failure(err: BaseException, limit: int = 200) -> str:
    """A failed step or peer as one line of the report."""
    return f"{type(err).__name__}: {first_line(err, limit, '')}"


def _timed(one, prompts, repeats: int = 1, warm_all: bool = False) -> dict:
    """`one(prompt)` -> tokens: untimed once (over every prompt with `warm_all`), then `repeats` passes over every
    prompt timed; ms per token of the median pass."""
    for p in (prompts if warm_all else prompts[:1]):
        one(p)
    passes, outputs = [], []
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        outputs = [one(p) for p in prompts]
        passes.append(1e3 * (time.perf_counter() - started) / max(sum(len(o) for o in outputs), 1))
    passes_sorted = sorted(passes)
    return {"ms_per_token": passes_sorted[len(passes) // 2], "passes": passes,
            "tokens": sum(len(o) for o in outputs), "outputs": outputs}


def ms_per_token(dec, prompts, max_new_tokens: int, **kwargs) -> dict:
    return _timed(lambda p: dec.generate(input_ids=p, max_new_tokens=max_new_tokens, **kwargs).token_ids, prompts)


def transformers_ms_per_token(checkpoint, prompts, max_new_tokens: int, eos_id: int, on_gpu: bool,
                              dtype: str = "fp32", assistant=None, repeats: int = 1,
                              models: dict | None = None) -> dict:
    """transformers' greedy generate on the same device, in `dtype` (fp16 on a GPU only: the CPU runs fp32); with
    `assistant` (a draft checkpoint) its assisted generation (assistant_model). `models`: a dict that keeps the
    loaded models for the next call."""
    import torch
    from transformers import T5ForConditionalGeneration

    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    torch_dtype = torch.float16 if dtype == "fp16" and device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    models = {} if models is None else models

    def model(path):
        key = (str(path), device, str(torch_dtype))
        if key not in models:
            models[key] = T5ForConditionalGeneration.from_pretrained(str(path), dtype=torch_dtype).eval().to(device)
        return models[key]

    target = model(checkpoint)
    extra = {} if assistant is None else {"assistant_model": model(assistant)}

    def one(ids):
        with torch.no_grad():
            out = target.generate(torch.tensor([ids], device=device), max_new_tokens=max_new_tokens, do_sample=False,
                                  num_beams=1, eos_token_id=eos_id, **extra)
        sync()
        return [int(t) for t in out[0, 1:].tolist()]       # after the decoder start token

    return {**_timed(one, prompts, repeats, warm_all=repeats > 1), "device": device,
            "dtype": str(torch_dtype).replace("torch.", ""), "assisted": assistant is not None}


def bandwidth_gbs(on_gpu: bool) -> tuple[float, str]:
    import torch

    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    a = torch.ones(256 << 20, dtype=torch.uint8, device=device)
    b, times = torch.empty_like(a), []
    for _ in range(5):
        sync()
        t = time.perf_counter()
        b.copy_(a)
        sync()
        times.append(time.perf_counter() - t)
    where = "device" if device == "cuda" else "host"
    return 2 * a.numel() / min(times) / 1e9, f"measured: a 256 MiB {where} copy (torch), best of 5"


def real_size(args, on_gpu: bool, log) -> dict:
    """Steps 5 and 6."""
    from specdec.runtime import SpeculativeDecoder

    from .common import prompts as prompts_mod
    from .shapes import measure as shapes

    target, draft = shapes.parse_pair(args.shapes)
    export_dir, _ = shapes.ensure_export(target, draft, Path(args.work_dir), 4, 128, keep_checkpoints=True, log=log,
                                         skip_check="random weights: the GPU check compares greedy tokens instead")
    ckpt = shapes.pair_root(Path(args.work_dir), target, draft, 4, 128) / "checkpoints" / target
    dec = SpeculativeDecoder.load(export_dir, provider=args.provider)
    eos = prompts_mod.special_id(dec, "eos_token_id")
    prompts = [p.input_ids for p in prompts_mod.random_prompts(dec.vocabulary.tokenizer_size, args.num_prompts,
                                                               eos_id=eos)]
    own = ms_per_token(dec, prompts, args.max_new_tokens, draft="none")
    out = {"pair": f"{target}:{draft}", "export": str(export_dir), "target_only": own,
           "default": ms_per_token(dec, prompts, args.max_new_tokens)}
    out["default"]["identical"] = out["default"]["outputs"] == own["outputs"]
    del dec
    if ckpt.is_dir():
        try:
            t = out["transformers"] = transformers_ms_per_token(ckpt, prompts, args.max_new_tokens, eos, on_gpu)
            t["identical"] = sum(a == b for a, b in zip(t["outputs"], own["outputs"]))
        except Exception as err:        # noqa: BLE001 - the peer's failure is reported, the check goes on
            out["transformers_error"] = failure(err)
    gbs, how = (args.bandwidth_gbs, "given (--bandwidth-gbs)") if args.bandwidth_gbs else bandwidth_gbs(on_gpu)
    # the target decoder's graph file(s): its weights, embedding and head included (what each step reads once)
    weights = sum(f.stat().st_size for f in (Path(export_dir) / "target").iterdir()
                  if f.name.startswith("decoder.onnx"))
    out["bound"] = {"decoder_bytes": weights, "bandwidth_gbs": gbs, "bandwidth": how,
                    "ms_per_token": 1e3 * weights / (gbs * 1e9)}
    out["cuda_graphs"] = {"error": f"not offered by the {args.provider} provider"}
    if args.provider == "cuda":
        try:
            graphed = SpeculativeDecoder.load(export_dir, provider="cuda", provider_options={"enable_cuda_graph": "1"})
            g = out["cuda_graphs"] = ms_per_token(graphed, prompts, args.max_new_tokens, draft="none")
            g["identical"] = g["outputs"] == own["outputs"]
        except Exception as err:        # the provider refuses, or a run fails: the report says how
            out["cuda_graphs"] = {"error": failure(err)}
    return out


def gpu_name() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


class LeftOut(Exception):
    """A step that finds it cannot fit the budget left: recorded with the steps left out, not as a failure."""


class Runner:
    """The report, the budget and the results files: `step` runs one piece of work into the report while the budget
    lasts (a failure is one line of the report and the next step still runs: a GPU lease is short) and rewrites the
    results after it."""

    def __init__(self, args, report: dict, log):
        self.args, self.report, self.log = args, report, log
        self.started = time.perf_counter()
        self.json = Path(args.json) if args.json else Path(args.out).with_suffix(".json")
        self.beside = lambda: None          # what else runs now (a background export), noted on each step

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.started)

    def written(self) -> None:
        self.report["elapsed_s"] = time.perf_counter() - self.started
        Path(self.args.out).write_text(render(sections(self.report), markdown=True) + "\n")
        self.json.write_text(json.dumps(self.report, indent=1, default=str) + "\n")

    def step(self, name: str, what: str, work, need_s: float = 5.0, needs: tuple = ()):
        """`work()`'s result, or None when it failed, was left out for the budget or misses a step it needs."""
        missing = [n for n in needs if n in self.report["errors"] or n in self.report["skipped"]]
        left = self.left()
        if missing:
            self.report["skipped"][name] = f"needs {', '.join(missing)}"
        elif left < need_s:
            self.report["skipped"][name] = f"{max(left, 0):.0f} s of the {self.args.budget_s:.0f} s budget left"
        if name in self.report["skipped"]:
            self.log(f"{name}: left out ({self.report['skipped'][name]})")
            self.written()
            return None
        self.log(f"[{time.perf_counter() - self.started:5.0f} s] {what}")
        t, beside = time.perf_counter(), self.beside()
        try:
            result = work()
        except LeftOut as why:
            self.report["skipped"][name] = str(why)
            self.log(f"{name}: left out ({why})")
            result = None
        except Exception as err:            # noqa: BLE001 - the report says what broke, on which step
            self.report["errors"][name] = failure(err, 300)
            self.log(f"{name}: failed: {self.report['errors'][name]}")
            result = None
        self.report["steps"].append({"step": name, "seconds": time.perf_counter() - t,
                                     **({"beside": beside} if beside else {})})
        self.written()
        return result


def capture_session(dec, provider: str) -> dict:
    """What onnxruntime made of the captured decoder's step sessions: their providers and enable_cuda_graph as the
    session reports it (onnxruntime raises while making a session it cannot capture, so a session here is the
    confirmation)."""
    out = {}
    for role, model in (("target", dec.target), *dec.models.items()):
        session = model.decoder.session
        options = session.get_provider_options().get("CUDAExecutionProvider", {})
        out[role] = {"providers": session.get_providers(), "enable_cuda_graph": options.get("enable_cuda_graph")}
    out["captured"] = provider == "cuda" and all(v["enable_cuda_graph"] == "1" for v in out.values())
    return out


def widened_steps(args, runner: Runner, provider: str, log) -> None:
    """The widened pair: steps 1-9 of the module's docstring, in that order."""
    from specdec.export.pipeline import bundled_datastore
    from specdec.runtime import SpeculativeDecoder

    from . import gpu_widened as gw
    from .common import prompts as prompts_mod

    report, on_gpu, a = runner.report, provider != "cpu", args
    pair = gw.parse_pair(a.widen)
    w = report["widened"] = {"pair": a.widen, "source": a.widen_from or "the bundled pair", "exports": {},
                             "dtypes": {}, "gamma_max": a.gamma_max, "max_length": a.max_length}
    dtypes = [d for d in a.dtypes.split(",") if d]
    work = Path(a.work_dir)
    state: dict = {"dec": {}}
    background = a.background_export == "on" or (a.background_export == "auto" and on_gpu and
                                                 (os.cpu_count() or 1) >= 8)

    def widen():
        out = gw.ensure_widened(work, pair, a.widen_from, log=log)
        state["widened"] = Path(out["dir"])
        return out

    w["checkpoints"] = runner.step("widen", f"widen {w['source']} to {a.widen}", widen, need_s=30)
    if w["checkpoints"] is None:
        return
    datastore = bundled_datastore() if a.widen_from is None else []
    exports: dict = {}

    def make_export(dtype, in_background=False):
        threads = max(1, (os.cpu_count() or 1) - 4) if in_background else None
        exports[dtype] = gw.Export(state["widened"], dtype, a.gamma_max, a.max_length, datastore,
                                   background=in_background, threads=threads, log=log)
        w["exports"][dtype] = exports[dtype].record
        return exports[dtype].record

    def wait_export(dtype):
        if dtype not in exports:
            return make_export(dtype)
        return exports[dtype].wait(timeout=max(runner.left() - 5, 1))

    def load(dtype):
        """Captured and eager decoders of `dtype` on the provider (and the CPU provider's eager fp32 as reference)."""
        t0 = time.perf_counter()
        path = exports[dtype].path
        d = w["dtypes"][dtype] = {"export": str(path)}
        cap = SpeculativeDecoder.load(path, provider=provider, graph_capture=True)
        d["capture_session"] = capture_session(cap, provider)
        report["memory"].append({"when": f"{dtype} captured loaded", **gw.device_memory(on_gpu)})
        eager = SpeculativeDecoder.load(path, provider=provider)
        report["memory"].append({"when": f"{dtype} eager loaded too", **gw.device_memory(on_gpu)})
        decs = state["dec"][dtype] = {"cap": cap, "eager": eager, "widths": gw.count_widths(cap)}
        if gw.split_variant(dtype)[0] == "fp32":
            decs["cpu"] = eager if not on_gpu else SpeculativeDecoder.load(path, provider="cpu")
        if "prompts" not in state:
            file = a.prompts or (str(prompts_mod.bundled_prompts_file()) if a.widen_from is None else None)
            chosen, origin = prompts_mod.load(file, a.num_prompts, cap)
            state["prompts"] = [p.ids for p in chosen]
            state["eos"] = prompts_mod.special_id(cap, "eos_token_id")
            w["prompts"] = {"origin": origin, "count": len(chosen), "lengths": [len(p) for p in state["prompts"]]}
        d["load_s"] = time.perf_counter() - t0
        return d

    def strip(x: dict) -> dict:
        """A timing without its outputs (kept in the state for the identity checks)."""
        return {k: v for k, v in x.items() if k != "outputs"}

    def captured_t0(dtype):
        decs, d = state["dec"][dtype], w["dtypes"][dtype]
        out = {}
        for name, kw in (("target_only", gw.TARGET_ONLY), ("default", gw.DEFAULT)):
            before = dict(decs["cap"].target.split)
            decs[f"cap_t0_{name}"] = t = gw.timed(decs["cap"], state["prompts"], a.max_new_tokens, a.repeats, **kw)
            out[name] = strip(t)
            if name == "target_only":       # a target run's time: the captured step, then the eager head
                runs = decs["cap"].target.split["runs"] - before["runs"]
                d["captured_t0_split"] = {"runs": runs, **{
                    f"{part}_ms": 1e3 * (decs["cap"].target.split[f"{part}_s"] - before[f"{part}_s"]) / max(runs, 1)
                    for part in ("step", "head")}}
        d["captured_t0"] = out
        d["widths"] = gw.widths_report(decs["cap"], decs["widths"])
        return out

    def greedy(dtype):
        """Eager at T = 0 (timed), then every identity: captured against eager (and the CPU provider at fp32)."""
        decs, d, prompts = state["dec"][dtype], w["dtypes"][dtype], state["prompts"]
        eager = {name: gw.timed(decs["eager"], prompts, a.max_new_tokens, a.repeats, **kw)
                 for name, kw in (("target_only", gw.TARGET_ONLY), ("default", gw.DEFAULT))}
        d["eager_t0"] = {k: strip(v) for k, v in eager.items()}
        want = decs["eager_t0_outputs"] = eager["target_only"]["outputs"]
        n = len(prompts)
        rows = [{"run": "captured target-only", "against": "eager target-only",
                 "identical": gw.identical(decs["cap_t0_target_only"]["outputs"], want), "prompts": n},
                {"run": "captured default", "against": "eager target-only",
                 "identical": gw.identical(decs["cap_t0_default"]["outputs"], want), "prompts": n},
                {"run": "eager default", "against": "eager target-only",
                 "identical": gw.identical(eager["default"]["outputs"], want), "prompts": n}]
        if "cpu" in decs:
            cpu = [decs["cpu"].generate(input_ids=p, max_new_tokens=a.max_new_tokens, draft="none").token_ids
                   for p in prompts]
            where = "the CPU provider (eager fp32)" + (" = the provider under test" if not on_gpu else "")
            rows += [{"run": "captured target-only", "against": where,
                      "identical": gw.identical(decs["cap_t0_target_only"]["outputs"], cpu), "prompts": n},
                     {"run": "captured default", "against": where,
                      "identical": gw.identical(decs["cap_t0_default"]["outputs"], cpu), "prompts": n},
                     {"run": "eager target-only", "against": where, "identical": gw.identical(want, cpu),
                      "prompts": n}]
        sweep = gw.gamma_sweep(decs["cap"], want, prompts, a.max_new_tokens, a.gamma_max,
                               decs["cap_t0_target_only"]["outputs"])
        rows += [{"run": f"captured {r['draft']}, gamma {r['gamma']}", "against": "eager target-only",
                  "identical": r["identical"], "prompts": r["prompts"],
                  "identical_to_captured": r["identical_to_captured"]} for r in sweep]
        d["greedy"] = {"rows": rows, "passed": all(r["identical"] == r["prompts"] for r in rows)}
        d["widths"] = gw.widths_report(decs["cap"], decs["widths"])
        return d["greedy"]

    def t1(dtype):
        decs, d = state["dec"][dtype], w["dtypes"][dtype]
        for which in ("cap", "eager"):
            d[f"{'captured' if which == 'cap' else 'eager'}_t1"] = {
                name: strip(gw.timed(decs[which], state["prompts"], a.max_new_tokens, a.repeats, temperature=1.0,
                                     **kw))
                for name, kw in (("target_only", gw.TARGET_ONLY), ("default", gw.DEFAULT))}
        d["widths"] = gw.widths_report(decs["cap"], decs["widths"])
        report["memory"].append({"when": f"{dtype} after its runs", **gw.device_memory(on_gpu)})
        return True

    def sampling(dtype):
        decs = state["dec"][dtype]
        cap, ref = decs["cap"], decs["eager"]
        candidates = state["prompts"] + [p.input_ids for p in prompts_mod.random_prompts(
            cap.vocabulary.tokenizer_size, 16, seed=1, eos_id=state["eos"])]
        t = time.perf_counter()             # what a request costs here, so that the test fits the budget
        for seed in range(8):
            cap.generate(input_ids=candidates[0], max_new_tokens=4, temperature=1.0, seed=seed, draft="draft",
                         gamma=min(3, cap.gamma_max))
        each = (time.perf_counter() - t) / 8
        fits = int(0.25 * max(runner.left() - 60, 0) / max(each, 1e-6))     # the second dtype's steps follow
        samples = min(a.samples, fits)
        if samples < min(a.samples, 500):
            raise LeftOut(f"only {samples} requests fit the budget left ({each * 1e3:.0f} ms a request)")
        out = sampling_test(ref, cap, candidates, samples)
        out["dtype"], out["reference"], out["asked"] = dtype, f"eager {dtype} on {provider}", a.samples
        w["dtypes"][dtype]["widths"] = gw.widths_report(cap, decs["widths"])
        return out

    def transformers():
        widened = state["widened"]
        models: dict = {}
        out = {}
        for name, assistant in (("greedy", None), ("assisted", widened / "draft")):
            try:
                t = transformers_ms_per_token(widened / "target", state["prompts"], a.max_new_tokens, state["eos"],
                                              on_gpu, "fp16", assistant, a.repeats, models)
                ref = state["dec"].get(dtypes[0], {}).get("eager_t0_outputs")
                t["identical_to_specdec"] = None if ref is None else gw.identical(t["outputs"], ref)
                t["prompts"] = len(t["outputs"])
                out[name] = {k: v for k, v in t.items() if k != "outputs"}
            except Exception as err:       # noqa: BLE001 - one peer failing leaves the other's figures
                out[name] = {"error": failure(err)}
        models.clear()
        if on_gpu:
            import torch

            torch.cuda.empty_cache()
        return out

    def bound():
        gbs, how = (a.bandwidth_gbs, "given (--bandwidth-gbs)") if a.bandwidth_gbs else bandwidth_gbs(on_gpu)
        out = {"bandwidth_gbs": gbs, "bandwidth": how, "dtypes": {}}
        for dtype, e in exports.items():
            if "seconds" in e.record and e.path.is_dir():
                size = gw.decoder_bytes(e.path)
                out["dtypes"][dtype] = {"decoder_bytes": size, "ms_per_token": 1e3 * size / (gbs * 1e9)}
        return out

    def kernels():
        graph = exports[dtypes[0]].path / "target" / "capture_decoder.onnx"
        scratch = work / "kernels"
        out = {}
        for where in dict.fromkeys((provider, "cpu")):
            out[where] = gw.kernel_census(graph, where, scratch)
            excerpt = gw.placement_excerpt((scratch / f"session-{where}.log").read_text(errors="replace"))
            Path(args.out).with_name(Path(args.out).stem + f"-ort-{where}.log").write_text(excerpt)
        return out

    def copies(dtype):
        decs = state["dec"][dtype]
        out = copies_per_round(decs["cap"], state["prompts"][0], a.max_new_tokens)
        out["dtype"] = dtype
        return out

    first = dtypes[0]
    if runner.step(f"export_{first}", f"export {a.widen} {first} with --graph-capture", lambda: make_export(first),
                   need_s=30) is None:
        return
    runner.step(f"{first}_load", f"{first}: load captured and eager on {provider}", lambda: load(first),
                needs=(f"export_{first}",))
    runner.step(f"{first}_captured_t0", f"{first}: captured, T = 0: target-only and the default",
                lambda: captured_t0(first), needs=(f"{first}_load",))
    runner.step(f"{first}_greedy", f"{first}: eager T = 0, greedy identity and every width",
                lambda: greedy(first), needs=(f"{first}_captured_t0",))
    for second in dtypes[1:2]:
        if background and runner.left() > 60:
            runner.step(f"export_{second}_start", f"export {second} in the background",
                        lambda: make_export(second, in_background=True))
            e = exports.get(second)
            runner.beside = lambda: (f"the {second} export" if e is not None and e.proc is not None
                                     and e.proc.poll() is None else None)
    # while a background export runs, the first dtype's other figures; then the second dtype's
    runner.step(f"{first}_t1", f"{first}: T = 1, captured and eager", lambda: t1(first),
                needs=(f"{first}_load",))
    w["transformers"] = runner.step("transformers", "transformers: greedy and assisted generate, fp16",
                                    transformers, need_s=30, needs=(f"{first}_load",))
    w["kernels"] = runner.step("kernels", "kernels per step: the optimized capturable graph, placements, warnings",
                               kernels, need_s=20, needs=(f"export_{first}",))
    w["sampling"] = runner.step("sampling_captured", f"sampling: the distribution test on the captured {first} decoder",
                                lambda: sampling(first), need_s=30, needs=(f"{first}_load",))
    w["copies"] = runner.step("copies_captured", f"copies: a round of the captured {first} decoder",
                              lambda: copies(first), needs=(f"{first}_load",))
    for second in dtypes[1:2]:
        runner.step(f"export_{second}", f"export {second} (or wait for it)", lambda: wait_export(second), need_s=20)
        runner.beside = lambda: None
    w["bound"] = runner.step("bound", "the bandwidth bound", bound, need_s=2)
    for second in dtypes[1:2]:
        state["dec"].pop(first, None)           # the first dtype's decoders are done with: free the device for these
        runner.step(f"{second}_load", f"{second}: load captured and eager on {provider}", lambda: load(second),
                    needs=(f"export_{second}",))
        runner.step(f"{second}_captured_t0", f"{second}: captured, T = 0", lambda: captured_t0(second),
                    needs=(f"{second}_load",))
        runner.step(f"{second}_greedy", f"{second}: eager T = 0, identity against eager and the CPU provider",
                    lambda: greedy(second), needs=(f"{second}_captured_t0",))
        runner.step(f"{second}_t1", f"{second}: T = 1, captured and eager", lambda: t1(second),
                    needs=(f"{second}_load",))
    state.clear()


def run(args) -> int:
    import onnxruntime as ort

    from specdec.export.pipeline import ExportOptions, bundled_datastore, bundled_pair, export_pair
    from specdec.runtime import SpeculativeDecoder, load_manifest
    from specdec.runtime.engine.device import resolve_provider

    from . import gpu_widened
    from .common import machine, prompts as prompts_mod

    if args.num_prompts < 1 or args.max_new_tokens < 2 or args.samples < 100 or args.budget_s <= 0 \
            or args.repeats < 1 or args.gamma_max < 1:
        raise SpecdecError("--num-prompts >= 1, --max-new-tokens >= 2, --samples >= 100, --repeats >= 1, "
                           "--gamma-max >= 1 and --budget-s > 0 are needed",
                           "e.g. --num-prompts 4 --max-new-tokens 32 --samples 2000")
    if args.widen != "none":
        gpu_widened.parse_pair(args.widen)
        bad = [d for d in args.dtypes.split(",") if d not in gpu_widened.VARIANTS]
        if bad or not args.dtypes.strip(","):
            raise SpecdecError(f"--dtypes {args.dtypes!r}: one or two of {', '.join(gpu_widened.VARIANTS)}, "
                               "comma-separated (-fused: the capturable graphs with fused attention)",
                               "e.g. --dtypes fp16,fp32 or --dtypes fp16,fp16-fused")
    if args.shapes != "none":
        from .shapes import measure as shapes

        shapes.parse_pair(args.shapes)
    log = lambda m: print(m, file=sys.stderr, flush=True)               # noqa: E731
    report = {"command": args.command_line, "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "providers": ort.get_available_providers(), "onnxruntime": ort.__version__,
              "provider": args.provider, "skipped": {}, "errors": {}, "steps": [], "memory": []}
    provider = resolve_provider(args.provider)          # an unavailable provider is one line, before any work
    report["machine"] = machine.describe(provider)
    report["device"] = (provider != "cpu" and gpu_name()) or report["machine"]["cpu_model"]
    report["memory"].append({"when": "start", **gpu_widened.device_memory(provider != "cpu")})
    log(f"specdec-bench gpu: {provider} on {report['device']}; onnxruntime {ort.__version__} "
        f"({', '.join(report['providers'])})")
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    runner = Runner(args, report, log)
    runner.written()
    if args.widen == "none":
        report["skipped"]["widened pair"] = "--widen none"
    else:
        widened_steps(args, runner, provider, log)

    def on_the_export() -> None:
        """The eager checks on --export; the decoders are freed when it returns."""
        engine = Path(args.work_dir) / "gpu-bundled" if args.engine == "bundled" else Path(args.engine)
        report["engine"] = str(engine)
        if args.engine == "bundled":
            try:
                load_manifest(engine)
            except SpecdecError:                    # the bundled pair, exported once
                target, draft = bundled_pair()
                export_pair(ExportOptions(target=target, draft=draft, out=engine, force=True,
                                          datastore=bundled_datastore()), log=log)
        ref = SpeculativeDecoder.load(engine, provider="cpu")
        dec = SpeculativeDecoder.load(engine, provider=provider)
        prompts = [p.ids for p in prompts_mod.load(None, args.num_prompts, dec)[0]]
        report["greedy"] = runner.step("greedy", "greedy: the provider's tokens against the CPU provider's",
                                       lambda: greedy_identity(ref, dec, prompts, args.max_new_tokens))
        candidates = prompts + [p.input_ids for p in prompts_mod.random_prompts(
            dec.vocabulary.tokenizer_size, 16, seed=1, eos_id=prompts_mod.special_id(dec, "eos_token_id"))]
        report["sampling"] = runner.step("sampling", f"sampling: {args.samples} requests at T = 1",
                                         lambda: sampling_test(ref, dec, candidates, args.samples), need_s=30)
        report["copies"] = runner.step("copies", "copies: one request's host <-> device copies",
                                       lambda: copies_per_round(dec, prompts[0], args.max_new_tokens))

    if args.engine != "none":
        runner.step("export_checks", f"the eager checks on {args.engine}", on_the_export, need_s=30)
    if args.shapes != "none":
        report["real_size"] = runner.step("real_size", f"real size: {args.shapes}, random weights",
                                          lambda: real_size(args, provider != "cpu", log), need_s=60)
    runner.written()
    print(render(sections(report)))
    print(f"wrote {args.out} and {runner.json}")
    return 0 if passed(report) else 1


def passed(r: dict) -> bool:
    """No step failed and every exactness check that ran passed."""
    checks = [d["greedy"]["passed"] for d in r.get("widened", {}).get("dtypes", {}).values() if "greedy" in d]
    checks += [x["passed"] for x in (r.get("widened", {}).get("sampling"), r.get("greedy"), r.get("sampling")) if x]
    checks.append(((r.get("real_size") or {}).get("default") or {}).get("identical", True))
    return not r["errors"] and all(checks)


def _ms(x: dict | None, key: str = "ms_per_token") -> str:
    return "-" if not x or key not in x else f"{x[key]:.2f}"


def _copies_table(c: dict, title: str) -> list:
    return [title, Table(
        f"One request ({c['draft']}, gamma {c['gamma']}): {c['rounds']} rounds, {c['tokens']} tokens; "
        f"{c['copies_per_round']:.2f} copies and {c['bytes_per_round'] / 1024:.1f} KiB a round.",
        ("direction", "buffer", "per round", "KiB per round"),
        [[x["direction"], x["buffer"], f"{x['per_round']:.2f}", f"{x['bytes_per_round'] / 1024:.1f}"]
         for x in c["copies"]])]


def _sampling_text(s: dict) -> str:
    p = "n/a" if s["p_value"] is None else format(s["p_value"], ".3g")
    return (f"First token of {s['samples']} requests on {s['prompts']} prompts ({s['draft']}, gamma {s['gamma']}; "
            f"{s['accepted']}/{s['proposed']} guesses kept) against the target's exact distribution: chi-square over "
            f"{s['bins']} bins, {s['dof']} degrees of freedom, p = {p} "
            f"({'passes' if s['passed'] else 'FAILS'}: p >= {P_PASS} with 4 or more degrees of freedom).")


def widened_sections(w: dict, memory: list, steps: list = ()) -> list:
    parts = [f"## The widened pair: {w['pair']} ({w['source']})"]
    c = w.get("checkpoints")
    lines = []
    if c:
        made = "(reused)" if c["reused"] else f"(widened in {c['seconds']:.0f} s)"
        lines.append(f"- checkpoints: `{c['dir']}` {made}")
    for dtype, e in w["exports"].items():
        how = "reused" if e["reused"] else ("being made" if "seconds" not in e else f"made in {e['seconds']:.0f} s")
        if e.get("background"):
            how += f", in the background on {e.get('threads', '?')} threads while the steps before it ran"
        lines.append(f"- {dtype} export with --graph-capture (gamma_max {w['gamma_max']}, max_length "
                     f"{w['max_length']}): `{e['dir']}` ({how})")
    if "prompts" in w:
        p = w["prompts"]
        lines.append(f"- prompts: {p['count']} from {p['origin']} (tokens: {', '.join(map(str, p['lengths']))})")
    parts.append("\n".join(lines))
    rows = []
    for dtype, d in w["dtypes"].items():
        for t in ("0", "1"):
            cap, eager = d.get(f"captured_t{t}") or {}, d.get(f"eager_t{t}") or {}
            for name, label in (("target_only", "target-only"), ("default", "default (auto)")):
                x, y = cap.get(name), eager.get(name)
                ratio = f"{y['ms_per_token'] / x['ms_per_token']:.2f}x" if x and y else "-"
                rows.append([dtype, t, label, _ms(x), _ms(y), ratio,
                             "-" if not x else f"{x['tokens_per_target_call']:.2f}"])
    beside = [f"{x['step']} (beside {x['beside']})" for x in steps if "beside" in x]
    if rows:
        parts.append(Table("### ms per generated token (median of the timed passes over the prompts)" + (
            "; these steps ran while a background export took most CPU cores, which can slow the host side of a "
            "run: " + ", ".join(beside) if beside else ""),
                           ("dtype", "T", "run", "captured", "eager", "eager / captured", "tokens a target call"),
                           rows))
    peers = []
    for name, t in (w.get("transformers") or {}).items():
        if "error" in t:
            peers.append([f"transformers {name}", "-", t["error"]])
        else:
            same = t.get("identical_to_specdec")
            peers.append([f"transformers {name} generate ({t['device']}, {t['dtype']})", _ms(t),
                          f"{t['tokens']} tokens" + ("" if same is None else
                                                     f"; output identical to specdec eager target-only on "
                                                     f"{same}/{t['prompts']} prompts")])
    b = w.get("bound")
    if b:
        for dtype, x in b["dtypes"].items():
            peers.append([f"bandwidth bound, {dtype}", f"{x['ms_per_token']:.3f}",
                          f"{x['decoder_bytes'] / 2**20:.0f} MiB capturable target step at {b['bandwidth_gbs']:.0f} "
                          f"GB/s ({b['bandwidth']})"])
    if peers:
        parts.append(Table("### Against transformers and the bandwidth bound", ("run", "ms/token", "note"), peers))
    for dtype, d in w["dtypes"].items():
        if "greedy" in d:
            g = d["greedy"]
            parts.append(Table(f"### Greedy output, {dtype} ({'all identical' if g['passed'] else 'NOT IDENTICAL'})",
                               ("run", "against", "identical", "identical to captured target-only"),
                               [[r["run"], r["against"], f"{r['identical']}/{r['prompts']}",
                                 "" if "identical_to_captured" not in r else
                                 f"{r['identical_to_captured']}/{r['prompts']}"] for r in g["rows"]]))
    for dtype, d in w["dtypes"].items():
        cs = d.get("capture_session")
        if cs:
            roles = [f"{role}: {', '.join(v['providers'])}, enable_cuda_graph={v['enable_cuda_graph']}"
                     for role, v in cs.items() if role != "captured"]
            parts.append(f"Capture sessions, {dtype}: " + "; ".join(roles) + (
                " (sessions made with CUDA graphs on)" if cs["captured"] else " (not captured on this provider)"))
        sp = d.get("captured_t0_split")
        if sp:
            parts.append(f"A captured target run, {dtype}, target-only at T = 0 ({sp['runs']} runs, their untimed "
                         f"first pass included): the step {sp['step_ms']:.3f} ms, then the speculative head as its own "
                         f"eager session {sp['head_ms']:.3f} ms.")
        if "widths" in d:
            rows = [[role, ", ".join(f"{n}: {c}" for n, c in v["runs"].items()),
                     ", ".join(map(str, v["short"])) or "none"] for role, v in d["widths"].items()]
            parts.append(Table(f"### Runs of each width, captured {dtype} (width: runs; a width's second run is "
                               "captured and replayed)", ("model", "runs by width", "run fewer than twice"), rows))
    s = w.get("sampling")
    if s:
        parts += [f"### Distribution at T = 1, captured {s['dtype']} (reference: {s['reference']})",
                  _sampling_text(s) + (f" {s['asked']} requests asked, {s['samples']} fitted the budget."
                                       if s["samples"] < s["asked"] else "")]
    k = w.get("kernels")
    if k:
        parts.append("### Kernels per step: the capturable target step after onnxruntime's optimizations")
        for where, x in k.items():
            if "nodes" not in x and "error" in x:
                parts.append(f"- {where}: {x['error']}")
                continue
            placed = ", ".join(f"{p}: {n}" for p, n in x.get("placed", {}).items()) or "not logged"
            top = ", ".join(f"{op} {n}" for op, n in x.get("top_ops", {}).items())
            minor = {p: ops for p, ops in x.get("ops_by_provider", {}).items() if p != "CUDAExecutionProvider"}
            text = [f"- {where} provider: {x.get('nodes', '?')} nodes of {x.get('op_types', '?')} op types, "
                    f"{x.get('memcpy_nodes', 0)} memcpy; placed: {placed}; session made in {x['session_s']:.1f} s"
                    + (f"; enable_cuda_graph={x['enable_cuda_graph']}" if "enable_cuda_graph" in x else "")
                    + (f"; ERROR {x['error']}" if "error" in x else "")
                    + (f"; refused with enable_cuda_graph ({x['error_with_cuda_graph']}), counted without it"
                       if "error_with_cuda_graph" in x else ""),
                    f"  - top op types: {top}"]
            if where != "cpu":
                text += [f"  - on {p}: " + ", ".join(f"{op} {n}" for op, n in ops.items()) for p, ops in minor.items()]
            text += [f"  - warning: {m}" for m in x.get("warnings", [])[:8]]
            parts.append("\n".join(text))
    c = w.get("copies")
    if c:
        parts += _copies_table(c, f"### Host <-> device copies, captured {c['dtype']}")
    rows = []
    for m in memory:
        if "used_mib" in m:
            rows.append([m["when"], f"{m['used_mib']:.0f}", f"{m['used_mib'] - memory[0].get('used_mib', 0):.0f}",
                         m["how"]])
        else:
            rows.append([m["when"], "-", "-", m["note"]])
    if rows:
        parts.append(Table("### Device memory (MiB in use on the whole device)", ("when", "used", "since start", "how"),
                           rows))
    return parts


def sections(r: dict) -> list:
    """The results file's parts, from the report as far as it got."""
    m = r.get("machine", {})
    parts = [f"# specdec on {r['provider']}: {r['device']}",
             f"- date: {r['date_utc']}; command: `{r['command']}`\n- onnxruntime {r['onnxruntime']}, providers: "
             f"{', '.join(r['providers'])}; {m.get('cpu_cores', '?')} CPU cores ({m.get('cpu_model', '?')})"
             + (f"\n- eager checks on: `{r['engine']}`" if "engine" in r else "")]
    parts += [f"- FAILED: {what}: {why}" for what, why in r["errors"].items()]
    if "widened" in r:
        parts += widened_sections(r["widened"], r["memory"], r.get("steps", []))
    if r.get("greedy"):
        parts.append(Table("## Greedy output against the CPU provider", ("draft", "gamma", "identical"),
                           [[x["draft"], str(x["gamma"]), f"{x['identical']}/{x['prompts']}"]
                            for x in r["greedy"]["rows"]]))
    if r.get("sampling"):
        parts += ["## Distribution at T = 1", _sampling_text(r["sampling"])]
    if r.get("copies"):
        parts += _copies_table(r["copies"], "## Host <-> device copies")
    if r.get("real_size"):
        z, b, g = r["real_size"], r["real_size"]["bound"], r["real_size"]["cuda_graphs"]
        rows = [["specdec target-only", f"{z['target_only']['ms_per_token']:.2f}", ""],
                ["specdec default", f"{z['default']['ms_per_token']:.2f}",
                 f"greedy identical to target-only: {z['default']['identical']}"]]
        if "transformers" in z:
            t = z["transformers"]
            rows.append([f"transformers greedy ({t['device']})", f"{t['ms_per_token']:.2f}",
                         f"identical tokens on {t['identical']}/{len(t['outputs'])} prompts"])
        if "transformers_error" in z:
            rows.append(["transformers greedy", "-", z["transformers_error"]])
        rows.append(["bandwidth bound", f"{b['ms_per_token']:.2f}", f"{b['decoder_bytes'] / 2**20:.0f} MiB of decoder "
                     f"weights at {b['bandwidth_gbs']:.0f} GB/s ({b['bandwidth']})"])
        rows.append(["target-only, CUDA graphs", "-" if "error" in g else f"{g['ms_per_token']:.2f}",
                     g.get("error") or f"identical: {g['identical']}"])
        parts.append(Table(f"## Real size: {z['pair']} (random weights)", ("run", "ms/token", "note"), rows))
    parts += [f"Left out: {what} ({why})." for what, why in r["skipped"].items()]
    steps = ", ".join(f"{x['step']} {x['seconds']:.0f} s" + (f" (beside {x['beside']})" if "beside" in x else "")
                      for x in r.get("steps", []))
    return parts + [f"Elapsed: {r.get('elapsed_s', 0):.0f} s" + (f" (steps: {steps})." if steps else ".")]

"""The runtime on a GPU in one command: on a machine with an NVIDIA GPU and onnxruntime-gpu,

    specdec-bench gpu --provider cuda [--export DIR] [--shapes t5-large:t5-small] [--out gpu-check.md]

checks and times, on the provider under test against the CPU provider and PyTorch:
  1. providers   onnxruntime's available providers and the device;
  2. greedy      the export (default: the bundled pair, exported into --work-dir) decodes every prompt to the same
                 tokens on the provider as on the CPU provider, target-only, with the draft and with the default;
  3. sampling    a distribution test at T = 1: the first token of speculative requests (the draft at gamma 3, N
                 seeds over the 4 prompts whose first-token distributions spread widest) against the target's exact
                 first-token distribution (softmax of the CPU provider's logits), Pearson chi-square summed over the
                 prompts, each over the outcomes with an expected count >= 5 (the rest pooled): p >= 1e-3 with at
                 least 4 degrees of freedom passes;
  4. copies      host <-> device copies of a round, counted at the device buffers (runtime/engine/device.py) as a
                 GPU makes them: the design reads back only the accepted count and the next token;
  5. real size   random weights at the official --shapes configurations (the export cached in --work-dir):
                 ms/token target-only and with the default, against transformers' greedy generate on the same
                 device and against the memory-bandwidth bound (the target decoder's weight bytes / bandwidth);
  6. CUDA graphs the same real-size runs with the CUDA provider's enable_cuda_graph, where it is offered.

Each step runs while the --budget-s (default 420 s) lasts; a step left out says so. One results file (Markdown,
and --json) holds the device, the command and every figure; it is rewritten after every step, so a run cut short
keeps what it did. On a CPU-only machine it runs with --provider cpu (that is how the tests run it): only the
provider changes on a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError, first_line

from .common.tables import Table, render

P_PASS = 1e-3


def add_arguments(p) -> None:
    p.add_argument("--provider", default="cuda", choices=("cuda", "tensorrt", "cpu"),
                   help="the provider under test (default cuda); the CPU provider is the reference")
    p.add_argument("--export", dest="engine", metavar="DIR",
                   help="the export to check (default: the bundled pair, exported into --work-dir)")
    p.add_argument("--shapes", default="t5-large:t5-small", metavar="TARGET:DRAFT",
                   help="the real-size pair, random weights at official configurations (default t5-large:t5-small; "
                        "'none' leaves the step out)")
    p.add_argument("--work-dir", default="bench-results", metavar="DIR",
                   help="where exports are made and cached (default bench-results)")
    p.add_argument("--num-prompts", type=int, default=4, help="prompts per check (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per request (default 32)")
    p.add_argument("--samples", type=int, default=2000, help="requests in the distribution test (default 2000)")
    p.add_argument("--bandwidth-gbs", type=float,
                   help="the device's memory bandwidth in GB/s (default: measured with a large copy)")
    p.add_argument("--budget-s", type=float, default=420.0, help="steps start while this lasts (default 420 s)")
    p.add_argument("--out", default="gpu-check.md", metavar="FILE.md", help="the results file (default gpu-check.md)")
    p.add_argument("--json", metavar="OUT.json", help="the figures as JSON too")


# -- what crosses between host and device --------------------------------------------------------------------------
@contextmanager
def counted_copies():
    """Count the host <-> device copies the device buffers make, by (direction, buffer shape and dtype): a read
    (Buffer.flat) copies the buffer to the host; a write (write, scatter, copy_within) copies it to the host and
    back, as the GPU path does (on the CPU provider the same calls touch host memory in place). Yields the dict."""
    from specdec.runtime.engine import device

    counts: dict = {}
    real = {name: getattr(device.Buffer, name) for name in ("flat", "write", "scatter", "copy_within")}

    def counting(name: str, what: str):
        def call(buf, *args, **kwargs):
            key = (what, f"{list(buf.shape)} {buf.dtype.name}")
            n, b = counts.get(key, (0, 0))
            counts[key] = (n + 1, b + buf.size * buf.itemsize * (1 if what == "device->host" else 2))
            return real[name](buf, *args, **kwargs)
        return call

    for name in real:
        setattr(device.Buffer, name, counting(name, "device->host" if name == "flat" else "host->device"))
    try:
        yield counts
    finally:
        for name, fn in real.items():
            setattr(device.Buffer, name, fn)


def copies_per_round(dec, prompt_ids, max_new_tokens: int) -> dict:
    """One warm request with the default, its copies counted: per round (target run) and in all."""
    dec.generate(input_ids=prompt_ids, max_new_tokens=max_new_tokens)
    with counted_copies() as counts:
        result = dec.generate(input_ids=prompt_ids, max_new_tokens=max_new_tokens)
    rounds = max(result.stats.target_calls, 1)
    items = [{"direction": d, "buffer": buf, "per_round": n / rounds, "bytes_per_round": b / rounds}
             for (d, buf), (n, b) in sorted(counts.items())]
    return {"rounds": rounds, "tokens": len(result.token_ids), "copies": items,
            "copies_per_round": sum(i["per_round"] for i in items),
            "bytes_per_round": sum(i["bytes_per_round"] for i in items)}


# -- exactness ---------------------------------------------------------------------------------------------------
def greedy_identity(ref, dec, prompts, max_new_tokens: int) -> dict:
    """Greedy tokens on the provider under test against the CPU provider's, for none, draft and the default."""
    rows = []
    for draft, gamma in (("none", 0), ("draft", 4), ("auto", "auto")):
        if draft != "draft" or dec.draft is not None:
            kw = dict(max_new_tokens=max_new_tokens, draft=draft, gamma=gamma)
            same = sum(ref.generate(input_ids=p, **kw).token_ids == dec.generate(input_ids=p, **kw).token_ids
                       for p in prompts)
            rows.append({"draft": draft, "gamma": gamma, "identical": same, "prompts": len(prompts)})
    return {"rows": rows, "passed": all(r["identical"] == r["prompts"] for r in rows)}


def first_token_distribution(ref, prompt_ids) -> np.ndarray:
    """The target's exact first-token distribution at T = 1: softmax (float64) of the logits the CPU provider's
    target computes for the first step (read from its logits buffer after a one-token request)."""
    ref.generate(input_ids=prompt_ids, max_new_tokens=1, draft="none", temperature=0)
    logits = ref.target.logits.flat()[:ref.vocab_size].astype(np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def sampling_test(ref, dec, candidates, samples: int, strata: int = 4) -> dict:
    """N speculative requests (the draft at gamma 3, T = 1; the default without a draft): their first tokens against
    first_token_distribution. The `strata` prompts of `candidates` whose distributions spread widest share the N
    requests (seeds 0..N-1); Pearson chi-square summed over them, each over its outcomes expected >= 5 times (the
    rest pooled), with the summed degrees of freedom."""
    dists = [(np.asarray(c), first_token_distribution(ref, c)) for c in candidates]
    each = max(samples // strata, 1)
    dists.sort(key=lambda item: -int((item[1] * each >= 5).sum()))
    draft, gamma = ("draft", 3) if dec.draft is not None else ("auto", "auto")
    stat, dof, bins, seed, proposed, accepted = 0.0, 0, 0, 0, 0, 0
    for prompt, p in dists[:strata]:
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
    return {"draft": draft, "gamma": gamma, "samples": seed, "prompts": min(strata, len(dists)), "bins": bins,
            "dof": dof, "p_value": p_value, "passed": p_value is not None and dof >= 4 and p_value >= P_PASS,
            "proposed": proposed, "accepted": accepted}


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-square with `dof` degrees of freedom: the regularized upper incomplete gamma Q(dof/2,
    x/2), torch's (the check needs torch; scipy may be missing on a GPU machine; the tests compare it with
    scipy.stats.chi2.sf)."""
    import torch

    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(max(x, 0.0) / 2.0, dtype=torch.float64)))


def failure(err: BaseException, limit: int = 200) -> str:
    """An exception as one line of the report (its type and its message's first line): a step or a peer that failed."""
    return f"{type(err).__name__}: {first_line(err, limit, '')}"


# -- timing ------------------------------------------------------------------------------------------------------
def _timed(one, prompts) -> dict:
    """`one(prompt)` -> tokens: once untimed, then over every prompt timed: ms per generated token and the tokens."""
    one(prompts[0])
    started = time.perf_counter()
    outputs = [one(p) for p in prompts]
    seconds = time.perf_counter() - started
    tokens = sum(len(o) for o in outputs)
    return {"ms_per_token": 1e3 * seconds / max(tokens, 1), "tokens": tokens, "outputs": outputs}


def ms_per_token(dec, prompts, max_new_tokens: int, **kwargs) -> dict:
    return _timed(lambda p: dec.generate(input_ids=p, max_new_tokens=max_new_tokens, **kwargs).token_ids, prompts)


def transformers_ms_per_token(checkpoint, prompts, max_new_tokens: int, eos_id: int, on_gpu: bool) -> dict:
    """transformers' greedy generate (fp32) on the same device: ms per token and the tokens."""
    import torch
    from transformers import T5ForConditionalGeneration

    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    model = T5ForConditionalGeneration.from_pretrained(str(checkpoint)).eval().to(device)

    def one(ids):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=device), max_new_tokens=max_new_tokens, do_sample=False,
                                 num_beams=1, eos_token_id=eos_id)
        if device == "cuda":
            torch.cuda.synchronize()
        return [int(t) for t in out[0, 1:].tolist()]       # after the decoder start token

    return {**_timed(one, prompts), "device": device}


def bandwidth_gbs(on_gpu: bool) -> tuple[float, str]:
    """Copy bandwidth (GB/s, read + write counted) of a 256 MiB buffer on the device, best of 5."""
    import torch

    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    a = torch.ones(256 << 20, dtype=torch.uint8, device=device)
    b, best = torch.empty_like(a), float("inf")
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        b.copy_(a)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * a.numel() / best / 1e9, f"measured: a 256 MiB {'device' if device == 'cuda' else 'host'} copy " \
        "(torch), best of 5"


def real_size(args, on_gpu: bool, log) -> dict:
    """Steps 5 and 6: the --shapes pair's ms/token against transformers', the bandwidth bound and CUDA graphs."""
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
            out["transformers"] = transformers_ms_per_token(ckpt, prompts, args.max_new_tokens, eos, on_gpu)
            out["transformers"]["identical"] = sum(a == b for a, b in zip(out["transformers"]["outputs"],
                                                                          own["outputs"]))
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
            out["cuda_graphs"] = ms_per_token(graphed, prompts, args.max_new_tokens, draft="none")
            out["cuda_graphs"]["identical"] = out["cuda_graphs"]["outputs"] == own["outputs"]
        except Exception as err:        # the provider refuses, or a run fails: the report says how
            out["cuda_graphs"] = {"error": failure(err)}
    return out


# -- the command -------------------------------------------------------------------------------------------------
def device_name(provider: str) -> str:
    if provider != "cpu":
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                   "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    from .common import machine

    return machine.describe(provider)["cpu_model"]


def bundled_export(workdir: Path, log) -> Path:
    """The bundled pair exported into workdir/gpu-bundled (once)."""
    from specdec.export.pair import ExportOptions, bundled_datastore, bundled_pair, export_pair
    from specdec.runtime import load_manifest

    out = Path(workdir) / "gpu-bundled"
    try:
        load_manifest(out)
    except SpecdecError:
        target, draft = bundled_pair()
        export_pair(ExportOptions(target=target, draft=draft, out=out, force=True, datastore=bundled_datastore()),
                    log=log)
    return out


def run(args) -> int:
    import onnxruntime as ort

    from specdec.runtime import SpeculativeDecoder
    from specdec.runtime.engine.device import resolve_provider

    from .common import machine, prompts as prompts_mod

    if args.num_prompts < 1 or args.max_new_tokens < 2 or args.samples < 100 or args.budget_s <= 0:
        raise SpecdecError("--num-prompts >= 1, --max-new-tokens >= 2, --samples >= 100 and --budget-s > 0 are "
                           "needed", "e.g. --num-prompts 4 --max-new-tokens 32 --samples 2000")
    started = time.perf_counter()
    log = lambda m: print(m, file=sys.stderr, flush=True)               # noqa: E731
    report = {"command": args.command_line,
              "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "providers": ort.get_available_providers(), "onnxruntime": ort.__version__,
              "provider": args.provider, "skipped": {}}
    provider = resolve_provider(args.provider)          # an unavailable provider is one line, before any work
    report["device"] = device_name(provider)
    report["machine"] = machine.describe(provider)
    log(f"specdec-bench gpu: {provider} on {report['device']}; onnxruntime {ort.__version__} "
        f"({', '.join(report['providers'])})")
    engine = Path(args.engine) if args.engine else bundled_export(Path(args.work_dir), log)
    report["engine"] = str(engine)
    report["errors"] = {}

    def written() -> None:
        """The results file as far as the run got, should a time limit cut it."""
        report["elapsed_s"] = time.perf_counter() - started
        Path(args.out).write_text(render(sections(report), markdown=True) + "\n")

    def step(name: str, what: str, work) -> None:
        """One step; a failure is recorded in one line and the next step still runs (a GPU lease is short)."""
        log(what)
        try:
            report[name] = work()
        except Exception as err:            # noqa: BLE001 - the report says what broke, on which step
            report["errors"][name] = failure(err, 300)
            log(f"{name}: failed: {report['errors'][name]}")
        written()

    def on_the_export() -> None:
        """Steps 2-4; the decoders are freed when it returns, before the real-size step loads its own."""
        ref = SpeculativeDecoder.load(engine, provider="cpu")
        dec = SpeculativeDecoder.load(engine, provider=provider)
        prompts = [p.ids for p in prompts_mod.load(None, args.num_prompts, dec)[0]]
        step("greedy", "greedy: the provider's tokens against the CPU provider's",
             lambda: greedy_identity(ref, dec, prompts, args.max_new_tokens))
        candidates = prompts + [p.input_ids for p in prompts_mod.random_prompts(
            dec.vocabulary.tokenizer_size, 16, seed=1, eos_id=prompts_mod.special_id(dec, "eos_token_id"))]
        step("sampling", f"sampling: {args.samples} requests at T = 1",
             lambda: sampling_test(ref, dec, candidates, args.samples))
        step("copies", "copies: one request's host <-> device copies",
             lambda: copies_per_round(dec, prompts[0], args.max_new_tokens))

    on_the_export()
    left = args.budget_s - (time.perf_counter() - started)
    if args.shapes == "none":
        report["skipped"]["real size"] = "--shapes none"
    elif left < 60:
        report["skipped"]["real size"] = f"{left:.0f} s of the {args.budget_s:.0f} s budget left"
    else:
        step("real_size", f"real size: {args.shapes}, random weights",
             lambda: real_size(args, provider != "cpu", log))
    written()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(render(sections(report)))
    print(f"wrote {args.out}" + (f" and {args.json}" if args.json else ""))
    passed = not report["errors"] and report["greedy"]["passed"] and report["sampling"]["passed"] and \
        report.get("real_size", {}).get("default", {}).get("identical", True)
    return 0 if passed else 1


def sections(r: dict) -> list:
    """The results file's parts (tables.render), from the report as far as it got."""
    parts = [f"# specdec on {r['provider']}: {r['device']}",
             f"- date: {r['date_utc']}; command: `{r['command']}`\n- onnxruntime {r['onnxruntime']}, providers: "
             f"{', '.join(r['providers'])}\n- export checked: `{r['engine']}`"]
    parts += [f"- FAILED: {what}: {why}" for what, why in r.get("errors", {}).items()]
    if "greedy" in r:
        parts.append(Table("## Greedy output against the CPU provider", ("draft", "gamma", "identical"),
                           [[x["draft"], str(x["gamma"]), f"{x['identical']}/{x['prompts']}"]
                            for x in r["greedy"]["rows"]]))
    if "sampling" in r:
        s = r["sampling"]
        parts += ["## Distribution at T = 1",
                  f"First token of {s['samples']} requests on {s['prompts']} prompts ({s['draft']}, gamma "
                  f"{s['gamma']}; {s['accepted']}/{s['proposed']} guesses kept) against the target's exact "
                  f"distribution: chi-square over {s['bins']} bins, {s['dof']} degrees of freedom, p = "
                  f"{'n/a' if s['p_value'] is None else format(s['p_value'], '.3g')} "
                  f"({'passes' if s['passed'] else 'FAILS'}: p >= {P_PASS} with 4 or more degrees of freedom)."]
    if "copies" in r:
        c = r["copies"]
        parts += ["## Host <-> device copies", Table(
            f"One request with the default: {c['rounds']} rounds, {c['tokens']} tokens; {c['copies_per_round']:.2f} "
            f"copies and {c['bytes_per_round'] / 1024:.1f} KiB a round.",
            ("direction", "buffer", "per round", "KiB per round"),
            [[x["direction"], x["buffer"], f"{x['per_round']:.2f}", f"{x['bytes_per_round'] / 1024:.1f}"]
             for x in c["copies"]])]
    if "real_size" in r:
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
        rows.append(["target-only, CUDA graphs", "-", g["error"]] if "error" in g else
                    ["target-only, CUDA graphs", f"{g['ms_per_token']:.2f}", f"identical: {g['identical']}"])
        parts.append(Table(f"## Real size: {z['pair']} (random weights)", ("run", "ms/token", "note"), rows))
    parts += [f"Left out: {what} ({why})." for what, why in r["skipped"].items()]
    return parts + [f"Elapsed: {r['elapsed_s']:.0f} s."]

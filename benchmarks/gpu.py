"""The runtime on a GPU provider, checked and timed against the CPU provider and PyTorch in one command (an NVIDIA
GPU and onnxruntime-gpu; the tests run it with --provider cpu, and on a GPU only the provider changes):

    specdec-bench gpu --provider cuda [--export DIR] [--shapes t5-large:t5-small] [--out gpu-check.md]

  1. providers   onnxruntime's available providers and the device;
  2. greedy      every prompt decodes to the CPU provider's tokens: target-only, with the draft and the default;
  3. sampling    at T = 1, the first token of N speculative requests (the draft at gamma 3, seeds 0..N-1, over the 4
                 prompts whose first-token distributions spread widest) against the target's exact distribution
                 (softmax of the CPU provider's logits): Pearson chi-square summed over the prompts, each over the
                 outcomes expected >= 5 times (the rest pooled); p >= 1e-3 with >= 4 degrees of freedom passes;
  4. copies      host <-> device copies of a round of the draft model at gamma 4, counted at the device buffers: by
                 design only the accepted count and the next token come back;
  5. real size   random weights at the official --shapes configurations: ms/token target-only and with the default,
                 against transformers' greedy generate on the same device and the memory-bandwidth bound (the target
                 decoder's weight bytes / bandwidth);
  6. CUDA graphs the same runs with the CUDA provider's enable_cuda_graph, where it is offered.

Steps start while --budget-s lasts; one left out says so. The results file (and --json) holds the device, the command
and every figure, rewritten after every step so that a run cut short keeps what it did.
"""

from __future__ import annotations

import json
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


@contextmanager
def counted_copies():
    """Yields {(direction, buffer): (copies, bytes)}: a read (Buffer.flat) copies to the host; a write (write,
    scatter, copy_within) to the host and back, as on a GPU (the CPU provider touches host memory in place)."""
    from specdec.runtime.engine import device

    counts: dict = {}

    def counting(name: str, real):
        def call(buf, *args, **kwargs):
            key = ("device->host" if name == "flat" else "host->device", f"{list(buf.shape)} {buf.dtype.name}")
            n, b = counts.get(key, (0, 0))
            counts[key] = (n + 1, b + buf.size * buf.itemsize * (1 if name == "flat" else 2))
            return real(buf, *args, **kwargs)
        return call

    with ExitStack() as patches:
        for name in ("flat", "write", "scatter", "copy_within"):
            patches.enter_context(mock.patch.object(device.Buffer, name, counting(name, getattr(device.Buffer, name))))
        yield counts


def copies_per_round(dec, prompt_ids, max_new_tokens: int) -> dict:
    """One warm request of Algorithm 1's loop (the draft model at gamma 4; target-only without a draft), its copies
    counted per round (target run) and in all. Not the default: `auto` picks its sources by measured time, so which
    kinds of rounds it runs (and what they read) would depend on the machine's load."""
    draft, gamma = ("draft", 4) if dec.draft is not None else ("none", 0)
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
    draft, gamma = ("draft", 3) if dec.draft is not None else ("auto", "auto")
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


def _timed(one, prompts) -> dict:
    """`one(prompt)` -> tokens: once untimed, then over every prompt timed."""
    one(prompts[0])
    started = time.perf_counter()
    outputs = [one(p) for p in prompts]
    seconds = time.perf_counter() - started
    tokens = sum(len(o) for o in outputs)
    return {"ms_per_token": 1e3 * seconds / max(tokens, 1), "tokens": tokens, "outputs": outputs}


def ms_per_token(dec, prompts, max_new_tokens: int, **kwargs) -> dict:
    return _timed(lambda p: dec.generate(input_ids=p, max_new_tokens=max_new_tokens, **kwargs).token_ids, prompts)


def transformers_ms_per_token(checkpoint, prompts, max_new_tokens: int, eos_id: int, on_gpu: bool) -> dict:
    """transformers' greedy generate (fp32) on the same device."""
    import torch
    from transformers import T5ForConditionalGeneration

    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    model = T5ForConditionalGeneration.from_pretrained(str(checkpoint)).eval().to(device)

    def one(ids):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=device), max_new_tokens=max_new_tokens, do_sample=False,
                                 num_beams=1, eos_token_id=eos_id)
        sync()
        return [int(t) for t in out[0, 1:].tolist()]       # after the decoder start token

    return {**_timed(one, prompts), "device": device}


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


def run(args) -> int:
    import onnxruntime as ort

    from specdec.export.pair import ExportOptions, bundled_datastore, bundled_pair, export_pair
    from specdec.runtime import SpeculativeDecoder, load_manifest
    from specdec.runtime.engine.device import resolve_provider

    from .common import machine, prompts as prompts_mod

    if args.num_prompts < 1 or args.max_new_tokens < 2 or args.samples < 100 or args.budget_s <= 0:
        raise SpecdecError("--num-prompts >= 1, --max-new-tokens >= 2, --samples >= 100 and --budget-s > 0 are "
                           "needed", "e.g. --num-prompts 4 --max-new-tokens 32 --samples 2000")
    started = time.perf_counter()
    log = lambda m: print(m, file=sys.stderr, flush=True)               # noqa: E731
    report = {"command": args.command_line, "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "providers": ort.get_available_providers(), "onnxruntime": ort.__version__,
              "provider": args.provider, "skipped": {}, "errors": {}}
    provider = resolve_provider(args.provider)          # an unavailable provider is one line, before any work
    report["machine"] = machine.describe(provider)
    report["device"] = (provider != "cpu" and gpu_name()) or report["machine"]["cpu_model"]
    log(f"specdec-bench gpu: {provider} on {report['device']}; onnxruntime {ort.__version__} "
        f"({', '.join(report['providers'])})")
    engine = Path(args.engine or Path(args.work_dir) / "gpu-bundled")
    report["engine"] = str(engine)
    if not args.engine:
        try:
            load_manifest(engine)
        except SpecdecError:                    # the bundled pair, exported once
            target, draft = bundled_pair()
            export_pair(ExportOptions(target=target, draft=draft, out=engine, force=True,
                                      datastore=bundled_datastore()), log=log)

    def written() -> None:
        report["elapsed_s"] = time.perf_counter() - started
        Path(args.out).write_text(render(sections(report), markdown=True) + "\n")

    def step(name: str, what: str, work) -> None:
        """A failure is recorded in one line and the next step still runs (a GPU lease is short)."""
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
    """The results file's parts, from the report as far as it got."""
    parts = [f"# specdec on {r['provider']}: {r['device']}",
             f"- date: {r['date_utc']}; command: `{r['command']}`\n- onnxruntime {r['onnxruntime']}, providers: "
             f"{', '.join(r['providers'])}\n- export checked: `{r['engine']}`"]
    parts += [f"- FAILED: {what}: {why}" for what, why in r["errors"].items()]
    if "greedy" in r:
        parts.append(Table("## Greedy output against the CPU provider", ("draft", "gamma", "identical"),
                           [[x["draft"], str(x["gamma"]), f"{x['identical']}/{x['prompts']}"]
                            for x in r["greedy"]["rows"]]))
    if "sampling" in r:
        s = r["sampling"]
        p = "n/a" if s["p_value"] is None else format(s["p_value"], ".3g")
        parts += ["## Distribution at T = 1",
                  f"First token of {s['samples']} requests on {s['prompts']} prompts ({s['draft']}, gamma "
                  f"{s['gamma']}; {s['accepted']}/{s['proposed']} guesses kept) against the target's exact "
                  f"distribution: chi-square over {s['bins']} bins, {s['dof']} degrees of freedom, p = {p} "
                  f"({'passes' if s['passed'] else 'FAILS'}: p >= {P_PASS} with 4 or more degrees of freedom)."]
    if "copies" in r:
        c = r["copies"]
        parts += ["## Host <-> device copies", Table(
            f"One request ({c['draft']}, gamma {c['gamma']}): {c['rounds']} rounds, {c['tokens']} tokens; "
            f"{c['copies_per_round']:.2f} copies and {c['bytes_per_round'] / 1024:.1f} KiB a round.",
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
        rows.append(["target-only, CUDA graphs", "-" if "error" in g else f"{g['ms_per_token']:.2f}",
                     g.get("error") or f"identical: {g['identical']}"])
        parts.append(Table(f"## Real size: {z['pair']} (random weights)", ("run", "ms/token", "note"), rows))
    parts += [f"Left out: {what} ({why})." for what, why in r["skipped"].items()]
    return parts + [f"Elapsed: {r['elapsed_s']:.0f} s."]

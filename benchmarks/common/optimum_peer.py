"""Optimum's ONNX Runtime T5 (optimum-onnx's ORTModelForSeq2SeqLM) as a peer of `specdec-bench sweep|drafts --peers`.

A plain script that imports nothing from specdec, run by the --peer-python interpreter (a venv with optimum-onnx,
onnxruntime and a CPU torch: optimum-onnx pins transformers < 4.58) as `PYTHON -I optimum_peer.py < request.json`:

    {"protocol": 1, "target": DIR, "draft": DIR, "cache": {"target": DIR, "draft": DIR},
     "prompts": [[ids], ...], "max_new_tokens": N, "repeats": R, "threads": T, "gamma": G}

Each checkpoint is exported once into its cache directory (Optimum's default layout, use_cache=True) and loaded on
CPUExecutionProvider, T intra-op threads (torch, which runs generate's loop, too). Two engines, timed by `measure`:
greedy generate, and assisted with assistant_model = the ORT draft, G tokens a call, schedule "constant". The
response, one JSON line on stdout (all else printed goes to stderr):

    {"protocol": 1, "error": null or "one line", "missing": null or "a package",
     "versions": {...}, "export": {"target": {...}, "draft": {...}},
     "engines": {"greedy": {"status": "ok", "tokens": [[ids as generate returned them], ...],
                            "seconds": [[s per prompt] per repeat]},
                 "assisted": {"status": "ok" | "error: one line", ...}}}
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

PROTOCOL = 1
STAMP = "specdec-optimum-export.json"


def one_line(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}" if text else type(err).__name__


def versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("optimum-onnx", "optimum", "transformers", "onnxruntime", "torch", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def load(role: str, checkpoint: str, cache: str, threads: int, found: dict, log) -> tuple:
    """The ORT model of one checkpoint, exported into `cache` once per optimum-onnx/transformers/torch versions."""
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    out = Path(cache)
    stamp = {"checkpoint": str(Path(checkpoint).resolve()),
             "versions": {k: found[k] for k in ("optimum-onnx", "optimum", "transformers", "torch")}}
    info = {"dir": str(out), "exported": False, "export_s": None}
    try:
        cached = json.loads((out / STAMP).read_text()) == stamp
    except (OSError, ValueError):
        cached = False
    if not cached:
        log(f"optimum-ort: exporting the {role} {checkpoint} to ONNX in {out}")
        started = time.perf_counter()
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        ORTModelForSeq2SeqLM.from_pretrained(checkpoint, export=True, use_cache=True).save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        (out / STAMP).write_text(json.dumps(stamp))
        info["exported"], info["export_s"] = True, time.perf_counter() - started
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    model = ORTModelForSeq2SeqLM.from_pretrained(str(out), use_cache=True, use_merged=False,
                                                 provider="CPUExecutionProvider", session_options=options)
    info["files"] = sorted(p.name for p in out.glob("*.onnx"))
    info["use_cache"] = bool(model.config.use_cache)
    return model, info


class Generate:
    """Hugging Face `generate`, greedy; an assistant proposes a constant `gamma` tokens a call, no confidence
    early-exit (Algorithm 1's setting). peers.py's transformers peer uses it too."""

    def __init__(self, model, assistant=None, gamma: int = 0):
        import torch

        self.torch, self.model, self.assistant = torch, model, assistant
        if assistant is not None:
            cfg = assistant.generation_config
            cfg.num_assistant_tokens = gamma
            cfg.num_assistant_tokens_schedule = "constant"
            cfg.assistant_confidence_threshold = 0.0

    def run(self, ids: list, max_new_tokens: int) -> list:
        torch = self.torch
        x = torch.tensor([ids], dtype=torch.long)
        extra = {} if self.assistant is None else {"assistant_model": self.assistant}
        with torch.inference_mode():
            out = self.model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                                      do_sample=False, num_beams=1, **extra)
        return [int(t) for t in out[0].tolist()]


def explain(name: str, err: BaseException) -> str:
    """One line on why an engine failed; the known case of assisted generation spelled out."""
    if name == "assisted" and isinstance(err, AttributeError) and "crop" in str(err):
        found = versions()
        return (f"optimum-onnx {found['optimum-onnx']}'s ORTModelForSeq2SeqLM takes no assistant_model: its past "
                f"key values are tuples, transformers {found['transformers']}'s assisted decoding calls Cache.crop "
                f"({one_line(err)})")
    return one_line(err)


def measure(engines: dict, prompts: list, max_new_tokens: int, repeats: int, progress=None) -> dict:
    """{name: {"status", "tokens", "seconds": [[s per prompt] per repeat]}}: a first pass for the tokens, then the
    repeats. Each engine runs all prompts as one block after an unmeasured call (runtimes' worker threads spin a
    while after a call, slowing whichever engine runs next), the block order rotating every repeat."""
    result = {}
    for name, engine in engines.items():
        try:
            result[name] = {"status": "ok", "tokens": [engine.run(p, max_new_tokens) for p in prompts],
                            "seconds": [[0.0] * len(prompts) for _ in range(repeats)]}
        except Exception as err:            # e.g. an assistant the ORT model cannot take: say why, go on
            result[name] = {"status": f"error: {explain(name, err)}"}
    working = [name for name in engines if result[name]["status"] == "ok"]
    bar = progress(repeats * (len(prompts) + 1) * len(working)) if progress else None
    for r in range(repeats if working else 0):
        for name in working[r % len(working):] + working[:r % len(working)]:
            try:
                for i, p in enumerate([prompts[0]] + prompts if result[name]["status"] == "ok" else []):
                    t = time.perf_counter()
                    engines[name].run(p, max_new_tokens)
                    if i:
                        result[name]["seconds"][r][i - 1] = time.perf_counter() - t
                    if bar:
                        bar.update(1)
            except Exception as err:
                result[name] = {"status": f"error: {explain(name, err)}"}
    if bar:
        bar.close()
    return result


def serve(request: dict, log) -> dict:
    response = {"protocol": PROTOCOL, "error": None, "missing": None, "versions": None, "export": {},
                "engines": {}}
    if request.get("protocol") != PROTOCOL:
        response["error"] = f"request protocol {request.get('protocol')!r}, this worker speaks {PROTOCOL}"
        return response
    try:
        for module in ("optimum.onnxruntime", "onnxruntime"):     # first: fails fast without them
            __import__(module)
        import torch
        import transformers
    except ImportError as err:
        response["error"] = one_line(err)
        response["missing"] = getattr(err, "name", None) or "optimum-onnx"
        return response
    response["versions"] = found = versions()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    threads = int(request["threads"])
    torch.set_num_threads(threads)
    prompts = [[int(t) for t in p] for p in request["prompts"]]
    repeats = int(request["repeats"])
    try:
        models = {}
        for role in ("target", "draft"):
            models[role], response["export"][role] = load(role, request[role], request["cache"][role], threads,
                                                          found, log)
    except Exception as err:
        response["error"] = f"export/load failed: {one_line(err)}"
        return response
    engines = {"greedy": Generate(models["target"]),
               "assisted": Generate(models["target"], models["draft"], int(request["gamma"]))}
    log(f"optimum-ort: timing greedy and assisted generate, {len(prompts)} prompts x {repeats} repeats")
    response["engines"] = measure(engines, prompts, int(request["max_new_tokens"]), repeats)
    return response


def main() -> int:
    # Only the response goes to stdout: whatever Python or native code prints is sent to stderr instead.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        response = serve(json.loads(sys.stdin.read()), lambda message: print(message, file=sys.stderr, flush=True))
    except Exception as err:
        response = {"protocol": PROTOCOL, "error": one_line(err), "missing": None, "engines": {}}
    out.write(json.dumps(response) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

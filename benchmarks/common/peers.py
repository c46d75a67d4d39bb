"""Peers a user would pick instead, on the same checkpoints, prompts and max_new_tokens, greedy, in one run:

    transformers greedy        T5ForConditionalGeneration.generate on PyTorch (fp32), the target alone
    transformers assisted      the same with assistant_model = the draft, a constant gamma draft tokens per call
                               (no confidence early-exit): Algorithm 1's setting, like for like with specdec's
    ctranslate2 greedy         the target converted to CTranslate2, run at compute_type float32 (no quantization)
    ctranslate2 int8 greedy    the same conversion at compute_type int8 (weights quantized when loaded)
    optimum-ort greedy         Optimum's ORTModelForSeq2SeqLM (optimum-onnx) generate, the target exported by
                               Optimum, in a separate venv (--peer-python) and process (optimum_peer.py)
    optimum-ort assisted       the same with assistant_model = Optimum's export of the draft, gamma as above

Each is compared with specdec's speculative path and its own autoregressive path (latency ratios), and its greedy
tokens with specdec's. Every failure of a peer is one line in the peers' table.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specdec.runtime.core.errors import SpecdecError, first_line

from .optimum_peer import Generate, measure
from .prompts import special_id

CT2_COMPUTE_TYPES = ("float32", "int8")
OPTIMUM = "optimum-ort"                     # the one row of a worker that did not run, or failed as a whole
OPTIMUM_GREEDY = "optimum-ort greedy"
OPTIMUM_WORKER = Path(__file__).with_name("optimum_peer.py")
OPTIMUM_PROTOCOL = 1
OPTIMUM_TIMEOUT_S = 1800.0
OPTIMUM_INSTALL = "pip install torch==2.13.0 optimum-onnx==0.1.0 onnxruntime"


@dataclass
class Engine:
    """A peer: run(ids, max_new_tokens) -> its greedy tokens; own_ar: the name of its own autoregressive path."""
    name: str
    note: str
    own_ar: str
    run: Callable
    compute_type: str | None = None           # CTranslate2's


def normalize(tokens, eos_id: int, drop_first: bool = False) -> list:
    """Generated ids up to and including the first EOS (HF: drop the decoder start token, cut the padding)."""
    out = [int(t) for t in tokens][1 if drop_first else 0:]
    return out[:out.index(eos_id) + 1] if eos_id in out else out


def specdec_engine(dec, gamma, draft: str = "draft") -> Engine:
    def run(ids, max_new_tokens):
        return list(dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft=draft, gamma=gamma,
                                 temperature=0.0).token_ids)
    name, note = (("specdec default", "draft=auto gamma=auto") if draft == "auto" else
                  (f"specdec gamma={gamma}", "speculative" if gamma else "target only"))
    return Engine(name, "ONNX Runtime, " + note, "specdec gamma=0", run)


def hf_engine(target, eos_id: int, assistant=None, gamma: int = 0) -> Engine:
    generate = Generate(target, assistant, gamma)
    name, note = (("transformers greedy", "PyTorch generate") if assistant is None else
                  (f"transformers assisted gamma={gamma}", "PyTorch, assistant_model=draft"))
    return Engine(name, note, "transformers greedy",
                  lambda ids, n: normalize(generate.run(ids, n), eos_id, drop_first=True))


def load_hf(path: str):
    import torch
    import transformers
    from transformers import T5ForConditionalGeneration

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return T5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()


def cache_name(checkpoint: str) -> str:
    """NAME-PATHHASH-FILESHASH: a cache directory name that changes with the checkpoint's path and files."""
    key = hashlib.sha256(str(Path(checkpoint).resolve()).encode()).hexdigest()[:12]
    files = sorted(p for p in Path(checkpoint).iterdir() if p.is_file())
    stamp = hashlib.sha256("".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
                           .encode()).hexdigest()[:12]
    return f"{Path(checkpoint).name}-{key}-{stamp}"


def ct2_name(compute_type: str) -> str:
    return "ctranslate2 greedy" if compute_type == "float32" else f"ctranslate2 {compute_type} greedy"


def ct2_engines(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log,
                compute_types=CT2_COMPUTE_TYPES) -> tuple[dict, dict]:
    """({compute_type: Engine}, {compute_type: "ok" or why not}): the target converted to CTranslate2 once (fp32,
    cached under workdir/ct2), loaded at each compute_type (int8: quantized when loaded)."""
    def error(err):
        return f"error: {type(err).__name__}: {first_line(err, 160, '')}"

    try:
        import ctranslate2
    except ImportError:
        return {}, dict.fromkeys(compute_types, 'not installed (pip install -e ".[bench]", which brings '
                                                "ctranslate2)")
    out = Path(workdir) / "ct2" / cache_name(target)
    try:
        if not (out / "model.bin").is_file():
            log(f"converting {target} to CTranslate2 (fp32) in {out}")
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(target).convert(str(out), quantization=None, force=True)
    except Exception as err:     # a converter that does not know this transformers/T5 variant: say so, go on
        return {}, dict.fromkeys(compute_types, error(err))
    # the converted model's tokens by row (its padded rows have names of their own); else the tokenizer's
    vocab = out / "shared_vocabulary.json"
    tokens = (json.loads(vocab.read_text()) if vocab.is_file() else
              [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())])
    rows = {t: i for i, t in enumerate(tokens)}
    engines, status = {}, {}
    for compute_type in compute_types:
        try:
            translator = ctranslate2.Translator(str(out), device="cpu", compute_type=compute_type, inter_threads=1,
                                                intra_threads=threads)
        except Exception as err:     # e.g. a compute type this CPU build does not support
            status[compute_type] = error(err)
            continue

        def run(ids, max_new_tokens, translator=translator):
            res = translator.translate_batch([[tokens[i] for i in ids]], beam_size=1,
                                             max_decoding_length=max_new_tokens, return_end_token=True)
            return normalize([rows[t] for t in res[0].hypotheses[0]], eos_id)

        name = ct2_name(compute_type)
        quantized = " (no quantization)" if compute_type == "float32" else " (weights quantized when loaded)"
        engines[compute_type] = Engine(name, f"compute_type {compute_type}{quantized}, intra_threads {threads}",
                                       name, run, compute_type)
        status[compute_type] = "ok"
    return engines, status


def parse_optimum_response(stdout: str, prompts: int, repeats: int) -> dict:
    """The worker's response (the last JSON line of its stdout), checked against the protocol; a one-line ValueError
    when it is not that."""
    response = None
    for line in reversed([line for line in stdout.splitlines() if line.strip().startswith("{")]):
        with contextlib.suppress(ValueError):
            response = json.loads(line)
            break
    if not isinstance(response, dict):
        raise ValueError("the Optimum worker wrote no JSON response")
    if response.get("protocol") != OPTIMUM_PROTOCOL:
        raise ValueError(f"the Optimum worker speaks protocol {response.get('protocol')!r}, not {OPTIMUM_PROTOCOL}")
    engines = response.get("engines") or {}
    if not isinstance(engines, dict):
        raise ValueError("the Optimum worker's 'engines' is not an object")

    def lists(value, n, ok):
        return isinstance(value, list) and len(value) == n and all(isinstance(x, list) and all(map(ok, x))
                                                                   for x in value)

    for name, e in engines.items():
        if not isinstance(e, dict) or not isinstance(e.get("status"), str):
            raise ValueError(f"the Optimum worker's engine '{name}' has no status")
        if e["status"] != "ok":
            continue
        if not lists(e.get("tokens"), prompts, lambda i: isinstance(i, int)):
            raise ValueError(f"the Optimum worker's engine '{name}' did not return {prompts} token lists")
        if not lists(e.get("seconds"), repeats, lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
                     and math.isfinite(x) and x >= 0) or any(len(row) != prompts for row in e["seconds"]):
            raise ValueError(f"the Optimum worker's engine '{name}' did not return {repeats} x {prompts} seconds")
    return response


def optimum_results(response: dict, eos_id: int, gamma: int) -> tuple[dict, dict, dict]:
    """({name: {"tokens" (normalized), "seconds", "note", "own_ar"}}, {name: why not}, info) of a parsed response."""
    found = response.get("versions") or {}
    info = {"versions": found, "export": response.get("export") or {}}
    if response.get("missing"):
        return {}, {OPTIMUM: f"not installed in the --peer-python venv: {response['missing']} ({OPTIMUM_INSTALL} "
                             f"there)"}, info
    if response.get("error"):
        return {}, {OPTIMUM: f"error: {' '.join(str(response['error']).split())[:240]}"}, info
    note = f"optimum-onnx {found.get('optimum-onnx')}, onnxruntime {found.get('onnxruntime')}, own process"
    results, status = {}, {}
    for key, name, engine_note in (("greedy", OPTIMUM_GREEDY, note + ", generate"),
                                   ("assisted", f"optimum-ort assisted gamma={gamma}",
                                    note + ", assistant_model=ORT draft")):
        e = response["engines"].get(key)
        if e is None:
            status[name] = "error: the Optimum worker did not run it"
        elif e["status"] != "ok":
            status[name] = " ".join(e["status"].split())[:400]
        else:
            results[name] = {"tokens": [normalize(t, eos_id, drop_first=True) for t in e["tokens"]],
                             "seconds": e["seconds"], "note": engine_note, "own_ar": OPTIMUM_GREEDY}
    return results, status, info


def run_worker(argv: list, request: str, timeout: float, env: dict, log) -> tuple[str, str, int]:
    """(stdout, stderr, exit status); its "optimum-ort: ..." lines on stderr go to log as they come. Past `timeout`
    it is killed: subprocess.TimeoutExpired with the stderr so far."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    stderr, proc.stderr, err = proc.stderr, None, []        # read here, line by line, not by communicate

    def read_stderr():
        for line in stderr:
            err.append(line)
            if line.startswith("optimum-ort:"):
                log(line.rstrip())

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(request, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        reader.join(5)
        raise subprocess.TimeoutExpired(argv, timeout, stderr="".join(err)) from None
    reader.join()
    stderr.close()
    return out, "".join(err), proc.returncode


def optimum_peers(python: str | None, target: str, draft: str, prompts: list, max_new_tokens: int, gamma: int,
                  repeats: int, threads: int, workdir: Path, eos_id: int, timeout: float = OPTIMUM_TIMEOUT_S,
                  log=print) -> tuple[dict, dict, dict]:
    """Optimum's greedy and assisted, run by optimum_peer.py with the interpreter `python` in one subprocess:
    (results, status, info) as optimum_results gives them."""
    if not python:
        return {}, {OPTIMUM: "not run: add --peer-python PYTHON, a venv's interpreter with optimum-onnx "
                             "(benchmarks/README.md, Peers)"}, {}
    exe = python if os.sep in python else (shutil.which(python) or python)
    info = {"python": python}
    if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
        return {}, {OPTIMUM: f"not run: --peer-python {python} is not an executable interpreter (create the venv: "
                             f"python3 -m venv DIR && DIR/bin/{OPTIMUM_INSTALL}; pass DIR/bin/python)"}, info
    cache = Path(workdir).resolve() / "optimum"
    request = {"protocol": OPTIMUM_PROTOCOL, "target": str(Path(target).resolve()), "draft": str(Path(draft).resolve()),
               "cache": {"target": str(cache / cache_name(target)), "draft": str(cache / cache_name(draft))},
               "prompts": [[int(t) for t in ids] for ids in prompts], "max_new_tokens": int(max_new_tokens),
               "repeats": int(repeats), "threads": int(threads), "gamma": int(gamma)}
    log_path = cache / "worker-stderr.txt"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    info["log"] = str(log_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    log(f"optimum-ort: running {OPTIMUM_WORKER.name} with {python} (exports cached in {cache})")
    try:
        stdout, stderr, code = run_worker([exe, "-I", str(OPTIMUM_WORKER)], json.dumps(request), timeout, env, log)
    except subprocess.TimeoutExpired as err:
        log_path.write_text(err.stderr or "")
        return {}, {OPTIMUM: f"error: the Optimum worker timed out after {timeout:g} s (raise --peer-timeout; "
                             f"its log: {log_path})"}, info
    except OSError as err:
        return {}, {OPTIMUM: f"error: cannot run --peer-python {python}: {first_line(err, 160)}"}, info
    log_path.write_text(stderr)
    try:
        response = parse_optimum_response(stdout, len(prompts), repeats)
    except ValueError as err:
        last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
        return {}, {OPTIMUM: f"error: {err} (exit status {code}{': ' + last[:160] if last else ''}; "
                             f"its log: {log_path})"}, info
    results, status, more = optimum_results(response, eos_id, gamma)
    if status.get(OPTIMUM, "").startswith("error"):
        status[OPTIMUM] += f" (its log: {log_path})"
    info.update(more)
    return results, status, info


def run_peers(dec, prompts, max_new_tokens: int, gamma: int, repeats: int, workdir: Path, threads: int = 0,
              target: str | None = None, draft: str | None = None, progress_factory=None, log=print,
              peer_python: str | None = None, peer_timeout: float = OPTIMUM_TIMEOUT_S,
              default: bool = False) -> dict:
    """Every peer's tokens checked against specdec's, all timed interleaved, then Optimum's in their own process.
    specdec's speculative engine: the draft at `gamma`, or with `default` draft and gamma "auto"."""
    # the checkpoints the export was made from (its manifest), unless given
    paths = {role: given or dec.manifest.models[role].source for role, given in (("target", target), ("draft", draft))}
    for role, path in paths.items():
        if not Path(path).is_dir():
            raise SpecdecError(f"the {role} checkpoint '{path}' (from the export's manifest) is not a local directory",
                               f"pass --{role}-checkpoint DIR with the checkpoint the export was made from")
    target, draft = paths.values()
    eos_id = special_id(dec, "eos_token_id")
    threads = threads or os.cpu_count() or 1
    engines = [specdec_engine(dec, "auto", "auto") if default else specdec_engine(dec, gamma), specdec_engine(dec, 0)]
    status = {}
    try:
        import torch

        torch.set_num_threads(threads)
        hf_target, hf_draft = load_hf(target), load_hf(draft)
        engines += [hf_engine(hf_target, eos_id), hf_engine(hf_target, eos_id, assistant=hf_draft, gamma=gamma)]
    except ImportError:
        status["transformers greedy"] = status[f"transformers assisted gamma={gamma}"] = \
            'not installed (pip install -e ".[export]")'
    ct2, why = ct2_engines(target, workdir, threads, dec.tokenizer, eos_id, log)
    engines += ct2.values()
    status.update({ct2_name(t): w for t, w in why.items() if t not in ct2})

    if default:
        # the peers are greedy: auto starts from fresh estimates and learns them on the first pass below, as each
        # temperature of the draft table does (a sampling temperature's estimates, the table's last, would decide
        # its first rounds: after a T = 1 pass that ran plain steps it measured 1.05x target-only, 1.44x in the table)
        dec.reset_estimates()
    reference = [engines[1].run(p.ids, max_new_tokens) for p in prompts]
    ids = [p.ids for p in prompts]
    measured = measure({e.name: e for e in engines}, ids, max_new_tokens, repeats,
                       progress_factory and (lambda total: progress_factory(total, "peers")))
    # After the in-process engines, so its export and model loads overlap none of their timings. Its repeats pair
    # with the others' by index in the ratios below, as theirs do with each other.
    remote, why, optimum_info = optimum_peers(peer_python, target, draft, ids, max_new_tokens, gamma, repeats,
                                              threads, workdir, eos_id, peer_timeout, log)
    status.update(why)
    rows = {e.name: (e.note, e.own_ar) for e in engines} | {n: (r["note"], r["own_ar"]) for n, r in remote.items()}
    measured |= {name: dict(r, status="ok") for name, r in remote.items()}
    times = {name: [(sum(row), sum(map(len, m["tokens"]))) for row in m["seconds"]]     # (seconds, tokens) per repeat
             for name, m in measured.items() if m["status"] == "ok"}

    def ratio(name, other):
        if other not in times:
            return None
        return statistics.median(a / b for (a, _), (b, _) in zip(times[name], times[other]))

    result = {}
    for name, (note, own_ar) in rows.items():
        if name not in times:
            result[name] = {"status": measured[name]["status"], "note": note}
            continue
        ms = [1000.0 * t / max(n, 1) for t, n in times[name]]
        same = [a == b for a, b in zip(measured[name]["tokens"], reference)]
        result[name] = {
            "status": "ok", "note": note,
            "ms_per_token": {"median": statistics.median(ms), "min": min(ms), "max": max(ms)},
            "tokens_per_s": 1000.0 / statistics.median(ms),
            "ratio_to_specdec_speculative": ratio(name, engines[0].name),
            "ratio_to_specdec_gamma0": ratio(name, "specdec gamma=0"),
            "ratio_to_own_autoregressive": ratio(name, own_ar) if own_ar != name else None,
            "agreement": {"agree": sum(same), "prompts": len(prompts),
                          "first_mismatch": next((i for i, s in enumerate(same) if not s), None)},
        }
    for name, why in status.items():
        result.setdefault(name, {"status": why, "note": ""})
    return {"gamma": gamma, "repeats": repeats, "max_new_tokens": max_new_tokens, "threads": threads,
            "target_checkpoint": target, "draft_checkpoint": draft, "optimum": optimum_info,
            "ratio_definition": "peer wall time / other wall time over the same prompts (same greedy tokens); "
                                ">1: the other is faster",
            "engines": result}

"""Peers a user would pick instead, on the same checkpoints, prompts and max_new_tokens, greedy, in one run:

    transformers greedy        T5ForConditionalGeneration.generate on PyTorch (fp32), the target alone
    transformers assisted      the same with assistant_model = the draft, a constant gamma draft tokens per call
                               (num_assistant_tokens_schedule "constant", no confidence early-exit): Algorithm 1's
                               setting, so it is compared like for like with specdec's speculative path
    ctranslate2 greedy         the target converted to CTranslate2, run at compute_type float32 (no
                               quantization), when installed
    ctranslate2 int8 greedy    the same conversion at compute_type int8 (weights quantized when loaded)
    optimum-ort greedy         Optimum's ORTModelForSeq2SeqLM (optimum-onnx) generate, the target exported by
                               Optimum, in a separate venv (--peer-python) and process (optimum_peer.py)
    optimum-ort assisted       the same with assistant_model = Optimum's export of the draft, gamma as above

Each is reported as a latency ratio (its time / specdec's time, the same tokens being generated, so > 1 means
specdec is faster) to specdec's speculative path and to its own autoregressive path, and its greedy tokens are
compared with specdec's.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError, first_line

CT2_COMPUTE_TYPES = ("float32", "int8")


def normalize(tokens, eos_id: int, drop_first: bool = False) -> list:
    """Generated ids up to and including the first EOS (HF: drop the decoder start token, cut the padding)."""
    out = [int(t) for t in tokens]
    if drop_first:
        out = out[1:]
    if eos_id in out:
        out = out[:out.index(eos_id) + 1]
    return out


def checkpoints(dec, target: str | None, draft: str | None) -> tuple[str, str]:
    """The checkpoints the export was made from (recorded in its manifest), unless given."""
    models = dec.manifest.models
    target = target or models["target"].source
    draft = draft or models["draft"].source
    for role, path in (("target", target), ("draft", draft)):
        if not Path(path).is_dir():
            raise SpecdecError(f"the {role} checkpoint '{path}' (from the export's manifest) is not a local "
                               "directory", f"pass --{role}-checkpoint DIR with the checkpoint the export was made from")
    return target, draft


class Engine:
    name = ""
    note = ""
    own_ar = None            # the name of this engine's own autoregressive path

    def run(self, ids: list, max_new_tokens: int) -> list:
        raise NotImplementedError


class SpecdecEngine(Engine):
    """specdec greedy: the draft model at a fixed gamma (0: target only), or the default (draft and gamma "auto")."""

    def __init__(self, dec, gamma, draft: str = "draft"):
        self.dec, self.gamma, self.draft = dec, gamma, draft
        if draft == "auto":
            self.name, self.note = "specdec default", "ONNX Runtime, draft=auto gamma=auto"
        else:
            self.name = f"specdec gamma={gamma}" if gamma else "specdec gamma=0"
            self.note = "ONNX Runtime, speculative" if gamma else "ONNX Runtime, target only"
        self.own_ar = "specdec gamma=0"

    def run(self, ids, max_new_tokens):
        res = self.dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft=self.draft, gamma=self.gamma,
                                temperature=0.0)
        return list(res.token_ids)


class HFEngine(Engine):
    def __init__(self, target, eos_id: int, assistant=None, gamma: int = 0):
        from .optimum_peer import Generate

        self.generate, self.eos_id = Generate(target, assistant, gamma), eos_id
        if assistant is not None:
            self.name = f"transformers assisted gamma={gamma}"
            self.note = "PyTorch, assistant_model=draft"
        else:
            self.name = "transformers greedy"
            self.note = "PyTorch generate"
        self.own_ar = "transformers greedy"

    def run(self, ids, max_new_tokens):
        return normalize(self.generate.run(ids, max_new_tokens), self.eos_id, drop_first=True)


class CT2Engine(Engine):
    def __init__(self, translator, tokenizer, eos_id: int, threads: int, compute_type: str = "float32"):
        self.translator, self.tokenizer, self.eos_id = translator, tokenizer, eos_id
        self.compute_type = compute_type
        self.name = ct2_name(compute_type)
        self.note = (f"compute_type {compute_type}" + (" (no quantization)" if compute_type == "float32" else
                                                       " (weights quantized when loaded)")
                     + f", intra_threads {threads}")
        self.own_ar = self.name

    def run(self, ids, max_new_tokens):
        tokens = [self.tokenizer.id_to_token(i) for i in ids]
        res = self.translator.translate_batch([tokens], beam_size=1, max_decoding_length=max_new_tokens,
                                              return_end_token=True)
        return normalize([self.tokenizer.token_to_id(t) for t in res[0].hypotheses[0]], self.eos_id)


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


def _ct2(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log, compute_type: str = "float32"):
    """A CTranslate2 translator converted (once, cached under workdir) from the target checkpoint."""
    engines, status = ct2_engines(target, workdir, threads, tokenizer, eos_id, log, (compute_type,))
    return engines.get(compute_type), status[compute_type]


def ct2_engines(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log,
                compute_types=("float32", "int8")) -> tuple[dict, dict]:
    """({compute_type: CT2Engine}, {compute_type: "ok" or why not}): the target checkpoint converted once (fp32,
    cached under workdir/ct2) and loaded at each compute_type (int8: CTranslate2 quantizes the weights when it
    loads them, the same as converting with quantization="int8")."""
    try:
        import ctranslate2
    except ImportError:
        return {}, {t: "not installed (pip install 'specdec[bench]', which brings ctranslate2)"
                    for t in compute_types}
    out = Path(workdir) / "ct2" / cache_name(target)

    def error(err):
        return f"error: {type(err).__name__}: {first_line(err, 160, '')}"

    try:
        if not (out / "model.bin").is_file():
            log(f"converting {target} to CTranslate2 (fp32) in {out}")
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(target).convert(str(out), quantization=None, force=True)
    except Exception as err:     # a converter that does not know this transformers/T5 variant: say so, go on
        return {}, {t: error(err) for t in compute_types}
    engines, status = {}, {}
    for compute_type in compute_types:
        try:
            translator = ctranslate2.Translator(str(out), device="cpu", compute_type=compute_type, inter_threads=1,
                                                intra_threads=threads)
        except Exception as err:     # e.g. a compute type this CPU build does not support
            status[compute_type] = error(err)
            continue
        engines[compute_type] = CT2Engine(translator, tokenizer, eos_id, threads, compute_type)
        status[compute_type] = "ok"
    return engines, status


OPTIMUM = "optimum-ort"                     # the one row of a worker that did not run, or failed as a whole
OPTIMUM_GREEDY = "optimum-ort greedy"
OPTIMUM_WORKER = Path(__file__).with_name("optimum_peer.py")
OPTIMUM_PROTOCOL = 1
OPTIMUM_TIMEOUT_S = 1800.0
OPTIMUM_INSTALL = "pip install torch==2.13.0 optimum-onnx==0.1.0 onnxruntime"


def optimum_assisted_name(gamma: int) -> str:
    return f"optimum-ort assisted gamma={gamma}"


class RemoteEngine(Engine):
    """A peer timed in its own process (optimum_peer.py): its tokens and times come back as JSON."""

    def __init__(self, name: str, note: str, own_ar: str):
        self.name, self.note, self.own_ar = name, note, own_ar

    def run(self, ids, max_new_tokens):
        raise NotImplementedError(f"{self.name} runs in its own process (optimum_peer.py), not here")


def optimum_request(target: str, draft: str, prompts: list, max_new_tokens: int, repeats: int, threads: int,
                    gamma: int, workdir: Path) -> dict:
    """The worker's request: the checkpoints, where their ONNX exports are cached, the prompts' ids, the settings."""
    cache = Path(workdir).resolve() / "optimum"
    return {"protocol": OPTIMUM_PROTOCOL, "target": str(Path(target).resolve()), "draft": str(Path(draft).resolve()),
            "cache": {"target": str(cache / cache_name(target)), "draft": str(cache / cache_name(draft))},
            "prompts": [[int(t) for t in ids] for ids in prompts], "max_new_tokens": int(max_new_tokens),
            "repeats": int(repeats), "threads": int(threads), "gamma": int(gamma)}


def parse_optimum_response(stdout: str, prompts: int, repeats: int) -> dict:
    """The worker's response (the last line of its stdout that is a JSON object), checked against the protocol:
    every engine with status "ok" has `prompts` token lists and `repeats` rows of `prompts` seconds. A ValueError
    with a one-line message when it is not that."""
    response = None
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                response = json.loads(line)
            except ValueError:
                continue
            break
    if not isinstance(response, dict):
        raise ValueError("the Optimum worker wrote no JSON response")
    if response.get("protocol") != OPTIMUM_PROTOCOL:
        raise ValueError(f"the Optimum worker speaks protocol {response.get('protocol')!r}, not {OPTIMUM_PROTOCOL}")
    engines = response.get("engines") or {}
    if not isinstance(engines, dict):
        raise ValueError("the Optimum worker's 'engines' is not an object")
    for name, e in engines.items():
        if not isinstance(e, dict) or not isinstance(e.get("status"), str):
            raise ValueError(f"the Optimum worker's engine '{name}' has no status")
        if e["status"] != "ok":
            continue
        tokens, seconds = e.get("tokens"), e.get("seconds")
        if not (isinstance(tokens, list) and len(tokens) == prompts and
                all(isinstance(t, list) and all(isinstance(i, int) for i in t) for t in tokens)):
            raise ValueError(f"the Optimum worker's engine '{name}' did not return {prompts} token lists")
        if not (isinstance(seconds, list) and len(seconds) == repeats and
                all(isinstance(row, list) and len(row) == prompts and
                    all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                        for x in row) for row in seconds)):
            raise ValueError(f"the Optimum worker's engine '{name}' did not return {repeats} x {prompts} seconds")
    return response


def optimum_results(response: dict, eos_id: int, gamma: int) -> tuple[dict, dict, dict]:
    """({name: {"tokens": normalized per prompt, "seconds": [[s per prompt] per repeat], "note", "own_ar"}},
    {name: why not}, info) from a parsed response."""
    found = response.get("versions") or {}
    info = {"versions": found, "export": response.get("export") or {}}
    if response.get("missing"):
        return {}, {OPTIMUM: f"not installed in the --peer-python venv: {response['missing']} ({OPTIMUM_INSTALL} "
                             f"there)"}, info
    if response.get("error"):
        return {}, {OPTIMUM: f"error: {' '.join(str(response['error']).split())[:240]}"}, info
    note = f"optimum-onnx {found.get('optimum-onnx')}, onnxruntime {found.get('onnxruntime')}, own process"
    names = {"greedy": (OPTIMUM_GREEDY, note + ", generate"),
             "assisted": (optimum_assisted_name(gamma), note + ", assistant_model=ORT draft")}
    results, status = {}, {}
    for key, (name, engine_note) in names.items():
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
    """(stdout, stderr, exit status) of a worker fed `request` on stdin; its "optimum-ort: ..." progress lines on
    stderr are passed to log as they come. subprocess.TimeoutExpired (with the stderr so far) when it runs past
    `timeout`: it is killed."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    out, err = [], []

    def read_stdout():
        out.append(proc.stdout.read())

    def read_stderr():
        for line in proc.stderr:
            err.append(line)
            if line.startswith("optimum-ort:"):
                log(line.rstrip())

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for t in readers:
        t.start()
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except BrokenPipeError:                 # it exited before reading: its stderr says why
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        for t in readers:
            t.join(5)
        raise subprocess.TimeoutExpired(argv, timeout, stderr="".join(err)) from None
    for t in readers:
        t.join()
    return "".join(out), "".join(err), proc.returncode


def optimum_peers(python: str | None, target: str, draft: str, prompts: list, max_new_tokens: int, gamma: int,
                  repeats: int, threads: int, workdir: Path, eos_id: int, timeout: float = OPTIMUM_TIMEOUT_S,
                  log=print) -> tuple[dict, dict, dict]:
    """Optimum's ORTModelForSeq2SeqLM greedy and assisted, run by optimum_peer.py with the interpreter `python` (a
    separate venv) in one subprocess for all prompts: (results, status, info) as optimum_results gives them. Every
    failure (no interpreter, no optimum there, export error, timeout, a bad response) is one line in status."""
    if not python:
        return {}, {OPTIMUM: "not run: add --peer-python PYTHON, a venv's interpreter with optimum-onnx "
                             "(benchmarks/README.md, Peers)"}, {}
    exe = python if os.sep in python else (shutil.which(python) or python)
    info = {"python": python}
    if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
        return {}, {OPTIMUM: f"not run: --peer-python {python} is not an executable interpreter (create the venv: "
                             f"python3 -m venv DIR && DIR/bin/{OPTIMUM_INSTALL}; pass DIR/bin/python)"}, info
    request = optimum_request(target, draft, prompts, max_new_tokens, repeats, threads, gamma, workdir)
    log_path = Path(workdir).resolve() / "optimum" / "worker-stderr.txt"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    info["log"] = str(log_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    log(f"optimum-ort: running {OPTIMUM_WORKER.name} with {python} (exports cached in {log_path.parent})")
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
    """Load every peer, check its greedy tokens against specdec's, then time all of them interleaved; then Optimum's
    ORT peers in their own process (peer_python), timed there the same way. specdec's speculative engine is the
    draft model at `gamma`, or with `default` its default (draft and gamma "auto"); peers' assistants use `gamma`."""
    from .prompts import special_id

    target, draft = checkpoints(dec, target, draft)
    eos_id = special_id(dec, "eos_token_id")
    threads = threads or os.cpu_count() or 1
    engines: list[Engine] = [SpecdecEngine(dec, "auto", "auto") if default else SpecdecEngine(dec, gamma),
                             SpecdecEngine(dec, 0)]
    status = {}
    try:
        import torch

        torch.set_num_threads(threads)
        hf_target, hf_draft = load_hf(target), load_hf(draft)
        engines.append(HFEngine(hf_target, eos_id))
        engines.append(HFEngine(hf_target, eos_id, assistant=hf_draft, gamma=gamma))
    except ImportError:
        status["transformers greedy"] = status[f"transformers assisted gamma={gamma}"] = \
            "not installed (pip install 'specdec[export]')"
    ct2, why = ct2_engines(target, workdir, threads, dec.tokenizer, eos_id, log, CT2_COMPUTE_TYPES)
    for compute_type in CT2_COMPUTE_TYPES:
        if compute_type in ct2:
            engines.append(ct2[compute_type])
        else:
            status[ct2_name(compute_type)] = why[compute_type]

    reference = [SpecdecEngine(dec, 0).run(p.ids, max_new_tokens) for p in prompts]
    outputs, working = {}, []
    for e in engines:                       # first call of each: correctness, and warm-up
        try:
            outputs[e.name] = [e.run(p.ids, max_new_tokens) for p in prompts]
            working.append(e)
        except Exception as err:            # a peer that breaks on this model is reported, not fatal
            status[e.name] = f"error: {type(err).__name__}: {first_line(err, 160, '')}"

    # Each engine runs all prompts as one block, after one unmeasured call: PyTorch's, CTranslate2's and ONNX
    # Runtime's worker threads keep spinning for a while after a call, so engines alternating prompt by prompt
    # would slow whichever runs next. The block order rotates every repeat, so drift still spreads evenly.
    times = {e.name: [[0.0, 0] for _ in range(repeats)] for e in working}
    bar = progress_factory(repeats * (len(prompts) + 1) * len(working), "peers") if progress_factory else None
    for r in range(repeats):
        order = working[r % len(working):] + working[:r % len(working)]
        for e in order:
            e.run(prompts[0].ids, max_new_tokens)
            if bar:
                bar.update(1)
            for p in prompts:
                t = time.perf_counter()
                out = e.run(p.ids, max_new_tokens)
                times[e.name][r][0] += time.perf_counter() - t
                times[e.name][r][1] += len(out)
                if bar:
                    bar.update(1)
    if bar:
        bar.close()

    # After the in-process engines, so its export and model loads overlap none of their timings. Its repeats pair
    # with the others' by index in the ratios below, as theirs do with each other.
    remote, why, optimum_info = optimum_peers(peer_python, target, draft, [p.ids for p in prompts], max_new_tokens,
                                              gamma, repeats, threads, workdir, eos_id, peer_timeout, log)
    status.update(why)
    for name, r in remote.items():
        engines.append(RemoteEngine(name, r["note"], r["own_ar"]))
        outputs[name] = r["tokens"]
        count = sum(len(t) for t in r["tokens"])
        times[name] = [[sum(row), count] for row in r["seconds"]]

    spec_name = engines[0].name
    result = {}
    for e in engines:
        if e.name not in times:
            result[e.name] = {"status": status.get(e.name, "error"), "note": e.note}
            continue
        seconds = [t for t, _ in times[e.name]]
        ms = [1000.0 * t / max(n, 1) for t, n in times[e.name]]

        def ratio(other):
            if other not in times:
                return None
            return statistics.median(a / b for a, b in zip(seconds, (t for t, _ in times[other])))

        agree = sum(a == b for a, b in zip(outputs[e.name], reference))
        result[e.name] = {
            "status": "ok", "note": e.note,
            "ms_per_token": {"median": statistics.median(ms), "min": min(ms), "max": max(ms)},
            "tokens_per_s": 1000.0 / statistics.median(ms),
            "ratio_to_specdec_speculative": ratio(spec_name),
            "ratio_to_specdec_gamma0": ratio("specdec gamma=0"),
            "ratio_to_own_autoregressive": ratio(e.own_ar) if e.own_ar != e.name else None,
            "agreement": {"agree": agree, "prompts": len(prompts),
                          "first_mismatch": next((i for i, (a, b) in enumerate(zip(outputs[e.name], reference))
                                                  if a != b), None)},
        }
    for name, why in status.items():
        result.setdefault(name, {"status": why, "note": ""})
    return {"gamma": gamma, "repeats": repeats, "max_new_tokens": max_new_tokens, "threads": threads,
            "target_checkpoint": target, "draft_checkpoint": draft, "optimum": optimum_info,
            "ratio_definition": "peer wall time / other wall time over the same prompts (same greedy tokens); "
                                ">1: the other is faster",
            "engines": result}

"""Optimum's ONNX Runtime peer from this side: the request to optimum_peer.py (run by another venv's interpreter,
--peer-python, in its own process), running it with a time limit, and reading and checking its response. Every
failure is one line in the peers' table."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import threading
from pathlib import Path

from specdec.runtime.core.errors import first_line

from .peer_engines import cache_name, normalize

OPTIMUM = "optimum-ort"                     # the one row of a worker that did not run, or failed as a whole
OPTIMUM_GREEDY = "optimum-ort greedy"
OPTIMUM_WORKER = Path(__file__).with_name("optimum_peer.py")
OPTIMUM_PROTOCOL = 1
OPTIMUM_TIMEOUT_S = 1800.0
OPTIMUM_INSTALL = "pip install torch==2.13.0 optimum-onnx==0.1.0 onnxruntime"


def parse_optimum_response(stdout: str, prompts: int, repeats: int) -> dict:
    """The worker's response (the last line of its stdout that is a JSON object), checked against the protocol:
    every engine with status "ok" has `prompts` token lists and `repeats` rows of `prompts` seconds. A ValueError
    with a one-line message when it is not that."""
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
    """(stdout, stderr, exit status) of a worker fed `request` on stdin; its "optimum-ort: ..." progress lines on
    stderr are passed to log as they come. subprocess.TimeoutExpired (with the stderr so far) when it runs past
    `timeout`: it is killed."""
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

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

import os
import statistics
import time
from pathlib import Path

from specdec.runtime.core.errors import first_line

from .optimum_client import OPTIMUM_TIMEOUT_S, RemoteEngine, optimum_peers
from .peer_engines import CT2_COMPUTE_TYPES, Engine, HFEngine, SpecdecEngine, checkpoints, ct2_engines, ct2_name, load_hf


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

    if default:
        # the peers are greedy: auto starts from fresh estimates and learns them on the first pass below, as each
        # temperature of the draft table does (a sampling temperature's estimates, the table's last, would decide
        # its first rounds: after a T = 1 pass that ran plain steps it measured 1.05x target-only, 1.44x in the table)
        dec.reset_estimates()
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

"""Peers a user would pick instead, on the same checkpoints, prompts and max_new_tokens, greedy, in one run:

    transformers greedy        T5ForConditionalGeneration.generate on PyTorch (fp32), the target alone
    transformers assisted      the same with assistant_model = the draft, a constant gamma draft tokens per call
                               (num_assistant_tokens_schedule "constant", no confidence early-exit): Algorithm 1's
                               setting, so it is compared like for like with specdec's speculative path
    ctranslate2 greedy         the target converted to CTranslate2, run at compute_type float32 (no quantization)
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
from pathlib import Path

from .optimum_client import OPTIMUM_TIMEOUT_S, optimum_peers
from .optimum_peer import measure
from .peer_engines import checkpoints, ct2_engines, ct2_name, hf_engine, load_hf, specdec_engine
from .prompts import special_id


def run_peers(dec, prompts, max_new_tokens: int, gamma: int, repeats: int, workdir: Path, threads: int = 0,
              target: str | None = None, draft: str | None = None, progress_factory=None, log=print,
              peer_python: str | None = None, peer_timeout: float = OPTIMUM_TIMEOUT_S,
              default: bool = False) -> dict:
    """Load every peer, check its greedy tokens against specdec's, then time all of them interleaved; then Optimum's
    ORT peers in their own process (peer_python), timed there the same way. specdec's speculative engine is the
    draft model at `gamma`, or with `default` its default (draft and gamma "auto"); peers' assistants use `gamma`."""
    target, draft = checkpoints(dec, target, draft)
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
            "not installed (pip install 'specdec[export]')"
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

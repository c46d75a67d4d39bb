"""Per-call costs measured directly on a loaded decoder's public parts (`dec.target`, `dec.draft.model`,
`dec.workspace`), with no generation loop around them. Each decoder call is decoder + the fused sampling head
(export/head.py), bound as the decoding loop binds it, at past length L (both caches hold positions 0..L-1):

    target one-token step   ws.end = L; target.run(*ws.run(L)): decoder over 1 token + a plain draw (G = 0)
    target k-token pass     ws.end = L + k - 1; target.run(*ws.run(L, guesses=k - 1, q=ws.rows(0), out=ws.p)),
                            k = 1 .. gamma_max+1: decoder over k tokens + accept/residual over k-1 guesses
    draft one-token step    ws.end = L; draft.model.run(*ws.run(L, out=ws.rows(0), out_row=0, next_slot=L + 1))

The head's share of a fused run cannot be timed from outside, so the head is also timed alone (head_only_model() as
its own ONNX Runtime session on this provider) at G = 0 .. gamma_max, several temperatures and filters: `head_ms`
are estimates. The verify passes check the draft's own gamma_max guesses; every call is rolled back and the token
buffer restored after it, and the order of the measured calls rotates between repeats.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from specdec.runtime import Params, Stats

PLAIN = (0, 1.0)                  # (top_k, top_p): no filter
REFERENCE_FILTER = (50, 0.9)      # the filtered setting timed when the sweep itself runs plain
HEAD_NOTE = ("the speculative head alone (export/head.py head_only_model) timed as its own ONNX Runtime session on "
             "logits of the export's vocabulary: an estimate of its cost inside a fused decoder run")


def head_filters(top_k: int = 0, top_p: float = 1.0, sweep_filters=()) -> list[tuple[int, float]]:
    """(top_k, top_p) settings the head is timed at: plain, the probe's, the sweep's and the reference filter."""
    out = [PLAIN, (int(top_k), float(top_p)), *((int(k), float(p)) for k, p in sweep_filters), REFERENCE_FILTER]
    return list(dict.fromkeys(out))


def _key(role: str, guesses: int, temperature: float, top_k: int, top_p: float) -> tuple:
    return role, int(guesses), round(float(temperature), 6), int(top_k), round(float(top_p), 6)


def head_lookup(probe: dict | None, role: str, guesses: int, temperature: float, top_k: int = 0,
                top_p: float = 1.0) -> float | None:
    """The probe's head time (ms) for one setting, None if not timed; the draft's G = 0 falls back to the target's."""
    table = {_key(e["role"], e["guesses"], e["temperature"], e["top_k"], e["top_p"]): e["ms"]
             for e in (probe or {}).get("head_ms") or ()}
    found = table.get(_key(role, guesses, temperature, top_k, top_p))
    return table.get(_key("target", guesses, temperature, top_k, top_p)) if found is None and role == "draft" else found


def _head_setting(session, device: str, vocab: int, guesses: int, temperature: float, top_k: int, top_p: float,
                  lenience: float):
    """A callable running the head once at this setting (its own IO binding), returning its seconds. The inputs
    are realistic: logits spread like a trained model's, draft rows close to the target's, guesses a draft's picks."""
    import onnxruntime as ort

    rng = np.random.default_rng(1000 + guesses)
    rows = guesses + 1
    logits = (3.0 * rng.standard_normal((1, rows, vocab))).astype(np.float32)
    q_logits = logits[0, :guesses] + rng.standard_normal((guesses, vocab)).astype(np.float32)
    q = np.exp(q_logits - q_logits.max(axis=-1, keepdims=True))
    q = (q / q.sum(axis=-1, keepdims=True)).astype(np.float32)
    ids = np.zeros((1, rows), np.int64)
    ids[0, 0] = int(rng.integers(0, vocab))
    ids[0, 1:] = q.argmax(axis=-1)
    feeds = {"input_ids": ids, "logits": logits, "draft_probs": q, "uniforms": rng.random(rows).astype(np.float32),
             "temperature": np.array([temperature], np.float32), "top_k": np.array([top_k], np.int64),
             "top_p": np.array([top_p], np.float32), "lenience": np.array([lenience], np.float32),
             "logit_mask": np.zeros((0, vocab), np.float32)}      # no logits processor: the decoding loop's case
    binding = session.io_binding()
    values = []                          # the bound OrtValues must outlive the binding
    for name, array in feeds.items():
        values.append(ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device, 0))
        binding.bind_ortvalue_input(name, values[-1])
    for name, shape, dtype in (("probs", (rows, vocab), np.float32), ("accepted", (1,), np.int64),
                               ("next_token", (1,), np.int64)):
        values.append(ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, device, 0))
        binding.bind_ortvalue_output(name, values[-1])

    def run() -> float:
        started = time.perf_counter()
        session.run_with_iobinding(binding)
        return time.perf_counter() - started

    run.values = values
    return run


def _head_jobs(dec, threads: int, temperatures, filters, guesses, lenience: float):
    """({job: callable}, [((role, G, T, top_k, top_p), job)], problem or None). The draft's G = 0 runs with the
    draft's threads (`threads or 1`); when equal to the target's, one measurement serves both."""
    try:
        import onnxruntime as ort
        from specdec.export.head import head_only_model
    except ImportError as err:           # the head is built with onnx (the export extra)
        return {}, [], f'not timed: {err} (pip install -e ".[export]")'
    sessions = {}
    for n in dict.fromkeys((threads, threads or 1)):     # CUDA for TensorRT too: the head is too small for an engine
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = n, 1, 3
        providers = ([] if dec.provider == "cpu" else ["CUDAExecutionProvider"]) + ["CPUExecutionProvider"]
        sessions[n] = ort.InferenceSession(head_only_model().SerializeToString(), opts, providers=providers)
    device = "cpu" if dec.provider == "cpu" else "cuda"
    jobs, entries = {}, []
    for t in temperatures:
        for top_k, top_p in filters:
            for role, gs, n in (("target", guesses, threads), ("draft", [0], threads or 1)):
                for g in gs:
                    job = (n, g, t, top_k, top_p)
                    if job not in jobs:
                        jobs[job] = _head_setting(sessions[n], device, dec.vocab_size, g, t, top_k, top_p, lenience)
                    entries.append(((role, g, t, top_k, top_p), job))
    return jobs, entries, None


def interleaved(jobs: dict, warmup: int, repeats: int) -> dict:
    """{name: [seconds]}: every job once a repeat, the order rotated each repeat; the first `warmup` repeats dropped."""
    names = list(jobs)
    times = {name: [] for name in names}
    for rep in range(warmup + repeats):
        shift = rep % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            seconds = jobs[name]()
            if rep >= warmup:
                times[name].append(seconds)
    return times


def probe(dec, source_ids, past: int, repeats: int = 30, warmup: int = 3, temperature: float = 0.0,
          top_k: int = 0, top_p: float = 1.0, lenience: float = 1.0, counts=None, threads: int = 0,
          head_temperatures=(1.0,), head_guesses=None, sweep_filters=()) -> dict:
    """Median costs in ms and the ratios Theorem 3.8 needs. `source_ids`: token ids, or a Whisper export's PCM.
    The head alone is also timed at temperature 0 and `head_temperatures`, for G = 0 .. max(head_guesses)."""
    target, ws = dec.target, dec.workspace
    draft = getattr(dec.draft, "model", None)           # a ModelDraft's CachedSeq2Seq; other drafts: no draft step
    gamma_max = dec.gamma_max
    counts = sorted({int(k) for k in (counts or range(1, gamma_max + 2)) if 1 <= int(k) <= gamma_max + 1})
    past = max(1, min(past, dec.max_length - max(counts) - 1))
    repeats = max(1, int(repeats))
    stats = Stats()
    speech = dec.manifest.speech          # a Whisper export: the source is PCM (float32 samples), not token ids
    source = np.asarray(source_ids, dtype=np.float32 if speech else np.int64)
    params = Params(gamma=0, temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                    lenience=float(lenience)).checked(gamma_max)
    ws.reset([int(dec.manifest.special_ids["decoder_start_token_id"])], params)
    rng = np.random.default_rng(0)
    span = past + gamma_max + 1            # positions 1 .. past + gamma_max: filler ids, valid for any vocabulary
    ws.tokens.write(rng.integers(3, max(4, min(dec.vocab_size, 1000)), size=span), 1)

    encoder_ms = {}
    for role, model in (("target", target), ("draft", draft)):
        if model is not None:
            started = time.perf_counter()
            model.encode(source, stats)
            encoder_ms[role] = (time.perf_counter() - started) * 1000.0

    filler = ws.tokens.flat().copy()
    for model in (target, draft) if draft is not None else (target,):
        while model.length < past:   # fill the cache with positions 0 .. past-1 (head output dropped)
            ws.end = min(model.length + gamma_max + 1, past) - 1
            model.run(*ws.run(model.length))
            ws.tokens.write(filler)
    if draft is not None:
        for i in range(gamma_max):                     # real guesses x_1 .. x_gamma_max and their q rows
            ws.end = past + i
            draft.run(*ws.run(past + i, out=ws.rows(0), out_row=i, next_slot=past + i + 1))
        draft.rollback(past)
        filler = ws.tokens.flat().copy()

    def timed(model, end, **bind):
        def run():
            ws.end = end
            seconds = model.run(*ws.run(past, **bind))
            model.rollback(past)
            ws.tokens.write(filler)
            return seconds
        return run

    head_guesses = {int(g) for g in (head_guesses if head_guesses is not None else range(gamma_max + 1))} | {0}
    temps = sorted({0.0, float(temperature), *(float(t) for t in head_temperatures)})
    head_jobs, head_entries, head_problem = _head_jobs(dec, threads, temps, head_filters(top_k, top_p, sweep_filters),
                                                       sorted(head_guesses), float(lenience))
    jobs = {("verify", k): timed(target, past + k - 1, guesses=k - 1, q=ws.rows(0), out=ws.p) for k in counts}
    if draft is not None:
        jobs[("draft",)] = timed(draft, past, out=ws.rows(0), out_row=0, next_slot=past + 1)
    times = interleaved(jobs, warmup, repeats)
    # the head alone afterwards, in a pass of its own: its sessions' threads spin after each run, and interleaved
    # with the model runs they took the cores from the next run (verify costs up to 1.3x too high, not monotone)
    times.update(interleaved({("head",) + key: run for key, run in head_jobs.items()}, warmup, repeats))
    ms = {name: statistics.median(t) * 1000.0 for name, t in times.items()}
    verify = {k: ms[("verify", k)] for k in counts}
    step, d_step = verify.get(1), ms.get(("draft",))
    out = {
        "past_length": past, "source_length": int(source.size), "repeats": repeats,
        "source_seconds": source.size / int(speech["sampling_rate"]) if speech else None,
        "settings": {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p),
                     "lenience": float(lenience)},
        "target_encoder_ms": encoder_ms["target"], "draft_encoder_ms": encoder_ms.get("draft"),
        "target_step_ms": step, "draft_step_ms": d_step, "c": d_step / step if d_step is not None and step else None,
        "verify_ms": {str(k): v for k, v in verify.items()},
        "verify_ratio": {str(k): v / step for k, v in verify.items()} if step else {},
        "head_vocab": dec.vocab_size, "head_threads": {"target": threads, "draft": threads or 1},
        "head_ms": [{"role": role, "guesses": g, "temperature": t, "top_k": k, "top_p": p, "ms": ms[("head",) + job]}
                    for (role, g, t, k, p), job in head_entries],
        "head_note": head_problem or HEAD_NOTE,
    }
    # the probe's own setting: the head's share of the fused one-token steps, and c without it
    t_head = out["target_step_head_ms"] = head_lookup(out, "target", 0, temperature, top_k, top_p)
    d_head = out["draft_step_head_ms"] = head_lookup(out, "draft", 0, temperature, top_k, top_p)
    out["c_without_head"] = None
    if None not in (t_head, d_head, d_step, step) and step > t_head and d_step > d_head:
        out["c_without_head"] = (d_step - d_head) / (step - t_head)
    return out

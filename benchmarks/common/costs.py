"""Per-call costs measured directly on a loaded decoder's public parts (`dec.target`, `dec.draft.model`,
`dec.workspace`), with no generation loop around them.

An export fuses Algorithm 1's sampling work into every decoder graph (the speculative head, export/head.py),
so each decoder call timed here is decoder + head, bound exactly as the decoding loop binds it:

    target one-token step   ws.end = L; target.run(*ws.run(L)): decoder over 1 token + a plain draw (G = 0)
    target k-token pass     ws.end = L + k - 1; target.run(*ws.run(L, guesses=k - 1, q=ws.rows(0), out=ws.p)), k = 1 ..
                            gamma_max+1: decoder over k tokens + accept/residual over the k-1 guesses (G = k-1)
    draft one-token step    ws.end = L; draft.model.run(*ws.run(L, out=ws.rows(0), out_row=0, next_slot=L + 1)):
                            decoder + standardize/draw (G = 0)

(L = `past`: both caches hold positions 0..L-1 and the token buffer holds the sequence by position.)

The head's share of a fused run cannot be timed from outside the run, so the head is also timed alone
(`specdec.export.head.head_only_model()`, its own ONNX Runtime session on this provider, logits of the export's
vocabulary bound through IO binding): G = 0 (a draft step's or a plain target step's sampling) and G = 1 ..
gamma_max (verify's accept/residual), at temperature 0 and the probe temperatures, plain and with top-k/top-p.
Those `head_ms` are estimates of the in-graph cost (inside the fused graph ONNX Runtime may schedule the same nodes
a little differently), and every report that uses them says so.

The caches are filled to `past` positions first, and the draft proposes gamma_max real guesses once, so the
verify passes check the draft's own guesses against its own q rows. Every decoder call is rolled back right after
and the token buffer restored, so every measurement sees the same past length and the same inputs. The order of
all measured calls (verify passes, the draft step, the head settings) rotates between repeats so slow drift spreads
evenly over what is compared.
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

_ORT_PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
                  # the head alone is too small to be worth a TensorRT engine build: CUDA runs it
                  "tensorrt": ["CUDAExecutionProvider", "CPUExecutionProvider"]}


def _median_ms(values) -> float:
    return statistics.median(values) * 1000.0


def start_token(dec) -> int:
    return int(dec.manifest.special_ids["decoder_start_token_id"])


def head_filters(top_k: int = 0, top_p: float = 1.0, sweep_filters=()) -> list[tuple[int, float]]:
    """(top_k, top_p) settings the head is timed at: plain, the probe's own filter, every filter of the sweep
    and the reference filter."""
    out = [PLAIN, (int(top_k), float(top_p)), *((int(k), float(p)) for k, p in sweep_filters), REFERENCE_FILTER]
    return list(dict.fromkeys(out))


def _key(role: str, guesses: int, temperature: float, top_k: int, top_p: float) -> tuple:
    return role, int(guesses), round(float(temperature), 6), int(top_k), round(float(top_p), 6)


def head_lookup(probe: dict | None, role: str, guesses: int, temperature: float, top_k: int = 0,
                top_p: float = 1.0) -> float | None:
    """The probe's head time (ms) for one setting; the draft's G = 0 falls back to the target's. None: not timed."""
    if not probe or not probe.get("head_ms"):
        return None
    table = {_key(e["role"], e["guesses"], e["temperature"], e["top_k"], e["top_p"]): e["ms"]
             for e in probe["head_ms"]}
    found = table.get(_key(role, guesses, temperature, top_k, top_p))
    if found is None and role == "draft":
        found = table.get(_key("target", guesses, temperature, top_k, top_p))
    return found


class HeadTimer:
    """The speculative head alone, on the decoder's provider, one IO binding per timed setting."""

    def __init__(self, provider: str, vocab: int, threads: int):
        import onnxruntime as ort
        from specdec.export.head import head_only_model

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.ort = ort
        self.session = ort.InferenceSession(head_only_model().SerializeToString(), opts,
                                            providers=_ORT_PROVIDERS.get(provider, _ORT_PROVIDERS["cpu"]))
        self.device = "cpu" if provider == "cpu" else "cuda"
        self.vocab = vocab

    def setting(self, guesses: int, temperature: float, top_k: int, top_p: float, lenience: float):
        """A callable that runs the head once at this setting and returns the seconds the run took.

        Inputs are fixed and realistic: random logits with a spread like a trained model's, draft rows close to the
        target's (so some guesses pass and some fail), guesses drawn as a draft would pick them."""
        ort, vocab = self.ort, self.vocab
        rng = np.random.default_rng(1000 + guesses)
        rows = guesses + 1
        logits = (3.0 * rng.standard_normal((1, rows, vocab))).astype(np.float32)
        q_logits = logits[0, :guesses] + rng.standard_normal((guesses, vocab)).astype(np.float32)
        q = np.exp(q_logits - q_logits.max(axis=-1, keepdims=True)) if guesses else np.zeros((0, vocab))
        q = (q / q.sum(axis=-1, keepdims=True)).astype(np.float32) if guesses else q.astype(np.float32)
        ids = np.zeros((1, rows), np.int64)
        ids[0, 0] = int(rng.integers(0, vocab))
        if guesses:
            ids[0, 1:] = q.argmax(axis=-1)
        feeds = {"input_ids": ids, "logits": logits, "draft_probs": q,
                 "uniforms": rng.random(rows).astype(np.float32),
                 "temperature": np.array([temperature], np.float32), "top_k": np.array([top_k], np.int64),
                 "top_p": np.array([top_p], np.float32), "lenience": np.array([lenience], np.float32),
                 "logit_mask": np.zeros((0, vocab), np.float32)}      # no logits processor: the decoding loop's case
        binding = self.session.io_binding()
        values = []                          # the bound OrtValues must outlive the binding
        for name, array in feeds.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)
            values.append(value)
            binding.bind_ortvalue_input(name, value)
        for name, shape, dtype in (("probs", (rows, vocab), np.float32), ("accepted", (1,), np.int64),
                                   ("next_token", (1,), np.int64)):
            value = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, self.device, 0)
            values.append(value)
            binding.bind_ortvalue_output(name, value)
        session = self.session

        def run() -> float:
            started = time.perf_counter()
            session.run_with_iobinding(binding)
            return time.perf_counter() - started

        run.values = values
        return run


def _head_jobs(dec, threads: int, temperatures, filters, guesses, lenience: float):
    """{job key: callable} for every head setting, and the entries (role, G, T, filter) -> job key they report.
    The draft's G = 0 runs on a session with the draft's thread count (the runtime gives the draft one thread
    unless told otherwise); when that equals the target's, the target's measurement serves both."""
    try:
        target_timer = HeadTimer(dec.provider, dec.vocab_size, threads)
    except ImportError as err:           # the head is built with onnx (the export extra)
        return {}, [], f"not timed: {err} (pip install 'specdec[export]')"
    draft_threads = threads or 1
    timers = {threads: target_timer}
    if draft_threads not in timers:
        timers[draft_threads] = HeadTimer(dec.provider, dec.vocab_size, draft_threads)
    jobs, entries = {}, []
    for t in temperatures:
        for top_k, top_p in filters:
            for role, gs, n_threads in (("target", guesses, threads), ("draft", [0], draft_threads)):
                for g in gs:
                    job = (n_threads, g, t, top_k, top_p)
                    if job not in jobs:
                        jobs[job] = timers[n_threads].setting(g, t, top_k, top_p, lenience)
                    entries.append(((role, g, t, top_k, top_p), job))
    return jobs, entries, None


def probe(dec, source_ids, past: int, repeats: int = 30, warmup: int = 3, temperature: float = 0.0,
          top_k: int = 0, top_p: float = 1.0, lenience: float = 1.0, counts=None, threads: int = 0,
          head_temperatures=(1.0,), head_guesses=None, sweep_filters=()) -> dict:
    """Median costs in ms and the ratios Theorem 3.8 needs. `dec` is a SpeculativeDecoder (its state is reset by
    the next generate call); `source_ids`: the source's token ids, or a Whisper export's audio (float32 PCM). The
    fused decoder runs are timed at `temperature`, `top_k`, `top_p`, `lenience`; the head alone additionally at
    temperature 0 and every `head_temperatures`, plain, with `top_k`/`top_p`, with every (top_k, top_p) of
    `sweep_filters` and with top_k 50 / top_p 0.9, for G = 0 .. max(head_guesses) (default gamma_max). `threads`:
    the target's intra-op threads as passed to SpeculativeDecoder.load (the draft's head is timed with
    `threads or 1`)."""
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
    ws.reset([start_token(dec)], params)
    rng = np.random.default_rng(0)
    span = past + gamma_max + 1            # positions 1 .. past + gamma_max: filler ids, valid for any vocabulary
    ws.tokens.write(rng.integers(3, max(4, min(dec.vocab_size, 1000)), size=span), 1)

    started = time.perf_counter()
    target.encode(source, stats)
    t_enc = time.perf_counter() - started
    d_enc = None
    if draft is not None:
        started = time.perf_counter()
        draft.encode(source, stats)
        d_enc = time.perf_counter() - started

    filler = ws.tokens.flat().copy()

    def restore():
        ws.tokens.write(filler)

    def fill(model, width: int) -> None:
        """Runs over the filler tokens until the model's cache holds positions 0 .. past-1 (head output dropped,
        next token to a scratch slot)."""
        while model.length < past:
            ws.end = min(model.length + width, past) - 1
            model.run(*ws.run(model.length))
            restore()

    fill(target, gamma_max + 1)
    if draft is not None:
        fill(draft, gamma_max + 1)
        for i in range(gamma_max):                     # real guesses x_1 .. x_gamma_max and their q rows
            ws.end = past + i
            draft.run(*ws.run(past + i, out=ws.rows(0), out_row=i, next_slot=past + i + 1))
        draft.rollback(past)
        filler = ws.tokens.flat().copy()

    def verify_job(k):
        def run():
            ws.end = past + k - 1
            seconds = target.run(*ws.run(past, guesses=k - 1, q=ws.rows(0), out=ws.p))
            target.rollback(past)
            restore()
            return seconds
        return run

    def draft_job():
        ws.end = past
        seconds = draft.run(*ws.run(past, out=ws.rows(0), out_row=0, next_slot=past + 1))
        draft.rollback(past)
        restore()
        return seconds

    head_guesses = sorted({int(g) for g in (head_guesses if head_guesses is not None else range(gamma_max + 1))}
                          | {0})
    temps = sorted({0.0, float(temperature), *(float(t) for t in head_temperatures)})
    filters = head_filters(top_k, top_p, sweep_filters)
    head_jobs, head_entries, head_problem = _head_jobs(dec, threads, temps, filters, head_guesses, float(lenience))

    jobs = {("verify", k): verify_job(k) for k in counts}
    if draft is not None:
        jobs[("draft",)] = draft_job
    jobs.update({("head",) + key: run for key, run in head_jobs.items()})
    names = list(jobs)
    times = {name: [] for name in names}
    for rep in range(warmup + repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = jobs[name]()
            if rep >= warmup:
                times[name].append(seconds)

    verify = {k: _median_ms(times[("verify", k)]) for k in counts}
    step = verify[1] if 1 in verify else None
    d_step = _median_ms(times[("draft",)]) if draft is not None else None
    head_ms = [{"role": role, "guesses": g, "temperature": t, "top_k": k, "top_p": p,
                "ms": _median_ms(times[("head",) + job])}
               for (role, g, t, k, p), job in head_entries]
    out = {
        "past_length": past,
        "source_length": int(source.size),
        "source_seconds": source.size / int(speech["sampling_rate"]) if speech else None,
        "repeats": repeats,
        "settings": {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p),
                     "lenience": float(lenience)},
        "target_encoder_ms": t_enc * 1000.0,
        "draft_encoder_ms": d_enc * 1000.0 if d_enc is not None else None,
        "target_step_ms": step,
        "draft_step_ms": d_step,
        "c": d_step / step if d_step is not None and step else None,
        "verify_ms": {str(k): v for k, v in verify.items()},
        "verify_ratio": {str(k): v / step for k, v in verify.items()} if step else {},
        "head_vocab": dec.vocab_size,
        "head_threads": {"target": threads, "draft": threads or 1},
        "head_ms": head_ms,
        "head_note": head_problem or HEAD_NOTE,
    }
    # the probe's own setting: the head's share of the fused one-token steps, and c without it
    t_head = head_lookup(out, "target", 0, temperature, top_k, top_p)
    d_head = head_lookup(out, "draft", 0, temperature, top_k, top_p)
    out["target_step_head_ms"], out["draft_step_head_ms"] = t_head, d_head
    out["c_without_head"] = None
    if None not in (t_head, d_head, d_step, step) and step > t_head and d_step > d_head:
        out["c_without_head"] = (d_step - d_head) / (step - t_head)
    return out

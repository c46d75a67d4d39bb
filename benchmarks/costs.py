"""Per-call costs measured directly on a loaded decoder's sessions (no generation loop around them).

At a realistic decoder past length, with the prompt's cross-attention bound:
    target one-token step, target k-token verify passes (k = 1 .. gamma_max+1), draft one-token step,
    the draft sampler graph and the accept/residual (verify) sampler graph.
Each call is rolled back right after, so every measurement sees the same cache length. Orders rotate between
repeats so slow drift spreads evenly over what is compared.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from specdec.runtime.stats import Stats


def _median_ms(values) -> float:
    return statistics.median(values) * 1000.0


def probe(dec, source_ids, past: int, repeats: int = 30, warmup: int = 3, temperature: float = 0.0,
          counts=None) -> dict:
    """Median costs in ms and the ratios Theorem 3.8 needs. `dec` is a SpeculativeDecoder (its state is reset by
    the next generate call)."""
    target, draft, ws, samplers = dec.target, dec.draft.model, dec.workspace, dec.samplers
    gamma_max = dec.gamma_max
    counts = list(counts or range(1, gamma_max + 2))
    past = max(1, min(past, dec.max_length - max(counts) - 1))
    stats = Stats()
    source = np.asarray(source_ids, dtype=np.int64)
    samplers.params.set(float(temperature), 0, 1.0, 1.0)
    ws.reset(dec.start_id, 0)
    ws.draw_uniforms(2 * gamma_max + 1)
    rng = np.random.default_rng(0)
    filler = rng.integers(3, min(dec.vocab_size, 1000), size=gamma_max + 2)
    ws.tokens.write(filler)

    started = time.perf_counter()
    target.encode(source, stats)
    t_enc = time.perf_counter() - started
    started = time.perf_counter()
    draft.encode(source, stats)
    d_enc = time.perf_counter() - started
    while target.length < past:                       # fill the caches up to `past` positions
        target.decode(ws.tokens, 1, min(gamma_max + 1, past - target.length))
    while draft.length < past:
        draft.decode(ws.tokens, 1, min(2, past - draft.length))

    verify = {k: [] for k in counts}
    draft_step, sample, accept = [], [], {k: [] for k in counts if k >= 2}
    for rep in range(warmup + repeats):
        keep = rep >= warmup
        order = counts[rep % len(counts):] + counts[:rep % len(counts)]
        for k in order:
            t = target.decode(ws.tokens, 1, k)
            target.rollback(past)
            if keep:
                verify[k].append(t)
            if k >= 2:
                g = k - 1
                t = samplers.verify(target.logits, ws.probs, ws.tokens, ws.FIRST_GUESS, g, ws.uniforms, g,
                                    ws.accepted, ws.CURRENT)
                ws.tokens.write(filler)
                if keep:
                    accept[k].append(t)
        t = draft.decode(ws.tokens, 1, 1)
        draft.rollback(past)
        s = samplers.sample(draft.logits, 0, ws.uniforms, 0, ws.probs, 0, ws.tokens, ws.FIRST_GUESS)
        ws.tokens.write(filler)
        if keep:
            draft_step.append(t)
            sample.append(s)
    step = _median_ms(verify[1])
    d_step = _median_ms(draft_step)
    s_ms = _median_ms(sample)
    return {
        "past_length": past,
        "source_length": int(source.size),
        "repeats": repeats,
        "target_encoder_ms": t_enc * 1000.0,
        "draft_encoder_ms": d_enc * 1000.0,
        "target_step_ms": step,
        "draft_step_ms": d_step,
        "c": d_step / step,
        "c_with_sampler": (d_step + s_ms) / (step + s_ms),
        "sample_ms": s_ms,
        "verify_ms": {str(k): _median_ms(v) for k, v in verify.items()},
        "verify_ratio": {str(k): _median_ms(v) / step for k, v in verify.items()},
        "accept_sampler_ms": {str(k - 1): _median_ms(v) for k, v in accept.items()},
    }

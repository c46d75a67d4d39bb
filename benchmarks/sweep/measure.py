"""The measured sweep: per repeat, prompt, temperature and filter, every gamma (0, the baseline, included) back to
back, rotated by one position per repeat, so a configuration and its baseline are never more than a few generate calls
apart and slow drift hits them alike. Results are keyed (temperature, filter, gamma); a filter is (top_k, top_p)."""

from __future__ import annotations

from specdec.runtime import Params

from ..common.runs import Cell, measure_acceptance, rotated, seed_for


def timed_order(temperatures, filters, gammas, repeat: int):
    return [(t, f, g) for t in temperatures for f in filters for g in rotated(gammas, repeat)]


def run_sweep(dec, prompts, gammas, temperatures, max_new_tokens: int, repeats: int, progress=None,
              base: Params | None = None, filters=None):
    """({key: Cell}, {key: [repeat 0's token ids per prompt]}, {key: Acceptance}); `filters` default to `base`'s."""
    gammas, base = list(gammas), base or Params()
    filters = [tuple(f) for f in filters] if filters else [(base.top_k, base.top_p)]
    keys = timed_order(temperatures, filters, gammas, 0)
    params = {(t, (k, p), g): Params.of(base, max_new_tokens=max_new_tokens, draft="draft", gamma=g, temperature=t,
                                        top_k=k, top_p=p) for t, (k, p), g in keys}
    cells = {key: Cell() for key in keys}
    tick = progress.update if progress else (lambda n: None)
    for key in keys:    # warm-up: first calls allocate arenas and fill caches
        dec.generate(**prompts[0].kwargs(), params=params[key], seed=0)
        tick(1)
    acceptance, outputs = {}, {}
    for key in keys:    # untimed: stream() decodes text every iteration, which the timed runs must not pay
        acceptance[key], outputs[key] = measure_acceptance(dec, prompts, params[key])
        tick(1)
    for r in range(repeats):
        for i, p in enumerate(prompts):
            for key in timed_order(temperatures, filters, gammas, r):
                cells[key].add(r, dec.generate(**p.kwargs(), params=params[key], seed=seed_for(r, i)).stats)
                tick(1)
    return cells, outputs, acceptance

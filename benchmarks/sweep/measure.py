"""The measured sweep: every (temperature, filter, gamma) on the same sessions and prompts, interleaved with
gamma = 0.

Order: per repeat, per prompt, per temperature, per filter, every gamma (0 included) back to back, the list rotated
by one position per repeat, so a configuration, its baseline (gamma = 0 of the same temperature and filter) and the
other filters are never more than a few generate calls apart and slow drift hits them alike. A repeat's speedup is
its baseline's ms/token over the configuration's (a filter's cost: its ms/token over plain sampling's); the report
gives medians over repeats. A filter is a (top_k, top_p) pair, `none` (PLAIN) or `K:P` on the command line; every
configuration shares the other request parameters (`base`: lenience). Results are keyed (temperature, filter,
gamma)."""

from __future__ import annotations

from specdec.runtime import Params

from ..common.runs import Cell, measure_acceptance, seed_for


def timed_order(temperatures, filters, gammas, repeat: int):
    """The configurations of one prompt in one repeat, the gammas rotated by one position per repeat."""
    shift = repeat % len(gammas)
    return [(t, f, g) for t in temperatures for f in filters for g in gammas[shift:] + gammas[:shift]]


def run_sweep(dec, prompts, gammas, temperatures, max_new_tokens: int, repeats: int, progress=None,
              warmup: bool = True, base: Params | None = None, filters=None):
    """Run everything: ({key: Cell}, {key: [token ids per prompt]} (repeat 0's seeds), {key: Acceptance}), in the
    sweep's order. `filters`: (top_k, top_p) pairs (default `base`'s own)."""
    gammas, base = list(gammas), base or Params()
    filters = [tuple(f) for f in filters] if filters else [(base.top_k, base.top_p)]
    keys = timed_order(temperatures, filters, gammas, 0)
    params = {(t, (k, p), g): Params.of(base, max_new_tokens=max_new_tokens, draft="draft", gamma=g, temperature=t,
                                        top_k=k, top_p=p) for t, (k, p), g in keys}
    cells = {key: Cell() for key in keys}
    tick = progress.update if progress else (lambda n: None)
    if warmup:          # first calls allocate arenas and fill caches: never measured
        for key in keys:
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

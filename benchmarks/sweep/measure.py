"""The measured sweep: every (temperature, filter, gamma) on the same sessions and prompts, interleaved with
gamma = 0.

Order: for each repeat, for each prompt, for each temperature, for each filter, every gamma of the list (gamma = 0
included) runs back to back, the list rotated by one position per repeat. A configuration and its baseline (gamma
= 0 of the same temperature and filter) are therefore never more than a few generate calls apart, and neither are
the filters of one temperature and gamma, so slow drift (thermal, a neighbour's load) hits all of them alike; the
speedup of a repeat is its baseline's ms/token over the configuration's, a filter's cost ratio of a repeat its
ms/token over the plain filter's at the same temperature and gamma, and the reported values are medians over
repeats.

A filter is a (top_k, top_p) pair, spelled `none` (PLAIN: no filter) or `K:P` (e.g. `50:0.9`) on the command line.
Every configuration shares the other request parameters besides gamma, temperature, the filter and the seed
(`base`, a specdec.runtime.Params: lenience), so plain and filtered sampling are compared in one run. Cells,
outputs and acceptance counts are keyed (temperature, filter, gamma).
"""

from __future__ import annotations

from specdec.runtime import Params

from ..common.runs import Cell, measure_acceptance, seed_for


def configuration_params(base: Params, key: tuple, max_new_tokens: int) -> Params:
    """The request parameters of configuration key = (temperature, (top_k, top_p), gamma) on top of `base`."""
    t, (top_k, top_p), g = key
    return Params.of(base, max_new_tokens=max_new_tokens, draft="draft", gamma=g, temperature=t, top_k=top_k,
                     top_p=top_p)


def timed_order(temperatures, filters, gammas, repeat: int):
    """The configurations of one prompt in one repeat: every temperature, every filter, every gamma, the gammas
    rotated by one position per repeat."""
    shift = repeat % len(gammas)
    order = gammas[shift:] + gammas[:shift]
    return [(t, f, g) for t in temperatures for f in filters for g in order]


def run_sweep(dec, prompts, gammas, temperatures, max_new_tokens: int, repeats: int, progress=None,
              warmup: bool = True, base: Params | None = None, filters=None):
    """Run everything; returns ({(T, filter, gamma): Cell}, {(T, filter, gamma): [token ids per prompt]} (repeat
    0's seeds), {(T, filter, gamma): Acceptance}), each in the sweep's order (temperature, filter, gamma as given).
    `filters`: (top_k, top_p) pairs (default: `base`'s own); `base`: the request parameters every configuration
    shares (lenience); gamma, temperature, the filter, max_new_tokens and seed are set per call."""
    gammas = list(gammas)
    base = base or Params()
    filters = [tuple(f) for f in filters] if filters else [(base.top_k, base.top_p)]
    keys = timed_order(temperatures, filters, gammas, 0)
    params = {key: configuration_params(base, key, max_new_tokens) for key in keys}
    cells = {key: Cell() for key in keys}

    def tick():
        if progress:
            progress.update(1)

    if warmup:          # first calls allocate arenas and fill caches: never measured
        for key in keys:
            dec.generate(**prompts[0].kwargs(), params=params[key], seed=0)
            tick()
    acceptance, outputs = {}, {}
    for key in keys:    # untimed: stream() decodes text every iteration, which the timed runs must not pay
        acceptance[key], outputs[key] = measure_acceptance(dec, prompts, params[key])
        tick()
    for r in range(repeats):
        for i, p in enumerate(prompts):
            for key in timed_order(temperatures, filters, gammas, r):
                cells[key].add(r, dec.generate(**p.kwargs(), params=params[key], seed=seed_for(r, i)).stats)
                tick()
    return cells, outputs, acceptance

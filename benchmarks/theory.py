"""Leviathan et al. (2023), section 3: expected tokens per iteration and the walltime improvement of Theorem 3.8.

    E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha)                    (equation 1)
    speedup(alpha, gamma, c)  = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))      (Theorem 3.8)

Theorem 3.8 assumes a verify pass over gamma+1 tokens costs what one target step costs. `speedup_with_costs`
drops that assumption: the iteration costs gamma c + v(gamma) target steps, v being the measured verify-cost ratio
(and optionally an extra per-iteration overhead, in target steps, for host work). With export format 2 the sampling
work is inside the runs (c and v are ratios of fused runs, each with its sampling head), so there is no separate
sampler term.
"""

from __future__ import annotations

import math


def _check(alpha: float, gamma: int, c: float) -> None:
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in [0, 1] (got {alpha})")
    if gamma < 0 or int(gamma) != gamma:
        raise ValueError(f"gamma must be an integer >= 0 (got {gamma})")
    if c < 0 or math.isnan(c):
        raise ValueError(f"c must be >= 0 (got {c})")


def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens one iteration produces: 1 + alpha + ... + alpha^gamma."""
    _check(alpha, gamma, 0.0)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Theorem 3.8: expected walltime improvement over target-only decoding."""
    _check(alpha, gamma, c)
    return expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def speedup_with_costs(alpha: float, gamma: int, c: float, verify_ratio: float = 1.0,
                       overhead: float = 0.0, baseline_overhead: float = 0.0) -> float:
    """The same expectation with the iteration's real cost: gamma c + verify_ratio (+ overhead), all in units of
    one target step; the baseline's step costs 1 (+ baseline_overhead). verify_ratio = 1, overheads 0: Thm 3.8."""
    _check(alpha, gamma, c)
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) * (1.0 + baseline_overhead) / (gamma * c + verify_ratio + overhead)


def best_gamma(alpha: float, c: float, gamma_max: int) -> tuple[int, float]:
    """(gamma, predicted speedup) maximising Theorem 3.8 over the integers 0..gamma_max (ties: the smaller gamma)."""
    if gamma_max < 0:
        raise ValueError(f"gamma_max must be >= 0 (got {gamma_max})")
    best, value = 0, predicted_speedup(alpha, 0, c)
    for gamma in range(1, gamma_max + 1):
        s = predicted_speedup(alpha, gamma, c)
        if s > value + 1e-12:
            best, value = gamma, s
    return best, value

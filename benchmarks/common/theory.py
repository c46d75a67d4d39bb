"""Leviathan et al. (2023), section 3: expected tokens per iteration and the walltime improvement of Theorem 3.8.

    E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha)                    (equation 1)
    speedup(alpha, gamma, c)  = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))      (Theorem 3.8)

Theorem 3.8 assumes a verify pass over gamma+1 tokens costs one target step; the `..._costs` and `..._verify_cost`
variants use the measured verify-cost ratio instead (of fused runs, each with its sampling head).
"""

from __future__ import annotations

import numpy as np


def _check(alpha: float, gamma: float, c: float = 0.0, integer: bool = True) -> None:
    if not 0.0 <= alpha <= 1.0:                            # NaN fails every comparison
        raise ValueError(f"alpha must be in [0, 1] (got {alpha})")
    if not gamma >= 0 or (integer and int(gamma) != gamma):
        raise ValueError(f"gamma must be {'an integer ' if integer else ''}>= 0 (got {gamma})")
    if not c >= 0:
        raise ValueError(f"c must be >= 0 (got {c})")


def expected_tokens_at(alpha: float, gamma: float) -> float:
    """Equation 1 at a real gamma >= 0 (a source's mean guesses per round)."""
    _check(alpha, gamma, integer=False)
    return gamma + 1.0 if alpha == 1.0 else (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def expected_tokens(alpha: float, gamma: int) -> float:
    _check(alpha, gamma)
    return expected_tokens_at(alpha, gamma)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    _check(alpha, gamma, c)
    return expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def speedup_with_costs(alpha: float, gamma: int, c: float, verify_ratio: float = 1.0,
                       overhead: float = 0.0, baseline_overhead: float = 0.0) -> float:
    """An iteration costs gamma c + verify_ratio (+ overhead) target steps, the baseline's step 1 (+ its overhead)."""
    _check(alpha, gamma, c)
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) * (1.0 + baseline_overhead) / (gamma * c + verify_ratio + overhead)


def best_gamma(alpha: float, c: float, gamma_max: int) -> tuple[int, float]:
    """(gamma, predicted speedup) maximising Theorem 3.8 over 0..gamma_max (ties: the smaller gamma)."""
    if gamma_max < 0:
        raise ValueError(f"gamma_max must be >= 0 (got {gamma_max})")
    best, value = 0, predicted_speedup(alpha, 0, c)
    for gamma in range(1, gamma_max + 1):
        s = predicted_speedup(alpha, gamma, c)
        if s > value + 1e-12:
            best, value = gamma, s
    return best, value


def verify_cost(verify_ratio: dict, gamma: float) -> float | None:
    """T(gamma) / T(0) from the probe's verify_ratio ({"k": run over k tokens / over 1}), linear between the nearest
    measured k (the nearest end outside them); None without ratios."""
    known = sorted((int(k), float(v)) for k, v in (verify_ratio or {}).items())
    if not known:
        return None
    return float(np.interp(gamma + 1.0, [k for k, _ in known], [v for _, v in known]))


def speedup_with_verify_cost(alpha: float, gamma: float, c: float, verify: float) -> float:
    """E(alpha, gamma) / (gamma c + T(gamma)/T(0)); gamma may be a mean (a lookup proposes what it copied)."""
    _check(alpha, gamma, c, integer=False)
    if not verify > 0:
        raise ValueError(f"verify cost must be > 0 (got {verify})")
    return expected_tokens_at(alpha, gamma) / (gamma * c + verify)


def mixture_speedup(rounds: list[tuple[int, float, float, float, float]]) -> float | None:
    """Over every kind of round a run had, [(count, alpha, mean gamma, c, verify)]: expected tokens over expected
    cost, in target steps (target-only rounds: gamma 0, verify 1). None without rounds."""
    tokens = sum(n * expected_tokens_at(a, g) for n, a, g, c, v in rounds)
    cost = sum(n * (g * c + v) for n, a, g, c, v in rounds)
    return tokens / cost if cost > 0 else None

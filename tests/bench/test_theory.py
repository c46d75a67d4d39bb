"""Theorem 3.8 and the best-gamma search against values computed by hand."""

import math

import pytest

from specdec.bench.common import theory


def test_expected_tokens_is_a_geometric_sum():
    assert theory.expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert theory.expected_tokens(0.0, 5) == 1.0
    assert theory.expected_tokens(1.0, 3) == 4.0
    assert theory.expected_tokens(0.8, 0) == pytest.approx(1.0)


def test_theorem_3_8_hand_values():
    # (1 - 0.8^4) / (0.2 * (3 * 0.05 + 1)) = 0.5904 / 0.23
    assert theory.predicted_speedup(0.8, 3, 0.05) == pytest.approx(0.5904 / 0.23)
    # (1 - 0.6^2) / (0.4 * 1.5) = 0.64 / 0.6
    assert theory.predicted_speedup(0.6, 1, 0.5) == pytest.approx(0.64 / 0.6)
    assert theory.predicted_speedup(0.7, 0, 0.3) == 1.0              # gamma = 0 is the baseline
    assert theory.predicted_speedup(0.0, 4, 0.25) == pytest.approx(1 / 2)   # nothing accepted: pure overhead
    assert theory.predicted_speedup(1.0, 4, 0.25) == pytest.approx(5 / 2)   # everything accepted
    assert theory.predicted_speedup(0.9, 7, 0.0) == pytest.approx((1 - 0.9 ** 8) / 0.1)   # free draft


def test_prediction_with_costs_reduces_to_theorem_3_8():
    for alpha, gamma, c in ((0.8, 3, 0.05), (0.6, 1, 0.5), (0.3, 8, 0.1)):
        assert theory.speedup_with_costs(alpha, gamma, c) == pytest.approx(theory.predicted_speedup(alpha, gamma, c))
    # a verify pass costing 1.5 steps and 0.1 steps of overhead per iteration, baseline overhead 0.1:
    # 1.75 * 1.1 / (2 * 0.1 + 1.5 + 0.1)
    assert theory.speedup_with_costs(0.5, 2, 0.1, 1.5, 0.1, 0.1) == pytest.approx(1.75 * 1.1 / 1.8)
    assert theory.speedup_with_costs(0.5, 0, 0.1, 1.5, 0.1, 0.1) == 1.0


def test_best_gamma_hand_values():
    # alpha 0.8, c 0.05: 1.714, 2.218, 2.567, 2.801, 2.951, 3.040, 3.082, 3.092 (gamma 8), 3.078 (gamma 9)
    gamma, value = theory.best_gamma(0.8, 0.05, 20)
    assert gamma == 8
    assert value == pytest.approx((1 - 0.8 ** 9) / (0.2 * 1.4))
    assert theory.best_gamma(0.8, 0.05, 5)[0] == 5                   # capped by the export's gamma_max
    # alpha 0.6, c 0.5: gamma 1 gives 1.067, gamma 2 gives 0.98
    assert theory.best_gamma(0.6, 0.5, 8) == (1, pytest.approx(0.64 / 0.6))
    # a draft as slow as the target never pays off
    assert theory.best_gamma(0.9, 1.0, 8) == (0, 1.0)
    assert theory.best_gamma(0.5, 0.1, 0) == (0, 1.0)


def test_best_gamma_matches_brute_force():
    for alpha in (0.1, 0.35, 0.6, 0.75, 0.9, 0.99):
        for c in (0.01, 0.05, 0.2, 0.6):
            values = [theory.predicted_speedup(alpha, g, c) for g in range(0, 17)]
            gamma, value = theory.best_gamma(alpha, c, 16)
            assert value == pytest.approx(max(values))
            assert gamma == values.index(max(values))


@pytest.mark.parametrize("args", [(-0.1, 2, 0.1), (1.1, 2, 0.1), (0.5, -1, 0.1), (0.5, 2, -0.1),
                                  (math.nan, 2, 0.1)])
def test_rejects_out_of_range_inputs(args):
    with pytest.raises(ValueError):
        theory.predicted_speedup(*args)


def test_alpha_counts_tested_guesses_only():
    from specdec.bench.common.runs import Acceptance

    acc = Acceptance()
    for proposed, accepted in ((4, 2), (4, 4), (4, 0), (0, 0)):    # (0, 0): a target-only step, ignored
        acc.add(proposed, accepted)
    assert acc.iterations == 3 and acc.accepted == 6 and acc.rejections == 2
    assert acc.alpha == pytest.approx(6 / 8)                           # accepted / proposed would say 6 / 12
    assert acc.by_position() == [pytest.approx(2 / 3), 1.0, 0.5, 1.0]  # tested 3, 2, 2, 1 times


def test_alpha_estimate_is_unbiased_where_the_acceptance_rate_is_not():
    import random

    from specdec.bench.common.runs import Acceptance

    rng = random.Random(0)
    alpha, gamma = 0.7, 8
    acc, proposed = Acceptance(), 0
    for _ in range(20000):
        n = 0
        while n < gamma and rng.random() < alpha:
            n += 1
        acc.add(gamma, n)
        proposed += gamma
    assert acc.alpha == pytest.approx(alpha, abs=0.01)
    # accepted / proposed estimates (alpha + ... + alpha^gamma) / gamma instead
    assert acc.accepted / proposed == pytest.approx((theory.expected_tokens(alpha, gamma) - 1) / gamma, abs=0.01)

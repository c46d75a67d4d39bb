"""The shared estimators (runtime/decoding/adaptive/estimators.py) against direct computations: every adaptive choice
(auto, width, switch, beam gamma, batch copies) learns through them."""

import random

import pytest

from specdec.runtime.decoding.adaptive.estimators import Line, Mean, Ratio, Waits


def test_a_ratio_is_the_decayed_sums_quotient():
    rng = random.Random(3)
    obs = [(rng.uniform(0, 2), rng.uniform(0.5, 3), rng.uniform(0.5, 1)) for _ in range(50)]
    r = Ratio()
    assert r.get() is None and r.get(7.0) == 7.0
    for num, den, factor in obs:
        r.fade(factor)
        r.add(num, den)
    # the same sums, each observation weighed by the product of the fades after it
    weights = [1.0] * len(obs)
    for i in range(len(obs)):
        for _, _, factor in obs[i + 1:]:
            weights[i] *= factor
    want = sum(w * o[0] for w, o in zip(weights, obs)) / sum(w * o[1] for w, o in zip(weights, obs))
    assert r.get() == pytest.approx(want, rel=1e-12)


def test_a_mean_weighs_the_past_by_its_decay():
    m = Mean(0.5)
    for v in (4.0, 2.0, 1.0):
        m.add(v)
    assert m.get() == pytest.approx((4 * 0.25 + 2 * 0.5 + 1) / (0.25 + 0.5 + 1))


def test_a_line_fits_exact_data_and_keeps_its_slope_non_negative():
    line = Line(1.0)
    for x in range(1, 6):
        line.add(x, 2.0 + 3.0 * x)
    assert line.fit(lambda x: 0.0, 0.0, []) == pytest.approx((2.0, 3.0))
    falling = Line(1.0)
    for x in range(1, 6):
        falling.add(x, 10.0 - x)
    assert falling.fit(lambda x: 0.0, 0.0, [])[1] == 0.0


def test_waits_try_an_unchosen_option_once_per_wait_and_double_it_up_to_the_most():
    w = Waits(first=4, most=16)
    assert w.due("a", 0)                   # never run: due at once
    w.ran("a", 10)
    assert [w.due("a", n) for n in (11, 13, 14)] == [False, False, True]
    walls = []
    for _ in range(4):                     # each try after which it is still not chosen doubles its wait
        w.double("a")
        walls.append(w.wait["a"])
    assert walls == [8, 16, 16, 16]
    assert not w.due("a", 25) and w.due("a", 26)
    w.reset("a")                           # chosen: back to the first wait
    assert w.due("a", 14)

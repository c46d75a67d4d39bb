"""The estimators every adaptive choice learns with: a decayed running mean, a decayed ratio of two sums, a decayed
least-squares line held to a prior where the data cannot decide, and exploration with a doubling wait. Each user
passes its decay (the weight of the past per observation) and its waits.

Exploration follows one rule wherever a choice is learned: an option is tried in proportion to the chance that it
is the better one (Thompson sampling, or its expectation, probability matching), so a wrong early estimate is
corrected while the chance is real, and an option that is surely worse costs next to nothing. `Beta` is that chance
for a rate of kept guesses, `Ratio.variance` for a measured time per token (`faster_chance`).

Who uses what: auto's choice of source and gamma (sources/auto.py: Mean, Line, Beta, Waits), the lookup's width
(sources/width.py: Mean, Line), the switch between auto's rounds and plain steps (switch.py: Ratio, faster_chance),
beam search's gamma (strategies/beam_search.py: Mean, Beta) and a batch's copies (strategies/batch.py: Ratio). The
three choices of gamma among them share one type, controller.py's GammaController."""

from __future__ import annotations

import math

import numpy as np


class Mean:
    """A decayed running mean."""

    def __init__(self, decay: float):
        self.decay = decay
        self.total = self.weight = 0.0

    def add(self, value: float) -> None:
        self.total = self.total * self.decay + value
        self.weight = self.weight * self.decay + 1

    def get(self, default=None):
        return self.total / self.weight if self.weight > 0 else default


class Ratio:
    """A decayed ratio of two sums (seconds per token, guesses kept per guess judged): `fade` weighs the past down,
    `add` adds one observation's numerator and denominator. `variance` is the ratio's sampling variance (the delta
    method over the observations, each weighed by its decay squared)."""

    def __init__(self):
        self.num = self.den = 0.0
        self.sq = [0.0, 0.0, 0.0]       # decayed-squared sums of num^2, num den, den^2

    def fade(self, factor: float) -> None:
        self.num *= factor
        self.den *= factor
        f2 = factor * factor
        self.sq = [v * f2 for v in self.sq]

    def add(self, num: float, den: float) -> None:
        self.num += num
        self.den += den
        nn, nd, dd = self.sq
        self.sq = [nn + num * num, nd + num * den, dd + den * den]

    def get(self, default=None):
        return self.num / self.den if self.den > 0 else default

    def variance(self) -> float | None:
        """Var(num / den) ~ sum w_i^2 (num_i - r den_i)^2 / (sum w_i den_i)^2 (None before any observation)."""
        if self.den <= 0:
            return None
        r = self.num / self.den
        nn, nd, dd = self.sq
        return max(nn - 2 * r * nd + r * r * dd, 0.0) / (self.den * self.den)


def faster_chance(a: Ratio, b: Ratio) -> float | None:
    """The chance that `a`'s true ratio (seconds per token) is below `b`'s, from both estimates and their variances
    (normal approximation; None while one has no observation). Equal estimates without spread: 0.5."""
    ra, rb, va, vb = a.get(), b.get(), a.variance(), b.variance()
    if ra is None or rb is None:
        return None
    spread = math.sqrt(va + vb)
    if spread <= 0:
        return 0.5 if ra == rb else float(ra < rb)
    return 0.5 * math.erfc((ra - rb) / (spread * math.sqrt(2)))


class Beta:
    """The uncertain rate of a yes/no outcome (a guess kept), from decayed counts on top of pseudo-counts `prior`
    (yes, no): its mean, and a draw from Beta(yes, no) for Thompson sampling. `rng` is the chooser's own generator:
    a draw never touches the sampling's random numbers, so no choice can change an output's distribution."""

    def __init__(self, prior=(1.0, 1.0), decay: float = 1.0):
        self.yes, self.no = prior
        self.decay = decay

    def add(self, yes: float, no: float) -> None:
        self.yes = self.yes * self.decay + yes
        self.no = self.no * self.decay + no

    def mean(self) -> float:
        return self.yes / (self.yes + self.no)

    def draw(self, rng: np.random.Generator) -> float:
        return draw_beta(rng, self.yes, self.no)


def draw_beta(rng: np.random.Generator, yes: float, no: float) -> float:
    """A draw from Beta(yes, no) (counts near 0 held at 1e-3, where the distribution is still defined)."""
    return float(rng.beta(max(yes, 1e-3), max(no, 1e-3)))


class Waits:
    """Exploration with a doubling wait: an option left unchosen for its wait (`first` rounds at first) is due to be
    tried once; `double` (a try after which it still is not the choice) doubles its wait, up to `most`; `reset` (it
    is the choice) brings it back to `first`."""

    def __init__(self, first: int, most: int):
        self.first, self.most = first, most
        self.wait, self.last = {}, {}        # option -> its wait; option -> the round it last ran

    def due(self, option, now: int) -> bool:
        wait = self.wait.get(option, self.first)
        return now - self.last.get(option, now - wait) >= wait

    def ran(self, option, now: int) -> None:
        self.last[option] = now

    def reset(self, option) -> None:
        self.wait[option] = self.first

    def double(self, option) -> None:
        self.wait[option] = min(2 * self.wait.get(option, self.first), self.most)


class Line:
    """Decayed least squares of y = a + b x, b >= 0, with pseudo-observations on a prior line (they decide while the
    data cannot: no data, or data at one x only)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.sums = [0.0] * 5       # decayed w, sum x, sum x^2, sum y, sum x y

    def add(self, x: float, y: float) -> None:
        w, sx, sxx, sy, sxy = self.sums
        d = self.decay
        self.sums = [w * d + 1.0, sx * d + x, sxx * d + x * x, sy * d + y, sxy * d + x * y]

    def fit(self, prior, weight: float, at) -> tuple[float, float]:
        """(a, b) of the line through the data and `weight` pseudo-observations of `prior` at each x of `at`."""
        w, sx, sxx, sy, sxy = self.sums
        for x in at:
            y = prior(x)
            w, sx, sxx = w + weight, sx + weight * x, sxx + weight * x * x
            sy, sxy = sy + weight * y, sxy + weight * x * y
        det = w * sxx - sx * sx
        b = max((w * sxy - sx * sy) / det, 0.0) if det > 1e-12 else 0.0
        return (sy - b * sx) / w, b

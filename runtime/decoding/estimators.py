"""The estimators every adaptive choice learns with: a decayed running mean, a decayed ratio of two sums, a decayed
least-squares line held to a prior where the data cannot decide, and exploration with a doubling wait. Each user
passes its decay (the weight of the past per observation) and its waits.

Who uses what: auto's choice of source and gamma (auto.py: Mean, Line, Waits), the lookup's width (width.py: Mean,
Line), the switch between auto's rounds and plain steps (switch.py: Ratio), beam search's gamma (beam_decode.py:
Ratio, Waits) and a batch's copies (batch.py: Ratio)."""

from __future__ import annotations


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
    `add` adds one observation's numerator and denominator."""

    def __init__(self):
        self.num = self.den = 0.0

    def fade(self, factor: float) -> None:
        self.num *= factor
        self.den *= factor

    def add(self, num: float, den: float) -> None:
        self.num += num
        self.den += den

    def get(self, default=None):
        return self.num / self.den if self.den > 0 else default


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

"""The estimators the adaptive choices learn with: a decayed running mean, and a decayed least-squares line held to
a prior where the data cannot decide. Each user passes its decay (the weight of the past per observation)."""

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

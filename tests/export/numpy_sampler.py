"""A plain NumPy (float64) reference for the speculative head of the decoder graphs, written from the semantics in
export/head.py's docstring and the paper (Leviathan et al. 2023, Algorithm 1 and A.5), not from the graph code.

standardize: temperature, then top-k, then top-p (the smallest set of best tokens whose mass reaches top_p, the
best token always kept), renormalized; one-hot argmax at temperature 0.
draw: the first index whose cumulative mass exceeds u * total.
verify: guess i is kept when r_i < p_i(x_i) / (l q_i(x_i)); n = the number of leading kept guesses; the next token
is drawn with uniforms[gamma] from norm(max(0, p_n - l q_n)) after a rejection, or from p_{gamma+1} if all were kept.
At temperature 0 a guess is kept iff it is the argmax, or (l < 1) iff p(x) >= l max p for p the softmax of the
top-k/top-p-filtered logits at temperature 1 (paper A.5, the greedy variant); the next token is the argmax of row n.
"""

from __future__ import annotations

import numpy as np


def standardize_row(logits, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    vocab = z.shape[0]
    if temperature <= 0:
        out = np.zeros(vocab)
        out[int(np.argmax(z))] = 1.0
        return out
    z = z / float(temperature)
    order = np.argsort(-z, kind="stable")                       # best first
    k = vocab if top_k <= 0 else min(int(top_k), vocab)
    candidates = order[:k]
    mass = np.exp(z[candidates] - z[candidates].max())
    mass /= mass.sum()                                          # distribution after top-k
    if top_p >= 1.0:
        n_keep = k
    else:
        # smallest prefix whose mass reaches top_p: keep token j iff the mass strictly before it is < top_p
        before = np.concatenate([[0.0], np.cumsum(mass)[:-1]])
        n_keep = max(1, int(np.sum(before < top_p)))
    kept = candidates[:n_keep]
    out = np.zeros(vocab)
    weights = np.exp(z[kept] - z[kept].max())
    out[kept] = weights / weights.sum()
    return out


def standardize(logits, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    logits = np.atleast_2d(np.asarray(logits))
    return np.stack([standardize_row(row, temperature, top_k, top_p) for row in logits])


def draw(probs, u: float) -> int:
    """Inverse CDF: the first index whose cumulative mass exceeds u * total."""
    cdf = np.cumsum(np.asarray(probs, dtype=np.float64))
    index = int(np.searchsorted(cdf, float(u) * cdf[-1], side="right"))
    return min(index, len(cdf) - 1)


def sample(logits, uniforms, temperature: float, top_k: int = 0, top_p: float = 1.0):
    probs = standardize(logits, temperature, top_k, top_p)
    tokens = np.array([draw(row, u) for row, u in zip(probs, uniforms)], dtype=np.int64)
    return probs, tokens


def verify(target_logits, draft_probs, draft_tokens, uniforms, temperature: float, top_k: int = 0,
           top_p: float = 1.0, lenience: float = 1.0):
    """-> (n accepted, next token, details) for one speculative step."""
    gamma = len(draft_tokens)
    p = standardize(target_logits, temperature, top_k, top_p)            # [gamma+1, vocab]
    q = np.asarray(draft_probs, dtype=np.float64).reshape(gamma, p.shape[-1])
    n = 0
    while n < gamma:
        x = int(draft_tokens[n])
        if temperature <= 0:
            soft = standardize_row(target_logits[n], 1.0, top_k, top_p)
            kept = p[n, x] == 1.0 or (lenience < 1 and soft[x] >= lenience * soft.max())
        else:
            px, qx = p[n, x], q[n, x]
            ratio = np.inf if qx == 0 else px / (lenience * qx)
            kept = float(uniforms[n]) < ratio
        if not kept:
            break
        n += 1
    if n < gamma and temperature <= 0:
        dist = p[n]          # the argmax: a rejected guess is never the argmax
    elif n < gamma:
        residual = np.maximum(0.0, p[n] - lenience * q[n])
        assert residual.sum() > 0, "a rejection always leaves residual mass"
        dist = residual / residual.sum()
    else:
        dist = p[gamma]
    return n, draw(dist, uniforms[gamma]), {"p": p, "dist": dist}


def verify_batch(logits, draft_probs, guesses, uniforms, temperature, top_k, top_p, lenience, guess_counts=None,
                 mask=None):
    """The batched head, row by row. logits [B, G+1, V] (each row's last G+1 positions), guesses [B, G]; draft_probs
    [G, V] (every row) or [B, G, V], uniforms [G+1] or [B, G+1], the parameters and guess_counts scalars or [1] or [B]
    (guess_counts None or -1: G), mask None, [G+1, V] or [B*(G+1), V]. Row b alone is verify() of its first G_b
    guesses with its own parameters, uniforms r_1 .. r_{G_b} and the LAST column for the draw; its probs are all G+1
    rows standardized. -> list of (probs [G+1, V], n, token, details) per row."""
    logits = np.asarray(logits, np.float64)
    rows, positions, vocab = logits.shape
    gamma = positions - 1
    if mask is not None:
        logits = logits + np.asarray(mask, np.float64).reshape(-1, positions, vocab)

    def per_row(value, shared_ndim):
        value = np.asarray(value)
        return value[None].repeat(rows, 0) if value.ndim == shared_ndim else value

    q = per_row(np.asarray(draft_probs, np.float64), 2)
    u = per_row(uniforms, 1)
    params = [np.broadcast_to(np.asarray(x).reshape(-1), (rows,))
              for x in (temperature, top_k, top_p, lenience, -1 if guess_counts is None else guess_counts)]
    out = []
    for b in range(rows):
        t, k, p, l, g = (float(params[0][b]), int(params[1][b]), float(params[2][b]), float(params[3][b]),
                         int(params[4][b]))
        g = gamma if g < 0 else g
        r = np.concatenate([u[b, :g], u[b, gamma:]])
        n, token, details = verify(logits[b, :g + 1], q[b, :g], np.asarray(guesses[b])[:g], r, t, k, p, l)
        out.append((standardize(logits[b], t, k, p), n, token, details))
    return out

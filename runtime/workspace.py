"""The device buffers one round of Algorithm 1 passes between the draft and the target, and the only place that
knows where in them each graph reads and writes (allocated once at load).

    tokens    [carry, current, x_1 .. x_gamma_max, n]  int64. `current` is the last emitted token (in no cache
              yet); a draft step i writes x_{i+1} right after the token it read, so tokens[current : current+k+1] is
              the target's verify input as it stands, and the verify run writes the next token back into `current`
              and the number of kept guesses into `n`: the host reads the whole verdict in one read. `carry` holds
              x_k when every guess was kept and the draft has not seen it yet.
    q         [gamma_max, V]    the draft's distributions q_1 .. q_k (never leave the device)
    point     [gamma_max, V]    one-hot rows q_i = delta(x_i) for host-made guesses (a lookup draft); zero but
                                for the entries the last such proposal set
    p         [gamma_max+1, V]  the target's standardized rows p_1 .. p_{k+1} of the last verify
    uniforms  r ~ U(0,1) for the whole request, drawn at reset from the request's seed: each round takes the next
              2 gamma + 1 (one per draft step, then k+1 for the verify run), so a round writes nothing
    params    temperature, top_k, top_p, lenience: device scalars, written once per request

A graph input or output is bound to a `View` (buffer, shape, element offset); the binder checks it against its
buffer (device.Binder).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .device import Buffer
from .params import Params


class View(NamedTuple):
    buffer: Buffer
    shape: tuple
    offset: int = 0


class Workspace:
    CARRY, CURRENT, FIRST_GUESS = 0, 1, 2

    def __init__(self, gamma_max: int, vocab: int, device: str, max_length: int):
        self.gamma_max, self.vocab = gamma_max, vocab
        self.ACCEPTED = gamma_max + 2
        self.tokens = Buffer((gamma_max + 3,), np.int64, device)
        self.q = Buffer((gamma_max, vocab), np.float32, device)
        self.p = Buffer((gamma_max + 1, vocab), np.float32, device)
        self.point = Buffer((gamma_max, vocab), np.float32, device)
        self._ones = []       # flat indices of `point` set to 1 by the last host-made proposal
        # every round emits at least one token, so a request has at most max_length rounds
        self.uniforms = Buffer((max_length * (2 * gamma_max + 1),), np.float32, device)
        self.scratch = Buffer((1,), np.int64, device)       # a draft step's `accepted` (always 0), unread
        self.temperature = Buffer((1,), np.float32, device)
        self.top_k = Buffer((1,), np.int64, device)
        self.top_p = Buffer((1,), np.float32, device)
        self.lenience = Buffer((1,), np.float32, device)
        self.asked = 0        # gamma of the current round (where the verify run's uniforms start)
        self.base = 0         # the current round's first uniform
        self._next = 0        # the next round's first uniform
        self._views = {}      # (kind, ...) -> (inputs, outputs) but the uniforms: those never change

    def reset(self, start_token: int, params: Params) -> None:
        self.tokens.write([start_token, start_token])
        self.uniforms.write(np.random.default_rng(params.seed).random(self.uniforms.size, dtype=np.float32))
        self._next = 0
        self.temperature.write([params.temperature])
        self.top_k.write([params.top_k])
        self.top_p.write([params.top_p])
        self.lenience.write([params.lenience])

    def new_round(self, gamma: int) -> None:
        """The round's r ~ U(0,1): gamma for drafting, gamma+1 for accepting and the last draw."""
        self.asked, self.base = gamma, self._next
        self._next += 2 * gamma + 1

    def _scalars(self) -> dict:
        return {"temperature": View(self.temperature, (1,)), "top_k": View(self.top_k, (1,)),
                "top_p": View(self.top_p, (1,)), "lenience": View(self.lenience, (1,))}

    def draft_step(self, i: int, behind: int) -> tuple[dict, dict]:
        """Inputs and outputs of draft step i (0-based): read the token before x_{i+1} (and the carried x_k of the
        last round first when `behind`), write x_{i+1} and q_{i+1}. (Read-only mappings, made once per (i, behind).)"""
        inputs, outputs = self._cached(("draft", i, behind), lambda: self._draft_step(i, behind))
        return {**inputs, "uniforms": View(self.uniforms, (1,), self.base + i)}, outputs

    def verify(self, k: int, point_mass: bool = False) -> tuple[dict, dict]:
        """Inputs and outputs of the target run over current, x_1 .. x_k (k = 0: a plain target step); q from the
        draft's rows, or the one-hot rows of host-made guesses (`point_mass`)."""
        inputs, outputs = self._cached(("verify", k, point_mass),
                                       lambda: self._verify(k, self.point if point_mass else self.q))
        return {**inputs, "uniforms": View(self.uniforms, (k + 1,), self.base + self.asked)}, outputs

    def _cached(self, key: tuple, make):
        if key not in self._views:
            self._views[key] = make()
        return self._views[key]

    def _draft_step(self, i: int, behind: int):
        start = self.CURRENT + i - behind
        inputs = {"input_ids": View(self.tokens, (1, 1 + behind), start),
                  "draft_probs": View(self.q, (0, self.vocab)), **self._scalars()}
        outputs = {"probs": View(self.q, (1, self.vocab), i * self.vocab),
                   "accepted": View(self.scratch, (1,)),
                   "next_token": View(self.tokens, (1,), self.FIRST_GUESS + i)}
        return MappingProxyType(inputs), MappingProxyType(outputs)

    def _verify(self, k: int, q: Buffer):
        inputs = {"input_ids": View(self.tokens, (1, k + 1), self.CURRENT),
                  "draft_probs": View(q, (k, self.vocab)), **self._scalars()}
        outputs = {"probs": View(self.p, (k + 1, self.vocab)),
                   "accepted": View(self.tokens, (1,), self.ACCEPTED),
                   "next_token": View(self.tokens, (1,), self.CURRENT)}
        return MappingProxyType(inputs), MappingProxyType(outputs)

    def verdict(self) -> tuple[int, list]:
        """(n, [x_1 .. x_n, next token]) from the device after a verify run."""
        row = self.tokens.flat().tolist()          # one read: guesses, next token and n
        n = row[self.ACCEPTED]
        return n, row[self.FIRST_GUESS:self.FIRST_GUESS + n] + [row[self.CURRENT]]

    def carry(self, token: int) -> None:
        self.tokens.write([token], self.CARRY)

    def write_point_guesses(self, tokens) -> None:
        """Host-made guesses x_1 .. x_k with point-mass distributions q_i = delta(x_i) (verify with point_mass)."""
        ones = [i * self.vocab + int(t) for i, t in enumerate(tokens)]
        self.point.scatter(self._ones + ones, [0.0] * len(self._ones) + [1.0] * len(ones))
        self._ones = ones
        self.tokens.write(tokens, self.FIRST_GUESS)

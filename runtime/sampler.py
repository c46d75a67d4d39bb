"""The sampler graphs bound to the decoder's buffers: draft sampling and Algorithm 1's accept/residual step."""

from __future__ import annotations

import time

import numpy as np

from .device import Binder, Buffer, create_session
from .manifest import Manifest


class Params:
    """Sampling parameters as device scalars, written once per request."""

    def __init__(self, device: str):
        self.temperature = Buffer((1,), np.float32, device)
        self.top_k = Buffer((1,), np.int64, device)
        self.top_p = Buffer((1,), np.float32, device)
        self.lenience = Buffer((1,), np.float32, device)
        self.filtered = False

    def set(self, temperature: float, top_k: int, top_p: float, lenience: float) -> None:
        self.temperature.write([temperature])
        self.top_k.write([top_k])
        self.top_p.write([top_p])
        self.lenience.write([lenience])
        self.filtered = top_k > 0 or top_p < 1.0


class Samplers:
    """Both variants (plain, top-k/top-p) of the sample and verify graphs; `params.filtered` picks one."""

    def __init__(self, manifest: Manifest, provider: str, device: str):
        self.params = Params(device)
        # one thread: a sampler's work is one vocabulary-sized row, too small to split across cores
        self.graphs = {name: Binder(create_session(manifest.path(g.file), provider, threads=1), device)
                       for name, g in manifest.samplers.items()}
        for binder in self.graphs.values():
            for name, buf in (("temperature", self.params.temperature), ("top_k", self.params.top_k),
                              ("top_p", self.params.top_p), ("lenience", self.params.lenience)):
                binder.input(name, buf, (1,))
        self.vocab = manifest.vocab_size

    def _graph(self, name: str) -> Binder:
        return self.graphs[name + "_topkp" if self.params.filtered else name]

    def sample(self, logits: Buffer, row: int, uniforms: Buffer, u: int, probs: Buffer | None, p_row: int,
               tokens: Buffer, t_slot: int) -> float:
        """Standardize logits[row], keep the distribution in probs[p_row] and draw a token into tokens[t_slot]."""
        g = self._graph("sample")
        g.input("logits", logits, (1, self.vocab), row * self.vocab)
        g.input("uniforms", uniforms, (1,), u)
        g.output("probs", probs, (1, self.vocab), p_row * self.vocab)
        g.output("tokens", tokens, (1,), t_slot)
        t = time.perf_counter()
        g.run()
        return time.perf_counter() - t

    def verify(self, target_logits: Buffer, draft_probs: Buffer, tokens: Buffer, first_guess: int, gamma: int,
               uniforms: Buffer, u: int, accepted: Buffer, next_slot: int) -> float:
        """Accept/reject tokens[first_guess : first_guess+gamma]; n -> accepted[0], next token -> tokens[next_slot]."""
        g = self._graph("verify")
        g.input("target_logits", target_logits, (gamma + 1, self.vocab))
        g.input("draft_probs", draft_probs, (gamma, self.vocab))
        g.input("draft_tokens", tokens, (gamma,), first_guess)
        g.input("uniforms", uniforms, (gamma + 1,), u)
        g.output("accepted", accepted, (1,))
        g.output("next_token", tokens, (1,), next_slot)
        t = time.perf_counter()
        g.run()
        return time.perf_counter() - t

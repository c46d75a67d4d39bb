"""One step of Leviathan et al.'s Algorithm 1 (SpeculativeDecodingStep), on device buffers."""

from __future__ import annotations

from .draft import DraftSource
from .model import CachedSeq2Seq
from .sampler import Samplers
from .stats import Stats
from .workspace import Workspace


def speculative_step(ws: Workspace, target: CachedSeq2Seq, draft: DraftSource, samplers: Samplers,
                     gamma: int, stats: Stats) -> list:
    """Propose gamma guesses, verify them in one target pass, keep n of them plus one more token."""
    start = target.length
    ws.draw_uniforms(2 * gamma + 1)                        # r ~ U(0,1) for drafting, accepting, the last draw
    draft.propose(ws, gamma, start, stats)                # x_i ~ q_i(x) for i = 1..gamma, q stays on the device
    stats.verify_s += target.decode(ws.tokens, ws.CURRENT, gamma + 1)     # p_1 .. p_{gamma+1}: one target run
    stats.sampling_s += samplers.verify(target.logits, ws.probs, ws.tokens, ws.FIRST_GUESS, gamma,
                                        ws.uniforms, gamma, ws.accepted, ws.CURRENT)
    n = int(ws.accepted.flat()[0])                         # keep x_i while r_i < p_i(x)/q_i(x); n in 0..gamma
    tokens = ws.tokens.flat()[:gamma + 2].copy()           # x_1..x_n and the residual/bonus token t
    target.rollback(start + n + 1)                         # forget the rejected guesses' keys and values
    draft.accepted(ws, n, gamma, start + n + 1, tokens)
    stats.target_calls += 1
    stats.ort_runs += 2
    stats.proposed += gamma
    stats.accepted += n
    return [int(t) for t in tokens[ws.FIRST_GUESS:ws.FIRST_GUESS + n]] + [int(tokens[ws.CURRENT])]


def target_step(ws: Workspace, target: CachedSeq2Seq, samplers: Samplers, stats: Stats) -> list:
    """Plain autoregressive decoding (gamma = 0): one target run, one draw from p."""
    ws.draw_uniforms(1)
    stats.verify_s += target.decode(ws.tokens, ws.CURRENT, 1)
    stats.sampling_s += samplers.sample(target.logits, 0, ws.uniforms, 0, ws.probs, 0, ws.tokens, ws.CURRENT)
    stats.target_calls += 1
    stats.ort_runs += 2
    return [int(ws.tokens.flat()[ws.CURRENT])]

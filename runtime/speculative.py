"""One step of Leviathan et al.'s Algorithm 1 (SpeculativeDecodingStep): propose, verify in one target run, commit."""

from __future__ import annotations

from .draft import DraftSource
from .model import CachedSeq2Seq
from .round import Proposal, Verdict
from .stats import Stats
from .workspace import Workspace


def verify(ws: Workspace, target: CachedSeq2Seq, proposal: Proposal, stats: Stats) -> Verdict:
    """One target run over the current token and x_1 .. x_k: p_1 .. p_{k+1}, then keep x_i while r_i < p_i(x)/q_i(x)
    and draw the next token from norm(max(0, p_{n+1} - q_{n+1})), or from p_{k+1} when all were kept."""
    base, k = target.length, proposal.count
    q = ws.point if proposal.point_mass else ws.rows(0)
    stats.target_s += target.run(*ws.run(base, k, q, ws.p, 0))
    n, tokens = ws.judged(k)
    target.rollback(base + n + 1)                        # forget the rejected guesses' keys and values
    stats.target_calls += 1
    stats.ort_runs += 1
    stats.proposed += k
    stats.accepted += n
    return Verdict(k, n, tokens, base)


def speculative_step(ws: Workspace, target: CachedSeq2Seq, draft: DraftSource, gamma: int, stats: Stats) -> list:
    """Propose up to gamma guesses, verify them in one target pass, keep n of them plus one more token."""
    proposal = draft.propose(ws, gamma, ws.rows(0), 0, stats)    # x_i ~ q_i(x), i = 1..k; q stays on the device
    verdict = verify(ws, target, proposal, stats)                 # n kept guesses and the next token
    draft.commit(ws, verdict)
    stats.source((proposal.source or draft.name) if proposal.count else "none").add(proposal.count, verdict.accepted, len(verdict.tokens))
    ws.emit(verdict.tokens)
    return verdict.tokens


def target_step(ws: Workspace, target: CachedSeq2Seq, stats: Stats) -> list:
    """Plain autoregressive decoding (gamma = 0): one target run, one draw from p."""
    tokens = verify(ws, target, Proposal(0), stats).tokens
    stats.source("none").add(0, 0, len(tokens))
    ws.emit(tokens)
    return tokens

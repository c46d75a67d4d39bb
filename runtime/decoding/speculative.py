"""One step of Leviathan et al.'s Algorithm 1 (SpeculativeDecodingStep): propose, verify in one target run, commit."""

from __future__ import annotations

from typing import NamedTuple

from ..core.stats import Stats
from ..engine.model import CachedSeq2Seq
from ..engine.workspace import Workspace
from . import verifier
from .sources.contract import DraftSource, Proposal, Verdict


def verify(ws: Workspace, target: CachedSeq2Seq, proposal: Proposal, stats: Stats) -> Verdict:
    """One target run over the current token and x_1 .. x_k (runtime/decoding/verifier.py): p_1 .. p_{k+1} into the
    workspace's p, x_i kept while r_i < p_i(x)/q_i(x), the next token drawn from the residual or the last p; or, for a
    tree of candidates, one draw per node and the walk down the nodes the draws chose (tree.py)."""
    seconds, verdict = verifier.verify_tree(ws, target, proposal.tree) if proposal.tree is not None else \
        verifier.verify(ws, target, proposal, ws.rows(0), ws.p)
    stats.target_s += seconds
    stats.target_calls += 1
    stats.proposed += verdict.proposed
    stats.accepted += verdict.accepted
    return verdict


class Round(NamedTuple):
    """What one round made: its tokens, and for the per-source figures the source that proposed ("none" when no
    guess was made), its guesses and how many were kept."""
    tokens: list
    source: str
    proposed: int
    accepted: int


def speculative_step(ws: Workspace, target: CachedSeq2Seq, draft: DraftSource, gamma: int, stats: Stats) -> Round:
    """Propose up to gamma guesses, verify them in one target pass, keep n of them plus one more token."""
    proposal = draft.propose(ws, gamma, ws.rows(0), 0, stats)    # x_i ~ q_i(x), i = 1..k; q stays on the device
    verdict = verify(ws, target, proposal, stats)                 # n kept guesses and the next token
    draft.commit(ws, verdict)
    ws.emit(verdict.tokens)
    source = (proposal.source or draft.name) if proposal.count else "none"
    return Round(verdict.tokens, source, proposal.count, verdict.accepted)


def target_step(ws: Workspace, target: CachedSeq2Seq, stats: Stats) -> Round:
    """Plain autoregressive decoding (gamma = 0): one target run, one draw from p."""
    tokens = verify(ws, target, Proposal(0), stats).tokens
    ws.emit(tokens)
    return Round(tokens, "none", 0, 0)

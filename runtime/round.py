"""What one round of Algorithm 1 passes around: the draft's proposal and the target's verdict."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Proposal:
    """k guesses x_1 .. x_k were appended to the workspace's round, their distributions q_1 .. q_k are in the rows
    the proposer was given, or, for
    deterministic guesses (`point_mass`: q_i = delta(x_i), e.g. copied from the source), in its one-hot rows.
    k may be less than the gamma asked for, or 0 (a miss: the round is a plain target step)."""
    count: int
    point_mass: bool = False
    source: str = ""          # the name of the source that made it (a choice of draft="auto"), for the stats


@dataclass(frozen=True)
class Verdict:
    """The verifier's answer to a proposal of `proposed` guesses at positions base+1 ..: the first `accepted` were
    kept and `tokens` is x_1 .. x_n followed by the next token (drawn from the residual after a rejection, else
    the bonus token). The verifier's standardized rows stay on the device (the target's in the workspace's p)."""
    proposed: int
    accepted: int
    tokens: list
    base: int = 0

    @property
    def next_token(self) -> int:
        return self.tokens[-1]

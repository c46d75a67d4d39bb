"""What one round of Algorithm 1 passes around: the draft's proposal and the target's verdict."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Proposal:
    """k guesses x_1 .. x_k are in the workspace's tokens, their distributions q_1 .. q_k in its q rows, or, for
    deterministic guesses (`point_mass`: q_i = delta(x_i), e.g. copied from the source), in its one-hot rows.
    k may be less than the gamma asked for, or 0 (a miss: the round is a plain target step)."""
    count: int
    point_mass: bool = False


@dataclass(frozen=True)
class Verdict:
    """The target's answer to a proposal of `proposed` guesses: the first `accepted` were kept and `tokens` is
    x_1 .. x_n followed by the next token (drawn from the residual after a rejection, else the bonus token).
    The standardized target rows p_1 .. p_{k+1} stay in the workspace's p buffer."""
    proposed: int
    accepted: int
    tokens: list

    @property
    def next_token(self) -> int:
        return self.tokens[-1]

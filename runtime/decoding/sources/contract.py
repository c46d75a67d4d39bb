"""What one round of Algorithm 1 passes around: the draft's proposal, the verifier's verdict, and the contract every
draft source keeps (DraftSource; the sources themselves are in model_draft.py, lookup.py and auto.py)."""

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
    tree: object = None       # several candidates merged into a token tree (runtime/decoding/sources/tree.py): then
    #                           count is its M nodes, written by ws.write_tree, and the target walks it


@dataclass(frozen=True)
class Verdict:
    """The verifier's answer to a proposal of `proposed` guesses at positions base+1 ..: the first `accepted` were
    kept and `tokens` is x_1 .. x_n followed by the next token (drawn from the residual after a rejection, else
    the bonus token). The verifier's standardized rows stay on the device (the target's in the workspace's p)."""
    proposed: int
    accepted: int
    tokens: list
    base: int = 0
    seconds: float = 0.0      # the verify run's

    @property
    def next_token(self) -> int:
        """The round's last token: the replacement for the first rejected guess, or the bonus token."""
        return self.tokens[-1]


class DraftSource:
    """Anything that proposes up to k guesses with their distributions q, then learns the verdict.

    `propose` appends x_1 .. x_k to the workspace's round (after `ws.end`), writes q_1 .. q_k into the rows it is
    given (or the point rows) and returns a Proposal (k may be smaller than asked, 0 on a miss); `commit` gets the
    Verdict of the level above. What a source costs and needs is declared here, with defaults, so the choosers and
    the factory that configures sources ask it instead of looking inside: `below` (the source a chain level
    verifies, or None), `needs_encoder` (an encoder run is due before its next proposal in this request), `copies`
    (its guesses are host-made point masses: a lookup), `model` (the model whose proposals it makes, or None: a
    chain level topped by the same model proposes exactly as that model does), `widens` (its rounds may verify
    several candidates as a token tree: the lookup, which the factory then tells whether it proposes to the target
    itself and gives the width chooser), `probed` (auto may read its guesses before the round's choice and propose
    them as found: the lookup's `guesses` and `propose_found`; any other source is chosen by its measured rates and
    asked to propose), `origins` (the names its proposals go by) and `levels()` (itself and every source it is made
    of)."""

    name = "draft"
    below: "DraftSource | None" = None
    copies = False
    model = None
    widens = False
    probed = False

    @property
    def needs_encoder(self) -> bool:
        """Whether an encoder run is due before this source's next proposal in the request (a model source not yet
        used in it); a chooser shares that run's cost over the rounds the source may serve."""
        return False

    @property
    def origins(self) -> tuple:
        """The names its proposals go by in the stats and in auto's estimates: its own name, or (the lookup) one per
        place it copies from, its own name first."""
        return (self.name,)

    def levels(self) -> list:
        """This source and every source it is made of: the levels below a chain's top, auto's candidates (each
        once, this one first)."""
        out = [self]
        below = self.below
        while below is not None and below not in out:
            out.append(below)
            below = below.below
        return out

    def start(self, source_ids, stats) -> None:
        """A new request: prepare for the prompt (the target's decoder sequence starts with the start token)."""
        raise NotImplementedError

    def plain(self, produced: int) -> bool:
        """Asked at each round's start (`produced`: the request's tokens so far): True when the round is to be a
        plain target step instead of a proposal (auto's measured switch, runtime/decoding/adaptive/switch.py)."""
        return False

    def propose(self, ws, k: int, rows, row: int, stats) -> Proposal:
        """Append up to k guesses to the round and write q_i into `rows` from row `row` on (or the point rows)."""
        raise NotImplementedError

    def commit(self, ws, verdict: Verdict) -> None:
        """The level above kept verdict.accepted of the guesses after position verdict.base."""
        raise NotImplementedError

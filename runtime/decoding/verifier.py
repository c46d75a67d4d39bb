"""Algorithm 1's verification, one piece for every level: a model's run over the tokens it has not seen, the last k
of which are guesses checked against their q, then the rollback of what it rejected.

The target verifies the round's proposal (speculative.py); a chain level verifies what the level below proposed
(draft.py). Both are this function; they differ only in where the verifier's rows go and how the run is counted."""

from __future__ import annotations

from ..engine.device import Buffer
from ..engine.model import CachedSeq2Seq
from ..engine.workspace import Workspace
from .round import Proposal, Verdict


def verify(ws: Workspace, model: CachedSeq2Seq, proposal: Proposal, q_rows: Buffer, out: Buffer,
           out_row: int = 0) -> tuple[float, Verdict]:
    """One run of `model` over positions model.length .. ws.end whose last proposal.count tokens are the guesses
    x_1 .. x_k with distributions q in `q_rows` (the point rows for host-made guesses): x_i is kept while
    r_i < p_i(x_i)/q_i(x_i), and the next token is drawn from norm(max(0, p_{n+1} - q_{n+1})), or from p_{k+1}
    when all were kept. The model's standardized rows go to `out` from `out_row` on; its cache forgets the rejected
    guesses. Returns (seconds of the run, the verdict)."""
    k = proposal.count
    base = ws.end - k
    q = ws.point if proposal.point_mass else q_rows
    seconds = model.run(*ws.run(model.length, guesses=k, q=q, out=out, out_row=out_row))
    n, tokens = ws.judged(k)
    model.rollback(base + n + 1)                         # forget the rejected guesses' keys and values
    return seconds, Verdict(k, n, tokens, base)

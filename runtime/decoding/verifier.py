"""Algorithm 1's verification, one piece for every level: a model's run over the tokens it has not seen, the last k
of which are guesses checked against their q, then the rollback of what it rejected.

The target verifies the round's proposal (speculative.py); a chain level verifies what the level below proposed
(draft.py). Both are this function; they differ only in where the verifier's rows go and how the run is counted."""

from __future__ import annotations

from ..engine.device import Buffer
from ..engine.model import CachedSeq2Seq
from ..engine.workspace import Workspace
from .sources.contract import Proposal, Verdict
from .sources.tree import Tree


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
    return seconds, Verdict(k, n, tokens, base, seconds)


def verify_tree(ws: Workspace, model: CachedSeq2Seq, tree: Tree) -> tuple[float, Verdict]:
    """One run of the target over the current token and the tree's M nodes (written by ws.write_tree): each node's
    draw y_i ~ p_i, then the walk (runtime/decoding/sources/tree.py): the longest path whose tokens the draws chose, and
    the draw after it. The path's keys and values move to the positions after the current token; the rest are
    forgotten. Returns (seconds of the run, the verdict: `proposed` = M nodes)."""
    start = ws.start
    seconds = model.run(*ws.tree_run(tree.size))
    path, z = tree.walk(ws.draws.flat())
    tokens = [tree.tokens[node] for node in path] + [z]
    model.keep(start, path)
    model.rollback(start + len(path) + 1)
    ws.tree_verdict(path, tokens)
    return seconds, Verdict(tree.size, len(path), tokens, start, seconds)

"""Model drafts: a draft model proposing guesses with their distributions q, alone or as a level of a chain.

The contract (runtime/decoding/sources/contract.py's DraftSource): `propose` appends x_1 .. x_k to the workspace's round
(after `ws.end`) and writes q_1 .. q_k into the rows it is given (or the point rows) and returns a Proposal (k may be
smaller than asked, 0 on a miss); `commit` gets the Verdict of the level above. A new kind of draft is a new class here,
not a new loop.

A ModelDraft with a source `below` is one level of a chain (report Algorithm 3, generalized): it verifies what the
level below proposes with Algorithm 1 and passes the tokens it keeps plus its own next token, each distributed
exactly as its own q, up with its own rows, then continues on its own; with its proposal loop all of that is one run
of its proposal loop (export/loop.py). So "lookup,draft" is the draft model checking copied tokens, and
"small,medium" a three-model chain under the target.
"""

from __future__ import annotations

from ...core.stats import Stats
from ...engine.model import CachedSeq2Seq
from ...engine.workspace import Workspace
from .contract import DraftSource, Proposal, Verdict
from ..verifier import verify

__all__ = ["DraftSource", "ModelDraft"]


class ModelDraft(DraftSource):
    """A small T5 export. Alone: k autoregressive steps that write x_1 .. x_k and q_1 .. q_k into the rows, in one
    run of its proposal loop (logits processors as one mask row, workspace.py) or one run per step (an
    int8-wo draft, k = 1). Over a
    source `below`: Algorithm 1 of its own on the source's guesses, then its own steps (see the module docstring);
    one run with the loop, else verify runs and single steps."""

    def __init__(self, model: CachedSeq2Seq, below: DraftSource | None = None, name: str | None = None,
                 level: int = 0):
        self.model, self.below, self.level = model, below, level
        self.name = name or model.role
        self._ids = None      # the request's source ids, encoded on first use (an auto choice may never use us)

    @property
    def needs_encoder(self) -> bool:
        """True until the draft model has encoded this request's source (it does so on its first proposal)."""
        return self.model.length < 0

    def start(self, source_ids, stats):
        self._ids, self.model.length = source_ids, -1
        if self.below is not None:
            self.below.start(source_ids, stats)

    def _run(self, views: tuple, stats: Stats, steps: int = 1) -> None:
        self._count(self.model.run(*views, steps=steps), stats)

    @staticmethod
    def _count(seconds: float, stats: Stats) -> None:
        stats.draft_s += seconds
        stats.draft_calls += 1

    def _ready(self, ws: Workspace, upto: int, guesses: int, stats: Stats) -> None:
        """When the cache lags so far behind that a run over positions length..upto plus `guesses` would not fit
        the model's width, feed the missed tokens first (runs whose head output is dropped: this happens when an
        auto choice did not use the model for a while)."""
        width = self.model.logits.shape[0]
        while upto - self.model.length + 1 + guesses > width:
            first = self.model.length
            self._run(ws.catch_up(first, min(first + width - 1, upto - 1)), stats)

    def propose(self, ws, k, rows, row, stats):
        if self.model.length < 0:
            self.model.encode(self._ids, stats)
        if k > 1 and self.model.loops:     # one run (export/loop.py)
            return self._loop(ws, k, rows, row, stats)
        made = 0
        while self.below is not None and made < k:
            made_now = self._verify_below(ws, k - made, rows, row + made, stats)
            if not made_now:
                break
            made += made_now
        for i in range(made, k):                 # single steps
            self._ready(ws, ws.end, 0, stats)
            self._run(ws.run(self.model.length, out=rows, out_row=row + i, next_slot=ws.end + 1), stats)
            ws.appended_on_device()
        return Proposal(k)

    def _loop(self, ws, k, rows, row, stats) -> Proposal:
        """The whole proposal in one run of the proposal loop: over a source below, its j <= k guesses are verified
        in the loop's first iteration (Algorithm 1 at this level: the kept ones and one more token, each
        distributed as our q) and the loop samples on until there are k tokens; alone, k sampling steps."""
        j, base, q = 0, ws.end, None
        if self.below is not None:
            below = self.below.propose(ws, k, ws.rows(self.level + 1), 0, stats)
            j, base = below.count, ws.end - below.count
            q = ws.point if below.point_mass else ws.rows(self.level + 1)
        self._run(ws.proposal(self.model.length, k, rows, row, guesses=j, q=q if j else None), stats, steps=k)
        ws.appended_on_device(k, replaced=j)
        if j:
            n = ws.accepted()
            stats.source(self.below.name + ">").add(j, n)
            self.below.commit(ws, Verdict(j, n, [], base))
        return Proposal(k)

    def _verify_below(self, ws, j_max, rows, row, stats) -> int:
        """One Algorithm-1 round at this level: the source below proposes j <= j_max guesses, one run of ours
        keeps n of them and draws one more token; n + 1 tokens join the round with our rows, at most j_max (when
        all j_max were kept the extra token is dropped: where to stop was decided before it was drawn, so the kept
        tokens are still each distributed as our q). 0 on a miss."""
        below = self.below.propose(ws, j_max, ws.rows(self.level + 1), 0, stats)
        j = below.count
        if j == 0:
            return 0
        self._ready(ws, ws.end - j, j, stats)
        seconds, verdict = verify(ws, self.model, below, ws.rows(self.level + 1), rows, row)
        self._count(seconds, stats)
        n = verdict.accepted
        stats.source(self.below.name + ">").add(j, n)
        self.below.commit(ws, verdict)
        if n == j_max:
            ws.retract(1)
            return n
        return n + 1

    def commit(self, ws, verdict):
        self.model.rollback(verdict.base + verdict.accepted + 1)
        if self.below is not None:
            self.below.commit(ws, verdict)

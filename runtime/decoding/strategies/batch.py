"""Many requests decoded together: every round is one target run over all of them (continuous batching).

Each row of the batch is a request with its own parameters, uniform stream, output and lookup. A round is either
plain (every row appends its pending token: a target-only step for all) or a lookup round (each row that asks for
a draft proposes up to its gamma tokens copied from its output, its source or the datastore, and the others none;
the head judges every row's guesses with that row's parameters). So each row keeps its own number of accepted
guesses and its own length; rows that finish leave between rounds and queued requests take their places.

Exactness per row: a row's guesses are point masses, judged by Algorithm 1 with the row's own standardized p and
uniforms, in a run where the row attends to its own cache positions only (export/decoder.py's row_lengths and
source_lengths). Whether a round is plain or a lookup round never depends on the row's uniforms, so each row's
output has the target's distribution, and at temperature 0 it is the target's greedy output: the same tokens the
request gives alone.

Which rounds pay is measured like a single request's auto rounds (switch.py): a batch's Switch compares the wall
seconds per token of lookup rounds and plain rounds, round by round interleaved, one Switch per batch capacity and
kind of sampling (greedy or not).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..adaptive.estimators import Ratio
from ..sources.lookup import LookupDraft, configured
from ..request import Request
from ..adaptive.switch import Switch

HALF_LIFE = 2048         # guesses after which an origin's measured acceptance weighs half


@dataclass
class Row:
    index: int                       # the request's place in the caller's list
    request: Request
    lookup: LookupDraft | None       # None: draft="none" (target-only rounds for this row)
    gamma: int
    rng: np.random.Generator
    pending: int                     # the last token, not yet in the cache
    seq: list = field(default_factory=list)     # the start token and every final token (the lookup reads it)
    out: list = field(default_factory=list)


class Batching:
    """Decode queued requests on a BatchModel (runtime/engine/batch_model.py), `capacity` rows at a time."""

    def __init__(self, model, eos_id: int, start_id: int, max_length: int, datastore=None, switch: Switch | None = None,
                 acceptance: dict | None = None, counters: dict | None = None, tokenizer_size: int | None = None):
        self.model, self.eos_id, self.start_id, self.max_length = model, eos_id, start_id, max_length
        self.datastore, self.tokenizer_size = datastore, tokenizer_size      # what a row's lookup searches, proposes
        self.switch = switch
        # origin -> decayed guesses kept over judged: what a copy of each origin is worth; the decoder keeps it
        self.acceptance = {} if acceptance is None else acceptance
        self.counters = {"rounds": 0, "rows": 0} if counters is None else counters     # runs, and rows in them

    def run(self, queue, most: int | None = None):
        """`queue`: (index, Request) pairs, checked: a list, or a Waiting that other threads fill while the batch
        runs (requests then join between rounds; at most `most` rows, the batch growing as they come). Yields
        (row, new tokens) after each round for every row that gained tokens; a row's request has its stop_reason
        set on its last. A request whose `cancelled` is set leaves at the next round, stop reason "cancelled"."""
        model = self.model
        most = most or model.capacity
        rows: list = [None] * model.capacity
        waiting = queue if isinstance(queue, Waiting) else Waiting(queue)
        produced = 0
        switch = self.switch
        if switch is not None:
            switch.start()
        while True:
            joined = time.perf_counter()
            if len(waiting) and None not in rows and model.capacity < most:
                live = list(range(model.capacity))
                self._resize(rows, live, min(most, 1 << (len(live) + len(waiting) - 1).bit_length()))
            self._join(rows, waiting)
            live = [b for b in range(model.capacity) if rows[b] is not None]
            if not live:
                return
            if not len(waiting) and len(live) <= model.capacity // 2:
                self._resize(rows, live, 1 << (len(live) - 1).bit_length())
                live = list(range(len(live)))
            lookups = any(rows[b].lookup is not None for b in live)
            # joining requests' encoder runs (and a new layout) are no round's work: the switch leaves them out
            idle = time.perf_counter() - joined
            plain = not lookups or (switch is not None and switch.plain(produced, idle))
            guesses = [[] for _ in range(model.capacity)]
            if not plain:
                # the run's new tokens land after the longest row's: the guesses must fit there
                room = self.max_length - 1 - max(len(rows[b].seq) - 1 for b in live)
                for b in live:
                    guesses[b] = self._guesses(rows[b], room)
            g = max(len(x) for x in guesses)
            uniforms = np.zeros((model.capacity, g + 1), np.float32)
            for b in live:
                row = rows[b]
                if row.request.params.temperature > 0:
                    k = len(guesses[b])
                    u = row.rng.random(k + 1, dtype=np.float32)
                    uniforms[b, :k], uniforms[b, g] = u[:k], u[k]
            pending = np.array([rows[b].pending if rows[b] is not None else 0 for b in range(model.capacity)])
            accepted, following, elapsed = model.run(pending, guesses, uniforms)
            self.counters["rounds"] += 1
            self.counters["rows"] += len(live)
            for b in live:
                row = rows[b]
                n = int(accepted[b])
                new = guesses[b][:n] + [int(following[b])]
                new = self._record(row, guesses[b], n, new, elapsed, plain)
                produced += len(new)
                if row.request.cancelled and not row.request.stop_reason:
                    row.request.stop_reason = "cancelled"
                yield row, new
                if row.request.stop_reason:
                    rows[b] = None
                    model.leave(b)

    def _join(self, rows: list, waiting) -> None:
        """Waiting requests take the free rows, all of them joining in one encoder run (BatchModel.join). A batch
        that starts empty is laid out for its first requests' longest source; a longer source than the layout holds
        widens it for every row."""
        model = self.model
        items = []
        while len(items) < rows.count(None):
            item = waiting.take()
            if item is None:
                break
            items.append(item)
        if not items:
            return
        longest = max(len(request.ids) for _, request in items)
        live = [b for b in range(model.capacity) if rows[b] is not None]
        if not live and longest != model.source_cap:
            model.layout(model.capacity, longest)
        elif longest > model.source_cap:
            self._resize(rows, live, model.capacity, longest)
        free = [b for b in range(model.capacity) if rows[b] is None]
        now = time.perf_counter()
        for (index, request), b in zip(items, free):
            request.began = now                  # its time runs from taking a row: the wait for one is not counted
            lookup = None
            if request.plan.source == "lookup":
                lookup = configured(datastore=self.datastore, tokenizer_size=self.tokenizer_size)
                lookup.start(request.ids, request.stats)
            rows[b] = Row(index, request, lookup, min(request.plan.gamma, model.gamma),
                          np.random.default_rng(request.params.seed), self.start_id, [self.start_id])
        model.join([(b, request.ids, request.params, request.stats) for (_, request), b in zip(items, free)])

    def _guesses(self, row: Row, room: int) -> list:
        """Up to the row's gamma tokens its lookup copies: at most `room` (what the run has inside max_length) and
        one fewer than the tokens the row still may make. At gamma="auto", a copy is cut to what its origin's
        measured acceptance makes worth verifying: every guess widens the run for every row."""
        if row.lookup is None:
            return []
        room = min(row.gamma, row.request.params.max_new_tokens - len(row.out) - 1, room)
        if room < 1:
            return []
        found = row.lookup.match(row.seq, [], room)
        if found and row.request.plan.adaptive:
            found = found[:self.worth(row.lookup.origin, len(found))]
        return found

    def worth(self, origin: str, k: int) -> int:
        """Guesses of `origin` worth verifying: 1 + the expected number of the first k kept, by the acceptance
        measured so far (decayed over about HALF_LIFE guesses; 1/2 before any), at least 1."""
        measured = self.acceptance.get(origin, Ratio())
        alpha = (measured.num + 1) / (measured.den + 2)
        expected = sum(alpha ** i for i in range(1, k + 1))
        return max(1, min(k, 1 + int(expected)))

    def _learn(self, origin: str, proposed: list, n: int) -> None:
        """Per-guess acceptance of an origin: guess i counts when guesses 1 .. i-1 were kept (the first rejection
        ends the judging)."""
        judged = min(len(proposed), n + 1)
        measured = self.acceptance.setdefault(origin, Ratio())       # kept over judged
        measured.fade(0.5 ** (judged / HALF_LIFE))
        measured.add(n, judged)

    def _record(self, row: Row, proposed: list, n: int, new: list, elapsed: float, plain: bool) -> list:
        """Append a round's tokens to the row (cut at max_new_tokens and eos), its stats and stop reason."""
        request, stats = row.request, row.request.stats
        limit = request.params.max_new_tokens
        new = new[:limit - len(row.out)]
        if self.eos_id in new:
            new = new[:new.index(self.eos_id) + 1]
        stats.target_calls += 1
        stats.target_s += elapsed
        if proposed:
            stats.proposed += len(proposed)
            stats.accepted += n
            stats.source(row.lookup.origin).add(len(proposed), n, len(new))
            self._learn(row.lookup.origin, proposed, n)
        else:
            stats.source("none").add(0, 0, len(new))
        row.out += new
        row.seq += new
        row.pending = new[-1] if new else row.pending
        stats.new_tokens = len(row.out)
        request.stop(row.out, self.eos_id, len(row.seq) - 1 >= self.max_length)   # the cache is full
        return new

    def _resize(self, rows: list, live: list, capacity: int, source_cap: int | None = None) -> None:
        """Lay the batch out for `capacity` rows (and sources of up to `source_cap` positions), the live rows first."""
        self.model.resize(capacity, live, source_cap)
        kept = [rows[b] for b in live]
        rows[:] = kept + [None] * (capacity - len(kept))


class Waiting:
    """The requests waiting for a row: filled by any thread, taken by the batch between rounds."""

    def __init__(self, items=()):
        self._items = collections.deque(items)
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item) -> None:
        with self.lock:
            self._items.append(item)

    def take(self):
        """The next (index, Request) whose request is not cancelled, or None."""
        with self.lock:
            while self._items:
                item = self._items.popleft()
                if not item[1].cancelled:
                    return item
            return None

    def requests(self) -> list:
        """The requests waiting now."""
        with self.lock:
            return [item[1] for item in self._items]

    def cancel(self, request) -> bool:
        """Mark `request` cancelled and take it out if it still waits (True); one step under the lock, so the batch
        either joined it before (it leaves at its next round) or never takes it."""
        with self.lock:
            request.cancelled = True
            for item in self._items:
                if item[1] is request:
                    self._items.remove(item)
                    return True
            return False

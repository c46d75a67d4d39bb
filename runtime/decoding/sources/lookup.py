"""A draft that costs no model run: copy the continuation of the longest n-gram that ends the text so far and
occurred before, in the generated tokens, in the *source* (the encoder input of a seq2seq model, which a
decoder-only prompt lookup never sees), or in a datastore of text in the output's language
(runtime/loading/datastore.py).

Its guesses are deterministic, so q_i = delta(x_i): the target keeps x_i with probability p_i(x_i) and, after a
rejection, draws from norm(max(0, p - delta(x))) with the same standardized p (temperature, top-k, top-p): exact
at every temperature, through the same verify head as a model draft (Proposal.point_mass).

Host cost: the source's n-grams are indexed once per request, the generated tokens' incrementally as they are
committed; a proposal is at most (max_n - min_n + 1) dictionary lookups and a slice, and, with a datastore, one
numpy search of its mapped keys for the n-grams longer than what the output and the source matched.
"""

from __future__ import annotations

import time

import numpy as np

from ...core.stats import Stats
from ...engine.workspace import Workspace
from .model_draft import DraftSource
from .contract import Proposal, Verdict
from .tree import Tree, allocate


class NgramIndex:
    """n-gram (tuple) -> the position right after its first occurrence, for n in min_n..max_n."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list = []
        self.after: dict = {}

    def index(self, begin: int, end: int) -> None:
        """Index the n-grams ending at positions begin..end-1 (first occurrence wins)."""
        toks = self.tokens
        for last in range(max(begin, 0), end):
            for n in range(self.min_n, self.max_n + 1):
                if last - n + 1 < 0:
                    break
                self.after.setdefault(tuple(toks[last - n + 1:last + 1]), last + 1)

    def continuation(self, key: tuple, k: int) -> list:
        pos = self.after.get(key)
        return [] if pos is None else self.tokens[pos:pos + k]


class LookupDraft(DraftSource):
    """Proposes up to k tokens copied after the longest matching suffix: n in min_n..max_n in the tokens generated
    so far, then in the source, and n in min_n..datastore.width in `datastore` (a runtime/loading/datastore.py
    Datastore, optional; there the start of the output counts as a token, so it also proposes the first tokens), the
    longest match first and, at equal n, in that order; nothing on a miss. Ids at or past `tokenizer_size` (the padded
    rows of a model whose vocabulary is larger than its tokenizer's, runtime/loading/vocabulary.py) are never proposed,
    and nothing before one in the output is matched; None: the datastore's, or no limit without one."""

    name = "lookup"
    copies = True
    probed = True          # auto reads its guesses before choosing (guesses, propose_found)
    widens = True

    def __init__(self, min_n: int = 1, max_n: int = 3, datastore=None, tokenizer_size: int | None = None):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"lookup n-gram range must satisfy 1 <= min_n <= max_n (got {min_n}..{max_n})")
        self.min_n, self.max_n, self.datastore = min_n, max_n, datastore
        self.tokenizer_size = tokenizer_size if tokenizer_size is not None or datastore is None else datastore.sep
        self._reach = max(max_n, datastore.width if datastore is not None else 0)
        self.origin = self.name       # where the last guesses came from: self.name, or "datastore"
        self.fallback = []            # after a datastore match: the output's or the source's shorter one, if any
        self.search_store = True      # a chooser turns the datastore's search off where its copies do not pay
        self.source = NgramIndex(min_n, max_n)
        self.generated = NgramIndex(min_n, max_n)
        self._started = None          # the source ids of the request indexed last
        # several candidates a round (runtime/decoding/sources/tree.py), only where this lookup proposes to the target:
        # `top` (it is the whole draft) or a chooser passing `room` to propose_found; both set by `configured` below
        self.top = False
        self.chooser = None             # a runtime/decoding/sources/width.py Width
        self._context: list = []
        self._round = None              # (candidates looked up, their host seconds, room) of the round at hand

    @property
    def origins(self) -> tuple:
        """The names its proposals go by: the output's and the source's copies, the datastore's. They are kept
        apart in the stats and in auto's estimates (their acceptance differs: a copy of the source is a better
        guess than a frequent continuation in other text)."""
        return (self.name, "datastore") if self.datastore is not None else (self.name,)

    def start(self, source_ids: np.ndarray, stats: Stats) -> None:
        if source_ids is self._started:           # one lookup shared by several sources of an auto choice
            return
        self._started = source_ids
        self.source = NgramIndex(self.min_n, self.max_n)
        # a source of samples, not token ids (a family whose encoder reads floats): nothing to copy from it
        self.source.tokens = [] if np.asarray(source_ids).dtype.kind == "f" else [int(t) for t in source_ids]
        self.source.index(0, len(self.source.tokens))
        self.generated = NgramIndex(self.min_n, self.max_n)

    def guesses(self, ws: Workspace, k: int) -> list:
        """What a proposal of up to k would copy (nothing written)."""
        return self.match(ws.seq, ws.known, k)     # the final tokens (start token first) and this round's so far

    def match(self, seq: list, known: list | None, k: int) -> list:
        """What up to k copied guesses after the output `seq` (the final tokens, start token first) and `known` (the
        round's tokens so far; None when a model wrote tokens the host has not read) would be (nothing written)."""
        self.origin, self.fallback = self.name, []
        if known is None or k < 1:            # a model wrote tokens the host has not read: nothing to match
            return []
        self._sync(seq)
        last = seq[max(1, len(seq) - self._reach):] + known       # the output's last tokens
        at_start, limit = len(seq) - self._reach <= 1, self.tokenizer_size
        if limit is not None and max(last, default=0) >= limit:   # a padded row: match only what follows it
            last = last[max(i for i, t in enumerate(last) if t >= limit) + 1:]
            at_start = False
        self._context = [None] + last if at_start else last      # None: the start of the output
        found, n = [], min(len(last), self.max_n)
        while n >= self.min_n and not found:
            key = tuple(last[-n:])
            found = self.generated.continuation(key, k) or self.source.continuation(key, k)
            n -= 1
        if limit is not None and found and max(found) >= limit:
            found = found[:next(i for i, t in enumerate(found) if t >= limit)]
        store = self.datastore
        if store is not None and self.search_store:     # only a longer match than the output's and the source's
            context = ([store.sep] if at_start and not found else []) + last      # SEP: the start
            context = context[-store.width:]
            stored, continuations = store.continuations(context, k, 1, n + 2 if found else self.min_n)
            if stored:
                self.origin, self.fallback = "datastore", found
                return continuations[0]
        return found

    def propose(self, ws: Workspace, k: int, rows, row: int, stats: Stats) -> Proposal:
        return self.propose_found(ws, self.guesses(ws, k), k if self.top else 0)

    def propose_found(self, ws: Workspace, found: list, room: int = 0) -> Proposal:
        """Propose guesses already found by `guesses` (a chooser that looked before deciding): point masses. With
        `room` (this lookup proposes to the target: at most that many guesses in a row), where the request allows a
        tree (`candidates`; 0: chosen by `chooser`), several candidates of len(found) tokens each, merged into a
        tree of at most ws.tree_room() nodes (runtime/decoding/sources/tree.py), when more than one is found."""
        self._round = None
        width = _width(ws) if found and room else None
        if width is not None:
            auto = width == 0 and self.chooser is not None
            want = self.chooser.wanted() if auto else max(width, 1)
            use = self.chooser.choice if auto else want
            found, nodes = found[:room], ws.tree_room()
            began = time.perf_counter()
            candidates = self.alternatives(found, want) if want > 1 else [found]
            self._round = (candidates, time.perf_counter() - began, nodes)
            if use > 1 and len(candidates) > 1:
                tree = Tree(allocate(candidates[:use], nodes), nodes)
                if tree.candidates > 1:
                    ws.write_tree(tree)
                    return Proposal(tree.size, True, self.origin, tree=tree)
        if found:
            ws.write_point_guesses(found)
        return Proposal(len(found), point_mass=bool(found), source=self.origin if found else "")

    def alternatives(self, found: list, count: int) -> list:
        """Up to `count` candidates of len(found) tokens, distinct first tokens, best first: `found`, the output's
        or the source's shorter match when the datastore's was longer, then the datastore's continuations of the
        context, by frequency, the longest matching context first and shorter ones while more are wanted."""
        k = len(found)
        out, firsts = [found], {found[0]}
        if self.fallback and self.fallback[0] not in firsts:
            out.append(self.fallback[:k])
            firsts.add(self.fallback[0])
        store = self.datastore
        if store is not None and len(out) < count:
            context = self._context
            context = ([store.sep] + context[1:] if context[:1] == [None] else context)[-store.width:]
            n = len(context)
            while n >= 1 and len(out) < count:      # the longest match first; shorter ones add other continuations
                found_n, more = store.continuations(context[len(context) - n:], k, count + 1)
                for c in more:
                    if len(out) >= count:
                        break
                    if c and c[0] not in firsts:
                        out.append(c)
                        firsts.add(c[0])
                n = min(n, found_n) - 1 if found_n else 0
        return out

    def _sync(self, seq: list) -> None:
        """Index the final output incrementally. The n-grams ending at its newest token stay unindexed until more
        follow: the suffix being matched must find an earlier occurrence, not itself."""
        gen = self.generated
        before = len(gen.tokens)
        if len(seq) - 1 > before:
            gen.tokens.extend(seq[1 + before:])
            gen.index(before - 1, len(gen.tokens) - 1)

    def commit(self, ws: Workspace, verdict: Verdict) -> None:
        """Only the width chooser learns (the index follows ws.seq)."""
        if self._round is not None and self.chooser is not None:
            candidates, extra_s, room = self._round
            self.chooser.learn(candidates, verdict.tokens, room, verdict.seconds, verdict.proposed, extra_s)
        self._round = None


def _width(ws: Workspace) -> int | None:
    """The candidates a lookup round of this request may verify as a tree (0: chosen by a width chooser), or None
    for one a round: a tree of candidates is exact only with lenience 1 and no logits processors."""
    params = ws.params
    return params.candidates if params.lenience == 1 and ws.processors is None else None


def configured(lookup: LookupDraft | None = None, *, datastore=None, tokenizer_size: int | None = None,
               top: bool = False, chooser=None) -> LookupDraft:
    """The one place a lookup is made and configured, for every user: a sampling request's lookup, auto's
    candidates' shared one, a batch row's, and a LookupDraft object a request passes (`lookup`, made with its own
    datastore and tokenizer size; a new one otherwise, searching `datastore` and proposing no id at or past
    `tokenizer_size`). `top`: it proposes to the target itself (the whole draft at a fixed gamma); `chooser`: the
    runtime/decoding/sources/width.py Width that picks how many candidates a round verifies where a request leaves
    it open (a lookup keeps the one it has). How many a request asks for the lookup reads from the request's
    workspace when it proposes (`_width`)."""
    if lookup is None:
        lookup = LookupDraft(datastore=datastore, tokenizer_size=tokenizer_size)
    lookup.top = top
    lookup.chooser = lookup.chooser or chooser
    return lookup

"""Several candidates verified in one target run: the candidates merged into a token tree, and the rule that walks it.

A lookup round with B > 1 candidates (the output's or the source's copy, the datastore's next-ranked continuations,
runtime/decoding/sources/lookup.py) merges them into a trie rooted at the current token: node 0 is the current token,
nodes 1 .. M the candidates' tokens in insertion order (a parent before its children), at most gamma_max of them. One
target run over the M + 1 nodes (the target graph's per-token positions `tree_depth` and an ancestor mask `tree_mask`,
so node i sees the cache and its own path only, and T5's relative bias uses its depth) gives each node i the
target's standardized distribution p_i of the token that follows it, and one draw y_i ~ p_i with its own uniform
(the head's `draws`). The rule, walking from the root:

    at node v: if some child of v holds the token y_v, go down to it; else stop and emit y_v.

Exactness (every temperature, top-k, top-p): the candidates are point masses, so this is SpecInfer's multi-step
speculative sampling with q = delta. Sketch: at the node v reached after the prefix s, the token emitted next is y_v
whenever it is not a child's token, and a child's token x is emitted (and its subtree entered) exactly when y_v = x;
either way the token after s is y_v ~ p(. | s), drawn with a uniform no earlier step looked at, so the output's
next token is distributed as the target's and, by induction over depth, so is the whole sequence. In the sequential
form: child x_1 is kept with probability p(x_1); after a rejection the next sibling is tested against the residual
norm(max(0, p - delta(x_1))), and so on; when all are rejected, the token is drawn from the residual with every
rejected sibling removed. Emitting a fresh draw from p after the siblings were rejected (instead of the residual)
double-counts them: that is the broken control the distribution tests catch.

At temperature 0 p_i is one-hot, y_i the target's argmax: the walk keeps the longest candidate prefix that equals
the greedy continuation, plus one token. Not used with lenience < 1 or logits processors (their masks are made per
position of a chain), where a round verifies one candidate.
"""

from __future__ import annotations

import numpy as np


class Tree:
    """Candidates (lists of token ids, best first) merged into a trie of at most `limit` nodes besides the root; a
    candidate that does not fit is cut."""

    def __init__(self, candidates, limit: int):
        self.tokens, self.parent, self.depth, self.children = [-1], [-1], [0], [{}]
        self.candidates = 0          # candidates that contributed a node
        for candidate in candidates:
            node, added = 0, False
            for token in candidate:
                token = int(token)
                child = self.children[node].get(token)
                if child is None:
                    if self.size >= limit:
                        break
                    child = len(self.tokens)
                    self.tokens.append(token)
                    self.parent.append(node)
                    self.depth.append(self.depth[node] + 1)
                    self.children.append({})
                    self.children[node][token] = child
                    added = True
                node = child
            self.candidates += added

    @property
    def size(self) -> int:
        """M: the candidate nodes (the root, the current token, aside)."""
        return len(self.tokens) - 1

    def mask(self) -> np.ndarray:
        """[M + 1, M + 1] bool: node i sees node j iff j is i or one of its ancestors."""
        n = len(self.tokens)
        seen = np.zeros((n, n), np.bool_)
        for i in range(n):
            seen[i, i] = True
            if i:
                seen[i] |= seen[self.parent[i]]
        return seen

    def walk(self, draws) -> tuple[list, int]:
        """(the accepted path's nodes, the next token) for the draws y_0 .. y_M of the run (the rule above)."""
        path, node = [], 0
        while True:
            y = int(draws[node])
            child = self.children[node].get(y)
            if child is None:
                return path, y
            path.append(child)
            node = child


ALT_DEPTH = 2     # tokens an alternative candidate keeps (the first, best-ranked one keeps the rest of the budget)


def allocate(candidates: list, nodes: int) -> list:
    """The candidates cut to fit `nodes` tree nodes: the alternatives (all but the first) keep up to ALT_DEPTH tokens
    each, together at most half the budget (their deeper tokens are rarely kept: a lower-ranked continuation that
    was right once is often wrong next), the first keeps what is left, up to its length."""
    if len(candidates) <= 1:
        return [c[:nodes] for c in candidates]
    alternatives, spare = [], nodes // 2
    for c in candidates[1:]:
        cut = c[:min(ALT_DEPTH, spare)]
        if not cut:
            break
        alternatives.append(cut)
        spare -= len(cut)
    return [candidates[0][:nodes - sum(len(c) for c in alternatives)]] + alternatives


def matched(candidate, tokens) -> int:
    """How many leading tokens of `candidate` equal `tokens` (what a round made)."""
    n = 0
    for a, b in zip(candidate, tokens):
        if a != b:
            break
        n += 1
    return n

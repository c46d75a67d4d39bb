"""Several candidates verified in one target run (runtime/decoding/sources/tree.py): the trie and its walk against brute
force, greedy output equal to target-only decoding with B = 2 and 4 candidates, one target run per tree round, and
the output distribution at T = 1 and with top-k against the enumerated target, with a broken walk that the test
catches. The graph's tree inputs (positions, ancestor mask, draws) are tested against PyTorch in
tests/export/test_tree.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_distribution import (P_PASS, P_TEETH, SETTINGS, caught, chi_square_p, empirical, exact_distribution,
                               small_datastore)
from test_datastore_decoder import stored  # noqa: F401  (the fixture)

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.decoding.sources import tree as tree_module
from specdec.runtime.decoding import verifier
from specdec.runtime.decoding.sources.lookup import LookupDraft
from specdec.runtime.decoding.sources.tree import Tree


# -- the trie and the walk ----------------------------------------------------------------------------------------
def _paths(tree: Tree) -> dict:
    """node -> its tokens from the root (brute force, through `parent`)."""
    out = {}
    for node in range(1, len(tree.tokens)):
        path, v = [], node
        while v:
            path.append(tree.tokens[v])
            v = tree.parent[v]
        out[node] = path[::-1]
    return out


def test_tree_holds_every_candidate_prefix_once_and_its_mask_is_the_ancestors():
    rng = random.Random(0)
    for _ in range(300):
        cands = [[rng.randrange(4) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 5))]
        limit = rng.randint(1, 12)
        tree = Tree(cands, limit)
        paths = _paths(tree)
        assert tree.size <= limit
        assert len({tuple(p) for p in paths.values()}) == len(paths), "a prefix made two nodes"
        assert all(tree.parent[v] < v and tree.depth[v] == len(paths[v]) for v in paths)
        # every prefix the budget allowed is a node: the first `limit` distinct prefixes in insertion order
        wanted = []
        for c in cands:
            for n in range(1, len(c) + 1):
                if tuple(c[:n]) not in wanted:
                    wanted.append(tuple(c[:n]))
        kept = {tuple(p) for p in paths.values()}
        assert kept <= set(wanted)
        mask = tree.mask()
        for i in range(len(tree.tokens)):
            for j in range(len(tree.tokens)):
                ancestor = j == 0 or (i > 0 and j > 0 and paths[j] == paths[i][:len(paths[j])])
                assert mask[i, j] == ancestor, (cands, i, j)


def test_walk_follows_the_draws_and_stops_at_the_first_draw_no_child_holds():
    tree = Tree([[5, 6, 7], [5, 8], [9]], 8)
    # nodes: 1:5 2:6 3:7 4:8 5:9
    draws = {0: 5, 1: 8, 4: 3}
    path, z = tree.walk([draws.get(i, 0) for i in range(6)])
    assert [tree.tokens[v] for v in path] == [5, 8] and z == 3
    path, z = tree.walk([2, 0, 0, 0, 0, 0])
    assert path == [] and z == 2


# -- greedy: the same output as target-only decoding --------------------------------------------------------------
class _Count:
    """Counts the tree rounds (calls through to the real verifier)."""

    def __init__(self, monkeypatch):
        self.rounds = 0
        real = verifier.verify_tree

        def counted(*args, **kwargs):
            self.rounds += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(verifier, "verify_tree", counted)


def test_greedy_output_equals_target_only_with_several_candidates(stored, monkeypatch):  # noqa: F811
    export, prompts_a, prompts_b = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    count = _Count(monkeypatch)
    for prompt in prompts_a + prompts_b:
        ref = dec.generate(input_ids=prompt, draft="none", max_new_tokens=24).token_ids
        for draft, gamma, b in (("lookup", 3, 2), ("lookup", 8, 4), ("lookup", "auto", 4), ("auto", "auto", 2),
                                ("lookup", 4, 0)):
            result = dec.generate(input_ids=prompt, draft=draft, gamma=gamma, candidates=b, max_new_tokens=24)
            assert result.token_ids == ref, (prompt, draft, gamma, b)
    assert count.rounds > 10, "the datastore offers several continuations: tree rounds must happen"


def test_a_tree_round_is_one_target_run(stored, monkeypatch):  # noqa: F811
    export, prompts_a, _ = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    count = _Count(monkeypatch)
    for prompt in prompts_a:
        stats = dec.generate(input_ids=prompt, draft="lookup", gamma=6, candidates=4, max_new_tokens=24).stats
        assert stats.ort_runs == stats.target_calls + 1          # the encoder, then one run per round
    assert count.rounds > 0


def test_trees_are_off_where_they_would_not_be_exact(stored, monkeypatch):  # noqa: F811
    export, prompts_a, _ = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    count = _Count(monkeypatch)
    for prompt in prompts_a[:4]:
        ref = dec.generate(input_ids=prompt, draft="none", max_new_tokens=24, no_repeat_ngram_size=3).token_ids
        out = dec.generate(input_ids=prompt, draft="lookup", gamma=4, candidates=4, max_new_tokens=24,
                           no_repeat_ngram_size=3).token_ids
        assert out == ref
        dec.generate(input_ids=prompt, draft="lookup", gamma=4, candidates=4, max_new_tokens=24, lenience=0.5)
    assert count.rounds == 0


def test_candidates_out_of_range_is_a_one_line_error(stored):  # noqa: F811
    from specdec.runtime import SpecdecError

    export, prompts_a, _ = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    for bad in (-1, 9, 2.5, "4"):
        with pytest.raises(SpecdecError) as err:
            dec.generate(input_ids=prompts_a[0], candidates=bad)
        assert "candidates must be" in str(err.value) and "\n" not in str(err.value)
    assert dec.generate(input_ids=prompts_a[0], max_new_tokens=4).token_ids


# -- the distribution at T = 1 and with top-k ---------------------------------------------------------------------
# The lookup (output, prompt, a 200-segment datastore over the ids this random target writes most) proposes up to 4
# candidates a round with distinct first tokens, merged into one tree. N = 5,000 seeds, chi-square over the target's
# enumerated distribution of its first 3 tokens, pass at p >= 1e-3. The broken control emits a fresh draw from p
# where no child matched (instead of the draw the walk stopped at, which is the residual after every sibling):
# it must give p < 1e-6 (measured 6.1e-63 on its first 1,250 samples).
N_TREE = 5_000


class with_tree:
    def __init__(self, decoder, store, candidates=4):
        self.decoder, self.source, self.candidates = decoder, LookupDraft(1, 2, datastore=store), candidates

    def generate(self, **kwargs):
        return self.decoder.generate(**{**kwargs, "draft": self.source, "candidates": self.candidates})


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_several_candidates_match_target_distribution(name, small_vocab_pair, tmp_path, monkeypatch):
    decoder = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")
    settings = SETTINGS[name]
    lookup = with_tree(decoder, small_datastore(tmp_path, decoder.vocabulary.tokenizer_size))
    count = _Count(monkeypatch)
    p_value = chi_square_p(empirical(lookup, settings, N_TREE), exact_distribution(small_vocab_pair[0], **settings))
    print(f"several candidates, {name}: p = {p_value:.3g}, tree rounds {count.rounds}")
    assert p_value >= P_PASS, f"several candidates, {name}: chi-square p = {p_value:.3g}"
    assert count.rounds >= N_TREE // 2, "most requests must verify a tree"


def test_the_tree_test_has_teeth(small_vocab_pair, tmp_path, monkeypatch):
    decoder = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")
    settings = SETTINGS["temperature"]
    p_rows = decoder.workspace.p
    rng = np.random.default_rng(1)

    def broken_walk(self, draws):
        path, node = [], 0
        while True:
            child = self.children[node].get(int(draws[node]))
            if child is None:
                if not self.children[node]:
                    return path, int(draws[node])
                row = p_rows.flat()[node * decoder.vocab_size:(node + 1) * decoder.vocab_size].astype(np.float64)
                return path, int(rng.choice(len(row), p=row / row.sum()))     # p, not the residual
            path.append(child)
            node = child

    monkeypatch.setattr(tree_module.Tree, "walk", broken_walk)
    lookup = with_tree(decoder, small_datastore(tmp_path, decoder.vocabulary.tokenizer_size))
    _, p_value = caught(lambda a, b: empirical(lookup, settings, b, start=a),
                        exact_distribution(small_vocab_pair[0], **settings), N_TREE, label="broken walk")
    assert p_value < P_TEETH, f"a walk that redraws from p passed the chi-square test (p = {p_value:.3g})"


"""The lookup draft: what it proposes (longest earlier n-gram, from the output so far, then the source), and greedy
exactness against target-only decoding and PyTorch. Its output distribution is tested in test_distribution.py."""

import numpy as np
import pytest
import torch
from transformers import T5ForConditionalGeneration

from tinymodels import random_prompts

from specdec.runtime import SpeculativeDecoder, Stats
from specdec.runtime.decoding.sources.lookup import LookupDraft
from specdec.runtime.decoding.sources.contract import Verdict

MAX_NEW = 24


class FakeWorkspace:
    """The final tokens (decoder start token first) and what a proposal writes: the lookup's only contact with the
    device."""

    def __init__(self, generated):
        self.seq = [0, *generated]
        self.known = []                      # no tokens of the round yet
        self.guesses = None

    def write_point_guesses(self, tokens):
        self.guesses = list(tokens)


def lookup_after(source, generated, min_n=1, max_n=3):
    draft = LookupDraft(min_n, max_n)
    draft.start(np.array(source), Stats())
    ws = FakeWorkspace([])
    for tok in generated:                    # one token per round, as target-only steps would emit them
        ws.seq.append(tok)
        draft.commit(ws, Verdict(0, 0, [tok]))
        draft.guesses(ws, 1)                 # the index follows the output as the rounds go
    return draft, ws


def propose(made, k):
    draft, ws = made
    proposal = draft.propose(ws, k, None, 0, Stats())
    assert proposal.count == (len(ws.guesses) if ws.guesses else 0)
    assert proposal.count == 0 or proposal.point_mass
    return ws.guesses or []


def test_copies_the_continuation_of_the_longest_match_in_the_source():
    source = [10, 11, 12, 13, 14, 11, 20, 1]
    assert propose(lookup_after(source, [11, 12]), 3) == [13, 14, 11]        # 2-gram (11, 12) beats 1-gram 12
    assert propose(lookup_after(source, [99, 11]), 2) == [12, 13]            # first occurrence of 11
    assert propose(lookup_after(source, [13, 14, 11]), 8) == [20, 1]         # 3-gram; the source ends there
    assert propose(lookup_after(source, [7, 8]), 4) == []                    # a miss proposes nothing
    assert propose(lookup_after(source, []), 4) == []                        # nothing generated yet


def test_the_output_so_far_is_searched_first_and_never_matches_itself():
    source = [5, 6, 7, 1]
    assert propose(lookup_after(source, [30, 31, 32, 30]), 2) == [31, 32]   # 30 occurred earlier in the output
    assert propose(lookup_after(source, [40, 41]), 2) == []       # 41 occurred only as the suffix itself
    assert propose(lookup_after(source, [6, 9, 6]), 2) == [9, 6]  # the output beats the source (7, 1)


def test_ids_past_the_tokenizers_are_never_proposed():
    """The real T5 layout: the model's rows past the ids its tokenizer makes (here 40 ids) may come in (input_ids)
    or out (sampled with their tiny probability), but the lookup never proposes one and never matches across one."""
    def after(source, generated, k, tokenizer_size=40):
        draft = LookupDraft(1, 3, tokenizer_size=tokenizer_size)
        draft.start(np.array(source), Stats())
        ws = FakeWorkspace(generated)
        draft.propose(ws, k, None, 0, Stats())
        return ws.guesses or []

    source = [10, 11, 12, 44, 13, 14, 1]
    assert after(source, [11], 4) == [12]                     # the copy stops before the padded id 44
    assert after(source, [11], 4, tokenizer_size=None) == [12, 44, 13, 14]
    assert after(source, [44], 3) == []                       # nothing is matched across a padded id
    assert after(source, [12, 44, 13], 3) == [14, 1]          # ... what follows it still is
    assert after([5, 6, 7, 1], [5, 6, 45, 5], 3) == [6]       # the output's copy stops before its padded id


def test_n_gram_range_is_checked():
    with pytest.raises(ValueError, match="min_n <= max_n"):
        LookupDraft(3, 2)


@pytest.fixture(scope="module")
def decoders(related_decoder):
    dec = related_decoder
    return dec, dec


def test_lookup_greedy_equals_target_only_and_pytorch(related_pair, decoders):
    dec, lookup = decoders
    model = T5ForConditionalGeneration.from_pretrained(str(related_pair[0])).eval()
    proposed = accepted = 0
    for ids in random_prompts(48, 40, seed=9):
        with torch.no_grad():
            ref = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)[0, 1:].tolist()
        if 1 in ref:                           # generate pads after EOS; specdec stops there
            ref = ref[:ref.index(1) + 1]
        for gamma in (1, 3, 8):
            res = lookup.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=gamma, draft="lookup")
            assert res.token_ids == ref, f"gamma={gamma} prompt={ids}"
            assert res.stats.draft_calls == 0 and res.stats.ort_runs == 1 + res.stats.target_calls
            proposed += res.stats.proposed
            accepted += res.stats.accepted
    assert 0 < accepted < proposed, (accepted, proposed)
    # the model draft still works on the same target afterwards (the decoders share the target's session)
    assert dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=MAX_NEW, gamma=3).token_ids == \
        dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=MAX_NEW, gamma=0).token_ids

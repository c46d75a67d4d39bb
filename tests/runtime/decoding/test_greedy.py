"""Greedy exactness: speculative decoding at any gamma gives the target's own greedy output, token for token."""

import pytest
import torch
from transformers import T5ForConditionalGeneration

from tinymodels import random_prompts as prompts

N_PROMPTS = 50
MAX_NEW = 24


@pytest.fixture(scope="module")
def decoder(related_decoder):
    return related_decoder


def test_greedy_speculative_equals_target_only_and_pytorch(related_pair, decoder):
    model = T5ForConditionalGeneration.from_pretrained(str(related_pair[0])).eval()
    proposed = accepted = 0
    distinct = set()
    for ids in prompts(48, N_PROMPTS):
        with torch.no_grad():
            ref = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)[0, 1:].tolist()
        while ref and ref[-1] == 0:         # generate pads after EOS; specdec stops there
            ref.pop()
        baseline = decoder.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=0)
        assert baseline.token_ids == ref
        for gamma in (1, 3, 8):
            # the default (draft="auto") picks its source by measured timings, so its kept share depends on the
            # machine's load: the draft model's rounds are the ones counted below
            res = decoder.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=gamma)
            assert res.token_ids == ref, f"gamma={gamma} prompt={ids}"
            res = decoder.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=gamma, draft="draft")
            assert res.token_ids == ref, f"draft, gamma={gamma} prompt={ids}"
            proposed += res.stats.proposed
            accepted += res.stats.accepted
        distinct.add(tuple(ref))
    # the test means something only if outputs vary and guesses were both kept and rejected
    assert len(distinct) >= 10
    assert 0.2 < accepted / proposed < 0.95, (accepted, proposed)


def test_text_prompt_round_trip(decoder):
    res = decoder.generate("w5 w6 w7", max_new_tokens=8, gamma=3)
    same = decoder.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=3)
    assert res.token_ids == same.token_ids
    assert res.text == decoder.decode(res.token_ids)
    assert res.text.startswith("w")


def test_stream_yields_the_generated_tokens_and_text(decoder):
    # (a fixed draft at temperature 1: with draft="auto" the choices follow measured timings, so two runs with
    # one seed may differ, each an exact sample)
    for kwargs in ({"gamma": 3}, {"gamma": 0}, {"gamma": 2, "temperature": 1.0, "seed": 7, "draft": "draft"}):
        pieces = list(decoder.stream(input_ids=[9, 10, 11, 1], max_new_tokens=20, **kwargs))
        res = decoder.generate(input_ids=[9, 10, 11, 1], max_new_tokens=20, **kwargs)
        assert [t for p in pieces for t in p.token_ids] == res.token_ids
        assert "".join(p.text for p in pieces) == res.text
        if kwargs["gamma"] > 0:     # one piece per verification (the stream's own: with draft="auto" the two
            # requests may choose differently, by measured timings, and take different numbers of rounds)
            assert len(pieces) == pieces[-1].stats.target_calls
        assert pieces[-1].stop_reason == res.stop_reason and not any(p.stop_reason for p in pieces[:-1])
        assert pieces[-1].stats.new_tokens == res.stats.new_tokens


@pytest.mark.parametrize("draft", ["draft", "lookup", "lookup,draft"])
def test_sampling_is_reproducible_per_seed(decoder, draft):
    """With a fixed draft and gamma a seed fixes the sample (draft="auto" chooses by measured time: see docs/guides/draft-sources.md)."""
    runs = [decoder.generate(input_ids=[5, 6, 5, 6, 1], max_new_tokens=20, gamma=3, temperature=1.0, seed=s,
                             draft=draft).token_ids for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_stops_at_max_new_tokens_and_max_length(decoder):
    res = decoder.generate(input_ids=[5, 6, 1], max_new_tokens=5, gamma=8, temperature=1.0)
    assert len(res.token_ids) <= 5
    long = decoder.generate(input_ids=[5, 6, 1], max_new_tokens=500, gamma=4, temperature=2.0, seed=3)
    assert len(long.token_ids) <= decoder.max_length
    assert long.stop_reason in ("eos", "max_length")
    if long.stop_reason == "max_length":
        assert len(long.token_ids) == decoder.max_length
    assert (long.token_ids[-1] == decoder.eos_id) == (long.stop_reason == "eos")
    assert decoder.eos_id not in long.token_ids[:-1]


def test_stats_account_for_every_run(decoder):
    res = decoder.generate(input_ids=[7, 8, 9, 1], max_new_tokens=30, gamma=4, draft="draft")
    s = res.stats
    # per iteration: 1 draft run (its proposal loop: gamma steps of decoder + sampling head) + 1 target run
    # (decoder + verify head); 2 encoders
    assert s.ort_runs == 2 + s.draft_calls + s.target_calls
    assert s.draft_calls == s.sources["draft"].rounds and s.proposed == 4 * s.draft_calls
    assert s.new_tokens == len(res.token_ids)
    assert s.new_tokens <= s.accepted + s.target_calls
    assert s.total_s >= s.encoder_s + s.draft_s + s.target_s
    assert abs(s.total_s - (s.encoder_s + s.draft_s + s.target_s + s.host_s)) < 1e-9

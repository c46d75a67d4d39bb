"""How many ONNX Runtime runs a round costs (export format 4): a model draft's proposal is one run whatever gamma,
so a round is 2 runs (draft, verify), and a chain's round one run per model level plus the verify; logits
processors too (the loop takes one mask row)."""

from __future__ import annotations

import pytest

PROMPTS = ["w5 w9 w13 w21 w8", "w30 w31 w7 w7 w19 w34", "w3 w38 w12"]


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_model_draft_round_is_two_runs(related_decoder, gamma, temperature):
    for i, prompt in enumerate(PROMPTS):
        stats = related_decoder.generate(prompt, max_new_tokens=40, draft="draft", gamma=gamma,
                                         temperature=temperature, seed=i).stats
        rounds = stats.sources["draft"].rounds
        assert rounds >= 2 and stats.draft_calls == rounds, (stats.draft_calls, rounds)
        assert stats.ort_runs == 2 + stats.target_calls + stats.draft_calls      # 2 encoder runs
        if gamma > 1:
            assert stats.proposed > stats.draft_calls                             # several guesses per run


@pytest.mark.parametrize("processors", [dict(no_repeat_ngram_size=2), dict(min_new_tokens=12)])
def test_logits_processors_keep_a_proposal_one_run(related_decoder, processors):
    """The loop takes the bans that hold for the whole proposal as one mask row (the target's verify rows get the
    exact per-position masks): a round is still 2 runs."""
    for i, prompt in enumerate(PROMPTS):
        stats = related_decoder.generate(prompt, max_new_tokens=30, draft="draft", gamma=4, temperature=1.0, seed=i,
                                         **processors).stats
        rounds = stats.sources["draft"].rounds
        assert rounds >= 2 and stats.draft_calls == rounds < stats.proposed, (stats.draft_calls, rounds)


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("chain,models", [("draft,mid", 2), ("lookup,draft", 1), ("lookup,draft,mid", 2)])
def test_a_chain_round_is_one_run_per_model_level(related_decoder, gamma, chain, models):
    """A chain level verifies the level below and continues on its own in one run of its proposal loop; the lowest
    model proposes in one run; the lookup costs none: a round is one run per model level plus the verify."""
    for i, prompt in enumerate(PROMPTS):
        stats = related_decoder.generate(prompt, max_new_tokens=40, draft=chain, gamma=gamma, temperature=1.0,
                                         seed=i).stats
        rounds = stats.sources[chain].rounds
        assert rounds >= 2 and stats.draft_calls == models * rounds, (stats.draft_calls, rounds)
        assert stats.ort_runs == 1 + models + stats.target_calls + stats.draft_calls    # encoder runs
        below = chain.rsplit(",", 1)[0] + ">"
        if gamma > 1 and below in stats.sources:
            assert stats.proposed > stats.draft_calls                                   # several tokens per run

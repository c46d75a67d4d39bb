"""How many ONNX Runtime runs a round costs (export format 4): a model draft's proposal is one run whatever gamma,
so a round is 2 runs (draft, verify); with logits processors the draft falls back to one run per guess."""

from __future__ import annotations

import pytest

PROMPTS = ["w5 w9 w13 w21 w8", "w30 w31 w7 w7 w19 w44", "w3 w40 w12"]


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


def test_logits_processors_make_single_steps(related_decoder):
    """The loop cannot apply a processor's mask, which depends on the guesses drawn before it: one run per guess."""
    stats = related_decoder.generate(PROMPTS[0], max_new_tokens=30, draft="draft", gamma=4,
                                     no_repeat_ngram_size=2).stats
    assert stats.draft_calls == stats.proposed > stats.sources["draft"].rounds


def test_a_chain_level_costs_at_most_two_runs_per_round(related_decoder):
    """draft,mid: mid verifies the draft's guesses in one run and continues with at most one loop run; the draft
    makes one run per proposal."""
    stats = related_decoder.generate(PROMPTS[1], max_new_tokens=40, draft="draft,mid", gamma=6).stats
    rounds = stats.sources["draft,mid"].rounds
    below = stats.sources["draft>"].rounds
    assert stats.draft_calls <= 2 * rounds + below, (stats.draft_calls, rounds, below)
    assert stats.ort_runs == 3 + stats.target_calls + stats.draft_calls         # 3 encoder runs

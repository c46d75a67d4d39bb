"""Logits processors (min_new_tokens, no_repeat_ngram_size) in greedy and speculative sampling: the banned sets
against transformers' own processors, greedy output against transformers' greedy generate, and the sampled
distribution against the exactly enumerated processed target distribution (chi-square, with a broken control)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.decoding.processors import Processors
from tinymodels import random_prompts

import test_distribution as td


def test_banned_tokens_are_transformers_processors():
    from transformers.generation.logits_process import (MinNewTokensLengthLogitsProcessor,
                                                        NoRepeatNGramLogitsProcessor)

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4):
        for min_new in (0, 3):
            ours = Processors(eos_id=1, min_new_tokens=min_new, no_repeat_ngram_size=n)
            theirs = [NoRepeatNGramLogitsProcessor(n), MinNewTokensLengthLogitsProcessor(1, min_new, 1)]
            for _ in range(50):
                seq = [0] + rng.integers(0, 6, size=int(rng.integers(0, 12))).tolist()
                scores = torch.zeros(1, 6)
                for proc in theirs:
                    scores = proc(torch.tensor([seq]), scores)
                want = set(torch.nonzero(torch.isinf(scores[0])).flatten().tolist())
                assert set(ours.banned(seq)) == want, (n, min_new, seq)


PROCESSED = dict(min_new_tokens=5, no_repeat_ngram_size=2)


@pytest.mark.parametrize("draft,gamma", [("none", 0), ("draft", 1), ("draft", 4), ("lookup", 3),
                                         ("lookup,draft", 4), ("auto", "auto")])
def test_greedy_with_processors_equals_transformers(related_pair, related_decoder, draft, gamma):
    from transformers import T5ForConditionalGeneration

    model = T5ForConditionalGeneration.from_pretrained(str(related_pair[0])).eval()
    changed = 0
    for prompt in random_prompts(48, 8, seed=21):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, num_beams=1,
                                 **PROCESSED)[0, 1:].tolist()
            plain = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                                   num_beams=1)[0, 1:].tolist()
        while ref and ref[-1] == 0 and len(ref) > 1 and 1 in ref:      # padding after EOS
            ref.pop()
        got = related_decoder.generate(input_ids=prompt, max_new_tokens=24, draft=draft, gamma=gamma, **PROCESSED)
        assert got.token_ids == ref[:len(got.token_ids)] and len(got.token_ids) == len(ref), (prompt, got, ref)
        changed += ref != plain[:len(ref)]
    assert changed > 0, "the processors changed no output: the test cannot see them"


def processed_distribution(model_dir, prompt, settings) -> dict:
    """The processed target distribution over the first td.TOKENS tokens, enumerated with transformers' own
    processors (no-repeat n-grams, min new tokens) before the temperature."""
    from transformers.generation.logits_process import MinNewTokensLengthLogitsProcessor, NoRepeatNGramLogitsProcessor

    procs = [NoRepeatNGramLogitsProcessor(settings["no_repeat_ngram_size"]),
             MinNewTokensLengthLogitsProcessor(1, settings["min_new_tokens"], td.EOS)]
    return td.exact_distribution(model_dir, settings["temperature"], 0, 1.0, prompt, processors=procs)


SAMPLED = dict(temperature=1.0, min_new_tokens=2, no_repeat_ngram_size=2)
N = 5_000      # the broken control below was caught at its first look (1,250 samples at N = 20,000, 312 at 5,000)


def p_value(counts, dist) -> float:
    """td.chi_square_p; an outcome the processed target cannot produce is p = 0."""
    return 0.0 if set(counts) - set(dist) else td.chi_square_p(counts, dist)


def test_speculative_sampling_with_processors_matches_the_processed_target(small_vocab_pair, monkeypatch):
    """N = 5,000 seeded runs, gamma 2 with the draft model, temperature 1, EOS banned for 2 tokens and no repeated
    bigram; chi-square p >= 1e-3 against the enumerated processed distribution. Broken control: the mask left off
    the target's verification runs (the draft's q still processed) must give p < 1e-6."""
    from specdec.runtime.engine.workspace import Workspace

    decoder = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")
    dist = processed_distribution(small_vocab_pair[0], td.PROMPT, SAMPLED)
    counts = td.empirical(decoder, SAMPLED, n=N)
    assert p_value(counts, dist) >= td.P_PASS
    plain = td.exact_distribution(small_vocab_pair[0], temperature=1.0, top_k=0, top_p=1.0)
    assert sum(abs(dist.get(o, 0) - plain.get(o, 0)) for o in set(dist) | set(plain)) > 0.2, \
        "the processors hardly change the distribution: the test could not tell them apart"

    masked = Workspace._masked

    def drafts_only(ws, first_row, count, repeats=True):
        view = masked(ws, first_row, count, repeats)
        return view if count == 1 else view._replace(shape=(0, ws.vocab))     # draft and plain steps only

    monkeypatch.setattr(Workspace, "_masked", drafts_only)
    _, p_wrong = td.caught(lambda a, b: td.empirical(decoder, SAMPLED, n=b, start=a), dist, N,
                           label="mask left off the verification", p_of=p_value)
    assert p_wrong < td.P_TEETH

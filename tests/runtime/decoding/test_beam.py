"""Beam search against transformers' generate(num_beams=...) on the same weights, and speculative beam search
against target-only beam search (runtime/decoding/strategies/beam_book.py,
runtime/decoding/strategies/beam_search.py)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.runtime import SpeculativeDecoder
from tinymodels import random_prompts

MAX_NEW = 20
SCORE_TOL = 1e-4          # relative: ORT vs PyTorch logits differ by ~1e-6 per step; a score sums MAX_NEW of them

# (num_beams, early_stopping, length_penalty, min_new_tokens, no_repeat_ngram_size, num_return_sequences)
CASES = {
    "w4-default": (4, False, 1.0, 0, 0, 1),
    "w4-early": (4, True, 1.0, 0, 0, 2),
    "w4-never-lp2": (4, "never", 2.0, 0, 0, 1),
    "w4-lp-neg": (4, False, -0.5, 0, 0, 4),
    "w4-min-ngram": (4, False, 1.0, 8, 2, 2),
    "w2-early-ngram3": (2, True, 1.0, 0, 3, 1),
    "w3-min": (3, False, 0.8, 12, 0, 3),
}


def hf_beams(model, prompt, case):
    """transformers' beam search: [(generated tokens, score)] for the returned sequences."""
    import torch

    width, early, lp, min_new, ngram, ret = case
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), num_beams=width, do_sample=False, max_new_tokens=MAX_NEW,
                             early_stopping=early, length_penalty=lp, min_new_tokens=min_new,
                             no_repeat_ngram_size=ngram, num_return_sequences=ret, return_dict_in_generate=True,
                             output_scores=True)
    lengths = (out.beam_indices >= 0).sum(dim=1).tolist()
    return [(out.sequences[i, 1:1 + lengths[i]].tolist(), float(out.sequences_scores[i])) for i in range(ret)]


def ours(decoder, prompt, case, **extra):
    width, early, lp, min_new, ngram, ret = case
    res = decoder.generate(input_ids=prompt, num_beams=width, max_new_tokens=MAX_NEW, early_stopping=early,
                           length_penalty=lp, min_new_tokens=min_new, no_repeat_ngram_size=ngram,
                           num_return_sequences=ret, **extra)
    assert res.token_ids == res.sequences[0]
    return list(zip(res.sequences, res.scores)), res


def same(a, b) -> bool:
    return [t for t, _ in a] == [t for t, _ in b] and all(abs(x - y) <= SCORE_TOL * max(1.0, abs(y)) for (_, x), (_, y) in zip(a, b))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, related_pair, tiny_pair, tiny_export):
    """name -> (PyTorch target, SpeculativeDecoder). Vocabulary 48: the related v1.0 pair (the draft a noisy copy
    of the target) and the v1.1 tiny pair. Random tiny T5 models of vocabulary 48 hardly ever rank EOS high, so
    two vocabulary-8 pairs (v1.0, v1.1; drafts noisy copies) put EOS into the beams at varying lengths: finished
    hypotheses, early stopping and the length penalty all matter there."""
    from transformers import T5ForConditionalGeneration

    from tinymodels import export_pair as export, make_tiny_t5, noisy_copy

    root = tmp_path_factory.mktemp("beam_pairs")
    dirs = {"v1.0-v48": (related_pair[0], related_pair[2]), "v1.1-v48": (tiny_pair[0], tiny_export)}
    for name, v11, seed in (("v1.0-v8", False, 4), ("v1.1-v8", True, 3)):
        target = make_tiny_t5(root / name / "target", vocab=8, d_model=16, d_kv=8, heads=2, layers=1,
                              decoder_layers=1, v11=v11, seed=seed)
        draft = noisy_copy(target, root / name / "draft", noise=0.1, seed=seed + 10)
        dirs[name] = target, export(target, draft, root / name / "export", "--gamma-max", "4", "--max-length", "32")
    return {name: (T5ForConditionalGeneration.from_pretrained(t).eval(), SpeculativeDecoder.load(e, provider="cpu"))
            for name, (t, e) in dirs.items()}


@pytest.mark.parametrize("variant", ["v1.0-v48", "v1.1-v48", "v1.0-v8", "v1.1-v8"])
def test_target_only_beam_search_equals_transformers(pairs, variant):
    """Every case on 6 prompts: the returned sequences and their scores are transformers'. On the vocabulary-8
    pairs some returned beams end with EOS before max_new_tokens in every case but the default one."""
    model, decoder = pairs[variant]
    vocab = decoder.vocab_size
    cases_with_eos = 0
    for case, setting in CASES.items():
        ended = 0
        for prompt in random_prompts(vocab, 6, seed=11):
            want = hf_beams(model, prompt, setting)
            got, _ = ours(decoder, prompt, setting, draft="none")
            assert same(got, want), (case, prompt, got, want)
            ended += sum(len(t) < MAX_NEW and t[-1] == 1 for t, _ in got)
        cases_with_eos += ended > 0
    if vocab == 8:
        assert cases_with_eos >= 2, "EOS ended no returned beam: finished hypotheses went untested"


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_speculative_beam_search_is_target_only_beam_search(pairs, width, gamma):
    steps = calls = 0
    for variant in ("v1.0-v48", "v1.0-v8"):
        _, decoder = pairs[variant]
        for case in ((width, False, 1.0, 0, 0, 1), (width, True, 1.5, 6, 2, width), (width, "never", -1.0, 0, 0, 1)):
            for prompt in random_prompts(decoder.vocab_size, 6, seed=3):
                want, _ = ours(decoder, prompt, case, draft="none")
                got, res = ours(decoder, prompt, case, draft="draft", gamma=gamma)
                assert same(got, want), (variant, case, prompt, got, want)
                steps += res.stats.sources["draft"].tokens
                calls += res.stats.target_calls
    assert steps > calls, "every round made one step: the draft's paths were never used"


def test_a_replay_on_unscored_prefixes_is_caught(pairs, monkeypatch):
    """Broken control: a replay that takes the root's first row for a beam whatever its prefix (logits of another
    sequence) must make the equality test above fail on some prompt."""
    from specdec.runtime.decoding.strategies.beam_search import BeamRun

    def any_row_of_the_root(scored, where):
        first = {}
        for (root, _), row in scored.items():
            first.setdefault(root, row)
        return np.array([first[root] for root, _ in where])

    _, decoder = pairs["v1.0-v48"]
    case = (4, False, 1.0, 0, 0, 1)
    prompts = random_prompts(decoder.vocab_size, 6, seed=3)
    want = [ours(decoder, p, case, draft="none")[0] for p in prompts]
    monkeypatch.setattr(BeamRun, "_rows_of", staticmethod(any_row_of_the_root))
    got = [ours(decoder, p, case, draft="draft", gamma=2)[0] for p in prompts]
    assert sum(not same(g, w) for g, w in zip(got, want)) >= 1


BAD = {
    "num_beams 0": (dict(num_beams=0), "num_beams must be an integer in 1..16"),
    "num_beams 17": (dict(num_beams=17), "num_beams must be an integer in 1..16"),
    "num_beams str": (dict(num_beams="4"), "num_beams must be an integer"),
    "more returned than beams": (dict(num_beams=4, num_return_sequences=5), "num_return_sequences must be"),
    "sampling with beams": (dict(num_beams=4, temperature=0.7), "beam search is deterministic"),
    "lenience with beams": (dict(num_beams=4, lenience=0.5), "lenience 0.5 with num_beams 4 is not supported"),
    "early_stopping": (dict(num_beams=4, early_stopping="sometimes"), "early_stopping must be True, False or"),
    "length_penalty nan": (dict(num_beams=4, length_penalty=float("nan")), "length_penalty must be a finite"),
    "lookup with beams": (dict(num_beams=4, draft="lookup"), "beam search speculates with a draft model"),
    "negative min_new_tokens": (dict(num_beams=2, min_new_tokens=-1), "min_new_tokens must be an integer >= 0"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_beam_parameters_are_one_line_errors_and_the_decoder_stays_usable(pairs, case):
    from specdec.runtime import SpecdecError

    _, decoder = pairs["v1.0-v48"]
    prompt = random_prompts(48, 1, seed=5)[0]
    before = decoder.generate(input_ids=prompt, max_new_tokens=8, num_beams=3, draft="draft", gamma=2)
    kwargs, message = BAD[case]
    with pytest.raises(SpecdecError) as err:
        decoder.generate(input_ids=prompt, max_new_tokens=8, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    after = decoder.generate(input_ids=prompt, max_new_tokens=8, num_beams=3, draft="draft", gamma=2)
    assert (after.sequences, after.scores) == (before.sequences, before.scores)


def test_beams_do_not_stream(pairs):
    from specdec.runtime import SpecdecError

    _, decoder = pairs["v1.0-v48"]
    with pytest.raises(SpecdecError, match="beam search cannot stream"):
        next(decoder.stream(input_ids=[5, 6, 1], num_beams=2))


def test_auto_beam_search_is_exact_and_learns(pairs):
    """gamma="auto": identical to target-only beam search; it tries every gamma (0 = target-only steps) and keeps
    an estimate of beam steps per second for each."""
    _, decoder = pairs["v1.0-v48"]
    decoder.reset_estimates()
    case = (4, False, 1.0, 0, 0, 2)
    for prompt in random_prompts(48, 6, seed=8):
        want, _ = ours(decoder, prompt, case, draft="none")
        got, _ = ours(decoder, prompt, case, draft="draft", gamma="auto")
        assert same(got, want), (prompt, got, want)
    assert set(decoder.beam_estimates.rates()) == {0, 1, 2, 3, 4}


def test_auto_beam_choice_falls_back_to_target_only_where_speculation_does_not_pay():
    """BeamEstimates on made-up measurements (beam steps, seconds of a round by gamma): where no gamma pays, after
    one try each, speculative rounds take at most a floor of one round in FLOOR plus what the posterior's doubt
    asks for; where one pays, it is taken. The speculative rounds cost at most 3 % of target-only's time here."""
    from specdec.runtime.decoding.strategies.beam_search import BeamEstimates

    est = BeamEstimates()
    cost = {0: (1, 1.0), 1: (1.6, 2.0), 2: (2.0, 2.6), 3: (2.2, 3.2), 4: (2.3, 3.8)}   # steps, seconds
    chosen = []
    for _ in range(5000):
        g = est.choose(4, width=4)
        chosen.append(g)
        est.learn(g, *cost[g], width=4)
    steps, seconds = sum(cost[g][0] for g in chosen), sum(cost[g][1] for g in chosen)
    assert steps / seconds >= 0.97, steps / seconds            # beam steps per second against target-only's 1
    after = chosen[5:]
    assert set(after) != {0}, "no exploration: a change in costs would never be seen"
    assert sum(g != 0 for g in after) <= len(after) / est.FLOOR + 10
    cost = {g: (g + 1, seconds) for g, (_, seconds) in cost.items()}     # the draft's steps are now all replayed:
    chosen = []                                                         # gamma 4 makes 5 / 3.8 = 1.32 steps a second
    for _ in range(4 * est.FLOOR):
        g = est.choose(4, width=4)
        chosen.append(g)
        est.learn(g, *cost[g], width=4)
    assert chosen[-100:].count(4) > 90


def test_auto_beam_choice_takes_speculation_where_a_wrong_start_said_it_does_not_pay():
    """A draft whose first rounds were unlucky (no step replayed in 6 rounds) but which keeps 0.8 of its steps:
    Thompson draws of the replay rate bring it back within tens of rounds, where a greedy choice on the means
    (the control) stays with target-only steps."""
    import numpy as np

    from specdec.runtime.decoding.strategies.beam_search import BeamEstimates

    def run(greedy: bool):
        est, rng = BeamEstimates(), np.random.default_rng(5)
        if greedy:
            est.rng = type("Mean", (), {"beta": staticmethod(lambda a, b: a / (a + b))})()
        seconds = {0: 1.0, 1: 1.3, 2: 1.6, 3: 1.9, 4: 2.2}
        for g in (0, 1, 2, 3, 4, 2):
            est.learn(g, 1, seconds[g], width=4)           # unlucky: nothing replayed
        chosen = []
        for _ in range(200):
            g = est.choose(4, width=4)
            chosen.append(g)
            replayed = 0
            while replayed < g and rng.random() < 0.8:
                replayed += 1
            est.learn(g, 1 + replayed, seconds[g], width=4)
        return chosen

    chosen = run(greedy=False)
    assert sum(g != 0 for g in chosen[:60]) > 0 and sum(g != 0 for g in chosen[-100:]) > 90, chosen[:60]
    assert all(g == 0 for g in run(greedy=True)[:200])

"""Distribution equality: speculative sampling reproduces the target's distribution exactly.

Reference: the target's exact distribution over its first 3 generated tokens, enumerated with PyTorch (Hugging Face
forward passes and Hugging Face's own temperature/top-k/top-p warpers), sequences ending at EOS. The pair has the
real T5 layout (8 rows, a tokenizer of 6 ids): the padded rows are outcomes like any other.
Test: N = 20,000 runs of `generate(max_new_tokens=3, gamma=2)` with seeds 0..N-1, Pearson chi-square over every
outcome whose expected count is >= 5 (rarer outcomes pooled in one bin); the test passes when p-value >= 1e-3.
Teeth: the same test against a target graph whose head's residual draw is replaced by a plain draw from p must give
p-value < 1e-6; it does on the first 5,000 of its samples (p = 1.6e-11: the draft is an unrelated model, so
rejections are common). Every decoding path's test has such a control, run by `caught`, which stops drawing once the
control is caught; a path's N is chosen from its control's measured p (written beside each N).
"""


import pytest
import torch
from scipy.stats import chisquare
from transformers import T5ForConditionalGeneration
from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

from tinymodels import broken_export  # noqa: F401  (test_distribution_chains imports it from here)

from specdec.runtime import Params, SpeculativeDecoder
from specdec.runtime.decoding.sources.lookup import LookupDraft

N_SAMPLES = 20_000
P_PASS = 1e-3
P_TEETH = 1e-6
PROMPT = [3, 5, 7, 4, 1]
TOKENS = 3
EOS = 1
MIN_BINS = 10         # outcomes binned on their own that a chi-square test needs to mean anything
SETTINGS = {"temperature": dict(temperature=1.0, top_k=0, top_p=1.0),
            "top_k": dict(temperature=1.0, top_k=3, top_p=1.0),
            "top_p": dict(temperature=1.2, top_k=0, top_p=0.8)}


_EXACT = {}      # (model_dir, temperature, top_k, top_p, prompt) -> distribution, enumerated once per worker process


def exact_distribution(model_dir, temperature, top_k, top_p, prompt=None, processors=()) -> dict:
    """P(first generated tokens = outcome) for every outcome (tuples of <= TOKENS ids, EOS-terminated).
    `processors`: transformers logits processors applied before the warpers (tests/runtime/decoding/test_processors.py).
    Without processors the enumeration is deterministic, so each model, settings and prompt is enumerated once in a
    worker process and later calls get a copy of it (the distribution tests share a handful of them)."""
    if processors:
        return _enumerated(model_dir, temperature, top_k, top_p, prompt, processors)
    key = (str(model_dir), temperature, top_k, top_p, tuple(prompt or PROMPT))
    if key not in _EXACT:
        _EXACT[key] = _enumerated(model_dir, temperature, top_k, top_p, prompt, ())
    return dict(_EXACT[key])


def _enumerated(model_dir, temperature, top_k, top_p, prompt, processors) -> dict:
    model = T5ForConditionalGeneration.from_pretrained(str(model_dir)).eval()
    warpers = LogitsProcessorList([*processors, TemperatureLogitsWarper(temperature)] +
                                  ([TopKLogitsWarper(top_k)] if top_k else []) +
                                  ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    source = torch.tensor([prompt or PROMPT])
    dist, frontier = {}, {(): 1.0}
    for _ in range(TOKENS):
        nxt = {}
        for prefix, mass in frontier.items():
            dec = torch.tensor([[model.config.decoder_start_token_id, *prefix]])
            with torch.no_grad():
                logits = model(input_ids=source, decoder_input_ids=dec).logits[:, -1, :]
            probs = torch.softmax(warpers(dec, logits), dim=-1)[0].double().numpy()
            for tok, p in enumerate(probs):
                if p > 0:
                    (dist if tok == EOS or len(prefix) + 1 == TOKENS else nxt)[(*prefix, tok)] = mass * p
        frontier = nxt
    total = sum(dist.values())
    assert abs(total - 1) < 1e-5
    return {o: p / total for o, p in dist.items()}


def empirical(decoder, settings, n=N_SAMPLES, draft="draft", gamma=2, prompt=None, start=0) -> dict:
    """Outcome counts of seeds start .. n-1."""
    counts = {}
    for seed in range(start, n):
        out = tuple(decoder.generate(input_ids=prompt or PROMPT, max_new_tokens=TOKENS, gamma=gamma, seed=seed,
                                     draft=draft, **settings).token_ids)
        counts[out] = counts.get(out, 0) + 1
    return counts


def binned(dist: dict, n: int) -> list:
    """The outcomes the test bins on their own at n samples: expected count >= 5 (rarer ones share one bin)."""
    return [o for o in dist if dist[o] * n >= 5]


def chi_square_p(counts: dict, dist: dict) -> float:
    n = sum(counts.values())
    assert set(counts) <= set(dist), "an outcome the target cannot produce"
    big = binned(dist, n)
    assert len(big) >= MIN_BINS, "too few outcomes for the test to mean anything"
    observed = [counts.get(o, 0) for o in big] + [n - sum(counts.get(o, 0) for o in big)]
    expected = [dist[o] * n for o in big] + [n - sum(dist[o] * n for o in big)]
    if expected[-1] < 1e-9:
        observed, expected = observed[:-1], expected[:-1]
    return float(chisquare(observed, expected).pvalue)


def merged(counts: dict, more: dict) -> dict:
    for outcome, count in more.items():
        counts[outcome] = counts.get(outcome, 0) + count
    return counts


def caught(sample, dist: dict, n: int, threshold: float = P_TEETH, label: str = "broken control",
           p_of=None) -> tuple[int, float]:
    """A broken control's chi-square test on growing prefixes of its seeds 0 .. n-1: N/16, N/8, N/4, N/2 and N samples,
    stopping at the first whose p < threshold. `sample(start, stop)`: the outcome counts of seeds start .. stop-1;
    `p_of(counts, dist)`: the p-value (default chi_square_p). Returns (samples drawn, p), and prints them. Stopping
    early is sound for a control: it only has to be caught, and p below the threshold on fewer samples than the test
    draws shows the test catches the break with room to spare (looking five times makes a false catch of a correct
    sampler at most 5x as likely, 5e-6 at 1e-6)."""
    counts, drawn, p_value = {}, 0, 1.0
    for stop in (n // 16, n // 8, n // 4, n // 2, n):
        merged(counts, sample(drawn, stop))
        drawn = stop
        if len(binned(dist, drawn)) >= MIN_BINS:          # chi_square_p's minimum, else draw more first
            p_value = (p_of or chi_square_p)(counts, dist)
            if p_value < threshold:
                break
    print(f"{label}: caught after {drawn:,} of N = {n:,} samples, p = {p_value:.3g}" if p_value < threshold else
          f"{label}: NOT caught at N = {n:,}, p = {p_value:.3g}")
    return drawn, p_value


@pytest.fixture(scope="module")
def decoder(small_vocab_pair):
    return SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_speculative_sampling_matches_target_distribution(name, small_vocab_pair, decoder):
    settings = SETTINGS[name]
    dist = exact_distribution(small_vocab_pair[0], **settings)
    counts = empirical(decoder, settings)
    p_value = chi_square_p(counts, dist)
    assert p_value >= P_PASS, f"{name}: chi-square p = {p_value:.3g}"
    # the real T5 layout: rows past the tokenizer's ids (6 and 7 here) keep the probability the target gives them
    text = decoder.vocabulary.tokenizer_size
    padded = sum(p for outcome, p in dist.items() if max(outcome) >= text)
    if name == "temperature":
        assert padded * N_SAMPLES >= 500 and sum(n for o, n in counts.items() if max(o) >= text) > 0, padded
    # the pair must really exercise rejections, or this would only test the draft-free path
    stats = decoder.generate(input_ids=PROMPT, max_new_tokens=TOKENS, gamma=2, seed=0, draft="draft",
                             **settings).stats
    assert stats.proposed > 0


def test_the_test_has_teeth_plain_resampling_is_caught(small_vocab_pair, decoder, tmp_path):
    settings = SETTINGS["temperature"]
    dist = exact_distribution(small_vocab_pair[0], **settings)
    wrong = SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path), provider="cpu")
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, start=a), dist, N_SAMPLES, label="plain resampling")
    assert p_value < P_TEETH, f"the broken sampler passed the chi-square test (p = {p_value:.3g})"
    # rejections really happen on this pair, so the residual step is exercised
    total = [wrong.generate(input_ids=PROMPT, max_new_tokens=TOKENS, gamma=2, seed=s, draft="draft", **settings).stats
             for s in range(200)]
    assert sum(s.accepted for s in total) < sum(s.proposed for s in total)


def test_the_test_catches_a_proposal_loop_with_dependent_draws(small_vocab_pair, decoder, tmp_path):
    """The draft's k steps run in one graph (export/loop.py); a loop that reuses the first uniform for every step
    still writes the right q rows, but x_2 is no longer drawn independently of x_1: the chi-square test fails."""
    settings = SETTINGS["temperature"]
    dist = exact_distribution(small_vocab_pair[0], **settings)
    wrong = SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path, "draft",
                                                  "one_uniform"), provider="cpu")
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, start=a), dist, N_SAMPLES, label="dependent draws")
    assert p_value < P_TEETH, f"a proposal loop with dependent draws passed the chi-square test (p = {p_value:.3g})"
    stats = wrong.generate(input_ids=PROMPT, max_new_tokens=TOKENS, gamma=2, seed=0, draft="draft", **settings).stats
    assert stats.draft_calls == stats.target_calls - 1     # every round's 2 guesses came from one loop run


# -- the lookup draft (q = a point mass on each copied guess) -------------------------------------------------------
# The same test on a prompt that holds the pad token 0 the random target writes ~80 % of the time: after a 0 the lookup
# copies what followed a 0 in the prompt (mostly 0, kept ~80 % of the time), so guesses are kept and rejected in most
# requests. N = 5,000. Its broken control (the target's residual drawn from p) measured p = 2.7e-41 at 2,500 samples
# and 1.1e-83 at 5,000; on the earlier prompt [3, 5, 7, 4, 1], whose copies are rarely the target's choice, it needed
# 40,000 samples for p = 4.3e-11.
N_LOOKUP = 5_000
LOOKUP_PROMPT = [0, 0, 3, 0, 5, 1]

class with_source:
    """The same decoder with a DraftSource object as the draft (draft= takes one), for `empirical`."""

    def __init__(self, decoder, source):
        self.decoder, self.source = decoder, source

    def generate(self, **kwargs):
        return self.decoder.generate(**{**kwargs, "draft": self.source})


def with_lookup(decoder) -> with_source:
    return with_source(decoder, LookupDraft(1, 2))


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_lookup_draft_matches_target_distribution(name, small_vocab_pair, decoder):
    """N = 5,000, p >= 1e-3; the lookup copies from the prompt and the output so far."""
    settings = SETTINGS[name]
    lookup = with_lookup(decoder)
    p_value = chi_square_p(empirical(lookup, settings, N_LOOKUP, prompt=LOOKUP_PROMPT),
                           exact_distribution(small_vocab_pair[0], **settings, prompt=LOOKUP_PROMPT))
    print(f"lookup {name}: N = {N_LOOKUP}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"lookup {name}: chi-square p = {p_value:.3g}"
    stats = [lookup.generate(input_ids=LOOKUP_PROMPT, max_new_tokens=TOKENS, gamma=2, seed=s, **settings).stats
             for s in range(300)]
    proposed, accepted = sum(s.proposed for s in stats), sum(s.accepted for s in stats)
    assert 0 < accepted < proposed and proposed >= 100, \
        f"lookup guesses must be both kept and rejected for the test to mean anything ({accepted}/{proposed})"


def test_the_lookup_test_has_teeth(small_vocab_pair, decoder, tmp_path):
    """Keeping the point-mass guesses but drawing from p instead of norm(max(0, p - delta(x))) after a rejection
    over-weights the rejected guess; the same chi-square test must reject it (p < 1e-6)."""
    settings = SETTINGS["temperature"]
    wrong = with_lookup(SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path),
                                                provider="cpu"))
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, prompt=LOOKUP_PROMPT, start=a),
                        exact_distribution(small_vocab_pair[0], **settings, prompt=LOOKUP_PROMPT), N_LOOKUP,
                        label="broken lookup")
    assert p_value < P_TEETH, f"the broken lookup sampler passed the chi-square test (p = {p_value:.3g})"


# -- the lookup with a datastore: its guesses are point masses too, and it proposes from the first token on --------
# The datastore holds 200 random segments over the ids this random target writes most (the pad token 0 ~80 % of the
# time, then 3, 5, 7), so a round can copy from the output, the prompt or the datastore, and the first round copies
# how the datastore's segments start. N = 2,500: the broken control measured p = 4.6e-38 on 625 samples (and 0.0,
# below double precision, at 10,000 and 20,000).
N_STORE = 2_500


def small_datastore(tmp_path, vocab):
    import numpy as np

    from specdec.runtime.loading.datastore import Datastore
    from specdec.runtime.tools.datastore_build import write

    rng = np.random.default_rng(0)
    ids = np.array([0, 0, 0, 0, 3, 5, 4, 1])      # text: no padded row (6, 7)
    segments = [ids[rng.integers(0, len(ids), rng.integers(2, 8))].tolist() for _ in range(200)]
    return Datastore.open(write(tmp_path / "store.sdds", segments, vocab, "00" * 32))


def with_store(decoder, store) -> with_source:
    return with_source(decoder, LookupDraft(1, 2, datastore=store))


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_lookup_with_datastore_matches_target_distribution(name, small_vocab_pair, decoder, tmp_path):
    """N = 10,000, p >= 1e-3, with guesses from the datastore in every round."""
    settings = SETTINGS[name]
    lookup = with_store(decoder, small_datastore(tmp_path, decoder.vocabulary.tokenizer_size))
    p_value = chi_square_p(empirical(lookup, settings, N_STORE), exact_distribution(small_vocab_pair[0], **settings))
    print(f"lookup with a datastore, {name}: N = {N_STORE}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"lookup with a datastore, {name}: chi-square p = {p_value:.3g}"
    stats = [lookup.generate(input_ids=PROMPT, max_new_tokens=TOKENS, gamma=2, seed=s, **settings).stats
             for s in range(500)]
    proposed, accepted = sum(s.proposed for s in stats), sum(s.accepted for s in stats)
    assert 0 < accepted < proposed and proposed >= 500, (proposed, accepted)


def test_the_datastore_test_has_teeth(small_vocab_pair, decoder, tmp_path):
    """The residual drawn from p instead of norm(max(0, p - delta(x))): the same test rejects it (p < 1e-6)."""
    settings = SETTINGS["temperature"]
    wrong = with_store(SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path),
                                               provider="cpu"),
                       small_datastore(tmp_path, decoder.vocabulary.tokenizer_size))
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, start=a),
                        exact_distribution(small_vocab_pair[0], **settings), N_STORE, label="broken datastore sampler")
    assert p_value < P_TEETH, f"the broken sampler passed the chi-square test with a datastore (p = {p_value:.3g})"


# -- chains: in test_distribution_chains.py (a file of its own, so that the two test workers share these tests)


# -- auto's switch: plain target steps and draft rounds mixed in one request ----------------------------------------
# draft="auto" runs plain target steps where they measure faster than its rounds (runtime/decoding/adaptive/switch.py),
# so one request may mix both, and a source starts in the middle of a request. Here a switch flips every round (across
# requests too) and the rounds that are not plain always use the draft model at gamma 2. p >= 1e-3 (at N = 20,000:
# p = 0.62 at T = 1 and with top-k 3, ~20,000 rounds of each kind); the broken control (the residual draw replaced by
# a draw from p) must give p < 1e-6 (9.5e-58 at N = 20,000, so the test runs at N = 10,000: p = 0.065 and 0.24
# (top-k 3), the broken control 8.5e-27).
N_SWITCH = 10_000

class Alternate:
    """A switch that flips every round, across requests too: auto's sources start after plain steps (also used by
    test_switch.py)."""

    def __init__(self):
        self._plain, self.rounds = True, {True: 0, False: 0}

    def start(self):
        pass

    def plain(self, produced, hold=False):
        self._plain = not self._plain
        self.rounds[self._plain] += 1
        return self._plain


def switching_draft(decoder):
    """draft="auto" over the draft model alone, choosing it on every round its switch does not make plain."""
    from specdec.runtime.decoding.sources.auto import AutoDraft, Estimates
    from specdec.runtime.decoding.sources.model_draft import ModelDraft

    class Always(AutoDraft):
        def choose(self, ws, cap):
            super().choose(ws, cap)          # the sources start, the plan is made
            return "draft", cap

    source = Always({"draft": ModelDraft(decoder.models["draft"])}, Estimates())
    source.switch = Alternate()
    return source


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_switching_between_plain_steps_and_draft_rounds_keeps_the_target_distribution(name, small_vocab_pair,
                                                                                      decoder):
    settings = SETTINGS[name]
    source = switching_draft(decoder)
    counts = empirical(decoder, settings, N_SWITCH, draft=source)
    p_value = chi_square_p(counts, exact_distribution(small_vocab_pair[0], **settings))
    print(f"switching {name}: N = {N_SWITCH}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"switching {name}: chi-square p = {p_value:.3g}"
    assert min(source.switch.rounds.values()) > N_SWITCH // 2      # both kinds of round, many of each
    stats = [decoder.generate(input_ids=PROMPT, max_new_tokens=TOKENS, gamma=2, seed=s, draft=source, **settings).stats
             for s in range(200)]
    proposed, accepted = sum(s.proposed for s in stats), sum(s.accepted for s in stats)
    assert 0 < accepted < proposed


def test_the_switching_test_has_teeth(small_vocab_pair, tmp_path):
    settings = SETTINGS["temperature"]
    wrong = SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path), provider="cpu")
    source = switching_draft(wrong)
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, draft=source, start=a),
                        exact_distribution(small_vocab_pair[0], **settings), N_SWITCH, label="broken switching")
    assert p_value < P_TEETH, f"a broken residual draw passed the switching test (p = {p_value:.3g})"


# -- the default's chooser: Thompson draws and a probability-matching switch -----------------------------------------
# Auto's choice of source and gamma follows Thompson draws of its estimates (its own generator) and its switch
# shares rounds by the chance that each mode is the faster; neither reads the sampling's random numbers, and every
# choice depends only on rounds already made, so the output keeps the target's distribution whatever is chosen.
# The default's own candidates (the lookup, the draft model, the chain) are chosen by the real AutoDraft and Switch;
# only the times they learn are made up (a t5-large-like pair: 1 ms target steps, 0.1 ms a verified guess, 0.02 ms
# a draft guess; the switch's clock a tick a round), so that the tiny pair's rounds go to every source, as at real
# sizes. N = 10,000 requests at T = 1 (measured p = 0.62; rounds: draft 10,389, none 1,419, the lookup and the chain
# 8 each); p >= 1e-3; the broken control (the residual draw replaced by a draw from p) must give p < 1e-6 (caught
# after 5,000 samples, p = 6.8e-12).
N_DEFAULT = 10_000


def default_chooser(decoder):
    """The default request's AutoDraft candidates under a fresh chooser that learns made-up times."""
    import itertools

    from specdec.runtime.decoding.sources.auto import AutoDraft, Estimates
    from specdec.runtime.decoding.adaptive.switch import Switch

    class Timed(Estimates):
        def learn(self, source, proposed, accepted, target_s, other_s, encoder_s=0.0, expected=None, **rest):
            draft = 2e-5 * proposed if "draft" in source else 0.0
            super().learn(source, proposed, accepted, 1e-3 + 1e-4 * proposed, 1e-4 + draft, 0.0, expected, **rest)

    ticks = itertools.count()
    chooser = AutoDraft(decoder.scheduler.source(Params()).candidates, Timed())
    chooser.switch = Switch(clock=lambda: next(ticks) * 1e-3)
    return chooser


def default_counts(decoder, chooser, n: int, start: int = 0) -> tuple[dict, dict]:
    """(outcome counts, rounds by source) of requests through `chooser` (gamma up to 4), seeds start .. n-1."""
    counts, rounds = {}, {}
    for seed in range(start, n):
        res = decoder.generate(input_ids=PROMPT, max_new_tokens=TOKENS, seed=seed, draft=chooser, gamma=4,
                               **SETTINGS["temperature"])
        out = tuple(res.token_ids)
        counts[out] = counts.get(out, 0) + 1
        for name, s in res.stats.sources.items():
            rounds[name] = rounds.get(name, 0) + s.rounds
    return counts, rounds


def test_the_default_chooser_keeps_the_target_distribution(small_vocab_pair, decoder):
    chooser = default_chooser(decoder)
    counts, rounds = default_counts(decoder, chooser, N_DEFAULT)
    p_value = chi_square_p(counts, exact_distribution(small_vocab_pair[0], **SETTINGS["temperature"]))
    print(f"default chooser: N = {N_DEFAULT}, p = {p_value:.3g}, rounds by source {rounds}, explored "
          f"{chooser.explored} choice rounds and {chooser.switch.explored} switch rounds")
    assert p_value >= P_PASS, f"default chooser: chi-square p = {p_value:.3g}"
    assert rounds.get("none", 0) > 100 and rounds.get("draft", 0) > 1000, rounds
    assert chooser.explored > 0


def test_the_default_chooser_test_has_teeth(small_vocab_pair, tmp_path):
    wrong = SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path), provider="cpu")
    chooser = default_chooser(wrong)
    _, p_value = caught(lambda a, b: default_counts(wrong, chooser, b, start=a)[0],
                        exact_distribution(small_vocab_pair[0], **SETTINGS["temperature"]), N_DEFAULT,
                        label="broken default chooser")
    assert p_value < P_TEETH, f"a broken residual draw passed the default chooser's test (p = {p_value:.3g})"

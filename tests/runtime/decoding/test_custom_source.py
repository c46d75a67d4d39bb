"""The custom draft source of docs/guides/draft-sources.md ("Your own draft source"), taken from the page as written:
greedy output equal to target-only on the related tiny pair, with guesses kept and rejected; sampled output that
follows the target's exactly enumerated distribution (test_distribution.py's chi-square test, N = 5,000 on the
prompt where the random target repeats its pad token, p >= 1e-3); and the same test catches a broken residual draw
with this source proposing (p < 1e-6: measured after 625 of the 5,000 samples, p = 6.9e-27)."""

import re
from pathlib import Path

import pytest

from test_distribution import (LOOKUP_PROMPT, P_PASS, P_TEETH, SETTINGS, TOKENS, broken_export, caught,
                               chi_square_p, empirical, exact_distribution, with_source)

from specdec.runtime import SpeculativeDecoder

PAGE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "draft-sources.md"
N = 5_000
PROMPTS = [[20, 30, 1], [5, 6, 7, 5, 6, 7, 1], [40, 41, 42, 43, 1], [9, 9, 9, 9, 1]]


def page_source_class():
    """The class the page defines (its code block up to the lines that load an export)."""
    section = PAGE.read_text(encoding="utf-8").split("## Your own draft source", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {}
    exec(code.split("\ndec = ")[0], namespace)
    return namespace["RepeatLast"]


def test_the_pages_source_is_greedy_exact(related_decoder):
    source = page_source_class()()
    kept = rejected = 0
    for ids in PROMPTS:
        want = related_decoder.generate(input_ids=ids, max_new_tokens=24, draft="none").token_ids
        for gamma in (1, 2, 4):
            res = related_decoder.generate(input_ids=ids, max_new_tokens=24, draft=source, gamma=gamma)
            assert res.token_ids == want, (ids, gamma)
            mine = res.stats.sources["repeat"]
            kept, rejected = kept + mine.accepted, rejected + mine.proposed - mine.accepted
    assert kept > 0 and rejected > 0, (kept, rejected)


def test_the_pages_source_runs_under_the_default_gamma(related_decoder):
    """With gamma="auto" (the default) auto chooses between the source's rounds and plain steps by their measured
    rates; the source declares copies = True (host-made point masses) but is no lookup that auto may probe (its
    `probed` stays False), so it is asked to propose like a model. Greedy output equals target-only's; before, auto took it for the lookup and called its
    missing guesses()."""
    source = page_source_class()()
    assert source.copies
    for ids in PROMPTS:
        want = related_decoder.generate(input_ids=ids, max_new_tokens=24, draft="none").token_ids
        res = related_decoder.generate(input_ids=ids, max_new_tokens=24, draft=source)
        assert res.token_ids == want, ids


@pytest.fixture(scope="module")
def decoder(small_vocab_pair):
    return SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")


def test_the_pages_source_keeps_the_target_distribution_and_a_broken_residual_is_caught(small_vocab_pair, decoder,
                                                                                          tmp_path):
    settings, source = SETTINGS["temperature"], page_source_class()()
    dist = exact_distribution(small_vocab_pair[0], **settings, prompt=LOOKUP_PROMPT)
    p_value = chi_square_p(empirical(with_source(decoder, source), settings, N, prompt=LOOKUP_PROMPT), dist)
    print(f"custom source: N = {N}, p = {p_value:.3g}")
    assert p_value >= P_PASS, p_value
    stats = [decoder.generate(input_ids=LOOKUP_PROMPT, max_new_tokens=TOKENS, gamma=2, seed=s, draft=source,
                              **settings).stats for s in range(300)]
    proposed, accepted = sum(s.proposed for s in stats), sum(s.accepted for s in stats)
    assert 0 < accepted < proposed, (accepted, proposed)
    wrong = with_source(SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path),
                                                provider="cpu"), source)
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, prompt=LOOKUP_PROMPT, start=a), dist, N,
                        label="broken residual, custom source")
    assert p_value < P_TEETH, p_value

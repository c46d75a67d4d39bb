"""Distribution equality for chains (test_distribution.py's reference and chi-square test, in files of their own so
that the suite's two worker processes share the distribution tests: lookup,draft at gamma 2 is in
test_distribution_chain_loop.py): a model level verifies the level below and
proposes its own exactly distributed tokens."""

import pytest

from test_distribution import (P_PASS, P_TEETH, SETTINGS, TOKENS, broken_export, caught, chi_square_p, empirical,
                               exact_distribution)

from specdec.runtime import SpeculativeDecoder


@pytest.fixture(scope="module")
def decoder(small_vocab_pair):
    return SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")


# -- chains: a model level verifies the level below and proposes its own exactly distributed tokens --------------------
# The random target writes the pad token 0 ~80% of the time, so a prompt holding 0s lets the lookup copy from the source
# after the first token; gamma 1 keeps outputs to several rounds (at gamma 2 most 3-token outputs are one round and the
# lookup is rarely asked). Broken controls break the *middle* level's residual draw (draws from its p instead of
# norm(max(0, p - q)) after rejecting a guess of the level below). Measured with these seeds: lookup,draft broken p =
# 1.4e-5 at N = 20,000, 3.7e-13 at 40,000 and 2.2e-25 with top-k at 40,000; draft,mid broken p = 2.3e-67 at N = 20,000
# (so it runs at N = 10,000: p = 0.22 and 0.91 (top-k), its broken control 3.7e-19); the correct chains gave p = 0.03 ..
# 0.86. At gamma 1 a level verifies with a plain run; at gamma 2 it verifies and continues in one run of its proposal
# loop (export/loop.py): lookup,draft at gamma 2 gave p = 0.92 and 0.52 (top-k), its broken control 2.6e-9, at N =
# 40,000; draft,mid runs its loop at gamma 2. With top-k 3 the broken middle level deviates more: lookup,draft's control
# measured p = 8.2e-12 at N = 20,000 (gamma 1) and 1.2e-7 at N = 10,000 (gamma 2), so the top-k tests of lookup,draft
# run at N = 20,000, and lookup,draft's controls run there.
CHAIN_PROMPT = [0, 0, 3, 0, 5, 1]
CHAINS = {"lookup,draft": dict(gamma=1, n=40_000, n_top_k=20_000, broken="draft"),
          "lookup,draft gamma 2": dict(chain="lookup,draft", gamma=2, n=40_000, n_top_k=20_000, broken="draft"),
          "draft,mid": dict(gamma=2, n=10_000, broken="mid")}


HERE = ["draft,mid", "lookup,draft"]        # "lookup,draft gamma 2": test_distribution_chain_loop.py


@pytest.mark.parametrize("chain", HERE)
@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_chains_match_target_distribution(chain, name, small_vocab_pair, decoder):
    check_chain(chain, name, small_vocab_pair, decoder)


@pytest.mark.parametrize("chain", HERE)
def test_the_chain_tests_have_teeth(chain, small_vocab_pair, tmp_path):
    check_teeth(chain, small_vocab_pair, tmp_path)


def check_chain(chain, name, small_vocab_pair, decoder):
    """lookup,draft at gamma 1 and 2 (N = 40,000; 20,000 with top-k) and the three-model chain draft -> mid -> target
    (N = 10,000); p >= 1e-3."""
    settings, how = SETTINGS[name], CHAINS[chain]
    chain, n = how.get("chain", chain), how.get(f"n_{name}", how["n"])
    dist = exact_distribution(small_vocab_pair[0], **settings, prompt=CHAIN_PROMPT)
    counts = empirical(decoder, settings, n, chain, how["gamma"], CHAIN_PROMPT)
    p_value = chi_square_p(counts, dist)
    print(f"{chain} {name}: N = {n}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"{chain} {name}: chi-square p = {p_value:.3g}"
    stats = [decoder.generate(input_ids=CHAIN_PROMPT, max_new_tokens=TOKENS, gamma=how["gamma"], seed=s, draft=chain,
                              **settings).stats for s in range(300)]
    lower = chain.rsplit(",", 1)[0] + ">"
    proposed = sum(s.sources[lower].proposed for s in stats if lower in s.sources)
    accepted = sum(s.sources[lower].accepted for s in stats if lower in s.sources)
    assert 0 < accepted < proposed or (name == "top_k" and 0 < proposed), \
        f"the middle level must keep and reject guesses of the level below ({accepted}/{proposed})"


def check_teeth(chain, small_vocab_pair, tmp_path):
    """A broken middle level is caught: lookup,draft's with top-k 3 (its control's stronger setting: at T = 1 it took
    N = 40,000, p = 3.7e-13 at gamma 1 and 2.6e-9 at gamma 2, measured and written above), draft,mid's at T = 1."""
    how = CHAINS[chain]
    name = "top_k" if "n_top_k" in how else "temperature"
    settings, chain, n = SETTINGS[name], how.get("chain", chain), how.get(f"n_{name}", how["n"])
    wrong = SpeculativeDecoder.load(broken_export(small_vocab_pair[0], small_vocab_pair[1], tmp_path, how["broken"]),
                                    provider="cpu")
    dist = exact_distribution(small_vocab_pair[0], **settings, prompt=CHAIN_PROMPT)
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, chain, how["gamma"], CHAIN_PROMPT, start=a), dist,
                        n, label=f"broken {how['broken']} in {chain} ({name})")
    assert p_value < P_TEETH, f"a broken {how['broken']} level in {chain} passed the chi-square test (p = {p_value:.3g})"

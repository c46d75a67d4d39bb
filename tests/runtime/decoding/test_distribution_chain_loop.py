"""lookup,draft at gamma 2, where the middle level verifies the lookup's guesses and continues in one run of its
proposal loop: test_distribution_chains.py's tests, in a file of their own so that the suite's two worker processes
share them."""

import pytest

from test_distribution_chains import check_chain, check_teeth, decoder  # noqa: F401  (decoder: the fixture)

CHAIN = "lookup,draft gamma 2"


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_the_chain_loop_matches_target_distribution(name, small_vocab_pair, decoder):  # noqa: F811
    check_chain(CHAIN, name, small_vocab_pair, decoder)


def test_the_chain_loop_test_has_teeth(small_vocab_pair, tmp_path):
    check_teeth(CHAIN, small_vocab_pair, tmp_path)

"""Distribution equality with a draft restricted to part of the vocabulary (specdec-export --draft-vocab, whose q is 0
outside the rows it keeps): test_distribution.py's reference (the target's exactly enumerated distribution over its
first 3 tokens) and chi-square test, on the small-vocabulary pair exported with the draft keeping the rows of w3 and
the specials (ids 0-3 of 8): the target's mass on ids 4-7 (words and padded rows) reaches the output only through
the residual norm(max(0, p - q)) after a rejection, or the target's draw after the last guess.
N = 10,000 per setting, p >= 1e-3 (measured at 20,000: p = 0.52 at T = 1, 0.19 with top-k 3). Teeth: the same export
with the target's residual drawn from p instead must give p < 1e-6; it was caught after 1,250 samples (p = 6.1e-34)."""

import pytest

from test_distribution import (P_PASS, P_TEETH, SETTINGS, broken_export, caught, chi_square_p, empirical,
                               exact_distribution)
from tinymodels import read_manifest, shared_dir, export_pair

from specdec.runtime import SpeculativeDecoder

N = 10_000


@pytest.fixture(scope="module")
def restricted(small_vocab_pair, tmp_path_factory):
    """The small-vocabulary pair's target and draft exported with --draft-vocab 1 (w3, and the specials 0-2)."""
    target = small_vocab_pair[0]

    def build(root):
        root.mkdir(parents=True)
        (root / "text.txt").write_text("w3 w3 w4\nw3 w5\n")
        export_pair(str(target), str(target.parent / "draft"), str(root / "export"), "--draft-vocab", "1",
                    "--draft-vocab-text", str(root / "text.txt"), "--gamma-max", "4", "--max-length", "16")

    root = shared_dir(tmp_path_factory, "small_vocab_draft_vocab", build)
    assert read_manifest(root / "export")["models"]["draft"]["vocabulary"]["ids"] == [0, 1, 2, 3]
    return target, root / "export"


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_a_restricted_draft_keeps_the_target_distribution(name, restricted):
    settings = SETTINGS[name]
    dist = exact_distribution(restricted[0], **settings)
    decoder = SpeculativeDecoder.load(restricted[1], provider="cpu")
    counts = empirical(decoder, settings, N)
    p_value = chi_square_p(counts, dist)
    print(f"draft-vocab {name}: N = {N}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"{name}: chi-square p = {p_value:.3g}"
    outside = sum(n for outcome, n in counts.items() if any(t >= 4 for t in outcome))
    assert outside > 0.05 * N        # the rows the draft cannot propose are really produced, through the residual


def test_the_restricted_test_has_teeth(restricted, tmp_path):
    settings = SETTINGS["temperature"]
    dist = exact_distribution(restricted[0], **settings)
    wrong = SpeculativeDecoder.load(broken_export(restricted[0], restricted[1], tmp_path), provider="cpu")
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, start=a), dist, N,
                        label="draft-vocab, plain resampling")
    assert p_value < P_TEETH, f"the broken sampler passed the chi-square test (p = {p_value:.3g})"

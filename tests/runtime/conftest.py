"""Runtime fixtures: a related tiny pair (the draft is the target with noise, so guesses are kept and rejected)
exported once, and a small-vocabulary pair whose output distribution can be enumerated exactly."""

from __future__ import annotations

import pytest

from tinymodels import export_pair as export, make_tiny_t5, noisy_copy, shared_dir


@pytest.fixture(scope="session")
def related_pair(tmp_path_factory):
    """(target_dir, draft_dir, export_dir): a 2+2-layer v1.0 target whose greedy outputs vary with the prompt and a
    noisy copy of it as the draft (acceptance well between 0 and 1), plus a less noisy copy named "mid" for
    three-model chains (draft -> mid -> target); gamma_max 8, max_length 64. 48 rows, of which the tokenizer makes
    40 (the real T5 layout: rows past the tokenizer's are padded)."""
    def build(root):
        target = make_tiny_t5(root / "target", vocab=48, d_model=32, layers=2, decoder_layers=2, seed=1,
                              initializer_factor=2.0, tokens=40)
        draft = noisy_copy(target, root / "draft", noise=0.08, seed=5)
        mid = noisy_copy(target, root / "mid", noise=0.04, seed=6)
        export(target, draft, root / "export", "--draft", f"mid={mid}", "--gamma-max", "8", "--max-length", "64")

    root = shared_dir(tmp_path_factory, "related", build)       # once per run, for both workers (tests/conftest.py)
    return root / "target", root / "draft", root / "export"


@pytest.fixture(scope="session")
def small_vocab_pair(tmp_path_factory):
    """(target_dir, export_dir): vocabulary 8 so 3-token outputs can be enumerated, in the real T5 layout: the
    tokenizer makes 6 ids (3 words + pad, eos, unk) and rows 6 and 7 are padded, which the random models give real
    probability (the distribution tests count them like any row); the draft and a third model "mid" (for
    three-model chains) are unrelated random models, so rejections are frequent."""
    def build(root):
        small = dict(vocab=8, d_model=16, d_kv=8, heads=2, layers=1, decoder_layers=1, tokens=6)
        target = make_tiny_t5(root / "target", seed=3, **small)
        draft = make_tiny_t5(root / "draft", seed=4, **small)
        mid = make_tiny_t5(root / "mid", seed=8, **small)
        export(target, draft, root / "export", "--draft", f"mid={mid}", "--gamma-max", "4", "--max-length", "16")

    root = shared_dir(tmp_path_factory, "small_vocab", build)   # once per run, for both workers (tests/conftest.py)
    return root / "target", root / "export"


@pytest.fixture(scope="module")
def related_decoder(related_pair):
    """A SpeculativeDecoder on `related_pair`'s export (one per test module)."""
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(related_pair[2], provider="cpu")

"""Intra-op threads: `threads=` and the SPECDEC_THREADS environment variable (what 0 means), onnxruntime's own
default still decoding the same tokens, and a bad value as a one-line error."""

from __future__ import annotations

import pytest

from specdec.runtime import SpeculativeDecoder, SpecdecError

PROMPTS = ["the cat sat", "a dog ran far", "one two three four"]


def _threads(dec) -> tuple[int, int]:
    """(target decoder, draft decoder) intra-op threads, as their onnxruntime sessions were opened."""
    return tuple(m.decoder.session.get_session_options().intra_op_num_threads for m in (dec.target, dec.draft.model))


def test_the_variable_sets_what_zero_means_and_an_explicit_count_wins(tiny_export, monkeypatch):
    monkeypatch.setenv("SPECDEC_THREADS", "2")
    assert _threads(SpeculativeDecoder.load(tiny_export, provider="cpu")) == (2, 1)   # the draft: one, as documented
    assert _threads(SpeculativeDecoder.load(tiny_export, provider="cpu", threads=3)) == (3, 3)
    monkeypatch.delenv("SPECDEC_THREADS")
    assert _threads(SpeculativeDecoder.load(tiny_export, provider="cpu")) == (0, 1)   # onnxruntime's choice


def test_onnxruntimes_default_decodes_the_same_tokens(tiny_export, monkeypatch):
    """The suite runs with one thread (tests/conftest.py); the default, a thread per core, gives the same output."""
    one = SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)
    monkeypatch.delenv("SPECDEC_THREADS", raising=False)
    default = SpeculativeDecoder.load(tiny_export, provider="cpu")
    for prompt in PROMPTS:
        for draft in ("none", "draft", "auto"):
            assert default.generate(prompt, max_new_tokens=12, draft=draft).token_ids == \
                one.generate(prompt, max_new_tokens=12, draft=draft).token_ids
        assert default.generate(prompt, max_new_tokens=12, temperature=1.0, seed=7).token_ids == \
            one.generate(prompt, max_new_tokens=12, temperature=1.0, seed=7).token_ids


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_a_bad_value_is_one_line(tiny_export, monkeypatch, value):
    monkeypatch.setenv("SPECDEC_THREADS", value)
    with pytest.raises(SpecdecError) as err:
        SpeculativeDecoder.load(tiny_export, provider="cpu")
    assert "SPECDEC_THREADS" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("SPECDEC_THREADS", "1")
    assert SpeculativeDecoder.load(tiny_export, provider="cpu").generate("the cat", max_new_tokens=4).token_ids

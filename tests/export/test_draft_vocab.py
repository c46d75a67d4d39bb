"""Drafts restricted to part of the vocabulary (specdec-export --draft-vocab K, export/draft_vocab.py), for T5 and
Whisper: which rows a draft keeps, its graph against PyTorch on them and -inf elsewhere, the manifest's record,
greedy output equal to target-only decoding for every source, batches and beams, and the one-line errors. The
chi-square test of sampled output is tests/runtime/decoding/test_distribution_draft_vocab.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinymodels import (exported_whisper_pair, make_tiny_t5, noisy_copy, random_prompts, read_manifest,
                        run_export_cli, whisper_audio, write_tiny_tokenizer)
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

from specdec.export import draft_vocab
from specdec.export.check import onnx_logits
from specdec.runtime import SpeculativeDecoder

K = 12
TEXT = "\n".join(" ".join(f"w{3 + (i * j) % 20}" for j in range(9)) for i in range(40))   # w3 .. w22, skewed


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    """A tiny T5 target, a noisy copy of it as the draft (guesses are often kept), and the pair exported with the
    draft's rows restricted to the K most frequent words of TEXT."""
    root = tmp_path_factory.mktemp("draft_vocab_t5")
    target = make_tiny_t5(root / "target", seed=0, vocab=48, tokens=44)
    noisy_copy(target, root / "draft", noise=0.05, seed=1)
    (root / "text.txt").write_text(TEXT)
    code, _, err = run_export_cli(["--target", root / "target", "--draft", root / "draft", "--export", root / "export",
                                   "--draft-vocab", K, "--draft-vocab-text", root / "text.txt", "--gamma-max", 4,
                                   "--max-length", 32])
    assert code == 0, err
    return root


def test_the_draft_keeps_the_most_frequent_rows_and_the_specials(t5):
    manifest = read_manifest(t5 / "export")
    vocab = manifest["models"]["draft"]["vocabulary"]
    words = [w for line in TEXT.splitlines() for w in line.split()]
    counts = {int(w[1:]): words.count(w) for w in set(words)}
    most = sorted(counts, key=lambda i: (-counts[i], i))[:K]
    assert vocab["ids"] == sorted({0, 1, 2, *most}) and vocab["rows"] == K + 3 and vocab["most_frequent"] == K
    assert vocab["counted"] == ["text.txt"] and "vocabulary" not in manifest["models"]["target"]


def test_the_draft_graph_is_pytorch_on_its_rows_and_minus_inf_elsewhere(t5):
    vocab = read_manifest(t5 / "export")["models"]["draft"]["vocabulary"]["ids"]
    model = T5ForConditionalGeneration.from_pretrained(str(t5 / "draft")).eval()
    source = torch.tensor([[5, 9, 12, 7, 1]])
    decoder_ids = torch.tensor([[0, 4, 8, 15, 3, 6]])
    _, step, verify = onnx_logits(t5 / "export" / "draft" / "encoder.onnx", t5 / "export" / "draft" / "decoder.onnx",
                                  source.numpy(), decoder_ids.numpy(), [3, 1, 2])
    got = np.concatenate([step, verify], axis=1)[0]                                   # positions 3, 4, 5
    with torch.no_grad():
        want = model(input_ids=source, decoder_input_ids=decoder_ids).logits[0, 3:].numpy()
    outside = np.setdiff1d(np.arange(want.shape[-1]), vocab)
    assert np.isneginf(got[:, outside]).all() and np.isfinite(got[:, vocab]).all()
    assert np.abs(got[:, vocab] - want[:, vocab]).max() < 1e-4


@pytest.fixture(scope="module")
def t5_decoder(t5):
    return SpeculativeDecoder.load(t5 / "export", provider="cpu")


@pytest.mark.parametrize("source", ["draft", "lookup,draft", "auto"])
def test_greedy_output_is_target_only_output(t5_decoder, source):
    prompts = random_prompts(44, 6, seed=2)
    for prompt in prompts:
        want = t5_decoder.generate(input_ids=prompt, max_new_tokens=16, draft="none").token_ids
        got = t5_decoder.generate(input_ids=prompt, max_new_tokens=16, draft=source, gamma=3).token_ids
        assert got == want, (source, prompt)
    stats = t5_decoder.generate(input_ids=prompts[0], max_new_tokens=16, draft="draft", gamma=3).stats
    assert stats.proposed > 0 and stats.accepted > 0       # the restricted draft really proposes, and is kept


def test_speculative_beam_search_gives_target_only_beams(t5_decoder):
    """(Batches take their guesses from the lookup, never from a draft model, so the rows a draft keeps do not reach
    them.)"""
    for prompt in random_prompts(44, 3, seed=3):
        beams = t5_decoder.generate(input_ids=prompt, max_new_tokens=12, num_beams=2, draft="none").token_ids
        assert t5_decoder.generate(input_ids=prompt, max_new_tokens=12, num_beams=2, draft="draft",
                                   gamma=2).token_ids == beams


def test_whisper_draft_restricted_gives_target_only_output(tmp_path):
    (tmp_path / "text.txt").write_text("\n".join(" ".join(f"w{8 + (i * j) % 25}" for j in range(7)) for i in range(30)))
    _, export = exported_whisper_pair(tmp_path, extra=("--draft-vocab", "10", "--draft-vocab-text",
                                                       str(tmp_path / "text.txt")))
    vocab = read_manifest(export)["models"]["draft"]["vocabulary"]
    assert vocab["rows"] >= 10 and set(range(8)) <= set(vocab["ids"])            # the Whisper specials are kept
    dec = SpeculativeDecoder.load(export, provider="cpu")
    for seed in range(3):
        audio = whisper_audio(0.8, seed=seed)
        want = dec.generate(audio=audio, max_new_tokens=12, draft="none").token_ids
        assert dec.generate(audio=audio, max_new_tokens=12, draft="draft", gamma=3).token_ids == want


def test_choose_counts_each_segment_and_keeps_ties_by_id(tmp_path):
    tok = AutoTokenizer.from_pretrained(str(write_tiny_tokenizer(tmp_path, 10)))
    cfg = T5Config(vocab_size=12, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    ids = draft_vocab.choose(tok, cfg, ["w5 w5 w7", "w4 w7 w9", "w9"], 2, 12)
    assert ids.tolist() == [0, 1, 2, 5, 7]           # w5, w7 twice each (w9 twice too: the smaller ids first), specials
    with pytest.raises(Exception, match="only 5 distinct tokens"):
        draft_vocab.choose(tok, cfg, ["w5 w5 w7", "w4 w7 w9", "w8"], 6, 12)


@pytest.mark.parametrize("argv, message", [
    (["--draft-vocab", "5"], "has no draft model"),
    (["--draft", "D", "--draft-vocab", "5"], "needs text to count"),
    (["--draft", "D", "--draft-vocab", "0", "--draft-vocab-text", "T"], "must be 1 or more"),
])
def test_bad_draft_vocab_is_one_line(tmp_path, argv, message):
    (tmp_path / "T").write_text("w3 w4\n")
    argv = [str(tmp_path / a) if a in ("D", "T") else a for a in argv]
    code, _, err = run_export_cli(["--target", str(tmp_path / "missing-target"), "--export", str(tmp_path / "out"),
                                   *argv])
    assert code == 2 and message in err and err.count("\n") == 1, err

"""Checks on the committed default pair in models/ (cheap: loads, tokenizer contract, prompts file)."""

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
PAIR = [os.path.join(MODELS, "target"), os.path.join(MODELS, "draft")]

pytestmark = pytest.mark.skipif(
    not all(os.path.exists(os.path.join(d, "model.safetensors")) for d in PAIR),
    reason="default pair not built",
)


def test_tokenizer_contract():
    tokenizers = pytest.importorskip("tokenizers")
    vocabs = []
    for d in PAIR:
        tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        assert [tok.token_to_id(t) for t in ("<pad>", "</s>", "<unk>")] == [0, 1, 2]
        enc = tok.encode("translate English to German: Hello world")
        assert enc.ids[-1] == 1  # </s> appended, as T5 does
        vocabs.append(tok.get_vocab())
    assert vocabs[0] == vocabs[1]


def test_configs_and_sizes():
    cfgs = [json.load(open(os.path.join(d, "config.json"))) for d in PAIR]
    for c in cfgs:
        assert c["model_type"] == "t5"
        assert c["decoder_start_token_id"] == 0 and c["pad_token_id"] == 0 and c["eos_token_id"] == 1
    assert cfgs[0]["vocab_size"] == cfgs[1]["vocab_size"]
    total = 0
    for base in ("target", "draft", "prompts"):
        for root, _, files in os.walk(os.path.join(MODELS, base)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    assert total <= 40 * 1024 * 1024


def test_load_fp32_and_generate():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(PAIR[0])
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert len(tok) == transformers.AutoTokenizer.from_pretrained(PAIR[1]).__len__()
    from specdec.models.evaluate import decode

    for d in PAIR:
        m = transformers.T5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
        assert m.config.vocab_size >= len(tok)
        out = decode(m, tok, ["translate English to German: Library for reading files"], max_new_tokens=8)
        assert len(out) == 1 and len(out[0]) >= 1


def test_prompts_file():
    path = os.path.join(MODELS, "prompts", "test.jsonl")
    rows = [json.loads(l) for l in open(path, encoding="utf-8")]
    assert 100 <= len(rows) <= 1000
    assert {r["task"] for r in rows} == {"summarize", "translate"}
    for r in rows:
        assert set(r) == {"task", "source", "reference", "package"}
        prefix = "summarize: " if r["task"] == "summarize" else "translate English to German: "
        assert r["source"].startswith(prefix) and r["reference"]

"""`specdec-models widen` (models/widen.py): the bundled pair at larger shapes computes the same function.

On a small widening of both bundled models (d_model x2, d_kv 32 -> 64 for the draft, more heads, feed-forward
units and layers, 64 padded vocabulary rows), in float64 on test prompts: logits over the old vocabulary equal the
original's within 1e-4 x max|logit|, greedy tokens are identical, and the padded rows' total probability stays
below 1e-9 at every step. The official shapes' parameter counts are the widened checkpoints' own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import specdec.models
from specdec.models import widen

MODELS = Path(specdec.models.__file__).parent
SMALL = {"target": dict(d_model=640, d_ff=1536, d_kv=64, num_heads=7, num_layers=6, num_decoder_layers=6,
                        vocab_size=4096 + 64),
         "draft": dict(d_model=256, d_ff=1024, d_kv=64, num_heads=6, num_layers=4, num_decoder_layers=2,
                       vocab_size=4096 + 64)}


def prompts(count: int) -> list:
    rows = [json.loads(line) for line in (MODELS / "prompts" / "test.jsonl").read_text().splitlines()]
    by_task = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r["source"])
    return [s for task in sorted(by_task) for s in by_task[task][:count // 2]]


@pytest.fixture(scope="module", params=["target", "draft"])
def pair(request):
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    role = request.param
    old = T5ForConditionalGeneration.from_pretrained(str(MODELS / role), dtype=torch.float32).eval()
    new = widen.widen_model(old, SMALL[role], seed=3).eval()
    tok = AutoTokenizer.from_pretrained(str(MODELS / role))
    return role, old.double(), new.double(), tok


def test_logits_greedy_tokens_and_padded_mass(pair):
    role, old, new, tok = pair
    v0 = old.config.vocab_size
    worst_rel, worst_mass = 0.0, 0.0
    for text in prompts(6):
        ids = torch.tensor([tok(text).input_ids[:128]])
        with torch.no_grad():
            want = old.generate(ids, max_new_tokens=24, do_sample=False)
            got = new.generate(ids, max_new_tokens=24, do_sample=False)
            assert got.tolist() == want.tolist(), (role, text)
            a = old(input_ids=ids, decoder_input_ids=want).logits[0]
            b = new(input_ids=ids, decoder_input_ids=want).logits[0]
        worst_rel = max(worst_rel, float((a - b[:, :v0]).abs().max() / a.abs().max()))
        probs = torch.softmax(b, -1)
        worst_mass = max(worst_mass, float(probs[:, v0:].sum(-1).max()))
        assert float(torch.softmax(b.float(), -1)[:, v0:].sum(-1).max()) <= 1e-9        # in fp32 too
    print(f"{role}: max|dlogit| / max|logit| {worst_rel:.2e}, padded mass {worst_mass:.2e}")
    assert worst_rel <= 1e-4, (role, worst_rel)
    assert worst_mass <= 1e-9, (role, worst_mass)


def test_the_widened_model_has_the_new_shape_and_random_added_weights(pair):
    role, old, new, _ = pair
    cfg = new.config
    for name, value in SMALL[role].items():
        assert getattr(cfg, name) == value, name
    d0 = old.config.d_model
    # the dense work is real: the added query rows of a new head and added feed-forward units are not zero
    attention = new.decoder.block[0].layer[0].SelfAttention
    assert float(attention.q.weight.detach()[-cfg.d_kv:, :].abs().mean()) > 0
    assert float(new.decoder.block[0].layer[-1].DenseReluDense.wi.weight.detach()[-1].abs().mean()) > 0
    # nothing writes the added residual dimensions
    assert float(attention.o.weight[d0:].abs().max()) == 0.0
    assert float(new.encoder.block[-1].layer[-1].DenseReluDense.wo.weight.abs().max()) == 0.0


@pytest.mark.parametrize("shape, millions", [("t5-small", 60.5), ("t5-base", 222.9), ("t5-large", 737.7)])
def test_official_shapes_have_the_official_parameter_counts(shape, millions):
    from transformers import T5Config, T5ForConditionalGeneration

    def count(config) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in T5ForConditionalGeneration(config).parameters())

    bundled = T5Config.from_pretrained(str(MODELS / "target"))
    widened = T5Config(**{**bundled.to_dict(), **widen.official(shape)})
    assert count(widened) == count(T5Config(**widen.official(shape)))
    assert count(widened) / 1e6 == pytest.approx(millions, abs=0.1)


def test_a_smaller_shape_is_refused():
    from transformers import T5ForConditionalGeneration

    old = T5ForConditionalGeneration.from_pretrained(str(MODELS / "draft"), dtype=torch.float32)
    with pytest.raises(ValueError, match="smaller"):
        widen.widen_model(old, {**SMALL["draft"], "num_heads": 2})

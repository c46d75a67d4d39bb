"""Stage `widen`: the bundled pair at real T5 shapes, computing the same function.

    specdec-models widen --target-shape t5-large --draft-shape t5-small --out DIR [--seed 0]

writes DIR/target and DIR/draft: Hugging Face T5 checkpoints (fp32, the bundled tokenizer) with exactly the
official configuration of each shape (t5-small, t5-base, t5-large: 60.5M, 223M, 738M parameters), so that every
step costs what a real T5's does, whose outputs are the bundled models' (up to float rounding). Deterministic from
the bundled pair and the seed; generated, never committed. How (d = d_model, R the old residual dimensions, P the
added ones; every value not named below is the random initialization of the new shape, so the dense work is real):

- Width. The residual stream's P dimensions start at zero and nothing writes them: the rows of every projection into
  the residual (attention outputs, feed-forward outputs) are zero there, and so are the embedding's. Each layer
  norm's weight is scaled by sqrt(d_old / d_new) on R (RMS over d_new dimensions of which only d_old are nonzero),
  except the decoder's final one: the tied head multiplies by d_new^-0.5 instead of d_old^-0.5, which undoes that
  factor exactly. Old head h keeps its dimensions at the start of new head h; its added dimensions get zero query
  rows; added heads and feed-forward units are random and the output projections ignore them (zero columns).
  Added heads get random relative-position biases.
- Depth. An added layer (after the old ones) is the identity on the residual: zero output projections of its
  self-attention, cross-attention and feed-forward; the rest random.
- Vocabulary. The rows past the old vocabulary (to the shape's 32,128) are padded: the tokenizer never makes them.
  Two reserved residual dimensions r0, r1 hold EPS in every real token's embedding and are read by no layer (the
  layer norms' weights are zero there) but the decoder's final norm, whose weights there are +K and -K: the head then
  adds y*EPS - y*EPS = 0 to every real token's logit and -2 y B / sqrt(d_new) to a padded row's (its embedding has
  -B and +B there and zeros elsewhere), where y = K EPS / rms = RMS_BOUND / rms is 1 for a final hidden state of
  RMS_BOUND: a padded logit is -y PAD_MARGIN (the bundled pair's final RMS, measured 2.8 to 8.4 on the test prompts,
  puts it between about -190 and -570), so the padded rows' total probability stays far below 1e-9, in fp32 and in
  the int8 variants (zeros and +-B are exact in a weight-only int8 block). The export's parity check compares the
  rows the tokenizer makes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

EPS = 1e-3              # the reserved dimensions' value in a real token's embedding (vs a residual norm of ~100)
RMS_BOUND = 16.0        # the final hidden state's RMS (old dimensions) at which the reserved output is 1
PAD_MARGIN = 100.0      # a padded row's logit at that RMS, before the random part of its embedding
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spiece.model")


def official(shape: str) -> dict:
    """The T5Config keyword arguments of an official shape (models/shapes.py)."""
    from specdec.models.shapes import COMMON, CONFIGS

    if shape not in CONFIGS:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(CONFIGS)})")
    spec = CONFIGS[shape]
    return {**COMMON, **spec, "num_decoder_layers": spec["num_layers"]}


def widen_model(old, shape: dict, seed: int = 0):
    """A T5ForConditionalGeneration of config `shape` (T5Config keyword arguments) that computes `old`'s function
    (a T5 v1.0 model: ReLU feed-forward, tied and scaled head) on `old`'s vocabulary. Built in float32."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    c0 = old.config
    kw = {**c0.to_dict(), **shape, "dtype": "float32"}
    kw.pop("torch_dtype", None)
    c1 = T5Config(**kw)
    _check(c0, c1)
    torch.manual_seed(seed)
    new = T5ForConditionalGeneration(c1).float().eval()
    old = old.float()
    d0, d1 = c0.d_model, c1.d_model
    r0, r1 = d0, d0 + 1
    scale = math.sqrt(d0 / d1)
    with torch.no_grad():
        _embedding(new.shared.weight, old.shared.weight, c0.vocab_size, d0, d1)
        for stack in ("encoder", "decoder"):
            new_blocks, old_blocks = getattr(new, stack).block, getattr(old, stack).block
            for i, block in enumerate(new_blocks):
                source = old_blocks[i] if i < len(old_blocks) else None
                for j, layer in enumerate(block.layer):
                    was = source.layer[j] if source is not None else None
                    _norm(layer.layer_norm.weight, None if was is None else was.layer_norm.weight, d0, scale)
                    if hasattr(layer, "DenseReluDense"):
                        _feed_forward(layer.DenseReluDense, None if was is None else was.DenseReluDense, d0)
                    else:
                        attention = layer.SelfAttention if hasattr(layer, "SelfAttention") else layer.EncDecAttention
                        previous = None if was is None else (was.SelfAttention if hasattr(was, "SelfAttention")
                                                             else was.EncDecAttention)
                        _attention(attention, previous, c0, c1)
        _norm(new.encoder.final_layer_norm.weight, old.encoder.final_layer_norm.weight, d0, scale)
        final = new.decoder.final_layer_norm.weight
        _norm(final, old.decoder.final_layer_norm.weight, d0, 1.0)       # d_new^-0.5 of the head undoes the scale
        k = RMS_BOUND * scale / EPS
        final[r0], final[r1] = k, -k
    return new


def _check(c0, c1) -> None:
    if c0.feed_forward_proj != "relu" or c0.is_gated_act or not c0.tie_word_embeddings:
        raise ValueError("widening takes T5 v1.0 models (ReLU feed-forward, tied embeddings)")
    for name in ("d_model", "d_ff", "d_kv", "num_heads", "num_layers", "num_decoder_layers", "vocab_size"):
        if getattr(c1, name) < getattr(c0, name):
            raise ValueError(f"the new shape's {name} {getattr(c1, name)} is smaller than the model's "
                             f"{getattr(c0, name)}")
    if c1.d_model < c0.d_model + 2:
        raise ValueError("the new d_model must exceed the old by at least 2 (the reserved dimensions)")


def _embedding(e1, e0, v0: int, d0: int, d1: int) -> None:
    """Real rows: the old embedding on R, EPS on r0 and r1, zero elsewhere. Padded rows: -B on r0 and +B on r1,
    zero elsewhere (zeros and +-B stay exact in a weight-only int8 head's blocks, so padded logits stay where they
    are in every int8 variant)."""
    e1.zero_()
    e1[:v0, :d0] = e0
    e1[:v0, d0] = e1[:v0, d0 + 1] = EPS
    padded = e1.shape[0] - v0
    if padded:
        b = PAD_MARGIN * math.sqrt(d1) / 2
        e1[v0:, d0], e1[v0:, d0 + 1] = -b, b


def _norm(w1, w0, d0: int, scale: float) -> None:
    """A layer norm: the old weights times `scale` on R (an added layer's: random), zero on r0 and r1, random on the
    other added dimensions (they scale zeros)."""
    import torch

    w1.copy_(1.0 + 0.1 * torch.randn_like(w1))
    if w0 is not None:
        w1[:d0] = w0 * scale
    w1[d0] = w1[d0 + 1] = 0.0


def _feed_forward(ff1, ff0, d0: int) -> None:
    """wi: the old units on R, the rest random; wo: zero but for the old units' columns on R (an added layer's: zero)."""
    wo = ff1.wo.weight
    wo.zero_()
    if ff0 is not None:
        units = ff0.wi.weight.shape[0]
        ff1.wi.weight[:units, :d0] = ff0.wi.weight
        wo[:d0, :units] = ff0.wo.weight


def _attention(a1, a0, c0, c1) -> None:
    """Old head h keeps its d_kv_old dimensions at the start of new head h (its added dimensions: zero query rows);
    added heads random; the output projection reads only the old heads' old dimensions and writes only R. An added
    layer's attention: random, with a zero output projection."""
    import torch

    a1.o.weight.zero_()
    if a0 is None:
        return
    d0, k0, k1, n0 = c0.d_model, c0.d_kv, c1.d_kv, c0.num_heads
    kept = torch.tensor([h * k1 + j for h in range(n0) for j in range(k0)])
    padded = torch.tensor([h * k1 + j for h in range(n0) for j in range(k0, k1)], dtype=torch.long)
    for name in ("q", "k", "v"):
        w1, w0 = getattr(a1, name).weight, getattr(a0, name).weight
        w1[kept, :d0] = w0
    if len(padded):
        a1.q.weight[padded, :] = 0.0
    a1.o.weight[:d0, kept] = a0.o.weight
    if a0.has_relative_attention_bias:
        a1.relative_attention_bias.weight[:, :n0] = a0.relative_attention_bias.weight


def widen(target_shape: str, draft_shape: str, out, seed: int = 0, source=None, log=print) -> tuple[Path, Path]:
    """The `widen` stage: the bundled pair (or the pair in `source`: DIR/target, DIR/draft) widened to the official
    shapes, written to out/target and out/draft with the tokenizer; returns their paths."""
    import torch
    from transformers import T5ForConditionalGeneration

    source = Path(source) if source is not None else Path(__file__).parent
    out = Path(out)
    written = []
    for role, shape in (("target", target_shape), ("draft", draft_shape)):
        old = T5ForConditionalGeneration.from_pretrained(str(source / role), dtype=torch.float32).eval()
        log(f"widening {role} (d_model {old.config.d_model}, {old.config.num_layers}+"
            f"{old.config.num_decoder_layers} layers, vocabulary {old.config.vocab_size}) to {shape}")
        new = widen_model(old, official(shape), seed=seed + (role == "draft"))
        dst = out / role
        dst.mkdir(parents=True, exist_ok=True)
        new.save_pretrained(str(dst), safe_serialization=True)
        for name in TOKENIZER_FILES:
            if (source / role / name).is_file():
                shutil.copy(source / role / name, dst / name)
        (dst / "widen_info.json").write_text(json.dumps({
            "from": str(source / role), "shape": shape, "seed": seed + (role == "draft"),
            "parameters": sum(p.numel() for p in new.parameters()), "eps": EPS, "rms_bound": RMS_BOUND,
            "pad_margin": PAD_MARGIN}, indent=1) + "\n")
        log(f"  wrote {dst} ({sum(p.numel() for p in new.parameters()) / 1e6:.1f}M parameters)")
        written.append(dst)
        del old, new
    return written[0], written[1]


def run_widen(args) -> None:
    from specdec.models.shapes import CONFIGS

    for flag, shape in (("--target-shape", args.target_shape), ("--draft-shape", args.draft_shape)):
        if shape not in CONFIGS:
            raise SystemExit(f"error: {flag} {shape!r} is not a known shape; use one of {', '.join(CONFIGS)}")
    if not args.out:
        raise SystemExit("error: widen needs --out DIR (generated checkpoints stay out of the repository)")
    torch_threads(args.threads)
    widen(args.target_shape, args.draft_shape, os.path.abspath(args.out), seed=args.seed)


def torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))

"""T5's attention, written out for cached decoding: relative-position bias at absolute positions, explicit K/V.

The modules in encoder.py and decoder.py reuse the Hugging Face weights (q, k, v, o, layer norms, FFN) but do the
attention themselves so that the exported graphs take and return the KV cache in specdec's own layout.

Precision: the residual stream, layer norms, softmax and the FFN output projection (`wo`, where T5 overflows in
fp16) run in fp32; the other matrix products run in the weights' dtype (fp32 or fp16).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.t5.modeling_t5 import T5Attention


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """x @ W^T in the layer's dtype, result back in fp32."""
    return layer(x.to(layer.weight.dtype)).float()


def rms_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """T5's layer norm (scale only, no mean), always in fp32."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight.float() * (x * torch.rsqrt(variance + norm.variance_epsilon))


def feed_forward(x: torch.Tensor, ff_layer: nn.Module) -> torch.Tensor:
    """T5LayerFF: pre-norm, ReLU (v1.0) or gated-GELU (v1.1) FFN, residual. The output projection runs in fp32."""
    dense = ff_layer.DenseReluDense
    h = rms_norm(x, ff_layer.layer_norm)
    if hasattr(dense, "wi_0"):
        inner = dense.act(linear(h, dense.wi_0)) * linear(h, dense.wi_1)
    else:
        inner = dense.act(linear(h, dense.wi))
    return x + torch.nn.functional.linear(inner, dense.wo.weight.float())


def position_bias(attn: T5Attention, query_pos: torch.Tensor, key_pos: torch.Tensor, bidirectional: bool):
    """Relative-position bias [1, heads, len(query_pos), len(key_pos)] for absolute positions (fp32)."""
    relative = key_pos[None, :] - query_pos[:, None]
    bucket = T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional,
        num_buckets=attn.relative_attention_num_buckets, max_distance=attn.relative_attention_max_distance)
    return attn.relative_attention_bias(bucket).float().permute(2, 0, 1).unsqueeze(0)


def split_heads(x: torch.Tensor, heads: int, d_kv: int, like: torch.Tensor) -> torch.Tensor:
    """[B, T, heads*d_kv] -> [B, heads, T, d_kv]. `like`: the graph input whose first two dimensions are B and T
    (input_ids): every reshape then reads the same shape nodes, which ONNX Runtime merges into one."""
    b, t = like.shape[:2]
    return x.reshape(b, t, heads, d_kv).transpose(1, 2)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, out: nn.Linear,
           like: torch.Tensor):
    """T5 attention (no 1/sqrt(d) scaling): softmax(q k^T + bias) v, heads merged and projected; fp32 result."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2))   # unscaled T5 scores: keep them in fp32
    if bias is not None:
        scores = scores + bias
    ctx = torch.matmul(torch.softmax(scores, dim=-1), v.float())      # [B, H, T, d_kv]
    b, t = like.shape[:2]     # as in split_heads
    return linear(ctx.transpose(1, 2).reshape(b, t, -1), out)


def cast_for_export(model, dtype: torch.dtype):
    """A copy of `model` whose matrix weights are in `dtype`; norms, position biases and FFN `wo` stay fp32."""
    import copy

    if dtype == torch.float32:
        return model
    model = copy.deepcopy(model)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and not name.endswith(".wo") \
                and not name.endswith("relative_attention_bias"):
            module.to(dtype)
    return model

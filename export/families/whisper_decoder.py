"""Whisper's decoder graph, with the inputs and outputs of the T5 decoder graph (export/tracing.py), so the same
speculative head (export/head.py), the same in-place KV cache and the same runtime drive it:

    input_ids  int64 [batch, new]                 past_kv  dtype [past, dec_layers, 2, batch, heads, d_kv]
    cross_key_i, cross_value_i  dtype [batch, heads, frames, d_kv]  layer i's part of the encoder graph's cross_kv
                                                  (export/families/whisper_encoder.py), bound as views of it
    row_lengths, source_lengths  int64 [batch] or [1], default -1   (as in export/families/t5_decoder.py)
    tree_depth int64 [new], tree_mask bool [new, new]               (target only, as in export/families/t5_decoder.py)
 -> logits     fp32  [batch, new, vocab]          new_kv   dtype [new, dec_layers, 2, batch, heads, d_kv]

The cross K/V come one input per layer and part, not as one cross_kv: slicing cross_kv in the graph copies all of
it every run (37 MB a step at whisper base's 1,500 encoder positions: 5 ms of a 14.5-ms step on 2 cores).

Whisper places tokens by a learned absolute position embedding, so new token i of row b reads position
row_lengths[b] + i (+ tree_depth[i] in a tree run); a query attends to the cached slots its row owns and, among the
new tokens, to itself and those before it (or its tree ancestors). Queries are scaled by d_kv^-0.5 before the
product, as Hugging Face's WhisperAttention does; layer norms are pre-norm with bias, the FFN is fc1 -> GELU -> fc2,
and the logits are the final layer norm's output times the token embedding (proj_out, tied).
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import attend, linear, split_heads
from ..tracing import append_head, default_lengths, trace_module

MASKED = torch.finfo(torch.float32).min


class WhisperDecoderWithCache(nn.Module):
    def __init__(self, model, tree: bool = False):
        super().__init__()
        self.tree = tree
        cfg = model.config
        self.heads = cfg.decoder_attention_heads
        self.d_kv = cfg.d_model // self.heads
        decoder = model.model.decoder
        self.embed, self.positions = decoder.embed_tokens, decoder.embed_positions
        self.layers, self.final_norm = decoder.layers, decoder.layer_norm
        self.proj_out = model.proj_out

    def forward(self, input_ids, past_kv, cross_kv, row_lengths=None, source_lengths=None, tree_depth=None,
                tree_mask=None):
        new, past = input_ids.shape[1], past_kv.shape[0]
        dtype = past_kv.dtype
        cached = torch.arange(past, device=input_ids.device)
        row_lengths = default_lengths(row_lengths, input_ids)
        source_lengths = default_lengths(source_lengths, input_ids)
        lengths = torch.where(row_lengths < 0, torch.zeros_like(row_lengths) + past, row_lengths)    # [B|1]
        if self.tree:
            depth, sees = tree_depth, tree_mask
        else:
            depth = torch.arange(new, device=input_ids.device)
            sees = depth[None, :] <= depth[:, None]                                        # causal [new, new]
        owned = cached[None, None, :] < lengths[:, None, None]                             # [B|1, 1, past]
        allowed = torch.cat([owned.expand(-1, new, -1), sees[None].expand(owned.shape[0], -1, -1)], dim=2)
        mask = torch.where(allowed, 0.0, MASKED)[:, None]                                  # [B|1, 1, Q, K]
        frames = cross_kv[0][0].shape[2]                           # cross_kv[i][0]: layer i's K [B, H, S, d]
        src = torch.arange(frames, device=input_ids.device)
        sources = torch.where(source_lengths < 0, torch.zeros_like(source_lengths) + frames, source_lengths)
        cross_mask = torch.where(src[None, :] < sources[:, None], 0.0, MASKED)[:, None, None, :]   # [B|1, 1, 1, S]

        position = lengths[:, None] + depth[None, :]                                       # [B|1, new]
        h = self.embed(input_ids).float() + self.positions.weight[position].float()
        scale = self.d_kv ** -0.5
        new_kv = []
        for i, layer in enumerate(self.layers):
            sa = layer.self_attn
            x = layer.self_attn_layer_norm(h)
            q = split_heads(linear(x, sa.q_proj) * scale, self.heads, self.d_kv, input_ids)
            k = split_heads(linear(x, sa.k_proj), self.heads, self.d_kv, input_ids).to(dtype)     # [B, H, new, d]
            v = split_heads(linear(x, sa.v_proj), self.heads, self.d_kv, input_ids).to(dtype)
            new_kv.append(torch.stack([k, v]).permute(3, 0, 1, 2, 4))                  # [new, 2, B, H, d]
            kv = torch.cat([past_kv[:, i], new_kv[-1]]).permute(1, 2, 3, 0, 4)          # [2, B, H, past+new, d]
            h = h + attend(q, kv[0], kv[1], mask, sa.out_proj, input_ids)

            ca = layer.encoder_attn
            x = layer.encoder_attn_layer_norm(h)
            q = split_heads(linear(x, ca.q_proj) * scale, self.heads, self.d_kv, input_ids)
            h = h + attend(q, cross_kv[i][0], cross_kv[i][1], cross_mask, ca.out_proj, input_ids)

            x = layer.final_layer_norm(h)
            h = h + linear(layer.activation_fn(linear(x, layer.fc1)), layer.fc2)
        logits = linear(self.final_norm(h), self.proj_out)
        return logits, torch.stack(new_kv, dim=1)


def export_whisper_decoder(model, path, dtype: torch.dtype = torch.float32, opset: int = 17, residual: bool = True,
                           tree: bool = False) -> None:
    """The traced decoder of `model` (a WhisperForConditionalGeneration) with the speculative head appended, as
    t5_decoder.export_decoder writes a T5 decoder. `residual=False` only for tests' broken controls."""
    cfg = model.config
    heads = cfg.decoder_attention_heads
    kv = (cfg.decoder_layers, heads, cfg.d_model // heads)
    trace_module(WhisperDecoderWithCache(model, tree), kv, path, dtype, opset, tree, per_layer_cross=True)
    append_head(path, residual, tree)

"""T5's decoder graph: an explicit, time-major self-attention KV cache; one graph for 1-token steps and verifying.

    input_ids  int64 [batch, new]                                   new = 1 ... gamma+1 (any N works)
    past_kv    dtype [past, dec_layers, 2, batch, heads, d_kv]      past = tokens already in the cache (may be 0)
    cross_kv   dtype [dec_layers, 2, batch, heads, src_len, d_kv]   from the encoder graph
    row_lengths    int64 [batch] or [1]  cache positions row b owns: slots 0 .. row_lengths[b]-1 of
                                    past_kv; -1 (the default, an overridable initializer) = past for every row
    source_lengths int64 [batch] or [1]  encoder positions of row b in cross_kv (the rest is padding);
                                    -1 (the default) = src_len for every row
    tree_depth int64 [new]          (target only) new token i sits at absolute position length + depth[i]
    tree_mask  bool  [new, new]     (target only) new token i attends to new token j iff mask[i, j]
 -> logits     fp32  [batch, new, vocab]
    new_kv     dtype [new, dec_layers, 2, batch, heads, d_kv]       K/V of the new tokens only, in slot order

Time is the leading axis of the cache, so the runtime keeps one buffer [max_length, layers, 2, batch, heads, d_kv]
per model: `past_kv` is a view of its first `past` rows and `new_kv` is written straight into rows
past ... past+new-1. Rolling back rejected tokens is setting the length; nothing is copied or reallocated.
Position i of an N-token call attends causally to the cache and to new tokens 0..i, with T5's relative-position
bias for absolute position past+i, so it gives the logits of i one-token steps.

Rows of a batch may hold sequences of different lengths: row b owns cache slots 0 .. row_lengths[b]-1,
its new token i sits at position row_lengths[b] + i (or + tree_depth[i]) and attends to its own slots only; the
new tokens' K/V still land in slots past .. past+new-1 of every row, and the runtime moves a shorter row's kept
ones down to its own length (runtime/engine/batch_model.py). Cross-attention of row b sees its first
source_lengths[b] encoder positions. Left at their defaults, both inputs give exactly the single-length graph.

The target's graph (`tree=True`) verifies a token TREE in one run: the N new tokens are nodes in any slot order,
token i at position past + tree_depth[i] attends to every cached position and to the new tokens tree_mask[i] marks
(itself and its ancestors), with the relative-position bias of those positions. Each node's logits and K/V are
then those of a chain run over its path root..node. A chain is tree_depth = arange(N), tree_mask = the lower
triangle (diagonal included): the same table indices as a draft's graph, so the same logits and K/V bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import attend, feed_forward, linear, position_bias, rms_norm, split_heads
from ..tracing import (DECODER_TREE_INPUTS, INPUTS, OUTPUTS, append_head, default_lengths,  # noqa: F401
                       trace_module)


class DecoderWithCache(nn.Module):
    """`tree=True`: forward also takes tree_depth [new] int64 and tree_mask [new, new] bool (see above)."""

    def __init__(self, model, tree: bool = False):
        super().__init__()
        self.tree = tree
        cfg = model.config
        self.heads, self.d_kv = cfg.num_heads, cfg.d_kv
        self.embed = model.decoder.embed_tokens
        self.blocks = model.decoder.block
        self.final_norm = model.decoder.final_layer_norm
        self.lm_head = model.lm_head
        self.output_scale = cfg.d_model ** -0.5 if getattr(cfg, "scale_decoder_outputs", True) else 1.0
        self.register_buffer("bias_table", bias_table(self.blocks[0].layer[0].SelfAttention))

    def forward(self, input_ids, past_kv, cross_kv, row_lengths=None, source_lengths=None, tree_depth=None,
                tree_mask=None):
        new = input_ids.shape[1]
        past = past_kv.shape[0]
        dtype = past_kv.dtype
        far = self.bias_table.shape[0] - 2
        # each row's length (-1: the whole cache), [B] or [1]
        cached = torch.arange(past, device=input_ids.device)
        row_lengths = default_lengths(row_lengths, input_ids)
        source_lengths = default_lengths(source_lengths, input_ids)
        lengths = torch.where(row_lengths < 0, torch.zeros_like(row_lengths) + past, row_lengths)
        # relative-position bias and causal mask in one lookup: row 0 of the table masks a key after its query (or
        # a slot the row does not own), row 1 + d holds the bias at distance d (constant from max_distance on)
        if self.tree:
            # query i at length + depth_i; keys: cached positions 0..length-1, then new token j at length + depth_j,
            # masked (row 0) unless tree_mask[i, j]. The distances to the cache are >= 1 for any depth >= 0.
            depth = tree_depth
            to_new = (tree_depth[:, None] - tree_depth[None, :]).clamp(-1, far) + 1
            to_new = torch.where(tree_mask, to_new, torch.zeros_like(to_new))
        else:
            depth = torch.arange(new, device=input_ids.device)
            to_new = (depth[:, None] - depth[None, :]).clamp(-1, far) + 1
        to_past = (lengths[:, None, None] + depth[None, :, None] - cached[None, None, :]).clamp(-1, far) + 1
        owned = cached[None, None, :] < lengths[:, None, None]                             # [B|1, 1, past]
        to_past = torch.where(owned, to_past, torch.zeros_like(to_past))
        distance = torch.cat([to_past, to_new[None].expand(to_past.shape[0], -1, -1)], dim=2)   # [B|1, Q, K]
        bias = nn.functional.embedding(distance, self.bias_table).permute(0, 3, 1, 2)          # [B|1, H, Q, K]
        src = torch.arange(cross_kv.shape[4], device=input_ids.device)
        sources = torch.where(source_lengths < 0, torch.zeros_like(source_lengths) + cross_kv.shape[4],
                              source_lengths)
        cross_bias = torch.where(src[None, :] < sources[:, None], 0.0, torch.finfo(torch.float32).min)
        cross_bias = cross_bias[:, None, None, :]                                           # [B|1, 1, 1, S]

        h = self.embed(input_ids).float()
        new_kv = []
        for i, block in enumerate(self.blocks):
            sa = block.layer[0].SelfAttention
            x = rms_norm(h, block.layer[0].layer_norm)
            q = split_heads(linear(x, sa.q), self.heads, self.d_kv, input_ids)
            k = split_heads(linear(x, sa.k), self.heads, self.d_kv, input_ids).to(dtype)      # [B, H, new, d]
            v = split_heads(linear(x, sa.v), self.heads, self.d_kv, input_ids).to(dtype)
            new_kv.append(torch.stack([k, v]).permute(3, 0, 1, 2, 4))              # [new, 2, B, H, d]
            kv = torch.cat([past_kv[:, i], new_kv[-1]]).permute(1, 2, 3, 0, 4)      # [2, B, H, past+new, d]
            keys, values = kv[0], kv[1]
            h = h + attend(q, keys, values, bias, sa.o, input_ids)

            ca = block.layer[1].EncDecAttention
            x = rms_norm(h, block.layer[1].layer_norm)
            q = split_heads(linear(x, ca.q), self.heads, self.d_kv, input_ids)
            h = h + attend(q, cross_kv[i, 0], cross_kv[i, 1], cross_bias, ca.o, input_ids)
            h = feed_forward(h, block.layer[2])
        h = rms_norm(h, self.final_norm) * self.output_scale
        logits = linear(h, self.lm_head)
        return logits, torch.stack(new_kv, dim=1)


def bias_table(attn) -> torch.Tensor:
    """[max_distance + 2, heads] fp32: row 0 the causal mask (a key after its query), row 1 + d the decoder's
    relative-position bias at distance d = query - key >= 0 (T5's unidirectional buckets are all the last one from
    max_distance on, so distances beyond it read the last row). Made with position_bias itself, so it is the same
    function of the distance that Hugging Face's T5 computes."""
    far = attn.relative_attention_max_distance
    with torch.no_grad():
        rows = position_bias(attn, torch.tensor([far]), torch.arange(far, -1, -1), bidirectional=False)[0, :, 0]
        mask = torch.full((1, rows.shape[0]), torch.finfo(torch.float32).min)
        return torch.cat([mask, rows.T.float()], dim=0)


def export_decoder(model, path, dtype: torch.dtype = torch.float32, opset: int = 17, residual: bool = True,
                   tree: bool = False) -> None:
    """The traced decoder with the speculative head (export/head.py) appended: one graph per model.
    `tree=True` for a target: the tree inputs of the decoder and of the head (TREE_INPUTS, TREE_OUTPUTS).
    `residual=False` only for the distribution tests' deliberately broken control."""
    trace_decoder(model, path, dtype, opset, tree)
    append_head(path, residual, tree)


def trace_decoder(model, path, dtype: torch.dtype = torch.float32, opset: int = 17, tree: bool = False) -> None:
    cfg = model.config
    trace_module(DecoderWithCache(model, tree), (cfg.num_decoder_layers, cfg.num_heads, cfg.d_kv), path, dtype, opset,
                 tree)

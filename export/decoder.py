"""Decoder graph with an explicit, time-major self-attention KV cache; one graph for 1-token steps and verification.

    input_ids  int64 [batch, new]                                   new = 1 ... gamma+1 (any N works)
    past_kv    dtype [past, dec_layers, 2, batch, heads, d_kv]      past = tokens already in the cache (may be 0)
    cross_kv   dtype [dec_layers, 2, batch, heads, src_len, d_kv]   from the encoder graph
    tree_depth int64 [new]          (target only, format 6) new token i sits at absolute position past + depth[i]
    tree_mask  bool  [new, new]     (target only, format 6) new token i attends to new token j iff mask[i, j]
 -> logits     fp32  [batch, new, vocab]
    new_kv     dtype [new, dec_layers, 2, batch, heads, d_kv]       K/V of the new tokens only, in slot order

Time is the leading axis of the cache, so the runtime keeps one buffer [max_length, layers, 2, batch, heads, d_kv]
per model: `past_kv` is a view of its first `past` rows and `new_kv` is written straight into rows
past ... past+new-1. Rolling back rejected tokens is setting the length; nothing is copied or reallocated.
Position i of an N-token call attends causally to the cache and to new tokens 0..i, with T5's relative-position
bias for absolute position past+i, so it gives the logits of i one-token steps.

The target's graph (`tree=True`) verifies a token TREE in one run: the N new tokens are nodes in any slot order,
token i at position past + tree_depth[i] attends to every cached position and to the new tokens tree_mask[i] marks
(itself and its ancestors), with the relative-position bias of those positions. Each node's logits and K/V are
then those of a chain run over its path root..node. A chain is tree_depth = arange(N), tree_mask = the lower
triangle (diagonal included): the same table indices as a draft's graph, so the same logits and K/V bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.runtime.core.graph_io import DECODER_INPUTS, DECODER_OUTPUTS, TREE_INPUTS

from .attention import attend, feed_forward, linear, position_bias, rms_norm, split_heads

INPUTS, OUTPUTS = DECODER_INPUTS, DECODER_OUTPUTS  # runtime/core/graph_io.py
DECODER_TREE_INPUTS = TREE_INPUTS[:2]               # tree_depth, tree_mask; tree_uniforms is the head's


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

    def forward(self, input_ids, past_kv, cross_kv, tree_depth=None, tree_mask=None):
        new = input_ids.shape[1]
        past = past_kv.shape[0]
        dtype = past_kv.dtype
        far = self.bias_table.shape[0] - 2
        # relative-position bias and causal mask in one lookup: row 0 of the table masks a key after its query,
        # row 1 + d holds the bias at distance d (constant from max_distance on); a few nodes instead of the
        # bucket arithmetic on every run
        if self.tree:
            # query i at past + depth_i; keys: cached positions 0..past-1, then new token j at past + depth_j,
            # masked (row 0) unless tree_mask[i, j]. The distances to the cache are >= 1 for any depth >= 0.
            cached = torch.arange(past, device=input_ids.device)
            to_past = (tree_depth[:, None] + past - cached[None, :]).clamp(-1, far) + 1
            to_new = (tree_depth[:, None] - tree_depth[None, :]).clamp(-1, far) + 1
            to_new = torch.where(tree_mask, to_new, torch.zeros_like(to_new))
            distance = torch.cat([to_past, to_new], dim=1)
        else:
            query_pos = torch.arange(new, device=input_ids.device) + past
            key_pos = torch.arange(past + new, device=input_ids.device)
            distance = (query_pos[:, None] - key_pos[None, :]).clamp(-1, far) + 1
        bias = nn.functional.embedding(distance, self.bias_table).permute(2, 0, 1).unsqueeze(0)   # [1, H, Q, K]

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
            h = h + attend(q, cross_kv[i, 0], cross_kv[i, 1], None, ca.o, input_ids)
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
    """The traced decoder with the speculative head (export/head.py) appended: format 2's one graph per model.
    `tree=True` for a target (format 6): the tree inputs of the decoder and of the head (TREE_INPUTS, TREE_OUTPUTS).
    `residual=False` only for the distribution tests' deliberately broken control."""
    import onnx

    from .head import add_head

    trace_decoder(model, path, dtype, opset, tree)
    graph_model = onnx.load(str(path), load_external_data=False)     # weights stay where torch wrote them
    add_head(graph_model.graph, residual, tree)
    onnx.save(graph_model, str(path))


def trace_decoder(model, path, dtype: torch.dtype = torch.float32, opset: int = 17, tree: bool = False) -> None:
    cfg = model.config
    module = DecoderWithCache(model, tree).eval()
    layers, heads, d_kv = cfg.num_decoder_layers, cfg.num_heads, cfg.d_kv
    ids = torch.tensor([[3, 4]], dtype=torch.long)
    past = torch.zeros(3, layers, 2, 1, heads, d_kv, dtype=dtype)
    cross = torch.zeros(layers, 2, 1, heads, 5, d_kv, dtype=dtype)
    args, names = (ids, past, cross), list(INPUTS)
    axes = {"input_ids": {0: "batch", 1: "new"}, "past_kv": {0: "past", 3: "batch"},
            "cross_kv": {2: "batch", 4: "src_len"}, "logits": {0: "batch", 1: "new"}, "new_kv": {0: "new", 3: "batch"}}
    if tree:
        args += (torch.tensor([0, 1]), torch.tensor([[True, False], [True, True]]))
        names += list(DECODER_TREE_INPUTS)
        axes.update({"tree_depth": {0: "new"}, "tree_mask": {0: "new", 1: "new"}})
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=names, output_names=list(OUTPUTS), dynamic_axes=axes,
                          opset_version=opset, dynamo=False, do_constant_folding=True)

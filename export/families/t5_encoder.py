"""T5's encoder graph: source ids -> the cross-attention K/V of every decoder layer, computed once per request.

    input_ids       int64 [batch, src_len]
    source_lengths  int64 [batch] or [1]   row b's source is its first source_lengths[b] ids (the rest padding);
                                           -1 (the default, an overridable initializer) = src_len for every row
    cross_kv        dtype [dec_layers, 2, batch, heads, src_len, d_kv]     (2 = key, value)

A batch's sources are encoded in one run, padded to the longest: in self-attention row b attends to its own
positions only (a padded key gets float32's lowest score, so its softmax weight is exactly 0), and T5's bidirectional
relative-position bias depends on the distance between positions only, so row b's first source_lengths[b] K/V
positions are those of its source encoded alone, up to float rounding. The K/V at padded positions are left as
computed and never read: the decoder's cross-attention masks them (its own source_lengths input).
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.runtime.core.graph_io import ENCODER_INPUTS, ENCODER_OUTPUTS, ROW_INPUTS

from ..attention import attend, feed_forward, linear, position_bias, rms_norm, split_heads
from ..tracing import default_lengths, optional_inputs

INPUTS, OUTPUTS = ENCODER_INPUTS, ENCODER_OUTPUTS  # runtime/core/graph_io.py
SOURCE_LENGTHS = ROW_INPUTS[1]                     # the decoder's input of the same name and meaning


class EncoderWithCrossKV(nn.Module):
    def __init__(self, model):
        super().__init__()
        cfg = model.config
        self.heads, self.d_kv = cfg.num_heads, cfg.d_kv
        self.embed = model.encoder.embed_tokens
        self.blocks = model.encoder.block
        self.final_norm = model.encoder.final_layer_norm
        self.cross = nn.ModuleList(block.layer[1].EncDecAttention for block in model.decoder.block)

    def forward(self, input_ids: torch.Tensor, source_lengths: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(input_ids).float()
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        bias = position_bias(self.blocks[0].layer[0].SelfAttention, pos, pos, bidirectional=True)
        lengths = default_lengths(source_lengths, input_ids)
        lengths = torch.where(lengths < 0, torch.zeros_like(lengths) + input_ids.shape[1], lengths)
        padded = torch.where(pos[None, :] < lengths[:, None], 0.0, torch.finfo(torch.float32).min)
        bias = bias + padded[:, None, None, :]                                  # [B|1, heads, src_len, src_len]
        for block in self.blocks:
            sa = block.layer[0].SelfAttention
            x = rms_norm(h, block.layer[0].layer_norm)
            q, k, v = (split_heads(linear(x, proj), self.heads, self.d_kv, input_ids) for proj in (sa.q, sa.k, sa.v))
            h = h + attend(q, k, v, bias, sa.o, input_ids)
            h = feed_forward(h, block.layer[1])
        h = rms_norm(h, self.final_norm)
        dtype = self.embed.weight.dtype
        kv = [torch.stack([split_heads(linear(h, ca.k), self.heads, self.d_kv, input_ids),
                           split_heads(linear(h, ca.v), self.heads, self.d_kv, input_ids)]) for ca in self.cross]
        return torch.stack(kv).to(dtype)


def export_encoder(model, path, opset: int = 17) -> None:
    module = EncoderWithCrossKV(model).eval()
    ids = torch.tensor([[5, 6, 7, 1]], dtype=torch.long)
    lengths = torch.tensor([-1], dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(module, (ids, lengths), str(path), input_names=[*INPUTS, SOURCE_LENGTHS],
                          output_names=list(OUTPUTS),
                          dynamic_axes={"input_ids": {0: "batch", 1: "src_len"}, SOURCE_LENGTHS: {0: "length_rows"},
                                        "cross_kv": {2: "batch", 4: "src_len"}},
                          opset_version=opset, dynamo=False, do_constant_folding=True)
    import onnx

    traced = onnx.load(str(path), load_external_data=False)         # weights stay where torch wrote them
    optional_inputs(traced.graph, {SOURCE_LENGTHS: [-1]})
    onnx.save(traced, str(path))

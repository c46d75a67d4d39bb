"""T5's encoder graph: source ids -> the cross-attention K/V of every decoder layer, computed once per request.

    input_ids  int64 [batch, src_len]
    cross_kv   dtype [dec_layers, 2, batch, heads, src_len, d_kv]     (2 = key, value)

No attention mask: specdec encodes one unpadded prompt per sequence.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.runtime.core.graph_io import ENCODER_INPUTS, ENCODER_OUTPUTS

from ..attention import attend, feed_forward, linear, position_bias, rms_norm, split_heads

INPUTS, OUTPUTS = ENCODER_INPUTS, ENCODER_OUTPUTS  # runtime/core/graph_io.py


class EncoderWithCrossKV(nn.Module):
    def __init__(self, model):
        super().__init__()
        cfg = model.config
        self.heads, self.d_kv = cfg.num_heads, cfg.d_kv
        self.embed = model.encoder.embed_tokens
        self.blocks = model.encoder.block
        self.final_norm = model.encoder.final_layer_norm
        self.cross = nn.ModuleList(block.layer[1].EncDecAttention for block in model.decoder.block)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids).float()
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        bias = position_bias(self.blocks[0].layer[0].SelfAttention, pos, pos, bidirectional=True)
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
    with torch.no_grad():
        torch.onnx.export(module, (ids,), str(path), input_names=list(INPUTS), output_names=list(OUTPUTS),
                          dynamic_axes={"input_ids": {0: "batch", 1: "src_len"},
                                        "cross_kv": {2: "batch", 4: "src_len"}},
                          opset_version=opset, dynamo=False, do_constant_folding=True)

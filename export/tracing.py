"""What every family's decoder graph shares: the traced decoder's inputs and outputs (runtime/core/graph_io.py), the
row inputs' -1 defaults, and the speculative head (export/head.py) appended to the traced graph.

A family's decoder module takes `(input_ids, past_kv, cross_kv, row_lengths, source_lengths[, tree_depth,
tree_mask])` and returns `(logits, new_kv)` in the layout of the T5 decoder graph (export/families/t5_decoder.py);
`trace_module` traces it to ONNX with those names and axes, so one head, one KV cache and one runtime drive every
family's graphs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from specdec.runtime.core.graph_io import DECODER_INPUTS, DECODER_OUTPUTS, ROW_INPUTS, TREE_INPUTS, cross_names

from .draft_vocab import SubsetHead

INPUTS, OUTPUTS = DECODER_INPUTS, DECODER_OUTPUTS  # runtime/core/graph_io.py
DECODER_TREE_INPUTS = TREE_INPUTS[:2]               # tree_depth, tree_mask; tree_uniforms is the head's


def default_lengths(lengths, like):
    """None (a PyTorch caller that passes no lengths): [-1], the graph input's default."""
    return torch.full((1,), -1, dtype=torch.long, device=like.device) if lengths is None else lengths


def append_head(path, residual: bool = True, tree: bool = False) -> None:
    """Append the speculative head (export/head.py) to the traced decoder graph at `path`."""
    import onnx

    from .head import add_head

    graph_model = onnx.load(str(path), load_external_data=False)     # weights stay where torch wrote them
    add_head(graph_model.graph, residual, tree)
    onnx.save(graph_model, str(path))


def optional_inputs(graph, defaults: dict) -> None:
    """Give graph inputs a default value: an initializer of the same name, which a run may override by feeding or
    binding the input (ONNX Runtime's overridable initializers). Callers that know nothing of an input leave it."""
    from onnx import numpy_helper

    present = {i.name for i in graph.input}
    for name, value in defaults.items():
        if name not in present:
            raise ValueError(f"the graph has no input {name!r}")
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.int64), name))


class PerLayerCross(nn.Module):
    """A decoder module traced with its cross K/V one input per layer and part (graph_io.cross_names), after the
    others: the module itself gets them as a list in cross_kv's place (cross_kv[i][k]: layer i's K (k = 0) or V)."""

    def __init__(self, module: nn.Module, layers: int, tree: bool):
        super().__init__()
        self.module, self.layers, self.tree = module, layers, tree

    def forward(self, input_ids, past_kv, row_lengths, source_lengths, *rest):
        tree, cross = (rest[:2], rest[2:]) if self.tree else ((), rest)
        pairs = [(cross[2 * i], cross[2 * i + 1]) for i in range(self.layers)]
        return self.module(input_ids, past_kv, pairs, row_lengths, source_lengths, *tree)


def trace_module(module: nn.Module, kv: tuple, path, dtype: torch.dtype = torch.float32, opset: int = 17,
                 tree: bool = False, per_layer_cross: bool = False) -> None:
    """Trace a family's decoder module with this file's inputs and outputs (`kv`: its layers, heads and d_kv) to
    `path`, the row inputs given their -1 defaults. `per_layer_cross`: the cross K/V as cross_key_i, cross_value_i
    (graph_io.cross_names) in place of cross_kv; the module then reads cross_kv[i][0] and cross_kv[i][1]."""
    layers, heads, d_kv = kv
    module = module.eval()
    ids = torch.tensor([[3, 4]], dtype=torch.long)
    past = torch.zeros(3, layers, 2, 1, heads, d_kv, dtype=dtype)
    cross = torch.zeros(layers, 2, 1, heads, 5, d_kv, dtype=dtype)
    lengths = torch.tensor([-1], dtype=torch.long)
    args, names = (ids, past, cross, lengths, lengths.clone()), [*INPUTS, *ROW_INPUTS]
    axes = {"input_ids": {0: "batch", 1: "new"}, "past_kv": {0: "past", 3: "batch"},
            **{name: {0: "length_rows"} for name in ROW_INPUTS},
            "cross_kv": {2: "batch", 4: "src_len"}, "logits": {0: "batch", 1: "new"}, "new_kv": {0: "new", 3: "batch"}}
    if tree:
        args += (torch.tensor([0, 1]), torch.tensor([[True, False], [True, True]]))
        names += list(DECODER_TREE_INPUTS)
        axes.update({"tree_depth": {0: "new"}, "tree_mask": {0: "new", 1: "new"}})
    if per_layer_cross:
        parts = [cross[i // 2, i % 2].clone() for i in range(2 * layers)]
        args = (ids, past, lengths, lengths.clone(), *args[5:], *parts)
        names = [INPUTS[0], INPUTS[1], *ROW_INPUTS, *names[5:], *cross_names(layers)]
        del axes["cross_kv"]
        axes.update({name: {0: "batch", 2: "src_len"} for name in cross_names(layers)})
        module = PerLayerCross(module, layers, tree)
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=names, output_names=list(OUTPUTS), dynamic_axes=axes,
                          opset_version=opset, dynamo=False, do_constant_folding=True)
    import onnx

    traced = onnx.load(str(path), load_external_data=False)         # weights stay where torch wrote them
    optional_inputs(traced.graph, {name: [-1] for name in ROW_INPUTS})
    restricted = [m for m in module.modules() if isinstance(m, SubsetHead)]
    if restricted:          # logits scattered from a draft's kept rows: the tracer leaves their width unnamed
        logits = next(o for o in traced.graph.output if o.name == OUTPUTS[0])
        logits.type.tensor_type.shape.dim[-1].ClearField("dim_param")
        logits.type.tensor_type.shape.dim[-1].dim_value = restricted[0].vocab
    onnx.save(traced, str(path))

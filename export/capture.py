"""The graphs CUDA can capture: a T5 decoder step whose shapes and buffer addresses do not change from run to run.

ONNX Runtime's CUDA provider records a run as a CUDA graph (`enable_cuda_graph`, one graph per `gpu_graph_id`) and
replays it with one launch instead of ~1,700 kernel launches a t5-large step, but only for a graph with no control
flow (If, Loop, Scan), with every node on the GPU (no host copies: no shape computed from device data), and run
after run on the same bound addresses and shapes. The eager decoder graph (decoder.py) is none of these: its cache
view grows, its new K/V land at a moving offset, its head branches. So `specdec-export --graph-capture` writes, per
model, beside the eager graphs:

capture_decoder.onnx (no If, Loop or Scan; no Shape: every reshape has constant sizes, -1 standing for N)
    tokens        int64 [T]            the runtime's whole token buffer (T = max_length + gamma_max + 4 slots)
    position      int64 [1]            P: the model's cache length; the run's tokens are tokens[P + offsets]
    offsets       int64 [N]            0 .. N-1, N = 1 .. gamma_max + 2 (a prefix of one constant buffer): the only
                                       axis that varies, and only from one captured graph to another
    source_length int64 [1]            the request's encoder positions (the rest of cross_* is padding)
    past_key_i, past_value_i    kv [1, H, C, d]   layer i's self-attention cache, C = max_length slots, bound
                                       whole; slots P .. are masked
    cross_key_i, cross_value_i  kv [1, H, S, d]   layer i's cross-attention K/V, S = max_length positions
 -> logits        fp32 [1, N, V]
    present_key_i, present_value_i  kv [1, H, C, d]   the same memory as past_*_i: a ScatterElements writes the N
                                       new tokens' K/V at slots P .. P+N-1 in place (onnxruntime's copies nothing
                                       when its output is its input's buffer, and takes its sizes as kernel
                                       arguments: ScatterND would copy them from host memory inside the kernel,
                                       which a captured graph would replay from a freed host buffer)

  Each layer writes its new K/V into the cache first, then token i (position P + i) attends to the whole cache with
  T5's relative-position bias for distance P + i - slot, the slots after P + i masked: the same function as the
  eager graph's, with no cache copied or concatenated (one softmax over C slots a query). Query, key and value are
  one MatMul; with `fused_attention` each attention is one com.microsoft MultiHeadAttention node.

capture_head.onnx: the speculative head (head.py) as a graph of its own over the logits above (head.head_only_model):
    the same nodes as the eager graph's fused head, run eagerly after the captured step (its If nodes cannot be
    captured); at batch 1 its work is small next to the step's.

cross_pad.onnx (one for the export, no weights): an encoder's cross_kv [L, 2, 1, H, src_len, d] padded with zeros to
    [L, 2, 1, H, S, d], the layout the per-layer cross_* views read; run once per request.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.runtime.core.graph_io import (CAPTURE_INPUTS, CAPTURE_OUTPUTS, CROSS_PAD_INPUTS, CROSS_PAD_OUTPUTS,
                                          capture_cache_names)

from .attention import feed_forward, linear, rms_norm
from .families.t5_decoder import bias_table

TOKENS, POSITION, OFFSETS, SOURCE_LENGTH = CAPTURE_INPUTS
(LOGITS,) = CAPTURE_OUTPUTS
(PAD_IN,), (PAD_OUT,) = CROSS_PAD_INPUTS, CROSS_PAD_OUTPUTS


def cast(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x in `dtype`, with no node when it already is: the tracer records a Cast even for a no-op `.float()`, and one
    on a cache output would copy the whole cache every run (onnxruntime keeps a Cast that makes a graph output)."""
    return x if x.dtype == dtype else x.to(dtype)


class _Attention(torch.autograd.Function):
    """softmax(q k^T + bias) v, T5's unscaled attention, heads merged: q [1, N, H*d], k and v [1, H, L, d], bias
    [1, H or 1, N, L], all in one dtype. Traced as one node (specdec::Attention, made onnxruntime's
    com.microsoft MultiHeadAttention after tracing: `fused_attention`)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, heads: int):
        d = k.shape[-1]
        qh = q.reshape(1, -1, heads, d).transpose(1, 2).float()
        scores = torch.matmul(qh, k.float().transpose(-1, -2)) + bias.float()
        out = torch.matmul(torch.softmax(scores, dim=-1), v.float())
        return out.transpose(1, 2).reshape(1, -1, heads * d).to(q.dtype)

    @staticmethod
    def symbolic(g, q, k, v, bias, heads: int):
        return g.op("specdec::Attention", q, k, v, bias, num_heads_i=heads).setType(q.type())


class CapturableDecoder(nn.Module):
    """forward(tokens, position, offsets, source_length, *past (K, V per layer), *cross (K, V per layer)) ->
    (logits, *present (K, V per layer)). Per layer the new K/V are written into the cache first (ScatterElements,
    in place when present_* is bound to past_*'s memory), then the N queries attend to the whole cache: the slots
    after each query's position are masked by the relative-position table's row 0, whatever they hold. The query,
    key and value projections are one MatMul."""

    def __init__(self, model, capacity: int, source_capacity: int, fused: bool = False):
        super().__init__()
        cfg = model.config
        self.fused = fused
        self.heads, self.d_kv, self.layers = cfg.num_heads, cfg.d_kv, cfg.num_decoder_layers
        self.capacity, self.source_capacity = capacity, source_capacity
        self.embed = model.decoder.embed_tokens
        self.blocks = model.decoder.block
        self.qkv = nn.ParameterList(nn.Parameter(torch.cat([b.layer[0].SelfAttention.q.weight,
                                                             b.layer[0].SelfAttention.k.weight,
                                                             b.layer[0].SelfAttention.v.weight]).T.contiguous(),
                                                 requires_grad=False) for b in self.blocks)
        self.final_norm = model.decoder.final_layer_norm
        self.lm_head = model.lm_head
        self.output_scale = cfg.d_model ** -0.5 if getattr(cfg, "scale_decoder_outputs", True) else 1.0
        self.register_buffer("bias_table", bias_table(self.blocks[0].layer[0].SelfAttention))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[1, N, H*d] -> [1, H, N, d], sizes as constants (N as -1): no Shape node."""
        return x.reshape(1, -1, self.heads, self.d_kv).transpose(1, 2)

    def _merge(self, ctx: torch.Tensor, out: nn.Linear) -> torch.Tensor:
        return linear(ctx.transpose(1, 2).reshape(1, -1, self.heads * self.d_kv), out)

    def forward(self, tokens, position, offsets, source_length, *kv):
        layers, cap, src_cap = self.layers, self.capacity, self.source_capacity
        past, cross = kv[:2 * layers], kv[2 * layers:]
        dtype = past[0].dtype
        far = self.bias_table.shape[0] - 2
        at = position + offsets                                                    # [N] absolute positions
        input_ids = torch.gather(tokens, 0, at).reshape(1, -1)                    # [1, N]
        # relative-position bias and mask in one table lookup (decoder.bias_table): row 0 masks a slot after the
        # query (a later new token's, or a stale one's), row 1 + d is the bias at distance d
        slots = torch.arange(cap, dtype=torch.long)
        distance = (at[:, None] - slots[None, :]).clamp(-1, far) + 1                # [N, C]
        bias = nn.functional.embedding(distance, self.bias_table).permute(2, 0, 1)[None]   # [1, H, N, C]
        src = torch.arange(src_cap, dtype=torch.long)
        cross_bias = torch.where(src < source_length, 0.0, torch.finfo(torch.float32).min)[None, None, None]
        # where the new K/V go along the cache's slot axis: P + i for every head and element -> [1, H, N, d]
        index = at[None, None, :, None] + torch.zeros(1, self.heads, 1, self.d_kv, dtype=torch.long)

        if self.fused:          # the attention's dtype: the mask row at that dtype's lowest, the cross mask per query
            low = torch.finfo(dtype).min
            bias = cast(bias.clamp(min=low), dtype)
            cross_bias = cast(cross_bias.clamp(min=low) + cast(offsets)[None, None, :, None] * 0, dtype)

        h = self.embed(input_ids).float()
        present = []
        for i, block in enumerate(self.blocks):
            sa = block.layer[0].SelfAttention
            x = rms_norm(h, block.layer[0].layer_norm)
            w = self.qkv[i]
            qkv = torch.matmul(cast(x, w.dtype), w).reshape(1, -1, 3, self.heads, self.d_kv)
            if self.fused:
                q = qkv[:, :, 0].reshape(1, -1, self.heads * self.d_kv)
                k, v = qkv[:, :, 1:].permute(2, 0, 3, 1, 4).unbind(0)
            else:
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)                          # [1, H, N, d] each
            cache_k = past[2 * i].scatter(2, index, cast(k, dtype))
            cache_v = past[2 * i + 1].scatter(2, index, cast(v, dtype))
            present += [cache_k, cache_v]
            if self.fused:
                ctx = _Attention.apply(cast(q, dtype), cache_k, cache_v, bias, self.heads)
                h = h + linear(ctx, sa.o)
            else:
                scores = torch.matmul(cast(q), cast(cache_k).transpose(-1, -2)) + bias      # unscaled, as T5
                ctx = torch.matmul(torch.softmax(scores, dim=-1), cast(cache_v))
                h = h + self._merge(ctx, sa.o)

            ca = block.layer[1].EncDecAttention
            x = rms_norm(h, block.layer[1].layer_norm)
            if self.fused:
                q = cast(linear(x, ca.q), dtype)
                ctx = _Attention.apply(q, cross[2 * i], cross[2 * i + 1], cross_bias, self.heads)
                h = h + linear(ctx, ca.o)
            else:
                q = self._heads(linear(x, ca.q))
                scores = torch.matmul(q, cast(cross[2 * i]).transpose(-1, -2)) + cross_bias
                ctx = torch.matmul(torch.softmax(scores, dim=-1), cast(cross[2 * i + 1]))
                h = h + self._merge(ctx, ca.o)
            h = feed_forward(h, block.layer[2])
        h = rms_norm(h, self.final_norm) * self.output_scale
        logits = linear(h, self.lm_head)
        return (logits, *present)


def export_capture_decoder(model, path, dtype: torch.dtype, capacity: int, source_capacity: int, slots: int,
                           opset: int = 17, fused_attention: bool = False) -> None:
    """Trace CapturableDecoder to `path` (every axis fixed but N). `fused_attention`: each attention (scores, bias,
    softmax, values, heads merged) is one com.microsoft MultiHeadAttention node (onnxruntime's contrib op, on the CPU
    and CUDA providers) instead of its MatMuls, Softmax and Transposes."""
    import onnx
    from onnx import helper

    cfg = model.config
    module = CapturableDecoder(model, capacity, source_capacity, fused_attention).eval()
    heads, d_kv = cfg.num_heads, cfg.d_kv
    past_names, present_names, cross_names = capture_cache_names(cfg.num_decoder_layers)
    tokens = torch.zeros(slots, dtype=torch.long)
    position = torch.tensor([2], dtype=torch.long)
    offsets = torch.arange(2, dtype=torch.long)
    source_length = torch.tensor([3], dtype=torch.long)
    past = [torch.zeros(1, heads, capacity, d_kv, dtype=dtype) for _ in past_names]
    cross = [torch.zeros(1, heads, source_capacity, d_kv, dtype=dtype) for _ in cross_names]
    with torch.no_grad():
        torch.onnx.export(module, (tokens, position, offsets, source_length, *past, *cross), str(path),
                          input_names=[*CAPTURE_INPUTS, *past_names, *cross_names],
                          output_names=[LOGITS, *present_names], dynamic_axes={OFFSETS: {0: "new"}, LOGITS: {1: "new"}},
                          opset_version=opset, dynamo=False, do_constant_folding=True,
                          custom_opsets={"specdec": 1} if fused_attention else None)
    graph_model = onnx.load(str(path), load_external_data=False)       # weights stay where torch wrote them
    if fused_attention:
        _multi_head_attention(graph_model)
    _written_in_place(graph_model)
    logits = next(o for o in graph_model.graph.output if o.name == LOGITS)
    logits.CopyFrom(helper.make_tensor_value_info(LOGITS, onnx.TensorProto.FLOAT, [1, "new", cfg.vocab_size]))
    onnx.save(graph_model, str(path))


def _written_in_place(graph_model) -> None:
    """Make each present_* the ScatterElements output itself where the tracer put a no-op Cast after it (a Cast to
    the cache's own dtype: onnxruntime keeps a Cast that makes a graph output, a copy of the whole cache a run)."""
    graph = graph_model.graph
    makers = {out: node for node in graph.node for out in node.output}
    kv = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    for value in graph.output:
        cast = makers.get(value.name)
        if not value.name.startswith("present_") or cast is None or cast.op_type != "Cast":
            continue
        scatter = makers.get(cast.input[0])
        past = "past_" + value.name[len("present_"):]
        if scatter is None or scatter.op_type != "ScatterElements" or scatter.input[0] != past or \
                next(a.i for a in cast.attribute if a.name == "to") != kv[past]:
            continue
        old = cast.input[0]
        graph.node.remove(cast)
        for node in graph.node:
            node.input[:] = [value.name if name == old else name for name in node.input]
        scatter.output[0] = value.name
    inputs = {v.name: v for v in graph.input}
    for value in graph.output:          # declared as their cache inputs: [1, H, C, d] in the cache's dtype
        if value.name.startswith("present_"):
            value.type.CopyFrom(inputs["past_" + value.name[len("present_"):]].type)


def _multi_head_attention(graph_model) -> None:
    """specdec::Attention(q, k, v, bias) -> com.microsoft MultiHeadAttention(q, k, v, , , bias) with scale 1 (T5
    scales no scores): query [1, N, H*d], key and value [1, H, L, d] (BNSH), attention_bias [1, H or 1, N, L]."""
    from onnx import helper

    for node in graph_model.graph.node:
        if node.domain == "specdec" and node.op_type == "Attention":
            q, k, v, bias = node.input
            heads = next(a.i for a in node.attribute if a.name == "num_heads")
            node.CopyFrom(helper.make_node("MultiHeadAttention", [q, k, v, "", "", bias], list(node.output),
                                           name=node.name, domain="com.microsoft", num_heads=heads, scale=1.0))
    imports = [o for o in graph_model.opset_import if o.domain != "specdec"]
    del graph_model.opset_import[:]
    graph_model.opset_import.extend([*imports, helper.make_opsetid("com.microsoft", 1)])


def export_cross_pad(path, dtype: torch.dtype, source_capacity: int, opset: int = 17) -> None:
    """cross_pad.onnx: cross_kv [L, 2, B, H, src_len, d] -> [L, 2, B, H, S, d], zeros after src_len."""
    import onnx
    from onnx import TensorProto, helper

    from .head import standalone_model

    kind = TensorProto.FLOAT16 if dtype == torch.float16 else TensorProto.FLOAT

    def const(name, values):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name + "_v", TensorProto.INT64, [len(values)], values))

    nodes = [
        const("capacity", [source_capacity]), const("axis4", [4]), const("zeros4", [0, 0, 0, 0]),
        const("zero1", [0]),
        helper.make_node("Shape", [PAD_IN], ["shape"]),
        helper.make_node("Gather", ["shape", "axis4"], ["length"], axis=0),
        helper.make_node("Sub", ["capacity", "length"], ["missing"]),
        helper.make_node("Concat", ["zeros4", "zero1", "zero1", "zeros4", "missing", "zero1"], ["pads"], axis=0),
        helper.make_node("Pad", [PAD_IN, "pads"], [PAD_OUT], mode="constant"),
    ]
    dims = ["layers", 2, "batch", "heads"]
    graph = helper.make_graph(nodes, "cross_pad",
                              [helper.make_tensor_value_info(PAD_IN, kind, [*dims, "src_len", "d_kv"])],
                              [helper.make_tensor_value_info(PAD_OUT, kind, [*dims, source_capacity,
                                                                                      "d_kv"])])
    onnx.save(standalone_model(graph, opset), str(path))


def export_capture_head(path, residual: bool = True, opset: int = 17) -> None:
    """capture_head.onnx: the speculative head alone (head.head_only_model), over the captured step's logits.
    `residual=False` only for the distribution tests' deliberately broken control."""
    import onnx

    from .head import head_only_model

    onnx.save(head_only_model(opset, residual), str(path))


FORBIDDEN = ("If", "Loop", "Scan", "Shape", "Size", "NonZero", "Unique", "Compress")


def capture_problems(model) -> list:
    """What keeps a capture_decoder graph (an onnx ModelProto) from being captured: control flow or shape
    computation nodes, and inputs whose shape is not fixed but for `offsets`' N. Empty when there is nothing."""
    problems = [f"node {n.name or n.op_type} is {n.op_type}" for n in model.graph.node if n.op_type in FORBIDDEN]
    makers = {out: node for node in model.graph.node for out in node.output}
    for value in model.graph.output:            # each present_* must be its past_* with the new K/V scattered in
        if value.name.startswith("present_"):
            node = makers.get(value.name)
            if node is None or node.op_type != "ScatterElements" or \
                    node.input[0] != "past_" + value.name[len("present_"):]:
                problems.append(f"output {value.name} is not its cache input written in place")
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
        if value.name == OFFSETS:
            dims = dims[1:]
        if any(d is None for d in dims):
            problems.append(f"input {value.name} has a dynamic axis")
    return problems


def slots_for(max_length: int, gamma_max: int) -> int:
    """The token buffer's length (runtime/engine/workspace.py): max_length + gamma_max + 1 slots and three more."""
    return max_length + gamma_max + 4



"""int8 weights for an exported graph, through ONNX Runtime's own quantization tooling. Two kinds:

``int8`` (`quantize_int8`), dynamic quantization (`onnxruntime.quantization.quantize_dynamic`): every MatMul whose second input is a weight
(`MatMulConstBOnly`) becomes MatMulInteger with int8 weights (per output channel) and its activations quantized
at run time, one scale per token (`per_row_activations`: ONNX Runtime's DynamicQuantizeLinear takes one scale per
tensor, which would make a verify run's logits depend on the other tokens in it); the KV cache, the cross-attention K/V, layer norms, softmax, the attention score
products (activation x activation), the embedding lookup and the speculative head stay float32. The graph's
inputs and outputs keep their names, dtypes and shapes, so the runtime binds an int8 graph exactly like an fp32
one. A target keeps its first decoder block and its output projection (the LM head, whose error goes straight into
the logits) in float32 (`target_float_nodes`), and in its encoder the first block's self-attention value and output
projections (`encoder_float_nodes`); the per-token scales keep each row of a batched, padded encoder run
independent of the others. The int8 weights are scaled per column so that no two neighbours along K sum past 128
in magnitude (`weight_scales`, "pairs"): x86 CPUs without VNNI add such pairs of uint8 x int8 products in int16 with
saturation, which 8-bit weights at full range overflow, so an export would compute otherwise there than where it was
checked (runtime/engine/int8cpu.py); within the bound every CPU computes the same integers.

``int8-wo`` (`quantize_weight_only`, drafts only), weight-only quantization through ONNX Runtime's
MatMulNBitsQuantizer: 8-bit symmetric weights in blocks of WO_BLOCK along K with int8 compute (accuracy_level 4;
activations quantized per block at run time). The fastest one-token step measured at t5-small sizes, but its
kernels give a multi-token verify run logits that differ from one-token steps', so a target in int8-wo would not
reproduce its own target-only output; a draft may (only the target's p decides what is kept).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError, first_line


WO_BITS, WO_BLOCK, WO_ACCURACY = 8, 128, 4
FLOAT_BLOCK_MIN_LAYERS = 3      # below this, a float first block would leave too little of the decoder in int8


def _single_file(path: Path, what: str, kind: str) -> None:
    if (path.parent / (path.name + ".data")).exists():
        raise SpecdecError(f"cannot quantize the {what} graph to {kind}: it is larger than 2 GB and keeps its "
                           "weights in an external file", "export it as fp32 or fp16, or quantize a smaller model")


def direct_weights(path: Path) -> int:
    """Point every MatMul whose weight reaches it through Identity nodes at the weight itself, and drop the Identity
    nodes left unused; rewrites the single-file graph at `path` when it changes, returns the MatMuls changed.

    PyTorch's exporter stores identical weights once and hands the other uses an Identity of it (a checkpoint whose
    layers are copies of one another: the widened pairs). ONNX Runtime's quantizers take only a MatMul whose weight
    is an initializer, so such MatMuls stayed float32 in an int8 export (measured on the widened t5-large pair: 38 of
    the encoder's and 58 of the decoder's, 220M weights), and the float32 rules below could not count the blocks."""
    import onnx

    path = Path(path)
    if (path.parent / (path.name + ".data")).exists():
        return 0                 # a graph over 2 GB: the quantizers refuse it (_single_file)
    model = onnx.load(str(path))
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}

    def root(name: str) -> str:
        while name not in weights and name in made_by and made_by[name].op_type == "Identity":
            name = made_by[name].input[0]
        return name

    changed = 0
    for node in graph.node:
        if node.op_type == "MatMul" and len(node.input) == 2 and node.input[1] not in weights:
            weight = root(node.input[1])
            if weight in weights:
                node.input[1] = weight
                changed += 1
    if changed:
        while True:
            used = {name for node in graph.node for name in node.input} | {out.name for out in graph.output}
            dead = [node for node in graph.node if node.op_type == "Identity" and node.output[0] not in used]
            if not dead:
                break
            for node in dead:
                graph.node.remove(node)
        onnx.save(model, str(path))
    return changed


def _weight_matmuls(path: Path) -> tuple[list, dict]:
    """(the MatMul nodes whose second input is a 2-D initializer, in graph order; initializer name -> its dims) of the
    graph at `path`, read without its external data."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    weighted = [n for n in model.graph.node if n.op_type == "MatMul" and len(n.input) == 2
                and len(dims.get(n.input[1], [])) == 2]
    return weighted, dims


def target_float_nodes(path: Path, vocab_size: int, layers: int) -> list[str]:
    """The MatMul nodes of a target decoder (`layers` blocks) that stay float32 in int8: the output projection (the
    constant [d_model, vocab] operand) and, in a decoder of FLOAT_BLOCK_MIN_LAYERS or more blocks, the weight
    MatMuls of the first block (graph order follows the blocks; when their count does not split evenly into `layers`,
    only the output projection is kept).

    Chosen on held-out validation prompts, never the test prompts (models/README.md, "int8 target"): in a simulation
    that reproduces ONNX Runtime's int8 exactly (357/400 on the test prompts, as measured), the first block alone
    carried over half of the squared logit error of the int8 decoder; keeping it in float32 lowered the mean logit
    error per position from 2.11 to 1.39. At t5-large shapes it is 1/24 of the decoder's weight MatMuls."""
    weighted, dims = _weight_matmuls(path)
    head = [n.name for n in weighted if dims[n.input[1]][-1] == vocab_size]
    blocks = [n.name for n in weighted if n.name not in head]
    first = blocks[:len(blocks) // layers] if layers >= FLOAT_BLOCK_MIN_LAYERS and len(blocks) % layers == 0 else []
    return first + head


def encoder_matmuls(path: Path, layers: int) -> tuple[list[list[str]], list[str]]:
    """The weight MatMul nodes of a T5 encoder graph (`layers` blocks), as (blocks, cross): `blocks[i]` the MatMuls
    of encoder block i in graph order (self-attention q, k, v, o, then the feed-forward ones), `cross` the
    cross-attention K/V projections of every decoder layer that follow the encoder's final norm (the target's, then
    a draft's that keeps the target's encoder). The last block ends with its feed-forward output projection, the
    MatMul whose weight has the most rows (d_ff); when the MatMuls before it do not split evenly into `layers`,
    `blocks` is empty."""
    weighted, dims = _weight_matmuls(path)
    if not weighted:
        return [], []
    rows = max(dims[n.input[1]][0] for n in weighted)
    end = max(i for i, n in enumerate(weighted) if dims[n.input[1]][0] == rows) + 1
    names = [n.name for n in weighted]
    body, cross = names[:end], names[end:]
    if layers < 1 or len(body) % layers:
        return [], cross
    per = len(body) // layers
    return [body[i * per:(i + 1) * per] for i in range(layers)], cross


def encoder_float_nodes(path: Path, layers: int) -> list[str]:
    """The MatMul nodes of a target's encoder graph (`layers` blocks) that stay float32 in int8: in an encoder of
    FLOAT_BLOCK_MIN_LAYERS or more blocks, the first block's self-attention value and output projections (its third
    and fourth weight MatMuls: q, k, v, o come first in every block, encoder_matmuls); nothing otherwise, nor when
    the blocks cannot be told apart. Everything else, the cross-attention K/V projections included, is int8.

    Chosen like the decoder's first block (target_float_nodes), on held-out validation prompts, never the test
    prompts (models/README.md, "int8 target"): 400 prompts drawn from the validation split, each candidate an ONNX
    Runtime encoder (the int8 decoder of the export behind it), measured by the mean L2 logit error per position
    along the fp32 greedy path against the fp32 pair. The int8 decoder alone (fp32 encoder) gave 1.379, an encoder
    in int8 whole 1.935: the encoder's own squared error 1.84. Cut per share of the encoder's weights kept float32:
    the first block's v and o (3.6 % of the weights) cut 29 % of it (1.792), 8.0 per share; its attention (q, k, v,
    o: 7.1 %) 32 % (4.5 per share); the cross-attention V (7.1 %) 26 % (3.7); the cross K/V (14.3 %) 37 % (2.6); the
    first block (21.4 %) 36 % (1.7); the last block 3 %, the FFN output projections 2 %. At t5-large shapes (24 blocks)
    the first block's v and o are 0.6 % of the encoder's weights."""
    blocks, _ = encoder_matmuls(path, layers)
    return blocks[0][2:4] if layers >= FLOAT_BLOCK_MIN_LAYERS and blocks else []


def quantize_int8(path: Path, what: str, keep_float=(), weight_range: str = "pairs") -> dict:
    """Replace the graph at `path` (a single-file ONNX model) by its int8 version, leaving the MatMul nodes named in
    `keep_float` in float32, its weights scaled by `weight_range` (weight_scales); a one-line SpecdecError when the
    tool cannot quantize it. Returns requantize_weights' record."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = Path(path)
    _single_file(path, what, "int8")
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        out = Path(scratch) / path.name
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)      # its advice to run pre-processing (shape inference) is for static models
        try:
            quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                             per_channel=True, nodes_to_exclude=list(keep_float),
                             extra_options={"MatMulConstBOnly": True})
        except Exception as err:  # the quantizer raises whatever its passes raise
            raise SpecdecError(f"cannot quantize the {what} graph to int8 ({first_line(err)})",
                               "export it with --dtype fp32 (or --draft-dtype fp32)") from None
        finally:
            root.setLevel(level)
        if not out.is_file():
            raise SpecdecError(f"cannot quantize the {what} graph to int8 (the quantizer wrote nothing)",
                               "export it with --dtype fp32 (or --draft-dtype fp32)")
        import onnx

        model = onnx.load(str(out))
        per_row_activations(model)
        unfused_biases(model)
        record = requantize_weights(model, onnx.load(str(path)), weight_range)
        onnx.save(model, str(path))
    return record


def unfused_biases(model) -> int:
    """Rewrite the Add of a constant bias after an int8 product (MatMulInteger -> Cast -> Mul by the scales -> Add)
    as a two-input Sum, which computes the same; returns the Adds rewritten (the graph is changed in place).

    ONNX Runtime (1.32, CPU) fuses MatMulInteger, its scaling and a following bias Add into MatMulIntegerToFloat;
    with per-row activation scales (per_row_activations) the fused node leaves the bias out (measured on a
    [1, 1500, 512] x [512, 2048] product with a bias: max error 3.5 fused, 0.07 unfused, as with one scale per
    tensor). T5's projections have no biases; where a model's projections have them (an encoder of 6 blocks with
    1,500 positions, measured), the int8 graph came out of the optimizer wrong: mean |error| 0.76 at its output
    against 0.027 as the reference kernels compute it
    (runtime/engine/int8cpu.py). A Sum is not matched by that fusion; the product is then as fast as unfused."""
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    users: dict = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    count = 0
    for node in graph.node:
        if node.op_type != "Add" or len(node.input) != 2:
            continue
        for value, other in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            mul = made_by.get(value)
            cast = made_by.get(mul.input[0]) if mul is not None and mul.op_type == "Mul" else None
            product = made_by.get(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
            if other in constants and product is not None and product.op_type == "MatMulInteger" and \
                    len(users.get(value, [])) == 1:
                node.op_type = "Sum"
                count += 1
                break
    return count


WEIGHT_RANGES = ("pairs", "7bit", "full")


def weight_scales(w: np.ndarray, weight_range: str = "pairs") -> np.ndarray:
    """Per-column scales of float weights `w` [K, N] for symmetric int8 (zero point 0), q = round(w / scale):
    "pairs" (the export's): the largest |w0| + |w1| of neighbouring rows (2j, 2j+1) over 127, so that after rounding
    every pair keeps |q0| + |q1| <= 128 = PAIR_BOUND and no x86 kernel can saturate on it (runtime/engine/int8cpu.py);
    "7bit": max|w| / 64 (onnxruntime's reduce_range: |q| <= 64, the same guarantee for every pair, a bit fewer);
    "full": max|w| / 127 (every 8 bits; pairs up to 254 saturate the avx2 kernel: exports before this rule)."""
    from specdec.runtime.engine.int8cpu import pair_sums

    a = np.abs(w.astype(np.float64))
    if weight_range == "full":
        top = a.max(axis=0) / 127.0
    elif weight_range == "7bit":
        top = a.max(axis=0) / 64.0
    elif weight_range == "pairs":
        top = pair_sums(a).max(axis=0) / 127.0
    else:
        raise ValueError(f"unknown weight range {weight_range!r}: one of {', '.join(WEIGHT_RANGES)}")
    return np.where(top > 0, top, 1.0).astype(np.float32)


def requantize_weights(model, original, weight_range: str = "pairs") -> dict:
    """Quantize again, from the float weights of `original` (the graph before quantize_dynamic), every int8 weight
    of MatMulInteger nodes in `model` with weight_scales' per-column scales, in place; returns the manifest's record
    of it: the rule, and the largest |q0| + |q1| of any weight pair (`max_pair_sum`; at most PAIR_BOUND, 128, no
    CPU saturates)."""
    from onnx import numpy_helper

    from specdec.runtime.engine.int8cpu import PAIR_BOUND, pair_sum

    floats = {t.name: t for t in original.graph.initializer}
    inits = {t.name: t for t in model.graph.initializer}
    largest = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        name = node.input[1]
        base = name[:-len("_quantized")] if name.endswith("_quantized") else None
        scale_name, zero_name = f"{base}_scale", f"{base}_zero_point"
        if base not in floats or scale_name not in inits or zero_name not in inits:
            raise SpecdecError(f"cannot find the float weights of MatMulInteger {node.name} ({name})",
                               "report it with the specdec-export command line; --dtype fp32 exports meanwhile")
        w = numpy_helper.to_array(floats[base]).astype(np.float32)
        scale = weight_scales(w, weight_range)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        for tensor, value in ((inits[name], q), (inits[scale_name], scale),
                              (inits[zero_name], np.zeros(scale.shape, np.int8))):
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
        largest = max(largest, pair_sum(q))
    return {"weight_scales": weight_range, "max_pair_sum": largest, "pair_bound": PAIR_BOUND}


def quantize_weight_only(path: Path, what: str, accuracy_level: int = WO_ACCURACY) -> None:
    """Replace the graph at `path` by its weight-only int8 version (MatMulNBits, see the module's docstring);
    `accuracy_level` 0 computes in fp32 on dequantized weights (the benchmark's int8-wo-fp32 variant)."""
    import onnx

    path = Path(path)
    _single_file(path, what, "int8-wo")
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                       MatMulNBitsQuantizer)
    except ImportError as err:
        raise SpecdecError(f"weight-only int8 (int8-wo) needs onnxruntime's MatMulNBitsQuantizer, which cannot be "
                           f"imported ({err})", 'pip install -e ".[export]" (it brings onnx-ir), or use '
                           "--draft-dtype int8") from None
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    try:
        config = DefaultWeightOnlyQuantConfig(block_size=WO_BLOCK, is_symmetric=True, accuracy_level=accuracy_level,
                                              bits=WO_BITS)
        quant = MatMulNBitsQuantizer(onnx.load(str(path)), bits=WO_BITS, block_size=WO_BLOCK, is_symmetric=True,
                                     accuracy_level=accuracy_level, algo_config=config)
        quant.process()
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
            out = Path(scratch) / path.name
            quant.model.save_model_to_file(str(out), False)
            os.replace(out, path)
    except Exception as err:  # the quantizer raises whatever its passes raise
        raise SpecdecError(f"cannot quantize the {what} graph to int8-wo ({first_line(err)})",
                           "use --draft-dtype int8 or fp32") from None


def per_row_activations(model) -> int:
    """Rewrite every DynamicQuantizeLinear (one scale for the whole activation tensor) as symmetric 8-bit with one
    scale per row (per token): scale = max|x| / 127 over the row's last axis, q = clip(round(x / scale), -127, 127)
    + 128 as uint8 with zero point 128 (uint8 activations x int8 weights is ONNX Runtime's fast MatMulInteger
    path; int8 x int8 measured an order of magnitude slower). A token's quantized activations then depend on that token alone, so a verify run over N tokens
    gives each position exactly the logits one-token steps give (with one scale per tensor they differ by the
    quantization of the other tokens, up to 0.3 on the bundled pair's logits, and speculative output would drift
    from the int8 target's own). Returns the number of nodes rewritten; the graph is changed in place."""
    from onnx import TensorProto, helper

    graph = model.graph
    out, count = [], 0
    zero = helper.make_tensor("specdec_q_zero_point", TensorProto.UINT8, [], [128])
    graph.initializer.extend([zero,
                              helper.make_tensor("specdec_q_127", TensorProto.FLOAT, [], [127.0]),
                              helper.make_tensor("specdec_q_m127", TensorProto.FLOAT, [], [-127.0]),
                              helper.make_tensor("specdec_q_128", TensorProto.FLOAT, [], [128.0]),
                              helper.make_tensor("specdec_q_eps", TensorProto.FLOAT, [], [1e-30])])
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            out.append(node)
            continue
        count += 1
        x, (q, scale, zp) = node.input[0], node.output
        p = f"specdec_q{count}_"
        out += [helper.make_node("Abs", [x], [p + "abs"]),
                helper.make_node("ReduceMax", [p + "abs"], [p + "max"], axes=[-1], keepdims=1),
                helper.make_node("Max", [p + "max", "specdec_q_eps"], [p + "safe"]),
                helper.make_node("Div", [p + "safe", "specdec_q_127"], [scale]),
                helper.make_node("Div", [x, scale], [p + "scaled"]),
                helper.make_node("Round", [p + "scaled"], [p + "round"]),
                helper.make_node("Clip", [p + "round", "specdec_q_m127", "specdec_q_127"], [p + "clip"]),
                helper.make_node("Add", [p + "clip", "specdec_q_128"], [p + "shift"]),
                helper.make_node("Cast", [p + "shift"], [q], to=TensorProto.UINT8),
                helper.make_node("Identity", ["specdec_q_zero_point"], [zp])]
    del graph.node[:]
    graph.node.extend(out)
    return count

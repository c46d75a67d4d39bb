"""int8 weights for an exported graph, through ONNX Runtime's own quantization tooling.

Dynamic quantization (`onnxruntime.quantization.quantize_dynamic`): every MatMul whose second input is a weight
(`MatMulConstBOnly`) becomes DynamicQuantizeLinear + MatMulInteger with int8 weights (per output channel) and its
activations quantized per run; the KV cache, the cross-attention K/V, layer norms, softmax, the attention score
products (activation x activation), the embedding lookup and the speculative head stay float32. The graph's
inputs and outputs keep their names, dtypes and shapes, so the runtime binds an int8 graph exactly like an fp32
one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from specdec.runtime.errors import SpecdecError


def quantize_int8(path: Path, what: str) -> None:
    """Replace the graph at `path` (a single-file ONNX model) by its int8 version; a one-line SpecdecError when the
    tool cannot quantize it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = Path(path)
    if (path.parent / (path.name + ".data")).exists():
        raise SpecdecError(f"cannot quantize the {what} graph to int8: it is larger than 2 GB and keeps its weights "
                           "in an external file", "export it as fp32 or fp16, or quantize a smaller model")
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        out = Path(scratch) / path.name
        try:
            quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                             per_channel=True, extra_options={"MatMulConstBOnly": True})
        except Exception as err:  # the quantizer raises whatever its passes raise
            first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
            raise SpecdecError(f"cannot quantize the {what} graph to int8 ({first})",
                               "export it with --dtype fp32 (or --draft-dtype fp32)") from None
        if not out.is_file():
            raise SpecdecError(f"cannot quantize the {what} graph to int8 (the quantizer wrote nothing)",
                               "export it with --dtype fp32 (or --draft-dtype fp32)")
        os.replace(out, path)

"""The capturable graphs' export side (export/capture.py): the parity check holds them to PyTorch's float64 forward
and catches a wrong one; cross_pad keeps the encoder's K/V and pads with zeros; capture_problems finds what keeps a
graph from being captured."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from specdec.export.capture import capture_problems, export_capture_decoder, export_cross_pad, slots_for
from specdec.export.check import check_parity
from specdec.export.families.t5_decoder import export_decoder
from specdec.export.families.t5_encoder import export_encoder
from tinymodels import tiny_t5_model

GAMMA, CAPACITY = 4, 24


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """A tiny v1.1 model's eager graphs, its capturable decoder, a capturable decoder made from another model (a
    wrong graph the check must refuse), and cross_pad."""
    root = tmp_path_factory.mktemp("capture")
    model = tiny_t5_model(seed=1, v11=True, bias_scale=3.0)
    other = tiny_t5_model(seed=2, v11=True, bias_scale=3.0)
    export_encoder(model, root / "encoder.onnx")
    export_decoder(model, root / "decoder.onnx", tree=True)
    for name, m in (("capture.onnx", model), ("wrong.onnx", other)):
        export_capture_decoder(m, root / name, torch.float32, CAPACITY, CAPACITY, slots_for(CAPACITY, GAMMA))
    export_cross_pad(root / "pad.onnx", torch.float32, CAPACITY)
    return model, root


def test_the_parity_check_covers_the_capturable_graph_and_refuses_a_wrong_one(graphs):
    model, root = graphs
    rep = check_parity(model, root / "encoder.onnx", root / "decoder.onnx", GAMMA, "fp32",
                       capture=(root / "capture.onnx", root / "pad.onnx", CAPACITY))
    assert rep["passed"], rep
    assert max(rep["capture_step_max_abs_diff"], rep["capture_verify_max_abs_diff"]) <= rep["tolerance"]
    assert rep["capture_vs_eager_max_abs_diff"] < 1e-4
    wrong = check_parity(model, root / "encoder.onnx", root / "decoder.onnx", GAMMA, "fp32",
                         capture=(root / "wrong.onnx", root / "pad.onnx", CAPACITY))
    assert not wrong["passed"] and wrong["capture_step_max_abs_diff"] > wrong["tolerance"], wrong


def test_cross_pad_keeps_the_encoders_values_and_pads_with_zeros(graphs):
    _, root = graphs
    session = ort.InferenceSession(str(root / "pad.onnx"), providers=["CPUExecutionProvider"])
    cross = np.random.default_rng(0).standard_normal((2, 2, 1, 3, 7, 8)).astype(np.float32)
    padded = session.run(None, {"cross_kv": cross})[0]
    assert padded.shape == (2, 2, 1, 3, CAPACITY, 8)
    assert np.array_equal(padded[..., :7, :], cross) and not padded[..., 7:, :].any()


def test_capture_problems_names_control_flow_shape_nodes_and_dynamic_inputs():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    offsets = helper.make_tensor_value_info("offsets", TensorProto.INT64, ["new"])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2])
    graph = helper.make_graph([helper.make_node("Shape", ["x"], ["y"], name="s")], "g", [x, offsets], [y])
    problems = capture_problems(helper.make_model(graph))
    assert problems == ["node s is Shape", "input x has a dynamic axis"]       # offsets' N is allowed
    fixed = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [fixed, offsets], [y])
    assert capture_problems(helper.make_model(graph)) == []


def test_capture_problems_names_a_cache_output_not_written_in_place():
    cache = helper.make_tensor_value_info("past_key_0", TensorProto.FLOAT, [1, 2, 4, 3])
    index = helper.make_tensor_value_info("index", TensorProto.INT64, [1, 2, 1, 3])
    new = helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 2, 1, 3])
    out = helper.make_tensor_value_info("present_key_0", TensorProto.FLOAT, [1, 2, 4, 3])
    scatter = helper.make_node("ScatterElements", ["past_key_0", "index", "new"], ["s"], axis=2)
    copied = helper.make_graph([scatter, helper.make_node("Cast", ["s"], ["present_key_0"], to=TensorProto.FLOAT)],
                               "g", [cache, index, new], [out])       # a no-op Cast: a copy of the whole cache
    assert capture_problems(helper.make_model(copied)) == \
        ["output present_key_0 is not its cache input written in place"]
    scatter.output[0] = "present_key_0"
    assert capture_problems(helper.make_model(helper.make_graph([scatter], "g", [cache, index, new], [out]))) == []


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_capturable_decoder_writes_every_cache_in_place_and_passes_the_parity_check(graphs, tmp_path, dtype,
                                                                                      fused):
    """fp32 and fp16, plain and fused attention (one MultiHeadAttention node per attention)."""
    from specdec.export.attention import cast_for_export

    model, root = graphs
    cast = cast_for_export(model, dtype)
    export_capture_decoder(cast, tmp_path / "c.onnx", dtype, CAPACITY, CAPACITY, slots_for(CAPACITY, GAMMA),
                           fused_attention=fused)
    graph = onnx.load(str(tmp_path / "c.onnx"))
    layers = model.config.num_decoder_layers
    assert capture_problems(graph) == []
    assert sum(n.op_type == "ScatterElements" for n in graph.graph.node) == 2 * layers
    assert sum(n.op_type == "MultiHeadAttention" for n in graph.graph.node) == (2 * layers if fused else 0)
    if fused:           # the attention's Softmax and MatMuls are inside the fused nodes
        assert not any(n.op_type == "Softmax" for n in graph.graph.node)
    name = "fp16" if dtype == torch.float16 else "fp32"
    export_encoder(cast, tmp_path / "encoder.onnx")
    export_decoder(cast, tmp_path / "decoder.onnx", dtype, tree=True)
    export_cross_pad(tmp_path / "pad.onnx", dtype, CAPACITY)
    rep = check_parity(model, tmp_path / "encoder.onnx", tmp_path / "decoder.onnx", GAMMA, name,
                       capture=(tmp_path / "c.onnx", tmp_path / "pad.onnx", CAPACITY))
    assert rep["passed"] and rep["capture_vs_eager_max_abs_diff"] <= rep["tolerance"], rep


def test_the_capturable_decoder_declares_fixed_shapes_but_for_n(graphs):
    _, root = graphs
    model = onnx.load(str(root / "capture.onnx"))
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in (*model.graph.input, *model.graph.output)}
    assert shapes["offsets"] == ["new"] and shapes["logits"] == [1, "new", 48]
    assert shapes["tokens"] == [slots_for(CAPACITY, GAMMA)] and shapes["past_key_0"] == [1, 3, CAPACITY, 8]
    assert shapes["present_value_1"] == shapes["past_value_1"] and shapes["cross_key_1"] == [1, 3, CAPACITY, 8]


# onnxruntime 1.18, the oldest pyproject admits, loads IR 10 and older; onnxruntime 1.31, the CUDA 13 build, IR 13 and
# older. The onnx package writes its newest IR into a model it makes (14 with onnx 1.23) unless told otherwise.
OLDEST_RUNTIME_IR = 10


def test_every_graph_of_an_export_loads_on_the_oldest_onnxruntime_admitted(tiny_capture_export):
    """Every graph's IR version is one onnxruntime 1.18 loads: the hand-built ones (cross_pad, capture_head) carry
    their opset's IR like the traced ones, not the onnx package's newest."""
    graphs = sorted(tiny_capture_export.rglob("*.onnx"))
    assert {"cross_pad.onnx", "capture_head.onnx", "capture_decoder.onnx"} <= {p.name for p in graphs}
    too_new = {str(p.relative_to(tiny_capture_export)): ir for p in graphs
               if (ir := onnx.load(str(p), load_external_data=False).ir_version) > OLDEST_RUNTIME_IR}
    assert too_new == {}


def test_a_standalone_graph_carries_its_opsets_ir_version():
    from specdec.export.head import head_only_model

    assert head_only_model(17).ir_version == helper.find_min_ir_version_for([helper.make_opsetid("", 17)]) == 8


def test_a_graph_this_onnxruntime_cannot_load_fails_the_export_in_one_line(tmp_path):
    from specdec.export.check import cpu_session
    from specdec.export.head import head_only_model
    from specdec.runtime.core.errors import SpecdecError

    model = head_only_model(17)
    model.ir_version = 99
    onnx.save(model, str(tmp_path / "head.onnx"))
    with pytest.raises(SpecdecError) as err:
        cpu_session(tmp_path / "head.onnx")
    message = str(err.value)
    assert "\n" not in message and "head.onnx" in message and "Unsupported model IR version: 99" in message
    assert f"onnxruntime {ort.__version__}" in message and "pip install -U onnxruntime" in message

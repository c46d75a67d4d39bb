"""Parity of the exported graphs against the PyTorch checkpoint they came from, on a probe input.

The reference is Hugging Face's own forward pass on the whole decoder sequence (no cache), in float64. The ONNX side
prefills `past` tokens, then runs a 1-token step at that past length and a gamma+1-token verify after it, through
the cache layout the runtime uses."""

from __future__ import annotations

import numpy as np

# The reference is PyTorch's forward in float64. A graph computes in its own precision, so it cannot be closer to
# float64 than PyTorch at that precision is; what a correct graph differs by depends on the model's conditioning
# (T5's activations grow through the layers; a real checkpoint's fp32 forward can be off by 1e-2 in a logit).
# The tolerance is therefore PyTorch's own error at the graph's precision, on the same input, times a margin for
# other kernels and summation orders, plus a small floor relative to the logit scale; see docs/guides/export.md, "The parity check".
FP32_MARGIN = 4.0           # ONNX Runtime fp32 vs float64 / PyTorch fp32 vs float64: 0.6-2.3 measured
FP32_FLOOR = 1e-5           # of the logit scale: a few fp32 roundings of the largest logit
FP16_MARGIN = 2.0           # the fp16 graph keeps more in fp32 than PyTorch's .half(): 0.2-0.6 of its error measured
FP16_FLOOR = 1e-3           # of the logit scale: fp16 keeps 11 significant bits
FP16_PER_FP32 = 2.0 ** 13   # fp16's unit roundoff over fp32's: PyTorch fp16's error when its own forward overflows
INT8_RELATIVE_TOLERANCE = 0.1    # of the logit scale; see docs/guides/int8.md


def tolerance(dtype: str, scale: float, torch_fp32_error: float, torch_fp16_error: float | None = None) -> float:
    """The largest |logit difference| from the float64 reference that a correct graph in `dtype` may show.
    `scale`: max(1, max |reference logit|); the errors: PyTorch's own fp32 (fp16) forward vs float64, same input."""
    if dtype == "fp16":
        own = torch_fp16_error if torch_fp16_error is not None and np.isfinite(torch_fp16_error) \
            else FP16_PER_FP32 * torch_fp32_error
        return FP16_MARGIN * own + FP16_FLOOR * scale
    if dtype in ("int8", "int8-wo"):
        return INT8_RELATIVE_TOLERANCE * scale + FP32_MARGIN * torch_fp32_error
    return FP32_MARGIN * torch_fp32_error + FP32_FLOOR * scale


def torch_references(model, inputs: dict, decoder_ids, dtype: str) -> dict:
    """Hugging Face's forward on the whole sequence in float64 (the reference), float32, and for fp16 exports in
    float16. The float64 pass converts the model in place and back (float32 -> float64 -> float32 is exact), so it
    needs no second copy of the weights."""
    import copy

    import torch

    dec = torch.from_numpy(decoder_ids)

    def forward(m):
        dtype = next(m.parameters()).dtype          # floating inputs (a family's features) in the model's precision
        given = {k: torch.from_numpy(v).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v)
                 for k, v in inputs.items()}
        with torch.no_grad():
            return m(**given, decoder_input_ids=dec).logits.double().numpy()

    refs = {"fp32": forward(model)}
    try:
        refs["fp64"] = forward(model.double())
    finally:
        model.float()
    if dtype == "fp16":
        try:
            refs["fp16"] = forward(copy.deepcopy(model).half())
        except RuntimeError:            # an op without a CPU half kernel: fall back to the roundoff ratio
            refs["fp16"] = None
    return refs


def probe_sequences(config, past: int, gamma: int, seed: int = 0, tokens: int | None = None):
    """A probe's source and decoder ids: random ids the tokenizer makes (below `tokens`, its size; default: every
    row of the model)."""
    rng = np.random.default_rng(seed)
    high = tokens or config.vocab_size
    low = min(3, high - 1)
    source = rng.integers(low, high, size=(1, 12))
    source[0, -1] = config.eos_token_id if config.eos_token_id is not None else 1
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0
    body = rng.integers(low, high, size=(1, past + gamma))
    return source.astype(np.int64), np.concatenate([[[start]], body], axis=1).astype(np.int64)


def cpu_session(path):
    """An onnxruntime session of the graph at `path` on the CPU provider, errors only in its log; a graph this
    onnxruntime cannot load is a one-line error."""
    import onnxruntime as ort

    from specdec.runtime.core.errors import SpecdecError
    from specdec.runtime.engine.device import ort_reason

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types
        raise SpecdecError(f"onnxruntime {ort.__version__} cannot load the exported graph {path}: "
                           f"{ort_reason(err)}", "upgrade onnxruntime (pip install -U onnxruntime), or report the "
                           "export's log if the newest cannot load it either") from None


def cross_feed(session, cross: np.ndarray) -> dict:
    """The cross K/V [L, 2, B, H, S, d] as the decoder `session` takes it: whole (cross_kv) or one array per layer
    and part (cross_key_i, cross_value_i; runtime/core/graph_io.py cross_names)."""
    from specdec.runtime.core.graph_io import CROSS_KV, cross_names

    if CROSS_KV in {i.name for i in session.get_inputs()}:
        return {CROSS_KV: cross}
    return {name: np.ascontiguousarray(cross[i // 2, i % 2]) for i, name in enumerate(cross_names(len(cross)))}


def onnx_logits(encoder_path, decoder_path, source, decoder_ids, steps, cross_output: str | None = None):
    """Run the graphs like the runtime: `steps` = token counts per call, each call appending to the cache.
    `cross_output`: the encoder graph's output to read (a draft that keeps the target's encoder), else its first."""
    from .head import plain_step_feed

    enc, dec = cpu_session(encoder_path), cpu_session(decoder_path)
    cross = enc.run([cross_output or enc.get_outputs()[0].name],
                    {enc.get_inputs()[0].name: source})[0]                  # input_ids, or the family's probe input
    layers, _, batch, heads, _, d_kv = cross.shape
    vocab = dec.get_outputs()[0].shape[-1]
    cache = np.zeros((0, layers, 2, batch, heads, d_kv), dtype=cross.dtype)
    outputs, pos = [], 0
    for n in steps:
        feed = {"input_ids": decoder_ids[:, pos:pos + n], "past_kv": cache, **cross_feed(dec, cross),
                **plain_step_feed(vocab, session=dec, new=n)}
        logits, new_kv = dec.run(["logits", "new_kv"], feed)
        cache = np.concatenate([cache, new_kv])
        outputs.append(logits)
        pos += n
    return outputs


def emulated_logits(encoder_path, decoder_path, source, decoder_ids, steps, cross_output=None) -> dict:
    """{kernel: (step logits, verify logits)}: onnx_logits of the int8 graphs as each CPU kernel computes them
    (export/emulate.py: exact int32 sums as VNNI and ARM64 make them, and int16 pair sums as x86 without VNNI
    makes them), whichever CPU runs the check; `steps` as onnx_logits'. Graphs whose weights no activation can
    saturate (export/emulate.py, saturable) compute the same on both, and run once."""
    import tempfile
    from pathlib import Path

    import onnx

    from specdec.runtime.engine.int8cpu import KERNELS

    from .emulate import all_nodes, emulated, saturable, save

    graphs = {"encoder": onnx.load(str(encoder_path)), "decoder": onnx.load(str(decoder_path))}
    graphs = {kind: model for kind, model in graphs.items()
              if any(n.op_type == "MatMulInteger" for n in all_nodes(model.graph))}
    # weights that no activation can saturate make the avx2 graphs the exact ones: run them once
    kernels = KERNELS if any(saturable(model) for model in graphs.values()) else KERNELS[:1]
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for kernel in kernels:
            paths = {"encoder": encoder_path, "decoder": decoder_path}
            for kind, model in graphs.items():
                paths[kind] = Path(scratch) / f"{kernel}_{kind}.onnx"
                save(emulated(model, kernel), paths[kind])
            _, step, verify = onnx_logits(paths["encoder"], paths["decoder"], source, decoder_ids, steps,
                                          cross_output)
            out[kernel] = (step, verify)
    return {kernel: out.get(kernel, out[KERNELS[0]]) for kernel in KERNELS}


def capture_logits(encoder_path, capture: tuple, source, decoder_ids, steps) -> list:
    """Run a capturable decoder graph (export/capture.py) as the runtime does: the encoder's K/V padded by the
    cross_pad graph, the cache a fixed buffer bound whole as input and output (written in place), `steps` = token
    counts per call. `capture`: (capture_decoder path, cross_pad path, capacity)."""
    from specdec.runtime.core.graph_io import CROSS_PAD_INPUTS, capture_cache_names

    path, pad_path, capacity = capture
    enc, pad, dec = cpu_session(encoder_path), cpu_session(pad_path), cpu_session(path)
    cross = pad.run(None, {CROSS_PAD_INPUTS[0]: enc.run(None, {enc.get_inputs()[0].name: source})[0]})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    vocab = dec.get_outputs()[0].shape[-1]
    slots = dec.get_inputs()[0].shape[0]
    tokens = np.zeros(slots, np.int64)
    tokens[:decoder_ids.shape[1]] = decoder_ids[0]
    cache = np.zeros((layers, 2, 1, heads, capacity, d_kv), cross.dtype)
    past, present, cross_names = capture_cache_names(layers)
    binding = dec.io_binding()

    def bind(kind, name, array):
        getattr(binding, "bind_" + kind)(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)

    for i in range(layers):
        for k in range(2):
            bind("input", past[2 * i + k], cache[i, k])
            bind("output", present[2 * i + k], cache[i, k])
            bind("input", cross_names[2 * i + k], cross[i, k])
    bind("input", "tokens", tokens)
    outputs, pos = [], 0
    for n in steps:
        position, offsets = np.array([pos], np.int64), np.arange(n, dtype=np.int64)
        length = np.array([source.shape[1]], np.int64)
        logits = np.zeros((1, n, vocab), np.float32)
        for name, array in (("position", position), ("offsets", offsets), ("source_length", length)):
            bind("input", name, array)
        bind("output", "logits", logits)
        dec.run_with_iobinding(binding)
        outputs.append(logits)
        pos += n
    return outputs


def check_parity(model, encoder_path, decoder_path, gamma: int, dtype: str, past: int = 5, probe=None,
                 cross_output: str | None = None, tokens: int | None = None, capture: tuple | None = None,
                 columns=None) -> dict:
    """Max |logit difference| from PyTorch's float64 forward for a 1-token step at past length `past` and a
    gamma+1 verify right after it, against `tolerance()` (PyTorch's own error at the graph's precision). `probe`:
    the family's probe inputs (export/families/base.py Family.probe), a function of the probe's source ids that
    returns (the encoder graph's input, PyTorch's forward arguments); None: the ids for both. `tokens`: the
    ids the tokenizer makes (runtime/loading/vocabulary.py): the probe's ids are drawn below it and the logits
    compared on those rows (a padded row no text reaches may score far below the others). `capture`: also the
    model's capturable decoder (capture_logits), held to the same tolerance. `columns`: the ids of a draft's output
    rows (--draft-vocab): the logits are compared there only (elsewhere both are -inf)."""
    source, decoder_ids = probe_sequences(model.config, past, gamma + 1, tokens=tokens)
    source, inputs = (source, {"input_ids": source}) if probe is None else probe(source)
    refs = torch_references(model, inputs, decoder_ids, dtype)
    checked = slice(past, past + gamma + 2)
    ref = refs["fp64"]
    _, step, verify = onnx_logits(encoder_path, decoder_path, source, decoder_ids, [past, 1, gamma + 1], cross_output)
    rows = slice(0, tokens) if columns is None else \
        np.array([c for c in columns if tokens is None or c < tokens], dtype=np.int64)
    ref, step, verify = ref[..., rows], step[..., rows], verify[..., rows]

    def off(step, verify) -> tuple[float, float]:
        """Max |logit difference| from the reference of a step's and a verify run's logits."""
        return (float(np.abs(step - ref[:, past:past + 1]).max()),
                float(np.abs(verify - ref[:, past + 1:past + gamma + 2]).max()))

    step_diff, verify_diff = off(step, verify)

    def own_error(key):
        other = refs.get(key)
        return None if other is None else float(np.abs(other[:, checked][..., rows] - ref[:, checked]).max())

    scale = max(1.0, float(np.abs(ref[:, checked]).max()))
    torch32, torch16 = own_error("fp32"), own_error("fp16")
    tol = tolerance(dtype, scale, torch32, torch16)
    want = ref[0, checked]

    def agreeing(step, verify) -> int:
        """Positions of the step and verify where the argmax is the reference's."""
        return int((np.concatenate([step, verify], axis=1)[0].argmax(-1) == want.argmax(-1)).sum())

    agree = agreeing(step, verify)
    captured = {}
    if capture is not None:
        _, c_step, c_verify = capture_logits(encoder_path, capture, source, decoder_ids, [past, 1, gamma + 1])
        c_step, c_verify = c_step[..., rows], c_verify[..., rows]
        captured = {**dict(zip(("capture_step_max_abs_diff", "capture_verify_max_abs_diff"), off(c_step, c_verify))),
                    "capture_vs_eager_max_abs_diff": float(max(np.abs(c_step - step).max(),
                                                               np.abs(c_verify - verify).max()))}
    kernels = {}
    if dtype == "int8":
        for kernel, (e_step, e_verify) in emulated_logits(encoder_path, decoder_path, source, decoder_ids,
                                                          [past, 1, gamma + 1], cross_output).items():
            e_step, e_verify = e_step[..., rows], e_verify[..., rows]
            kernels[kernel] = {**dict(zip(("step_max_abs_diff", "verify_max_abs_diff"), off(e_step, e_verify))),
                               "argmax_agree": agreeing(e_step, e_verify)}
    passed = step_diff <= tol and verify_diff <= tol and all(
        captured.get(k, 0.0) <= tol for k in ("capture_step_max_abs_diff", "capture_verify_max_abs_diff")) and all(
        k["step_max_abs_diff"] <= tol and k["verify_max_abs_diff"] <= tol for k in kernels.values())
    return {"reference": "pytorch float64", "past_length": past, "step_max_abs_diff": step_diff,
            "verify_tokens": gamma + 1, "verify_max_abs_diff": verify_diff, "tolerance": tol, "weights": dtype,
            "logit_scale": scale, "torch_fp32_max_abs_diff": torch32,
            **({"torch_fp16_max_abs_diff": torch16} if dtype == "fp16" else {}),
            "argmax_agree": agree, "argmax_positions": int(want.shape[0]), "rows_compared": int(want.shape[-1]),
            # past half the logit scale no structural mistake is distinguishable from the precision's own error
            "conclusive": bool(tol < 0.5 * scale), **captured,
            **({"int8_kernels": kernels} if kernels else {}),
            "passed": bool(passed)}

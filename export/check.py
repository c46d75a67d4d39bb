"""Parity of the exported graphs against the PyTorch checkpoint they came from, on a probe input.

The reference is Hugging Face's own T5 forward pass on the whole decoder sequence (no cache). The ONNX side
prefills `past` tokens, then runs a 1-token step at that past length and a gamma+1-token verify after it, through
the cache layout the runtime uses."""

from __future__ import annotations

import numpy as np

FP32_TOLERANCE = 1e-3
FP16_RELATIVE_TOLERANCE = 1e-2   # of the largest |logit|; see README "fp16"
INT8_RELATIVE_TOLERANCE = 0.1    # of the largest |logit|; see README "int8"


def tolerance(dtype: str, reference_logits: np.ndarray) -> float:
    scale = max(1.0, float(np.abs(reference_logits).max()))
    if dtype == "fp16":
        return FP16_RELATIVE_TOLERANCE * scale
    if dtype in ("int8", "int8-wo"):
        return INT8_RELATIVE_TOLERANCE * scale
    return FP32_TOLERANCE


def probe_sequences(config, past: int, gamma: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    low = min(3, config.vocab_size - 1)
    source = rng.integers(low, config.vocab_size, size=(1, 12))
    source[0, -1] = config.eos_token_id if config.eos_token_id is not None else 1
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0
    body = rng.integers(low, config.vocab_size, size=(1, past + gamma))
    return source.astype(np.int64), np.concatenate([[[start]], body], axis=1).astype(np.int64)


def onnx_logits(encoder_path, decoder_path, source, decoder_ids, steps):
    """Run the graphs like the runtime: `steps` = token counts per call, each call appending to the cache."""
    import onnxruntime as ort

    from .head import plain_step_feed

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    enc = ort.InferenceSession(str(encoder_path), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(decoder_path), opts, providers=["CPUExecutionProvider"])
    cross = enc.run(None, {"input_ids": source})[0]
    layers, _, batch, heads, _, d_kv = cross.shape
    vocab = dec.get_outputs()[0].shape[-1]
    cache = np.zeros((0, layers, 2, batch, heads, d_kv), dtype=cross.dtype)
    outputs, pos = [], 0
    for n in steps:
        logits, new_kv = dec.run(["logits", "new_kv"], {"input_ids": decoder_ids[:, pos:pos + n], "past_kv": cache,
                                                        "cross_kv": cross, **plain_step_feed(vocab)})
        cache = np.concatenate([cache, new_kv])
        outputs.append(logits)
        pos += n
    return outputs


def check_parity(model, encoder_path, decoder_path, gamma: int, dtype: str, past: int = 5) -> dict:
    """Max |logit difference| for a 1-token step at past length `past` and a gamma+1 verify right after it."""
    import torch

    source, decoder_ids = probe_sequences(model.config, past, gamma + 1)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(source), decoder_input_ids=torch.from_numpy(decoder_ids)).logits
    ref = ref.float().numpy()
    _, step, verify = onnx_logits(encoder_path, decoder_path, source, decoder_ids, [past, 1, gamma + 1])
    step_diff = float(np.abs(step - ref[:, past:past + 1]).max())
    verify_diff = float(np.abs(verify - ref[:, past + 1:past + gamma + 2]).max())
    tol = tolerance(dtype, ref)
    got = np.concatenate([step, verify], axis=1)[0]
    want = ref[0, past:past + gamma + 2]
    agree = int((got.argmax(-1) == want.argmax(-1)).sum())
    return {"past_length": past, "step_max_abs_diff": step_diff, "verify_tokens": gamma + 1,
            "verify_max_abs_diff": verify_diff, "tolerance": tol, "weights": dtype,
            "argmax_agree": agree, "argmax_positions": int(want.shape[0]),
            "passed": bool(step_diff <= tol and verify_diff <= tol)}

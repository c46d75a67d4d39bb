"""Small tritonclient helpers for the serve tests and the load benchmark's checks: build a request's inputs from
keyword parameters, read a response back as a dict, stream over gRPC; every wait is bounded."""

from __future__ import annotations

import json
import queue
import time

import numpy as np

DTYPES = {"prompt": "BYTES", "draft": "BYTES", "max_new_tokens": "INT64", "gamma": "INT64", "top_k": "INT64",
          "seed": "INT64", "temperature": "FP64", "top_p": "FP64", "audio": "FP32", "timestamps": "BOOL"}
NUMPY = {"BYTES": np.object_, "INT64": np.int64, "FP64": np.float64, "FP32": np.float32, "INT32": np.int32,
         "BOOL": np.bool_}
INT_OUTPUTS = ("new_tokens", "target_calls", "draft_calls", "proposed", "accepted")


def inputs(module, prompt=None, dtypes=None, batched=True, **params) -> list:
    """tritonclient.http or .grpc InferInputs; `dtypes` overrides a Triton dtype (to send a wrong one). batched:
    shape [1, 1], one row for `specdec` (Triton's dynamic batching); else [1], for the stream model. A numpy array
    (audio) is sent as [1, samples] batched, else [samples]."""
    values = dict(params) if prompt is None else {"prompt": prompt, **params}
    out = []
    for name, value in values.items():
        dtype = (dtypes or {}).get(name, DTYPES.get(name, "BYTES"))
        if isinstance(value, np.ndarray):
            array = value.astype(NUMPY[dtype]).reshape(1, -1) if batched else value.astype(NUMPY[dtype])
        else:
            array = np.array([value.encode() if isinstance(value, str) else value], dtype=NUMPY[dtype])
            if batched:
                array = array.reshape(1, 1)
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def as_dict(result) -> dict:
    """One row's outputs (a [1, ...] batched answer or a stream piece); token_ids without the -1 padding; a Whisper
    export's `segments` (segments_json read back)."""
    def one(name):
        return result.as_numpy(name).reshape(-1)

    out = {"text": one("text")[0].decode(), "token_ids": [int(t) for t in one("token_ids") if t >= 0],
           "stop_reason": one("stop_reason")[0].decode(), "error": one("error")[0].decode()}
    out.update({name: int(one(name)[0]) for name in INT_OUTPUTS})
    if result.as_numpy("segments_json") is not None:
        out["segments"] = json.loads(one("segments_json")[0])
    return out


def wait_ready(url: str, timeout_s: float, alive=lambda: True, models=("specdec", "specdec_stream")) -> bool:
    """Poll Triton's readiness endpoints over HTTP until the server and `models` are ready, `alive()` turns false,
    or timeout_s passes. (PyTriton loads its models after the server is up, and the server reports ready with no
    model loaded yet: wait for the models.)"""
    import tritonclient.http as http

    client = http.InferenceServerClient(url)
    end = time.monotonic() + timeout_s
    try:
        while time.monotonic() < end and alive():
            try:
                if client.is_server_ready() and all(client.is_model_ready(m) for m in models):
                    return True
            except Exception:
                pass
            time.sleep(0.25)
        return False
    finally:
        client.close()


def grpc_stream(url: str, model: str, items, timeout_s: float = 60.0) -> list:
    """Send each item's inputs (a list of grpc InferInputs, batched=False) on one gRPC stream, one after the other; returns per
    item the list of responses (as_dict) before the final flag, or the error (an exception) that ended it."""
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    results = []
    try:
        for i, item in enumerate(items):
            client.async_stream_infer(model, item, request_id=f"r{i}", enable_empty_final_response=True)
            pieces, end = [], time.monotonic() + timeout_s
            while True:
                if time.monotonic() > end:
                    raise TimeoutError(f"no final response to stream item {i} within {timeout_s} s")
                result, error = got.get(timeout=max(0.1, end - time.monotonic()))
                if error is not None:
                    results.append(error)
                    break
                if result.get_response().id != f"r{i}":      # a late final flag of an earlier, failed item
                    continue
                if result.get_response().parameters["triton_final_response"].bool_param:
                    results.append(pieces)
                    break
                pieces.append(as_dict(result))
    finally:
        client.stop_stream()
        client.close()
    return results


def grpc_stream_cancelled(url: str, model: str, item, after: int = 1, timeout_s: float = 60.0) -> int:
    """Send one stream request (grpc InferInputs, batched=False), wait for its first `after` pieces, then cancel it
    (tritonclient's stop_stream(cancel_requests=True): the client goes away). Returns the pieces received."""
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    received = 0
    try:
        client.async_stream_infer(model, item, request_id="doomed")
        end = time.monotonic() + timeout_s
        while received < after:
            result, error = got.get(timeout=max(0.1, end - time.monotonic()))
            if error is not None:
                raise AssertionError(f"the stream failed before it was cancelled: {error}")
            received += 1
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    return received

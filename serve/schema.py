"""The served models' request and response: tensor names, dtypes and shapes, and the one place where a request's
tensors become a prompt and a checked Params (so a bad request gets the same one-line SpecdecError as the CLI and
the Python API) and where a Result or Piece becomes output tensors.

Used by the PyTriton binding (server.py) and by the model.py of a stand-alone model repository (repository.py), so
neither imports PyTriton here: only numpy and the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.core.params import PARAMETERS, Params, flag_value
from specdec.runtime.core.stats import STATS

MODEL = "specdec"                 # one request -> one response
STREAM_MODEL = "specdec_stream"   # decoupled: one response per accepted piece, then an empty final one


@dataclass(frozen=True)
class Field:
    name: str
    dtype: type          # numpy type: np.object_ for Triton's BYTES
    shape: tuple         # without a batch dimension (the models do not batch)
    optional: bool = False
    doc: str = ""

    @property
    def triton_type(self) -> str:
        """The config.pbtxt data type (TYPE_STRING for BYTES)."""
        return {np.object_: "TYPE_STRING", np.int64: "TYPE_INT64", np.float64: "TYPE_FP64"}[self.dtype]


# Every input is one value (shape [1]): the prompt, then one optional input per request parameter that its
# declaration (runtime/core/params.py) gives to serve; an absent one takes the runtime's default (Params()): gamma
# and draft "auto", greedy, 64 new tokens. gamma is INT64, so "auto" is spelled by leaving it out; early_stopping is
# text (true, false or never); floats are FP64 so a value means what it means in Python (an FP32 0.7 would be
# 0.699999988).
_DTYPES = {str: np.object_, int: np.int64, float: np.float64}
INPUTS = (Field("prompt", np.object_, (1,), doc="UTF-8 text"),) + tuple(
    Field(declared.name, _DTYPES[declared.kind], (1,), True, declared.doc) for declared in PARAMETERS if declared.serve)

# specdec: the whole output and the request's statistics. specdec_stream: the same names on every response, `text`
# and `token_ids` being that piece's new text and tokens and the statistics those of the request so far;
# stop_reason is "" until the last piece.
OUTPUTS = (
    Field("text", np.object_, (1,), doc="the output text (stream: this piece's new text)"),
    Field("token_ids", np.int64, (-1,), doc="generated token ids (stream: this piece's)"),
    Field("stop_reason", np.object_, (1,), doc='"eos", "max_new_tokens" or "max_length" ("" before the end)'),
    # the request's totals, as declared (runtime/core/stats.py): counts INT64, seconds and ratios FP64
    *(Field(figure.name, np.int64 if figure.unit == "count" else np.float64, (1,), doc=figure.doc)
      for figure in STATS if not figure.group),
    Field("stats_json", np.object_, (1,), doc="Stats.as_dict() as JSON: timings and per-source counts"),
)


def request(get) -> tuple[str, Params]:
    """(prompt, Params) from a request; `get(name)` returns the input's numpy array, or None when it is absent.
    Anything wrong is a one-line SpecdecError naming the input (Params.checked gives the range messages later)."""
    raw = get("prompt")
    if raw is None:
        raise SpecdecError("the request has no 'prompt' input", "send the text as a BYTES tensor named 'prompt'")
    prompt = _text("prompt", raw)
    values = {}
    for field in INPUTS[1:]:
        array = get(field.name)
        if array is None:
            continue
        array = np.asarray(array)
        if array.size != 1:
            raise SpecdecError(f"input {field.name!r} must hold one value (got shape {list(array.shape)})",
                               "send shape [1]")
        if field.dtype is np.object_:
            values[field.name] = flag_value(field.name, _text(field.name, array))
        elif field.dtype is np.int64:
            values[field.name] = int(array.reshape(-1)[0])
        else:
            values[field.name] = float(array.reshape(-1)[0])
    return prompt, Params.of(**values)


def _text(name: str, array) -> str:
    array = np.asarray(array)
    if array.size != 1:
        raise SpecdecError(f"input {name!r} must hold one string (got shape {list(array.shape)})", "send shape [1]")
    value = array.reshape(-1)[0]
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise SpecdecError(f"input {name!r} is not UTF-8 text", "encode the text as UTF-8") from None
    if isinstance(value, str):
        return value
    raise SpecdecError(f"input {name!r} must be BYTES (text), got {np.asarray(array).dtype}")


def response(text: str, token_ids, stats, stop_reason: str) -> dict:
    """Output tensors by name (numpy arrays of the OUTPUTS dtypes and shapes)."""
    figures = stats.figures()
    return {
        "text": np.array([text.encode("utf-8")], dtype=np.object_),
        "token_ids": np.asarray([int(t) for t in token_ids], dtype=np.int64),
        "stop_reason": np.array([stop_reason.encode("utf-8")], dtype=np.object_),
        **{figure.name: np.array([figures[figure.name]], dtype=np.int64 if figure.unit == "count" else np.float64)
           for figure in STATS if not figure.group},
        "stats_json": np.array([json.dumps(stats.as_dict()).encode("utf-8")], dtype=np.object_),
    }


class Handler:
    """One model instance's requests on its own SpeculativeDecoder (a decoder runs one request at a time; an
    instance per decoder lets N requests decode at once)."""

    def __init__(self, decoder):
        self.decoder = decoder

    def generate(self, get) -> dict:
        prompt, params = request(get)
        res = self.decoder.generate(prompt, params=params)
        return response(res.text, res.token_ids, res.stats, res.stop_reason)

    def stream(self, get):
        """Yield one response dict per accepted piece; the last has stop_reason set."""
        prompt, params = request(get)
        for piece in self.decoder.stream(prompt, params=params):
            yield response(piece.text, piece.token_ids, piece.stats, piece.stop_reason)


def load_decoder(engine, threads: int = 0):
    """A SpeculativeDecoder on CPU or the best provider ("auto") with `threads` intra-op threads per model."""
    from specdec.runtime.decoder import SpeculativeDecoder

    return SpeculativeDecoder.load(engine, provider="auto", threads=threads)

"""The served models' request and response: tensor names, dtypes and shapes, and the one place where a request's
tensors become its source (a prompt text, or what an export of another family takes) and a checked Params (so a bad
request gets the same one-line SpecdecError as the CLI and the Python API) and where a Result or Piece becomes output
tensors. The inputs and outputs depend on the export's model family: each family has a serving description
(Serving) in SERVINGS, found by the request keywords the runtime says the family takes (`serving_of(keywords)`, with
specdec.runtime.family_inputs(manifest) or a loaded decoder's decoder.family.inputs). A text export's (TEXT) is
here: it takes `prompt`; another family's is in its own module beside this one, and joins SERVINGS when
specdec.serve is imported.

Used by the PyTriton binding (server.py) and by the model.py of a stand-alone model repository (repository.py), so
neither imports PyTriton here: only numpy and the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.core.options import LoadOptions
from specdec.runtime.core.params import PARAMETERS, Params, flag_value
from specdec.runtime.core.stats import STATS, Stats

MODEL = "specdec"                 # one request -> one response; Triton's dynamic batching: inputs [k, 1]
STREAM_MODEL = "specdec_stream"   # decoupled: one response per accepted piece, then an empty final one; inputs [1]
MAX_BATCH = 16                    # rows a batch decodes at once, and Triton's max_batch_size for MODEL
MAX_QUEUE = 64                    # requests that may wait for a row; past it a request is refused at once ("busy")


@dataclass(frozen=True)
class Field:
    name: str
    dtype: type          # numpy type: np.object_ for Triton's BYTES
    shape: tuple         # without Triton's batch dimension (MODEL's inputs and outputs have one in front)
    optional: bool = False
    doc: str = ""

    @property
    def triton_type(self) -> str:
        """The config.pbtxt data type (TYPE_STRING for BYTES)."""
        return {np.object_: "TYPE_STRING", np.int64: "TYPE_INT64", np.float64: "TYPE_FP64",
                np.float32: "TYPE_FP32", np.bool_: "TYPE_BOOL"}[self.dtype]


# Every input is one value (shape [1]): the prompt, then one optional input per request parameter that its
# declaration (runtime/core/params.py) gives to serve; an absent one takes the runtime's default (Params()): gamma
# and draft "auto", greedy, 64 new tokens. gamma is INT64, so "auto" is spelled by leaving it out; early_stopping is
# text (true, false or never); floats are FP64 so a value means what it means in Python (an FP32 0.7 would be
# 0.699999988).
_DTYPES = {str: np.object_, int: np.int64, float: np.float64}
PARAMETER_INPUTS = tuple(Field(declared.name, _DTYPES[declared.kind], (1,), True, declared.doc)
                         for declared in PARAMETERS if declared.serve)
INPUTS = (Field("prompt", np.object_, (1,), doc="UTF-8 text"),) + PARAMETER_INPUTS


# specdec: the whole output and the request's statistics. specdec_stream: the same names on every response, `text`
# and `token_ids` being that piece's new text and tokens and the statistics those of the request so far;
# stop_reason is "" until the last piece.
OUTPUTS = (
    Field("text", np.object_, (1,), doc="the output text (stream: this piece's new text)"),
    Field("token_ids", np.int64, (-1,), doc="generated token ids (stream: this piece's)"),
    Field("stop_reason", np.object_, (1,),
          doc='"eos", "max_new_tokens", "max_length", "cancelled" or "error: ..." ("" before the end)'),
    # the request's totals, as declared (runtime/core/stats.py): counts INT64, seconds and ratios FP64
    *(Field(figure.name, np.int64 if figure.unit == "count" else np.float64, (1,), doc=figure.doc)
      for figure in STATS if not figure.group),
    Field("stats_json", np.object_, (1,), doc="Stats.as_dict() as JSON: timings and per-source counts"),
    Field("error", np.object_, (1,), doc='"" (the request of a row that failed inside a batch: its one-line error)'),
)


@dataclass(frozen=True)
class Serving:
    """How the exports of one model family are served. keywords: the request keywords the runtime says the family
    takes besides a prompt (specdec.runtime.family_inputs; () for text), which find its description. inputs and
    outputs: the models' Fields (outputs: OUTPUTS and the family's own, each a JSON text named after its response()
    keyword). read(get): a request's source from its tensors (a one-line SpecdecError naming the input when it is
    wrong). given(source): that source as SpeculativeDecoder.submit() keywords. counted: the inputs whose first
    dimension counts the rows of a batched request, the first one sent. extra(output): the family's own outputs of
    a Result or Piece (None: a failed row's) as response() keywords."""
    keywords: tuple
    inputs: tuple
    outputs: tuple
    read: Callable
    given: Callable = lambda source: {"prompt": source}
    counted: tuple = ("prompt",)
    extra: Callable = lambda output: {}


def _prompt(get) -> str:
    raw = get("prompt")
    if raw is None:
        raise SpecdecError("the request has no 'prompt' input", "send the text as a BYTES tensor named 'prompt'")
    return text_value("prompt", raw)


TEXT = Serving(keywords=(), inputs=INPUTS, outputs=OUTPUTS, read=_prompt)

# every family's serving description by its request keywords; another family's joins from its own module
# (serve_family) when specdec.serve is imported
SERVINGS = {TEXT.keywords: TEXT}


def serve_family(serving: Serving) -> None:
    """Add a model family's serving description to SERVINGS."""
    SERVINGS[tuple(serving.keywords)] = serving


def serving_of(keywords) -> Serving:
    """The serving description of the family that takes these request keywords (family_inputs(manifest), or a
    loaded decoder's decoder.family.inputs)."""
    found = SERVINGS.get(tuple(keywords))
    if found is None:
        raise SpecdecError(f"specdec-serve does not serve the model family of this export (its inputs: "
                           f"{', '.join(keywords)})", "serve it from Python with SpeculativeDecoder")
    return found


def rows(get, serving: Serving = TEXT) -> list:
    """The rows of one request of MODEL: Triton's dynamic batching gives every input a first dimension, so a
    request of k rows ([k, 1] tensors; a family's variable-length input [k, n]) is k prompts. Each row is (source,
    Params), or the SpecdecError that says what is wrong with it. A tensor without that dimension (the stream model,
    a stand-alone test) is one row."""
    count = 1
    for name in serving.counted:
        array = get(name)
        if array is not None and np.ndim(array) == 2:
            count = np.shape(array)[0]
            break
    out = []
    for i in range(count):
        def row_get(name, i=i):
            array = get(name)
            if array is None:
                return None
            array = np.asarray(array)
            return array[i] if array.ndim == 2 and array.shape[0] == count else array
        try:
            out.append(request(row_get, serving))
        except SpecdecError as err:
            out.append(err)
    return out


def request(get, serving: Serving = TEXT) -> tuple:
    """(source, Params) from a request; `get(name)` returns the input's numpy array, or None when it is absent. The
    source is the prompt text, or what the family of `serving` reads. Anything wrong is a one-line SpecdecError
    naming the input (Params.checked and the decoder's own checks of the input give the range messages later)."""
    source = serving.read(get)
    values = {}
    for field in PARAMETER_INPUTS:
        array = get(field.name)
        if array is None:
            continue
        array = np.asarray(array)
        if array.size != 1:
            raise SpecdecError(f"input {field.name!r} must hold one value (got shape {list(array.shape)})",
                               "send shape [1]")
        if field.dtype is np.object_:
            values[field.name] = flag_value(field.name, text_value(field.name, array))
        elif field.dtype is np.int64:
            values[field.name] = int(array.reshape(-1)[0])
        else:
            values[field.name] = float(array.reshape(-1)[0])
    return source, Params.of(**values)


def text_value(name: str, array) -> str:
    """A BYTES input's one UTF-8 text (a one-line SpecdecError naming the input otherwise)."""
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


def response(text: str, token_ids, stats, stop_reason: str, error: str = "", **extra) -> dict:
    """Output tensors by name (numpy arrays of the OUTPUTS dtypes and shapes). extra: a family's own outputs
    (Serving.extra), each a value that becomes one JSON text named `<keyword>_json` (like stats_json: a row of a
    batch has one value whatever its length)."""
    figures = stats.figures()
    out = {
        "text": np.array([text.encode("utf-8")], dtype=np.object_),
        "token_ids": np.asarray([int(t) for t in token_ids], dtype=np.int64),
        "stop_reason": np.array([stop_reason.encode("utf-8")], dtype=np.object_),
        **{figure.name: np.array([figures[figure.name]], dtype=np.int64 if figure.unit == "count" else np.float64)
           for figure in STATS if not figure.group},
        "stats_json": np.array([json.dumps(stats.as_dict()).encode("utf-8")], dtype=np.object_),
        "error": np.array([error.encode("utf-8")], dtype=np.object_),
    }
    for name, value in extra.items():
        out[f"{name}_json"] = np.array([json.dumps(value, ensure_ascii=False).encode("utf-8")], dtype=np.object_)
    return out


def failed(error: SpecdecError, serving: Serving = TEXT) -> dict:
    """The response of a row that failed inside a batch whose other rows did not: no tokens, stop_reason "error",
    and the one-line message in `error` (with the family's own outputs, empty)."""
    return response("", [], Stats(), "error", str(error), **serving.extra(None))


def stacked(responses: list) -> dict:
    """One request's rows' responses as MODEL's batched outputs: every tensor gets the row dimension in front;
    token_ids is padded with -1 to the longest row."""
    out = {}
    for name in responses[0]:
        values = [r[name] for r in responses]
        if name == "token_ids":
            width = max(len(v) for v in values)
            values = [np.concatenate([v, np.full(width - len(v), -1, np.int64)]) for v in values]
        out[name] = np.stack(values)
    return out


class Handler:
    """Every request of a server on one SpeculativeDecoder. The requests a batch can run join its batcher
    (runtime/scheduling/batcher.py: continuous batching, at most `max_batch` rows, `max_queue` waiting, past which a
    request is refused at once with "the batcher is busy"); the others (a draft model, beam search, logits
    processors, lenience < 1, every request of an export whose family a batch does not run, every request of a
    decoder loaded with graph_capture) run alone on the same decoder between batches. The inputs and outputs are
    those of the decoder's family (`serving`)."""

    def __init__(self, decoder, max_batch: int = MAX_BATCH, max_queue: int = MAX_QUEUE):
        self.decoder = decoder
        self.serving = serving_of(decoder.family.inputs)
        self.inputs, self.outputs = self.serving.inputs, self.serving.outputs
        self.batcher = decoder.batcher(max_batch, max_queue)

    def _submit(self, source, params: Params):
        """The request's ticket (runtime/scheduling/batcher.py): a row of the batch, or a request that runs alone."""
        return self.batcher.submit(params=params, **self.serving.given(source))

    def generate_rows(self, requests: list) -> list:
        """Rows from rows() ((source, Params) pairs or SpecdecErrors) -> their response dicts or SpecdecErrors, in
        order. Every row joins the batch before any is waited for, so they share its rounds."""
        started = []
        for row in requests:
            try:
                if isinstance(row, SpecdecError):
                    raise row
                started.append(self._submit(*row))
            except SpecdecError as err:
                started.append(err)
        out = []
        for ticket in started:
            if isinstance(ticket, SpecdecError):
                out.append(ticket)
                continue
            try:
                res = ticket.result()
            except SpecdecError as err:
                out.append(err)
                continue
            out.append(response(res.text, res.token_ids, res.stats, res.stop_reason, **self.serving.extra(res)))
        return out

    def stream(self, get):
        """Yield one response dict per accepted piece; the last has stop_reason set. Closing the generator before
        its end cancels the request: a batched one's row is freed at the next round, one that runs alone ends and
        gives the decoder back. A request that runs alone holds the decoder's gate, which belongs to the thread
        that took it: advance and close the generator from one thread.

        Every response carries the family's own outputs of its piece (Serving.extra)."""
        source, params = request(get, self.serving)
        ticket = self._submit(source, params)
        try:
            for piece in ticket:
                yield response(piece.text, piece.token_ids, piece.stats, piece.stop_reason,
                               **self.serving.extra(piece))
        finally:
            ticket.cancel()              # a no-op once it has ended

    def close(self) -> None:
        self.batcher.close()


def batch_answers(handler: Handler, requests: list) -> list:
    """MODEL's answer to one Triton batch: `requests` are getters, one per request (each of k rows). Returns per
    request (outputs, error): its stacked output dict, in which a failed row has failed()'s response, and the
    SpecdecError when every row of the request failed (else None). A Python backend answers such a request with
    the error; PyTriton cannot fail one request of a batch, so it raises only when every request failed."""
    per_request = [rows(get, handler.serving) for get in requests]
    flat = handler.generate_rows([row for group in per_request for row in group])
    answers, at = [], 0
    for group in per_request:
        outs, at = flat[at:at + len(group)], at + len(group)
        errors = [out for out in outs if isinstance(out, SpecdecError)]
        answers.append((stacked([failed(out, handler.serving) if isinstance(out, SpecdecError) else out
                                 for out in outs]),
                        errors[0] if len(errors) == len(outs) else None))
    return answers


def load_options(options: LoadOptions | None = None, **keywords) -> LoadOptions:
    """The load options of a server's decoder: `options` and/or keywords, only those serve takes (its flags and its
    config's parameters; runtime/core/options.py declares them), checked (a one-line SpecdecError)."""
    return LoadOptions.of(options, "serve", **keywords).checked()


def config_options(parameters: dict) -> LoadOptions:
    """The load options a written model repository's config.pbtxt holds: its parameters, as text, under the names of
    the options serve takes (others are serve's own, or the export's path); a value that is not one is a one-line
    SpecdecError."""
    return load_options(LoadOptions.from_config(parameters, "serve", "config.pbtxt"))


def load_decoder(engine, options: LoadOptions | None = None, **keywords):
    """A SpeculativeDecoder of the export `engine` with serve's load options, `options` and/or keywords (with
    graph_capture every request then runs alone, none in a batch)."""
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(engine, load_options(options, **keywords))

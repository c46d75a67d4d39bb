"""The export's graph inputs and outputs, by name: what specdec-export writes (export/), what the loader checks
(runtime/loading/manifest.py, validate.py) and what the engine binds (runtime/engine/) are these names."""

import math

ENCODER_INPUTS = ("input_ids",)
ENCODER_OUTPUTS = ("cross_kv",)                 # every layer's cross-attention K/V, computed once per request

DECODER_INPUTS = ("input_ids", "past_kv", "cross_kv")
DECODER_OUTPUTS = ("logits", "new_kv")
INPUT_IDS, PAST_KV, CROSS_KV = DECODER_INPUTS
LOGITS, NEW_KV = DECODER_OUTPUTS
# every decoder: the cache positions and encoder positions each batch row owns, int64 [B] (or [1]); both
# default to -1 (overridable initializers: "all of past_kv", "all of cross_kv"), so a caller of one length binds
# neither. A batch of rows of different lengths binds both (export/tracing.py).
ROW_INPUTS = ("row_lengths", "source_lengths")          # new_kv is bound in place, after past_kv in the one cache buffer
# the speculative head fused into every decoder graph: sample or verify inside the run
HEAD_INPUTS = ("draft_probs", "uniforms", "temperature", "top_k", "top_p", "lenience", "logit_mask")
HEAD_OUTPUTS = ("probs", "accepted", "next_token")
DRAFT_PROBS, UNIFORMS, TEMPERATURE, TOP_K, TOP_P, LENIENCE, LOGIT_MASK = HEAD_INPUTS
PROBS, ACCEPTED, NEXT_TOKEN = HEAD_OUTPUTS
# a request's sampling parameters among the head's inputs, one value per batch row (or one for every row), and their
# dtypes; Params (core/params.py) has a field of each name
SAMPLING = {TEMPERATURE: "float32", TOP_K: "int64", TOP_P: "float32", LENIENCE: "float32"}
# the head works on every batch row; guess_counts int64 [B] (or [1]) is each row's number of real guesses
# among the G columns (default -1: all G), an overridable initializer like ROW_INPUTS (export/head.py)
GUESS_COUNTS = "guess_counts"
STEPS = "steps"                                 # a draft decoder's trip count: its k steps in one run
# the TARGET decoder only: verify a token tree in one run. tree_depth int64 [new] (new token i sits at
# position past + tree_depth[i]) and tree_mask bool [new, new] (token i sees new token j iff tree_mask[i, j]: j is i
# or an ancestor) go to the decoder (export/tracing.py); tree_uniforms fp32 [M] -> draws int64 [M], one draw per
# row of `probs`, go to the head (export/head.py). A chain run binds arange(new), the lower triangle, [0] and [0].
TREE_INPUTS = ("tree_depth", "tree_mask", "tree_uniforms")
TREE_OUTPUTS = ("draws",)


def cross_names(layers: int) -> list:
    """A decoder's cross K/V as one input per layer and part (cross_key_0, cross_value_0, ...: [B, H, S, d] each),
    in place of cross_kv: the runtime binds them as views of the one cross K/V buffer the encoder wrote, so a step
    reads each layer's K and V where they lie (a decoder that takes cross_kv slices it, which copies all of it every
    run: 37 MB a step for Whisper's 1,500 encoder positions). Whisper decoders take these; T5 decoders cross_kv."""
    return [f"cross_{part}_{i}" for i in range(layers) for part in ("key", "value")]


def bind_cross(binder, buf, shape) -> None:
    """Bind the cross K/V `buf` of `shape` (layers, 2, B, H, S, d) to a decoder: whole as cross_kv, or as the views
    cross_names gives, whichever the graph takes."""
    if CROSS_KV in binder.names:
        binder.input(CROSS_KV, buf, shape)
        return
    block = math.prod(int(d) for d in shape[2:])
    for i, name in enumerate(cross_names(int(shape[0]))):
        binder.input(name, buf, tuple(shape[2:]), i * block)


def shared_cross(role: str) -> str:
    """A target encoder's output with the cross K/V of draft `role`, which keeps the target's encoder (no encoder
    graph of its own): its own decoder layers' projections of the same encoder output."""
    return f"{ENCODER_OUTPUTS[0]}_{role}"

# the graphs CUDA can capture (specdec-export --graph-capture, export/capture.py): per model a decoder step over
# fixed-size buffers, bound whole run after run. tokens int64 [T] (the whole token buffer), position int64 [1] (the
# cache length: the run's tokens are tokens[position + offsets]), offsets int64 [N] (0 .. N-1), source_length int64
# [1]; then each layer's cache (past_key_i, past_value_i [1, H, C, d], written in place as present_key_i,
# present_value_i) and cross K/V (cross_key_i, cross_value_i [1, H, S, d]) -> logits fp32 [1, N, V]
CAPTURE_INPUTS = ("tokens", "position", "offsets", "source_length")
CAPTURE_OUTPUTS = ("logits",)
CAPTURE_GRAPHS = ("capture_decoder", "capture_head")     # a model's graphs entries; the head: HEAD_* over logits
CROSS_PAD = "cross_pad"                                  # the manifest's graph_capture entry: cross_kv padded to S
CROSS_PAD_INPUTS, CROSS_PAD_OUTPUTS = ("cross_kv",), ("cross_kv_padded",)     # the cross_pad graph's


def capture_cache_names(layers: int) -> tuple:
    """(past, present, cross) input and output names of a capture_decoder graph, key then value per layer."""
    def names(kind):
        return [f"{kind}_{part}_{i}" for i in range(layers) for part in ("key", "value")]
    return names("past"), names("present"), names("cross")

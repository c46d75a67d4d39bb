"""The keys of an export's manifest.json, declared once: each entry's keys with their JSON type, whether the runtime
needs them, and the limits an untrusted manifest is held to.

The writer (export/manifest.py) builds every entry through `build`, so it cannot write a key that is not declared
here or leave out one the runtime needs; the validator (validate.py) takes its ranges and required names from these
tables; the reader (manifest.py) reads the names declared here. A key's `limits` are an integer's (low, high), both
included, or a string's allowed values. `required` means the runtime refuses a manifest without the key (the
writer always writes those); the others are optional for the runtime, whether or not the writer always writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT = "specdec-export"
FORMAT_VERSION = 7
MANIFEST = "manifest.json"
ROLES = ("target", "draft")      # the models every export has; further drafts are named freely


@dataclass(frozen=True)
class Key:
    name: str
    type: type | tuple        # the value's JSON type as Python reads it: dict, list, str, int, bool
    required: bool = False    # the runtime refuses a manifest without it
    limits: tuple | None = None   # an integer's (low, high), or a string's allowed values
    nullable: bool = False    # null is a value (its meaning is the entry's)


def _table(*keys: Key) -> dict:
    return {key.name: key for key in keys}


# the top level, in the order the writer writes it
TOP = _table(
    Key("format", str, required=True, limits=(FORMAT,)),
    Key("format_version", int, required=True),
    Key("specdec_version", str),
    Key("created", str),                             # ISO 8601, UTC
    Key("gamma_max", int, required=True, limits=(1, 128)),
    Key("max_length", int, required=True, limits=(3, 1 << 16)),
    Key("dtype", str, required=True, limits=("fp32", "fp16")),     # the KV cache's and activations' dtype
    Key("vocab_size", int, required=True, limits=(1, 1 << 21)),    # the model's rows (vocabulary.py)
    Key("special_ids", dict, required=True),         # SPECIAL_IDS
    Key("tokenizer", str, required=True),            # a path among `files`
    Key("datastore", str),                           # a path among `files` (runtime/loading/datastore.py)
    Key("speech", dict),                             # SPEECH: a speech family's audio, prompt and suppressed tokens
    Key("graph_capture", dict),                      # GRAPH_CAPTURE (export/capture.py)
    Key("models", dict, required=True),              # role -> MODEL
    Key("head", dict),                               # the speculative head's candidates, inputs and outputs
    Key("parity_check", dict),                       # role -> the parity report (export/check.py), or {"skipped"}
    Key("files", dict, required=True),               # relative path -> sha256 of every other file
)

SPECIAL_IDS = _table(
    Key("pad_token_id", int, nullable=True),
    Key("eos_token_id", int, required=True),
    Key("unk_token_id", int, nullable=True),
    Key("decoder_start_token_id", int, required=True),
)

MODEL = _table(
    Key("source", str, required=True),               # the checkpoint as given (hub id or directory)
    Key("revision", str, nullable=True),             # the hub commit, or null for a local directory
    Key("architecture", dict, required=True),        # ARCHITECTURE
    Key("weights", str, limits=("fp32", "fp16", "int8", "int8-wo")),
    Key("quantization", dict),                       # stage -> how its graph was quantized (export/quantize.py)
    Key("graphs", dict, required=True),              # kind -> GRAPH: encoder (absent: keeps the target's), decoder,
    #                                                  capture_decoder, capture_head
)

# the runtime sizes its buffers from the required sizes; the rest tells which variant a model is (its family's)
ARCHITECTURE = _table(
    Key("model_type", str),
    Key("variant", str),
    Key("feed_forward_proj", str),
    Key("scale_decoder_outputs", bool),
    Key("layers", int, limits=(1, 256)),
    Key("decoder_layers", int, required=True, limits=(1, 256)),
    Key("heads", int, required=True, limits=(1, 1024)),
    Key("d_kv", int, required=True, limits=(1, 4096)),
    Key("d_model", int, limits=(1, 1 << 16)),
    Key("d_ff", int, limits=(1, 1 << 20)),
    Key("vocab_size", int),                          # when present, the export's vocab_size
    Key("relative_attention_num_buckets", int),
    Key("relative_attention_max_distance", int),
    Key("num_mel_bins", int),
    Key("source_positions", int),
    Key("target_positions", int),
)

GRAPH = _table(
    Key("file", str, required=True),                 # a path among `files`, in a model folder
    Key("inputs", list, required=True),              # TENSOR entries
    Key("outputs", list, required=True),
)

TENSOR = _table(
    Key("name", str, required=True),
    Key("dtype", str, required=True),                # numpy's name: float32, float16, int64, int32, bool
    Key("shape", list, required=True),               # ints, or names of dynamic axes
)

GRAPH_CAPTURE = _table(
    Key("cross_pad", dict, required=True),           # GRAPH
    Key("cache_capacity", int, required=True, limits=(1, 1 << 20)),
    Key("source_capacity", int, required=True, limits=(1, 1 << 20)),
    Key("token_slots", int, required=True, limits=(1, 1 << 20)),
    Key("attention", str, limits=("plain", "fused")),     # absent: plain
)

SPEECH = _table(
    Key("sampling_rate", int, required=True, limits=(8_000, 48_000)),
    Key("n_samples", int, required=True, limits=(1, 1 << 24)),
    Key("frames", int, required=True, limits=(1, 1 << 16)),
    Key("languages", dict, required=True),           # language token -> id
    Key("tasks", dict, required=True),               # task -> id
    Key("no_timestamps_token_id", int, required=True, nullable=True),
    Key("timestamps", dict, nullable=True),          # {"begin", "count"}; absent or null: none
    Key("suppress_tokens", list, required=True),
    Key("begin_suppress_tokens", list, required=True),
    Key("encoder_sha256", dict),                     # role -> the encoder's digest
    Key("shares_target_encoder", list, required=True),    # the drafts whose encoder graph is the target's
)


def numbers(table: dict, required: bool | None = None) -> dict:
    """name -> (low, high) of the table's integer keys with limits, in declared order; `required`: only those that
    are (True) or are not (False)."""
    return {k.name: k.limits for k in table.values() if k.type is int and k.limits
            and (required is None or k.required == required)}


def required(table: dict) -> tuple:
    """The names of the table's required keys, in declared order."""
    return tuple(k.name for k in table.values() if k.required)


def choices(table: dict, name: str) -> tuple:
    """The allowed values of a string key."""
    return table[name].limits


def build(table: dict, what: str, **values) -> dict:
    """An entry of `table` with `values`, in the order given: a ValueError (the writer's mistake, never the user's)
    for a key the table does not declare, a required key left out, or a value of another JSON type. `what` names the
    entry in the message. The limits are the validator's: an export whose numbers are out of range is written, and
    refused by the runtime with its one-line error."""
    undeclared = [name for name in values if name not in table]
    if undeclared:
        raise ValueError(f"{what}: {undeclared[0]!r} is not a declared manifest key (runtime/loading/schema.py)")
    missing = [name for name in required(table) if name not in values]
    if missing:
        raise ValueError(f"{what}: the required manifest key {missing[0]!r} is missing")
    for name, value in values.items():
        key = table[name]
        if value is None and key.nullable:
            continue
        types = key.type if isinstance(key.type, tuple) else (key.type,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"{what}: {name} is {type(value).__name__}, not "
                             f"{' or '.join(t.__name__ for t in types)}")
    return dict(values)

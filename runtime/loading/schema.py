"""The keys of an export's manifest.json, declared once: each entry's keys with their JSON type, whether the runtime
needs them, and the limits an untrusted manifest is held to.

The writer (export/manifest.py) builds every entry through `build`, so it cannot write a key that is not declared
here or leave out one the runtime needs; the validator (validate.py) takes its ranges and required names from these
tables; the reader (manifest.py) reads the names declared here. A key's `limits` are an integer's (low, high), both
included, or a string's allowed values. `required` means the runtime refuses a manifest without the key (the
writer always writes those); the others are optional for the runtime, whether or not the writer always writes them.
How a table is declared, built and read (Key, table, build, numbers, required, choices) is keys.py's. A model
family's own top-level entry is declared and checked in that family's module, named in FAMILY_ENTRIES.
"""

from __future__ import annotations

from . import audio
from .keys import Key, build, choices, numbers, required, table  # noqa: F401 (how a table is declared and read)

FORMAT = "specdec-export"
FORMAT_VERSION = 7
MANIFEST = "manifest.json"
ROLES = ("target", "draft")      # the target, which every export has, then its default draft, if it has one; further
#                                 drafts are named freely
REQUIRED_ROLES = ("target",)     # a target-only export (specdec-export --target alone) decodes with the lookup
# a model family's own top-level entry -> the family's module, which declares the entry's table and checks it
# (check_entry); the manifest has the entry of its models' family, if that family has one
FAMILY_ENTRIES = {"speech": audio}


# the top level, in the order the writer writes it
TOP = table(
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
    *(Key(name, dict) for name in FAMILY_ENTRIES),   # a model family's own entry, declared in its module
    Key("graph_capture", dict),                      # GRAPH_CAPTURE (export/capture.py)
    Key("models", dict, required=True),              # role -> MODEL
    Key("head", dict),                               # the speculative head's candidates, inputs and outputs
    Key("parity_check", dict),                       # role -> the parity report (export/check.py), or {"skipped"}
    Key("files", dict, required=True),               # relative path -> sha256 of every other file
)

SPECIAL_IDS = table(
    Key("pad_token_id", int, nullable=True),
    Key("eos_token_id", int, required=True),
    Key("unk_token_id", int, nullable=True),
    Key("decoder_start_token_id", int, required=True),
)

MODEL = table(
    Key("source", str, required=True),               # the checkpoint as given (hub id or directory)
    Key("revision", str, nullable=True),             # the hub commit, or null for a local directory
    Key("architecture", dict, required=True),        # ARCHITECTURE
    Key("weights", str, limits=("fp32", "fp16", "int8", "int8-wo")),
    Key("quantization", dict),                       # stage -> how its graph was quantized (export/quantize.py)
    Key("vocabulary", dict),                         # a draft's output rows (--draft-vocab): rows, ids, the text
    #                                                  counted (export/draft_vocab.py); the graph holds them, the
    #                                                  runtime does not read it
    Key("graphs", dict, required=True),              # kind -> GRAPH: encoder (absent: keeps the target's), decoder,
    #                                                  capture_decoder, capture_head
)

# the runtime sizes its buffers from the required sizes; the rest tells which variant a model is (its family's)
ARCHITECTURE = table(
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

GRAPH = table(
    Key("file", str, required=True),                 # a path among `files`, in a model folder
    Key("inputs", list, required=True),              # TENSOR entries
    Key("outputs", list, required=True),
)

TENSOR = table(
    Key("name", str, required=True),
    Key("dtype", str, required=True),                # numpy's name: float32, float16, int64, int32, bool
    Key("shape", list, required=True),               # ints, or names of dynamic axes
)

GRAPH_CAPTURE = table(
    Key("cross_pad", dict, required=True),           # GRAPH
    Key("cache_capacity", int, required=True, limits=(1, 1 << 20)),
    Key("source_capacity", int, required=True, limits=(1, 1 << 20)),
    Key("token_slots", int, required=True, limits=(1, 1 << 20)),
    Key("attention", str, limits=("plain", "fused")),     # absent: plain
)

"""The manifest's validator: sanity limits on an export's manifest.json, checked before any file it names is opened.

The sha256 entries only prove that the files match the manifest, not that the manifest is sane, so before the
runtime sizes a buffer or opens a graph from it, `check_manifest` checks:
  - structure: every entry the runtime reads has its JSON type (objects, lists, strings, integers -- not floats or
    booleans);
  - counts: files, models, graph inputs/outputs, tensor ranks, name lengths (MAX_* below and in keys.py);
  - numbers: gamma_max, max_length, vocab_size and the architecture's sizes in plausible ranges (NUMBERS, ARCH), and
    the buffers they make the runtime allocate within MAX_BUFFER_BYTES and this machine's memory;
  - ids: every special token id inside the vocabulary;
  - agreement: the tensors the runtime sizes from the architecture (the K/V caches, cross-attention K/V, logits,
    the head's rows) have the dtypes and the fixed dimensions that the declared architecture, dtype and vocabulary
    give them (EXPECTED);
  - paths: every path is a plain relative one (confine.lexical_problem); graphs and the tokenizer are among the
    checksummed `files`; graphs sit in a model folder (the TensorRT engine cache is made beside that folder, so a
    graph at the top would put it outside the export).
(manifest.json's own size, MAX_MANIFEST_BYTES, is checked when it is read.) Each problem is one SpecdecError line
naming manifest.json, the entry and the fix. Whether the graph files agree with these entries is graphcheck.py's
part, once their checksums are verified. The keys, their required names and ranges are declared in schema.py; a
model family's own entry is declared and checked by its module (schema.FAMILY_ENTRIES).
"""

from __future__ import annotations

import math
import os
import re

from ..core.errors import SpecdecError
from ..core.graph_io import (ACCEPTED, CROSS_KV, DRAFT_PROBS, GUESS_COUNTS, INPUT_IDS, LOGIT_MASK, LOGITS, NEW_KV,
                             NEXT_TOKEN, PAST_KV, PROBS, ROW_INPUTS, SAMPLING, STEPS, TREE_INPUTS, TREE_OUTPUTS,
                             UNIFORMS, CAPTURE_INPUTS, CROSS_PAD, capture_cache_names, cross_names,
                             shared_cross)
from . import schema
from .confine import FIX as PATH_FIX, lexical_problem, shown
from .keys import MAX_MODELS, array, fail, integer, member, obj, string

ROW_LENGTHS, SOURCE_LENGTHS = ROW_INPUTS
TREE_DEPTH, TREE_MASK, TREE_UNIFORMS = TREE_INPUTS
(DRAWS,) = TREE_OUTPUTS

MAX_MANIFEST_BYTES = 4 << 20
MAX_FILES = 256
MAX_TENSORS = 4 * 256 + 16  # inputs, or outputs, of one graph (a capturable decoder has 4 per decoder layer)
MAX_RANK = 8
MAX_BUFFER_BYTES = 1 << 36  # the buffers the runtime allocates from these numbers (64 GiB), before the weights

NUMBERS = schema.numbers(schema.TOP, required=True)     # gamma_max, max_length, vocab_size
ARCH = schema.numbers(schema.ARCHITECTURE, required=True)             # sized from: decoder_layers, heads, d_kv
ARCH_OPTIONAL = schema.numbers(schema.ARCHITECTURE, required=False)   # checked when present: layers, d_model, d_ff
KV_DTYPES = {name: {"fp32": "float32", "fp16": "float16"}[name] for name in schema.choices(schema.TOP, "dtype")}
_MODEL_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_SHA256 = re.compile(r"[0-9a-f]{64}")

# graph -> tensor -> (dtype, shape): "kv" is the export's K/V dtype; L, H, D, V the architecture's decoder layers,
# heads, d_kv and the vocabulary; None a dynamic axis (any name or number); an int a fixed size. Required tensors are
# marked "!", the others are checked when the graph has them (manifest.py checks that the head is there).
EXPECTED = {
    "encoder": {"inputs": {"!0": ("source", (None, None)),    # the first input and output; source: int64 ids, or
                           #                                       the dtype a family's entry gives
                           SOURCE_LENGTHS: ("int64", (None,))},  # a batch's padded sources in one run
                "outputs": {"!0": ("kv", ("L", 2, None, "H", None, "D"))}},
    "decoder": {"inputs": {"!" + INPUT_IDS: ("int64", (None, None)),
                           "!" + PAST_KV: ("kv", (None, "L", 2, None, "H", "D")),
                           "!" + CROSS_KV: ("kv", ("L", 2, None, "H", None, "D")),
                           DRAFT_PROBS: ("float32", None), UNIFORMS: ("float32", None),
                           **{name: (dtype, None) for name, dtype in SAMPLING.items()},
                           LOGIT_MASK: ("float32", None), STEPS: ("int64", (1,)),
                           TREE_DEPTH: ("int64", (None,)), TREE_MASK: ("bool", (None, None)),
                           TREE_UNIFORMS: ("float32", (None,)), ROW_LENGTHS: ("int64", (None,)),
                           SOURCE_LENGTHS: ("int64", (None,)), GUESS_COUNTS: ("int64", (None,))},
                "outputs": {"!" + LOGITS: ("float32", (None, None, "V")),
                            "!" + NEW_KV: ("kv", (None, "L", 2, None, "H", "D")),
                            PROBS: ("float32", None), ACCEPTED: ("int64", None),
                            NEXT_TOKEN: ("int64", None), DRAWS: ("int64", (None,))}},
}
# the speculative head alone over a capturable decoder's logits (export/capture.py), and the cross_pad graph
EXPECTED["capture_head"] = {"inputs": {"!" + INPUT_IDS: ("int64", (None, None)),
                                       "!" + LOGITS: ("float32", (None, None, None)),
                                       **{k: v for k, v in EXPECTED["decoder"]["inputs"].items()
                                          if k.lstrip("!") not in (INPUT_IDS, PAST_KV, CROSS_KV, STEPS)}},
                            "outputs": {"!" + PROBS: ("float32", None), "!" + ACCEPTED: ("int64", None),
                                        "!" + NEXT_TOKEN: ("int64", None)}}
CAPTURE_NUMBERS = schema.numbers(schema.GRAPH_CAPTURE)     # cache_capacity, source_capacity, token_slots
VOCAB_LAST = (DRAFT_PROBS, PROBS, LOGIT_MASK)     # their last axis, when fixed, is the vocabulary

def _path(where, value, what: str, files: dict) -> str:
    problem = lexical_problem(value)
    if problem is not None:
        raise SpecdecError(f"{where} is malformed: {what} {shown(value)} {problem}", PATH_FIX)
    if value not in files:
        fail(where, f"{what} {shown(value)} is not among the checksummed 'files'")
    return value


def check_manifest(raw, where: str) -> None:
    """Everything above, for the parsed manifest.json `raw` (`where` names it in messages)."""
    raw = obj(where, raw, "the manifest")
    numbers = {name: integer(where, member(where, raw, name, "the manifest"), name, *limits)
               for name, limits in NUMBERS.items()}
    if numbers["max_length"] < numbers["gamma_max"] + 2:
        fail(where, f"max_length {numbers['max_length']} leaves no room for gamma_max {numbers['gamma_max']} + 1 "
             "verify tokens")
    vocab = numbers["vocab_size"]
    dtype = member(where, raw, "dtype", "the manifest")
    if not isinstance(dtype, str) or dtype not in KV_DTYPES:
        fail(where, f"dtype is {shown(dtype)}, not one of {', '.join(KV_DTYPES)}")
    ids = obj(where, member(where, raw, "special_ids", "the manifest"), "special_ids")
    if len(ids) > 32:
        fail(where, f"special_ids has {len(ids)} entries (at most 32)")
    needed = sorted(schema.required(schema.SPECIAL_IDS))        # decoder_start_token_id, eos_token_id
    for name in needed:
        member(where, ids, name, "special_ids")
    for name, value in ids.items():
        if value is not None or name in needed:
            integer(where, value, f"special_ids {shown(name, 40)}", 0, vocab - 1)

    files = obj(where, member(where, raw, "files", "the manifest"), "files")
    if not 1 <= len(files) <= MAX_FILES:
        fail(where, f"files has {len(files)} entries (1..{MAX_FILES})")
    for rel, digest in files.items():
        _path(where, rel, "the 'files' entry", {rel})
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            fail(where, f"the sha256 of {shown(rel)} is {shown(digest, 40)}, not 64 lower-case hex digits")
    _path(where, member(where, raw, "tokenizer", "the manifest"), "tokenizer", files)
    if raw.get("datastore") is not None:
        _path(where, raw["datastore"], "datastore", files)

    models = obj(where, member(where, raw, "models", "the manifest"), "models")
    if len(models) > MAX_MODELS:
        fail(where, f"models has {len(models)} entries (at most {MAX_MODELS})")
    for role in schema.REQUIRED_ROLES:
        member(where, models, role, "models")
    gamma = numbers["gamma_max"]
    sizes = {role: _architecture(where, role, model, vocab) for role, model in models.items()}
    # a model family's own entry, checked by its module: the dtype of the encoder's first input (`source`: int64 ids
    # unless the entry gives another) and the drafts that keep the target's encoder (no encoder graph: the target's
    # gives their K/V too)
    source, shared = "int64", []
    for name, family in schema.FAMILY_ENTRIES.items():
        found = family.check_entry(where, raw.get(name), vocab, models)
        if found is not None:
            source, shared = found
    # what the runtime allocates per model (runtime/engine/model.py): the cache and the cross-attention K/V, max_length
    # positions each, and logits rows; and the workspace's rows (runtime/engine/workspace.py): a lower bound
    itemsize = 2 if dtype == "fp16" else 4
    needed = sum(2 * numbers["max_length"] * math.prod(s.values()) * 2 * itemsize + (gamma + 2) * vocab * 4 * 2
                 for s in sizes.values()) + 4 * (gamma + 1) * vocab * 4
    memory = _physical_memory()
    limit = min(MAX_BUFFER_BYTES, memory) if memory else MAX_BUFFER_BYTES
    if needed > limit:
        fail(where, f"its sizes (max_length {numbers['max_length']}, vocab_size {vocab}, gamma_max {gamma} and the "
             f"models' layers, heads and d_kv) need {needed / 2**30:.1f} GiB of buffers, more than "
             + (f"this machine's {memory / 2**30:.1f} GiB of memory" if limit == memory else
                f"the {MAX_BUFFER_BYTES >> 30} GiB any export may ask for"))
    capture = _capture(where, raw, numbers)
    for role, model in models.items():
        graphs = obj(where, member(where, model, "graphs", f"model {role}"), f"model {role} graphs")
        dims = {"L": sizes[role]["decoder_layers"], "H": sizes[role]["heads"], "D": sizes[role]["d_kv"], "V": vocab,
                "kv": KV_DTYPES[dtype], "source": source}
        for kind in ("encoder", "decoder"):
            if kind == "encoder" and role in shared:
                if kind in graphs:
                    fail(where, f"model {role} keeps the target's encoder but lists an encoder graph of its own")
                continue
            expected = EXPECTED[kind]
            if kind == "decoder" and _per_layer_cross(graphs.get(kind)):
                expected = _per_layer_expected(sizes[role]["decoder_layers"])
            if kind == "encoder" and role == "target":
                expected = {side: dict(tensors) for side, tensors in expected.items()}
                for other in shared:
                    s = sizes[other]
                    expected["outputs"][f"!{shared_cross(other)}"] = (
                        "kv", (s["decoder_layers"], 2, None, s["heads"], None, s["d_kv"]))
            _check_graph(where, f"the {role} {kind} graph", member(where, graphs, kind, f"model {role} graphs"),
                         expected, dims, files)
        if capture is not None:
            for kind in ("capture_decoder", "capture_head"):
                expected = EXPECTED[kind] if kind == "capture_head" else \
                    _capture_expected(sizes[role]["decoder_layers"], capture)
                _check_graph(where, f"the {role} {kind} graph", member(where, graphs, kind, f"model {role} graphs"),
                             expected, dims, files)
        elif any(kind in graphs for kind in ("capture_decoder", "capture_head")):
            fail(where, f"model {role} lists capturable graphs but the manifest has no graph_capture entry")
    if capture is not None:
        dims = {"kv": KV_DTYPES[dtype]}
        _check_graph(where, "the cross_pad graph", capture[CROSS_PAD],
                     {"inputs": {"!0": ("kv", (None, 2, None, None, None, None))},
                      "outputs": {"!0": ("kv", (None, 2, None, None, capture["source_capacity"], None))}},
                     dims, files)


def _per_layer_cross(entry) -> bool:
    """A decoder graph entry that lists cross_key_0 among its inputs: its cross K/V come one input per layer and part
    (graph_io.cross_names) instead of cross_kv. A malformed entry is left to _check_graph to name."""
    try:
        return any(t.get("name") == cross_names(1)[0] for t in entry["inputs"])
    except (TypeError, KeyError, AttributeError):
        return False


def _per_layer_expected(layers: int) -> dict:
    """EXPECTED's decoder with the cross K/V one input per layer and part: each [B, H, S, d], every one required."""
    inputs = {k: v for k, v in EXPECTED["decoder"]["inputs"].items() if k.lstrip("!") != CROSS_KV}
    inputs.update({"!" + name: ("kv", (None, "H", None, "D")) for name in cross_names(layers)})
    return {"inputs": inputs, "outputs": EXPECTED["decoder"]["outputs"]}


def _capture(where, raw, numbers: dict) -> dict | None:
    """The graph_capture entry (export/capture.py) or None: capacities the runtime's buffers have (the cache and the
    cross K/V hold max_length positions, the token buffer max_length + gamma_max + 4 slots)."""
    entry = raw.get("graph_capture")
    if entry is None:
        return None
    entry = obj(where, entry, "graph_capture")
    want = {"cache_capacity": numbers["max_length"], "source_capacity": numbers["max_length"],
            "token_slots": numbers["max_length"] + numbers["gamma_max"] + 4}
    for name, limits in CAPTURE_NUMBERS.items():
        value = integer(where, member(where, entry, name, "graph_capture"), f"graph_capture {name}", *limits)
        if value != want[name]:
            fail(where, f"graph_capture {name} is {value}, but this export's runtime buffers have {want[name]}")
    member(where, entry, CROSS_PAD, "graph_capture")
    if entry.get("attention", "plain") not in schema.choices(schema.GRAPH_CAPTURE, "attention"):
        fail(where, f"graph_capture attention is {shown(entry.get('attention'))}, not "
             f"{' or '.join(schema.choices(schema.GRAPH_CAPTURE, 'attention'))}")
    return entry


def _capture_expected(layers: int, capture: dict) -> dict:
    """A capturable decoder's tensors: fixed shapes but for N (offsets, logits)."""
    past, present, cross = capture_cache_names(layers)
    tokens, position, offsets, source_length = CAPTURE_INPUTS
    cache = ("kv", (1, "H", capture["cache_capacity"], "D"))
    inputs = {"!" + tokens: ("int64", (capture["token_slots"],)), "!" + position: ("int64", (1,)),
              "!" + offsets: ("int64", (None,)), "!" + source_length: ("int64", (1,)),
              **{"!" + name: cache for name in past},
              **{"!" + name: ("kv", (1, "H", capture["source_capacity"], "D")) for name in cross}}
    outputs = {"!" + LOGITS: ("float32", (1, None, "V")), **{"!" + name: cache for name in present}}
    return {"inputs": inputs, "outputs": outputs}


def _architecture(where, role, model, vocab: int) -> dict:
    """The sizes (ARCH) a model's buffers are made from, each checked; ARCH_OPTIONAL and vocab_size too."""
    if not isinstance(role, str) or not _MODEL_NAME.fullmatch(role):
        fail(where, f"model name {shown(role)} is not a short lower-case name")
    model = obj(where, model, f"model {role}")
    arch = obj(where, member(where, model, "architecture", f"model {role}"), f"model {role} architecture")
    sizes = {name: integer(where, member(where, arch, name, f"model {role} architecture"),
                           f"model {role} architecture {name}", *limits) for name, limits in ARCH.items()}
    for name, limits in ARCH_OPTIONAL.items():
        if name in arch:
            integer(where, arch[name], f"model {role} architecture {name}", *limits)
    if "vocab_size" in arch and arch["vocab_size"] != vocab:
        fail(where, f"model {role} architecture vocab_size {shown(arch['vocab_size'], 40)} differs from the "
             f"export's vocab_size {vocab}")
    return sizes


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_graph(where, what: str, entry, expected: dict, dims: dict, files: dict) -> None:
    entry = obj(where, entry, what)
    file = _path(where, member(where, entry, "file", what), f"{what}'s file", files)
    if "/" not in file:         # the TensorRT engine cache goes next to the graph's folder (runtime/engine/device.py)
        fail(where, f"{what}'s file {shown(file)} is not in a model folder (NAME/FILE.onnx, as specdec-export "
             "writes it)")
    for side in ("inputs", "outputs"):
        tensors = array(where, member(where, entry, side, what), f"{what}'s {side}", MAX_TENSORS)
        seen = {}
        for i, tensor in enumerate(tensors):
            tensor = obj(where, tensor, f"{what}'s {side} entry {i}")
            name = string(where, member(where, tensor, "name", f"{what}'s {side} entry {i}"),
                          f"{what}'s {side} entry {i} name")
            if name in seen:
                fail(where, f"{what} lists {side[:-1]} {shown(name)} twice")
            label = f"{what}'s {side[:-1]} {shown(name)}"
            tensor_dtype = string(where, member(where, tensor, "dtype", label), f"{label} dtype", 16)
            shape = array(where, member(where, tensor, "shape", label), f"{label} shape", MAX_RANK)
            for dim in shape:
                if isinstance(dim, str):
                    string(where, dim, f"{label} axis name")
                else:
                    integer(where, dim, f"{label} axis", 0, 1 << 31)
            seen[name] = (tensor_dtype, tuple(shape))
        if not seen and any(key.startswith("!") for key in expected[side]):
            fail(where, f"{what} has no {side}")
        for key, (want_dtype, want_shape) in expected[side].items():
            name = key.lstrip("!")
            if name.isdigit():                   # by position: the encoder's first input and output
                name = list(seen)[int(name)]
            if name not in seen:
                if key.startswith("!"):
                    fail(where, f"{what} has no {side[:-1]} {shown(name)}")
                continue
            got_dtype, got_shape = seen[name]
            want_dtype = dims.get(want_dtype, want_dtype)
            if got_dtype != want_dtype:
                fail(where, f"{what}'s {side[:-1]} {shown(name)} is {shown(got_dtype)}, but the runtime binds "
                     f"{want_dtype} there")
            if want_shape is not None:
                want = tuple(dims.get(d, d) if isinstance(d, str) else d for d in want_shape)
                if len(got_shape) != len(want) or any(w is not None and g != w for g, w in zip(got_shape, want)):
                    fail(where, f"{what}'s {side[:-1]} {shown(name)} has shape {shown(list(got_shape))}, but the "
                         f"declared architecture gives {_shape_text(want)}")
            if name in VOCAB_LAST and got_shape and isinstance(got_shape[-1], int) and got_shape[-1] != dims["V"]:
                fail(where, f"{what}'s {side[:-1]} {shown(name)} has a last axis of {got_shape[-1]}, not the "
                     f"vocabulary's {dims['V']}")


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"

"""The export directory's manifest.json: what the exporter writes and what the runtime trusts after checking.

Layout of an export directory (format_version 3):
    manifest.json                  this file's content, below
    tokenizer.json                 the shared tokenizer (tokenizers library format)
    target/encoder.onnx            source ids -> cross-attention K/V of every decoder layer
    target/decoder.onnx            N new tokens + KV cache + the speculative head's inputs -> logits, the new
                                   tokens' K/V, standardized rows, accepted count, next token (export/head.py)
    draft/encoder.onnx, draft/decoder.onnx     the same graphs for the draft
    NAME/encoder.onnx, NAME/decoder.onnx       the same for every further draft model (specdec-export --draft
                                               NAME=CHECKPOINT), usable as a chain level

Format 1 (round 1) had separate sampler graphs (sampler/*.onnx) and decoders without the head; format 2's head took
batch 1 only and had no `logit_mask` input (logits processors, beam search). Both are refused with a message to
re-export.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecdecError

FORMAT = "specdec-export"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
ROLES = ("target", "draft")
HEAD_INPUTS = ("draft_probs", "uniforms", "temperature", "top_k", "top_p", "lenience", "logit_mask")
HEAD_OUTPUTS = ("probs", "accepted", "next_token")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str            # numpy dtype name: float32, float16, int64
    shape: tuple          # ints, or strings for dynamic axes


@dataclass(frozen=True)
class Graph:
    file: str
    inputs: dict          # name -> Tensor
    outputs: dict

    @staticmethod
    def from_json(entry: dict) -> "Graph":
        def tensors(items):
            return {t["name"]: Tensor(t["name"], t["dtype"], tuple(t["shape"])) for t in items}
        return Graph(entry["file"], tensors(entry["inputs"]), tensors(entry["outputs"]))


@dataclass(frozen=True)
class ModelInfo:
    source: str
    revision: str | None
    arch: dict            # layers, decoder_layers, heads, d_kv, d_model, d_ff, vocab_size, variant, ...
    encoder: Graph
    decoder: Graph


@dataclass(frozen=True)
class Manifest:
    root: Path
    raw: dict
    models: dict          # role -> ModelInfo

    gamma_max = property(lambda self: int(self.raw["gamma_max"]))
    max_length = property(lambda self: int(self.raw["max_length"]))
    dtype = property(lambda self: self.raw["dtype"])
    vocab_size = property(lambda self: int(self.raw["vocab_size"]))
    special_ids = property(lambda self: dict(self.raw["special_ids"]))
    files = property(lambda self: dict(self.raw["files"]))
    drafts = property(lambda self: [role for role in self.models if role != "target"])

    def path(self, relative: str) -> Path:
        return self.root / relative


def load_manifest(root: str | Path, verify_checksums: bool = True) -> Manifest:
    """Read and check an export directory; any problem is a one-line SpecdecError naming the fix."""
    root = Path(root)
    fix = "re-run specdec-export into a fresh directory (with --force to overwrite)"
    try:
        return _load(root, fix, verify_checksums)
    except OSError as err:      # unreadable files, a path too long for the file system, ...
        raise SpecdecError(f"cannot read export directory '{root}' ({err.strerror or type(err).__name__})",
                           "check the path and its permissions") from None


def _load(root: Path, fix: str, verify_checksums: bool) -> Manifest:
    if not root.is_dir():
        raise SpecdecError(f"export directory '{root}' does not exist", "run specdec-export --out DIR first")
    path = root / MANIFEST
    if not path.is_file():
        raise SpecdecError(f"'{root}' has no {MANIFEST}: not an export directory, or an unfinished export", fix)
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecdecError(f"{path} is unreadable or corrupt ({type(err).__name__})", fix) from None
    if raw.get("format") != FORMAT:
        raise SpecdecError(f"{path} is not a specdec manifest", fix)
    if raw.get("format_version") != FORMAT_VERSION:
        raise SpecdecError(f"{root} is an export of format version {raw.get('format_version')}, this specdec reads "
                           f"format {FORMAT_VERSION} (decoder heads that take logits masks and beams)",
                           "re-export it with this version: specdec-export --target ... --draft ... --out DIR")
    try:
        models = {role: ModelInfo(m["source"], m.get("revision"), m["architecture"],
                                  Graph.from_json(m["graphs"]["encoder"]), Graph.from_json(m["graphs"]["decoder"]))
                  for role, m in ((r, raw["models"][r]) for r in (*ROLES, *sorted(set(raw["models"]) - set(ROLES))))}
        files = raw["files"]
        int(raw["gamma_max"]), int(raw["max_length"]), int(raw["vocab_size"])
        raw["special_ids"]["decoder_start_token_id"], raw["special_ids"]["eos_token_id"]
    except (KeyError, TypeError, ValueError) as err:
        raise SpecdecError(f"{path} is missing or has a malformed entry ({err})", fix) from None
    for role, info in models.items():
        missing = [n for n in (*HEAD_INPUTS, *HEAD_OUTPUTS) if n not in info.decoder.inputs and
                   n not in info.decoder.outputs]
        if missing:
            raise SpecdecError(f"{path}: the {role} decoder has no speculative head ({missing[0]} is missing)", fix)
    for rel, digest in files.items():
        file = root / rel
        if not file.is_file():
            raise SpecdecError(f"export file '{rel}' is missing from '{root}'", fix)
        if verify_checksums and sha256_file(file) != digest:
            raise SpecdecError(f"export file '{rel}' does not match its sha256 in {MANIFEST} (modified or corrupt)",
                               fix)
    return Manifest(root, raw, models)

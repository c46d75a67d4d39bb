"""The export directory's manifest.json: what the exporter writes and what the runtime trusts after checking.

Layout of an export directory (format_version 7):
    manifest.json                  this file's content, below
    tokenizer.json                 the shared tokenizer (tokenizers library format)
    target/encoder.onnx            source ids -> cross-attention K/V of every decoder layer
    target/decoder.onnx            N new tokens + KV cache + the speculative head's inputs -> logits, the new
                                   tokens' K/V, standardized rows, accepted count, next token (export/head.py);
                                   also the tree inputs (graph_io.TREE_INPUTS: tree_depth [N], tree_mask [N, N],
                                   tree_uniforms [M]) and output (draws [M]): the N tokens may be a token tree,
                                   each at its depth, attending to its ancestors, verified in one run; and
                                   (every decoder) graph_io.ROW_INPUTS and GUESS_COUNTS, which let one run serve
                                   a batch of sequences of different lengths, the head working on every row
    draft/encoder.onnx, draft/decoder.onnx     the same graphs for the draft; its decoder also takes `steps` and
                                               then runs a whole proposal of k tokens in one run, after verifying
                                               a lower chain level's guesses when given (export/loop.py)
    NAME/encoder.onnx, NAME/decoder.onnx       the same for every further draft model (specdec-export --draft
                                               NAME=CHECKPOINT), usable as a chain level

The manifest's keys are declared in schema.py; validate.py checks them. An export of an earlier format is refused
with a message to re-export (CHANGELOG.md says what each format added).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..core.errors import SpecdecError
from ..core.graph_io import (CAPTURE_GRAPHS, GUESS_COUNTS, HEAD_INPUTS, HEAD_OUTPUTS, ROW_INPUTS, STEPS, TREE_INPUTS,
                             TREE_OUTPUTS)
from .confine import inside
from .graphcheck import check_graph_files
from .schema import FORMAT, FORMAT_VERSION, MANIFEST, ROLES  # noqa: F401 (the format's names, declared in schema.py)
from .validate import MAX_MANIFEST_BYTES, check_manifest
from .vocabulary import Vocabulary, tokenizer_size


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
    encoder: Graph | None     # None: a draft that keeps the target's encoder (its graph gives our K/V)
    decoder: Graph
    weights: str = "fp32"  # fp32, fp16, int8 or int8-wo
    capture: dict | None = None   # "capture_decoder", "capture_head" -> Graph (specdec-export --graph-capture)


@dataclass(frozen=True)
class Manifest:
    root: Path
    raw: dict
    models: dict          # role -> ModelInfo

    gamma_max = property(lambda self: int(self.raw["gamma_max"]))
    max_length = property(lambda self: int(self.raw["max_length"]))
    dtype = property(lambda self: self.raw["dtype"])
    vocab_size = property(lambda self: int(self.raw["vocab_size"]))      # the model's rows (vocabulary.py)
    special_ids = property(lambda self: dict(self.raw["special_ids"]))
    files = property(lambda self: dict(self.raw["files"]))
    drafts = property(lambda self: [role for role in self.models if role != "target"])
    # a model family's own entry (schema.FAMILY_ENTRIES: declared and checked in its module); None for other families
    speech = property(lambda self: self.raw.get("speech"))
    # an encoder that reads a fixed window of float samples: (its frames, its samples); None for token ids
    encoder_window = property(lambda self: (int(self.speech["frames"]), int(self.speech["n_samples"]))
                              if self.speech else None)
    # the capturable graphs' entry (export/capture.py): capacities and the cross_pad graph; None without them
    graph_capture = property(lambda self: self.raw.get("graph_capture"))

    @cached_property
    def cross_pad(self) -> Graph | None:
        """The cross_pad graph of an export with capturable graphs, else None."""
        entry = self.graph_capture
        return None if entry is None else Graph.from_json(entry["cross_pad"])

    def path(self, relative: str) -> Path:
        """The resolved path of a file the manifest names: a SpecdecError unless it stays inside the export
        directory after resolving symlinks (confine.py). Checked again on every call, so a symlink swapped in after
        loading is caught when the file is opened."""
        return inside(self.root, relative, "the manifest's path")

    def datastore(self, path=None):
        """The export's datastore (runtime/loading/datastore.py), or the file `path`, opened and checked against this
        export's tokenizer; None when `path` is None and the export has none."""
        from .datastore import Datastore

        expected = self.vocabulary.tokenizer_size, self.files[self.raw["tokenizer"]]
        if path is None:
            rel = self.raw.get("datastore")
            if rel is None:
                return None
            return Datastore.open(self.path(rel), *expected,
                                  "re-run specdec-export into a fresh directory (with --force to overwrite)")
        return Datastore.open(path, *expected)

    def tokenizer(self):
        """The export's tokenizers.Tokenizer, checked (tokenfile.py): a bad file is a one-line SpecdecError. Read
        once; later calls return the same object."""
        return self._tokenizer

    @cached_property
    def _tokenizer(self):
        from .tokenfile import load_tokenizer

        return load_tokenizer(self)

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """The model's rows and the ids its tokenizer makes (vocabulary.py); reads the tokenizer."""
        return Vocabulary(self.vocab_size, tokenizer_size(self.tokenizer()))


def load_manifest(root: str | Path, verify_checksums: bool = True) -> Manifest:
    """Read and check an export directory; any problem is a one-line SpecdecError naming the fix.

    The directory is not trusted: manifest.json is size-limited and sanity-checked (validate.py), every path it names
    must stay inside the directory (confine.py), and the graph files must agree with it and keep their external
    data inside (graphcheck.py), all before any graph is opened. `verify_checksums=False` skips only the sha256s."""
    root = Path(root)
    fix = "re-run specdec-export into a fresh directory (with --force to overwrite)"
    try:
        return _load(root, fix, verify_checksums)
    except OSError as err:      # unreadable files, a path too long for the file system, ...
        raise SpecdecError(f"cannot read export directory '{root}' ({err.strerror or type(err).__name__})",
                           "check the path and its permissions") from None


def _load(root: Path, fix: str, verify_checksums: bool) -> Manifest:
    if not root.is_dir():
        raise SpecdecError(f"export directory '{root}' does not exist", "run specdec-export --export DIR first")
    path = inside(root, MANIFEST, "the manifest")
    if not path.is_file():
        raise SpecdecError(f"'{root}' has no {MANIFEST}: not an export directory, or an unfinished export", fix)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise SpecdecError(f"{path} is larger than {MAX_MANIFEST_BYTES >> 20} MiB: not a specdec manifest", fix)
        raw = json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:    # ValueError: JSONDecodeError too
        raise SpecdecError(f"{path} is unreadable or corrupt ({type(err).__name__})", fix) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SpecdecError(f"{path} is not a specdec manifest", fix)
    if raw.get("format_version") != FORMAT_VERSION:
        raise SpecdecError(f"{root} is an export of format version {raw.get('format_version')}, this specdec reads "
                           f"format {FORMAT_VERSION} (one run decodes a batch of requests of different lengths)",
                           "re-export it with this version: specdec-export --target ... --draft ... --export DIR")
    check_manifest(raw, str(path))      # structure, counts, numbers, ids, paths: the entries read below are sane
    try:
        models = {role: ModelInfo(m["source"], m.get("revision"), m["architecture"],
                                  Graph.from_json(m["graphs"]["encoder"]) if "encoder" in m["graphs"] else None,
                                  Graph.from_json(m["graphs"]["decoder"]),
                                  str(m.get("weights", "fp32")),
                                  {kind: Graph.from_json(m["graphs"][kind]) for kind in CAPTURE_GRAPHS}
                                  if "capture_decoder" in m["graphs"] else None)
                  for role, m in ((r, raw["models"][r]) for r in (*(r for r in ROLES if r in raw["models"]),
                                                                   *sorted(set(raw["models"]) - set(ROLES))))}
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
        unbatched = [n for n in (*ROW_INPUTS, GUESS_COUNTS) if n not in info.decoder.inputs]
        if unbatched:
            raise SpecdecError(f"{path}: the {role} decoder cannot run a batch of different lengths ({unbatched[0]} "
                               "is missing)", fix)
        if role != "target" and STEPS not in info.decoder.inputs:
            raise SpecdecError(f"{path}: the {role} decoder has no proposal loop (input 'steps' is missing)", fix)
        # the target verifies token trees; a draft's graph has none of their tensors (nothing would bind them)
        odd = [n for n in (*TREE_INPUTS, *TREE_OUTPUTS)
               if (n in info.decoder.inputs or n in info.decoder.outputs) != (role == "target")]
        if odd and role == "target":
            raise SpecdecError(f"{path}: the target decoder cannot verify a token tree ({odd[0]} is missing)", fix)
        if odd:
            raise SpecdecError(f"{path}: the {role} decoder has {odd[0]}, a tensor of the target's alone", fix)
    for rel, digest in files.items():
        file = inside(root, rel, "the 'files' entry")
        if not file.is_file():
            if file.exists():       # a folder, a FIFO (reading it would block), a device
                raise SpecdecError(f"export file '{rel}' in '{root}' is not a regular file", fix)
            raise SpecdecError(f"export file '{rel}' is missing from '{root}'", fix)
        if verify_checksums and sha256_file(file) != digest:
            raise SpecdecError(f"export file '{rel}' does not match its sha256 in {MANIFEST} (modified or corrupt)",
                               fix)
    manifest = Manifest(root, raw, models)
    check_graph_files(manifest)
    return manifest

"""Drafts distilled for one Whisper target and shipped in models/ (models/whisper_draft.py trains them): the
target's fingerprint, the shipped draft that matches a target, and the draft's checkpoint made from both.

A shipped draft is a folder of models/ holding `draft.json` (format "specdec-whisper-draft": the fingerprint of the
target it was distilled for, the target's decoder layers it keeps) and `draft.safetensors` (its own tensors: those
decoder layers and the final norm, float16). Everything else (the encoder, the token and position embeddings, the
tokenizer and the feature extractor) is the target's, so the draft's checkpoint is made from the target at export
(`checkpoint`), into a cache beside the CTranslate2 conversions, and its encoder graph is the target's.

A fingerprint is the sha256 of the model's tensors (names and values rounded to float16, in name order): a
CTranslate2 / faster-whisper folder (float16) and the float32 checkpoint it was converted from have the same one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from specdec.models.whisper_draft import FORMAT, RECORD, TENSORS, fingerprint
from specdec.runtime.core.errors import SpecdecError

MARK = "specdec_draft.json"           # in a made checkpoint: {"name", "target_fingerprint"}


def shipped(root: Path | None = None) -> list:
    """(folder, record) of each shipped draft under models/ (or `root`), by folder name."""
    if root is None:
        import specdec.models

        root = Path(specdec.models.__file__).parent
    found = []
    for record in sorted(Path(root).glob(f"*/{RECORD}")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("format") == FORMAT and (record.parent / TENSORS).is_file():
            found.append((record.parent, data))
    return found


def of_shape(config, root: Path | None = None) -> list:
    """The shipped drafts (folder, record) made for a target of `config`'s shape (decoder layers, width): the only
    ones whose fingerprint is worth computing."""
    return [(folder, record) for folder, record in (shipped() if root is None else shipped(root))
            if record.get("target_layers") == config.decoder_layers and record.get("d_model") == config.d_model]


def matching(model, root: Path | None = None):
    """The shipped draft (folder, record) distilled for `model` (its fingerprint), else None."""
    candidates = of_shape(model.config, root)
    if not candidates:
        return None
    mine = fingerprint(model)
    return next(((f, r) for f, r in candidates if r.get("target_fingerprint") == mine), None)


def checkpoint(model, target_folder: str, folder: Path, record: dict, cache: Path | None = None) -> Path:
    """The draft's Hugging Face checkpoint: the target `model` (read from `target_folder`) with its decoder cut to the
    record's layers and the draft's tensors loaded; written once into the cache and reused."""
    import copy
    import shutil

    import torch
    from safetensors.torch import load_file

    key = f"{folder.name}-{record['target_fingerprint'][:16]}-" + \
        hashlib.sha256((folder / TENSORS).read_bytes()).hexdigest()[:16]
    cache = cache or Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec")) / "drafts"
    out = cache / key
    if (out / MARK).is_file():
        return out
    draft = copy.deepcopy(model)
    layers = record["layers"]
    draft.model.decoder.layers = torch.nn.ModuleList([draft.model.decoder.layers[i] for i in layers])
    draft.config.decoder_layers = len(layers)
    own = load_file(str(folder / TENSORS))
    state = draft.model.decoder.state_dict()
    missing = [k for k in own if k not in state]
    if missing or any(own[k].shape != state[k].shape for k in own):
        raise SpecdecError(f"the shipped draft {folder} does not fit its target's decoder ({len(missing)} tensors "
                           "unknown or of other shapes)", "restore the draft's folder from the package")
    draft.model.decoder.load_state_dict({k: v.float() for k, v in own.items()}, strict=False)
    tmp = cache / f".{key}.{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        draft.save_pretrained(str(tmp))
        for name in ("generation_config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "normalizer.json"):
            if (Path(target_folder) / name).is_file():
                shutil.copy(Path(target_folder) / name, tmp / name)
        (tmp / MARK).write_text(json.dumps({"name": folder.name, "target_fingerprint": record["target_fingerprint"]}))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SpecdecError(f"cannot write the shipped draft's checkpoint into {cache} ({err.strerror or err})",
                           "set SPECDEC_CACHE to a writable folder, or pass --no-draft") from None
    return out


def distilled_for(folder: str) -> dict | None:
    """A made draft checkpoint's mark ({"name", "target_fingerprint"}), None for any other checkpoint."""
    path = Path(folder) / MARK
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("target_fingerprint"), str) else None

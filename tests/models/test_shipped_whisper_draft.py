"""The draft shipped for whisper base (models/whisper-base-draft/): its record and tensors are what the exporter
reads, within the size the package allows, and, when whisper base is in the cache (`python -m
specdec.bench.whisper_models fetch base`), its fingerprint is that of base as faster-whisper publishes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specdec.models

FOLDER = Path(specdec.models.__file__).parent / "whisper-base-draft"
MAX_BYTES = 20_000_000


def test_the_shipped_draft_is_complete_and_small():
    from safetensors import safe_open

    from specdec.export.families.whisper_drafts import FORMAT, shipped

    record = json.loads((FOLDER / "draft.json").read_text())
    assert record["format"] == FORMAT and len(record["target_fingerprint"]) == 64
    assert record["target_layers"] == 6 and record["d_model"] == 512 and record["layers"] == [0, 5]
    assert (FOLDER / "draft.safetensors").stat().st_size <= MAX_BYTES
    with safe_open(str(FOLDER / "draft.safetensors"), "pt") as f:
        names = set(f.keys())
        tensors = [f.get_tensor(n) for n in sorted(names)]
    assert all(t.dtype.is_floating_point and t.itemsize == 2 for t in tensors)
    assert record["parameters"] == sum(t.numel() for t in tensors)
    assert {n.split(".")[0] for n in names} == {"layers", "layer_norm"}
    assert {n.split(".")[1] for n in names if n.startswith("layers.")} == {"0", "1"}
    assert sum(1 for n in names if n.endswith("fc1.weight")) == 2
    curve = record["training"]["alpha_curve"]
    assert curve[-1]["alpha_t0"] > curve[0]["alpha_t0"]
    assert any(folder == FOLDER for folder, _ in shipped())


@pytest.mark.real_whisper
def test_it_is_attached_to_whisper_base_as_faster_whisper_publishes_it():
    from specdec.bench.whisper_models import path_of

    folder = path_of("base")
    if folder is None:
        pytest.skip("Whisper base is not in the cache: python -m specdec.bench.whisper_models fetch base")
    pytest.importorskip("transformers")
    from transformers import WhisperForConditionalGeneration

    from specdec.export.families import checkpoint_path
    from specdec.export.families.whisper_drafts import matching

    model = WhisperForConditionalGeneration.from_pretrained(checkpoint_path(str(folder), lambda *_: None))
    found = matching(model)
    assert found is not None and found[0] == FOLDER

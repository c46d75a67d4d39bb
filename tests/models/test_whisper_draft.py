"""`specdec-models whisper-draft` (models/whisper_draft.py) on a tiny random Whisper target: the data part resumes at
the first missing shard after an interruption and refuses other settings, training resumes from its checkpoint
with the time already spent, and the package is a draft that specdec-export finds for that target only."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from tinymodels import save_tiny_whisper, tiny_whisper_model  # noqa: E402

from specdec.export.families import whisper_drafts  # noqa: E402
from specdec.models import whisper_draft  # noqa: E402
from specdec.runtime.core.errors import SpecdecError  # noqa: E402


class Interrupted(Exception):
    pass


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(whisper_draft, "SHARD", 4)
    monkeypatch.setattr(whisper_draft, "VALIDATION_SHARDS", 1)
    monkeypatch.setattr(whisper_draft, "MAX_NEW", 8)


@pytest.fixture
def target(tmp_path):
    model = tiny_whisper_model(seed=3, decoder_layers=3)
    return model, str(save_tiny_whisper(model, tmp_path / "target"))


def test_data_resumes_after_an_interruption_and_refuses_other_settings(small, target, tmp_path):
    _, folder = target
    work = tmp_path / "work"
    made = []

    def stop_after_first(message):
        made.append(message)
        raise Interrupted

    with pytest.raises(Interrupted):
        whisper_draft.make_data(work, folder, 12, 0, 1, log=stop_after_first)
    first = (work / "data" / "shard-00000.npz").read_bytes()
    assert sorted(p.name for p in (work / "data").glob("shard-*.npz")) == ["shard-00000.npz"]
    lines = []
    whisper_draft.make_data(work, folder, 12, 0, 1, log=lines.append)
    assert [line.split(" (")[0] for line in lines] == ["data: shard 2/3", "data: shard 3/3"]
    assert (work / "data" / "shard-00000.npz").read_bytes() == first
    shard = np.load(work / "data" / "shard-00002.npz")
    assert shard["encoder"].shape[1:] == (1500, 32) and shard["top"].shape[-1] == whisper_draft.TOP_K
    prompt = shard["prompt"].tolist()
    assert prompt == [2, 3, 5, 7]                  # start, <|en|>, transcribe, no timestamps: the runtime's prompt
    for row, length in enumerate(shard["lengths"]):
        assert shard["tokens"][row, :len(prompt)].tolist() == prompt and shard["tokens"][row, length - 1] == 1
    with pytest.raises(SpecdecError, match="other settings \\(clips\\)"):
        whisper_draft.make_data(work, folder, 16, 0, 1)


def test_training_resumes_from_its_checkpoint_and_the_package_matches_its_target_only(small, target, tmp_path,
                                                                                     monkeypatch):
    model, folder = target
    work = tmp_path / "work"
    whisper_draft.make_data(work, folder, 12, 0, 1, log=lambda m: None)
    monkeypatch.setattr(whisper_draft, "CHECKPOINT_S", 0.0)
    whisper_draft.train(work, folder, 0.01, 0, 1, log=lambda m: None)
    import torch

    first = torch.load(work / "train.pt", weights_only=False)["state"]
    assert first["step"] >= 1 and first["seconds"] >= 0.6
    lines = []
    whisper_draft.train(work, folder, 0.03, 0, 1, log=lines.append)
    second = torch.load(work / "train.pt", weights_only=False)["state"]
    assert lines[0].startswith(f"train: resuming at step {first['step']}")
    assert second["step"] > first["step"] and second["seconds"] >= 1.8
    assert second["curve"][:len(first["curve"])] == first["curve"] and len(second["curve"]) > len(first["curve"])
    for point in second["curve"]:
        assert 0.0 <= point["alpha_t0"] <= 1.0 and 0.0 <= point["alpha_t1"] <= 1.0

    out = tmp_path / "shipped" / "whisper-tiny-draft"
    whisper_draft.package(work, folder, out, 1, log=lambda m: None)
    record = json.loads((out / "draft.json").read_text())
    assert record["target_fingerprint"] == whisper_drafts.fingerprint(model)
    assert record["layers"] == [0, 2] and record["training"]["clips"] == 8
    assert record["training"]["validation_clips"] == 4
    found = whisper_drafts.matching(model, tmp_path / "shipped")
    assert found is not None and found[0] == out
    other = tiny_whisper_model(seed=4, decoder_layers=3)
    assert whisper_drafts.matching(other, tmp_path / "shipped") is None


def test_too_few_clips_is_one_line(small, target, tmp_path):
    with pytest.raises(SpecdecError, match="too few"):
        whisper_draft.make_data(tmp_path / "work", target[1], 4, 0, 1)

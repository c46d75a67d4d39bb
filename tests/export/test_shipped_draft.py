"""A draft shipped for one Whisper target (export/families/whisper_drafts.py): its fingerprint, specdec-export
attaching it to that target only (and saying so), the export's output exactly the target's, and a draft made for
another target refused at export and at load with one line."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("transformers")

from tinymodels import (WHISPER_WINDOW, read_manifest, run_export_cli, save_tiny_whisper,  # noqa: E402
                        tiny_whisper_model, whisper_audio)

from specdec.export.families import whisper_drafts  # noqa: E402
from specdec.models import whisper_draft  # noqa: E402
from specdec.runtime import SpeculativeDecoder  # noqa: E402
from specdec.runtime.core.errors import SpecdecError  # noqa: E402

ARGS = ("--gamma-max", "4", "--max-length", "32")


def _target(seed):
    return tiny_whisper_model(seed=seed, vocab=40, position_scale=1.0, init_std=0.2, decoder_layers=3,
                              **WHISPER_WINDOW)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A target saved in tmp_path/target and a draft for it 'shipped' in tmp_path/models (its decoder's first and
    last layers, perturbed), found by specdec-export there; the made checkpoints cached in tmp_path/cache."""
    import torch

    model = _target(6)
    folder = save_tiny_whisper(model, tmp_path / "target", 36)
    decoder = whisper_draft.draft_decoder(model)
    torch.manual_seed(7)
    with torch.no_grad():
        for name, p in decoder.named_parameters():
            if whisper_draft.own_tensor(name) and p.numel() > 1:
                p.add_(0.3 * p.std() * torch.randn_like(p))
    whisper_draft.write_draft(model, decoder, tmp_path / "models" / "tiny-draft", {"clips": 0})
    monkeypatch.setattr(whisper_drafts, "shipped", functools.partial(whisper_drafts.shipped, tmp_path / "models"))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    return model, folder


def test_the_fingerprint_is_the_weights_rounded_to_float16():
    import copy

    import torch

    model = _target(6)
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())             # what a float16 CTranslate2 folder holds
    assert whisper_drafts.fingerprint(rounded) == whisper_drafts.fingerprint(model)
    with torch.no_grad():
        rounded.model.decoder.layers[1].fc1.weight[0, 0] += 0.01
    assert whisper_drafts.fingerprint(rounded) != whisper_drafts.fingerprint(model)
    assert whisper_drafts.fingerprint(_target(7)) != whisper_drafts.fingerprint(model)


def test_the_shipped_draft_is_attached_to_its_target_and_keeps_the_output_exact(shipped, tmp_path):
    model, folder = shipped
    code, out, err = run_export_cli(["--target", folder, "--export", tmp_path / "export", *ARGS])
    assert code == 0, err
    assert "the shipped draft tiny-draft (distilled for this target" in out
    manifest = read_manifest(tmp_path / "export")
    assert set(manifest["models"]) == {"target", "draft"}
    assert manifest["models"]["draft"]["architecture"]["decoder_layers"] == 2
    speech = manifest["speech"]
    assert speech["target_fingerprint"] == whisper_drafts.fingerprint(model)
    assert speech["distilled_for"] == {"draft": speech["target_fingerprint"]}
    assert speech["shares_target_encoder"] == ["draft"]          # the draft's encoder is the target's
    dec = SpeculativeDecoder.load(tmp_path / "export", provider="cpu")
    kept = 0
    for seed in range(4):
        audio = whisper_audio(0.8, seed=seed)
        want = dec.generate(audio=audio, max_new_tokens=12, draft="none").token_ids
        got = dec.generate(audio=audio, max_new_tokens=12, draft="draft", gamma=3)
        assert got.token_ids == want
        kept += got.stats.accepted
    assert kept > 0                                # the draft's guesses were used, not only the target's


def test_no_draft_and_other_targets_export_the_target_alone(shipped, tmp_path):
    _, folder = shipped
    code, out, err = run_export_cli(["--target", folder, "--no-draft", "--export", tmp_path / "alone", *ARGS])
    assert code == 0, err and "shipped draft" not in out
    assert set(read_manifest(tmp_path / "alone")["models"]) == {"target"}
    other = save_tiny_whisper(_target(8), tmp_path / "other", 36)
    code, out, err = run_export_cli(["--target", other, "--export", tmp_path / "other-export", *ARGS])
    assert code == 0, err
    assert "shipped draft" not in out and set(read_manifest(tmp_path / "other-export")["models"]) == {"target"}
    code, _, err = run_export_cli(["--target", folder, "--no-draft", "--draft", folder, "--export", tmp_path / "x"])
    assert code == 2 and "contradict" in err and len(err.strip().splitlines()) == 1


def test_a_draft_made_for_another_target_is_refused_at_export_and_at_load(shipped, tmp_path):
    model, folder = shipped
    made = whisper_drafts.checkpoint(model, folder, tmp_path / "models" / "tiny-draft",
                                     json.loads((tmp_path / "models" / "tiny-draft" / "draft.json").read_text()))
    other = save_tiny_whisper(_target(8), tmp_path / "other", 36)
    code, _, err = run_export_cli(["--target", other, "--draft", made, "--export", tmp_path / "bad", *ARGS])
    assert code != 0 and "distilled for another target" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()

    code, _, err = run_export_cli(["--target", folder, "--export", tmp_path / "export", *ARGS])
    assert code == 0, err
    path = tmp_path / "export" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["speech"]["distilled_for"]["draft"] = "0" * 64
    path.write_text(json.dumps(manifest))
    with pytest.raises(SpecdecError) as caught:
        SpeculativeDecoder.load(tmp_path / "export", provider="cpu")
    assert "distilled for another target (fingerprint 000000000000)" in str(caught.value)
    assert "--no-draft" in str(caught.value) and "\n" not in str(caught.value)


def test_an_unwritable_cache_is_one_line(shipped, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "file"))
    _, folder = shipped
    code, _, err = run_export_cli(["--target", folder, "--export", tmp_path / "export", *ARGS])
    assert code != 0 and "SPECDEC_CACHE" in err and len(err.strip().splitlines()) == 1, err

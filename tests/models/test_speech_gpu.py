"""`specdec-models speech-gpu` (models/speech_gpu.py), the speech pair's one-call GPU run, run here on the CPU at a
small size: clips made by two processes, the target trained, the draft distilled, the pack written in pieces beside
its record; a second run goes on from the first (shards kept, the target's checkpoint and the draft's distillation
continued); `speech-unpack` puts the pieces back together into checkpoints that load, and refuses pieces that do not
add up. The shell wrapper's arguments and the recipe's one-line errors are checked too."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec.models import speech_gpu, speech_pack, speech_train
from specdec.runtime.core.errors import SpecdecError

SMALL = dict(d_model=64, encoder_layers=2, decoder_layers=3, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=128, decoder_ffn_dim=128)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the stage at width 64 on the CPU (the second resumes), their records and folders."""
    mp = pytest.MonkeyPatch()
    mp.setitem(speech_train.SIZES, 64, SMALL)
    mp.setitem(speech_train.DRAFT_LAYERS_OF, 64, 1)          # as at width 384: a 1-layer draft
    root = tmp_path_factory.mktemp("speech-gpu")
    work, said = root / "work", []
    try:
        records = []
        for n in range(2):
            records.append(speech_gpu.run_gpu(
                str(work), str(root / f"tree{n}"), str(root / f"out{n}"), width=64, batch=4, clips=(12, 4), workers=2,
                device="cpu", budget_s=600, threads=1, target_minutes=0.04, draft_minutes=0.03, piece_mib=0.5,
                shard_clips=4, log=said.append))
    finally:
        mp.undo()
    return root, records, said


def test_a_run_makes_the_clips_trains_both_and_writes_the_pack_in_pieces(runs):
    root, (first, _), said = runs
    assert sorted(first["seconds"]) == ["data", "draft", "package", "target", "total"]
    assert first["width"] == 64 and first["batch"] == 4 and first["device"].startswith("cpu")
    assert len(list((root / "work" / "speech" / "train").glob("shard-*.npz"))) == 3
    assert first["target"]["steps"] > 0 and first["target"]["width"] == 64 and first["target"]["draft_layers"] == 1
    assert first["draft"]["decoder_steps"] > 0 and first["draft"]["kl_weight"] == 0.8
    pieces = first["pack"]["pieces"]
    assert len(pieces) >= 2 and all((root / "out0" / p).stat().st_size <= 2 ** 19 for p in pieces)
    assert json.loads((root / "out0" / speech_gpu.RECORD).read_text()) == first
    packed = root / "tree0" / "speech"
    assert {"weights.safetensors", "target.json", "draft.json", "example.wav"} <= set(first["pack"]["files"])
    assert json.loads((packed / "target.json").read_text())["d_model"] == 64
    assert sum("speech-data train: shard" in m for m in said) == 3          # made once: the second run kept them


def test_a_second_run_goes_on_from_the_first(runs):
    root, (first, second), said = runs
    assert second["target"]["steps"] > first["target"]["steps"]
    assert second["target"]["minutes"] >= first["target"]["minutes"]
    assert any("resumed at step" in m for m in said)
    assert any("the draft's decoder goes on from" in m for m in said)
    assert second["seconds"]["data"] < first["seconds"]["data"]          # the shards were kept


def test_unpacked_pieces_are_the_pack_and_load_as_checkpoints(runs, tmp_path):
    root, (first, second), _ = runs
    out = speech_gpu.unpack(str(root / "out1"), str(tmp_path), log=lambda *_: None)
    for name in second["pack"]["files"]:
        assert (out / name).read_bytes() == (root / "tree1" / "speech" / name).read_bytes(), name
    paths = speech_pack.checkpoints(tmp_path / "ckpt", out)
    from transformers import WhisperForConditionalGeneration

    target = WhisperForConditionalGeneration.from_pretrained(str(paths["target"]))
    draft = WhisperForConditionalGeneration.from_pretrained(str(paths["draft"]))
    assert target.config.decoder_layers == 3 and draft.config.decoder_layers == 1
    # the draft's one layer began as the target's last; distillation moved it, its encoder stays the target's
    assert (target.model.encoder.conv1.weight == draft.model.encoder.conv1.weight).all()


def test_pieces_that_do_not_add_up_are_refused_in_one_line(runs, tmp_path):
    root, (first, _), _ = runs
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in [speech_gpu.RECORD, *first["pack"]["pieces"]]:
        (bad / name).write_bytes((root / "out0" / name).read_bytes())
    last = bad / first["pack"]["pieces"][-1]
    last.write_bytes(last.read_bytes()[:-1] + b"x")
    (bad / first["pack"]["pieces"][0]).rename(tmp_path / "away")
    cases = [(str(bad), "pieces missing"), (str(tmp_path / "none"), "no speech-gpu.json"), ("", "needs --out")]
    for pieces, words in cases:
        with pytest.raises(SpecdecError) as err:
            speech_gpu.unpack(pieces, str(tmp_path / "tree"), log=lambda *_: None)
        assert words in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "away").rename(bad / first["pack"]["pieces"][0])
    with pytest.raises(SpecdecError, match="sha256 differs"):
        speech_gpu.unpack(str(bad), str(tmp_path / "tree"), log=lambda *_: None)
    assert not (tmp_path / "tree" / "speech").exists()


def test_a_bare_machine_goes_on_from_the_pack(runs, tmp_path):
    """--from-pack on a work directory without a checkpoint: the pack's target (its int8 rows) and steps, its draft
    and distillation steps; the optimizer and CTC head start afresh. A work directory with a checkpoint keeps it."""
    import shutil

    root, (_, second), _ = runs
    shutil.copytree(root / "tree1" / "speech", tmp_path / "tree" / "speech")
    said = []
    with pytest.raises(SpecdecError, match="is 64 wide, not 384"):
        speech_gpu.run_gpu(str(tmp_path / "other"), str(tmp_path / "tree"), str(tmp_path / "out"), width=384,
                           clips=(12, 4), workers=1, device="cpu", shard_clips=4, from_pack=True, log=said.append)
    shutil.copytree(root / "work" / "speech", tmp_path / "work" / "speech")      # the clips, not the checkpoints
    third = speech_gpu.run_gpu(str(tmp_path / "work"), str(tmp_path / "tree"), str(tmp_path / "out"), batch=4,
                               clips=(12, 4), workers=1, device="cpu", budget_s=600, threads=1, target_minutes=0.03,
                               draft_minutes=0.02, shard_clips=4, from_pack=True, log=said.append)
    assert third["from_pack"] == {"steps": second["target"]["steps"], "minutes": second["target"]["minutes"],
                                  "draft_steps": second["draft"]["decoder_steps"]}
    assert third["target"]["steps"] > second["target"]["steps"] and third["width"] is None
    assert json.loads((tmp_path / "tree" / "speech" / "target.json").read_text())["d_model"] == 64
    assert any("the optimizer and the CTC head start afresh" in m for m in said)
    assert any("the draft's decoder goes on from" in m for m in said)
    assert speech_gpu.seed_from_pack(str(tmp_path / "work"), tmp_path / "tree" / "speech", 64, said.append) is None
    with pytest.raises(SpecdecError, match="no speech pack"):
        speech_gpu.seed_from_pack(str(tmp_path / "bare"), tmp_path / "none", None)


def test_bad_settings_are_one_line_errors(runs, tmp_path):
    root, _, _ = runs
    for argv, words in ((["speech-gpu", "--device", "cuda"], "no CUDA GPU"),
                        (["speech-target", "--speech-width", "300", "--work-dir", str(root / "work"), "--device",
                          "cpu"], "--speech-width 300"),
                        (["speech-unpack", "--out", str(tmp_path)], "no speech-gpu.json")):
        if "cuda" in argv:
            import torch

            if torch.cuda.is_available():
                continue
        done = subprocess.run([sys.executable, "-m", "specdec.models.recipe", *argv], capture_output=True, text=True)
        assert done.returncode != 0 and words in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_checkpoint_goes_on_only_at_its_own_width(runs):
    root, _, _ = runs
    with pytest.raises(SpecdecError, match="trained at width 64, not 384"):
        speech_train.train("speech-target", str(root / "work"), 1.0, steps=1, batch=2, lr=1e-3, warmup=1, seed=0,
                           threads=1, resume=True, width=384, device="cpu", log=lambda *_: None)


def test_the_wrapper_script_reports_missing_modules_without_a_traceback(tmp_path):
    script = speech_gpu.__file__.replace("speech_gpu.py", "speech_gpu.sh")
    text = open(script).read()
    assert "specdec.models.recipe speech-gpu" in text and "--budget-s 480" in text and "timeout 520" in text
    done = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # the module check both GPU scripts run first: a module that cannot be imported is one line, exit 1
    assert "python3 -m benchmarks.need_modules" in text
    root = script.rsplit("/models/", 1)[0]
    done = subprocess.run([sys.executable, "-m", "benchmarks.need_modules", "numpy", "no_such_module_here"],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.stdout.splitlines()[0].startswith("numpy ")
    assert "missing: no_such_module_here (ModuleNotFoundError: " in done.stdout
    done = subprocess.run([sys.executable, "-m", "benchmarks.need_modules", "numpy"], capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 0 and "missing" not in done.stdout, done.stdout


def test_features_held_as_a_tensor_give_the_batches_the_numpy_array_gives():
    """On a GPU the features are one float16 tensor (on_device) and a batch is gathered from it; on the CPU they are a
    numpy array. Both give the same batch, cut clips padded alike (the tensor here is a CPU one: the same indexing)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    feats = rng.standard_normal((6, 4, 10)).astype(np.float16)
    cuts = [None, 7, None, 3, None, 9]
    seqs = [[1, 2, 3, 9, 5, 6, 8][:n] for n in (5, 7, 6, 5, 7, 6)]
    idx = [3, 1, 4]
    held = torch.from_numpy(feats.copy())
    a = speech_train.collate(feats, seqs, cuts, idx, 9)
    b = speech_train.collate(held, seqs, cuts, idx, 9)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y)
    assert torch.equal(a[0][0, :, 3:], a[0][0, :, -1:].expand(4, 7))          # clip 3 cut at frame 3
    assert torch.equal(held, torch.from_numpy(feats))                          # the held features stay as they were

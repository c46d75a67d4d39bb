"""Stages `speech-gpu` and `speech-unpack`: the speech pair trained in one call of a GPU machine, and brought back.

There (models/speech_gpu.sh installs what travelled and runs `specdec-models speech-gpu --out $OUT`), every step
timed against one budget (`--budget-s`, default BUDGET_S, from the stage's start):

1. speech-data in `--workers` processes (the command's default: every core): the validation and training clips
   (the test clips are synthesized where the pair is evaluated), no shard begun after DATA_SHARE of the budget
   (training then takes the shards made, and the next run makes the rest);
2. speech-target on the GPU at `--speech-width` (default GPU_WIDTH), batches of `--speech-batch` (default GPU_BATCH),
   bf16 autocast, for TARGET_SHARE of what is left after RESERVE_S;
3. speech-decoders: the draft distilled from that target on its frozen encoder's outputs, for the rest;
4. speech-package into `--out-dir`/speech (int8 rows, as committed), then that folder as a tar in pieces of at most
   PIECE_MIB (what comes back from such a machine is at most 16 MiB a file) beside the record speech-gpu.json: each
   step's seconds, the device, the versions, the steps and validation cross-entropies, the tar's sha256.

Resumable: run again on the same machine (the work directory, git-ignored, stays between calls while the machine is
held), it keeps the shards, goes on with the target from its checkpoint (this run's minutes added to those trained
before) and with the draft from its last distillation. On a bare machine, `--from-pack` goes on from the pack in
`--out-dir`/speech instead of from scratch (seed_from_pack: its weights, as int8 rows, and its records; the
optimizer and the CTC head start afresh), so training adds up over machines too. On a machine without a GPU the
same stage runs on the CPU.

Here, `specdec-models speech-unpack --out FOLDER` checks the pieces against the record and writes `--out-dir`/speech.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tarfile
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

BUDGET_S = 480.0          # the stage's share of one call of at most 8 minutes
RESERVE_S = 90.0          # loading the clips twice, the encoder's outputs for the draft, the package and its pieces
DATA_SHARE = 0.4          # no shard is begun after this share of the budget: the next run makes the rest
TARGET_SHARE = 0.75       # of the training time left after the data: the target; the rest: the draft
GPU_WIDTH = 384
GPU_BATCH = 64
DRAFT_BATCH = 256         # the draft's distillation on a GPU: decoder steps only, so more clips a step
CLIPS = (24000, 500)      # training, validation
PIECE_MIB = 15
RECORD = "speech-gpu.json"
TAR = "speech-pack.tar"


def run_gpu(work: str, out_dir: str, pieces: str, width: int | None = None, batch: int | None = None,
            clips: tuple = CLIPS, workers: int = 1, device: str = "auto", budget_s: float = BUDGET_S,
            seed: int = 0, threads: int = 2, target_minutes: float | None = None, draft_minutes: float | None = None,
            piece_mib: float = PIECE_MIB, shard_clips: int | None = None, from_pack: bool = False,
            log=print) -> dict:
    """The whole run (module docstring); `target_minutes` / `draft_minutes` fix a phase's minutes instead of its share
    of the budget; `from_pack`: go on from out_dir/speech where the work directory has no checkpoint. Returns the
    record it writes to pieces/RECORD."""
    import torch

    from .speech_data import SHARD_CLIPS, build
    from .speech_pack import pack
    from .speech_train import device_name, device_of, train, train_decoders

    t0 = time.time()
    device = device_of(device)
    width = width or (GPU_WIDTH if device == "cuda" else None)
    batch = batch or (GPU_BATCH if device == "cuda" else 8)
    os.makedirs(pieces, exist_ok=True)
    record = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t0)), "device": device_name(device),
              "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
              "transformers": _version("transformers"), "budget_s": budget_s, "width": width, "batch": batch,
              "clips": list(clips), "workers": workers, "seconds": {}}

    def step(name, started):
        record["seconds"][name] = round(time.time() - started, 1)
        log(f"[speech-gpu] {name}: {record['seconds'][name]:.0f} s ({time.time() - t0:.0f} s of {budget_s:.0f})")
        _write_record(pieces, record)

    if from_pack:               # first: a pack that does not fit is a one-line error before any work
        record["from_pack"] = seed_from_pack(work, Path(out_dir) / "speech", width, log)
    started = time.time()
    made = build(work, {"validation": clips[1], "train": clips[0]}, seed, shard_clips=shard_clips or SHARD_CLIPS,
                 workers=workers, deadline=t0 + DATA_SHARE * budget_s, log=log)
    record["shards"] = made
    step("data", started)

    left = max(0.0, budget_s - (time.time() - t0) - RESERVE_S)
    target_minutes = left * TARGET_SHARE / 60 if target_minutes is None else target_minutes
    draft_minutes = left * (1 - TARGET_SHARE) / 60 if draft_minutes is None else draft_minutes
    before = _trained_minutes(os.path.join(work, "ckpt", "speech-target.pt"))
    log(f"[speech-gpu] target {target_minutes:.1f} min (after {before:.1f} before), draft {draft_minutes:.1f} min")
    started = time.time()
    train("speech-target", work, before + target_minutes, steps=10 ** 6, batch=batch, lr=1e-3, warmup=300, seed=seed,
          threads=threads, resume=True, width=width, device=device, ckpt_minutes=2.0, log=log)
    record["target"] = json.loads((Path(work) / "speech-target" / "train_info.json").read_text())
    step("target", started)

    started = time.time()
    train_decoders(work, 0.0, draft_minutes, batch=DRAFT_BATCH if device == "cuda" else 64, seed=seed,
                   threads=threads, resume=True, device=device, go_on=("draft",), log=log)
    record["draft"] = json.loads((Path(work) / "speech-draft" / "train_info.json").read_text())
    step("draft", started)

    started = time.time()
    folder = pack(work, Path(out_dir) / "speech")
    record["pack"] = split(folder, pieces, piece_mib)
    step("package", started)
    record["seconds"]["total"] = round(time.time() - t0, 1)
    _write_record(pieces, record)
    return record


def seed_from_pack(work: str, pack_dir: Path, width: int | None, log=print) -> dict | None:
    """Where the work directory has no phase-1 checkpoint: one made from the pack in `pack_dir` (its target's weights,
    from int8 rows, its steps and minutes; no optimizer or CTC state, which train then starts afresh), and the pack's
    draft as the last distillation to go on from. Returns what it took ({steps, minutes, draft_steps}), or None when
    the work directory's own checkpoint goes on."""
    import shutil

    import torch
    from transformers import WhisperForConditionalGeneration

    from .speech_pack import checkpoints

    ckpt = Path(work) / "ckpt" / "speech-target.pt"
    if ckpt.exists():
        log(f"[speech-gpu] {ckpt} goes on (the pack is used only on a work directory without one)")
        return None
    pack_dir = Path(pack_dir)
    if not (pack_dir / "target.json").exists():
        raise SpecdecError(f"--from-pack: no speech pack in {pack_dir}", "put the pack there (models/speech, or "
                           "--out-dir), or leave out --from-pack to train from scratch")
    shape = json.loads((pack_dir / "target.json").read_text())
    if width is not None and shape["d_model"] != width:
        raise SpecdecError(f"--from-pack: the pack in {pack_dir} is {shape['d_model']} wide, not {width}",
                           f"pass --speech-width {shape['d_model']}, or leave out --from-pack to train from scratch")
    trained = json.loads((pack_dir / "target-train.json").read_text())
    drafted = json.loads((pack_dir / "draft-train.json").read_text())
    # a pack from speech-gpu records phase 1 (steps, minutes); the committed pair's records phase 2 (encoder_*)
    steps = trained.get("steps", trained.get("encoder_steps", 0))
    minutes = trained.get("minutes", trained.get("encoder_minutes", 0.0))
    made = Path(work) / "from-pack"
    paths = checkpoints(made, pack_dir)
    target = WhisperForConditionalGeneration.from_pretrained(str(paths["target"]))
    draft_layers = json.loads((pack_dir / "draft.json").read_text())["decoder_layers"]
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": target.state_dict(), "opt": None, "ctc": None, "step": steps, "elapsed": minutes * 60,
                "config": target.config.to_dict(), "batch": trained.get("batch", trained.get("encoder_batch", 8)),
                "draft_layers": draft_layers}, str(ckpt) + ".tmp")
    os.replace(str(ckpt) + ".tmp", ckpt)
    draft = Path(work) / "speech-draft"
    shutil.rmtree(draft, ignore_errors=True)
    shutil.copytree(paths["draft"], draft)
    (draft / "train_info.json").write_text(json.dumps({**drafted, "decoder_steps": drafted.get("decoder_steps", 0)},
                                                      indent=1))
    shutil.rmtree(made)
    log(f"[speech-gpu] going on from the pack in {pack_dir}: the target after {steps} steps ({minutes:.1f} min), "
        f"its {draft_layers}-layer draft after {drafted.get('decoder_steps', 0)} distillation steps")
    return {"steps": steps, "minutes": minutes, "draft_steps": drafted.get("decoder_steps", 0)}


def split(folder: Path, pieces: str, piece_mib: float = PIECE_MIB) -> dict:
    """`folder` as pieces/TAR.00, .01, ... of at most `piece_mib` MiB; returns the tar's size, sha256 and pieces."""
    tar = Path(pieces) / TAR
    with tarfile.open(tar, "w") as out:
        for path in sorted(Path(folder).iterdir()):
            out.add(path, arcname=path.name)
    data = tar.read_bytes()
    tar.unlink()
    for old in Path(pieces).glob(TAR + ".*"):
        old.unlink()
    size = int(piece_mib * 2 ** 20)
    names = []
    for k in range(0, len(data), size):
        names.append(f"{TAR}.{k // size:02d}")
        (Path(pieces) / names[-1]).write_bytes(data[k:k + size])
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pieces": names,
            "files": sorted(p.name for p in Path(folder).iterdir())}


def unpack(pieces: str, out_dir: str, log=print) -> Path:
    """The pack that `speech-gpu` left in `pieces` (its record and tar pieces), checked against the record's sha256,
    written to out_dir/speech (replacing what is there)."""
    if not pieces:
        raise SpecdecError("speech-unpack needs --out FOLDER", "pass the folder holding speech-gpu.json and the "
                           f"{TAR}.NN pieces the GPU run wrote")
    path = Path(pieces) / RECORD
    if not path.exists():
        raise SpecdecError(f"no {RECORD} in {pieces}", "pass the folder the GPU run's files came back to")
    record = json.loads(path.read_text())
    if "pack" not in record:
        raise SpecdecError(f"{path} records a run that did not reach the package (it stopped after "
                           f"{', '.join(record.get('seconds', {})) or 'nothing'})",
                           "run speech-gpu again on the machine (it resumes) and bring back its files")
    missing = [n for n in record["pack"]["pieces"] if not (Path(pieces) / n).exists()]
    if missing:
        raise SpecdecError(f"pieces missing from {pieces}: {', '.join(missing)}", "bring back every file of the run")
    data = b"".join((Path(pieces) / n).read_bytes() for n in record["pack"]["pieces"])
    if hashlib.sha256(data).hexdigest() != record["pack"]["sha256"]:
        raise SpecdecError(f"the pieces in {pieces} do not add up to the recorded pack (sha256 differs)",
                           "bring back the run's files again")
    out = Path(out_dir) / "speech"
    tmp = Path(out_dir) / "speech.unpacking"
    tmp.mkdir(parents=True, exist_ok=True)
    tar = tmp / TAR
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        names = t.getnames()
        if sorted(names) != sorted(record["pack"]["files"]) or any("/" in n or n.startswith(".") for n in names):
            raise SpecdecError(f"the pack in {pieces} holds other files than its record lists", "run speech-gpu again")
        t.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    tar.unlink()
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        os.replace(tmp / name, out / name)
    tmp.rmdir()
    log(f"speech-unpack: {len(names)} files ({record['pack']['bytes'] / 1e6:.1f} MB) -> {out}")
    return out


def _trained_minutes(ckpt: str) -> float:
    """The minutes a phase-1 checkpoint has trained (0 without one)."""
    if not os.path.exists(ckpt):
        return 0.0
    import torch

    return torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)["elapsed"] / 60


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _write_record(pieces: str, record: dict) -> None:
    path = Path(pieces) / RECORD
    path.with_suffix(".tmp").write_text(json.dumps(record, indent=1) + "\n")
    os.replace(path.with_suffix(".tmp"), path)

"""The bundled speech pair as it is committed (models/speech/), and the checkpoints specdec-export takes made from it.

The draft keeps the target's encoder, so the pair is stored once: one safetensors file holding the target's tensors
and the draft's decoder, each matrix as int8 with one fp16 scale per output row (round-to-nearest of x / scale,
scale = max |row| / 127), every other tensor (norms, biases, position embeddings) as fp16; beside it the two models' configurations and
their training records. That is 13 MB for 12 M parameters instead of 49 MB in fp32. The evaluation (speech_eval.py)
measures the checkpoints made from this file, which are what users get.

    specdec-models speech-checkpoint --out DIR      # DIR/target and DIR/draft: Hugging Face Whisper checkpoints
    specdec-export --target DIR/target --draft DIR/draft --export speech-export
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from . import speech_vocab as sv
from .speech_data import WINDOW_S, write_example

PACK = Path(__file__).resolve().parent / "speech"
WEIGHTS = "weights.safetensors"
ROLES = ("target", "draft")
TIED = "proj_out.weight"             # the output projection is the decoder's embedding (tie_word_embeddings)


def _stored(name: str, role: str, target_state: dict, tensor) -> bool:
    """Whether a tensor is written: not the tied projection, and not a draft's encoder tensor (the target's)."""
    if name == TIED:
        return False
    if role == "draft" and name.startswith("model.encoder."):
        if not (tensor == target_state[name]).all():
            raise SpecdecError(f"the draft's {name} differs from the target's", "train the draft from the target "
                               "(specdec-models speech-draft keeps its encoder)")
        return False
    return True


def pack(work: str, out: Path = PACK) -> Path:
    """models/speech from the trained checkpoints work/speech-target and work/speech-draft."""
    import torch
    from safetensors.torch import save_file
    from transformers import WhisperForConditionalGeneration

    tensors, states = {}, {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for role in ROLES:
        src = Path(work) / f"speech-{role}"
        if not (src / "config.json").exists():
            raise SpecdecError(f"no trained speech {role} in {src}", f"run `specdec-models speech-{role}` first")
        model = WhisperForConditionalGeneration.from_pretrained(str(src), dtype=torch.float32)
        states[role] = state = {k: v.detach() for k, v in model.state_dict().items()}
        for name, t in state.items():
            if not _stored(name, role, states["target"], t):
                continue
            key = f"{role}.{name}"
            if t.ndim >= 2 and t.numel() >= 4096 and "embed_positions" not in name:
                rows = t.reshape(t.shape[0], -1)
                scale = (rows.abs().amax(dim=1) / 127).clamp(min=1e-12)
                tensors[key + ".q8"] = torch.round(rows / scale[:, None]).to(torch.int8).reshape(t.shape).contiguous()
                tensors[key + ".scale"] = scale.to(torch.float16)
            else:
                tensors[key] = t.to(torch.float16).contiguous()
        config = model.config.to_dict()
        (out / f"{role}.json").write_text(json.dumps({k: config[k] for k in sorted(config)}, indent=1) + "\n")
        shutil.copy(src / "train_info.json", out / f"{role}-train.json")
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "specdec speech pair 1"})
    write_example(out)
    size = (out / WEIGHTS).stat().st_size
    print(f"speech-package: {out / WEIGHTS} ({size / 1e6:.1f} MB)", flush=True)
    return out


def state_dicts(pack_dir: Path = PACK) -> dict:
    """{role: fp32 state dict} from the packed file (the draft's encoder is the target's)."""
    import torch
    from safetensors.torch import load_file

    path = Path(pack_dir) / WEIGHTS
    if not path.exists():
        raise SpecdecError(f"the speech pair {path} is missing", "check out models/speech/ (it is committed), or "
                           "run `specdec-models speech` to train it")
    tensors = load_file(str(path))
    out = {role: {} for role in ROLES}
    for key, t in tensors.items():
        role, name = key.split(".", 1)
        if name.endswith(".scale"):
            continue
        if name.endswith(".q8"):
            name = name[:-3]
            scale = tensors[f"{role}.{name}.scale"].to(torch.float32)
            t = (t.to(torch.float32).reshape(t.shape[0], -1) * scale[:, None]).reshape(t.shape)
        out[role][name] = t.to(torch.float32)
    for name, t in out["target"].items():
        if name.startswith("model.encoder."):
            out["draft"][name] = t
    return out


def checkpoints(out, pack_dir: Path = PACK) -> dict:
    """out/target and out/draft: the pair as Hugging Face Whisper checkpoints (weights, configuration, generation
    configuration, feature extractor, speech tokenizer) that specdec-export takes. Returns {role: path}."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    states, paths = state_dicts(pack_dir), {}
    for role in ROLES:
        config = WhisperConfig(**json.loads((Path(pack_dir) / f"{role}.json").read_text()))
        model = WhisperForConditionalGeneration(config).eval()
        missing, unexpected = model.load_state_dict(states[role], strict=False)
        if [m for m in missing if m != TIED and "embed_positions" not in m] or unexpected:
            raise SpecdecError(f"models/speech/{WEIGHTS} does not fit {role}.json ({len(missing)} tensors missing, "
                               f"{len(unexpected)} unexpected)", "check out models/speech/ again")
        with torch.no_grad():
            model.proj_out.weight = model.model.decoder.embed_tokens.weight
        paths[role] = sv.save_speech_checkpoint(model, Path(out) / role, WINDOW_S)
    return paths


def run_checkpoint(out: str | None) -> None:
    if not out:
        raise SpecdecError("speech-checkpoint needs --out DIR", "e.g. specdec-models speech-checkpoint --out "
                           "speech-pair, then specdec-export --target speech-pair/target --draft speech-pair/draft")
    paths = checkpoints(os.path.abspath(out))
    print(f"speech-checkpoint: {paths['target']} and {paths['draft']}; export them with\n"
          f"  specdec-export --target {paths['target']} --draft {paths['draft']} --export speech-export", flush=True)

"""The weight variants of `specdec-bench dtypes` (cli.py has the method): made once from the same kept random
checkpoints, exported side by side and cached."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from specdec.export import quantize
from specdec.runtime.core.errors import SpecdecError

# name -> (directory, ExportOptions dtype fields, or None for a benchmark-made weight-only variant)
VARIANTS = {
    "fp32": ("export", {"dtype": "fp32"}),
    "int8-draft": ("export-int8-draft", {"dtype": "fp32", "draft_dtype": "int8"}),
    "int8-wo-draft": ("export-int8-wo-draft", {"dtype": "fp32", "draft_dtype": "int8-wo"}),
    "int8": ("export-int8", {"dtype": "int8"}),
    "int8-wo": ("export-int8-wo", None),
    "int8-wo-fp32": ("export-int8-wo-fp32", None),
}
WO_BITS, WO_BLOCK = quantize.WO_BITS, quantize.WO_BLOCK      # export/quantize.py's weight-only settings
WO_ACCURACY = {"int8-wo": 4, "int8-wo-fp32": 0}


def parse(text: str) -> list[str]:
    """--dtypes: comma-separated variant names; fp32 (the reference) is always measured, first."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in VARIANTS for n in names):
        raise SpecdecError(f"--dtypes takes a comma-separated list of {', '.join(VARIANTS)} (got '{text}')",
                           "e.g. --dtypes fp32,int8-draft,int8")
    return list(dict.fromkeys(["fp32", *names]))


def _stamp(path: Path) -> str:
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(path.iterdir())
                    if p.is_file())


def weights_sha256(path: Path) -> str:
    """sha256 over the checkpoint's weight files (*.safetensors, sorted by name) and config.json."""
    digest = hashlib.sha256()
    for p in sorted(path.glob("*.safetensors")) + [path / "config.json"]:
        digest.update(p.name.encode())
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def ensure_checkpoints(target: str, draft: str, ckpt: Path, log=print) -> dict:
    """{role: {"path", "name", "seed", "sha256"}}: the random checkpoints, built when missing."""
    from ..shapes.measure import build_checkpoint

    record_file = ckpt / "fingerprint.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    out = {}
    for role, name, seed in (("target", target, 1), ("draft", draft, 2)):
        path, entry = ckpt / name, record.get(role, {})
        built = (path / "config.json").is_file()
        if not (built and entry.get("stamp") == _stamp(path) and entry.get("name") == name
                and entry.get("seed") == seed):
            if not built:
                log(f"building random-initialised {name} (official configuration, seed {seed}) in {path}")
                build_checkpoint(name, path, seed=seed)
            record[role] = entry = {"name": name, "seed": seed, "sha256": weights_sha256(path), "stamp": _stamp(path)}
            record_file.write_text(json.dumps(record, indent=2) + "\n")
        out[role] = {"path": str(path), "name": name, "seed": seed, "sha256": entry["sha256"]}
    return out


def _usable(out: Path) -> bool:
    from specdec.runtime import load_manifest

    try:
        return (out / "manifest.json").is_file() and load_manifest(out, verify_checksums=False) is not None
    except SpecdecError:
        return False


def _parity_matches(out: Path, ckpts: dict, gamma_max: int, log) -> bool:
    """Whether an fp32 export cached without a fingerprint passes its parity check against these checkpoints."""
    import torch
    from transformers import T5ForConditionalGeneration

    from specdec.export.check import check_parity

    for role in ("target", "draft"):
        model = T5ForConditionalGeneration.from_pretrained(ckpts[role]["path"], dtype=torch.float32).eval()
        rep = check_parity(model, out / role / "encoder.onnx", out / role / "decoder.onnx", min(gamma_max, 2),
                           "fp32")
        del model
        log(f"  cached fp32 export, {role}: max|dlogit| vs the rebuilt checkpoint {rep['step_max_abs_diff']:.2e} "
            f"-> {'same weights' if rep['passed'] else 'DIFFERENT weights'}")
        if not rep["passed"]:
            return False
    return True


def weight_only_export(src: Path, dst: Path, log=print, accuracy_level: int = 4) -> dict:
    """A copy of the export `src` with weight-only int8 MatMuls in both models (quantize_weight_only, as
    --draft-dtype int8-wo), its manifest's `weights` and checksums updated; the runtime loads it as is."""
    from specdec.runtime.loading.manifest import MANIFEST, sha256_file

    manifest = json.loads((src / MANIFEST).read_text())
    tmp = dst.parent / (dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.perf_counter()
    try:
        tmp.mkdir(parents=True)
        (tmp / ".specdec-export").write_text("specdec export (benchmark-made weight-only int8 copy)\n")
        for rel in manifest["files"]:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, tmp / rel)
            if rel.endswith(".onnx"):
                log(f"weight-only int{WO_BITS} (MatMulNBits, block {WO_BLOCK}, accuracy_level {accuracy_level}): "
                    f"{rel}")
                quantize.quantize_weight_only(tmp / rel, rel, accuracy_level)
        for role in manifest["models"]:
            manifest["models"][role]["weights"] = "int8-wo"
        manifest["files"] = {rel: sha256_file(tmp / rel) for rel in manifest["files"]}
        manifest["benchmark_variant"] = {"made_by": "specdec.bench.dtypes.variants.weight_only_export",
                                         "from": str(src), "quantizer": "onnxruntime.quantization."
                                         "matmul_nbits_quantizer.MatMulNBitsQuantizer", "bits": WO_BITS,
                                         "block_size": WO_BLOCK, "symmetric": True, "accuracy_level": accuracy_level}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"export_s": time.perf_counter() - started, "weight_only": manifest["benchmark_variant"]}


def _code(name: str) -> dict:
    """What a variant's graphs depend on besides the weights: export/quantize.py, or the weight-only settings."""
    if name in WO_ACCURACY:
        return {"weight_only": {"bits": WO_BITS, "block_size": WO_BLOCK, "accuracy_level": WO_ACCURACY[name]}}
    if name != "fp32":
        return {"export/quantize.py": hashlib.sha256(Path(quantize.__file__).read_bytes()).hexdigest()}
    return {}


def _created(export_dir: Path) -> str | None:
    try:
        return json.loads((Path(export_dir) / "manifest.json").read_text()).get("created")
    except (OSError, ValueError):
        return None


def ensure_variants(target: str, draft: str, workdir: Path, gamma_max: int, max_length: int, names, log=print):
    """({variant: export dir}, {variant: info}, checkpoints): each variant exported once from the same checkpoints
    and cached (its info in DIR-info.json beside it), again when made from other weights or by other code."""
    from specdec.export.pipeline import ExportOptions, export_pair

    from ..shapes.measure import pair_root

    root = pair_root(workdir, target, draft, gamma_max, max_length)
    ckpts = ensure_checkpoints(target, draft, root / "checkpoints", log)
    fingerprint = {role: c["sha256"] for role, c in ckpts.items()}
    dirs, infos = {}, {}
    for name in sorted(names, key=lambda n: n != "fp32"):          # int8-wo is made from the fp32 export
        directory = VARIANTS[name][0]
        out = root / directory
        info_file = root / ("export-info.json" if name == "fp32" else f"{directory}-info.json")
        info = json.loads(info_file.read_text()) if info_file.is_file() else {}
        same = info.get("checkpoints") == fingerprint and info.get("code", {}) == _code(name)
        if name in WO_ACCURACY:
            same = same and info.get("from_fp32_created") == _created(dirs["fp32"])
        if _usable(out) and not same and name == "fp32" and "checkpoints" not in info:
            same = _parity_matches(out, ckpts, gamma_max, log)
        if _usable(out) and same:
            log(f"using the cached {name} export in {out}")
        else:
            log(f"exporting the {name} variant into {out}")
            started = time.perf_counter()
            if name in WO_ACCURACY:
                info = {**weight_only_export(dirs["fp32"], out, log, accuracy_level=WO_ACCURACY[name]),
                        "from_fp32_created": _created(dirs["fp32"])}
            else:
                reports = export_pair(ExportOptions(target=ckpts["target"]["path"], draft=ckpts["draft"]["path"],
                                                    out=out, gamma_max=gamma_max, max_length=max_length, force=True,
                                                    **VARIANTS[name][1]), log=log)
                info = {"export_s": time.perf_counter() - started, "parity": reports}
            info["export_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        info["checkpoints"], info["code"] = fingerprint, _code(name)
        info_file.write_text(json.dumps(info, indent=2, default=str) + "\n")
        dirs[name], infos[name] = out, info
    return {n: dirs[n] for n in names}, {n: infos[n] for n in names}, ckpts


def export_weights(export_dir: Path) -> dict:
    """{role: weights} as the export's manifest records them (fp32 where an older one does not say)."""
    m = json.loads((Path(export_dir) / "manifest.json").read_text())
    return {role: info.get("weights", m.get("dtype", "fp32")) for role, info in m["models"].items()}

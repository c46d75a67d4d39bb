"""`--shapes T:D --dtypes fp32,int8-draft,int8[,int8-wo]`: the weight variants of ONE pair of random-weight
real-shape checkpoints, exported side by side and measured in one interleaved run, with CTranslate2 greedy
(compute_type int8 and float32) on the same target checkpoint.

Variants (each its own export directory next to the fp32 one, under workdir/shapes/T_D-gG-lL/):

    fp32         export/              both models fp32 (what plain --shapes measures)
    int8-draft   export-int8-draft/   specdec-export --draft-dtype int8: int8 draft, fp32 target
    int8-wo-draft export-int8-wo-draft/ specdec-export --draft-dtype int8-wo: weight-only int8 draft, fp32 target
    int8         export-int8/         specdec-export --dtype int8: both int8 (onnxruntime.quantization's dynamic
                                      quantization, export/quantize.py)
    int8-wo      export-int8-wo/      benchmark-made, not a specdec-export option: the fp32 export's graphs through
                                      onnxruntime's weight-only MatMulNBitsQuantizer (bits 8, symmetric, blocks of
                                      WO_BLOCK along K, accuracy_level 4: int8 compute), the manifest's checksums
                                      rewritten; for comparing weight-only with dynamic int8 on the same weights
    int8-wo-fp32 export-int8-wo-fp32/ the same with accuracy_level 0 (fp32 compute on dequantized weights)

The same weights everywhere: the checkpoints are built once (build_checkpoint, seeds 1 and 2, deterministic) and
kept in checkpoints/ with their sha256 (fingerprint.json); every variant records the fingerprint it was exported
from, and the code its graphs depend on (export/quantize.py's sha256 for the int8 variants, the weight-only
settings for int8-wo), and is exported again when either does not match. An fp32 export cached before
fingerprints existed is kept only if its parity check against the (re)built checkpoints passes (max |dlogit| <=
1e-3: different weights fail by orders of magnitude).

One run, interleaved by rounds: every round runs each variant's cost probe (target step, draft step, verify of
1..gamma_max+1 tokens; the variant order rotates), then every engine's block of greedy generations (each variant at
gamma 0 and at the speculative gamma, CTranslate2 int8 and float32; one unmeasured call first, the block order
rotating). Per-call costs are the median over rounds of each round's median; ratios between variants are per
round, then the median. With random weights alpha is whatever two random models happen to agree on (reported as
tokens per target call), not a trained pair's: the speculative ms/token is this run's, and the speedup a trained
pair would see is Theorem 3.8's from the measured c.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from specdec.export import quantize
from specdec.runtime.core.errors import SpecdecError

# name -> (directory, ExportOptions dtype fields, or None for the benchmark-made weight-only variant)
VARIANTS = {
    "fp32": ("export", {"dtype": "fp32"}),
    "int8-draft": ("export-int8-draft", {"dtype": "fp32", "draft_dtype": "int8"}),
    "int8-wo-draft": ("export-int8-wo-draft", {"dtype": "fp32", "draft_dtype": "int8-wo"}),
    "int8": ("export-int8", {"dtype": "int8"}),
    "int8-wo": ("export-int8-wo", None),
    "int8-wo-fp32": ("export-int8-wo-fp32", None),
}
DEFAULT = ("fp32", "int8-draft", "int8")
WO_BITS, WO_BLOCK = quantize.WO_BITS, quantize.WO_BLOCK      # export/quantize.py's weight-only settings
# the weight-only variants' MatMulNBits accuracy_level: 4 computes in int8 (activations quantized per block of K
# at run time), 0 in fp32 (weights dequantized)
WO_ACCURACY = {"int8-wo": 4, "int8-wo-fp32": 0}
CT2_TYPES = ("int8", "float32")
GOALS = {"int8_target_step_speedup": 1.5, "int8_draft_c": 0.08, "specdec_int8_over_ct2_int8": 1.0}
ALPHA = 0.7                                   # the middle of the paper's 0.6-0.8, for the Theorem 3.8 column


def parse(text: str) -> list[str]:
    """--dtypes: comma-separated variant names; fp32 (the reference) is always measured, first."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad or not names:
        raise SpecdecError(f"--dtypes takes a comma-separated list of {', '.join(VARIANTS)} (got '{text}')",
                           "e.g. --dtypes fp32,int8-draft,int8")
    return list(dict.fromkeys(["fp32", *names]))


# -- the same checkpoints for every variant --------------------------------------------------------------------------
def _stamp(path: Path) -> str:
    files = sorted(p for p in path.iterdir() if p.is_file())
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


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
    """{role: {"path", "sha256"}}: the random checkpoints (seeds 1 and 2), built when missing, kept."""
    from .shapes import build_checkpoint

    record_file = ckpt / "fingerprint.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    out = {}
    for role, name, seed in (("target", target, 1), ("draft", draft, 2)):
        path = ckpt / name
        entry = record.get(role, {})
        if not ((path / "config.json").is_file() and entry.get("stamp") == _stamp(path)
                and entry.get("name") == name and entry.get("seed") == seed):
            if not (path / "config.json").is_file():
                log(f"building random-initialised {name} (official configuration, seed {seed}) in {path}")
                build_checkpoint(name, path, seed=seed)
            entry = {"name": name, "seed": seed, "sha256": weights_sha256(path), "stamp": _stamp(path)}
            record[role] = entry
            record_file.write_text(json.dumps(record, indent=2) + "\n")
        out[role] = {"path": str(path), "name": name, "seed": seed, "sha256": entry["sha256"]}
    return out


def _fingerprint(ckpts: dict) -> dict:
    return {role: c["sha256"] for role, c in ckpts.items()}


# -- the variants' exports -----------------------------------------------------------------------------------------
def _info_file(root: Path, name: str) -> Path:
    directory = VARIANTS[name][0]
    return root / ("export-info.json" if directory == "export" else f"{directory}-info.json")


def _usable(out: Path) -> bool:
    from specdec.runtime.loading.manifest import load_manifest

    if not (out / "manifest.json").is_file():
        return False
    try:
        load_manifest(out, verify_checksums=False)
        return True
    except SpecdecError:
        return False


def _parity_matches(out: Path, ckpts: dict, gamma_max: int, log) -> bool:
    """Whether an fp32 export (cached without a fingerprint) was made from these checkpoints: its parity check
    against them (within 4x PyTorch fp32's own error from float64; other weights miss by orders of magnitude)."""
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


def _export(name: str, out: Path, ckpts: dict, gamma_max: int, max_length: int, log) -> dict:
    from specdec.export.pair import ExportOptions, export_pair

    started = time.perf_counter()
    reports = export_pair(ExportOptions(target=ckpts["target"]["path"], draft=ckpts["draft"]["path"], out=out,
                                        gamma_max=gamma_max, max_length=max_length, force=True,
                                        **VARIANTS[name][1]), log=log)
    return {"export_s": time.perf_counter() - started, "parity": reports}


def weight_only_export(src: Path, dst: Path, log=print, accuracy_level: int = 4) -> dict:
    """A copy of the export `src` whose graphs have weight-only int8 MatMuls (export/quantize.py's
    `quantize_weight_only`, the one `--draft-dtype int8-wo` uses, here for both models and any accuracy_level), its
    manifest's `weights` and checksums updated. Same graph inputs and outputs, so the runtime loads it as is."""
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
        manifest["benchmark_variant"] = {"made_by": "specdec.bench.variants.weight_only_export", "from": str(src),
                                         "quantizer": "onnxruntime.quantization.matmul_nbits_quantizer."
                                                      "MatMulNBitsQuantizer", "bits": WO_BITS,
                                         "block_size": WO_BLOCK, "symmetric": True,
                                         "accuracy_level": accuracy_level}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"export_s": time.perf_counter() - started, "weight_only": manifest["benchmark_variant"]}


def ensure_variants(target: str, draft: str, workdir: Path, gamma_max: int, max_length: int, names, log=print):
    """({variant: export dir}, {variant: info}, checkpoints): each variant exported once from the same kept
    checkpoints and cached; a cached one made from other weights is exported again."""
    from .shapes import pair_root

    root = pair_root(workdir, target, draft, gamma_max, max_length)
    ckpts = ensure_checkpoints(target, draft, root / "checkpoints", log)
    fingerprint = _fingerprint(ckpts)
    dirs, infos = {}, {}
    for name in sorted(names, key=lambda n: n != "fp32"):          # int8-wo is made from the fp32 export
        out = root / VARIANTS[name][0]
        info_file = _info_file(root, name)
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
            if name in WO_ACCURACY:
                info = {**weight_only_export(dirs["fp32"], out, log, accuracy_level=WO_ACCURACY[name]),
                        "from_fp32_created": _created(dirs["fp32"])}
            else:
                info = _export(name, out, ckpts, gamma_max, max_length, log)
            info["export_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        info["checkpoints"], info["code"] = fingerprint, _code(name)
        info_file.write_text(json.dumps(info, indent=2, default=str) + "\n")
        dirs[name], infos[name] = out, info
    return {n: dirs[n] for n in names}, {n: infos[n] for n in names}, ckpts


def _code(name: str) -> dict:
    """What a variant's graphs depend on besides the weights: export/quantize.py for specdec-export's int8 variants,
    the weight-only settings for int8-wo; a cached variant made with other code is exported again."""
    if name in ("int8", "int8-draft", "int8-wo-draft"):
        import specdec.export.quantize as quantize

        return {"export/quantize.py": hashlib.sha256(Path(quantize.__file__).read_bytes()).hexdigest()}
    if name in WO_ACCURACY:
        return {"weight_only": {"bits": WO_BITS, "block_size": WO_BLOCK, "accuracy_level": WO_ACCURACY[name]}}
    return {}


def _created(export_dir: Path) -> str | None:
    try:
        return json.loads((Path(export_dir) / "manifest.json").read_text()).get("created")
    except (OSError, ValueError):
        return None


def export_weights(export_dir: Path) -> dict:
    """{role: weights} as the export's manifest records them (fp32 when an older manifest does not say)."""
    m = json.loads((Path(export_dir) / "manifest.json").read_text())
    return {role: info.get("weights", m.get("dtype", "fp32")) for role, info in m["models"].items()}


# -- the interleaved measurement -----------------------------------------------------------------------------------
LOOP_STATS = ("target_s", "draft_s", "encoder_s", "target_calls", "draft_calls", "proposed", "accepted",
              "new_tokens")


def loop_summary(parts: dict) -> dict:
    """The timed runs' Stats summed: tokens per target call, accepted/proposed, ms per target and draft call."""
    calls = max(parts["target_calls"], 1)
    return {"tokens_per_target_call": parts["new_tokens"] / calls,
            "accepted_over_proposed": parts["accepted"] / parts["proposed"] if parts["proposed"] else None,
            "target_ms_per_call": 1000.0 * parts["target_s"] / calls,
            "draft_ms_per_call": 1000.0 * parts["draft_s"] / parts["draft_calls"] if parts["draft_calls"] else None,
            **{k: parts[k] for k in LOOP_STATS}}


class _Spec:
    """specdec greedy at one gamma on one variant's decoder; collects Stats for the loop's own split."""

    def __init__(self, variant: str, dec, gamma: int):
        self.variant, self.dec, self.gamma = variant, dec, gamma
        self.name = f"{variant} g={gamma}"
        self.parts = {k: 0 for k in LOOP_STATS}

    def run(self, ids, max_new_tokens, record: bool = False):
        res = self.dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft="draft", gamma=self.gamma,
                                temperature=0.0)
        if record:
            for key in self.parts:
                self.parts[key] += getattr(res.stats, key)
        return list(res.token_ids)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(decs: dict, ct2: dict, prompts, gamma: int, max_new_tokens: int, rounds: int, probe_repeats: int,
            past: int, threads: int = 0, progress=None) -> dict:
    """The interleaved run. `decs`: {variant: SpeculativeDecoder}; `ct2`: {compute_type: peers.CT2Engine}."""
    from . import costs

    per_round = max(1, -(-probe_repeats // rounds))
    gamma_max = min(d.gamma_max for d in decs.values())
    counts = range(1, gamma_max + 2)
    engines = [_Spec(v, d, g) for v, d in decs.items() for g in dict.fromkeys((0, gamma))]
    engines += [ct2[t] for t in ct2]
    probes = {v: [] for v in decs}
    times = {e.name: [] for e in engines}

    # first pass: every engine's greedy tokens (correctness and warm-up)
    outputs = {e.name: [e.run(p.ids, max_new_tokens) for p in prompts] for e in engines}
    if progress:
        progress.update(1)
    names = list(decs)
    for r in range(rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            p = costs.probe(decs[v], prompts[0].ids, past, repeats=per_round, warmup=2, counts=counts,
                            threads=threads, head_temperatures=(), head_guesses=[0])
            probes[v].append({"target_step_ms": p["target_step_ms"], "draft_step_ms": p["draft_step_ms"],
                              "verify_ms": p["verify_ms"], "past_length": p["past_length"]})
            if progress:
                progress.update(1)
        for e in engines[r % len(engines):] + engines[:r % len(engines)]:
            e.run(prompts[0].ids, max_new_tokens)          # unmeasured: wakes this engine's threads
            seconds, tokens = 0.0, 0
            for p in prompts:
                started = time.perf_counter()
                out = e.run(p.ids, max_new_tokens, record=True) if isinstance(e, _Spec) else \
                    e.run(p.ids, max_new_tokens)
                seconds += time.perf_counter() - started
                tokens += len(out)
            times[e.name].append((seconds, tokens))
            if progress:
                progress.update(1)
    loops = {e.name: loop_summary(e.parts) for e in engines if isinstance(e, _Spec)}
    return {"probes": probes, "times": times, "outputs": outputs, "engines": engines, "gamma": gamma, "loops": loops,
            "gamma_max": gamma_max, "probe_repeats_per_round": per_round}


def summarize(raw: dict, weights: dict) -> dict:
    """Rows per variant and CT2 compute type, the per-round ratios and the verdicts against GOALS."""
    from . import theory

    probes, times, outputs, gamma = raw["probes"], raw["times"], raw["outputs"], raw["gamma"]
    rounds = len(next(iter(probes.values())))
    ms_tok = {name: [1000.0 * s / max(n, 1) for s, n in t] for name, t in times.items()}
    ref_tokens = outputs["fp32 g=0"]

    def per_round(fn):
        return [fn(i) for i in range(rounds)]

    def step(v, i):
        return probes[v][i]["target_step_ms"]

    variants = {}
    for v, rows in probes.items():
        t_step = per_round(lambda i: rows[i]["target_step_ms"])
        d_step = per_round(lambda i: rows[i]["draft_step_ms"])
        c = per_round(lambda i: rows[i]["draft_step_ms"] / rows[i]["target_step_ms"])
        verify = {k: _median([rows[i]["verify_ms"][k] / rows[i]["target_step_ms"] for i in range(rounds)])
                  for k in rows[0]["verify_ms"]}
        g0, gs = f"{v} g=0", f"{v} g={gamma}"
        c_med = _median(c)
        gm = max(int(k) for k in verify) - 1
        best_g, best_s = theory.best_gamma(ALPHA, c_med, gm)
        with_costs = {g: theory.speedup_with_costs(ALPHA, g, c_med, verify[str(g + 1)]) for g in range(1, gm + 1)}
        g_cost = max(with_costs, key=with_costs.get)
        variants[v] = {
            "weights": {"target": weights[v]["target"], "draft": weights[v]["draft"]},
            "target_step_ms": _spread(t_step), "draft_step_ms": _spread(d_step), "c": _spread(c),
            "verify_ratio": verify,
            "target_step_speedup_vs_fp32": _spread([step("fp32", i) / step(v, i) for i in range(rounds)]),
            "target_only_ms_per_token": _spread(ms_tok[g0]),
            "speculative_ms_per_token": _spread(ms_tok[gs]) if gamma and gs in ms_tok else None,
            "target_only_vs_fp32": _spread([a / b for a, b in zip(ms_tok["fp32 g=0"], ms_tok[g0])]),
            "theorem_3_8": {"alpha": ALPHA, "best_gamma": best_g, "speedup": best_s,
                            "with_verify_cost_best_gamma": g_cost, "with_verify_cost": with_costs[g_cost]},
            "same_tokens_as_fp32_target_only": {
                "gamma0": sum(a == b for a, b in zip(outputs[g0], ref_tokens)),
                "speculative": sum(a == b for a, b in zip(outputs[gs], ref_tokens)) if gamma else None,
                "prompts": len(ref_tokens)},
            "speculative_equals_own_target_only": (sum(a == b for a, b in zip(outputs[gs], outputs[g0]))
                                                   if gamma else None),
            "target_only_loop": raw["loops"][g0],
            "speculative_loop": raw["loops"][gs] if gamma else None,
        }
    ct2 = {}
    for e in raw["engines"]:
        if isinstance(e, _Spec):
            continue
        ct2[e.compute_type] = {"name": e.name, "ms_per_token": _spread(ms_tok[e.name]),
                               "same_tokens_as_fp32_target_only": sum(a == b for a, b in
                                                                       zip(outputs[e.name], ref_tokens)),
                               "same_tokens_as_own_variant": None, "prompts": len(ref_tokens)}
        own = {"int8": "int8 g=0", "float32": "fp32 g=0"}.get(e.compute_type)
        if own in outputs:
            ct2[e.compute_type]["same_tokens_as_own_variant"] = sum(a == b for a, b in zip(outputs[e.name],
                                                                                           outputs[own]))
        for v in probes:
            ct2[e.compute_type][f"ratio_{v}_target_only_over_this"] = _spread(
                [a / b for a, b in zip(ms_tok[f"{v} g=0"], ms_tok[e.name])])
    return {"variants": variants, "ct2": ct2, "verdicts": verdicts(variants, ct2), "rounds": rounds}


def verdicts(variants: dict, ct2: dict) -> dict:
    out = {}
    if "int8" in variants:
        s = variants["int8"]["target_step_speedup_vs_fp32"]["median"]
        out["int8_target_step_speedup"] = {"value": s, "goal": f">= {GOALS['int8_target_step_speedup']}",
                                           "met": s >= GOALS["int8_target_step_speedup"]}
    for name, key in (("int8-draft", "int8_draft_c"), ("int8-wo-draft", "int8_wo_draft_c")):
        if name in variants:
            c = variants[name]["c"]["median"]
            out[key] = {"value": c, "goal": f"<= {GOALS['int8_draft_c']}", "met": c <= GOALS["int8_draft_c"],
                        "fp32_c": variants["fp32"]["c"]["median"], "variant": name}
    if "int8" in variants and "int8" in ct2:
        r = ct2["int8"]["ratio_int8_target_only_over_this"]["median"]
        out["specdec_int8_over_ct2_int8"] = {"value": r, "goal": "<= 1.0 (specdec at most equal)",
                                             "met": r <= GOALS["specdec_int8_over_ct2_int8"],
                                             "specdec_ms_per_token": variants["int8"]["target_only_ms_per_token"]
                                             ["median"], "ct2_ms_per_token": ct2["int8"]["ms_per_token"]["median"]}
    for name in WO_ACCURACY:
        if name in variants and "int8" in variants:
            wo = variants[name]["target_step_ms"]["median"]
            dyn = variants["int8"]["target_step_ms"]["median"]
            out[f"{name}_vs_dynamic_target_step"] = {
                "variant": name, "accuracy_level": WO_ACCURACY[name], "dynamic_ms": dyn, "weight_only_ms": wo,
                "faster": "dynamic" if dyn <= wo else "weight-only", "weight_only_over_dynamic": wo / dyn}
    return out


# -- text --------------------------------------------------------------------------------------------------------
def _ms(s: dict | None, fmt: str = ".2f") -> str:
    if not s:
        return "-"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})" if s["n"] > 1 else f"{s['median']:{fmt}}"


def table_lines(result: dict, gamma: int) -> tuple[list[str], list[list[str]]]:
    headers = ["variant", "weights T/D", "target step ms", "vs fp32", "draft step ms", "c", "verify 5 ×",
               "target-only ms/tok", f"spec ms/tok (γ={gamma})", "tok/call", f"Thm3.8 α={ALPHA}", "same tokens"]
    lines = []
    for v, r in result["variants"].items():
        same = r["same_tokens_as_fp32_target_only"]
        v5 = r["verify_ratio"].get("5")
        lines.append([v, f"{r['weights']['target']}/{r['weights']['draft']}", _ms(r["target_step_ms"]),
                      f"{r['target_step_speedup_vs_fp32']['median']:.2f}×", _ms(r["draft_step_ms"]),
                      f"{r['c']['median']:.3f}", "-" if v5 is None else f"{v5:.2f}",
                      _ms(r["target_only_ms_per_token"]), _ms(r["speculative_ms_per_token"]),
                      f"{r['speculative_loop']['tokens_per_target_call']:.2f}" if r["speculative_loop"] else "-",
                      f"{r['theorem_3_8']['speedup']:.2f} (γ={r['theorem_3_8']['best_gamma']})",
                      f"g0 {same['gamma0']}/{same['prompts']}"
                      + (f", spec {same['speculative']}/{same['prompts']}, spec=own g0 "
                         f"{r['speculative_equals_own_target_only']}/{same['prompts']}"
                         if same["speculative"] is not None else "")])
    for t, r in result["ct2"].items():
        lines.append([f"ctranslate2 {t}", "target only", "-", "-", "-", "-", "-", _ms(r["ms_per_token"]), "-", "-",
                      "-",
                      f"{r['same_tokens_as_fp32_target_only']}/{r['prompts']}"])
    return headers, lines


def verdict_lines(result: dict) -> list[str]:
    v = result["verdicts"]
    out = []
    if "int8_target_step_speedup" in v:
        e = v["int8_target_step_speedup"]
        out.append(f"int8 target step: {e['value']:.2f}× faster than fp32 (goal >= 1.5×): "
                   f"{'met' if e['met'] else 'MISSED'}")
    for key, kind in (("int8_draft_c", "an int8"), ("int8_wo_draft_c", "a weight-only int8")):
        if key in v:
            e = v[key]
            out.append(f"c with {kind} draft ({e['variant']}, fp32 target): {e['value']:.3f} (goal <= 0.08; fp32 "
                       f"draft in this run {e['fp32_c']:.3f}): {'met' if e['met'] else 'MISSED'}")
    if "specdec_int8_over_ct2_int8" in v:
        e = v["specdec_int8_over_ct2_int8"]
        out.append(f"specdec int8 target-only {e['specdec_ms_per_token']:.2f} ms/token vs CTranslate2 int8 greedy "
                   f"{e['ct2_ms_per_token']:.2f}: {e['value']:.2f}× CTranslate2's time (goal <= 1.0): "
                   f"{'met' if e['met'] else 'MISSED'}")
    elif "int8" in result["variants"]:
        out.append("specdec int8 vs CTranslate2 int8: not measured (CTranslate2 missing or failed)")
    for name in WO_ACCURACY:
        e = v.get(f"{name}_vs_dynamic_target_step")
        if e:
            out.append(f"weight-only ({name}, accuracy_level {e['accuracy_level']}) vs dynamic int8 target step: "
                       f"{e['weight_only_ms']:.2f} vs {e['dynamic_ms']:.2f} ms "
                       f"({e['weight_only_over_dynamic']:.2f}×): {e['faster']} is faster")
    return out


def log_stderr(message: str) -> None:
    print(message, file=sys.stderr)

"""Real shapes (`specdec-bench shapes T:D`, and `dtypes`, `beams --shapes`): random-initialised T5 v1.0 models with
the official t5-small/base/large configurations, exported once (cached under the work directory) and measured for
their costs only: random weights make the acceptance rate meaningless, so the speedup is Theorem 3.8's prediction
from the measured c for the paper's alpha range (0.6-0.8), and with the measured verify cost and host time."""

from __future__ import annotations

import gc
import json
import shutil
import time
from pathlib import Path

# the official shapes live with the recipe that widens the bundled pair to them
from specdec.models.shapes import COMMON, CONFIGS, T5_PADDED_ROWS
from specdec.runtime.core.errors import SpecdecError

PAPER_ALPHAS = (0.6, 0.7, 0.8)


def parse_pair(text: str) -> tuple[str, str]:
    parts = text.split(":")
    if len(parts) != 2 or not all(p in CONFIGS for p in parts):
        raise SpecdecError(f"TARGET:DRAFT names two of {', '.join(CONFIGS)} (got '{text}')", "e.g. t5-large:t5-small")
    return parts[0], parts[1]


def t5_config(name: str):
    from transformers import T5Config

    return T5Config(**COMMON, **CONFIGS[name], num_decoder_layers=CONFIGS[name]["num_layers"])


def build_checkpoint(name: str, path: Path, seed: int) -> Path:
    """A random-initialised model saved like a real checkpoint, with a word-level tokenizer (the export wants a fast
    one shared by target and draft) of the real layout: the last 28 rows padded."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(t5_config(name)).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    del model
    gc.collect()
    words = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, COMMON["vocab_size"] - T5_PADDED_ROWS)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(path))
    return path


def pair_root(workdir: Path, target: str, draft: str, gamma_max: int, max_length: int) -> Path:
    """The pair's cache (export/, checkpoints/, the --dtypes variants)."""
    return Path(workdir) / "shapes" / f"{target}_{draft}-g{gamma_max}-l{max_length}"


def ensure_export(target: str, draft: str, workdir: Path, gamma_max: int, max_length: int,
                  keep_checkpoints: bool = False, log=print, build=None,
                  skip_check: str = "") -> tuple[Path, dict | None]:
    """(export dir, its info), made once and cached. `build(folder)` writes both checkpoints there and returns their
    dirs (default: the T5 pair's); `skip_check`: why the parity check is left out."""
    from specdec.runtime import load_manifest

    root = pair_root(workdir, target, draft, gamma_max, max_length)
    out, info_file = root / "export", root / "export-info.json"
    if (out / "manifest.json").is_file():
        try:
            load_manifest(out, verify_checksums=False)
            log(f"using the cached export in {out}")
            return out, json.loads(info_file.read_text()) if info_file.is_file() else None
        except SpecdecError:
            log(f"the cached export in {out} is unusable: exporting again")
    from specdec.export.pipeline import ExportOptions, export_pair

    ckpt = root / "checkpoints"
    if build is None:
        log(f"building random-initialised {target} and {draft} (official configurations) in {ckpt}")
        tdir, ddir = build_checkpoint(target, ckpt / target, seed=1), build_checkpoint(draft, ckpt / draft, seed=2)
    else:
        tdir, ddir = build(ckpt)
    started = time.perf_counter()
    reports = export_pair(ExportOptions(target=str(tdir), draft=str(ddir), out=out, gamma_max=gamma_max,
                                        max_length=max_length, dtype="fp32", force=True, skip_check=skip_check),
                          log=log)
    info = {"export_s": time.perf_counter() - started, "parity": {"skipped": skip_check} if skip_check else reports,
            "export_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}
    info_file.write_text(json.dumps(info, indent=2, default=str) + "\n")
    if not keep_checkpoints:
        shutil.rmtree(ckpt, ignore_errors=True)
    gc.collect()
    return out, info


def analyse(probe: dict, runs: dict, gamma_max: int, alphas) -> dict:
    """Theorem 3.8, and with the measured verify cost and host time, per alpha: the draw's sampling is inside c and
    accept/residual inside the verify ratio (fused runs), so the overhead per iteration is the host time alone."""
    from ..common import theory

    c, step = probe["c"], probe["target_step_ms"]
    host0 = runs["0"]["host_ms_per_iteration"]
    host_spec = max((r["host_ms_per_iteration"] for g, r in runs.items() if g != "0"), default=host0)
    predictions, best = {}, {}
    for alpha in alphas:
        curve = {str(g): {"theorem_3_8": theory.predicted_speedup(alpha, g, c),
                          "with_costs": theory.speedup_with_costs(alpha, g, c, probe["verify_ratio"][str(g + 1)],
                                                                  host_spec / step, host0 / step)}
                 for g in range(1, gamma_max + 1)}
        predictions[str(alpha)] = curve
        g_star, s_star = theory.best_gamma(alpha, c, gamma_max)
        g_cost = max(curve, key=lambda g: curve[g]["with_costs"])
        best[str(alpha)] = {"theorem_best_gamma": g_star, "theorem_best_speedup": s_star,
                            "with_costs_best_gamma": int(g_cost),
                            "with_costs_best_speedup": curve[g_cost]["with_costs"]}
    return {"predictions": predictions, "best": best}


def run_generations(dec, prompts, gammas, max_new_tokens: int, repeats: int, progress, probe, base,
                    draft_encoder: bool) -> dict:
    """The real loop on random prompts (temperature 0), per gamma. `draft_encoder`: the draft runs an encoder of its
    own (not a Whisper draft that keeps the target's)."""
    from ..sweep.measure import run_sweep
    from ..sweep.summary import head_ms_per_token, ort_runs_per_iteration

    cells, _, acceptance = run_sweep(dec, prompts, gammas, [0.0], max_new_tokens, repeats, progress, base=base)
    out = {}
    for (t, f, g), cell in cells.items():          # one temperature, base's own filter: one cell per gamma
        p = cell.pooled()
        iters, tokens = max(p["target_calls"], 1), max(p["new_tokens"], 1)
        iteration_ms = 1000.0 * (p["total_s"] - p["encoder_s"]) / iters
        host = 1000.0 * p["host_s"] / iters
        head = head_ms_per_token(probe, p, g, t, *f, acceptance[(t, f, g)].runs_by_guesses)
        host_tok = 1000.0 * p["host_s"] / tokens
        out[str(g)] = {"iterations": p["target_calls"], "new_tokens": p["new_tokens"],
                       "alpha_meaningless": p["accepted"] / p["proposed"] if p["proposed"] else None,
                       "iteration_ms": iteration_ms, "host_ms_per_iteration": host,
                       "host_fraction_of_iteration": host / iteration_ms if iteration_ms else 0.0,
                       "target_ms_per_iteration": 1000.0 * p["target_s"] / iters,
                       "draft_ms_per_iteration": 1000.0 * p["draft_s"] / iters,
                       "ort_runs_per_iteration": ort_runs_per_iteration(p, g, draft_encoder),
                       "encoder_ms_per_request": 1000.0 * p["encoder_s"] / max(p["requests"], 1),
                       "host_ms_per_token": host_tok, "head_ms_per_token_estimated": head,
                       "sampling_host_ms_per_token": host_tok + head if head is not None else None,
                       "ms_per_token": 1000.0 * p["total_s"] / tokens}
    return out


def acceptance(probe: dict, runs: dict) -> dict:
    """The real-shape criteria: the verify ratio of 5 tokens at most 1.5 (beside the loop's own: gamma = 4's target
    time per iteration over gamma = 0's) and the host time at most 5 % of an iteration."""
    v5 = probe["verify_ratio"].get("5")
    in_loop = None
    if "4" in runs and "0" in runs and runs["0"]["target_ms_per_iteration"]:
        in_loop = runs["4"]["target_ms_per_iteration"] / runs["0"]["target_ms_per_iteration"]
    worst_host = max(r["host_fraction_of_iteration"] for r in runs.values())
    return {"verify_5_over_step": v5, "verify_5_ok": v5 is not None and v5 <= 1.5,
            "verify_5_over_step_in_loop": in_loop, "host_fraction_worst": worst_host, "host_ok": worst_host <= 0.05}

"""`specdec-bench --shapes T:D --dtypes ...` on tiny stand-in configurations, and the weight-only variant on the tiny
export. Structure only: the variants share one pair of checkpoints, every number is there and finite, greedy
exactness holds where it must, caches are reused, a cached export of other weights is exported again, CTranslate2
rows appear when it is installed (skipped otherwise). No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from benchrun import run
from specdec.bench.dtypes import variants
from specdec.bench.shapes import measure as shapes

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
HAS_WO = importlib.util.find_spec("onnx_ir") is not None      # onnxruntime's MatMulNBitsQuantizer imports it


@pytest.fixture
def tiny_shapes(monkeypatch):
    monkeypatch.setitem(shapes.CONFIGS, "tiny-t", dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2))
    monkeypatch.setitem(shapes.CONFIGS, "tiny-d", dict(d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=1))
    monkeypatch.setitem(shapes.COMMON, "vocab_size", 64)


def argv_for(tmp_path, dtypes: str, name: str = "d"):
    return ["dtypes", "tiny-t:tiny-d", "--dtypes", dtypes, "--work-dir", tmp_path / "work", "--gamma-max", "4",
            "--max-length", "32", "--max-new-tokens", "5", "--num-prompts", "2", "--source-length", "6",
            "--past", "8", "--probe-repeats", "2", "--repeat", "2", "--json", tmp_path / f"{name}.json",
            "--markdown", tmp_path / f"{name}.md", "--no-progress"]


def finite_spread(s):
    return s is not None and all(math.isfinite(s[k]) and s[k] > 0 for k in ("median", "min", "max"))


def test_dtypes_on_tiny_configs(tiny_shapes, tmp_path):
    dtypes = "int8-draft,int8-wo-draft,int8" + (",int8-wo,int8-wo-fp32" if HAS_WO else "")
    code, out, err = run(argv_for(tmp_path, dtypes))
    assert code == 0, err
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["mode"] == "dtypes" and report["settings"]["gamma"] == 4 and report["settings"]["rounds"] == 2
    names = ["fp32", "int8-draft", "int8-wo-draft", "int8"] + (["int8-wo", "int8-wo-fp32"] if HAS_WO else [])
    assert report["settings"]["dtypes"] == names and list(report["variants"]) == names     # fp32 added, first
    root = tmp_path / "work" / "shapes" / "tiny-t_tiny-d-g4-l32"
    assert (root / "checkpoints" / "tiny-t" / "config.json").is_file()          # kept: CTranslate2 converts it
    fingerprint = {role: report["checkpoints"][role]["sha256"] for role in ("target", "draft")}
    for name in names:                                 # one pair of checkpoints behind every variant
        assert report["export_info"][name]["checkpoints"] == fingerprint, name
        assert report["exports"][name] == str(root / variants.VARIANTS[name][0])
    weights = {n: r["weights"] for n, r in report["variants"].items()}
    assert weights["fp32"] == {"target": "fp32", "draft": "fp32"}
    assert weights["int8-draft"] == {"target": "fp32", "draft": "int8"}
    assert weights["int8-wo-draft"] == {"target": "fp32", "draft": "int8-wo"}
    assert weights["int8"] == {"target": "int8", "draft": "int8"}
    if HAS_WO:
        assert weights["int8-wo"] == weights["int8-wo-fp32"] == {"target": "int8-wo", "draft": "int8-wo"}
        levels = {n: report["export_info"][n]["weight_only"]["accuracy_level"] for n in ("int8-wo", "int8-wo-fp32")}
        assert levels == {"int8-wo": 4, "int8-wo-fp32": 0}
    for name, r in report["variants"].items():
        for key in ("target_step_ms", "draft_step_ms", "c", "target_step_speedup_vs_fp32",
                    "target_only_ms_per_token", "speculative_ms_per_token", "target_only_vs_fp32"):
            assert finite_spread(r[key]), (name, key, r[key])
            assert r[key]["n"] == 2, (name, key)                        # one value per round
        assert set(r["verify_ratio"]) == {"1", "2", "3", "4", "5"} and r["verify_ratio"]["1"] == pytest.approx(1.0)
        same = r["same_tokens_as_fp32_target_only"]
        assert same["prompts"] == 2
        assert 0 <= r["speculative_equals_own_target_only"] <= 2, name
    # greedy speculative decoding gives the target's own greedy tokens: fp32 targets, and int8 ones too since
    # export/quantize.py scales activations per token (a verify pass gives each position a one-token step's
    # logits), and weight-only with fp32 compute. Not asserted for int8-wo: MatMulNBits' int8 compute path gives a
    # verify pass slightly different logits from one-token steps (benchmarks/README.md, the "int8" sections)
    for name in ("fp32", "int8-draft", "int8-wo-draft", "int8") + (("int8-wo-fp32",) if HAS_WO else ()):
        assert report["variants"][name]["speculative_equals_own_target_only"] == 2, name
        assert r["theorem_3_8"]["speedup"] >= 1.0
        assert r["target_only_loop"]["tokens_per_target_call"] == pytest.approx(1.0)    # one token per step
        loop = r["speculative_loop"]
        assert 1.0 <= loop["tokens_per_target_call"] <= 5.0 and loop["draft_calls"] > 0
        assert loop["target_ms_per_call"] > 0 and loop["draft_ms_per_call"] > 0
    assert report["variants"]["fp32"]["target_step_speedup_vs_fp32"]["median"] == pytest.approx(1.0)
    # the int8-draft variant's target is the fp32 target: the same greedy tokens, with and without speculation
    same = report["variants"]["int8-draft"]["same_tokens_as_fp32_target_only"]
    assert same["gamma0"] == 2 and same["speculative"] == 2
    assert len(report["per_round"]["probes"]["int8"]) == 2
    v = report["verdicts"]
    assert isinstance(v["int8_target_step_speedup"]["met"], bool) and isinstance(v["int8_draft_c"]["met"], bool)
    assert v["int8_draft_c"]["value"] == report["variants"]["int8-draft"]["c"]["median"]
    assert v["int8_wo_draft_c"]["value"] == report["variants"]["int8-wo-draft"]["c"]["median"]
    if HAS_WO:
        for name, level in (("int8-wo", 4), ("int8-wo-fp32", 0)):
            e = v[f"{name}_vs_dynamic_target_step"]
            assert e["faster"] in ("dynamic", "weight-only") and e["accuracy_level"] == level
    if HAS_CT2:
        status = report["ct2_status"]
        assert set(status) == {"int8", "float32"}
        assert all(s == "ok" or s.startswith("error") for s in status.values()), status
        for t, s in status.items():
            if s == "ok":
                row = report["ct2"][t]
                assert finite_spread(row["ms_per_token"]) and row["prompts"] == 2
                assert finite_spread(row["ratio_fp32_target_only_over_this"])
        if status["int8"] == "ok":
            assert isinstance(v["specdec_int8_over_ct2_int8"]["met"], bool)
            assert "CTranslate2 int8 greedy" in out
    else:
        assert report["ct2"] == {} and "specdec_int8_over_ct2_int8" not in v
    assert "int8 target step:" in out and "c with an int8 draft" in out and "c with a weight-only int8 draft" in out
    md = (tmp_path / "d.md").read_text()
    assert "| variant |" in md and "int8-draft" in md and "int8 target step:" in md

    code, out, err = run(argv_for(tmp_path, "int8", "again"))               # every export comes from the cache
    assert code == 0, err
    assert "using the cached fp32 export" in err and "using the cached int8 export" in err
    assert "exporting" not in err and "building" not in err

    # an int8 export made by another export/quantize.py is exported again; the fp32 one does not depend on it
    info_file = root / "export-int8-info.json"
    info = json.loads(info_file.read_text())
    assert set(info["code"]) == {"export/quantize.py"}
    info["code"]["export/quantize.py"] = "0" * 64
    info_file.write_text(json.dumps(info))
    code, out, err = run(argv_for(tmp_path, "int8", "third"))
    assert code == 0, err
    assert "using the cached fp32 export" in err and "exporting the int8 variant" in err


def test_dtypes_reexports_a_cached_export_of_other_weights(tiny_shapes, tmp_path, monkeypatch):
    """An fp32 export cached by plain --shapes (no fingerprint, checkpoints deleted) is kept when its parity check
    against the rebuilt checkpoints passes, and exported again when it was made from other weights."""
    work = tmp_path / "work"
    shapes.ensure_export("tiny-t", "tiny-d", work, 4, 32, log=lambda m: None)
    out_dir = shapes.pair_root(work, "tiny-t", "tiny-d", 4, 32)
    assert not (out_dir / "checkpoints").exists()
    logs = []
    dirs, infos, ckpts = variants.ensure_variants("tiny-t", "tiny-d", work, 4, 32, ["fp32"], log=logs.append)
    assert any("same weights" in m for m in logs) and any("using the cached fp32 export" in m for m in logs)
    assert infos["fp32"]["checkpoints"]["target"] == ckpts["target"]["sha256"]

    # the same pair cached from other random weights (seed 99 instead of 1 and 2)
    other = tmp_path / "other"
    real_build = shapes.build_checkpoint
    monkeypatch.setattr(shapes, "build_checkpoint", lambda name, path, seed: real_build(name, path, seed=99))
    shapes.ensure_export("tiny-t", "tiny-d", other, 4, 32, log=lambda m: None)
    monkeypatch.setattr(shapes, "build_checkpoint", real_build)
    logs = []
    dirs, infos, ckpts2 = variants.ensure_variants("tiny-t", "tiny-d", other, 4, 32, ["fp32"], log=logs.append)
    assert any("DIFFERENT weights" in m for m in logs) and any("exporting the fp32 variant" in m for m in logs)
    assert ckpts2["target"]["sha256"] == ckpts["target"]["sha256"]        # seed 1 again: the same weights
    assert infos["fp32"]["checkpoints"]["target"] == ckpts["target"]["sha256"]


def test_checkpoints_are_deterministic(tiny_shapes, tmp_path):
    a = shapes.build_checkpoint("tiny-t", tmp_path / "a", seed=1)
    b = shapes.build_checkpoint("tiny-t", tmp_path / "b", seed=1)
    c = shapes.build_checkpoint("tiny-t", tmp_path / "c", seed=2)
    assert variants.weights_sha256(a) == variants.weights_sha256(b) != variants.weights_sha256(c)


@pytest.mark.skipif(not HAS_WO, reason="onnx-ir (needed by onnxruntime's MatMulNBitsQuantizer) is not installed")
def test_weight_only_copy_of_the_tiny_export(tiny_export, tmp_path):
    import onnx

    from specdec.runtime import SpeculativeDecoder
    from specdec.runtime.loading.manifest import load_manifest

    out = tmp_path / "wo"
    info = variants.weight_only_export(tiny_export, out, log=lambda m: None)
    assert info["weight_only"]["bits"] == 8
    load_manifest(out)                                           # the rewritten checksums verify
    assert variants.export_weights(out) == {"target": "int8-wo", "draft": "int8-wo"}
    assert variants.export_weights(tiny_export) == {"target": "fp32", "draft": "fp32"}
    ops = {n.op_type for n in onnx.load(str(out / "target" / "decoder.onnx")).graph.node}
    assert "MatMulNBits" in ops
    dec = SpeculativeDecoder.load(out, provider="cpu")
    plain = dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=6, draft="none", temperature=0.0)
    spec = dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=6, draft="draft", gamma=3, temperature=0.0)
    assert list(spec.token_ids) == list(plain.token_ids)
    assert not (tmp_path / "wo.partial").exists()


@pytest.mark.parametrize("argv, message", [
    (["dtypes", "--export", "x", "--dtypes", "int8"], "dtypes compares the weight variants of real-shape models"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int4"], "--dtypes takes a comma-separated list"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--num-beams", "2"], "--num-beams does not apply to dtypes"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--temperature", "1"], "temperature 0 only"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--gamma", "2,4"], "one speculative gamma"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--plot", "x.png"], "--plot does not apply"),
    (["dtypes", "t5-large:t5-small"], "--dtypes"),                                      # required
])
def test_dtypes_argument_errors(argv, message):
    code, out, err = run(argv)
    assert code == 2 and message in err and err.strip().count("\n") == 0, err


def test_parse_always_measures_fp32_first():
    assert variants.parse("int8") == ["fp32", "int8"]
    assert variants.parse("int8,fp32,int8-draft") == ["fp32", "int8", "int8-draft"]

"""`specdec-bench gpu` on the CPU provider: every step of the GPU check runs here, so that on a GPU machine only the
provider changes: the widened pair's steps (a tiny pair widened to tiny shapes, exported fp16 and fp32 with
--graph-capture, eager and captured), the eager checks on an export and the random-weight shapes. Its distribution
test is shown to catch a broken residual draw."""

from __future__ import annotations

import json
from pathlib import Path
import math

import pytest
from benchrun import run
from tinymodels import broken_export, export_pair, make_tiny_t5

from specdec.bench import gpu, gpu_widened
from specdec.bench.shapes import measure as shapes
from specdec.models import shapes as model_shapes
from specdec.runtime import SpeculativeDecoder


@pytest.fixture(scope="module")
def broad_pair(tmp_path_factory):
    """(target_dir, export_dir): random v1.0 models (ReLU, scaled tied head) whose first-token distributions spread
    over many tokens, so that the distribution test has bins to count, in the real T5 layout (48 rows, 40 ids)."""
    root = tmp_path_factory.mktemp("broad")
    target = make_tiny_t5(root / "target", vocab=48, tokens=40, d_model=32, layers=2, decoder_layers=2, seed=1)
    draft = make_tiny_t5(root / "draft", vocab=48, tokens=40, d_model=16, heads=2, layers=1, decoder_layers=1, seed=2)
    return target, export_pair(target, draft, root / "export", "--gamma-max", "4", "--max-length", "32")


def test_every_step_runs_on_the_cpu_provider(broad_pair, monkeypatch, tmp_path):
    monkeypatch.setitem(shapes.CONFIGS, "tiny-t", dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2))
    monkeypatch.setitem(shapes.CONFIGS, "tiny-d", dict(d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=1))
    monkeypatch.setitem(shapes.COMMON, "vocab_size", 64)
    out, js = tmp_path / "gpu.md", tmp_path / "gpu.json"
    code, stdout, err = run(["gpu", "--provider", "cpu", "--widen", "none", "--export", broad_pair[1],
                             "--shapes", "tiny-t:tiny-d",
                             "--work-dir", tmp_path / "work", "--num-prompts", "2", "--max-new-tokens", "8",
                             "--samples", "1500", "--bandwidth-gbs", "10", "--out", out, "--json", js])
    assert code == 0, err
    report = json.loads(js.read_text())
    assert report["provider"] == "cpu" and "CPUExecutionProvider" in report["providers"]
    assert [r["draft"] for r in report["greedy"]["rows"]] == ["none", "draft", "auto"]
    assert all(r["identical"] == r["prompts"] == 2 for r in report["greedy"]["rows"])
    sampling = report["sampling"]
    assert sampling["passed"] and sampling["dof"] >= 8 and 0 < sampling["accepted"] < sampling["proposed"]
    copies = report["copies"]
    assert (copies["draft"], copies["gamma"]) == ("draft", 4)     # a fixed loop, not auto's load-dependent choice
    reads = [c for c in copies["copies"] if c["direction"] == "device->host"]
    # what comes back to the host: the token slots (the accepted count and next token), once a round
    assert len(reads) == 1 and reads[0]["buffer"].endswith("int64") and reads[0]["per_round"] == 1.0, reads
    real = report["real_size"]
    assert real["pair"] == "tiny-t:tiny-d" and real["default"]["identical"] is True
    assert real["target_only"]["ms_per_token"] > 0 and real["default"]["ms_per_token"] > 0
    assert real["transformers"]["device"] == "cpu" and real["transformers"]["identical"] == 2
    assert real["bound"]["bandwidth_gbs"] == 10 and real["bound"]["decoder_bytes"] > 0
    assert real["cuda_graphs"] == {"error": "not offered by the cpu provider"}
    text = out.read_text()
    for heading in ("## Greedy output against the CPU provider", "## Distribution at T = 1",
                    "## Host <-> device copies", "## Real size: tiny-t:tiny-d"):
        assert heading in text, heading
    assert "specdec-bench gpu" in text and "# specdec on cpu" in stdout


# the broad pair's models widened: every dimension at least theirs, d_model 2 more (widen's reserved dimensions)
WIDE = {"gw-t": dict(d_model=40, d_ff=64, d_kv=8, num_heads=4, num_layers=2),
        "gw-d": dict(d_model=24, d_ff=32, d_kv=8, num_heads=2, num_layers=2)}


@pytest.fixture
def tiny_shapes(monkeypatch):
    for name, spec in WIDE.items():
        monkeypatch.setitem(model_shapes.CONFIGS, name, spec)
    monkeypatch.setitem(model_shapes.COMMON, "vocab_size", 64)


def test_the_widened_pair_runs_every_step_on_the_cpu_provider(broad_pair, tiny_shapes, tmp_path):
    """The GPU run's main subject at tiny size: widened, exported fp16 (here) and fp32 (in a process of its own, as
    on a GPU machine), each eager and captured (uncaptured on the CPU), every figure and check in the report."""
    out, work = tmp_path / "gpu.md", tmp_path / "work"
    code, stdout, err = run(["gpu", "--provider", "cpu", "--widen", "gw-t:gw-d", "--widen-from",
                             broad_pair[0].parent, "--work-dir", work, "--num-prompts", "2", "--max-new-tokens", "8",
                             "--repeats", "1", "--gamma-max", "3", "--max-length", "32", "--samples", "1000",
                             "--background-export", "on", "--bandwidth-gbs", "10", "--out", out])
    assert code == 0, err
    report = json.loads((tmp_path / "gpu.json").read_text())
    w = report["widened"]
    assert w["pair"] == "gw-t:gw-d" and not w["checkpoints"]["reused"] and w["prompts"]["count"] == 2
    assert [w["exports"][d]["background"] for d in ("fp16", "fp32")] == [False, True]
    assert report["errors"] == {} and report["skipped"] == {}, (report["errors"], report["skipped"])
    for dtype in ("fp16", "fp32"):
        d = w["dtypes"][dtype]
        for key in ("captured_t0", "eager_t0", "captured_t1", "eager_t1"):
            assert d[key]["target_only"]["ms_per_token"] > 0 and d[key]["default"]["ms_per_token"] > 0, key
            assert d[key]["target_only"]["tokens_per_target_call"] == 1.0, key
        assert d["greedy"]["passed"] and all(r["identical"] == r["prompts"] == 2 for r in d["greedy"]["rows"])
        runs = [r["run"] for r in d["greedy"]["rows"]]
        for source in ("draft", "lookup,draft", "auto"):
            assert [f"captured {source}, gamma {g}" in runs for g in (1, 2, 3)] == [True] * 3, runs
        assert d["capture_session"]["captured"] is False                 # the CPU provider captures nothing
        assert d["capture_session"]["target"]["providers"] == ["CPUExecutionProvider"]
        target = d["widths"]["target"]
        assert target["widths"] == 4 and target["short"] == [], target          # 1 .. gamma_max + 1, each >= 2
        assert d["widths"]["draft"]["widths"] == 5
    fp32 = [r for r in w["dtypes"]["fp32"]["greedy"]["rows"] if r["against"].startswith("the CPU provider")]
    assert {r["run"] for r in fp32} == {"captured target-only", "captured default", "eager target-only"}
    s = w["sampling"]
    assert s["passed"] and s["dof"] >= 4 and s["dtype"] == "fp16" and 0 < s["accepted"] < s["proposed"], s
    for name in ("greedy", "assisted"):
        t = w["transformers"][name]
        assert t["device"] == "cpu" and t["dtype"] == "float32" and t["ms_per_token"] > 0, t
    assert w["transformers"]["assisted"]["assisted"] is True
    assert set(w["bound"]["dtypes"]) == {"fp16", "fp32"} and w["bound"]["bandwidth_gbs"] == 10
    assert w["bound"]["dtypes"]["fp32"]["decoder_bytes"] > w["bound"]["dtypes"]["fp16"]["decoder_bytes"]
    k = w["kernels"]["cpu"]
    assert k["nodes"] > 0 and k["placed"] == {"CPUExecutionProvider": k["nodes"]} and k["memcpy_nodes"] == 0, k
    assert sum(k["top_ops"].values()) <= k["nodes"] and "If" not in k["top_ops"]
    assert (tmp_path / "gpu-ort-cpu.log").read_text().count("placed on [CPUExecutionProvider]") == 1
    assert w["copies"]["gamma"] == 3 and w["copies"]["dtype"] == "fp16"
    assert all(m["note"] == "not measured on the CPU" for m in report["memory"]) and len(report["memory"]) == 7
    text = out.read_text()
    for heading in ("## The widened pair: gw-t:gw-d", "### ms per generated token", "### Greedy output, fp32",
                    "### Runs of each width, captured fp16", "### Distribution at T = 1, captured fp16",
                    "### Kernels per step", "### Device memory", "### Against transformers"):
        assert heading in text, heading
    # a second run reuses the checkpoints and both exports
    assert gpu_widened.ensure_widened(work, ("gw-t", "gw-d"), broad_pair[0].parent)["reused"]
    root = gpu_widened.widened_dir(work, ("gw-t", "gw-d"), broad_pair[0].parent)
    assert all(gpu_widened.Export(root, d, 3, 32, []).record["reused"] for d in ("fp16", "fp32"))
    assert not gpu_widened.export_ready(gpu_widened.export_dir(root, "fp16", 4, 32), "fp16")


def test_a_short_budget_leaves_steps_out_and_says_so(tmp_path):
    code, stdout, err = run(["gpu", "--provider", "cpu", "--budget-s", "5", "--work-dir", tmp_path / "work",
                             "--out", tmp_path / "gpu.md"])
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert code == 0 and "budget left" in report["skipped"]["widen"] and "widened" in report, err
    assert "Left out: widen" in (tmp_path / "gpu.md").read_text()


def test_a_step_that_misses_one_it_needs_is_left_out(tmp_path):
    class Args:
        budget_s, out, json = 100.0, str(tmp_path / "r.md"), None
        command_line = "specdec-bench gpu"
    report = {"command": "x", "date_utc": "d", "providers": [], "onnxruntime": "1", "provider": "cpu",
              "device": "cpu", "skipped": {}, "errors": {}, "steps": [], "memory": []}
    runner = gpu.Runner(Args, report, lambda m: None)
    assert runner.step("a", "a", lambda: 1 / 0) is None and report["errors"]["a"].startswith("ZeroDivisionError")
    assert runner.step("b", "b", lambda: 2, needs=("a",)) is None and report["skipped"]["b"] == "needs a"
    assert runner.step("c", "c", lambda: 3) == 3 and json.loads((tmp_path / "r.json").read_text())["errors"]


def test_the_verbose_session_log_is_read_per_provider():
    """onnxruntime's node placements (VERBOSE) and warnings, as it writes them (colour codes included)."""
    log = "\n".join([
        "2026-11-28 20:00:00.1 [I:onnxruntime:, inference_session.cc:1 X] Session Options { }",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp] Node placements",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed "
        "on [CUDAExecutionProvider]. Number of nodes: 3",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]   MatMul (m1)",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]   MatMul (m2)",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]   Add (a)",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed "
        "on [CPUExecutionProvider]. Number of nodes: 1",
        "2026-11-28 20:00:00.2 [V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]   Gather (g)",
        "\x1b[0;93m2026-11-28 20:00:00.3 [W:onnxruntime:, transformer_memcpy.cc:74 ApplyImpl] 2 Memcpy nodes are "
        "added to the graph main_graph for CUDAExecutionProvider.\x1b[m",
        "\x1b[0;93m2026-11-28 20:00:00.3 [W:onnxruntime:, session_state.cc:1280 VerifyEachNodeIsAssignedToAnEp] Some "
        "nodes were not assigned to the preferred execution providers.\x1b[m"])
    got = gpu_widened.read_session_log(log)
    assert got["placed"] == {"CUDAExecutionProvider": 3, "CPUExecutionProvider": 1}
    assert got["ops_by_provider"] == {"CUDAExecutionProvider": {"MatMul": 2, "Add": 1},
                                      "CPUExecutionProvider": {"Gather": 1}}
    assert got["warnings"] == ["2 Memcpy nodes are added to the graph main_graph for CUDAExecutionProvider.",
                               "Some nodes were not assigned to the preferred execution providers."]


def test_the_fused_attention_variant_runs_on_the_cpu_provider(broad_pair, tiny_shapes, tmp_path):
    """--dtypes fp16-fused: the widened pair exported with --capture-attention fused, measured and checked alone."""
    out, work = tmp_path / "gpu.md", tmp_path / "work"
    code, _, err = run(["gpu", "--provider", "cpu", "--widen", "gw-t:gw-d", "--widen-from", broad_pair[0].parent,
                        "--work-dir", work, "--dtypes", "fp16-fused", "--num-prompts", "2", "--max-new-tokens", "6",
                        "--repeats", "1", "--gamma-max", "2", "--max-length", "32", "--samples", "100",
                        "--bandwidth-gbs", "10", "--out", out])
    assert code == 0, err
    report = json.loads((tmp_path / "gpu.json").read_text())
    d = report["widened"]["dtypes"]["fp16-fused"]
    assert d["greedy"]["passed"] and d["captured_t0"]["target_only"]["ms_per_token"] > 0
    split = d["captured_t0_split"]
    assert split["runs"] > 0 and split["step_ms"] > 0 and split["head_ms"] > 0, split
    assert "then the speculative head as its own eager session" in out.read_text()
    manifest = json.loads((Path(d["export"]) / "manifest.json").read_text())
    assert manifest["dtype"] == "fp16" and manifest["graph_capture"]["attention"] == "fused"
    assert report["widened"]["kernels"]["cpu"]["top_ops"].get("MultiHeadAttention", 0) > 0
    assert gpu_widened.split_variant("fp16-fused") == ("fp16", "fused")
    assert gpu_widened.split_variant("fp32") == ("fp32", "plain")


def test_bad_widen_input_is_one_line(tmp_path):
    for argv, words in ((["--widen", "t5-huge:t5-small"], "not TARGET:DRAFT"), (["--dtypes", "int8"], "--dtypes"),
                        (["--dtypes", "fp16-odd"], "--dtypes")):
        code, _, err = run(["gpu", "--provider", "cpu", "--out", tmp_path / "x.md", *argv])
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x.md").exists()


def test_the_distribution_test_catches_a_broken_residual(broad_pair, tmp_path):
    """The check's test (N = 1,500 over the 4 widest of 8 prompts; p >= 1e-3 passes) on a target whose residual
    draw is a plain draw from p: it fails, by far."""
    ref = SpeculativeDecoder.load(broad_pair[1], provider="cpu")
    wrong = SpeculativeDecoder.load(broken_export(broad_pair[0], broad_pair[1], tmp_path), provider="cpu")
    prompts = [[5 + i, 9, 13 + i, 21, 1] for i in range(8)]
    assert gpu.sampling_test(ref, ref, prompts, 1500)["passed"]
    broken = gpu.sampling_test(ref, wrong, prompts, 1500)
    assert not broken["passed"] and broken["p_value"] < 1e-6, broken


@pytest.mark.parametrize("argv, words", [(["--provider", "tensorrt"], "not available"),
                                         (["--samples", "10"], "--samples >= 100")])
def test_bad_input_is_one_line(argv, words, tiny_export, tmp_path):
    code, _, err = run(["gpu", "--export", tiny_export, "--out", tmp_path / "x.md", *argv])
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.md").exists()


def test_chi_square_tail_equals_scipys():
    from scipy.stats import chi2

    for dof in (1, 2, 3, 4, 7, 10, 31, 100, 400):
        for x in (0.01, 0.5, 1.0, dof - 1.0, dof + 0.5, 2.0 * dof, 3.0 * dof + 20, 10.0 * dof + 60):
            if x > 0:
                want = float(chi2.sf(x, dof))
                assert math.isclose(gpu.chi2_sf(x, dof), want, rel_tol=1e-8, abs_tol=1e-300), (x, dof)


def test_provider_options_go_to_the_first_provider_of_every_session(tiny_export):
    """The CUDA-graphs step loads with provider_options (nothing global changes): they are merged into the first
    onnxruntime provider's options (TensorRT's own kept), the CPU provider loads with them and decodes as without,
    and options that are not a dict of names to values are a one-line error."""
    from specdec.runtime import SpeculativeDecoder, SpecdecError
    from specdec.runtime.engine.device import PROVIDERS, session_providers

    before = {k: list(v) for k, v in PROVIDERS.items()}
    assert session_providers("cuda", "x/y.onnx", {"enable_cuda_graph": "1"}) == \
        [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), "CPUExecutionProvider"]
    trt = session_providers("tensorrt", "e/target/decoder.onnx", {"trt_fp16_enable": "1"})
    assert trt[0][0] == "TensorrtExecutionProvider" and trt[0][1]["trt_fp16_enable"] == "1" and \
        trt[0][1]["trt_engine_cache_enable"] is True and trt[1:] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert session_providers("cpu", "x/y.onnx") == ["CPUExecutionProvider"] and PROVIDERS == before
    plain = SpeculativeDecoder.load(tiny_export, provider="cpu").generate(input_ids=[5, 6, 7, 1], max_new_tokens=8)
    optioned = SpeculativeDecoder.load(tiny_export, provider="cpu", provider_options={"use_arena": False})
    assert optioned.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8).token_ids == plain.token_ids
    for bad in ("enable_cuda_graph=1", {"x": [1]}, {1: "a"}):
        with pytest.raises(SpecdecError) as err:
            SpeculativeDecoder.load(tiny_export, provider="cpu", provider_options=bad)
        assert "provider_options" in str(err.value) and "\n" not in str(err.value)


def test_a_failure_is_one_line_of_the_report():
    """A failed step or peer goes into a Markdown table row: its type and its message's first line, cut."""
    assert gpu.failure(RuntimeError("cannot run\n  at node 7")) == "RuntimeError: cannot run"
    assert gpu.failure(ValueError()) == "ValueError: "
    assert gpu.failure(OSError("x" * 500), 300) == "OSError: " + "x" * 300


def _fatbin_elf(containers) -> bytearray:
    """A minimal ELF64 file whose .nv_fatbin holds `containers`: lists of (kind, arch, payload byte)."""
    import struct

    body = b""
    for entries in containers:
        inner = b"".join(struct.pack("<HHIQ", kind, 0, 64, 16) + bytes(12) + struct.pack("<I", arch) + bytes(32)
                         + bytes([fill]) * 16 for kind, arch, fill in entries)
        body += struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(inner)) + inner
    names = b"\0.shstrtab\0.nv_fatbin\0"
    fat_at, names_at = 64, 64 + len(body)
    shoff = names_at + len(names)
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 1)
    sections = [bytes(64), struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, names_at, len(names), 0, 0, 1, 0),
                struct.pack("<IIQQQQIIQQ", 11, 1, 0, 0, fat_at, len(body), 0, 0, 8, 0)]
    return bytearray(bytes(head) + body + names + b"".join(sections))


def test_thinning_zeroes_the_other_architectures_cubins_only_where_one_is_kept():
    """gpu_ort.py's fatbin thinning: in a container with an sm_90 cubin the others are zeroed (sizes and headers
    unchanged, PTX kept); a container without one stays whole; the rest of the file is untouched."""
    from specdec.bench import gpu_ort

    data = _fatbin_elf([[(2, 80, 0xA1), (2, 90, 0xB2), (1, 80, 0xC3)], [(2, 75, 0xD4), (2, 86, 0xE5)]])
    before = bytes(data)
    stats = gpu_ort.thin_fatbin(data, 90)
    assert stats == {"containers": 2, "whole": 1, "zeroed_bytes": 16, "kept_bytes": 32}
    assert len(data) == len(before) and bytes(data).count(b"\xa1" * 16) == 0
    for kept in (0xB2, 0xC3, 0xD4, 0xE5):
        assert bytes(data).count(bytes([kept]) * 16) == 1, hex(kept)
    assert sum(a != b for a, b in zip(before, data)) == 16
    with pytest.raises(ValueError):
        gpu_ort.section(b"\x7fELF\x01\x01" + bytes(58), ".nv_fatbin")

"""int8 that computes the same on every CPU: the NumPy reference of the two x86 kernels (runtime/engine/int8cpu.py)
against ONNX Runtime's own kernel on this machine, the graph rewrite the parity check runs (export/emulate.py)
against the reference, the weight rule that keeps every pair of weights out of int16 saturation
(export/quantize.py, weight_scales), and the parity check under both kernels: it catches the full-range weights of
earlier exports (which drift on x86 CPUs without VNNI), passes the bounded ones, and the manifest records both."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tinymodels import INT8_PAIR_SHAPE, export_int8_pair, read_manifest

SHAPE = INT8_PAIR_SHAPE


def matmul_integer_graph(b, a_zero, b_zero, k):
    """A one-node MatMulInteger model: A uint8 [2, M, K] (M free) x the int8 initializer `b`."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "azp", "bzp"], ["Y"])], "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [2, None, k])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [2, None, b.shape[1]])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array(a_zero, np.uint8), "azp"),
         numpy_helper.from_array(b_zero, "bzp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model, a):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"A": a})[0]


# (M, K, N): one token, odd K (the kernel pads it), a few tokens, tiny K
CASES = [(1, 64, 16), (3, 1023, 33), (2, 3, 5), (5, 512, 64)]


def random_case(rng, m, k, n):
    """Full-range activations and weights (saturating pairs are common) with per-column weight zero points."""
    a = rng.integers(0, 256, size=(2, m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    return a, b, rng.integers(-3, 4, size=n).astype(np.int8)


def test_the_reference_is_onnxruntimes_own_kernel_on_this_cpu():
    """matmul_integer with this CPU's kernel (cpu_kernel: from /proc/cpuinfo's flags) equals ONNX Runtime's
    MatMulInteger bit for bit, on full-range inputs where the two kernels differ (checked: the other kernel's result
    is not equal on any case), so the reference is the kernel that runs, whichever CPU runs the test."""
    from specdec.runtime.engine.int8cpu import KERNELS, cpu_kernel, matmul_integer

    kernel = cpu_kernel()
    if kernel is None:
        pytest.skip("this CPU's int8 kernel cannot be told from /proc/cpuinfo")
    other = next(k for k in KERNELS if k != kernel)
    rng = np.random.default_rng(0)
    for m, k, n in CASES:
        a, b, zb = random_case(rng, m, k, n)
        got = run(matmul_integer_graph(b, 131, zb, k), a)
        assert np.array_equal(got, matmul_integer(a, b, 131, zb, kernel)), (m, k, n, kernel)
        assert not np.array_equal(got, matmul_integer(a, b, 131, zb, other)), (m, k, n, other)


def test_the_kernels_part_only_where_a_weight_pair_passes_the_bound():
    """The two kernels give the same integers for every activation when every pair of weights along K keeps
    |w0| + |w1| <= 128 (activations 255 and 1 at the extremes included), and differ once one pair passes it."""
    from specdec.runtime.engine.int8cpu import PAIR_BOUND, matmul_integer, pair_sum

    rng = np.random.default_rng(1)
    k, n = 64, 8
    w = rng.integers(0, PAIR_BOUND + 1, size=(k // 2, n))
    b = np.empty((k, n), np.int64)
    b[0::2], b[1::2] = w, PAIR_BOUND - w                              # every pair exactly at the bound
    b = (b * rng.choice([-1, 1], size=(k, n))).clip(-127, 127).astype(np.int8)    # signs: same magnitudes
    assert pair_sum(b) <= PAIR_BOUND
    extremes = np.stack([np.full(k, 255), np.full(k, 1), rng.integers(0, 256, k)])[None].astype(np.uint8)
    assert np.array_equal(matmul_integer(extremes, b, 128, 0, "avx2"), matmul_integer(extremes, b, 128, 0, "vnni"))
    b[0, 0], b[1, 0] = 100, 100                                       # one pair at 200
    assert pair_sum(b) == 200
    assert not np.array_equal(matmul_integer(extremes, b, 128, 0, "avx2"),
                              matmul_integer(extremes, b, 128, 0, "vnni"))


@pytest.mark.parametrize("kernel", ["vnni", "avx2"])
def test_the_graph_rewrite_computes_as_the_reference(kernel):
    """export/emulate.py's rewrite of MatMulInteger, run by ONNX Runtime, equals matmul_integer for `kernel` bit for
    bit on full-range inputs (odd K, a batch axis, per-column weight zero points), whatever CPU runs it."""
    from specdec.export.emulate import emulated
    from specdec.runtime.engine.int8cpu import matmul_integer

    rng = np.random.default_rng(2)
    for m, k, n in CASES:
        a, b, zb = random_case(rng, m, k, n)
        model = emulated(matmul_integer_graph(b, 131, zb, k), kernel)
        assert "MatMulInteger" not in {node.op_type for node in model.graph.node}
        assert np.array_equal(run(model, a), matmul_integer(a, b, 131, zb, kernel)), (m, k, n)


def test_pair_scales_keep_every_pair_within_the_bound():
    """weight_scales: "pairs" keeps every quantized pair within 128 on heavy-tailed weights (an outlier beside a
    large neighbour, odd K), and costs less resolution than "7bit" (its scales are no larger, mostly smaller);
    "full" (8 bits at full range, as before) passes the bound on the same weights."""
    from specdec.export.quantize import weight_scales
    from specdec.runtime.engine.int8cpu import PAIR_BOUND, pair_sum

    rng = np.random.default_rng(3)
    w = rng.standard_t(3, size=(257, 96)).astype(np.float32)
    w[10, 5], w[11, 5] = 40.0, -39.0
    quantized = {}
    for rule in ("pairs", "7bit", "full"):
        scale = weight_scales(w, rule)
        quantized[rule] = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    assert pair_sum(quantized["pairs"]) <= PAIR_BOUND and pair_sum(quantized["7bit"]) <= PAIR_BOUND
    assert pair_sum(quantized["full"]) > PAIR_BOUND
    pairs, sevenbit = weight_scales(w, "pairs"), weight_scales(w, "7bit")
    assert (pairs <= sevenbit * (1 + 1e-6)).all() and (pairs < sevenbit).mean() > 0.5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tinymodels.export_int8_pair: (target checkpoint, fp32 export, int8 export, its stdout), the tests' 3-block
    random target (random weights quantize worse than trained ones) and a 1-block draft."""
    return export_int8_pair(tmp_path_factory.mktemp("int8_kernels"))


def parity(target, encoder, decoder):
    from transformers import T5ForConditionalGeneration

    from specdec.export.check import check_parity

    model = T5ForConditionalGeneration.from_pretrained(str(target)).eval()
    return check_parity(model, encoder, decoder, 4, "int8", tokens=SHAPE["vocab"])


def test_the_parity_check_catches_full_range_weights_under_the_avx2_kernel(tiny, tmp_path):
    """The target quantized with full-range 8-bit weights (the rule before this check, with the same float32 nodes):
    as CPUs with VNNI compute it, its logits stay within the tolerance; as x86 CPUs without VNNI compute it, they
    drift past it (measured on such a CPU before: 0.52 against a tolerance of 0.39, argmax 4/6) and the check fails.
    The same graphs with the export's pair-bounded weights pass under both, with identical figures."""
    from specdec.export.quantize import encoder_float_nodes, quantize_int8, target_float_nodes

    target, fp32, _, _ = tiny
    reports = {}
    for rule in ("full", "pairs"):
        folder = tmp_path / rule
        folder.mkdir()
        enc, dec = folder / "encoder.onnx", folder / "decoder.onnx"
        shutil.copy(fp32 / "target" / "encoder.onnx", enc)
        shutil.copy(fp32 / "target" / "decoder.onnx", dec)
        quantize_int8(enc, "target encoder", encoder_float_nodes(enc, 3), weight_range=rule)
        quantize_int8(dec, "target decoder", target_float_nodes(dec, SHAPE["vocab"], 3), weight_range=rule)
        reports[rule] = parity(target, enc, dec)
    full, pairs = reports["full"], reports["pairs"]
    tol = full["tolerance"]
    assert max(full["int8_kernels"]["vnni"]["step_max_abs_diff"],
               full["int8_kernels"]["vnni"]["verify_max_abs_diff"]) <= tol
    assert max(full["int8_kernels"]["avx2"]["step_max_abs_diff"],
               full["int8_kernels"]["avx2"]["verify_max_abs_diff"]) > tol
    assert not full["passed"]
    assert pairs["passed"] and pairs["int8_kernels"]["avx2"] == pairs["int8_kernels"]["vnni"], pairs


def test_an_int8_export_is_bounded_checked_under_both_kernels_and_recorded(tiny):
    """`specdec-export --dtype int8`: every int8 weight of every graph keeps its pairs within 128 (read from the
    graphs), the manifest's quantization record says so per graph (weight_scales "pairs", max_pair_sum), the parity
    report holds both kernels' figures (equal, and within the tolerance) and the export's log names them."""
    import onnx
    from onnx import numpy_helper

    from specdec.export.emulate import all_nodes
    from specdec.runtime.engine.int8cpu import PAIR_BOUND, pair_sum

    _, _, int8, stdout = tiny
    manifest = read_manifest(int8)
    for role in ("target", "draft"):
        for stage, record in manifest["models"][role]["quantization"].items():
            graph = onnx.load(str(int8 / role / f"{stage}.onnx")).graph
            inits = {t.name: t for t in graph.initializer}
            weights = [numpy_helper.to_array(inits[n.input[1]]) for n in all_nodes(graph)
                       if n.op_type == "MatMulInteger"]
            assert weights and max(pair_sum(w) for w in weights) == record["max_pair_sum"] <= PAIR_BOUND
            assert record["weight_scales"] == "pairs" and record["pair_bound"] == PAIR_BOUND
        check = manifest["parity_check"][role]
        kernels = check["int8_kernels"]
        assert set(kernels) == {"vnni", "avx2"} and kernels["vnni"] == kernels["avx2"]
        assert kernels["avx2"]["verify_max_abs_diff"] <= check["tolerance"]
        assert f"{role} as x86 CPUs without VNNI compute it" in stdout


def test_a_cpu_without_vnni_is_told_of_an_export_with_unbounded_weights(tiny, tmp_path):
    """At load (int8_kernel_note): an int8 export whose record has no max_pair_sum (made before the bound) or one
    past 128 gets one line on a CPU without VNNI, naming the export and the fix; nothing on a VNNI or unknown CPU,
    nor for a bounded export. The command lines print it as 'warning: ...' on one line."""
    from specdec.runtime.loading.manifest import load_manifest
    from specdec.runtime.scheduling.opening import int8_kernel_note

    _, _, int8, _ = tiny
    assert all(int8_kernel_note(load_manifest(int8), k) is None for k in ("avx2", "vnni", None))
    old = tmp_path / "old"
    shutil.copytree(int8, old)
    raw = json.loads((old / "manifest.json").read_text())
    for stage in raw["models"]["target"]["quantization"].values():
        for key in ("max_pair_sum", "pair_bound", "weight_scales"):
            del stage[key]
    (old / "manifest.json").write_text(json.dumps(raw))
    manifest = load_manifest(old)
    note = int8_kernel_note(manifest, "avx2")
    assert note is not None and int8_kernel_note(manifest, "vnni") is None and int8_kernel_note(manifest, None) is None
    text = str(note)
    assert "\n" not in text and str(old) in text and "(target)" in text and "export it again" in text

    import subprocess
    import sys

    code = ("import warnings; from specdec.runtime.core.errors import SpecdecWarning, run_cli; "
            f"run_cli(lambda argv: warnings.warn(SpecdecWarning({text!r})))")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert err.returncode == 0 and err.stderr == f"warning: {text}\n", err.stderr


@pytest.mark.parametrize("features, kernel", [
    ({"AVX2": True, "AVX512F": True, "AVX512BW": True, "AVX512VNNI": True}, "vnni"),
    ({"AVX2": True, "AVX512F": True, "AVX512BW": True, "AVX512VNNI": False}, "avx2"),
    ({"AVX2": True, "AVX512F": False, "AVX512VNNI": False, "AVX_VNNI": True}, "vnni"),
    ({"AVX2": True, "AVX512F": False, "AVX512VNNI": False, "AVX_VNNI": False}, "avx2"),
])
def test_the_cpus_kernel_is_read_from_numpys_feature_table(features, kernel):
    """NumPy's table (CPUID) decides on x86 where it has one: an emulated CPU's own features, not the host's that
    /proc/cpuinfo shows under QEMU."""
    from specdec.runtime.engine.int8cpu import cpu_kernel

    assert cpu_kernel("x86_64", features=features) == kernel


@pytest.mark.parametrize("machine, flags, kernel", [
    ("x86_64", "fpu sse2 avx avx2 fma", "avx2"),
    ("x86_64", "avx2 fma avx512f avx512bw avx512vl", "avx2"),            # AVX-512 without VNNI: vpmaddubsw too
    ("x86_64", "avx2 avx512f avx512bw avx512_vnni", "vnni"),
    ("x86_64", "avx2 avx_vnni", "vnni"),
    ("aarch64", "fp asimd asimddp", "vnni"),
    ("riscv64", "", None),
])
def test_the_cpus_kernel_is_read_from_its_flags(machine, flags, kernel):
    from specdec.runtime.engine.int8cpu import cpu_flags, cpu_kernel

    parsed = cpu_flags(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_kernel(machine, parsed) == kernel


HASWELL_SCRIPT = """
import sys, numpy as np
sys.path[:0] = {paths!r}
from test_int8_kernels import matmul_integer_graph, random_case, run, CASES
from specdec.runtime.engine.int8cpu import matmul_integer
rng = np.random.default_rng(0)
for m, k, n in CASES:
    a, b, zb = random_case(rng, m, k, n)
    assert np.array_equal(run(matmul_integer_graph(b, 131, zb, k), a), matmul_integer(a, b, 131, zb, "avx2"))
from specdec.export.check import onnx_logits
src, ids = np.load({probe!r} + ".src.npy"), np.load({probe!r} + ".ids.npy")
np.save({probe!r} + ".out.npy", np.concatenate(onnx_logits({enc!r}, {dec!r}, src, ids, [5, 1, 5])[1:], axis=1))
print("ok")
"""


def test_a_real_avx2_cpu_computes_as_the_avx2_reference_and_the_export_as_on_this_one(tiny, tmp_path):
    """Where QEMU's user-mode emulator is installed (Debian's qemu-user; x86_64 only): Python and ONNX Runtime run
    on an emulated Haswell (AVX2, FMA, no AVX-512, no VNNI), so ONNX Runtime takes its non-VNNI kernels there. Its
    MatMulInteger equals the avx2 reference bit for bit on full-range inputs, and the int8 export's target logits
    (encoder and decoder; a step and a verify run) there equal those on this machine within float rounding of the
    fp32 parts (1e-4 of the logit scale; measured: equal)."""
    import os
    import platform
    import subprocess
    import sys

    qemu = shutil.which("qemu-x86_64")
    if qemu is None or platform.machine() != "x86_64":
        pytest.skip("needs QEMU's user-mode emulator on x86_64 (apt install qemu-user)")
    from specdec.export.check import onnx_logits

    _, _, int8, _ = tiny
    rng = np.random.default_rng(4)
    src = rng.integers(3, SHAPE["vocab"], size=(1, 12))
    ids = np.concatenate([[[0]], rng.integers(3, SHAPE["vocab"], size=(1, 10))], axis=1)
    probe = str(tmp_path / "probe")
    np.save(probe + ".src.npy", src)
    np.save(probe + ".ids.npy", ids)
    enc, dec = str(int8 / "target" / "encoder.onnx"), str(int8 / "target" / "decoder.onnx")
    script = HASWELL_SCRIPT.format(paths=[os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))],
                                   probe=probe, enc=enc, dec=dec)
    done = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
    here = np.concatenate(onnx_logits(enc, dec, src, ids, [5, 1, 5])[1:], axis=1)
    there = np.load(probe + ".out.npy")
    assert np.abs(here - there).max() <= 1e-4 * max(1.0, float(np.abs(here).max()))

"""How a CPU computes an int8 export's products, and which way this CPU does.

An int8 graph multiplies uint8 activations by int8 weights (ONNX Runtime's MatMulInteger, "U8S8"), and ONNX Runtime
picks the instructions by CPU. Two results come out of the same graph:

- ``vnni``: x86 CPUs with AVX512-VNNI or AVX-VNNI (vpdpbusd), and ARM64: every product is summed in int32, which is
  exact.
- ``avx2``: x86 CPUs with AVX2 but no VNNI, AVX-512 ones without VNNI included: vpmaddubsw multiplies the bytes of
  activations and weights and adds each pair of neighbours along K (k = 2j, 2j+1) in int16 **with saturation** before
  the int32 sum, so a pair |a0 w0 + a1 w1| above 32767 is clipped (ONNX Runtime's quantization documentation warns
  of it). With activations up to 255 this happens as soon as |w0| + |w1| > 128.

`matmul_integer` is the NumPy reference of both (MatMulInteger's definition, with the kernel's pair sums), checked
against ONNX Runtime's own kernel on this machine by the tests; an int8 export keeps every weight pair within
|w0| + |w1| <= PAIR_BOUND (export/quantize.py), which no activation can saturate, and is checked under both
(export/emulate.py). `cpu_kernel()` says which one this CPU runs.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np

KERNELS = ("vnni", "avx2")
# 255 * 128 = 32640 <= 32767: a pair of weights within this sum of magnitudes cannot saturate an int16 pair sum
PAIR_BOUND = 128
INT16_MAX = 32767


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zero, b_zero, kernel: str) -> np.ndarray:
    """MatMulInteger(a, b, a_zero, b_zero) as `kernel` computes it: (a - a_zero) @ (b - b_zero) in int32 exactly
    ("vnni"), or with the raw products a * b summed in int16 pairs along K with saturation, then corrected for the
    zero points in int32 ("avx2"). `a`: uint8 [..., M, K]; `b`: int8 [K, N]; `b_zero`: a scalar or one per column."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown int8 kernel {kernel!r}: one of {', '.join(KERNELS)}")
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    za, zb = np.int64(np.asarray(a_zero).reshape(())), np.asarray(b_zero).astype(np.int64)
    k = a64.shape[-1]
    if kernel == "vnni":
        return ((a64 - za) @ (b64 - zb)).astype(np.int32)
    if k % 2:                                                # the kernel pads K with zeros
        a64 = np.concatenate([a64, np.zeros(a64.shape[:-1] + (1,), np.int64)], axis=-1)
        b64 = np.concatenate([b64, np.zeros((1, b64.shape[1]), np.int64)])
    pairs = a64[..., 0::2, None] * b64[0::2] + a64[..., 1::2, None] * b64[1::2]     # [..., M, K/2, N]
    raw = np.clip(pairs, -INT16_MAX - 1, INT16_MAX).sum(axis=-2)
    rows = a64.sum(axis=-1, keepdims=True)
    out = raw - za * b64.sum(axis=0) - zb * rows + k * za * zb
    return out.astype(np.int32)


def pair_sums(w: np.ndarray) -> np.ndarray:
    """|w[2j]| + |w[2j+1]| for each pair j of neighbouring rows of weights `w` [K, N] and each column, [ceil(K/2), N]
    (an odd K padded with a zero row, as the kernel pads it); int64 for integer weights, float64 for float ones."""
    a = np.abs(w.astype(np.int64 if np.issubdtype(w.dtype, np.integer) else np.float64))
    if a.shape[0] % 2:
        a = np.concatenate([a, np.zeros((1, a.shape[1]), a.dtype)])
    return a[0::2] + a[1::2]


def pair_sum(q: np.ndarray) -> int:
    """The largest |w0| + |w1| over neighbouring rows (2j, 2j+1) of int8 weights `q` [K, N] (`pair_sums`): at most
    PAIR_BOUND, the avx2 kernel cannot saturate on them whatever the activations."""
    return int(pair_sums(q).max(initial=0))


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """The first processor's flags in /proc/cpuinfo (or in the text given); None where there is no such file."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def cpu_features() -> dict | None:
    """NumPy's run-time CPU feature table (it asks the CPU itself, CPUID on x86: right under an emulator, where
    /proc/cpuinfo describes the host), or None where this NumPy has none."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return dict(__import__(module, fromlist=["__cpu_features__"]).__cpu_features__)
        except (ImportError, AttributeError):
            continue
    return None


def cpu_kernel(machine: str | None = None, flags: set[str] | None = None, features: dict | None = None) -> str | None:
    """The int8 kernel this CPU runs: "vnni" (x86 with AVX512-VNNI or AVX-VNNI; ARM64), "avx2" (x86 without VNNI),
    or None when it cannot be told (another architecture, or neither NumPy's feature table nor /proc/cpuinfo on
    x86). `flags`: /proc/cpuinfo's flags to decide by alone; `features`: NumPy's table (default: this CPU's; it
    does not list AVX-VNNI, which /proc/cpuinfo's avx_vnni then tells)."""
    machine = (machine or platform.machine()).lower()
    if machine in ("aarch64", "arm64"):
        return "vnni"
    if machine not in ("x86_64", "amd64", "x86", "i686"):
        return None
    if flags is None:
        features = cpu_features() if features is None else features
        if features is not None and "AVX512VNNI" in features:
            if features["AVX512VNNI"] or features.get("AVX_VNNI"):
                return "vnni"
            return "vnni" if "avx_vnni" in (cpu_flags() or set()) and "AVX_VNNI" not in features else "avx2"
        flags = cpu_flags()
    if flags is None:
        return None
    return "vnni" if {"avx512_vnni", "avx_vnni"} & flags else "avx2"

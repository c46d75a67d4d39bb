"""onnxruntime-gpu for a GPU machine that cannot download (benchmarks/README.md, "The GPU check"), in as few device
calls as the tree that travels with each call allows. Standard library only; no file outside this repository.

    here:   python3 benchmarks/gpu_ort.py pack [--version 1.31.1] [--arch 90] [--wheel FILE] [--piece-mib N]
    there:  python3 benchmarks/gpu_ort.py unpack          (in the call that carries the last piece)

pack downloads the onnxruntime-gpu wheel for CPython 3.12 on manylinux x86_64 (pip download, once, into
.gpu/wheel/; --wheel takes one already here), and thins it for one GPU architecture (default sm_90, the H100's and
H200's): in the CUDA provider library's .nv_fatbin every cubin of another architecture is zeroed in place (headers,
offsets and sizes unchanged, so the driver still walks every container; a container holding no cubin of that
architecture is left whole), and the C library and the TensorRT provider are left out (the Python module needs
neither). The package goes into one xz tarball, split into pieces .gpu/p1/, .gpu/p2/, ... sized so that a call's
transfer (the tree that travels: tracked and untracked files git does not ignore, measured now, plus one piece)
stays under the 64 MiB a call carries. It prints the device calls to make. .gpu/ is added to .git/info/exclude.

unpack, on the GPU machine after the pieces have arrived (each earlier call left its piece in .gpu/, an ignored
path), joins them, checks the sha256, extracts the package into /tmp/ort-gpu, writes /tmp/ort-gpu/env.sh
(PYTHONPATH, and LD_LIBRARY_PATH to the image's nvidia-* CUDA libraries, which PyTorch brought) and tries a one-op
session on the CUDA provider. benchmarks/gpu_check.sh sources env.sh.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import lzma
import os
import shutil
import site
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

CALL_MIB = 64            # what one device call carries: the tree that travels and the carried paths together
MARGIN_MIB = 2           # room for files that appear between pack and the calls
FATBIN_MAGIC = 0xBA55ED50
CUBIN = 2                # a fatbin entry's kind: 1 PTX, 2 ELF (cubin)
TARGET = Path("/tmp/ort-gpu")
LEFT_OUT = ("onnxruntime/capi/libonnxruntime.so", "onnxruntime/capi/libonnxruntime_providers_tensorrt.so")


def repo_root() -> Path:
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(out.stdout.strip()) if out.returncode == 0 else Path(__file__).resolve().parent.parent


# -- thinning ----------------------------------------------------------------------------------------------------------
def section(data: bytes | bytearray, name: str) -> tuple[int, int]:
    """(file offset, size) of an ELF64 little-endian file's section `name`."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    strings = headers[names][4]
    for h in headers:
        start = strings + h[0]
        if bytes(data[start:data.index(b"\0", start)]).decode() == name:
            return h[4], h[5]
    raise ValueError(f"no {name} section")


def thin_fatbin(data: bytearray, keep: int) -> dict:
    """Zero, in place, every cubin not for sm_`keep` inside .nv_fatbin, in the containers that hold one for it."""
    off, size = section(data, ".nv_fatbin")
    pos, end = off, off + size
    stats = {"containers": 0, "whole": 0, "zeroed_bytes": 0, "kept_bytes": 0}
    while pos + 16 <= end:
        magic, _version, header, body = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:           # padding between containers
            pos += 8
            continue
        stats["containers"] += 1
        entries, p, stop = [], pos + header, pos + header + body
        while p < stop:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, p)
            arch = struct.unpack_from("<I", data, p + 28)[0]
            entries.append((kind, arch, p + entry_header, payload))
            p += entry_header + payload
        if any(kind == CUBIN and arch == keep for kind, arch, _, _ in entries):
            for kind, arch, start, payload in entries:
                if kind == CUBIN and arch != keep:
                    data[start:start + payload] = bytes(payload)
                    stats["zeroed_bytes"] += payload
                else:
                    stats["kept_bytes"] += payload
        else:
            stats["whole"] += 1
        pos = stop
    return stats


# -- pack -----------------------------------------------------------------------------------------------------------
def travelling_bytes(root: Path) -> int:
    """The tree a device call sends: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    total = 0
    for name in {n for n in out.decode().split("\0") if n}:
        path = root / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def exclude(root: Path, pattern: str = "/.gpu/") -> None:
    path = subprocess.run(["git", "-C", str(root), "rev-parse", "--git-path", "info/exclude"],
                          capture_output=True, text=True, check=True).stdout.strip()
    path = Path(path) if Path(path).is_absolute() else root / path
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text().splitlines() if path.is_file() else []
    if pattern not in lines:
        path.write_text("\n".join(lines + [pattern]) + "\n")


def download(version: str, into: Path) -> Path:
    found = sorted(into.glob(f"onnxruntime_gpu-{version}-*.whl"))
    if found:
        return found[0]
    into.mkdir(parents=True, exist_ok=True)
    platforms = [x for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                             "manylinux2014_x86_64") for x in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(into),
                    f"onnxruntime-gpu=={version}"], check=True)
    return sorted(into.glob(f"onnxruntime_gpu-{version}-*.whl"))[0]


def sha256(path: Path) -> str:
    # not runtime.loading.manifest.sha256_file: this module runs on the GPU machine before specdec (and the
    # onnxruntime its runtime imports) is installed there, so it imports the standard library only
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compress(plain: Path, out: Path) -> None:
    """xz -9e (the xz program on two threads where it is installed, else Python's lzma: same format, slower)."""
    if shutil.which("xz"):
        with open(out, "wb") as f:
            subprocess.run(["xz", "-9e", "-T2", "-c", str(plain)], stdout=f, check=True)
        return
    with open(plain, "rb") as src, lzma.open(out, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def pack(args) -> int:
    root = repo_root()
    gpu = root / ".gpu"
    exclude(root)
    wheel = Path(args.wheel) if args.wheel else download(args.version, gpu / "wheel")
    tree = travelling_bytes(root)
    piece_mib = args.piece_mib or int(CALL_MIB - MARGIN_MIB - tree / 2**20)
    if piece_mib < 1:
        raise SystemExit(f"the tree that travels is {tree / 2**20:.1f} MiB: no room for a piece in a "
                         f"{CALL_MIB} MiB call")
    print(f"{wheel.name}; the tree that travels: {tree / 2**20:.1f} MiB, so pieces of {piece_mib} MiB")
    tarball = gpu / f"ort-gpu-{args.version}-sm{args.arch}.tar.xz"
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as whl:
        staged = Path(tmp)
        whl.extractall(staged)
        for name in LEFT_OUT:
            for f in staged.glob(name + "*"):
                f.unlink()
        lib = staged / "onnxruntime/capi/libonnxruntime_providers_cuda.so"
        data = bytearray(lib.read_bytes())
        stats = thin_fatbin(data, args.arch)
        lib.write_bytes(data)
        print(f"thinned to sm_{args.arch}: {stats['zeroed_bytes'] / 2**20:.1f} MiB of other cubins zeroed, "
              f"{stats['kept_bytes'] / 2**20:.1f} MiB kept; {stats['whole']} of {stats['containers']} containers "
              f"have no sm_{args.arch} cubin and stay whole")
        gpu.mkdir(exist_ok=True)
        plain = Path(tmp) / "ort.tar"
        with tarfile.open(plain, mode="w") as tar:
            for path in sorted(staged.rglob("*")):
                tar.add(path, arcname=str(path.relative_to(staged)), recursive=False)
        compress(plain, tarball)
    for old in gpu.glob("p[0-9]*"):
        shutil.rmtree(old)
    pieces, raw = [], tarball.read_bytes()
    step = piece_mib << 20
    for i in range(0, len(raw), step):
        folder = gpu / f"p{len(pieces) + 1}"
        folder.mkdir()
        (folder / "part").write_bytes(raw[i:i + step])
        pieces.append(folder.name)
    manifest = {"name": tarball.name, "sha256": sha256(tarball), "bytes": len(raw), "pieces": pieces,
                "arch": args.arch, "version": args.version}
    for p in pieces:
        (gpu / p / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{tarball.name}: {len(raw) / 2**20:.1f} MiB in {len(pieces)} pieces, sha256 {manifest['sha256']}")
    print("device calls, back to back on one warm machine (each leaves its piece in .gpu/ there):")
    for i, p in enumerate(pieces, 1):
        last = i == len(pieces)
        command = ("python3 benchmarks/gpu_ort.py unpack && bash benchmarks/gpu_check.sh \"$OUT\"" if last
                   else "ls .gpu")
        print(f"  {i}. carry [\".gpu/{p}\"], timeout_s {600 if last else 60}: {command}")
    return 0


# -- unpack ---------------------------------------------------------------------------------------------------------
def cuda_library_dirs() -> list[str]:
    """The nvidia-* wheels' lib folders of this Python (PyTorch's CUDA libraries)."""
    dirs = set()
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        dirs.update(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")) if os.path.isdir(d))
        dirs.update(d for d in glob.glob(os.path.join(sp, "nvidia", "cu*", "lib")) if os.path.isdir(d))
    return sorted(dirs)


TRY = """
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
print("onnxruntime", ort.__version__, ort.get_available_providers())
g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "t",
                      [helper.make_tensor_value_info("a", TensorProto.FLOAT, [64, 64]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [64, 64])],
                      [helper.make_tensor_value_info("c", TensorProto.FLOAT, [64, 64])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 9
s = ort.InferenceSession(m.SerializeToString(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
a = np.random.rand(64, 64).astype(np.float32); b = np.random.rand(64, 64).astype(np.float32)
print("session providers", s.get_providers(), "max error", float(abs(s.run(None, {"a": a, "b": b})[0] - a @ b).max()))
"""


def unpack(args) -> int:
    gpu = repo_root() / ".gpu"
    target = Path(args.target)
    found = sorted(gpu.glob("p[0-9]*/manifest.json"))
    if not found:
        raise SystemExit(f"no pieces under {gpu}: carry .gpu/p1 .. in the calls before this one")
    manifest = json.loads(found[0].read_text())
    missing = [p for p in manifest["pieces"] if not (gpu / p / "part").is_file()]
    if missing:
        raise SystemExit(f"pieces missing: {', '.join(missing)} (present: {', '.join(p.parent.name for p in found)});"
                         " carry them, back to back, on one warm machine")
    joined = Path(tempfile.gettempdir()) / manifest["name"]
    with open(joined, "wb") as out:
        for p in manifest["pieces"]:
            out.write((gpu / p / "part").read_bytes())
    if sha256(joined) != manifest["sha256"]:
        raise SystemExit(f"{joined}: sha256 differs from the manifest's: a piece is stale or corrupt")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(joined, "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)
    joined.unlink()
    libs = ":".join(cuda_library_dirs())
    lines = [f"export PYTHONPATH={target}${{PYTHONPATH:+:$PYTHONPATH}}"]
    if libs:
        lines.append(f"export LD_LIBRARY_PATH={libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    (target / "env.sh").write_text("\n".join(lines) + "\n")
    print(f"onnxruntime-gpu {manifest['version']} (sm_{manifest['arch']}) in {target}; source {target}/env.sh")
    if args.no_try:
        return 0
    env = dict(os.environ, PYTHONPATH=f"{target}:{os.environ.get('PYTHONPATH', '')}".rstrip(":"),
               LD_LIBRARY_PATH=f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"))
    return subprocess.run([sys.executable, "-c", TRY], env=env).returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_ort.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pack", help="here: the thinned onnxruntime-gpu in pieces under .gpu/")
    a.add_argument("--version", default="1.31.1", help="onnxruntime-gpu version (default 1.31.1: CUDA 13)")
    a.add_argument("--arch", type=int, default=90, help="the one GPU architecture kept (default 90: H100, H200)")
    a.add_argument("--wheel", help="a wheel already here instead of downloading it")
    a.add_argument("--piece-mib", type=int, help="piece size (default: what fits beside the tree that travels)")
    b = sub.add_parser("unpack", help="there: join the pieces, install into /tmp/ort-gpu, try the CUDA provider")
    b.add_argument("--target", default=str(TARGET), help="where the package goes (default /tmp/ort-gpu)")
    b.add_argument("--no-try", action="store_true", help="do not try a CUDA session")
    args = p.parse_args(argv)
    return pack(args) if args.cmd == "pack" else unpack(args)


if __name__ == "__main__":
    sys.exit(main())

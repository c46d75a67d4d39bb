"""C API fixtures: libspecdec and the examples built once per session (into a temporary directory, with the same
command users run), C test programs compiled against them, and broken copies of the tiny export.

Every C program runs with an empty environment (`env -i PATH=/usr/bin:/bin`): the library must find its Python
environment by itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from _capi_helpers import INCLUDE

from tinymodels import shared_dir


def _need_tools():
    missing = [tool for tool in ("gcc", "g++") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the C API tests need {' and '.join(missing)}")
    pytest.importorskip("cffi")
    import sysconfig

    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        pytest.skip("this Python has no shared libpython, which the embedded C API needs")


@pytest.fixture(scope="session")
def capi_build(tmp_path_factory):
    """Run `specdec-build-capi --out DIR` (library, both examples, env -i self-check); returns DIR. Built once per
    run for both worker processes (tests/conftest.py's shared_dir); read-only to the tests."""
    _need_tools()

    def build(root):
        out = root / "build"
        result = subprocess.run([sys.executable, "-m", "specdec.bindings.build", "--out", str(out), "--quiet"],
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
        for name in ("libspecdec.so", "specdec-example-c", "specdec-example-cpp"):
            assert (out / name).is_file(), name
        out.joinpath("build.log").write_text(result.stdout)

    return shared_dir(tmp_path_factory, "capi", build) / "build"


@pytest.fixture(scope="session")
def compile_c(capi_build, tmp_path_factory):
    """compile_c(source, name, cxx=False) -> path of a program linked with libspecdec (rpath to the build), in a
    folder of this worker's (the build is shared by both)."""
    programs = tmp_path_factory.mktemp("capi_programs")

    def compile_one(source, name, cxx=False):
        exe = programs / name
        cmd = (["g++", "-std=c++11"] if cxx else ["gcc", "-std=c99", "-D_POSIX_C_SOURCE=200809L"]) + [
            "-Wall", "-Wextra", "-pedantic", "-Werror", "-O1", "-g", f"-I{INCLUDE}", str(source), "-o", str(exe),
            f"-L{capi_build}", "-lspecdec", f"-Wl,-rpath,{capi_build}", "-pthread", "-lm"]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
        return exe

    return compile_one


@pytest.fixture(scope="session")
def broken_exports(tmp_path_factory, tiny_export):
    """{"missing": no such directory, "corrupt": manifest.json cut short, "tampered": one graph file altered}."""
    root = tmp_path_factory.mktemp("broken_exports")
    corrupt = shutil.copytree(tiny_export, root / "corrupt")
    text = (corrupt / "manifest.json").read_text()
    (corrupt / "manifest.json").write_text(text[:len(text) // 2])
    tampered = shutil.copytree(tiny_export, root / "tampered")
    graph = tampered / json.loads(text)["models"]["draft"]["graphs"]["decoder"]["file"]
    data = bytearray(graph.read_bytes())
    data[-10] ^= 0xFF
    graph.write_bytes(bytes(data))
    return {"missing": root / "missing", "corrupt": corrupt, "tampered": tampered}

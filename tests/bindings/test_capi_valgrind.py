"""The C example under valgrind memcheck: no invalid read/write, use of uninitialised memory or definite leak is
attributed to libspecdec's own code (bindings/capi.c and the cffi-generated glue) or to the example. What CPython,
onnxruntime, tokenizers and the dynamic loader report themselves is listed in bindings/MAINTAINERS.md.

PYTHONMALLOC=malloc makes CPython use malloc for every object, so memcheck sees real allocations instead of
pymalloc's arenas (which it would report as invalid reads). About 40 s on 2 cores; SPECDEC_SKIP_VALGRIND=1 skips."""

from __future__ import annotations

import os
import shutil

import pytest
from _capi_helpers import run_program, valgrind_findings


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(os.environ.get("SPECDEC_SKIP_VALGRIND") == "1", reason="SPECDEC_SKIP_VALGRIND=1")
def test_example_is_clean_under_valgrind(capi_build, tiny_export, tmp_path):
    argv = [capi_build / "specdec-example-c", tiny_export, "--ids", "20,30,1", "--max-new-tokens", "6", "--gamma", "3",
            "--draft", "lookup,draft",
            "--temperature", "3.0", "--seed", "5", "--threads", "1"]
    plain = run_program(argv).stdout
    log = tmp_path / "memcheck.log"
    result = run_program(["valgrind", "--error-limit=no", "--num-callers=40", "--leak-check=full",
                          "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite", f"--log-file={log}",
                          *argv], env={"PYTHONMALLOC": "malloc"}, timeout=600)
    # same tokens under valgrind
    keep = ("ids:", "stream:", "stream_ids:", "stream_text:")
    assert [l for l in result.stdout.splitlines() if l.startswith(keep)] == \
           [l for l in plain.splitlines() if l.startswith(keep)]
    findings = valgrind_findings(log.read_text())
    assert findings["summary"], "no memcheck summary"
    assert findings["own"] == [], "\n".join(findings["own"])
    assert findings["definitely_lost_own"] == [], "\n".join(findings["definitely_lost_own"])


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_attribution_catches_a_real_bug(tmp_path):
    """Control: an out-of-bounds read and a leak in a program of ours are reported as ours."""
    import subprocess

    src = tmp_path / "example.c"
    src.write_text("#include <stdlib.h>\n#include <stdio.h>\n"
                   "int main(void) { int *p = malloc(4 * sizeof *p); int x = p[4]; p = malloc(64); "
                   "printf(\"%d %p\\n\", x, (void *)p); p = NULL; return 0; }\n")
    exe = tmp_path / "specdec-example-control"
    subprocess.run(["gcc", "-O0", "-g", str(src), "-o", str(exe)], check=True)
    log = tmp_path / "memcheck.log"
    run_program(["valgrind", "--leak-check=full", "--show-leak-kinds=definite", f"--log-file={log}", exe])
    findings = valgrind_findings(log.read_text())
    assert any(f.startswith("Invalid read of size 4 at main (example.c") for f in findings["own"]), findings
    assert any("64 bytes" in f for f in findings["definitely_lost_own"]), findings


def test_a_third_partys_one_time_class_object_is_not_counted_as_our_leak():
    """A leak record whose stack passes through pyo3's one-time class-object creation is the third party's even
    with libspecdec below it (CPython 3.12 makes tokenizers' Encoding class at the first encode, which libspecdec
    calls); the same record without that frame is ours."""
    def record(frames):
        lines = ["==7== 80 bytes in 1 blocks are definitely lost in loss record 25 of 44",
                 "==7==    at 0x4848: realloc (in /usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so)"]
        lines += [f"==7==    by 0x{n + 1:X}: {f}" for n, f in enumerate(frames)]
        return ("==7== Memcheck, a memory error detector\n==7== \n" + "\n".join(lines)
                + "\n==7== \n==7== ERROR SUMMARY: 1 errors from 1 contexts\n")

    below = ["PyObject_Call (in /usr/lib/libpython3.12.so)", "_cffi_f_specdec_generate (in /b/libspecdec.so)"]
    third = record(["pyo3::pyclass::create_type_object::inner (in /site/tokenizers/tokenizers.abi3.so)", *below])
    ours = record(["PyList_New (in /usr/lib/libpython3.12.so)", *below])
    assert valgrind_findings(third)["definitely_lost_own"] == []
    assert len(valgrind_findings(ours)["definitely_lost_own"]) == 1

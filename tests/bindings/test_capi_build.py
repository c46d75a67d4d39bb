"""The build command and what it produces: the exported symbols are exactly the header's functions, the header
compiles on its own as C99/C11/C++, the library finds its libpython and its Python environment from an empty
environment (also when dlopen()ed RTLD_LOCAL, and inside a Python host), and a broken Python environment is a
status, not a crash."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig

import pytest
from _capi_helpers import INCLUDE, run_program
from tinymodels import failing_at_run_time

HEADER = INCLUDE / "specdec.h"


def header_functions() -> set:
    return set(re.findall(r"SPECDEC_API\s+[\w\s\*]+?\b(specdec_\w+)\s*\(", HEADER.read_text()))


def test_build_prints_the_commands(capi_build):
    log = (capi_build / "build.log").read_text()
    assert f"library: {capi_build / 'libspecdec.so'}" in log
    assert f"include: {INCLUDE}" in log
    assert "check:   libspecdec" in log and ": ok (" in log


def test_exports_exactly_the_header_functions(capi_build):
    names = subprocess.run(["nm", "-D", "--defined-only", str(capi_build / "libspecdec.so")], capture_output=True,
                           text=True, check=True).stdout.split()
    exported = {n for n in names if n.startswith("specdec_")}
    assert exported == header_functions()
    assert len(exported) == 17                     # version 7 added specdec_transcribe_segments, _stop_reason_name
    assert "specdec_params_init" in exported and "specdec_params_default" not in exported    # an inline function
    assert not [n for n in names if n.startswith("_specdec")]      # the Python-side entry points stay private


def test_links_libpython_by_rpath(capi_build):
    dynamic = subprocess.run(["readelf", "-d", str(capi_build / "libspecdec.so")], capture_output=True, text=True,
                             check=True).stdout
    assert sysconfig.get_config_var("INSTSONAME") in dynamic
    assert sysconfig.get_config_var("LIBDIR") in dynamic            # RUNPATH
    assert "libspecdec.so" in dynamic                               # SONAME


def struct_fields(name: str) -> list:
    """Field names of `typedef struct name { ... } name;` in the header, in order."""
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), HEADER.read_text(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return re.findall(r"(\w+)(?:\[\d+\])?\s*;", body)


# Fields appended to the versioned structs after the API version 2 layout, in order, by the version that added them.
# A new field goes at the end of its struct and here; nothing is ever removed, reordered or retyped.
APPENDED = {
    "specdec_params": [("draft", 3)] + [(name, 4) for name in ("num_beams", "length_penalty", "early_stopping",
                                                                "num_return_sequences", "min_new_tokens",
                                                                "no_repeat_ngram_size")] + [("candidates", 5)],
    "specdec_stats": [(name, 3) for name in ("target_only_rounds", "lookup_rounds", "lookup_proposed",
                                             "lookup_accepted", "model_rounds", "model_proposed", "model_accepted",
                                             "chain_proposed", "chain_accepted")],
}


def test_header_structs_match_the_python_api():
    """specdec_params has Params' fields and specdec_stats has Stats' (plus its two rates and the stop reason; its
    per-source counters stand for Stats.sources), so _capi.py fills every field and the header documents what the
    runtime measures. Both start with the C-only struct_size and end with the fields appended since version 2; apart
    from that the params are in Params' order."""
    from dataclasses import fields

    from specdec.runtime import Params, Stats

    params, stats = struct_fields("specdec_params"), struct_fields("specdec_stats")
    for name, got in (("specdec_params", params), ("specdec_stats", stats)):
        appended = [field for field, _ in APPENDED[name]]
        assert got[0] == "struct_size", name
        assert got[len(got) - len(appended):] == appended, name
    py = [f.name for f in fields(Params)]
    later = [field for field, _ in APPENDED["specdec_params"]]
    assert sorted(params[1:]) == sorted(py)
    assert [n for n in params[1:] if n not in later] == [n for n in py if n not in later]
    v2_stats = stats[1:len(stats) - len(APPENDED["specdec_stats"])]
    assert set(v2_stats) == {f.name for f in fields(Stats)} - {"sources"} | {"acceptance_rate",
                                                                              "tokens_per_target_call", "stop_reason"}
    assert "target_s" in stats and "verify_s" not in stats and "sampling_s" not in stats
    text = HEADER.read_text()
    version = int(re.search(r"#define SPECDEC_API_VERSION (\d+)", text).group(1))
    assert max(v for fields_ in APPENDED.values() for _, v in fields_) == 5
    assert version == 7                                   # versions 6 and 7 added functions (Whisper), no field
    # the version comment describes every version, and the struct comments mark where the appended fields begin
    assert re.search(r"^\s+3: specdec_params and specdec_stats are versioned", text, re.M)
    assert re.search(r"^\s+4: beam search", text, re.M)
    assert re.search(r"^\s+5: specdec_params appends `candidates`", text, re.M)
    assert re.search(r"^\s+6: Whisper exports\. New functions: specdec_transcribe", text, re.M)
    assert re.search(r"^\s+7: Whisper audio of any length and timestamps\. .*New function:\s+"
                     r"specdec_transcribe_segments", text, re.M | re.S)
    assert text.count("---- appended in API version 3") == 2
    assert text.count("---- appended in API version 4") == 1
    assert text.count("---- appended in API version 5") == 1
    assert "gamma 4" not in text and "Default 4" not in text


@pytest.mark.parametrize("std", ["c99", "c11", "c++11", "c++17"])
def test_header_compiles_alone(tmp_path, std):
    cxx = std.startswith("c++")
    src = tmp_path / ("use.cpp" if cxx else "use.c")
    src.write_text('#include "specdec.h"\n' + ('#include "specdec.hpp"\n' if cxx else "") +
                   "int main(void) { specdec_params p = specdec_params_default(); "
                   "specdec_stats s = specdec_stats_empty(); p.draft = \"lookup\"; "
                   "return p.gamma == SPECDEC_GAMMA_AUTO && s.struct_size >= SPECDEC_STATS_SIZE_MIN; }\n")
    cmd = ["g++" if cxx else "gcc", f"-std={std}", "-Wall", "-Wextra", "-pedantic", "-Werror", f"-I{INCLUDE}",
           "-fsyntax-only", str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


DLOPEN_HOST = r"""
#include <dlfcn.h>
#include <stdio.h>
#include "specdec.h"
int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { printf("dlopen: %s\n", dlerror()); return 1; }
    specdec_status (*open_)(const char *, const char *, specdec_session **) =
        (specdec_status (*)(const char *, const char *, specdec_session **))dlsym(lib, "specdec_open");
    void (*close_)(specdec_session *) = (void (*)(specdec_session *))dlsym(lib, "specdec_close");
    const char *(*last)(void) = (const char *(*)(void))dlsym(lib, "specdec_last_error");
    specdec_session *s = NULL;
    specdec_status st = open_(argv[2], "{\"provider\": \"cpu\"}", &s);
    printf("status %d: %s\n", (int)st, last());
    close_(s);
    return st != SPECDEC_OK;
}
"""


def test_dlopen_with_rtld_local(capi_build, tiny_export, tmp_path):
    """A plugin host that dlopen()s the library RTLD_LOCAL: numpy and onnxruntime still find CPython's symbols."""
    src = tmp_path / "host.c"
    src.write_text(DLOPEN_HOST)
    exe = tmp_path / "host"
    subprocess.run(["gcc", "-std=c99", f"-I{INCLUDE}", str(src), "-o", str(exe), "-ldl"], check=True)
    out = run_program([exe, capi_build / "libspecdec.so", tiny_export]).stdout
    assert out.startswith("status 0: ")


def test_inside_a_python_host(capi_build, tiny_export):
    """Loaded by a process that already runs Python (ctypes), the library uses that interpreter."""
    code = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(capi_build / 'libspecdec.so')!r})\n"
        "lib.specdec_last_error.restype = ctypes.c_char_p\n"
        "session = ctypes.c_void_p()\n"
        f"st = lib.specdec_open({str(tiny_export).encode()!r}, b'{{\"provider\": \"cpu\"}}', ctypes.byref(session))\n"
        "print(st, lib.specdec_last_error().decode())\n"
        "st = lib.specdec_open(None, None, ctypes.byref(ctypes.c_void_p()))\n"
        "print(st, lib.specdec_last_error().decode())\n"
        "lib.specdec_close(session)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "0 "
    assert second.startswith("1 specdec_open: export_dir is NULL")


def test_broken_python_environment_is_a_status(capi_build, tiny_export, tmp_path):
    # the interpreter cannot start at all
    result = run_program([capi_build / "specdec-example-c", tiny_export, "--ids", "5,1"],
                         env={"PYTHONHOME": str(tmp_path / "nowhere")}, check=False)
    assert result.returncode == 1
    assert "specdec_open failed with SPECDEC_E_PYTHON: specdec_open: the embedded Python interpreter" in result.stderr
    # it starts, but specdec cannot be imported (shadowed here by a broken package on PYTHONPATH)
    (tmp_path / "specdec").mkdir()
    (tmp_path / "specdec" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    result = run_program([capi_build / "specdec-example-c", tiny_export, "--ids", "5,1"],
                         env={"PYTHONPATH": str(tmp_path)}, check=False)
    assert result.returncode == 1
    assert "SPECDEC_E_PYTHON: specdec_open: the embedded Python cannot import specdec.bindings._capi " \
           "(ImportError: broken on purpose)" in result.stderr


def test_onnxruntime_failing_mid_generation_is_specdec_e_runtime(capi_build, tiny_export, tmp_path):
    """A graph that loads but fails when it runs: SPECDEC_E_RUNTIME with the runtime's one-line message (not
    SPECDEC_E_INVALID_ARGUMENT: nothing the caller passed is wrong), and target-only requests still work."""
    bad = failing_at_run_time(tiny_export, tmp_path / "bad")
    example = capi_build / "specdec-example-c"
    failed = run_program([example, bad, "--ids", "5,6,7,1", "--max-new-tokens", "8", "--gamma", "2", "--draft",
                          "draft"], check=False)
    assert failed.returncode == 1, failed.stderr
    assert "failed with SPECDEC_E_RUNTIME: specdec_generate_ids: onnxruntime failed running a graph of this export" \
        in failed.stderr, failed.stderr
    assert failed.stderr.count("\n") == 1
    assert run_program([example, bad, "--ids", "5,6,7,1", "--max-new-tokens", "8", "--gamma", "0"]).returncode == 0


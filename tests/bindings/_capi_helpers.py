"""Helpers for the C API tests (imported as `_capi_helpers`: a unique name, unlike conftest)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
INCLUDE = PROJECT / "include"
CLEAN_ENV = {"PATH": "/usr/bin:/bin"}


def run_program(argv, timeout=300, env=None, check=True, cwd=None) -> subprocess.CompletedProcess:
    """Run a C program with a clean environment (plus `env`), in `cwd` if given."""
    result = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in {**CLEAN_ENV, **(env or {})}.items()),
                             *map(str, argv)], capture_output=True, text=True, timeout=timeout,
                            check=False, cwd=cwd)
    if check:
        assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def tap_results(stdout: str) -> dict:
    """{case name: None if ok else the failure detail} from "ok NAME (...)" / "not ok NAME: detail" lines."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith("ok "):
            results[line[3:].split(" (")[0].strip()] = None
        elif line.startswith("not ok "):
            name, _, detail = line[7:].partition(":")
            results[name.strip()] = detail.strip() or "failed"
    return results


# --- valgrind ---------------------------------------------------------------------------------------------------

ERROR_KINDS = ("Invalid read", "Invalid write", "Invalid free", "Mismatched free", "Conditional jump",
               "Use of uninitialised", "Syscall param", "Source and destination overlap", "Argument ")
# the library (its C is compiled as libspecdec.c) and our programs, by binary or (with -g) source file name
OWN_CODE = ("libspecdec", "specdec-example", "example.c", "example.cpp", "capi_errors", "capi_threads")
# a third party's one-time initialisation, kept for the process's life: an extension's class object made the first
# time the class is used (pyo3's, in tokenizers). Whether libspecdec is below it on the stack depends on when that
# first use happens (at import on CPython 3.11; at the first encode, called by libspecdec, on 3.12), not on our code.
ONE_TIME_INIT = ("create_type_object",)


def _where(frame: str) -> str:
    """'fn (file.c:12)' or 'fn (in /path/lib.so)' -> 'file.c' or '/path/lib.so'."""
    inner = frame[frame.rfind("(") + 1:-1] if frame.endswith(")") else frame
    return inner[3:] if inner.startswith("in ") else inner.split(":")[0]


def valgrind_findings(log: str) -> dict:
    """Memcheck errors grouped by who they are attributed to: the frame where the error happened (valgrind's own
    replacement functions such as memcpy skipped). {"own": [...], "other": {object: count}, "definitely_lost_own":
    [...], "summary": "ERROR SUMMARY ..."}. Leak records count as "own" when a libspecdec frame allocated them, unless
    a third party's one-time initialisation (ONE_TIME_INIT) did."""
    import re

    findings = {"own": [], "other": {}, "definitely_lost_own": [], "summary": ""}
    for block in re.split(r"\n==\d+== \n", log):
        lines = [re.sub(r"^==\d+== ?", "", line) for line in block.splitlines() if line.startswith("==")]
        if not lines:
            continue
        head = lines[0].strip()
        frames = [re.sub(r"^\s*(at|by) 0x[0-9A-Fa-f]+: ", "", line) for line in lines[1:]
                  if re.match(r"^\s*(at|by) 0x", line)]
        if head.startswith(ERROR_KINDS):
            own_frames = [f for f in frames if "vgpreload" not in f]
            where = _where(own_frames[0]) if own_frames else "?"
            if any(mark in where for mark in OWN_CODE):
                findings["own"].append(head + " at " + (own_frames[0] if own_frames else "?"))
            else:
                findings["other"][where] = findings["other"].get(where, 0) + 1
        elif ("definitely lost" in head and "loss record" in head
              and any(any(mark in _where(f) for mark in OWN_CODE) for f in frames)
              and not any(mark in f for mark in ONE_TIME_INIT for f in frames)):
            findings["definitely_lost_own"].append(head + " via " + " <- ".join(frames[:6]))
        for line in lines:
            if "ERROR SUMMARY" in line:
                findings["summary"] = line.strip()
    return findings

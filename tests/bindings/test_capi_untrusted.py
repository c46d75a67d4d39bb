"""Untrusted export directories through the C API (tests/bindings/capi_open.c): specdec_open returns a status and a
one-line message for every hostile directory of tests/hostile_exports.py (HOSTILE) and for fuzzed ones (tests/fuzz_exports.py KINDS), never
a crash or a hang, and a session opened on a good export keeps giving its reference tokens in the same process.

The fuzz cases run one subprocess each (a signal or a time-out while opening is a failure of that case; what
generating from a directory that opened does is counted apart, for the reason tests/runtime/loading/test_fuzz_export.py
gives): FUZZ_CASES by default, at most FUZZ_SECONDS of new cases; SPECDEC_FUZZ_C_CASES, SPECDEC_FUZZ_SECONDS and SPECDEC_FUZZ_SEED make a larger run,
and SPECDEC_FUZZ_REPORT=DIR writes its summary to DIR/fuzz-c.json. The cases are the Python harness's
(tests/runtime/loading/test_fuzz_export.py) with the same seed and index."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import time

import pytest
from _capi_helpers import HERE, run_program

from tinymodels import add_datastore, random_prompts

from fuzz_exports import FuzzSettings, finish_fuzz, make_case
from hostile_exports import HOSTILE, copy_export, make_hostile, with_external_data

FUZZ_CASES, FUZZ_SECONDS = 40, 45
CASE_TIMEOUT = 120
LINE = re.compile(r"case (\d+) (refused (SPECDEC_\w+) (.*)|(loaded)|good (same|differs.*)|run (SPECDEC_\w+))$")


@pytest.fixture(scope="module")
def capi_open(compile_c):
    return compile_c(HERE / "capi_open.c", "capi_open")


@pytest.fixture(scope="module")
def base(tiny_export, tmp_path_factory):
    export = copy_export(tiny_export, tmp_path_factory.mktemp("capi_untrusted") / "base")
    with_external_data(export)
    add_datastore(export, random_prompts(48, 60, seed=5))      # the datastore's file is fuzzed too
    return export


def parse(stdout: str) -> dict:
    """{case index: {"refused": (status, message)} or {"loaded": True, "run": status of generating from it}, plus
    "good": "same" or the difference}."""
    cases = collections.defaultdict(dict)
    for line in stdout.splitlines():
        match = LINE.match(line)
        assert match, f"unexpected output line (a message of more than one line?): {line!r}"
        index = int(match.group(1))
        if match.group(3):
            cases[index]["refused"] = (match.group(3), match.group(4))
        elif match.group(5):
            cases[index]["loaded"] = True
        elif match.group(6):
            cases[index]["good"] = match.group(6)
        else:
            cases[index]["run"] = match.group(7)
    return cases


def test_every_hostile_directory_is_refused_and_the_good_session_survives(capi_open, base, tmp_path):
    names = list(HOSTILE)
    dirs = [make_hostile(base, tmp_path / f"h{i}", name) for i, name in enumerate(names)]
    result = run_program([capi_open, base, *dirs], timeout=600)
    cases = parse(result.stdout)
    assert "Traceback" not in result.stderr, result.stderr
    for i, name in enumerate(names):
        assert "refused" in cases[i], f"{name}: {cases[i]}"
        status, message = cases[i]["refused"]
        assert status == "SPECDEC_E_EXPORT", f"{name}: {status} {message}"
        assert message.startswith("specdec_open: ") and HOSTILE[name][1] in message, f"{name}: {message}"
        assert "[out_session not NULL]" not in message, name
        assert cases[i]["good"] == "same", f"after {name}: {cases[i]['good']}"


def run_case(capi_open, base, export) -> dict:
    """One fuzz case in its own process: "outcome" of specdec_open (refused / loaded / crash / hang / ...), "good"
    (the good session afterwards) and, for a directory that opened, "run": the status of generating from it, or
    "crash" / "hang" when the process died or stalled there (after the open and the good session's lines)."""
    began = time.perf_counter()
    try:
        result = run_program([capi_open, base, export], timeout=CASE_TIMEOUT, check=False)
        stdout, code = result.stdout, result.returncode
    except subprocess.TimeoutExpired as err:
        stdout, code = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else err.stdout or "", None
        result = None
    try:
        case = parse(stdout).get(0, {})
    except AssertionError as err:
        return {"outcome": "not one line", "detail": str(err)}
    died = "hang" if code is None else "crash" if code < 0 else None
    if "good" not in case:               # died, or stalled, before the open and the good session were through
        detail = f"exit {code}" if died is None else f"signal {-code}" if died == "crash" else f"{CASE_TIMEOUT} s"
        return {"outcome": died or "harness", "detail": detail, "stderr": result.stderr[-2000:] if result else ""}
    out = {"outcome": "refused" if "refused" in case else "loaded", "good": case["good"],
           "seconds": time.perf_counter() - began, "traceback": bool(result) and "Traceback" in result.stderr}
    if "refused" in case:
        out["status"], out["message"] = case["refused"]
    else:
        out["run"] = case.get("run") or died or f"exit {code}"
    return out


def verdict(result: dict) -> str | None:
    """None when specdec_open ended as it must (what generating from a directory that opened did is counted apart,
    as in tests/runtime/loading/test_fuzz_export.py), else what went wrong."""
    if result["outcome"] not in ("refused", "loaded"):
        return f"{result['outcome']}: {result.get('detail', '')}"
    if result["good"] != "same":
        return f"the good session broke: {result['good']}"
    if result["traceback"]:
        return "a traceback on stderr"
    if result["outcome"] == "refused" and (result["status"] == "SPECDEC_OK" or not result["message"].startswith(
            "specdec_open: ")):
        return f"refused without a status and a message: {result['status']} {result['message']!r}"
    return None


def test_fuzzed_exports_through_the_c_api(capi_open, base, tmp_path):
    settings = FuzzSettings.from_env("C_", FUZZ_CASES, FUZZ_SECONDS)
    results = []
    began = time.perf_counter()
    for index in range(settings.cases):
        if time.perf_counter() - began > settings.seconds:
            break
        case = tmp_path / f"case{index}"
        kind, detail = make_case(base, case, settings.seed, index)
        result = run_case(capi_open, base, case / "export")
        result.update(index=index, kind=kind, detail=detail)
        results.append(result)
        if verdict(result) is None:
            shutil.rmtree(case, ignore_errors=True)
    outcomes = collections.Counter(r["outcome"] for r in results)
    runs = collections.Counter(r["run"] for r in results if "run" in r)
    summary = {"cases": len(results), "seed": settings.seed, "seconds": round(time.perf_counter() - began, 1),
               "kinds": len({r["kind"] for r in results}), "refused": outcomes["refused"],
               "loaded": outcomes["loaded"], "crashes": outcomes["crash"], "hangs": outcomes["hang"],
               "failures": sum(verdict(r) is not None for r in results), "run_after_load": dict(runs),
               "run_problems": [f"case {r['index']} ({r['kind']}: {r['detail']!s:.60}): {r['run']}" for r in results
                                if r.get("run") not in (None, "SPECDEC_OK", "SPECDEC_E_INVALID_ARGUMENT")]}
    finish_fuzz("C API", "fuzz-c.json", summary, results, verdict, settings)

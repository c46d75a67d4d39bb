"""Fuzzed export directories opened from Python: random mutations of a good export (tests/fuzz_exports.py KINDS:
manifest.json's types, missing keys, numbers, shapes, paths, ids and raw bytes; graph files truncated, bit-flipped,
with hostile external-data entries or a malformed model inside well-formed protobuf; tokenizer.json truncated,
bit-flipped or mangled; files swapped for symlinks out), every edited file's sha256 rewritten so that the loader's own
checks are what is tested. Each case is opened by SpeculativeDecoder.load in a worker process that holds a decoder of
the good export; a case passes when the load ends in a one-line SpecdecError (or loads: a harmless mutation, such as
a flipped weight bit or an edited comment field), the worker neither dies (a crash) nor stops answering (a hang)
while loading, and the good decoder still gives its reference tokens afterwards, in the same process.

A case that loads is then generated from, and what that did is counted apart ("run"), not asserted: the graphs are
programs that ONNX Runtime executes, and a graph crafted (or mutated) to hit a bug in one of its kernels can crash
it at run time however the loader checks the directory. (Such graphs exist: the larger run in docs/guides/reliability.md found a draft
decoder whose Min node lost an input name, which ONNX Runtime 1.32 loads and then segfaults on when it runs.) The checksums are
what guards against accidental corruption; docs/guides/reliability.md says what this means for hostile exports.

Seeded and bounded: CI-sized by default (FUZZ_CASES cases, at most FUZZ_SECONDS seconds of new cases, seed 0);
SPECDEC_FUZZ_CASES, SPECDEC_FUZZ_SECONDS and SPECDEC_FUZZ_SEED make a larger run, and SPECDEC_FUZZ_REPORT=DIR writes
its summary (the figures in docs/guides/reliability.md) to DIR/fuzz-python.json. The C API side is
tests/bindings/test_capi_untrusted.py.
"""

from __future__ import annotations

import collections
import shutil
import time

import pytest

from tinymodels import add_datastore, random_prompts

from export_worker import PythonWorker
from fuzz_exports import KINDS, FuzzSettings, finish_fuzz, make_case
from hostile_exports import copy_export, with_external_data

FUZZ_CASES, FUZZ_SECONDS = 300, 60
CASE_TIMEOUT = 120      # seconds without an answer: a hang


@pytest.fixture(scope="module")
def base(tiny_export, tmp_path_factory):
    export = copy_export(tiny_export, tmp_path_factory.mktemp("fuzz") / "base")
    with_external_data(export)
    add_datastore(export, random_prompts(48, 60, seed=5))      # the datastore's file is fuzzed too
    return export


def verdict(result: dict) -> str | None:
    """None when the load ended as it must, else what went wrong."""
    outcome = result["outcome"]
    if outcome not in ("refused", "loaded"):
        return f"{outcome}: {result.get('message', '')!s:.300}"
    if result.get("good") is not True:
        return f"the good decoder broke: {result.get('good')}"
    if outcome == "refused":
        message = result["message"]
        if not message or "\n" in message or "\r" in message or len(message) >= 2048:
            return f"not one line: {message!r:.300}"
    return None


def run_kind(run: str) -> str:
    return run.split(":")[0].split(" (")[0] if run.startswith(("refused", "raised", "crash")) else run


def summarize(results: list, seconds: float, settings: FuzzSettings) -> dict:
    outcomes = collections.Counter(r["outcome"].split(" (")[0] for r in results)
    return {"cases": len(results), "seed": settings.seed, "seconds": round(seconds, 1), "kinds": len(set(
        r["kind"] for r in results)), "per_kind": {k: dict(collections.Counter(r["outcome"] for r in results
                                                                               if r["kind"] == k)) for k in KINDS},
            "refused": outcomes["refused"], "loaded": outcomes["loaded"], "crashes": outcomes["crash"],
            "hangs": outcomes["hang"], "tracebacks": outcomes["traceback"],
            "failures": sum(verdict(r) is not None for r in results),
            "run_after_load": dict(collections.Counter(run_kind(r["run"]) for r in results if "run" in r)),
            "run_problems": [f"case {r['index']} ({r['kind']}: {r['detail']!s:.60}): {r['run']!s:.200}"
                             for r in results if "run" in r and run_kind(r["run"]) not in ("ok", "refused")]}


def test_fuzzed_exports_from_python(base, tmp_path):
    settings = FuzzSettings.from_env("", FUZZ_CASES, FUZZ_SECONDS)
    worker = PythonWorker(base, tmp_path / "worker-stderr.txt")
    results = []
    began = time.perf_counter()
    try:
        for index in range(settings.cases):
            if time.perf_counter() - began > settings.seconds:
                break
            case = tmp_path / f"case{index}"
            kind, detail = make_case(base, case, settings.seed, index)
            result = worker.open(case / "export", CASE_TIMEOUT)
            result.update(index=index, kind=kind, detail=detail)
            results.append(result)
            if verdict(result) is None:
                shutil.rmtree(case, ignore_errors=True)      # a failing case stays for a look
    finally:
        worker.close()
    summary = summarize(results, time.perf_counter() - began, settings)
    finish_fuzz("Python", "fuzz-python.json", summary, results, verdict, settings)
    assert summary["refused"] > summary["loaded"]      # most mutations must be refused, not shrugged off

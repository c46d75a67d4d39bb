"""Threads of a C host (tests/bindings/capi_threads.c): racing first calls, two sessions on two threads (which
really overlap: one completes a generation while the other is parked in a stream callback), one session shared by
threads (serialized: a second call waits for the first), sessions opened and closed on threads. Every output is
compared with a single-threaded reference."""

from __future__ import annotations

import pytest
from _capi_helpers import HERE, run_program, tap_results

CASES = ["first_calls_race_to_start_python", "two_sessions_two_threads", "one_session_shared_by_threads",
         "open_generate_close_on_threads", "sessions_run_concurrently", "one_session_is_serialized"]


@pytest.fixture(scope="module")
def threads_run(compile_c, tiny_export):
    exe = compile_c(HERE / "capi_threads.c", "capi_threads")
    return run_program([exe, tiny_export, 2], timeout=300).stdout


@pytest.mark.parametrize("case", CASES)
def test_threads(threads_run, case):
    results = tap_results(threads_run)
    assert case in results, f"case {case} did not run (crash or hang?):\n{threads_run}"
    assert results[case] is None, results[case]


def test_references_match_the_python_api(threads_run, tiny_export):
    from specdec.runtime import SpeculativeDecoder

    dec = SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)
    prompts = [[20, 30, 1], [5, 6, 7, 1], [33, 1], [40, 41, 42, 1], [11, 12, 1], [9, 1]]
    drafts = ["draft", "lookup,draft", "lookup", "draft", "lookup+draft", "none"]
    refs = [line.split(":")[1].split() for line in threads_run.splitlines() if line.startswith("reference ")]
    assert len(refs) == len(prompts)
    for j, (ids, ref) in enumerate(zip(prompts, refs)):
        kwargs = dict(temperature=3.0, seed=100 + j) if j % 2 else {}
        res = dec.generate(input_ids=ids, max_new_tokens=16, gamma=1 + j % 4, draft=drafts[j], **kwargs)
        assert ref == [str(t) for t in res.token_ids], j

"""Bad arguments from C (tests/bindings/capi_errors.c): each case returns a status and a one-line message, never
crashes, and the session still gives its reference outputs afterwards. Also: the constants the C side reports
(version, params defaults, session info) agree with the Python API."""

from __future__ import annotations

import pytest
from _capi_helpers import HERE, run_program, tap_results

CASES = [
    "open_null_out_session", "open_null_export_dir", "open_missing_export", "open_corrupt_manifest",
    "open_tampered_file", "open_bad_options", "open_bad_provider", "open_draft_option", "long_message_truncated",
    "open_unreadable_path",
    "null_session", "null_input_ids", "bad_token_ids", "null_outputs", "buffer_too_small_ids",
    "buffer_too_small_text", "invalid_gamma", "invalid_max_new_tokens", "invalid_temperature", "invalid_top_k",
    "invalid_top_p", "invalid_lenience", "bad_prompt", "stream_bad_arguments", "stream_stopped_by_callback",
    "stream_reentrant_call", "close_null_twice", "closed_session_detected", "last_error_is_thread_local",
    "status_names",
]


@pytest.fixture(scope="module")
def errors_run(compile_c, tiny_export, broken_exports):
    exe = compile_c(HERE / "capi_errors.c", "capi_errors")
    result = run_program([exe, tiny_export, broken_exports["missing"], broken_exports["corrupt"],
                          broken_exports["tampered"]], timeout=300)
    return result.stdout


@pytest.fixture(scope="module")
def python_decoder(tiny_export):
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)


def test_every_case_ran(errors_run):
    assert set(tap_results(errors_run)) == set(CASES), errors_run


@pytest.mark.parametrize("case", CASES)
def test_bad_argument(errors_run, case):
    results = tap_results(errors_run)
    assert case in results, f"case {case} did not run (crash?):\n{errors_run}"
    assert results[case] is None, results[case]


def _line(stdout, prefix):
    lines = [line[len(prefix):].strip() for line in stdout.splitlines() if line.startswith(prefix)]
    assert lines, f"no '{prefix}' line:\n{stdout}"
    return lines[0]


def test_version_matches_the_package(errors_run):
    import specdec

    assert _line(errors_run, "version:") == specdec.__version__


def test_params_defaults_match_the_python_api(errors_run):
    from specdec.runtime import Params

    got = dict(item.split("=") for item in _line(errors_run, "defaults:").split())
    defaults = Params().as_dict()
    assert set(got) == set(defaults)
    for name, value in got.items():
        assert float(value) == float(defaults[name]), name


def test_session_info_matches_the_decoder(errors_run, python_decoder):
    got = dict(item.split("=") for item in _line(errors_run, "info:").split())
    assert got == {"gamma_max": str(python_decoder.gamma_max), "max_length": str(python_decoder.max_length),
                   "vocab_size": str(python_decoder.vocab_size), "eos_token_id": str(python_decoder.eos_id),
                   "provider": "cpu"}


def test_reference_outputs_match_the_python_api(errors_run, python_decoder):
    """The outputs every case re-checks are the Python API's own."""
    greedy = python_decoder.generate(input_ids=[20, 30, 1], max_new_tokens=12, gamma=3)
    sampled = python_decoder.generate(input_ids=[20, 30, 1], max_new_tokens=12, gamma=3, temperature=3.0, top_k=40,
                                      top_p=0.98, seed=7)
    text = python_decoder.generate("w20 w30", max_new_tokens=12, gamma=3)
    assert _line(errors_run, "reference greedy:").split() == [str(t) for t in greedy.token_ids]
    assert _line(errors_run, "reference sampled:").split() == [str(t) for t in sampled.token_ids]
    assert _line(errors_run, "reference text:") == text.text
    assert text.text        # a non-empty text, so the text buffer cases mean something

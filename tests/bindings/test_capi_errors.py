"""Bad arguments from C (tests/bindings/capi_errors.c): each case returns a status and a one-line message, never
crashes, and the session still gives its reference outputs afterwards. Also: the constants the C side reports
(version, params defaults, session info) agree with the Python API; the versioned structs (struct_size 0 or too
small or too large refused; an older, smaller layout works and gets the defaults of the fields it lacks, e.g. draft
auto; a newer, larger one works and its unknown fields are left alone); draft names (unknown names and empty chains
refused with the choices named, the session usable afterwards; every source gives the target's greedy tokens) and
the per-source stats counters, which equal the Python API's Stats.sources summed by kind."""

from __future__ import annotations

import pytest
from _capi_helpers import HERE, run_program, tap_results

CASES = [
    "open_null_out_session", "open_null_export_dir", "open_missing_export", "open_corrupt_manifest",
    "open_tampered_file", "open_bad_options", "open_bad_provider", "open_draft_option", "open_datastore_option",
    "open_graph_capture_option",
    "long_message_truncated",
    "open_unreadable_path",
    "null_session", "null_input_ids", "bad_token_ids", "null_outputs", "buffer_too_small_ids",
    "buffer_too_small_text", "invalid_gamma", "invalid_max_new_tokens", "invalid_temperature", "invalid_top_k",
    "invalid_top_p", "invalid_lenience", "bad_prompt", "stream_bad_arguments", "stream_stopped_by_callback",
    "stream_reentrant_call", "close_null_twice", "closed_session_detected", "last_error_is_thread_local",
    "status_names",
    # API version 3: versioned structs, draft sources
    "params_struct_size_invalid", "stats_struct_size_invalid", "older_params_layout", "older_stats_layout",
    "newer_layouts", "unknown_draft", "empty_draft_chain", "draft_sources_greedy_exact",
]


@pytest.fixture(scope="module")
def errors_run(compile_c, tiny_export, broken_exports, tiny_capture_export):
    exe = compile_c(HERE / "capi_errors.c", "capi_errors")
    result = run_program([exe, tiny_export, broken_exports["missing"], broken_exports["corrupt"],
                          broken_exports["tampered"], tiny_capture_export], timeout=300)
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
    """specdec_params_default() is Params(): gamma SPECDEC_GAMMA_AUTO is "auto", draft NULL is "auto"."""
    from specdec.runtime import Params

    got = dict(item.split("=") for item in _line(errors_run, "defaults:").split())
    sizes = dict(item.split("=") for item in _line(errors_run, "sizes:").split())
    assert got.pop("struct_size") == sizes["params"]
    defaults = Params().as_dict()
    assert set(got) == set(defaults)
    assert (got.pop("gamma"), defaults.pop("gamma")) == (sizes["gamma_auto"], "auto")
    assert (got.pop("draft"), defaults.pop("draft")) == ("NULL", "auto")
    for name, value in got.items():
        assert float(value) == float(defaults[name]), name


def test_struct_sizes(errors_run):
    """The smallest accepted layouts are struct_size plus the API version 2 fields, and versions 3, 4 and 5 append
    to them."""
    sizes = {k: int(v) for k, v in (item.split("=") for item in _line(errors_run, "sizes:").split())}
    assert sizes["api"] == 7 and sizes["gamma_auto"] == -1
    assert sizes["params_min"] == 8 + 4 + 4 + 8 + 8 + 8 + 8 + 8        # struct_size .. seed (top_k padded to 8)
    assert sizes["params"] == sizes["params_min"] + 8 + 8 + 8 + 4 * 4 + 8  # + const char *draft (3), + the beam
    #                                                                    fields (4: num_beams padded to 8,
    #                                                                    length_penalty, 4 int32), + int64 candidates
    #                                                                    (5): no padding at the end
    assert sizes["stats_min"] == 8 + 6 * 8 + 7 * 8 + 8                 # struct_size .. stop_reason (padded)
    assert sizes["stats"] == sizes["stats_min"] + 9 * 8                # + the per-source counters


def _kinds(stats) -> dict:
    """The Python request's counters by kind (Stats.by_kind, the fold the library writes into specdec_stats), held
    to what the header's comments promise of them: every target run is a round of one kind, every guess the target
    saw came from the lookup or a model."""
    out = stats.by_kind()
    assert out["target_only_rounds"] + out["lookup_rounds"] + out["model_rounds"] == stats.target_calls
    assert out["lookup_proposed"] + out["model_proposed"] == stats.proposed
    assert out["lookup_accepted"] + out["model_accepted"] == stats.accepted
    return {**out, "target_calls": stats.target_calls, "proposed": stats.proposed, "accepted": stats.accepted}


def test_source_stats_match_the_python_api(errors_run, python_decoder):
    lines = [line for line in errors_run.splitlines() if line.startswith("sources ")]
    got = {line[len("sources "):].split(":")[0]: {k: int(v) for k, v in (item.split("=") for item in
                                                                          line.split(":", 1)[1].split())}
           for line in lines}
    assert set(got) == {"none", "lookup", "draft", "lookup,draft"}
    for draft, counts in got.items():
        ref = python_decoder.generate(input_ids=[20, 30, 1], max_new_tokens=12, gamma=3, draft=draft)
        assert counts == _kinds(ref.stats), draft
    # the cases mean something: each kind of source made guesses, and the chain's lookup proposed to the model
    assert got["lookup"]["lookup_rounds"] > 0 and got["draft"]["model_rounds"] > 0
    assert got["lookup,draft"]["chain_proposed"] > 0 and got["none"]["target_only_rounds"] == 12


def test_session_info_matches_the_decoder(errors_run, python_decoder):
    got = dict(item.split("=") for item in _line(errors_run, "info:").split())
    assert got == {"gamma_max": str(python_decoder.gamma_max), "max_length": str(python_decoder.max_length),
                   "vocab_size": str(python_decoder.vocab_size), "eos_token_id": str(python_decoder.eos_id),
                   "provider": "cpu"}


def test_reference_outputs_match_the_python_api(errors_run, python_decoder):
    """The outputs every case re-checks are the Python API's own."""
    greedy = python_decoder.generate(input_ids=[20, 30, 1], max_new_tokens=12, gamma=3, draft="draft")
    sampled = python_decoder.generate(input_ids=[20, 30, 1], max_new_tokens=12, gamma=3, draft="draft", temperature=3.0,
                                      top_k=40, top_p=0.98, seed=7)
    text = python_decoder.generate("w20 w30", max_new_tokens=12, gamma=3, draft="draft")
    assert _line(errors_run, "reference greedy:").split() == [str(t) for t in greedy.token_ids]
    assert _line(errors_run, "reference sampled:").split() == [str(t) for t in sampled.token_ids]
    assert _line(errors_run, "reference text:") == text.text
    assert text.text        # a non-empty text, so the text buffer cases mean something

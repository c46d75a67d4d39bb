"""Whisper exports through the C API (API version 6), on the tiny random Whisper pair of tests/runtime/test_whisper.py
(tinymodels.exported_whisper_pair: a 1-second window, a draft that keeps the target's encoder), run by
tests/bindings/capi_whisper.c:

  - specdec_transcribe's text and specdec_transcribe_ids' ids and stats equal the Python API's
    generate(audio=..., language=..., task=...) for greedy, sampled (a fixed seed), a detected language, translate,
    target-only, a chain, a beam search and the default params; the text is specdec_decode of the ids; a request
    runs one encoder (the draft shares the target's); a WAV file's path gives what its samples give;
  - bad input (NULL pointers, no samples, NaN and infinite samples, audio over the window and an n_samples far past
    the caller's buffer, an unknown language or task, bad params, missing and unreadable WAV files, a 44.1 kHz one,
    audio to a T5 session, prompts to a Whisper session, a closed session): a status and a one-line message naming
    the problem and the fix, nothing written, and the session then gives its reference outputs again;
  - the fuzz harness for WAV files through the C API: tests/runtime/test_audio.py's mutated WAV files (the same
    generator and seed as its Python harness) transcribed from their path in one process: no crash, every refusal
    one line and exactly the Python reader's message, every file Python reads transcribed as Python transcribes it;
  - the C++ wrapper's audio_info, transcribe, transcribe_wav, transcribe_ids and transcribe_wav_ids.
"""

from __future__ import annotations

import collections
import os
import re
import sys

import numpy as np
import pytest
from _capi_helpers import HERE, run_program, tap_results

from fuzz_exports import FuzzSettings, finish_fuzz
from tinymodels import whisper_audio

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.loading.audio import read_wav

sys.path.append(str(HERE.parent / "runtime"))       # tests/runtime/test_audio.py: WAV writers and fuzz cases
from test_audio import FUZZ_SEED, fuzz_cases, pcm_ints, pcm_reference, write_stdlib_wav  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

CASES = ["references", "wav_equals_pcm", "audio_info", "measure_only", "bad_pointers", "bad_samples",
         "bad_language_and_task", "bad_params", "bad_wav_files", "whisper_refuses_prompts",
         "text_session_refuses_audio", "closed_session"]
# capi_whisper.c's reference calls: (language, task, params) as the Python API takes them
BASE = {"max_new_tokens": 16, "gamma": 3, "draft": "draft"}
REFERENCES = {
    "greedy": ("en", None, BASE),
    "sampled": ("en", None, {**BASE, "gamma": 2, "temperature": 1.0, "seed": 5}),
    "detected": (None, None, BASE),
    "translate": ("<|de|>", "translate", BASE),
    "target_only": ("en", "transcribe", {**BASE, "draft": "none"}),
    "chain": ("en", None, {**BASE, "draft": "lookup,draft"}),
    "beams": ("de", None, {**BASE, "num_beams": 3}),
    "defaults": ("en", None, {}),
}
STOP = {"": 0, "eos": 1, "max_new_tokens": 2, "max_length": 3}
FUZZ_CASES = 300            # SPECDEC_FUZZ_C_WAV_CASES makes a larger run
FUZZ_LINE = re.compile(r"case (\d+) (ok (.*)|refused (SPECDEC_\w+) (.*)|good (same|differs.*))$")


@pytest.fixture(scope="module")
def whisper_export(whisper_pair):
    """The export of tests/runtime/test_whisper.py's `pair` fixture (exported_whisper_pair's defaults, built once per
    run: tests/conftest.py)."""
    return whisper_pair[1] / "export"


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    """{"wav": a 16-bit WAV of 0.6 s (an audio whose transcript depends on the language), "f32": the float32
    samples read_wav gives for it (raw), "pcm": those samples, "bad": a 44.1 kHz WAV}."""
    root = tmp_path_factory.mktemp("capi_whisper_audio")
    ints = np.round(whisper_audio(0.6, seed=4) * 32767).astype(np.int64)[:, None]
    wav = write_stdlib_wav(root / "clip.wav", ints, 16)
    pcm = pcm_reference(ints, 16)
    pcm.astype("<f4").tofile(root / "clip.f32")
    bad = write_stdlib_wav(root / "cd.wav", pcm_ints(100, 2, 16), 16, rate=44100)
    return {"wav": wav, "f32": root / "clip.f32", "pcm": pcm, "bad": bad}


@pytest.fixture(scope="module")
def python_decoder(whisper_export):
    return SpeculativeDecoder.load(whisper_export, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def capi_whisper(compile_c):
    return compile_c(HERE / "capi_whisper.c", "capi_whisper")


@pytest.fixture(scope="module")
def whisper_run(capi_whisper, whisper_export, tiny_export, audio):
    result = run_program([capi_whisper, whisper_export, tiny_export, audio["f32"], audio["wav"], audio["bad"]],
                         timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def references(stdout: str) -> dict:
    """{name: {"ids": [...], "text": ..., "stats": {...}}} from the "reference NAME: ids=...|text=...|stats ..."
    lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("reference "):
            name, _, rest = line[len("reference "):].partition(": ")
            ids, text, stats = rest.split("|")
            out[name] = {"ids": [int(t) for t in ids[len("ids="):].split()], "text": text[len("text="):],
                         "stats": {k: int(v) for k, v in (item.split("=") for item in stats.split()[1:])}}
    return out


def test_every_case_ran(whisper_run):
    assert set(tap_results(whisper_run)) == set(CASES), whisper_run


@pytest.mark.parametrize("case", CASES)
def test_case(whisper_run, case):
    results = tap_results(whisper_run)
    assert case in results, f"case {case} did not run (crash?):\n{whisper_run}"
    assert results[case] is None, results[case]


def test_api_version_and_audio_info(whisper_run, python_decoder):
    speech = python_decoder.manifest.speech
    assert "api: 6" in whisper_run.splitlines()
    assert f"audio_info whisper: max_samples={speech['n_samples']} sample_rate={speech['sampling_rate']}" in \
        whisper_run.splitlines()
    assert speech["n_samples"] == 16_000
    assert "audio_info t5: max_samples=0 sample_rate=0" in whisper_run.splitlines()


@pytest.mark.parametrize("name", list(REFERENCES))
def test_references_equal_the_python_api(whisper_run, python_decoder, audio, name):
    language, task, params = REFERENCES[name]
    got = references(whisper_run)[name]
    want = python_decoder.generate(audio=audio["pcm"], language=language, task=task, **params)
    assert got["ids"] == want.token_ids and got["text"] == want.text
    if not params:          # draft and gamma "auto": the choice follows measured timings, only the tokens are fixed
        assert got["stats"]["stop_reason"] == STOP[want.stop_reason]
        return
    assert got["stats"] == {"target_calls": want.stats.target_calls, "draft_calls": want.stats.draft_calls,
                            "ort_runs": want.stats.ort_runs, "proposed": want.stats.proposed,
                            "accepted": want.stats.accepted, "stop_reason": STOP[want.stop_reason]}
    if params.get("draft") == "draft" and not params.get("num_beams"):
        # one encoder run: the draft keeps the target's encoder
        assert got["stats"]["ort_runs"] == got["stats"]["target_calls"] + got["stats"]["draft_calls"] + 1


def test_the_references_mean_something(whisper_run):
    refs = references(whisper_run)
    assert refs["greedy"]["text"] and 0 < refs["greedy"]["stats"]["accepted"] < refs["greedy"]["stats"]["proposed"]
    assert refs["sampled"]["ids"] != refs["greedy"]["ids"]
    assert refs["beams"]["ids"] != refs["greedy"]["ids"]             # language "de" changes this audio's transcript
    assert refs["target_only"]["ids"] == refs["chain"]["ids"] == refs["greedy"]["ids"]
    assert refs["target_only"]["stats"]["draft_calls"] == 0
    assert len(refs["defaults"]["ids"]) > 16


# -- the fuzz harness: mutated WAV files through the C API ---------------------------------------------------------

def python_outcome(path, python_decoder):
    """What the Python API does with the file: ("refused", message of read_wav) or ("ok", the text generate gives,
    with the C program's params)."""
    try:
        read_wav(path)
    except SpecdecError as err:
        return "refused", str(err)
    return "ok", python_decoder.generate(audio=str(path), language="en", max_new_tokens=4, gamma=3,
                                         draft="draft").text


def fuzz_verdict(result: dict) -> str | None:
    if result.get("outcome") is None:
        return "no outcome line (the process died before it)"
    if result.get("good") != "same":
        return f"the good request afterwards: {result.get('good')}"
    if result["outcome"] != result["python"][0]:
        return f"C {result['outcome']} but Python {result['python'][0]}: {result['python'][1]:.200}"
    if result["outcome"] == "refused" and (result["status"] != "SPECDEC_E_INVALID_ARGUMENT"
                                           or result["message"] != f"specdec_transcribe: {result['python'][1]}"):
        return f"refused with {result['status']} {result['message']!r}, Python: {result['python'][1]!r}"
    if result["outcome"] == "ok" and result["text"] != result["python"][1]:
        return f"transcribed {result['text']!r}, Python {result['python'][1]!r}"
    return None


def test_fuzzed_wav_files_through_the_c_api(capi_whisper, whisper_export, python_decoder, audio, tmp_path):
    """FUZZ_CASES mutations of a valid WAV file (test_audio.py's fuzz_cases: bit flips, overwrites, truncations,
    size fields set to odd values, insertions) passed to specdec_transcribe by path, one process for all: it must not
    crash, each refusal is one line and Python's read_wav message, each accepted file gives Python's text, and the
    session's reference request gives its output after every case. Both outcomes occur."""
    settings = FuzzSettings.from_env("C_WAV_", FUZZ_CASES, 0)
    settings.seed = int(os.environ.get("SPECDEC_FUZZ_SEED", FUZZ_SEED))
    cases = fuzz_cases(settings.seed, settings.cases)
    paths = []
    for index, (_, data) in enumerate(cases):
        paths.append(tmp_path / f"case{index}.wav")
        paths[-1].write_bytes(data)
    result = run_program([capi_whisper, "--fuzz", whisper_export, audio["f32"], *paths], timeout=600, check=False)
    results = [{"index": i, "kind": kind, "detail": f"seed {settings.seed} case {i}"}
               for i, (kind, _) in enumerate(cases)]
    for line in result.stdout.splitlines():
        match = FUZZ_LINE.match(line)
        assert match, f"unexpected output line (a message of more than one line?): {line!r}"
        case = results[int(match.group(1))]
        if match.group(3) is not None:
            case.update(outcome="ok", text=match.group(3))
        elif match.group(4):
            case.update(outcome="refused", status=match.group(4), message=match.group(5))
        else:
            case["good"] = match.group(6)
    died = next((r for r in results if "good" not in r), None)
    assert result.returncode == 0, (f"capi_whisper --fuzz exited {result.returncode} at case "
                                    f"{died and died['index']} ({died and died['kind']}):\n{result.stderr[-2000:]}")
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    for case, path in zip(results, paths):
        case["python"] = python_outcome(path, python_decoder)
    outcomes = collections.Counter(r.get("outcome") for r in results)
    summary = {"cases": len(results), "seed": settings.seed, "ok": outcomes["ok"], "refused": outcomes["refused"],
               "crashes": 0, "failures": sum(fuzz_verdict(r) is not None for r in results)}
    finish_fuzz("C API, WAV files", "fuzz-c-wav.json", summary, results, fuzz_verdict, settings)
    assert outcomes["ok"] > settings.cases // 20 and outcomes["refused"] > settings.cases // 4, outcomes


# -- the C++ wrapper -------------------------------------------------------------------------------------------------

CPP_HOST = r"""
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include "specdec.hpp"

int main(int argc, char **argv)
{
    (void)argc;
    std::ifstream f(argv[2], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<float> pcm(bytes.size() / sizeof(float));
    std::memcpy(pcm.data(), bytes.data(), pcm.size() * sizeof(float));
    specdec::Session s(argv[1], R"({"provider": "cpu", "threads": 1})");
    specdec::AudioInfo info = s.audio_info();
    std::printf("info %zu %d\n", info.max_samples, static_cast<int>(info.sample_rate));
    specdec::Params p;
    p.max_new_tokens = 16;
    p.gamma = 3;
    p.draft = "draft";
    specdec::Stats st;
    std::printf("text %s\n", s.transcribe(pcm, "en", nullptr, p, &st).c_str());
    std::printf("new_tokens %lld\n", static_cast<long long>(st.new_tokens));
    std::printf("wav %s\n", s.transcribe_wav(argv[3], "en", "transcribe", p).c_str());
    std::printf("ids");
    for (int32_t t : s.transcribe_ids(pcm, "en", nullptr, p))
        std::printf(" %d", static_cast<int>(t));
    std::printf("\nwav_ids");
    for (int32_t t : s.transcribe_wav_ids(argv[3], "en", nullptr, p))
        std::printf(" %d", static_cast<int>(t));
    std::printf("\ndetected %s\n", s.transcribe(pcm).c_str());
    try {
        s.transcribe(pcm, "xx");
        std::printf("no error\n");
    } catch (const specdec::Error &e) {
        std::printf("error %d %s\n", static_cast<int>(e.status()), e.what());
    }
    return 0;
}
"""


def test_cpp_wrapper(compile_c, whisper_export, audio, python_decoder, tmp_path):
    src = tmp_path / "whisper_host.cpp"
    src.write_text(CPP_HOST)
    out = run_program([compile_c(src, "capi_whisper_cpp", cxx=True), whisper_export, audio["f32"],
                       audio["wav"]]).stdout.splitlines()
    want = python_decoder.generate(audio=audio["pcm"], language="en", **BASE)
    detected = python_decoder.generate(audio=audio["pcm"])
    assert out[:7] == ["info 16000 16000", f"text {want.text}", f"new_tokens {want.stats.new_tokens}",
                       f"wav {want.text}", " ".join(["ids", *map(str, want.token_ids)]),
                       " ".join(["wav_ids", *map(str, want.token_ids)]), f"detected {detected.text}"]
    assert out[7].startswith("error 1 SPECDEC_E_INVALID_ARGUMENT: specdec_transcribe: language 'xx' is not one")
    assert len(out) == 8

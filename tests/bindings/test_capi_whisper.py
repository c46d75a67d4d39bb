"""Whisper exports through the C API (API versions 6 and 7), on the tiny random Whisper pair of
tests/runtime/families/test_whisper.py (tinymodels.exported_whisper_pair: a 1-second window, a draft that keeps the target's
encoder, no timestamp tokens) and the tiny pair with timestamp tokens of tests/runtime/families/test_timestamps.py
(tinymodels.exported_stamped_whisper_pair: a 1-second window), run by tests/bindings/capi_whisper.c:

  - specdec_transcribe's text and specdec_transcribe_ids' ids and stats equal the Python API's
    generate(audio=..., language=..., task=...) for greedy, sampled (a fixed seed), a detected language, translate,
    target-only, a chain, a beam search and the default params; the text is specdec_decode of the ids; a request
    runs one encoder (the draft shares the target's); a WAV file's path gives what its samples give;
  - audio longer than two windows (version 7): its text, ids and stats equal the Python API's on both pairs (the
    chunked fallback without timestamp tokens, segments with them), from its samples and from a WAV file; a buffer
    of max_new_tokens ids is too small for it and says how large one must be;
  - specdec_transcribe_segments (version 7): the segments' start, end (NaN for Python's None) and text, and the
    stats, equal the Python API's generate(audio=..., timestamps=True).segments for audio within the window (one
    whose last segment the audio's end cuts too), greedy, sampled and target-only, and for the long audio; the
    texts' layout in the caller's buffer; measuring, too few segments and no room for the last NUL report the
    sizes and write nothing; NULL outputs and a model without timestamp tokens are refused in one line;
  - bad input (NULL pointers, no samples, NaN and infinite samples, an n_samples past the longest audio a request
    takes and one far past it, both refused before the caller's buffer is read, an unknown language or task, bad
    params, missing and unreadable WAV files, a 44.1 kHz one, audio to a T5 session, prompts to a Whisper session, a
    closed session), through all three transcribe calls: a status and a one-line message naming the problem and the
    fix, nothing written, and both sessions then give their reference outputs again;
  - the fuzz harness for WAV files through the C API: tests/runtime/loading/test_audio.py's mutated WAV files (the same
    generator and seed as its Python harness) transcribed from their path in one process: no crash, every refusal
    one line and exactly the Python reader's message, every file Python reads transcribed as Python transcribes it;
  - the C++ wrapper's audio_info, transcribe, transcribe_wav, transcribe_ids and transcribe_wav_ids (long audio's
    ids too), transcribe_segments and transcribe_wav_segments.
"""

from __future__ import annotations

import collections
import math
import os
import re
import sys

import numpy as np
import pytest
from _capi_helpers import HERE, INCLUDE, run_program, tap_results

from fuzz_exports import FuzzSettings, finish_fuzz
from tinymodels import exported_stamped_whisper_pair, shared_dir, whisper_audio

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.families.whisper.transcript import MAX_AUDIO_S
from specdec.runtime.loading.audio import read_wav

sys.path.append(str(HERE.parent / "runtime" / "loading"))    # tests/runtime/loading/test_audio.py: WAV writers, fuzz cases
from test_audio import FUZZ_SEED, fuzz_cases, pcm_ints, pcm_reference, write_stdlib_wav  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

CASES = ["references", "segments", "wav_equals_pcm", "audio_info", "long_audio", "measure_only", "segments_measure",
         "bad_pointers", "segments_bad_pointers", "segments_without_timestamps", "bad_samples",
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
# capi_whisper.c's segment calls on the pair with timestamp tokens: (audio, params), language "en"
SEGMENTS = {"short": ("pcm", BASE), "cut": ("cut", BASE), "long": ("long", BASE),
            "sampled": ("pcm", {**BASE, "gamma": 2, "temperature": 1.0, "seed": 5}),
            "target_only": ("pcm", {**BASE, "draft": "none"})}
# its long-audio references: (decoder, audio), language "en", BASE params
LONG = {"long_plain": ("plain", "long"), "long_plain_wav": ("plain", "long"), "long_stamped": ("stamped", "long")}
STOP = {"": 0, "eos": 1, "max_new_tokens": 2, "max_length": 3}
FUZZ_CASES = 300            # SPECDEC_FUZZ_C_WAV_CASES makes a larger run
FUZZ_LINE = re.compile(r"case (\d+) (ok (.*)|refused (SPECDEC_\w+) (.*)|good (same|differs.*))$")


@pytest.fixture(scope="module")
def whisper_export(whisper_pair):
    """The export of tests/runtime/families/test_whisper.py's `pair` fixture (exported_whisper_pair's defaults, built once per
    run: tests/conftest.py)."""
    return whisper_pair[1] / "export"


@pytest.fixture(scope="module")
def stamped_export(tmp_path_factory):
    """The export of tinymodels.exported_stamped_whisper_pair (timestamp tokens, a 1 s window), built once per run."""
    return shared_dir(tmp_path_factory, "stamped_whisper_pair", exported_stamped_whisper_pair) / "export"


def clip(root, name: str, wave):
    """(16-bit WAV of `wave`, raw float32 file of the samples read_wav gives for it, those samples)."""
    ints = np.round(wave * 32767).astype(np.int64)[:, None]
    wav = write_stdlib_wav(root / f"{name}.wav", ints, 16)
    pcm = pcm_reference(ints, 16)
    pcm.astype("<f4").tofile(root / f"{name}.f32")
    return wav, root / f"{name}.f32", pcm


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    """{"wav": a 16-bit WAV of 0.6 s (an audio whose transcript depends on the language), "f32": the float32
    samples read_wav gives for it (raw), "pcm": those samples, "bad": a 44.1 kHz WAV; "cut_f32", "cut": 0.8 s whose
    last segment the audio's end cuts (the pair with timestamp tokens); "long_wav", "long_f32", "long": 2.5 s, more
    than two windows}."""
    root = tmp_path_factory.mktemp("capi_whisper_audio")
    wav, f32, pcm = clip(root, "clip", whisper_audio(0.6, seed=4))
    bad = write_stdlib_wav(root / "cd.wav", pcm_ints(100, 2, 16), 16, rate=44100)
    _, cut_f32, cut = clip(root, "cut", whisper_audio(0.8, seed=1))
    long_wav, long_f32, long = clip(root, "long", whisper_audio(2.5, seed=3))
    return {"wav": wav, "f32": f32, "pcm": pcm, "bad": bad, "cut_f32": cut_f32, "cut": cut, "long_wav": long_wav,
            "long_f32": long_f32, "long": long}


@pytest.fixture(scope="module")
def python_decoder(whisper_export):
    return SpeculativeDecoder.load(whisper_export, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def stamped_decoder(stamped_export):
    return SpeculativeDecoder.load(stamped_export, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def capi_whisper(compile_c):
    return compile_c(HERE / "capi_whisper.c", "capi_whisper")


@pytest.fixture(scope="module")
def whisper_run(capi_whisper, whisper_export, tiny_export, audio, stamped_export):
    result = run_program([capi_whisper, whisper_export, tiny_export, audio["f32"], audio["wav"], audio["bad"],
                          stamped_export, audio["cut_f32"], audio["long_f32"], audio["long_wav"]], timeout=600)
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


def segment_lines(stdout: str) -> dict:
    """{name: {"count": N, "stats": {...}, "segments": [(start, end or None, text), ...]}} from the "segments NAME:
    ..." and "segment NAME I: start=...|end=...|text=..." lines (an end of NaN is Python's None)."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("segments "):
            name, _, rest = line[len("segments "):].partition(": ")
            count, stats = rest.split("|")
            out[name] = {"count": int(count[len("count="):]), "segments": [],
                         "stats": {k: int(v) for k, v in (item.split("=") for item in stats.split()[1:])}}
        elif line.startswith("segment "):
            head, _, rest = line[len("segment "):].partition(": ")
            name, index = head.split()
            start, end, text = rest.split("|", 2)
            end = float(end[len("end="):])
            assert int(index) == len(out[name]["segments"])
            out[name]["segments"].append((float(start[len("start="):]), None if math.isnan(end) else end,
                                          text[len("text="):]))
    return out


def stats_of(result) -> dict:
    return {"target_calls": result.stats.target_calls, "draft_calls": result.stats.draft_calls,
            "ort_runs": result.stats.ort_runs, "proposed": result.stats.proposed, "accepted": result.stats.accepted,
            "stop_reason": STOP[result.stop_reason]}


def test_every_case_ran(whisper_run):
    assert set(tap_results(whisper_run)) == set(CASES), whisper_run


@pytest.mark.parametrize("case", CASES)
def test_case(whisper_run, case):
    results = tap_results(whisper_run)
    assert case in results, f"case {case} did not run (crash?):\n{whisper_run}"
    assert results[case] is None, results[case]


def test_api_version_and_audio_info(whisper_run, python_decoder):
    speech = python_decoder.manifest.speech
    assert "api: 7" in whisper_run.splitlines()
    assert f"audio_info whisper: max_samples={speech['n_samples']} sample_rate={speech['sampling_rate']}" in \
        whisper_run.splitlines()
    assert speech["n_samples"] == 16_000
    assert "audio_info t5: max_samples=0 sample_rate=0" in whisper_run.splitlines()
    # the header's limit is the runtime's, which the C side enforces before it reads the samples
    assert f"#define SPECDEC_MAX_AUDIO_SECONDS {MAX_AUDIO_S}\n" in (INCLUDE / "specdec.h").read_text()


@pytest.mark.parametrize("name", list(REFERENCES))
def test_references_equal_the_python_api(whisper_run, python_decoder, audio, name):
    language, task, params = REFERENCES[name]
    got = references(whisper_run)[name]
    want = python_decoder.generate(audio=audio["pcm"], language=language, task=task, **params)
    assert got["ids"] == want.token_ids and got["text"] == want.text
    if not params:          # draft and gamma "auto": the choice follows measured timings, only the tokens are fixed
        assert got["stats"]["stop_reason"] == STOP[want.stop_reason]
        return
    assert got["stats"] == stats_of(want)
    if params.get("draft") == "draft" and not params.get("num_beams"):
        # one encoder run: the draft keeps the target's encoder
        assert got["stats"]["ort_runs"] == got["stats"]["target_calls"] + got["stats"]["draft_calls"] + 1


@pytest.mark.parametrize("name", list(SEGMENTS))
def test_segments_equal_the_python_api(whisper_run, stamped_decoder, audio, name):
    """specdec_transcribe_segments' start, end and text of every segment, and its stats, are Python's
    generate(audio=..., timestamps=True)'s (the times exactly: both are the runtime's rounded floats)."""
    clip_name, params = SEGMENTS[name]
    got = segment_lines(whisper_run)[name]
    want = stamped_decoder.generate(audio=audio[clip_name], language="en", timestamps=True, **params)
    assert got["segments"] == [(s.start, s.end, s.text) for s in want.segments]
    assert got["count"] == len(want.segments) > 0
    assert {k: v for k, v in got["stats"].items() if k != "new_tokens"} == stats_of(want)
    assert got["stats"]["new_tokens"] == want.stats.new_tokens


def test_the_segments_mean_something(whisper_run, audio):
    segs = segment_lines(whisper_run)
    assert segs["cut"]["segments"][-1][1] is None, "CUT.f32's last segment must be open"
    assert all(end is not None for _, end, _ in segs["short"]["segments"][:-1])
    long = segs["long"]["segments"]
    assert len(long) >= 3 and long[-1][0] >= 2.0, "segments from every window of the long audio"
    assert all(end is not None and 0 <= start <= end <= audio["long"].size / 16_000 for start, end, _ in long)
    assert segs["sampled"]["segments"] != segs["short"]["segments"]


@pytest.mark.parametrize("name", list(LONG))
def test_long_audio_equals_the_python_api(whisper_run, python_decoder, stamped_decoder, audio, name):
    """Audio longer than two windows: specdec_transcribe's text and _ids' ids and stats are Python's, for the pair
    without timestamp tokens (cut at quiet points) and the one with them (cut where a window's last segment began)."""
    which, clip_name = LONG[name]
    decoder = python_decoder if which == "plain" else stamped_decoder
    got = references(whisper_run)[name]
    want = decoder.generate(audio=audio[clip_name], language="en", **BASE)
    assert got["ids"] == want.token_ids and got["text"] == want.text and got["text"]
    assert got["stats"] == stats_of(want)
    windows = audio[clip_name].size / decoder.manifest.speech["n_samples"]
    assert windows > 2 and want.stats.target_calls > 2, "more than two windows decoded"


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

static std::vector<float> samples(const char *path)
{
    std::ifstream f(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<float> pcm(bytes.size() / sizeof(float));
    std::memcpy(pcm.data(), bytes.data(), pcm.size() * sizeof(float));
    return pcm;
}

static void print_segments(const char *name, const std::vector<specdec::Segment> &segments)
{
    for (const specdec::Segment &seg : segments)
        std::printf("%s %.17g %.17g %s\n", name, seg.start, seg.end, seg.text.c_str());
}

int main(int argc, char **argv)
{
    (void)argc;
    std::vector<float> pcm = samples(argv[2]), long_pcm = samples(argv[5]);
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
    std::printf("long_ids");                           // more ids than max_new_tokens: the wrapper asks again
    for (int32_t t : s.transcribe_ids(long_pcm, "en", nullptr, p))
        std::printf(" %d", static_cast<int>(t));
    std::printf("\nlong_text %s\n", s.transcribe(long_pcm, "en", nullptr, p).c_str());
    specdec::Session t(argv[4], R"({"provider": "cpu", "threads": 1})");
    print_segments("segment", t.transcribe_segments(pcm, "en", nullptr, p));
    print_segments("wav_segment", t.transcribe_wav_segments(argv[3], "en", nullptr, p));
    print_segments("long_segment", t.transcribe_segments(long_pcm, "en", nullptr, p));
    try {
        s.transcribe_segments(pcm, "en");
        std::printf("no error\n");
    } catch (const specdec::Error &e) {
        std::printf("error %d %s\n", static_cast<int>(e.status()), e.what());
    }
    return 0;
}
"""


def test_cpp_wrapper(compile_c, whisper_export, stamped_export, audio, python_decoder, stamped_decoder, tmp_path):
    src = tmp_path / "whisper_host.cpp"
    src.write_text(CPP_HOST)
    out = run_program([compile_c(src, "capi_whisper_cpp", cxx=True), whisper_export, audio["f32"], audio["wav"],
                       stamped_export, audio["long_f32"]]).stdout.splitlines()
    want = python_decoder.generate(audio=audio["pcm"], language="en", **BASE)
    detected = python_decoder.generate(audio=audio["pcm"])
    assert out[:7] == ["info 16000 16000", f"text {want.text}", f"new_tokens {want.stats.new_tokens}",
                       f"wav {want.text}", " ".join(["ids", *map(str, want.token_ids)]),
                       " ".join(["wav_ids", *map(str, want.token_ids)]), f"detected {detected.text}"]
    assert out[7].startswith("error 1 SPECDEC_E_INVALID_ARGUMENT: specdec_transcribe: language 'xx' is not one")
    long = python_decoder.generate(audio=audio["long"], language="en", **BASE)
    assert len(long.token_ids) > BASE["max_new_tokens"]
    assert out[8:10] == [" ".join(["long_ids", *map(str, long.token_ids)]), f"long_text {long.text}"]

    def parsed(line):                   # "NAME START END TEXT" (%.17g: the doubles exactly; an end of nan is None)
        name, start, end, text = (line.split(" ", 3) + [""])[:4]
        return name, float(start), None if math.isnan(float(end)) else float(end), text

    short = stamped_decoder.generate(audio=audio["pcm"], language="en", timestamps=True, **BASE)
    long = stamped_decoder.generate(audio=audio["long"], language="en", timestamps=True, **BASE)
    segments = [parsed(line) for line in out[10:] if line.split(" ")[0].endswith("segment")]
    assert segments == [(name, s.start, s.end, s.text) for name, result in
                        (("segment", short), ("wav_segment", short), ("long_segment", long))
                        for s in result.segments]
    assert out[10 + len(segments)].startswith("error 1 SPECDEC_E_INVALID_ARGUMENT: specdec_transcribe_segments: "
                                              "this Whisper model has no timestamp tokens")
    assert len(out) == 11 + len(segments)

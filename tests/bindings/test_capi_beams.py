"""Beam search through the C API (API version 4): specdec_params' beam fields, specdec_generate_sequences and
specdec_decode, run by tests/bindings/capi_beams.c on one session and compared with the Python API
(SpeculativeDecoder.generate's sequences and scores, .decode) for the same params: tokens, scores (exactly),
texts and stats. Also: older params layouts (API version 2 and 3, and a struct cut inside the beam fields) take
the defaults of the fields they lack; invalid beam params, NULL pointers and small buffers are a status and a
one-line message, and the session gives its reference output afterwards; streaming refuses beams; the C++
wrapper's generate_sequences_* and decode."""

from __future__ import annotations

import json
import math

import pytest
from _capi_helpers import HERE, run_program

PROMPT = [20, 30, 1]
STOP = {"": 0, "eos": 1, "max_new_tokens": 2, "max_length": 3}
EARLY = {0: False, 1: True, 2: "never"}
# the params every good case starts from, as in the C struct (gamma and draft fixed: the stats are reproducible)
BASE = {"max_new_tokens": 12, "gamma": 2, "draft": "draft"}
REF = {"input": PROMPT, "num_beams": 4, "num_return_sequences": 3, "length_penalty": 2.0, "early_stopping": 1}


def spec(**fields) -> str:
    """A capi_beams.c SPEC: "key=value;..." (lists of ids as "a,b,c")."""
    return ";".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in fields.items())


def python_params(fields: dict) -> dict:
    """The Python API's keyword arguments for a SPEC's params (defaults where the SPEC gives none)."""
    out = {}
    for name, value in fields.items():
        if name in ("call", "input", "prompt", "ids", "layout", "scores", "out_capacity", "max_sequences", "null"):
            continue
        if name == "gamma":
            value = "auto" if value == -1 else value
        elif name == "draft":
            value = "auto" if value == "NULL" else value
        elif name == "early_stopping":
            value = EARLY[value]
        out[name] = value
    return out


def reference(decoder, fields: dict):
    prompt = {"input_ids": fields["input"]} if "input" in fields else {"prompt": fields["prompt"]}
    return decoder.generate(**prompt, **python_params(fields))


@pytest.fixture(scope="module")
def python_decoder(tiny_export):
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def varied_prompt(python_decoder):
    """A prompt whose 8 returned beams have at least 3 different lengths (some end with EOS), and differ between
    early_stopping "never" and True, found with the Python API: so that the concatenated output's offsets are
    checked, not just a fixed stride, and early_stopping is seen to reach the runtime."""
    def beams(prompt, early):
        res = python_decoder.generate(input_ids=prompt, max_new_tokens=12, gamma=0, num_beams=8,
                                      num_return_sequences=8, length_penalty=-1.0, early_stopping=early)
        return res.sequences, res.scores

    for a in range(2, 48, 3):
        for b in range(2, 48, 5):
            found = beams([a, b, 1], "never")
            if len({len(s) for s in found[0]}) >= 3 and beams([a, b, 1], True) != found:
                return [a, b, 1]
    pytest.fail("no prompt of the tiny export gives beams of different lengths")


def good_cases(varied_prompt) -> dict:
    """name -> SPEC fields of calls that must succeed and equal the Python API."""
    return {
        "ref": {**BASE, **REF},
        "target-only": {**BASE, **REF, "gamma": 0},
        "auto": {**BASE, **REF, "gamma": -1, "draft": "NULL", "early_stopping": 2},
        "draft-none": {**BASE, "input": PROMPT, "num_beams": 2, "draft": "none", "num_return_sequences": 2},
        "processors": {**BASE, "input": PROMPT, "num_beams": 4, "num_return_sequences": 2, "length_penalty": -0.5,
                       "min_new_tokens": 8, "no_repeat_ngram_size": 2},
        "one-sequence": {**BASE, "input": PROMPT, "num_beams": 5},
        "all-beams": {**BASE, "input": PROMPT, "num_beams": 16, "num_return_sequences": 16, "gamma": 4},
        "varied-lengths": {**BASE, "input": varied_prompt, "gamma": 0, "num_beams": 8, "num_return_sequences": 8,
                           "length_penalty": -1.0, "early_stopping": 2},
        "varied-early": {**BASE, "input": varied_prompt, "gamma": 0, "num_beams": 8, "num_return_sequences": 8,
                         "length_penalty": -1.0, "early_stopping": 1},
        "varied-speculative": {**BASE, "input": varied_prompt, "gamma": 3, "num_beams": 8,
                               "num_return_sequences": 8, "length_penalty": -1.0, "early_stopping": 2},
        "text-prompt": {**BASE, **REF, "input": None, "prompt": "w20 w30"},
        "no-scores": {**BASE, **REF, "scores": "NULL"},
        "greedy": {**BASE, "input": PROMPT, "gamma": 3},
        "greedy-processors": {**BASE, "input": PROMPT, "gamma": 3, "min_new_tokens": 4, "no_repeat_ngram_size": 2},
        # older layouts: the fields past struct_size are 0xFF in the C struct; the library must use the defaults
        "layout-v3": {**BASE, **REF, "layout": "v3"},
        "layout-v2": {**BASE, **REF, "layout": "v2"},
        "layout-num_beams": {**BASE, **REF, "layout": "num_beams"},
        "layout-early_stopping": {**BASE, **REF, "layout": "early_stopping"},
    }


# name -> (SPEC fields, status, text the message must contain); each is followed by the reference case
BAD = {
    "num_beams-0": ({**BASE, **REF, "num_beams": 0}, "SPECDEC_E_INVALID_ARGUMENT", "num_beams must be an integer in "
                                                                                    "1..16 (got 0)"),
    "num_beams-17": ({**BASE, **REF, "num_beams": 17}, "SPECDEC_E_INVALID_ARGUMENT", "num_beams must be"),
    "more-sequences-than-beams": ({**BASE, **REF, "num_return_sequences": 5}, "SPECDEC_E_INVALID_ARGUMENT",
                                  "num_return_sequences must be an integer in 1..num_beams (4) (got 5)"),
    "zero-sequences": ({**BASE, **REF, "num_return_sequences": 0}, "SPECDEC_E_INVALID_ARGUMENT",
                       "num_return_sequences must be"),
    "sequences-without-beams": ({**BASE, "input": PROMPT, "num_return_sequences": 2}, "SPECDEC_E_INVALID_ARGUMENT",
                                "num_return_sequences must be an integer in 1..num_beams (1)"),
    "temperature": ({**BASE, **REF, "temperature": 0.7}, "SPECDEC_E_INVALID_ARGUMENT",
                    "beam search is deterministic"),
    "early_stopping-3": ({**BASE, **REF, "early_stopping": 3}, "SPECDEC_E_INVALID_ARGUMENT",
                         "early_stopping must be SPECDEC_EARLY_STOPPING_FALSE (0), _TRUE (1) or _NEVER (2) (got 3)"),
    "early_stopping-negative": ({**BASE, **REF, "early_stopping": -1}, "SPECDEC_E_INVALID_ARGUMENT",
                                "early_stopping must be"),
    "length_penalty-nan": ({**BASE, **REF, "length_penalty": "nan"}, "SPECDEC_E_INVALID_ARGUMENT",
                           "length_penalty must be a finite number"),
    "min_new_tokens-negative": ({**BASE, **REF, "min_new_tokens": -1}, "SPECDEC_E_INVALID_ARGUMENT",
                                "min_new_tokens must be"),
    "no_repeat-negative": ({**BASE, **REF, "no_repeat_ngram_size": -2}, "SPECDEC_E_INVALID_ARGUMENT",
                           "no_repeat_ngram_size must be"),
    "lookup-draft": ({**BASE, **REF, "draft": "lookup"}, "SPECDEC_E_INVALID_ARGUMENT",
                     "beam search speculates with a draft model"),
    "stream": ({**BASE, **REF, "call": "stream"}, "SPECDEC_E_INVALID_ARGUMENT", "beam search cannot stream"),
    "stream-bad-beams": ({**BASE, **REF, "call": "stream", "num_beams": 0}, "SPECDEC_E_INVALID_ARGUMENT",
                         "num_beams must be"),
    "struct_size-0": ({**BASE, **REF, "struct_size": 0}, "SPECDEC_E_INVALID_ARGUMENT",
                      "params->struct_size is 0 (not set)"),
    "null-session": ({**BASE, **REF, "null": "session"}, "SPECDEC_E_INVALID_ARGUMENT", "session is NULL"),
    "null-out_len": ({**BASE, **REF, "null": "out_len"}, "SPECDEC_E_INVALID_ARGUMENT", "out_len is NULL"),
    "null-out_count": ({**BASE, **REF, "null": "out_count"}, "SPECDEC_E_INVALID_ARGUMENT", "out_count is NULL"),
    "null-out_lengths": ({**BASE, **REF, "null": "out_lengths"}, "SPECDEC_E_INVALID_ARGUMENT",
                         "out_lengths is NULL but max_sequences is 64"),
    "null-out_ids": ({**BASE, **REF, "null": "out_ids"}, "SPECDEC_E_INVALID_ARGUMENT",
                     "out_ids is NULL but out_capacity is 4096"),
    "null-input_ids": ({**BASE, **REF, "null": "ids"}, "SPECDEC_E_INVALID_ARGUMENT", "input_ids is NULL but n_input "
                                                                                      "is 3"),
    "no-input": ({**BASE, **REF, "input": None}, "SPECDEC_E_INVALID_ARGUMENT", "pass exactly one of"),
    "two-inputs": ({**BASE, **REF, "prompt": "w20 w30"}, "SPECDEC_E_INVALID_ARGUMENT", "pass exactly one of"),
    "decode-out-of-vocabulary": ({"call": "decode", "ids": [20, 48]}, "SPECDEC_E_INVALID_ARGUMENT",
                                 "ids contains 48, outside the vocabulary 0..47"),
    "decode-null-ids": ({"call": "decode", "ids": [20], "null": "ids"}, "SPECDEC_E_INVALID_ARGUMENT",
                        "ids is NULL but n_ids is 1"),
    "decode-null-out_len": ({"call": "decode", "ids": [20], "null": "out_len"}, "SPECDEC_E_INVALID_ARGUMENT",
                            "out_len is NULL"),
    "decode-null-session": ({"call": "decode", "ids": [20], "null": "session"}, "SPECDEC_E_INVALID_ARGUMENT",
                            "session is NULL"),
}


def _drop_none(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


@pytest.fixture(scope="module")
def beams_run(compile_c, tiny_export, varied_prompt):
    """{name: the JSON line of its call}, every case run in order on one session; after each failure, the reference
    case again (as "after NAME"). Also the "sizes:" and "defaults:" lines."""
    exe = compile_c(HERE / "capi_beams.c", "capi_beams")
    good = good_cases(varied_prompt)
    names, specs = [], []
    for name, fields in good.items():
        names.append(name)
        specs.append(spec(**_drop_none(fields)))
    for name, (fields, _, _) in BAD.items():
        names += [name, f"after {name}"]
        specs += [spec(**_drop_none(fields)), spec(**good["ref"])]
    extra = {
        # small buffers: the needed sizes come back, nothing is written, and the retry gives the same sequences
        "few-sequences": {**BASE, **REF, "max_sequences": 2},
        "few-ids": {**BASE, **REF, "out_capacity": 5},
        "measure-only": {**BASE, **REF, "max_sequences": 0, "null": "out_lengths", "out_capacity": 0},
        "measure-ids-null": {**BASE, **REF, "null": "out_ids", "out_capacity": 0, "max_sequences": 0},
        # the best sequence through the other calls
        "ids-best": {**BASE, **REF, "call": "ids"},
        "text-best": {**BASE, **REF, "call": "text", "input": None, "prompt": "w20 w30"},
        "ids-layout-v3": {**BASE, **REF, "call": "ids", "layout": "v3"},
        "params-null": {"input": PROMPT, "params": "NULL"},
        "decode": {"call": "decode", "ids": [20, 30, 5, 1, 7]},
        "decode-empty": {"call": "decode", "ids": []},
        "decode-small": {"call": "decode", "ids": [20, 30], "out_capacity": 3},
    }
    for name, fields in extra.items():
        names.append(name)
        specs.append(spec(**_drop_none(fields)))
    out = run_program([exe, tiny_export, *specs], timeout=600).stdout
    lines = out.splitlines()
    header = {line.split(":")[0]: dict(item.split("=") for item in line.split(":", 1)[1].split())
              for line in lines[:2]}
    results = [json.loads(line) for line in lines[2:]]
    assert len(results) == len(names), out
    return {"header": header, "good": good, "extra": extra, **dict(zip(names, results))}


def _sequences(result) -> list:
    return list(zip(result["sequences"], result["scores"]))


def _same_scores(got, want) -> bool:
    return len(got) == len(want) and all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want))


def test_layout_and_defaults(beams_run):
    """API version 4 appends the six fields after `draft` (no padding at the end, so a field appended later never
    lands in the padding of a version 4 struct), with the Python API's defaults."""
    from specdec.runtime import Params

    sizes = {k: int(v) for k, v in beams_run["header"]["sizes"].items()}
    assert sizes["api"] == 7
    assert sizes["num_beams"] == sizes["params_min"] + 8                # after const char *draft
    assert sizes["length_penalty"] == sizes["num_beams"] + 8             # int32 + padding to a double
    assert [sizes[k] for k in ("early_stopping", "num_return_sequences", "min_new_tokens", "no_repeat_ngram_size")] \
        == [sizes["length_penalty"] + 8 + 4 * i for i in range(4)]
    assert sizes["params"] == sizes["no_repeat_ngram_size"] + 4 + 8      # + version 5's int64 candidates, no padding
    got = beams_run["header"]["defaults"]
    assert got.pop("enum") == "0,1,2"
    py = Params()
    assert EARLY[int(got.pop("early_stopping"))] is py.early_stopping
    for name, value in got.items():
        assert float(value) == float(getattr(py, name)), name


@pytest.mark.parametrize("name", ["ref", "target-only", "auto", "draft-none", "processors", "one-sequence",
                                  "all-beams", "varied-lengths", "varied-early", "varied-speculative", "text-prompt", "greedy",
                                  "greedy-processors"])
def test_sequences_equal_the_python_api(beams_run, python_decoder, name):
    fields = _drop_none(beams_run["good"][name])
    got = beams_run[name]
    assert got["status"] == "SPECDEC_OK" and got["error"] == "", got
    ref = reference(python_decoder, fields)
    assert got["count"] == len(ref.sequences) == fields.get("num_return_sequences", 1)
    assert got["sequences"] == ref.sequences
    assert got["len"] == sum(map(len, ref.sequences))
    if fields.get("gamma") == -1:
        # gamma auto picks speculation per step from timings, and a target run over k + 1 tokens rounds the logits
        # a little differently from k + 1 single steps: the tokens are exact, the scores to float32 rounding
        assert got["scores"] == pytest.approx(ref.scores, rel=1e-5, abs=1e-6)
    else:
        assert _same_scores(got["scores"], ref.scores or [math.nan])     # exactly: the same float values
    assert got["texts"] == [python_decoder.decode(s) for s in ref.sequences]
    assert got["texts"][0] == ref.text
    stats = got["stats"]
    assert stats["new_tokens"] == ref.stats.new_tokens == len(ref.token_ids)
    assert stats["stop_reason"] == STOP[ref.stop_reason] and stats["total_s"] > 0
    if fields.get("gamma") != -1:            # an auto choice follows measured timings: only the tokens are fixed
        assert {k: stats[k] for k in ("target_calls", "draft_calls", "proposed", "accepted")} == \
            {k: getattr(ref.stats, k) for k in ("target_calls", "draft_calls", "proposed", "accepted")}


def test_the_cases_mean_something(beams_run):
    """Beams differ from one another and from greedy; lengths vary where they should; speculation ran."""
    ref = beams_run["ref"]
    assert len({tuple(s) for s in ref["sequences"]}) == 3
    assert ref["scores"] == sorted(ref["scores"], reverse=True)
    assert beams_run["ref"]["stats"]["draft_calls"] > 0 and beams_run["target-only"]["stats"]["draft_calls"] == 0
    assert beams_run["target-only"]["sequences"] == ref["sequences"]          # speculation does not change beams
    assert beams_run["auto"]["count"] == 3
    for name in ("varied-lengths", "varied-speculative"):
        assert len({len(s) for s in beams_run[name]["sequences"]}) >= 3, name
    assert beams_run["varied-speculative"]["sequences"] == beams_run["varied-lengths"]["sequences"]
    assert beams_run["one-sequence"]["count"] == 1 and not math.isnan(beams_run["one-sequence"]["scores"][0])
    assert beams_run["greedy"]["count"] == 1 and math.isnan(beams_run["greedy"]["scores"][0])
    greedy = beams_run["greedy-processors"]["sequences"][0]
    assert greedy != beams_run["greedy"]["sequences"][0] and len(set(zip(greedy, greedy[1:]))) == len(greedy) - 1
    assert beams_run["varied-early"]["sequences"] != beams_run["varied-lengths"]["sequences"]
    # no 2-gram twice, and no EOS before 8 tokens: the processors' fields reached the runtime
    for seq in beams_run["processors"]["sequences"]:
        bigrams = list(zip(seq, seq[1:]))
        assert len(set(bigrams)) == len(bigrams) and 1 not in seq[:7] and len(seq) >= 8, seq


def test_without_scores(beams_run):
    assert beams_run["no-scores"]["status"] == "SPECDEC_OK"
    assert beams_run["no-scores"]["sequences"] == beams_run["ref"]["sequences"]
    assert beams_run["no-scores"]["scores"] == []


@pytest.mark.parametrize("layout", ["v3", "v2", "num_beams", "early_stopping"])
def test_older_params_layouts(beams_run, python_decoder, layout):
    """A host compiled against an older header (or a struct cut inside the beam fields): the fields past its
    struct_size (0xFF bytes in the test, which would be refused if read) take their defaults."""
    got = beams_run[f"layout-{layout}"]
    assert got["status"] == "SPECDEC_OK", got
    fields = dict(beams_run["good"][f"layout-{layout}"])
    kept = {"v2": [], "v3": ["draft"], "num_beams": ["draft", "num_beams"],
            "early_stopping": ["draft", "num_beams", "length_penalty", "early_stopping"]}[layout]
    beam_fields = ("draft", "num_beams", "length_penalty", "early_stopping", "num_return_sequences")
    ref = reference(python_decoder, {k: v for k, v in fields.items() if k not in beam_fields or k in kept})
    assert got["sequences"] == ref.sequences
    assert _same_scores(got["scores"], ref.scores or [math.nan])
    assert got["count"] == 1                       # num_return_sequences is past every one of these layouts
    # num_beams inside the struct: a beam search ran (a score); outside: num_beams is 1 (no score)
    assert math.isnan(got["scores"][0]) == (layout in ("v2", "v3"))
    ids = beams_run["ids-layout-v3"]
    assert ids["status"] == "SPECDEC_OK" and ids["sequences"][0] == beams_run["layout-v3"]["sequences"][0]


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments(beams_run, name):
    _, status, needle = BAD[name]
    got = beams_run[name]
    function = {"stream": "specdec_stream", "decode": "specdec_decode"}.get(BAD[name][0].get("call"),
                                                                               "specdec_generate_sequences")
    assert got["status"] == status, got
    assert got["error"].startswith(function + ": ") and needle in got["error"], got["error"]
    assert "\n" not in got["error"] and got["error"].endswith(".")
    assert got["pieces"] == 0
    if got["call"] == "sequences":
        assert (got["len"], got["count"]) == (12345, 12345)        # nothing written
        assert got["stats"]["new_tokens"] == 0 and got["stats"]["stop_reason"] == 0
    after = beams_run[f"after {name}"]
    assert after["status"] == "SPECDEC_OK" and after["error"] == ""
    assert (after["sequences"], after["scores"]) == (beams_run["ref"]["sequences"], beams_run["ref"]["scores"])


def test_small_buffers(beams_run):
    """BUFFER_TOO_SMALL: *out_len and *out_count hold what is needed, the stats are filled, nothing else is
    written; out_capacity 0 with NULL buffers measures."""
    ref = beams_run["ref"]
    for name in ("few-sequences", "few-ids", "measure-only", "measure-ids-null"):
        got = beams_run[name]
        assert got["status"] == "SPECDEC_E_BUFFER_TOO_SMALL", got
        assert (got["len"], got["count"]) == (ref["len"], 3), name
        assert got["stats"]["new_tokens"] == ref["stats"]["new_tokens"]
        assert got["stats"]["stop_reason"] == ref["stats"]["stop_reason"] != 0
        assert "sequences" not in got
    assert "max_sequences is 2" in beams_run["few-sequences"]["error"]
    assert "call again with max_sequences >= 3" in beams_run["few-sequences"]["error"]
    assert f"the output needs {ref['len']} ids but out_capacity is 5" in beams_run["few-ids"]["error"]


def test_best_sequence_through_ids_and_text(beams_run, python_decoder):
    """specdec_generate_ids and _text with beams return the best sequence; params NULL is the defaults."""
    assert beams_run["ids-best"]["sequences"] == beams_run["ref"]["sequences"][:1]
    text = beams_run["text-best"]
    assert text["status"] == "SPECDEC_OK" and text["text"] == beams_run["text-prompt"]["texts"][0]
    assert text["text"] == reference(python_decoder, _drop_none(beams_run["extra"]["text-best"])).text
    default = beams_run["params-null"]
    assert default["status"] == "SPECDEC_OK" and default["count"] == 1 and math.isnan(default["scores"][0])
    assert default["sequences"] == [python_decoder.generate(input_ids=PROMPT).token_ids]


def test_decode(beams_run, python_decoder):
    assert beams_run["decode"]["text"] == python_decoder.decode([20, 30, 5, 1, 7]) != ""
    assert beams_run["decode-empty"]["status"] == "SPECDEC_OK" and beams_run["decode-empty"]["text"] == ""
    small = beams_run["decode-small"]
    assert small["status"] == "SPECDEC_E_BUFFER_TOO_SMALL" and small["len"] == len(python_decoder.decode([20, 30]))


CPP_HOST = r"""
#include <cmath>
#include <cstdio>
#include "specdec.hpp"

int main(int argc, char **argv)
{
    (void)argc;
    specdec::Session s(argv[1], R"({"provider": "cpu", "threads": 1})");
    specdec::Params p;
    p.max_new_tokens = 12;
    p.gamma = 2;
    p.draft = "draft";
    p.num_beams = 4;
    p.num_return_sequences = 3;
    p.length_penalty = 2.0;
    p.early_stopping = SPECDEC_EARLY_STOPPING_TRUE;
    specdec::Stats st;
    for (const specdec::Sequence &seq : s.generate_sequences_ids({20, 30, 1}, p, &st)) {
        std::printf("ids %.17g |", seq.score);
        for (int32_t t : seq.token_ids)
            std::printf(" %d", static_cast<int>(t));
        std::printf(" | %s\n", seq.text.c_str());
    }
    std::printf("new_tokens %lld\n", static_cast<long long>(st.new_tokens));
    for (const specdec::Sequence &seq : s.generate_sequences_text("w20 w30", p))
        std::printf("text %.17g | %s\n", seq.score, seq.text.c_str());
    p.num_beams = 1;
    p.num_return_sequences = 1;
    std::vector<specdec::Sequence> one = s.generate_sequences_ids({20, 30, 1}, p);
    std::printf("greedy %zu %d\n", one.size(), std::isnan(one[0].score) ? 1 : 0);
    p.num_beams = 4;
    p.num_return_sequences = 5;
    try {
        s.generate_sequences_ids({20, 30, 1}, p);
        std::printf("no error\n");
    } catch (const specdec::Error &e) {
        std::printf("error %d %s\n", static_cast<int>(e.status()), e.what());
    }
    std::printf("decode %s\n", s.decode({20, 30}).c_str());
    return 0;
}
"""


def test_cpp_wrapper(compile_c, tiny_export, tmp_path, python_decoder):
    src = tmp_path / "beams_host.cpp"
    src.write_text(CPP_HOST)
    out = run_program([compile_c(src, "capi_beams_cpp", cxx=True), tiny_export]).stdout.splitlines()
    ref = reference(python_decoder, {**BASE, **REF})
    ids = [line for line in out if line.startswith("ids ")]
    assert len(ids) == 3
    for line, seq, score in zip(ids, ref.sequences, ref.scores):
        head, tokens, text = line[4:].split(" | ")
        assert float(head) == score and tokens.split() == [str(t) for t in seq]
        assert text == python_decoder.decode(seq)
    assert f"new_tokens {ref.stats.new_tokens}" in out
    texts = reference(python_decoder, _drop_none({**BASE, **REF, "input": None, "prompt": "w20 w30"}))
    got = [line[5:].split(" | ") for line in out if line.startswith("text ")]
    assert [(float(score), text) for score, text in got] == \
        [(score, python_decoder.decode(seq)) for seq, score in zip(texts.sequences, texts.scores)]
    assert "greedy 1 1" in out
    error = [line for line in out if line.startswith("error ")]
    assert len(error) == 1 and error[0].startswith("error 1 SPECDEC_E_INVALID_ARGUMENT: specdec_generate_sequences: "
                                                   "num_return_sequences must be")
    assert f"decode {python_decoder.decode([20, 30])}" in out

"""The C and C++ examples, built by `specdec-build-capi` and run with an empty environment, generate exactly the
Python API's tokens (generate and stream; greedy and sampled, exact and lenient; model, lookup and chained drafts)
for the same prompt, params and seed, with the same stats counters (per-source ones included). With draft and gamma
"auto" the choices depend on measured timings, so there only the greedy tokens must match."""

from __future__ import annotations

import pytest
from _capi_helpers import run_program

CASES = {
    "greedy-ids": ({"ids": [20, 30, 1]}, dict(max_new_tokens=16, gamma=3, draft="draft")),
    "greedy-ids-target-only": ({"ids": [40, 41, 42, 43, 1]}, dict(max_new_tokens=10, gamma=0, draft="draft")),
    "greedy-text": ({"text": "w20 w30"}, dict(max_new_tokens=12, gamma=4, draft="draft")),
    "sampled-ids": ({"ids": [33, 1]}, dict(max_new_tokens=24, gamma=2, draft="draft", temperature=3.0, seed=11)),
    "sampled-text-top-k-top-p": ({"text": "w5 w6 w7"}, dict(max_new_tokens=20, gamma=4, draft="draft", temperature=3.0,
                                                           top_k=20, top_p=0.9, seed=3)),
    "sampled-ids-lenience": ({"ids": [5, 6, 7, 1]}, dict(max_new_tokens=40, gamma=8, draft="draft", temperature=2.0,
                                                       lenience=0.5, seed=5)),
    # temperature 0 with lenience < 1: a guess is kept iff p(x) >= l * max p (differs from exact greedy here)
    "greedy-ids-lenience": ({"ids": [40, 41, 42, 43, 1]}, dict(max_new_tokens=16, gamma=4, draft="draft",
                                                             lenience=0.3)),
    # draft sources by name (API version 3)
    "greedy-ids-lookup": ({"ids": [20, 30, 1]}, dict(max_new_tokens=16, gamma=3, draft="lookup")),
    "sampled-ids-chain": ({"ids": [5, 6, 7, 1]}, dict(max_new_tokens=20, gamma=4, draft="lookup,draft",
                                                    temperature=2.0, seed=9)),
    "greedy-text-auto": ({"text": "w20 w30"}, dict(max_new_tokens=12)),     # draft and gamma "auto" (defaults)
}
EXAMPLES = ["specdec-example-c", "specdec-example-cpp"]


@pytest.fixture(scope="module")
def decoder(tiny_export):
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)


def is_auto(params: dict) -> bool:
    return params.get("draft", "auto") == "auto" or params.get("gamma", "auto") == "auto"


def argv_for(prompt: dict, params: dict) -> list[str]:
    argv = ["--text", prompt["text"]] if "text" in prompt else ["--ids", ",".join(map(str, prompt["ids"]))]
    for name, value in params.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv + ["--threads", "1"]


def parse(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("ids", "text", "stream", "stream_ids", "stream_text", "stats", "stream_stats",
                           "expected error"):
            out[key] = value
        elif line in ("ids:", "stream_ids:", "text:", "stream_text:"):
            out[line[:-1]] = ""
    return out


def stats_of(line: str) -> dict:
    fields = dict(item.split("=", 1) for item in line.partition("time_ms:")[0].split() if "=" in item)
    accepted, proposed = fields["accepted"].split("/")
    rounds = {kind: [int(v) for v in fields[kind].split("/")] for kind in ("lookup", "model", "chain")}
    return {"new_tokens": int(fields["new_tokens"]), "target_calls": int(fields["target_calls"]),
            "draft_calls": int(fields["draft_calls"]), "ort_runs": int(fields["ort_runs"]),
            "accepted": int(accepted), "proposed": int(proposed), "stop": fields["stop"],
            "target_only_rounds": int(fields["target_only_rounds"]), "lookup": rounds["lookup"],
            "model": rounds["model"], "chain": rounds["chain"]}


def times_of(line: str) -> dict:
    """The time_ms part of a stats line: {"total": ms, "encoder": ms, "draft": ms, "target": ms, "host": ms}."""
    return {k: float(v) for k, v in (item.split("=", 1) for item in line.partition("time_ms:")[2].split())}


def python_stats(stats, reason) -> dict:
    """The stats line's counters from a runtime Stats: Stats.sources summed by kind (rounds/proposed/accepted), as
    specdec_stats documents them."""
    kinds = {"lookup": [0, 0, 0], "model": [0, 0, 0], "chain": [0, 0]}
    target_only = 0
    for name, s in stats.sources.items():
        if name.endswith(">"):
            kinds["chain"] = [kinds["chain"][0] + s.proposed, kinds["chain"][1] + s.accepted]
        elif name == "none":
            target_only += s.rounds
        else:
            k = kinds["lookup" if name == "lookup" else "model"]
            k[0], k[1], k[2] = k[0] + s.rounds, k[1] + s.proposed, k[2] + s.accepted
    return {"new_tokens": stats.new_tokens, "target_calls": stats.target_calls, "draft_calls": stats.draft_calls,
            "ort_runs": stats.ort_runs, "accepted": stats.accepted, "proposed": stats.proposed, "stop": reason,
            "target_only_rounds": target_only, **kinds}


def consistent(stats: dict) -> bool:
    """Each target run is a round of one kind; every guess the target judged came from the lookup or a model."""
    return (stats["target_only_rounds"] + stats["lookup"][0] + stats["model"][0] == stats["target_calls"]
            and stats["lookup"][1] + stats["model"][1] == stats["proposed"]
            and stats["lookup"][2] + stats["model"][2] == stats["accepted"])


def check_times(line: str, uses_model: bool | None) -> None:
    """specdec_stats' times are filled from the runtime's: every part present, and they add up to total_s.
    `uses_model`: whether a draft model ran (None: not known in advance)."""
    t = times_of(line)
    assert set(t) == {"total", "encoder", "draft", "target", "host"}, line
    assert t["target"] > 0 and t["encoder"] > 0, line
    assert uses_model is None or (t["draft"] > 0) == uses_model, line
    assert abs(t["encoder"] + t["draft"] + t["target"] + t["host"] - t["total"]) < 0.05, line   # printed to 0.01


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_matches_python(capi_build, tiny_export, decoder, example, case):
    prompt, params = CASES[case]
    result = run_program([capi_build / example, tiny_export, *argv_for(prompt, params)], timeout=300)
    got = parse(result.stdout)

    text = prompt.get("text")
    ids = prompt.get("ids")
    ref = decoder.generate(text, input_ids=ids, **params)
    pieces = list(decoder.stream(text, input_ids=ids, **params))
    if ids is not None:
        assert got["ids"].split() == [str(t) for t in ref.token_ids]
    else:
        assert got["text"] == ref.text
    assert got["stream_ids"].split() == [str(t) for t in ref.token_ids]
    assert got["stream_text"] == "".join(p.text for p in pieces) == ref.text
    for line in ("stats", "stream_stats"):
        assert consistent(stats_of(got[line])), got[line]
    if is_auto(params):             # the choices follow measured timings: the greedy tokens above, and sane stats
        assert params.get("temperature", 0) == 0
        for line in ("stats", "stream_stats"):
            assert stats_of(got[line])["new_tokens"] == len(ref.token_ids)
            check_times(got[line], None)
        return
    uses_model = params["gamma"] > 0 and params["draft"] not in ("none", "lookup")
    assert stats_of(got["stats"]) == python_stats(ref.stats, ref.stop_reason)
    check_times(got["stats"], uses_model)

    # streaming: the same pieces as the Python stream(), in order, and the same whole output
    assert got["stream"] == " ".join("[" + " ".join(map(str, p.token_ids)) + "]" for p in pieces)
    assert stats_of(got["stream_stats"]) == python_stats(ref.stats, ref.stop_reason)
    assert stats_of(got["stream_stats"]) == python_stats(pieces[-1].stats, pieces[-1].stop_reason)
    check_times(got["stream_stats"], uses_model)
    if example.endswith("cpp"):
        assert got["expected error"].startswith("SPECDEC_E_INVALID_ARGUMENT: specdec_generate_ids: gamma must be")


def test_cases_are_not_trivial(decoder):
    """Sampled cases differ from greedy ones and between seeds, and outputs have several distinct tokens, so
    token equality above is evidence."""
    prompt, params = CASES["sampled-ids"]
    runs = {seed: decoder.generate(input_ids=prompt["ids"], **{**params, "seed": seed}).token_ids
            for seed in (1, 2, 11)}
    assert len({tuple(v) for v in runs.values()}) > 1
    distinct = set()
    for prompt, params in CASES.values():
        distinct.update(decoder.generate(prompt.get("text"), input_ids=prompt.get("ids"), **params).token_ids)
    assert len(distinct) >= 5
    # the source cases use what they name: the lookup's guesses reach the target, and the chain's lookup proposes
    # to the draft model
    prompt, params = CASES["greedy-ids-lookup"]
    assert decoder.generate(input_ids=prompt["ids"], **params).stats.sources["lookup"].proposed > 0
    prompt, params = CASES["sampled-ids-chain"]
    assert decoder.generate(input_ids=prompt["ids"], **params).stats.sources["lookup>"].proposed > 0
    # the greedy lenience case keeps guesses exact greedy rejects, so equal tokens prove lenience reached the runtime
    prompt, params = CASES["greedy-ids-lenience"]
    lenient = decoder.generate(input_ids=prompt["ids"], **params)
    exact = decoder.generate(input_ids=prompt["ids"], **{**params, "lenience": 1.0})
    assert lenient.token_ids != exact.token_ids
    assert lenient.stats.accepted > exact.stats.accepted


def test_example_fails_cleanly_on_a_missing_export(capi_build, tmp_path):
    for example in EXAMPLES:
        result = run_program([capi_build / example, tmp_path / "nope", "--ids", "5,1"], check=False)
        assert result.returncode == 1
        assert "SPECDEC_E_EXPORT" in result.stderr and "does not exist" in result.stderr

"""specdec-bench --num-beams: beam search per task x configuration on the tiny export (timings never asserted), the
outputs-equal counts (with a broken-output control), the option errors, and the summary arithmetic by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchrun import finite, prompts_file, run
from specdec.bench.beams import measure as beams
from specdec.runtime import SpeculativeDecoder, Stats

TASKS = ("summarize", "translate")


def _spread_ok(spread) -> bool:
    return all(finite(spread[k]) for k in ("median", "min", "max"))


def test_beam_mode_report(tiny_export, tmp_path):
    repeats = 2
    code, out, err = run(["beams", "--export", tiny_export, "--prompts", prompts_file(tmp_path / "p.jsonl", 2),
                          "--num-beams", 3,
                          "--gamma", "1,2", "--num-prompts", 4, "--repeat", repeats, "--max-new-tokens", 6,
                          "--early-stopping", "true", "--length-penalty", "0.8", "--probe-repeats", 1,
                          "--json", tmp_path / "b.json", "--markdown", tmp_path / "b.md", "--no-progress"])
    assert code == 0, err
    assert "beam search per task" in out and "per-call costs" in out and "what the runs predict" in out
    assert "beam exactness: every specdec configuration gave none's sequences" in out
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["schema"] == "specdec-bench/1" and report["mode"] == "beams"
    assert report["machine"]["cpu_model"] and report["machine"]["provider"] == "cpu"
    s = report["settings"]
    labels = ["none", "draft:1", "draft:2", "auto", "transformers"]
    assert [c["label"] for c in s["configs"]] == labels
    assert [c["gamma"] for c in s["configs"]] == [0, 1, 2, "auto", None]
    assert (s["num_beams"], s["max_new_tokens"], s["early_stopping"], s["length_penalty"]) == (3, 6, True, 0.8)
    assert s["gammas"] == [1, 2] and s["prompts_per_task"] == {"summarize": 2, "translate": 2}
    assert s["transformers"]["status"] == "ok"
    rows = {(r["task"], r["config"]): r for r in report["beam_results"]}
    assert set(rows) == {(task, label) for task in TASKS for label in labels}
    for key, r in rows.items():
        assert r["requests"] == 2 * repeats and r["repeats"] == repeats and r["new_tokens"] > 0, key
        for name in ("ms_per_token", "ms_per_request", "speedup_vs_none", "speedup_vs_transformers"):
            assert _spread_ok(r[name]), (key, name)
    for task in TASKS:
        assert rows[(task, "none")]["speedup_vs_none"]["median"] == pytest.approx(1.0)
        assert rows[(task, "transformers")]["speedup_vs_transformers"]["median"] == pytest.approx(1.0)
        assert "outputs_equal_none" not in rows[(task, "none")]            # the reference itself
        none = rows[(task, "none")]
        assert none["draft_calls"] == 0 and none["beam_steps"] == none["target_calls"]
        assert none["beam_steps_per_target_call"] == 1.0 and none["speculative"]["rounds"] == 0
        assert none["prediction"] is None
        for label in labels[1:]:
            eq = rows[(task, label)]["outputs_equal_none"]
            # every prompt of the task in the warm-up pass and in every repeat
            assert eq["compared"] == 2 * (1 + repeats), (task, label)
            if label != "transformers":
                assert eq["equal"] == eq["compared"] and eq["mismatches"] == 0, (task, label)
        assert "time_share" not in rows[(task, "transformers")]
        for label in ("none", "draft:1", "draft:2", "auto"):
            r = rows[(task, label)]
            assert sum(r["time_share"].values()) == pytest.approx(1.0), (task, label)
            assert set(r["time_share"]) == {"target", "draft", "encoder", "host"}
            assert finite(r["target_ms_per_call"]) and r["beam_steps"] >= r["target_calls"] > 0
            spec = r["speculative"]
            assert spec["rounds"] + spec["target_only_rounds"] == r["target_calls"], (task, label)
        for g in (1, 2):
            r = rows[(task, f"draft:{g}")]
            spec = r["speculative"]
            assert spec["rounds"] > 0 and 1.0 <= spec["steps_per_round"] <= g + 1 and spec["mean_gamma"] <= g
            assert r["draft_calls"] > 0 and finite(r["draft_ms_per_call"])
            p = r["prediction"]
            assert p["gamma"] == g and p["steps_per_round"] == spec["steps_per_round"]
            for name in ("c", "verify_ratio", "predicted_speedup", "measured_over_predicted", "ceiling",
                         "verify_break_even", "c_break_even", "c_in_loop", "verify_ratio_in_loop",
                         "predicted_in_loop"):
                assert finite(p[name]), (task, g, name)
            assert p["verify_break_even"] == pytest.approx(p["steps_per_round"] - g * p["c"])
    assert report["beam_outputs_equal"]["summarize"]["draft:2"]["mismatches"] == 0
    costs = report["beam_costs"]
    assert costs["num_beams"] == 3 and finite(costs["target_step_ms"]) and finite(costs["c"])
    assert all(finite(t["ms"]) and finite(t["after_switch_ms"]) for t in costs["target_runs"])
    shapes = {(t["rows"], t["tokens"]) for t in costs["target_runs"]}
    assert {(3, 1), (3, 2), (6, 2), (3, 3), (9, 3)} <= shapes
    assert set(costs["scoring"]) == {"1", "2"}
    assert all(e["rows_seen"] and 3 <= e["rows"] <= 3 * (int(g) + 1) for g, e in costs["scoring"].items())
    assert any(t["tokens"] == 1 and t["rows"] == 3 for t in report["target_run_shapes_seen"])
    learned = report["auto_estimates"]["after_warmup"]
    assert "0" in learned["steps_per_s"] and learned["rounds_seen"]["0"] > 0
    assert {"beam_results", "prediction", "outputs_equal_none"} <= set(report["notes"])
    md = (tmp_path / "b.md").read_text()
    assert "| task | config |" in md and "| translate | draft:2 |" in md and "what auto had learned" in md
    assert "ceiling" in md and "| W x 1 | 3 | 1 |" in md


def test_mismatches_are_counted(tiny_export, tmp_path, monkeypatch):
    """A broken speculative path (draft:1 returns a changed sequence) is caught: every compared output of draft:1
    is a mismatch, the others still equal; without transformers its row and ratio are absent."""
    real = SpeculativeDecoder.generate

    def broken(self, *args, **kwargs):
        res = real(self, *args, **kwargs)
        params = kwargs.get("params")
        if params is not None and params.num_beams > 1 and params.gamma == 1:
            seqs = [list(s) + [5] for s in res.sequences]
            res = dataclasses.replace(res, sequences=seqs, token_ids=seqs[0])
        return res

    monkeypatch.setattr(SpeculativeDecoder, "generate", broken)
    code, out, err = run(["beams", "--export", tiny_export, "--prompts", prompts_file(tmp_path / "p.jsonl", 2),
                          "--num-beams", 2,
                          "--gamma", "1,2", "--num-prompts", 2, "--repeat", 1, "--max-new-tokens", 5,
                          "--probe-repeats", 1, "--no-transformers", "--json", tmp_path / "m.json", "--no-progress"])
    assert code == 0, err
    assert "beam exactness: MISMATCH with none for summarize/draft:1 2 of 2, translate/draft:1 2 of 2" in out
    report = json.loads((tmp_path / "m.json").read_text())
    assert [c["label"] for c in report["settings"]["configs"]] == ["none", "draft:1", "draft:2", "auto"]
    assert report["settings"]["transformers"]["status"].startswith("left out")
    for task in TASKS:
        by = report["beam_outputs_equal"][task]
        first = {"pass": "warmup", "prompt": TASKS.index(task)}           # prompts alternate between the tasks
        assert by["draft:1"]["mismatches"] == 2 and by["draft:1"]["first_mismatch"] == first
        assert by["draft:2"] == {"equal": 2, "compared": 2, "mismatches": 0, "first_mismatch": None}
    assert all("speedup_vs_transformers" not in r for r in report["beam_results"])


@pytest.mark.parametrize("argv, needle", [
    (["beams", "--num-beams", "4", "--temperature", "1"], "temperature 0 only"),
    (["beams", "--num-beams", "4", "--draft", "auto"], "--draft does not apply to beams"),
    (["beams", "--num-beams", "4", "--filters", "none,3:0.9"], "--filters does not apply"),
    (["beams", "--num-beams", "4", "--plot", "x.png"], "--plot does not apply"),
    (["beams", "--num-beams", "0"], "--num-beams must be at least 2"),
    (["beams", "--num-beams", "99"], "num_beams must be an integer in 1..16"),
    (["beams", "--num-beams", "4", "--gamma", "1,99"], "draft:99: gamma must be an integer in 0..8"),
    (["beams", "--num-beams", "4", "--beam-rows", "4,8"], "--beam-rows does not apply to beams --export"),
    (["beams"], "--num-beams"),                                      # required
    (["sweep", "--early-stopping", "true"], "--early-stopping does not apply to sweep (a flag of beams)"),
    (["sweep", "--no-transformers"], "--no-transformers does not apply to sweep (a flag of beams)"),
])
def test_beam_option_errors(tiny_export, argv, needle):
    code, out, err = run(argv[:1] + ["--export", tiny_export, "--no-progress", "--probe-repeats", "1"] + argv[1:])
    assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)


def test_beam_costs_at_shapes_take_only_their_flags():
    """--shapes measures costs only: the flags of the runs on an export are one-line errors there (--markdown too:
    the report has no tables of runs to render)."""
    for flag, value in (("--markdown", "x.md"), ("--repeat", "3"), ("--no-transformers", None)):
        argv = ["beams", "--shapes", "t5-large:t5-small", "--num-beams", "2", flag] + ([value] if value else [])
        code, out, err = run(argv)
        assert code == 2 and err.strip().count("\n") == 0, (flag, err)
        assert f"{flag} does not apply to beams --shapes" in err, (flag, err)


def test_beam_costs_at_shapes_need_the_source_within_max_length():
    """The default --source-length 48 past --max-length 32: one line naming the fix (was a numpy broadcast error)."""
    code, out, err = run(["beams", "--shapes", "t5-large:t5-small", "--num-beams", "2", "--max-length", "32"])
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "--source-length 48 is longer than --max-length 32" in err and "--source-length 32 or less" in err, err


def _stats(total_s, new_tokens, target_calls, draft_calls=0, none=0, draft=None, parts=(0.0, 0.0, 0.0)):
    st = Stats(total_s=total_s, new_tokens=new_tokens, target_calls=target_calls, draft_calls=draft_calls)
    st.target_s, st.draft_s, st.encoder_s = parts
    st.host_s = total_s - sum(parts)
    if none:
        src = st.source("none")
        src.rounds = src.tokens = none
    if draft:
        src = st.source("draft")
        src.rounds, src.proposed, src.accepted, src.tokens = draft
    return st


def test_summary_by_hand():
    cfgs = beams.configs([2], auto=False)
    none, spec, hf = beams.BeamCell(), beams.BeamCell(), beams.BeamCell()
    none.add(0, _stats(0.040, 10, 12, none=12, parts=(0.030, 0.0, 0.004)))
    none.add(1, _stats(0.060, 10, 12, none=12, parts=(0.042, 0.0, 0.004)))
    # 8 speculative rounds of 2 guesses making 12 steps (4 accepted), 1 target-only round at the end
    spec.add(0, _stats(0.080, 10, 9, 16, none=1, draft=(8, 16, 4, 12), parts=(0.050, 0.010, 0.008)))
    spec.add(1, _stats(0.060, 10, 9, 16, none=1, draft=(8, 16, 4, 12), parts=(0.040, 0.008, 0.008)))
    hf.add_wall(0, 0.120, 10)
    hf.add_wall(1, 0.090, 10)
    cells = {("t", "none"): none, ("t", "draft:2"): spec, ("t", "transformers"): hf}
    equality = {("t", "draft:2"): {"equal": 2, "compared": 2, "first_mismatch": None},
                ("t", "transformers"): {"equal": 1, "compared": 2, "first_mismatch": {"pass": 0, "prompt": 0}}}
    costs = {"c": 0.1, "scoring": {"2": {"rows": 6, "over_step": 1.5}}}
    rows = {r["config"]: r for r in beams.summarize(cells, cfgs, equality, costs)}
    r = rows["draft:2"]
    assert r["speedup_vs_none"]["median"] == pytest.approx((0.5 + 1.0) / 2)       # per repeat: 40/80, 60/60
    assert r["speedup_vs_transformers"]["median"] == pytest.approx((1.5 + 1.5) / 2)
    assert r["ms_per_token"]["median"] == pytest.approx(7.0) and r["ms_per_request"]["median"] == pytest.approx(70.0)
    assert r["beam_steps"] == 26 and r["beam_steps_per_target_call"] == pytest.approx(26 / 18)
    spec_row = r["speculative"]
    assert spec_row["rounds"] == 16 and spec_row["target_only_rounds"] == 2
    assert spec_row["round_share"] == pytest.approx(16 / 18) and spec_row["steps_per_round"] == pytest.approx(1.5)
    assert spec_row["mean_gamma"] == pytest.approx(2.0) and spec_row["accepted_per_guess"] == pytest.approx(0.25)
    assert r["time_share"]["target"] == pytest.approx(0.090 / 0.140)
    assert r["time_share"]["host"] == pytest.approx((0.140 - 0.090 - 0.018 - 0.016) / 0.140)
    assert r["draft_ms_per_call"] == pytest.approx(1000 * 0.018 / 32)
    p = r["prediction"]
    assert p["predicted_speedup"] == pytest.approx(1.5 / (2 * 0.1 + 1.5))
    assert p["ceiling"] == pytest.approx(1.5 / 1.2)
    assert p["verify_break_even"] == pytest.approx(1.3) and p["c_break_even"] == pytest.approx(0.0)
    assert p["measured_over_predicted"] == pytest.approx(0.75 / p["predicted_speedup"])
    # in the loop: none's target run 72 ms / 24 = 3 ms, draft:2's 90 / 18 = 5 ms; draft 18 ms / 32 runs
    assert p["verify_ratio_in_loop"] == pytest.approx(5.0 / 3.0)
    assert p["c_in_loop"] == pytest.approx((18 / 32) / 3.0)
    assert p["predicted_in_loop"] == pytest.approx(1.5 / (2 * (18 / 32) / 3.0 + 5.0 / 3.0))
    assert r["outputs_equal_none"]["mismatches"] == 0
    assert rows["transformers"]["outputs_equal_none"]["mismatches"] == 1
    assert "speculative" not in rows["transformers"] and rows["none"]["prediction"] is None
    assert rows["none"]["speedup_vs_transformers"]["median"] == pytest.approx((3.0 + 1.5) / 2)
    assert beams.equality_summary(list(rows.values()))["t"]["draft:2"]["compared"] == 2


def test_configs_and_rows_seen():
    assert [c.label for c in beams.configs([0, 4, 1, 4])] == ["none", "draft:4", "draft:1", "auto", "transformers"]
    assert [c.label for c in beams.configs([2], auto=False, transformers=False)] == ["none", "draft:2"]
    seen = beams.rows_seen([(4, 1), (5, 3), (7, 3), (12, 3), (4, 2)], 2)
    assert seen == {"min": 5, "median": 7, "mean": pytest.approx(8.0), "max": 12, "runs": 3}
    assert beams.rows_seen([(4, 1)], 2) is None

"""specdec-bench --draft: the draft-source sweep per task x temperature x draft on the tiny export (timings never
asserted), its option errors, and the prediction arithmetic against hand values."""

from __future__ import annotations

import json

import pytest

from benchrun import finite, prompts_file, run
from specdec.bench.common import prompts, theory
from specdec.bench.drafts import cli, measure as drafts
from specdec.runtime import SpecdecError, Stats

DRAFTS = ["none", "draft", "lookup", "lookup,draft", "auto"]


def test_draft_sweep_smoke(tiny_export, tmp_path):
    code, out, err = run(["drafts", "--export", tiny_export, "--prompts", prompts_file(tmp_path / "p.jsonl", 3),
                          "--draft", *DRAFTS, "--temperature", "0,1", "--num-prompts", "4", "--repeat", "1",
                          "--max-new-tokens", "6", "--probe-repeats", "1", "--json", tmp_path / "d.json",
                          "--markdown", tmp_path / "d.md", "--no-progress"])
    assert code == 0, err
    assert "draft sources per task" in out and "Theorem 3.8 for the dominant source" in out
    assert "learned on its warm-up pass" in out and "greedy exactness: every draft configuration" in out
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["mode"] == "drafts"
    s = report["settings"]
    assert [d["label"] for d in s["drafts"]] == DRAFTS
    assert [d["gamma"] for d in s["drafts"]] == [0, "auto", "auto", "auto", "auto"]
    assert [d["draft"] for d in s["drafts"]] == ["none", "draft", "lookup", "lookup,draft", "auto"]
    assert s["prompts_per_task"] == {"summarize": 2, "translate": 2} and s["temperatures"] == [0.0, 1.0]
    cells = {(r["task"], r["temperature"], r["draft"]): r for r in report["draft_results"]}
    assert set(cells) == {(task, t, d) for task in ("summarize", "translate") for t in (0.0, 1.0) for d in DRAFTS}
    for key, r in cells.items():
        assert r["requests"] == 2 and r["new_tokens"] > 0, key
        for name in ("tokens_per_s", "tokens_per_target_call", "draft_calls_per_token", "baseline_ms_per_token",
                     "predicted_speedup", "measured_over_predicted", "predicted_mixture", "measured_over_mixture"):
            assert finite(r[name]), (key, name, r[name])
        for spread in (r["ms_per_token"], r["speedup"]):
            assert all(finite(spread[k]) for k in ("median", "min", "max")), key
        shares = [src["share"] for name, src in r["sources"].items() if not name.endswith(">")]
        assert sum(shares) == pytest.approx(1.0), key
        for name, src in r["sources"].items():
            assert src["alpha"] is None if name == "none" else 0.0 <= src["alpha"] <= 1.0, (key, name)
        p = r["prediction"]
        assert p["source"] == r["dominant_source"]
        if p["source"] != "none":
            assert all(finite(p[k]) for k in ("alpha", "mean_gamma", "c", "verify_cost", "expected_tokens")), key
    for task in ("summarize", "translate"):
        for t in (0.0, 1.0):
            none = cells[(task, t, "none")]
            assert none["speedup"]["median"] == pytest.approx(1.0) and none["draft_calls"] == 0
            assert set(none["sources"]) == {"none"} and none["predicted_speedup"] == 1.0
            assert cells[(task, t, "lookup")]["draft_calls"] == 0              # a lookup runs no model
            assert set(cells[(task, t, "draft")]["sources"]) <= {"draft", "none"}
            assert cells[(task, t, "lookup,draft")]["prediction"]["source"] in ("lookup,draft", "none")
    assert report["draft_greedy_agreement"] == {task: {d: {"agree": 2, "prompts": 2} for d in DRAFTS}
                                                for task in ("summarize", "translate")}
    assert set(report["draft_best"]) == {"summarize", "translate"}
    assert all(set(b) == {"0.0", "1.0"} and all(finite(x["auto_speedup"]) for x in b.values())
               for b in report["draft_best"].values())
    assert set(report["auto_estimates"]) == {"0.0", "1.0"}
    assert all("alpha" in e and e["rounds"] > 0 for e in report["auto_estimates"].values())
    assert "warm-up" in report["auto_estimates_note"] and "prediction" in report["notes"]
    md = (tmp_path / "d.md").read_text()
    assert "| task | T | draft |" in md and "| summarize | 1 | lookup,draft |" in md and "mixture" in md
    assert "What auto had learned" in md


def test_fixed_gamma_items(tiny_export, tmp_path):
    """NAME:G runs that source at a fixed gamma; `none` is added when missing; random prompts form one task."""
    code, out, err = run(["drafts", "--export", tiny_export, "--draft", "draft:2", "--draft", "lookup:3",
                          "--temperature", "0",
                          "--num-prompts", "1", "--repeat", "2", "--max-new-tokens", "5", "--probe-repeats", "1",
                          "--json", tmp_path / "g.json", "--no-progress"])
    assert code == 0, err
    report = json.loads((tmp_path / "g.json").read_text())
    assert [(d["label"], d["gamma"]) for d in report["settings"]["drafts"]] == [("none", 0), ("draft:2", 2),
                                                                               ("lookup:3", 3)]
    rows = {r["draft"]: r for r in report["draft_results"]}
    assert {r["task"] for r in rows.values()} == {"random"} and set(rows) == {"none", "draft:2", "lookup:3"}
    draft = rows["draft:2"]
    assert draft["repeats"] == 2 and draft["sources"]["draft"]["mean_proposed"] <= 2
    assert draft["prediction"]["c"] == pytest.approx(report["cost_probe"]["c"])
    assert rows["lookup:3"]["sources"].get("lookup", {"mean_proposed": 0})["mean_proposed"] <= 3


@pytest.mark.parametrize("argv, needle", [
    (["--draft", "draft:x"], "must be an integer"),
    (["--draft", "draft:0"], "gamma 0 is target-only"),
    (["--draft", "lookup,"], "empty name"),
    (["--draft", "none,draft"], "is not a chain; separate configurations with spaces"),
    (["--draft", "bogus"], "--draft bogus: unknown draft 'bogus'"),
    (["--draft", "draft:99"], "--draft draft:99: gamma must be an integer in 0..8"),
    (["--draft", "auto", "--gamma", "0,2"], "--gamma does not apply to drafts (give a fixed gamma per draft as NAME:G"),
    (["--draft", "auto", "--plot", "x.png"], "--plot does not apply to drafts (a flag of sweep, shapes)"),
    (["--draft", "auto", "--profile", "p.txt"], "--profile does not apply to drafts (a flag of sweep)"),
    ([], "--draft"),                                                # required
    (["--draft", "auto", "--filters", "none,3:0.9"], "one filter"),
    (["--draft", " "], "--draft is empty"),
    (["--draft", "lookup,datastore"], "this export has no datastore"),
    (["--draft", "draft,datastore"], "the datastore is what the lookup searches"),
])
def test_draft_option_errors(tiny_export, argv, needle):
    code, out, err = run(["drafts", "--export", tiny_export, "--no-progress", "--probe-repeats", "1"] + argv)
    assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)


def test_parse_configs_keeps_order_adds_none_and_drops_duplicates():
    configs = drafts.parse_configs(["lookup,draft", "draft:3", "auto", "draft:3", " lookup ", "none:0"])
    assert [(c.label, c.draft, c.gamma) for c in configs] == [
        ("none", "none", 0), ("lookup,draft", "lookup,draft", "auto"), ("draft:3", "draft", 3),
        ("auto", "auto", "auto"), ("lookup", "lookup", "auto")]
    earlier = drafts.parse_configs(["lookup+draft,draft:3,auto,draft:3, lookup , none:0"])   # the earlier form
    assert earlier == configs


def test_lookup_with_and_without_the_datastore_in_one_run(tiny_export, tmp_path):
    """"lookup" searches the output and the source only, "lookup,datastore" the export's datastore too (here the
    target's own greedy outputs for the prompts: it copies far more), "auto" as the runtime's default does."""
    import shutil

    from tinymodels import add_datastore

    from specdec.runtime import SpeculativeDecoder

    export = tmp_path / "export"
    shutil.copytree(tiny_export, export)
    prompts = prompts_file(tmp_path / "p.jsonl", 3)
    dec = SpeculativeDecoder.load(export, provider="cpu")
    ids = [json.loads(line)["input_ids"] for line in prompts.read_text().splitlines()]
    add_datastore(export, [dec.generate(input_ids=i, draft="none", max_new_tokens=8).token_ids for i in ids])
    code, out, err = run(["drafts", "--export", export, "--prompts", prompts,
                          "--draft", "lookup:4", "lookup,datastore:4", "auto",
                          "--temperature", "0", "--num-prompts", "4", "--repeat", "1", "--max-new-tokens", "8",
                          "--probe-repeats", "1", "--json", tmp_path / "s.json", "--no-progress"])
    assert code == 0, err
    report = json.loads((tmp_path / "s.json").read_text())
    assert [(d["label"], d["draft"]) for d in report["settings"]["drafts"]] == [
        ("none", "none"), ("lookup:4", "lookup"), ("lookup,datastore:4", "lookup"), ("auto", "auto")]
    kept = {}
    for r in report["draft_results"]:
        kept[r["draft"]] = kept.get(r["draft"], 0) + sum(r["sources"].get(name, {}).get("accepted", 0)
                                                         for name in ("lookup", "datastore"))
    assert kept["lookup,datastore:4"] > kept["lookup:4"], kept
    assert all(a == {"agree": 2, "prompts": 2} for task in report["draft_greedy_agreement"].values()
               for a in task.values())


def test_prompt_selection_gives_every_task_a_share():
    ps = [prompts.Prompt(text=f"w{i}", task="a") for i in range(5)] + [prompts.Prompt(text="w9", task="b")]
    assert [p.task for p in prompts.select(ps, 1)] == ["a"]
    assert [p.task for p in prompts.select(ps, 1, every_task=True)] == ["a", "b"]
    assert [p.task for p in prompts.select(ps, 4, every_task=True)] == ["a", "b", "a", "a"]


def test_theorem_with_a_mean_gamma_and_the_measured_verify_cost():
    assert theory.expected_tokens_at(0.5, 2) == pytest.approx(theory.expected_tokens(0.5, 2))
    assert theory.expected_tokens_at(0.5, 1.5) == pytest.approx((1 - 0.5 ** 2.5) / 0.5)
    assert theory.expected_tokens_at(1.0, 2.5) == 3.5
    ratios = {"1": 1.0, "2": 1.1, "3": 1.3, "5": 1.7}
    assert theory.verify_cost(ratios, 0) == 1.0 and theory.verify_cost(ratios, 1) == pytest.approx(1.1)
    assert theory.verify_cost(ratios, 1.5) == pytest.approx(1.2)            # between 2 and 3 tokens
    assert theory.verify_cost(ratios, 3.0) == pytest.approx(1.5)            # 4 tokens: between 3 and 5
    assert theory.verify_cost(ratios, 9) == 1.7 and theory.verify_cost({}, 1) is None
    # verify cost 1 and an integer gamma: Theorem 3.8 itself
    assert theory.speedup_with_verify_cost(0.8, 3, 0.05, 1.0) == pytest.approx(theory.predicted_speedup(0.8, 3, 0.05))
    # a free lookup: (1 + 0.6 + 0.36) / 1.2
    assert theory.speedup_with_verify_cost(0.6, 2, 0.0, 1.2) == pytest.approx(1.96 / 1.2)
    # 10 target-only rounds (1 token, 1 step) and 10 lookup rounds (1.96 tokens, 1.2 steps)
    assert theory.mixture_speedup([(10, 0.0, 0.0, 0.0, 1.0), (10, 0.6, 2.0, 0.0, 1.2)]) == pytest.approx(
        (10 + 19.6) / (10 + 12))
    assert theory.mixture_speedup([]) is None


def _stats(total_s, new_tokens, target_calls, draft_calls=0, encoder_s=0.0, **sources):
    st = Stats(total_s=total_s, new_tokens=new_tokens, target_calls=target_calls, draft_calls=draft_calls,
               encoder_s=encoder_s)
    for name, (rounds, proposed, accepted, rejections, tokens) in sources.items():
        src = st.source(name.replace("_", ","))
        src.rounds, src.proposed, src.accepted, src.rejections, src.tokens = (rounds, proposed, accepted,
                                                                              rejections, tokens)
    return st


def test_summary_of_a_chain_by_hand():
    """Speedup per repeat against none, shares, the chain's c scaled by draft runs per guess, the predictions."""
    configs = drafts.parse_configs(["lookup,draft:4"])
    none, chain = drafts.DraftCell(), drafts.DraftCell()
    none.add(0, _stats(0.020, 10, 10, encoder_s=0.005, none=(10, 0, 0, 0, 10)))
    none.add(1, _stats(0.030, 10, 10, none=(10, 0, 0, 0, 10)))
    # 4 rounds of 4 guesses, 8 kept, 2 rejections; the draft kept 4 of the lookup's guesses (lookup>)
    chain.add(0, _stats(0.010, 10, 4, 12, lookup_draft=(3, 12, 6, 2, 9), none=(1, 0, 0, 0, 1),
                        **{"lookup>": (2, 6, 4, 1, 0)}))
    chain.add(1, _stats(0.020, 10, 4, 12))
    cells = {("t", 0.0, "none"): none, ("t", 0.0, "lookup,draft:4"): chain}
    probe = {"c": 0.2, "verify_ratio": {"1": 1.0, "4": 1.3, "5": 1.4}}
    rows = {r["draft"]: r for r in drafts.summarize(cells, configs, probe)}
    r = rows["lookup,draft:4"]
    assert r["speedup"]["median"] == pytest.approx((2.0 + 1.5) / 2)     # per repeat: 2/1 and 3/2
    # decode-only (the baseline's 5 ms of encoder left out of repeat 0): 1.5/1 and 3/2
    assert r["decode_speedup"]["median"] == pytest.approx(1.5)
    assert r["decode_ms_per_token"]["median"] == pytest.approx(1.5)
    assert r["tokens_per_target_call"] == pytest.approx(20 / 8) and r["draft_calls_per_token"] == pytest.approx(1.2)
    src = r["sources"]
    assert src["lookup,draft"]["share"] == pytest.approx(0.9) and src["none"]["share"] == pytest.approx(0.1)
    assert src["lookup>"]["share"] is None and src["lookup>"]["alpha"] == pytest.approx(0.8)
    p = r["prediction"]
    assert r["dominant_source"] == "lookup,draft" and p["alpha"] == pytest.approx(0.75)
    assert p["mean_gamma"] == pytest.approx(4.0) and p["verify_cost"] == pytest.approx(1.4)
    assert p["c"] == pytest.approx(0.2 * (12 - 4) / 12)                # draft runs per guess: (12 - 4) / 12
    expected = (1 - 0.75 ** 5) / 0.25
    assert p["expected_tokens"] == pytest.approx(expected) and p["tokens_per_round"] == pytest.approx(3.0)
    assert r["predicted_speedup"] == pytest.approx(expected / (4 * p["c"] + 1.4))
    assert r["predicted_mixture"] == pytest.approx((3 * expected + 1) / (3 * (4 * p["c"] + 1.4) + 1))
    assert r["measured_over_predicted"] == pytest.approx(1.75 / r["predicted_speedup"])
    assert rows["none"]["prediction"]["source"] == "none" and rows["none"]["measured_over_predicted"] == 1.0
    best = drafts.best_by_task(list(rows.values()))
    assert best == {"t": {"0.0": {"best": "lookup,draft:4", "best_speedup": pytest.approx(1.75),
                                  "best_decode_speedup": pytest.approx(1.5), "auto_decode_speedup": None,
                                  "best_ms_per_token": pytest.approx(1.5), "baseline_ms_per_token": pytest.approx(2.5),
                                  "auto_speedup": None, "best_fixed": "lookup,draft:4",
                                  "best_fixed_speedup": pytest.approx(1.75),
                                  "best_fixed_decode_speedup": pytest.approx(1.5), "auto_over_best_fixed": None,
                                  "auto_decode_over_best_fixed": None, "auto_explore": None}}}


def _row(draft, speedup, decode_speedup, task="t", t=0.0, **extra):
    config = drafts.parse_item(draft)
    return {"task": task, "temperature": t, "draft": config.label, "draft_name": config.draft, "gamma": config.gamma,
            "speedup": {"median": speedup}, "decode_speedup": {"median": decode_speedup},
            "ms_per_token": {"median": 1.0 / speedup}, "baseline_ms_per_token": 1.0, **extra}


def test_best_fixed_leaves_out_what_auto_chooses():
    """Best fixed: none and NAME:G only; draft (gamma auto), lookup*4 (gamma auto), auto:2 (auto's source) and auto
    are left out even where faster; the ratios are auto's median speedups over the best fixed one's."""
    explore = {"choice_rounds": 3, "switch_rounds": 5, "auto_rounds": 40, "rounds": 60}
    rows = [_row("none", 1.0, 1.0), _row("draft", 1.6, 1.7), _row("draft:3", 1.25, 1.4), _row("lookup:2", 1.3, 1.2),
            _row("lookup*4", 1.5, 1.5), _row("auto:2", 1.45, 1.5), _row("auto", 1.2, 1.26, auto_explore=explore),
            _row("none", 1.0, 1.0, t=1.0), _row("draft", 0.9, 0.9, t=1.0), _row("auto", 0.95, 0.97, t=1.0)]
    best = drafts.best_by_task(rows)
    b = best["t"]["0.0"]
    assert (b["best"], b["best_speedup"]) == ("draft", 1.6)
    assert (b["best_fixed"], b["best_fixed_speedup"], b["best_fixed_decode_speedup"]) == ("lookup:2", 1.3, 1.2)
    assert b["auto_over_best_fixed"] == pytest.approx(1.2 / 1.3)
    assert b["auto_decode_over_best_fixed"] == pytest.approx(1.26 / 1.2)
    assert b["auto_explore"] == explore
    hot = best["t"]["1.0"]                           # only none is fixed: auto over none, no counters measured
    assert (hot["best"], hot["best_fixed"]) == ("none", "none")
    assert hot["auto_over_best_fixed"] == pytest.approx(0.95) and hot["auto_explore"] is None
    text = cli._best_line("t", "0.0", b)
    assert ("; auto 1.20x vs best fixed lookup:2 1.30x: 0.92, decode-only 1.26x vs 1.20x: 1.05; auto explored 3 "
            "choice rounds + 5 switch rounds of 60 rounds (target calls), 40 of them chosen by auto") in text, text
    unknown = cli._best_line("t", "0.0", {**b, "auto_explore": {**explore, "choice_rounds": None,
                                                                 "switch_rounds": None}})
    assert "auto explored n/a choice rounds + n/a switch rounds of 60 rounds" in unknown, unknown
    assert "auto explored" not in cli._best_line("t", "1.0", hot)


def test_drafts_report_auto_against_the_best_fixed(tiny_export, tmp_path):
    """A tiny run: per task, auto's speedups over the best fixed configuration's (none or draft:2, never draft at
    gamma auto), computed from the rows, in the JSON, the text and the markdown; auto's exploring counted over its
    timed runs out of its target calls ("n/a" only where the runtime keeps no such count)."""
    from specdec.runtime import Params, SpeculativeDecoder

    code, out, err = run(["drafts", "--export", tiny_export, "--prompts", prompts_file(tmp_path / "p.jsonl", 1),
                          "--draft", "draft:2", "draft", "auto", "--temperature", "0", "--repeat", "1",
                          "--max-new-tokens", "8", "--probe-repeats", "1", "--json", tmp_path / "d.json",
                          "--markdown", tmp_path / "d.md", "--no-progress"])
    assert code == 0, err
    report = json.loads((tmp_path / "d.json").read_text())
    rows = {(r["task"], r["draft"]): r for r in report["draft_results"]}
    assert all(("auto_explore" in r) == (r["gamma"] == "auto") for r in rows.values())
    auto = SpeculativeDecoder.load(tiny_export, provider="cpu").scheduler.source(Params(draft="auto"))
    counted = {"choice_rounds": hasattr(auto, "explored"), "switch_rounds": hasattr(auto.switch, "explored"),
               "auto_rounds": hasattr(auto.estimates, "round")}
    md = (tmp_path / "d.md").read_text()
    chosen = 0
    for task in ("summarize", "translate"):
        b = report["draft_best"][task]["0.0"]
        fixed = {label: rows[(task, label)]["speedup"]["median"] for label in ("none", "draft:2")}
        assert b["best_fixed"] == max(fixed, key=fixed.get)
        assert b["best_fixed_speedup"] == fixed[b["best_fixed"]]
        a, f = rows[(task, "auto")], rows[(task, b["best_fixed"])]
        assert b["auto_speedup"] == a["speedup"]["median"]
        assert b["auto_over_best_fixed"] == pytest.approx(a["speedup"]["median"] / f["speedup"]["median"])
        assert b["auto_decode_over_best_fixed"] == pytest.approx(a["decode_speedup"]["median"]
                                                                 / f["decode_speedup"]["median"])
        e = b["auto_explore"]
        assert e == a["auto_explore"] and e["rounds"] == a["target_calls"] > 0
        for key, kept in counted.items():
            assert (e[key] is not None) == kept, (key, e)
            assert e[key] is None or 0 <= e[key] <= e["rounds"], (key, e)
        if e["choice_rounds"] is not None and e["auto_rounds"] is not None:
            assert e["choice_rounds"] <= e["auto_rounds"], e
        chosen += e["auto_rounds"] or 0
        line = (f"{task}, T=0: best {b['best']} {b['best_speedup']:.2f}x"), (
            f"; auto {b['auto_speedup']:.2f}x vs best fixed {b['best_fixed']} {b['best_fixed_speedup']:.2f}x: "
            f"{b['auto_over_best_fixed']:.2f}, decode-only"), (
            f"; auto explored {e['choice_rounds'] if counted['choice_rounds'] else 'n/a'} choice rounds + "
            f"{e['switch_rounds'] if counted['switch_rounds'] else 'n/a'} switch rounds of {e['rounds']} rounds "
            "(target calls)")
        for part in line:
            assert part in out and part in md, (part, out)
    assert chosen > 0 or not counted["auto_rounds"]       # the counters are read off the object the runs used


# -- a Whisper export: audio prompts -------------------------------------------------------------------------------

def _audio_prompts(folder, lines: list[dict]):
    """A JSONL of audio prompts under `folder`, its WAV files (16-bit PCM, 16 kHz) in folder/clips: each line's
    "seconds" becomes a clip of that length (tinymodels.whisper_audio, seeded by its index)."""
    import numpy as np
    from scipy.io import wavfile

    from tinymodels import whisper_audio

    (folder / "clips").mkdir(parents=True, exist_ok=True)
    out = []
    for i, line in enumerate(lines):
        line = dict(line)
        seconds = line.pop("seconds", None)
        if seconds is not None:
            wavfile.write(folder / line["audio"], 16000, (whisper_audio(seconds, i) * 32767).astype(np.int16))
        out.append(json.dumps(line))
    path = folder / "audio.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


CLIPS = [{"audio": "clips/0001.wav", "reference": "the spoken text", "task": "dictation", "seconds": 0.6},
         {"audio": "clips/0002.wav", "task": "dictation", "language": "de", "seconds": 0.9}]


def test_drafts_on_a_whisper_export(whisper_pair, tmp_path):
    """Audio prompts: each WAV read once into its Prompt, generated with audio= and the line's language (default
    en); the report lists every configuration, with the decode-only columns, and says what the prompts were;
    `none`'s tokens are generate(audio=..., draft="none")'s."""
    from specdec.runtime import SpeculativeDecoder

    export = whisper_pair[1] / "export"
    path = _audio_prompts(tmp_path / "data", CLIPS)
    code, out, err = run(["drafts", "--export", export, "--prompts", path, "--draft", "none", "draft", "auto",
                          "--repeat", "1", "--max-new-tokens", "4", "--probe-repeats", "1", "--no-progress",
                          "--json", tmp_path / "w.json", "--markdown", tmp_path / "w.md"])
    assert code == 0, err
    assert "prompts: 2 audio clips, 1.5 s in all from" in out and "decode ms/tok" in out
    assert "greedy exactness: every draft configuration" in out
    report = json.loads((tmp_path / "w.json").read_text())
    s = report["settings"]
    assert s["prompts"] == 2 and s["audio_seconds"] == pytest.approx(1.5) and s["prompts_per_task"] == {"dictation": 2}
    assert report["cost_probe"]["source_seconds"] == pytest.approx(0.6)
    rows = {(r["temperature"], r["draft"]): r for r in report["draft_results"]}
    assert set(rows) == {(t, d) for t in (0.0, 1.0) for d in ("none", "draft", "auto")}
    for key, r in rows.items():
        assert r["requests"] == 2 and r["new_tokens"] > 0, key
        assert finite(r["decode_ms_per_token"]["median"]) and finite(r["decode_speedup"]["median"]), key
        assert r["decode_ms_per_token"]["median"] < r["ms_per_token"]["median"], key     # the encoder left out
        assert r["ms_per_token_by_part"]["encoder"] > 0, key
    md = (tmp_path / "w.md").read_text()
    assert "2 audio clips, 1.5 s in all from" in md and "(dictation 2);" in md and "| decode ms/tok | decode speedup |" in md

    dec = SpeculativeDecoder.load(export, provider="cpu")
    loaded, origin = prompts.load(str(path), 0, dec, every_task=True, audio=True)
    assert origin == str(path) and [p.language for p in loaded] == ["en", "de"]
    assert [p.reference for p in loaded] == ["the spoken text", None] and all(p.ids == [] for p in loaded)
    assert [p.audio.dtype for p in loaded] == ["float32", "float32"] and [p.audio.size for p in loaded] == [9600,
                                                                                                           14400]
    _, outputs, _ = drafts.run_drafts(dec, loaded, drafts.parse_configs(["none", "draft"]), [0.0], 4, 1)
    for label in ("none", "draft"):
        assert outputs[("dictation", 0.0, label)] == [
            list(dec.generate(audio=p.audio, language=p.language, draft="none", gamma=0, max_new_tokens=4).token_ids)
            for p in loaded], label


def test_audio_prompts_without_a_prompts_file_are_random_audio(whisper_pair):
    from specdec.runtime import SpeculativeDecoder

    dec = SpeculativeDecoder.load(whisper_pair[1] / "export", provider="cpu")
    loaded, origin = prompts.load(None, 2, dec, every_task=True, audio=True)
    assert origin.startswith("random audio") and len(loaded) == 2
    assert all(p.audio.size == dec.manifest.speech["n_samples"] and p.language == "<|en|>" for p in loaded)
    assert prompts.describe(loaded) == "2 audio clips, 2.0 s in all"
    with pytest.raises(SpecdecError, match="this command measures text exports"):
        prompts.load(None, 2, dec)                   # a command that has not said it takes audio


@pytest.mark.parametrize("case, needle", [
    ("missing", 'clips/0009.wav" does not exist'),
    ("text", "has text prompts, but this export is a Whisper model"),
    ("ids", "has text prompts, but this export is a Whisper model"),
    ("mixed", "has text prompts, but this export is a Whisper model"),
    ("not a string", '"audio" is not a string'),
    ("peers", "--peers times T5 engines"),
])
def test_bad_inputs_on_a_whisper_export_are_one_line_errors(whisper_pair, tmp_path, case, needle):
    folder = tmp_path / "data"
    lines = {"missing": [{"audio": "clips/0009.wav"}], "text": [{"source": "hello"}],
             "ids": [{"input_ids": [5, 6, 1]}], "mixed": CLIPS[:1] + [{"source": "hello"}],
             "not a string": [{"audio": 3}], "peers": CLIPS[:1]}[case]
    path = _audio_prompts(folder, lines)
    extra = ["--peers"] if case == "peers" else []
    code, out, err = run(["drafts", "--export", whisper_pair[1] / "export", "--prompts", path, "--draft", "none",
                          "--repeat", "1", "--max-new-tokens", "2", "--no-progress", *extra])
    assert code == 2 and err.strip().count("\n") == 0 and needle in err, (case, err)
    assert "Traceback" not in err


def test_audio_prompts_on_a_text_export_are_a_one_line_error(tiny_export, tmp_path):
    for lines in (CLIPS, [{"audio": "clips/0009.wav"}]):         # refused before any WAV is read
        path = _audio_prompts(tmp_path / "data", lines)
        code, out, err = run(["drafts", "--export", tiny_export, "--prompts", path, "--draft", "none", "--repeat",
                              "1", "--max-new-tokens", "2", "--no-progress"])
        assert code == 2 and err.strip().count("\n") == 0, err
        assert "has audio prompts, but this export is not a Whisper model" in err, err


def test_prompt_keywords_of_text_and_audio():
    import numpy as np

    text = prompts.Prompt(text="hi", ids=[4, 1])
    clip = prompts.Prompt(audio=np.zeros(8, np.float32), language="en")
    assert text.kwargs() == {"input_ids": [4, 1]} and text.source == [4, 1]
    assert set(clip.kwargs()) == {"audio", "language"} and clip.kwargs()["language"] == "en"
    assert clip.source is clip.audio
    assert prompts.tokenize([clip], None, 4) == [clip] and clip.ids == []       # no tokenizer needed

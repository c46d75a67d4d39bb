"""Smoke runs of specdec-bench on the tiny export (one prompt, a few tokens). Timings are never asserted: only
that the command runs, its JSON has the documented schema, the plot is written, and greedy outputs agree."""

from __future__ import annotations

import json

import pytest

from benchrun import run
from specdec.bench.common import peers, prompts
from specdec.bench.common import peers as optimum_client, peers as peer_engines
from specdec.bench.shapes import measure as shapes

ROW_KEYS = {"temperature", "gamma", "repeats", "ms_per_token", "tokens_per_s", "alpha", "tokens_per_target_call",
            "c", "verify_ratio", "host_ms_per_iteration", "host_fraction", "speedup", "predicted_speedup",
            "measured_over_predicted", "predicted_with_costs", "best_gamma", "ms_per_token_by_part",
            "target_step_ms", "iteration_ms", "ort_runs", "ort_runs_per_iteration", "host_ms_per_token",
            "head_ms_per_token_estimated", "sampling_host_ms_per_token", "target_ms_per_call", "draft_ms_per_call",
            "baseline_ms_per_token", "top_k", "top_p", "lenience"}
BEST_KEYS = {"measured_best_gamma", "measured_speedup", "predicted_speedup", "measured_over_predicted",
             "baseline_ms_per_token", "best_ms_per_token", "baseline_sampling_host_ms_per_token",
             "best_sampling_host_ms_per_token", "baseline_ort_runs_per_iteration", "best_ort_runs_per_iteration",
             "gap"}


def png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smoke_json_and_plot(tiny_export, tmp_path):
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,2", "--temperature", "0", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "6", "--probe-repeats", "2",
                          "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png", "--markdown", tmp_path / "r.md",
                          "--no-progress"])
    assert code == 0, err
    assert "speedup" in out and "thm3.8" in out and "where the time goes" in out
    assert "ORT/iter" in out and "samp+host" in out and "ESTIMATED" in out and "sampling head alone" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["schema"] == "specdec-bench/1" and report["mode"] == "engine"
    m = report["machine"]
    for key in ("cpu_model", "cpu_cores", "provider", "onnxruntime"):
        assert m[key], key
    assert m["provider"] == "cpu"
    # the suite runs with SPECDEC_THREADS=1 (tests/conftest.py): the report says what threads 0 meant
    assert m["specdec_threads"] == "1" and "SPECDEC_THREADS=1" in (tmp_path / "r.md").read_text()
    assert report["settings"]["gammas"] == [0, 2] and report["settings"]["temperatures"] == [0.0]
    rows = {(r["temperature"], r["gamma"]): r for r in report["results"]}
    assert set(rows) == {(0.0, 0), (0.0, 2)}
    for row in rows.values():
        assert ROW_KEYS <= set(row), ROW_KEYS - set(row)
        assert set(row["ms_per_token"]) >= {"median", "min", "max"}
        assert row["new_tokens"] > 0 and row["repeats"] == 1
        assert set(row["ms_per_token_by_part"]) == {"encoder", "draft", "target", "host"}
        assert "verify_ms_per_call" not in row and "sampling_ms_per_iteration" not in row
        # every ORT run is an encoder, a draft step or a target run (no sampler runs in export format 2)
        runs = (row["target_calls"] + row["draft_calls"]) / row["target_calls"]
        assert row["ort_runs_per_iteration"] == pytest.approx(runs)
        assert row["ort_runs"] == row["encoder_runs"] + row["target_calls"] + row["draft_calls"]
        assert row["head_ms_per_token_estimated"] > 0
        assert row["sampling_host_ms_per_token"] == pytest.approx(row["host_ms_per_token"]
                                                                  + row["head_ms_per_token_estimated"])
    assert rows[(0.0, 0)]["ort_runs_per_iteration"] == 1.0 and rows[(0.0, 0)]["draft_calls"] == 0
    assert 1.0 < rows[(0.0, 2)]["ort_runs_per_iteration"] <= 3.0
    spec = rows[(0.0, 2)]
    assert 0.0 <= spec["alpha"] <= 1.0 and spec["c"] > 0 and 0 <= spec["best_gamma"] <= 8
    assert spec["predicted_speedup"] > 0 and spec["measured_over_predicted"] > 0
    assert rows[(0.0, 0)]["predicted_speedup"] == 1.0
    probe = report["cost_probe"]
    assert set(probe["verify_ratio"]) == {str(k) for k in range(1, 10)} and probe["c"] > 0
    assert "sample_ms" not in probe and "accept_sampler_ms" not in probe
    assert "0.0" in report["best"] and report["best"]["0.0"]["measured_best_gamma"] == 2
    assert BEST_KEYS <= set(report["best"]["0.0"])
    assert {"ort_runs_per_iteration", "sampling_host_ms_per_token"} <= set(report["notes"])
    assert report["greedy_agreement"] == {"0": {"agree": 1, "prompts": 1}, "2": {"agree": 1, "prompts": 1}}
    assert report["peers"] is None
    assert png(tmp_path / "r.png")
    md = (tmp_path / "r.md").read_text()
    assert "| T | filter | gamma |" in md and "ORT/iter" in md and "samp+host" in md and "draft runs" in md
    assert "sampling head alone" in md and "estimated" in md


def test_cost_probe_times_the_head(tiny_export, tmp_path):
    """The probe's head-alone timings: G = 0 for the draft and G = 0 .. max gamma for the target, at temperature 0
    and a positive temperature, plain and filtered, each a positive median; and the fused runs' own costs."""
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,2", "--temperature", "0", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "4", "--probe-repeats", "2",
                          "--json", tmp_path / "h.json", "--no-progress"])
    assert code == 0, err
    probe = json.loads((tmp_path / "h.json").read_text())["cost_probe"]
    assert probe["head_vocab"] == 48 and probe["head_note"].startswith("the speculative head alone")
    got = {(e["role"], e["guesses"], e["temperature"], e["top_k"], e["top_p"]): e["ms"] for e in probe["head_ms"]}
    want = {("draft", 0)} | {("target", g) for g in range(3)}
    for temperature in (0.0, 1.0):            # 0 and the probe temperature (1 when the sweep has none > 0)
        for top_k, top_p in ((0, 1.0), (50, 0.9)):
            for role, g in want:
                assert got[(role, g, temperature, top_k, top_p)] > 0, (role, g, temperature, top_k, top_p)
    assert len(got) == len(want) * 4
    assert probe["target_step_head_ms"] > 0 and probe["draft_step_head_ms"] > 0
    assert probe["target_step_ms"] > 0 and probe["draft_step_ms"] > 0
    assert probe["settings"] == {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "lenience": 1.0}


def test_graph_capture_times_the_capturable_graphs(tiny_capture_export, tiny_export, tmp_path):
    """sweep --graph-capture loads the export's capturable graphs (uncaptured on the CPU): the sweep runs, says so
    (title and settings), and its greedy rows give gamma 0's tokens; drafts takes the flag too. On an export without
    those graphs either command refuses in one line."""
    code, out, err = run(["sweep", "--export", tiny_capture_export, "--graph-capture", "--provider", "cpu", "--gamma",
                          "0,2", "--temperature", "0", "--repeat", "1", "--num-prompts", "1", "--max-new-tokens", "6",
                          "--probe-repeats", "1", "--json", tmp_path / "g.json", "--no-progress"])
    assert code == 0, err
    assert out.startswith(f"specdec-bench: {tiny_capture_export} (graph capture)\n"), out
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["settings"]["graph_capture"] is True
    assert report["greedy_agreement"] == {"0": {"agree": 1, "prompts": 1}, "2": {"agree": 1, "prompts": 1}}
    assert {(r["gamma"], r["new_tokens"] > 0) for r in report["results"]} == {(0, True), (2, True)}
    for command in ("sweep", "drafts"):
        code, out, err = run([command, "--export", tiny_export, "--graph-capture", "--provider", "cpu",
                              *(["--draft", "draft"] if command == "drafts" else []), "--no-progress"])
        assert code == 2 and err.strip().count("\n") == 0, (command, err)
        assert err.startswith(f"error: export '{tiny_export}' has no capturable graphs"), (command, err)


def test_filters_and_lenience_apply_to_every_configuration(tiny_export, tmp_path):
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,1", "--temperature", "0,1", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "4", "--probe-repeats", "1",
                          "--top-k", "5", "--top-p", "0.9", "--lenience", "0.5",
                          "--json", tmp_path / "f.json", "--markdown", tmp_path / "f.md", "--no-progress"])
    assert code == 0, err
    assert "top_k 5, top_p 0.9, lenience 0.5" in out and "not expected" in out   # lenient: not exact
    report = json.loads((tmp_path / "f.json").read_text())
    assert {k: report["settings"][k] for k in ("top_k", "top_p", "lenience")} == {"top_k": 5, "top_p": 0.9,
                                                                                  "lenience": 0.5}
    assert all((r["top_k"], r["top_p"], r["lenience"]) == (5, 0.9, 0.5) for r in report["results"])
    probe = report["cost_probe"]
    assert probe["settings"]["top_k"] == 5 and probe["settings"]["lenience"] == 0.5
    filters = {(e["top_k"], e["top_p"]) for e in probe["head_ms"]}
    assert filters == {(0, 1.0), (5, 0.9), (50, 0.9)}          # plain, the sweep's, the reference filter
    assert all(r["sampling_host_ms_per_token"] is not None for r in report["results"])
    assert "top_k 5, top_p 0.9, lenience 0.5" in (tmp_path / "f.md").read_text()


def test_filters_compared_in_one_run(tiny_export, tmp_path):
    """--filters none,3:0.9: every (T, filter, gamma) in one interleaved sweep, speedups against gamma = 0 of the
    same filter, the filter-cost table and JSON block, `best` per (filter, T), greedy exactness per filter."""
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,2", "--temperature", "0,1", "--repeat", "2",
                          "--num-prompts", "1", "--max-new-tokens", "4", "--probe-repeats", "1",
                          "--filters", "none,3:0.9", "--json", tmp_path / "m.json", "--markdown", tmp_path / "m.md",
                          "--plot", tmp_path / "m.png", "--no-progress"])
    assert code == 0, err
    assert "filters (top_k:top_p) none, 3:0.9, interleaved" in out
    assert "filters (ms/tok per generated token" in out and "x none" in out
    assert "T=1, filter 3:0.9: best measured gamma" in out
    assert "greedy exactness: every gamma gives the gamma=0 tokens on every prompt with every filter" in out
    report = json.loads((tmp_path / "m.json").read_text())
    s = report["settings"]
    assert s["filters"] == [{"top_k": 0, "top_p": 1.0}, {"top_k": 3, "top_p": 0.9}]
    assert s["top_k"] is None and s["top_p"] is None and s["lenience"] == 1.0
    rows = {(r["temperature"], r["top_k"], r["top_p"], r["gamma"]): r for r in report["results"]}
    assert set(rows) == {(t, k, p, g) for t in (0.0, 1.0) for k, p in ((0, 1.0), (3, 0.9)) for g in (0, 2)}
    for (t, k, p, g), row in rows.items():
        assert ROW_KEYS <= set(row) and row["repeats"] == 2 and row["new_tokens"] > 0
        baseline = rows[(t, k, p, 0)]                       # gamma = 0 of the same temperature and filter
        assert row["baseline_ms_per_token"] == pytest.approx(baseline["ms_per_token"]["median"])
        assert row["head_ms_per_token_estimated"] > 0       # the probe timed the head with this filter too
    assert all(rows[(t, k, p, 0)]["speedup"]["median"] == pytest.approx(1.0) for t, k, p, _ in rows)
    cost = report["filter_cost"]
    assert [(e["temperature"], e["top_k"], e["top_p"], e["gamma"]) for e in cost] == \
        [(t, 3, 0.9, g) for t in (0.0, 1.0) for g in (0, 2)]
    for e in cost:
        filtered, plain = rows[(e["temperature"], 3, 0.9, e["gamma"])], rows[(e["temperature"], 0, 1.0, e["gamma"])]
        assert e["ms_per_token"] == pytest.approx(filtered["ms_per_token"]["median"])
        assert e["plain_ms_per_token"] == pytest.approx(plain["ms_per_token"]["median"])
        ratio = e["ratio_to_plain"]
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
    assert set(report["best"]) == {"0.0", "0.0@3:0.9", "1.0", "1.0@3:0.9"}
    for key, b in report["best"].items():
        assert BEST_KEYS <= set(b) and b["measured_best_gamma"] == 2
        assert key == str(b["temperature"]) + ("@3:0.9" if b["top_k"] == 3 else "")
        assert (b["top_k"], b["top_p"]) in ((0, 1.0), (3, 0.9))
    assert report["greedy_agreement"] == {key: {"agree": 1, "prompts": 1} for key in ("0", "2", "0@3:0.9", "2@3:0.9")}
    assert "measured_ge_0.9_prediction_at_T0" in report["acceptance"]
    assert {(e["top_k"], e["top_p"]) for e in report["cost_probe"]["head_ms"]} == {(0, 1.0), (3, 0.9), (50, 0.9)}
    md = (tmp_path / "m.md").read_text()
    assert "filters (ms/tok per generated token" in md and "| 1 | 3:0.9 | 2 |" in md and "| 1 | none | 2 |" in md
    assert png(tmp_path / "m.png")


def test_filter_arguments(tiny_export):
    """--filters syntax and its one-line errors; --shapes takes a single filter."""
    for argv, needle in ((["--filters", "none,fifty"], "TOP_K:TOP_P"),
                         (["--filters", "3:1.5"], "top_p in --filters '3:1.5'"),
                         (["--filters=-1:0.9"], "top_k in --filters '-1:0.9'"),
                         (["--filters", "3:0.9", "--top-k", "5"], "--top-k"),
                         (["--filters", ","], "--filters is empty")):
        code, out, err = run(["sweep", "--export", tiny_export, "--no-progress"] + argv)
        assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)
    code, out, err = run(["shapes", "t5-large:t5-small", "--filters", "none", "--filters", "3:0.9"])
    assert code == 2 and err.strip().count("\n") == 0 and "shapes measures one filter" in err, err


def test_peers_agree_with_specdec(tiny_export, tmp_path):
    pytest.importorskip("transformers")
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,3", "--temperature", "0", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "5", "--probe-repeats", "1", "--peers", "--markdown", tmp_path / "p.md",
                          "--work-dir", tmp_path / "work", "--json", tmp_path / "p.json", "--no-progress"])
    assert code == 0, err
    assert "transformers assisted gamma=3" in out
    engines = json.loads((tmp_path / "p.json").read_text())["peers"]["engines"]
    for name in ("specdec gamma=3", "specdec gamma=0", "transformers greedy", "transformers assisted gamma=3"):
        assert engines[name]["status"] == "ok", (name, engines[name])
        assert engines[name]["agreement"]["agree"] == 1, name     # same weights, greedy: the same tokens
        assert engines[name]["ratio_to_specdec_speculative"] > 0
    assert engines["transformers assisted gamma=3"]["ratio_to_own_autoregressive"] > 0
    assert "transformers greedy" in (tmp_path / "p.md").read_text()
    optimum = engines["optimum-ort"]                                     # no --peer-python: how to enable it
    assert optimum["status"].startswith("not run") and "--peer-python" in optimum["status"]
    assert "\n" not in optimum["status"] and "optimum-ort" in out
    for name in ("ctranslate2 greedy", "ctranslate2 int8 greedy"):      # compute_type float32 and int8
        ct2 = engines[name]
        assert ct2["status"] == "ok" or ct2["status"].startswith(("not installed", "error")), (name, ct2)
        if ct2["status"] == "ok":
            assert ct2["ms_per_token"]["median"] > 0 and ct2["agreement"]["prompts"] == 1


def test_ctranslate2_missing_is_reported(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "ctranslate2", None)      # import ctranslate2 -> ImportError
    engines, why = peer_engines.ct2_engines(str(tmp_path), tmp_path, 1, None, 1, print)
    assert engines == {} and set(why) == {"float32", "int8"}
    assert all(w.startswith("not installed") for w in why.values())


def test_normalize_strips_start_token_and_padding():
    assert peer_engines.normalize([0, 5, 6, 1, 0, 0], eos_id=1, drop_first=True) == [5, 6, 1]
    assert peer_engines.normalize([5, 6, 7], eos_id=1) == [5, 6, 7]


def test_peers_beside_the_draft_table(tiny_export, tmp_path):
    """--draft with --peers: the peers after the draft table, in the same run, against specdec's default."""
    pytest.importorskip("transformers")
    code, out, err = run(["drafts", "--export", tiny_export, "--draft", "none", "auto", "--temperature", "0",
                          "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "5", "--probe-repeats", "1", "--peers",
                          "--peer-gamma", "2", "--markdown", tmp_path / "p.md", "--work-dir", tmp_path / "work",
                          "--json", tmp_path / "p.json", "--no-progress"])
    assert code == 0, err
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["mode"] == "drafts" and report["draft_results"]
    engines = report["peers"]["engines"]
    for name in ("specdec default", "specdec gamma=0", "transformers greedy", "transformers assisted gamma=2"):
        assert engines[name]["status"] == "ok", (name, engines[name])
        assert engines[name]["agreement"]["agree"] == 1, name
    assert engines["specdec default"]["note"] == "ONNX Runtime, draft=auto gamma=auto"
    md = (tmp_path / "p.md").read_text()
    assert "latency ÷ specdec default" in md and "transformers assisted gamma=2" in md


def _without_in_process_peers(monkeypatch):
    """transformers and CTranslate2 reported as not installed, so a --peers run times specdec alone (fast)."""
    import sys

    def no_hf(path):
        raise ImportError("transformers left out by the test")

    monkeypatch.setattr(peers, "load_hf", no_hf)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)


def test_peer_python_missing_is_a_one_line_note(tiny_export, tmp_path, monkeypatch):
    _without_in_process_peers(monkeypatch)
    missing = tmp_path / "no-venv" / "bin" / "python"
    code, out, err = run(["sweep", "--export", tiny_export, "--gamma", "0,2", "--temperature", "0", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "4", "--probe-repeats", "1", "--peers",
                          "--peer-python", missing, "--work-dir", tmp_path / "work", "--json", tmp_path / "p.json",
                          "--no-progress"])
    assert code == 0, err
    engines = json.loads((tmp_path / "p.json").read_text())["peers"]["engines"]
    assert engines["specdec gamma=2"]["status"] == "ok"
    note = engines["optimum-ort"]["status"]
    assert note.startswith("not run") and str(missing) in note and "python3 -m venv" in note and "\n" not in note
    assert "optimum-ort greedy" not in engines
    row = next(line for line in out.splitlines() if line.strip().startswith("optimum-ort"))
    assert "not run" in row


def test_peer_python_needs_peers(tiny_export):
    for argv, needle in ((["sweep", "--peer-python", "python3"], "add --peers"),
                         (["sweep", "--peers", "--peer-timeout", "0", "--peer-python", "python3"], "--peer-timeout"),
                         (["drafts", "--draft", "none", "draft", "--peer-python", "python3"], "--peer-python")):
        code, out, err = run(argv[:1] + ["--export", tiny_export, "--no-progress"] + argv[1:])
        assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)


def _response(**engines):
    return {"protocol": 1, "error": None, "missing": None,
            "versions": {"optimum-onnx": "0.1.0", "onnxruntime": "1.32.0"}, "export": {}, "engines": engines}


def test_optimum_response_parsing():
    ok = {"status": "ok", "tokens": [[0, 5, 6, 1, 0], [0, 7, 8]], "seconds": [[0.5, 0.25], [0.4, 0.2], [0.3, 0.1]]}
    assisted = {"status": "error: ValueError: no assistant\nsecond line"}
    text = "a library's stray print\n" + json.dumps(_response(greedy=ok, assisted=assisted)) + "\n"
    response = optimum_client.parse_optimum_response(text, prompts=2, repeats=3)
    results, status, info = optimum_client.optimum_results(response, eos_id=1, gamma=3)
    greedy = results["optimum-ort greedy"]
    assert greedy["tokens"] == [[5, 6, 1], [7, 8]]         # the decoder start token and padding dropped
    assert greedy["seconds"] == ok["seconds"] and greedy["own_ar"] == "optimum-ort greedy"
    assert "optimum-onnx 0.1.0" in greedy["note"]
    assert status == {"optimum-ort assisted gamma=3": "error: ValueError: no assistant second line"}
    assert info["versions"]["onnxruntime"] == "1.32.0"

    missing = dict(_response(), error="ModuleNotFoundError: No module named 'optimum'", missing="optimum")
    results, status, _ = optimum_client.optimum_results(
        optimum_client.parse_optimum_response(json.dumps(missing), 2, 3), 1, 3)
    assert results == {} and status["optimum-ort"].startswith("not installed") and "optimum-onnx" in status[
        "optimum-ort"]
    failed = dict(_response(), error="export/load failed: KeyError: 'x'\nmore")
    results, status, _ = optimum_client.optimum_results(
        optimum_client.parse_optimum_response(json.dumps(failed), 2, 3), 1, 3)
    assert results == {} and status["optimum-ort"] == "error: export/load failed: KeyError: 'x' more"

    for text, needle in (("", "no JSON"), ("Traceback (most recent call last):\n  boom", "no JSON"),
                         (json.dumps(dict(_response(), protocol=2)), "protocol 2"),
                         (json.dumps(_response(greedy={"status": "ok", "tokens": [[0, 1]], "seconds": [[1, 1]] * 3})),
                          "2 token lists"),
                         (json.dumps(_response(greedy=dict(ok, seconds=[[0.5, 0.25]]))), "3 x 2 seconds"),
                         (json.dumps(_response(greedy=dict(ok, seconds=[[0.5, -1.0]] * 3))), "3 x 2 seconds"),
                         (json.dumps(_response(greedy={"tokens": []})), "no status")):
        with pytest.raises(ValueError, match=needle):
            optimum_client.parse_optimum_response(text, prompts=2, repeats=3)


FAKE_WORKER = """
import json, sys, time
request = json.loads(sys.stdin.read())
mode = {mode!r}
print("optimum-ort: fake export", file=sys.stderr, flush=True)
print("noise on stderr", file=sys.stderr, flush=True)
if mode == "sleep":
    time.sleep(30)
if mode == "crash":
    raise SystemExit("fake worker crashed")
print("noise on stdout")
tokens = [[0] + ids[:request["max_new_tokens"]] for ids in request["prompts"]]
seconds = [[0.01] * len(tokens) for _ in range(request["repeats"])]
print(json.dumps({{"protocol": 1, "error": None, "missing": None, "versions": {{"optimum-onnx": "fake"}},
                  "export": {{"target": {{"dir": request["cache"]["target"]}}}},
                  "engines": {{"greedy": {{"status": "ok", "tokens": tokens, "seconds": seconds}},
                              "assisted": {{"status": "error: fake: no assistant"}}}}}}))
"""


def test_optimum_worker_subprocess(tmp_path, monkeypatch):
    """The subprocess plumbing with a stand-in worker run by this interpreter: request in, progress lines passed
    on, the response parsed; a crash and a timeout are one line each."""
    import sys

    target, draft = tmp_path / "target", tmp_path / "draft"
    for d in (target, draft):
        d.mkdir()
        (d / "config.json").write_text("{}")
    logged = []

    def call(mode, timeout=60.0):
        worker = tmp_path / f"fake_{mode}.py"
        worker.write_text(FAKE_WORKER.format(mode=mode))
        monkeypatch.setattr(optimum_client, "OPTIMUM_WORKER", worker)
        return optimum_client.optimum_peers(sys.executable, str(target), str(draft), [[5, 6, 1], [7, 1]], 2, 3, 2, 1,
                                   tmp_path / "work", 1, timeout, logged.append)

    results, status, info = call("ok")
    assert results["optimum-ort greedy"]["tokens"] == [[5, 6], [7, 1]]
    assert results["optimum-ort greedy"]["seconds"] == [[0.01, 0.01], [0.01, 0.01]]
    assert status == {"optimum-ort assisted gamma=3": "error: fake: no assistant"}
    assert info["export"]["target"]["dir"].startswith(str((tmp_path / "work" / "optimum").resolve()))
    assert "optimum-ort: fake export" in logged and not any("noise" in m for m in logged)
    assert "noise on stderr" in (tmp_path / "work" / "optimum" / "worker-stderr.txt").read_text()

    results, status, _ = call("crash")
    why = status["optimum-ort"]
    assert results == {} and why.startswith("error:") and "exit status 1" in why and "fake worker crashed" in why
    assert "\n" not in why

    results, status, _ = call("sleep", timeout=1.0)
    assert results == {} and "timed out after 1 s" in status["optimum-ort"] and "--peer-timeout" in status[
        "optimum-ort"]


def test_optimum_worker_without_optimum(tmp_path):
    """The real worker, run by an interpreter without optimum-onnx (this one, normally): 'not installed', one line."""
    import importlib.util
    import sys

    if importlib.util.find_spec("optimum") is not None:
        pytest.skip("optimum is installed in this interpreter")
    results, status, _ = optimum_client.optimum_peers(sys.executable, str(tmp_path), str(tmp_path), [[5, 1]], 2, 3, 1, 1,
                                             tmp_path / "work", 1, 120.0, lambda m: None)
    assert results == {} and status["optimum-ort"].startswith("not installed in the --peer-python venv: optimum")


def test_bad_arguments_are_one_line_errors(tiny_export, capsys):
    code, out, err = run(["shapes", "t5-huge:t5-small"])
    assert code == 2 and err.strip().count("\n") == 0 and "t5-large:t5-small" in err
    for argv, needle in ((["sweep", "--export", tiny_export, "--gamma", "a,b"], "argument --gamma"),
                         (["sweep", "--gamma", "0,2"], "--export"),              # no export
                         (["--gamma", "0,2"], "takes a command first")):        # neither --engine nor --shapes
        code, out, err = run(argv)
        assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)
        assert err.startswith("error: ") and "Traceback" not in err
    for option, value in (("--top-p", "0"), ("--top-k", "-1"), ("--lenience", "1.5")):
        code, out, err = run(["sweep", "--export", tiny_export, option, value, "--no-progress"])
        assert code == 2 and err.strip().count("\n") == 0 and option in err, (option, err)


def test_prompt_files(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"task": "a", "source": "w5 w6"}\n{"task": "a", "source": "w7"}\n'
                     '{"task": "b", "source": "w8 w9"}\n{"input_ids": [5, 6, 1]}\n')
    ps = prompts.read_prompts(jsonl)
    assert [p.text for p in ps[:3]] == ["w5 w6", "w7", "w8 w9"] and ps[3].input_ids == [5, 6, 1]
    picked = prompts.select(ps, 2)                               # one from each task first
    assert [p.task for p in picked] == ["a", "b"]
    text = tmp_path / "p.txt"
    text.write_text("w5 w6\n\nw7 w8\n")
    assert [p.text for p in prompts.read_prompts(text)] == ["w5 w6", "w7 w8"]
    rnd = prompts.random_prompts(48, 3, length=5, seed=1)
    assert len(rnd) == 3 and all(len(p.input_ids) == 5 and p.input_ids[-1] == 1 for p in rnd)
    assert all(3 <= t < 48 for p in rnd for t in p.input_ids[:-1])


def test_official_configs_are_written_down():
    small, large = shapes.t5_config("t5-small"), shapes.t5_config("t5-large")
    assert (small.d_model, small.d_ff, small.d_kv, small.num_heads, small.num_layers) == (512, 2048, 64, 8, 6)
    assert (large.d_model, large.d_ff, large.d_kv, large.num_heads, large.num_layers) == (1024, 4096, 64, 16, 24)
    base = shapes.t5_config("t5-base")
    assert (base.d_model, base.d_ff, base.num_heads, base.num_layers) == (768, 3072, 12, 12)
    for cfg in (small, base, large):
        assert cfg.vocab_size == 32128 and cfg.feed_forward_proj == "relu" and not cfg.is_gated_act
        assert cfg.relative_attention_num_buckets == 32 and cfg.relative_attention_max_distance == 128
        assert cfg.num_decoder_layers == cfg.num_layers and cfg.tie_word_embeddings


def test_shapes_mode_on_tiny_configs(monkeypatch, tmp_path):
    """The real-shape pipeline (build, export once, cache, measure) with tiny stand-in configurations."""
    monkeypatch.setitem(shapes.CONFIGS, "tiny-t", dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2))
    monkeypatch.setitem(shapes.CONFIGS, "tiny-d", dict(d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=1))
    monkeypatch.setitem(shapes.COMMON, "vocab_size", 64)
    argv = ["shapes", "tiny-t:tiny-d", "--work-dir", tmp_path / "work", "--gamma-max", "4", "--max-length", "32",
            "--max-new-tokens", "4", "--num-prompts", "1", "--source-length", "6", "--past", "8",
            "--probe-repeats", "2", "--repeat", "1", "--json", tmp_path / "s.json", "--plot", tmp_path / "s.png",
            "--markdown", tmp_path / "s.md",
            "--no-progress"]
    code, out, err = run(argv)
    assert code == 0, err
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["mode"] == "shapes" and report["shapes"]["target"] == "tiny-t"
    assert set(report["generation"]) == {"0", "4"}
    assert set(report["predictions"]) == {"0.6", "0.7", "0.8"}
    assert set(report["predictions"]["0.8"]) == {"1", "2", "3", "4"}
    for g, r in report["generation"].items():
        assert r["ort_runs_per_iteration"] >= 1.0 and r["sampling_host_ms_per_token"] > 0, g
        assert "sampling_ms_per_iteration" not in r and r["target_ms_per_iteration"] > 0
    assert report["generation"]["0"]["ort_runs_per_iteration"] == 1.0
    heads = {e["guesses"] for e in report["cost_probe"]["head_ms"] if e["role"] == "target"}
    assert heads == set(range(5))                               # every G the predictions use
    acc = report["acceptance"]
    assert acc["verify_5_over_step"] > 0 and isinstance(acc["verify_5_ok"], bool) and isinstance(acc["host_ok"], bool)
    assert png(tmp_path / "s.png")
    assert "Acceptance: verify of 5 tokens" in (tmp_path / "s.md").read_text()
    assert not (tmp_path / "work" / "shapes" / "tiny-t_tiny-d-g4-l32" / "checkpoints").exists()
    code, out, err = run(argv)                                    # the second run reuses the cached export
    assert code == 0 and "using the cached export" in err


def test_the_peer_block_starts_auto_from_fresh_estimates(tiny_export, tmp_path, monkeypatch):
    """The peers are greedy: specdec's default in their block learns its estimates on the block's own first pass, not
    on what a sampling table before it left (after a T = 1 table the default had kept T = 1's choices)."""
    from specdec.runtime import SpeculativeDecoder

    _without_in_process_peers(monkeypatch)
    dec = SpeculativeDecoder.load(tiny_export, provider="cpu")
    few = prompts.tokenize(prompts.random_prompts(dec.vocabulary.tokenizer_size, 2), dec.tokenizer, dec.max_length)
    for p in few:
        dec.generate(input_ids=p.ids, max_new_tokens=6, temperature=1.0, seed=0)     # the default, sampling
    learned = dec.estimates
    assert learned.round > 0
    report = peers.run_peers(dec, few, 6, 2, 1, tmp_path / "work", default=True)
    assert report["engines"]["specdec default"]["status"] == "ok"
    assert dec.estimates is not learned and 0 < dec.estimates.round

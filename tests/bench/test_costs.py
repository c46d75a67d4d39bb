"""The cost model's arithmetic (no timing asserted), and that the benchmark only uses the runtime's public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specdec.bench
from specdec.bench.common import costs
from specdec.bench.common import runs
from specdec.bench.sweep import measure as sweep, summary as sweep_summary


def _probe(entries):
    return {"head_ms": [{"role": r, "guesses": g, "temperature": t, "top_k": k, "top_p": p, "ms": ms}
                        for r, g, t, k, p, ms in entries]}


def test_head_lookup_matches_the_setting_and_falls_back_for_the_draft():
    probe = _probe([("target", 0, 0.0, 0, 1.0, 0.5), ("target", 2, 0.0, 0, 1.0, 0.9),
                    ("target", 0, 1.0, 50, 0.9, 2.0)])
    assert costs.head_lookup(probe, "target", 2, 0.0) == 0.9
    assert costs.head_lookup(probe, "target", 0, 1.0, 50, 0.9) == 2.0
    assert costs.head_lookup(probe, "draft", 0, 0.0) == 0.5          # no draft entry: the target's G = 0
    assert costs.head_lookup(probe, "target", 1, 0.0) is None         # not timed
    assert costs.head_lookup(probe, "target", 0, 0.0, 50, 0.9) is None
    assert costs.head_lookup({"head_ms": []}, "target", 0, 0.0) is None and costs.head_lookup(None, "draft", 0, 0) is None


def test_head_filters_plain_sweep_and_reference():
    assert costs.head_filters() == [(0, 1.0), (50, 0.9)]
    assert costs.head_filters(5, 0.8) == [(0, 1.0), (5, 0.8), (50, 0.9)]
    assert costs.head_filters(50, 0.9) == [(0, 1.0), (50, 0.9)]
    assert costs.head_filters(0, 1.0, [(0, 1.0), (3, 0.9)]) == [(0, 1.0), (3, 0.9), (50, 0.9)]


def test_filter_labels_and_keys():
    assert runs.filter_label(runs.PLAIN) == "none" and runs.filter_label((50, 0.9)) == "50:0.9"
    assert runs.filter_label((0, 0.95)) == "0:0.95" and runs.filter_label((20, 1.0)) == "20:1"
    assert runs.filter_key(0.0, (0, 1.0)) == "0.0" and runs.filter_key(1.0, (50, 0.9)) == "1.0@50:0.9"
    assert runs.filter_key(2, (3, 0.9)) == "2@3:0.9"


def test_sweep_order_rotates_gamma_within_each_temperature_and_filter():
    filters = [(0, 1.0), (3, 0.9)]
    assert sweep.timed_order([0.0, 1.0], filters, [0, 2], 0) == [
        (0.0, (0, 1.0), 0), (0.0, (0, 1.0), 2), (0.0, (3, 0.9), 0), (0.0, (3, 0.9), 2),
        (1.0, (0, 1.0), 0), (1.0, (0, 1.0), 2), (1.0, (3, 0.9), 0), (1.0, (3, 0.9), 2)]
    assert sweep.timed_order([1.0], filters, [0, 2, 4], 1) == [
        (1.0, (0, 1.0), 2), (1.0, (0, 1.0), 4), (1.0, (0, 1.0), 0),
        (1.0, (3, 0.9), 2), (1.0, (3, 0.9), 4), (1.0, (3, 0.9), 0)]


def _cell(*ms_per_token):
    """A Cell whose repeats took these ms per token (10 tokens each)."""
    cell = runs.Cell()
    for ms in ms_per_token:
        cell.per_repeat.append({**{k: 0 for k in runs.SUMMED}, "total_s": ms * 10 / 1000.0, "new_tokens": 10})
    return cell


def test_filter_cost_is_the_median_of_per_repeat_ratios_to_plain():
    plain, top = (0, 1.0), (50, 0.9)
    cells = {(1.0, plain, 0): _cell(1.0, 2.0, 1.0), (1.0, top, 0): _cell(1.1, 2.4, 1.3),
             (1.0, plain, 2): _cell(2.0, 2.0, 2.0), (1.0, top, 2): _cell(2.0, 3.0, 2.2)}
    cost = sweep_summary.filter_cost(cells)
    assert [(e["temperature"], e["top_k"], e["top_p"], e["gamma"]) for e in cost] == [(1.0, 50, 0.9, 0),
                                                                                    (1.0, 50, 0.9, 2)]
    first = cost[0]
    # per repeat 1.1, 1.2, 1.3: median 1.2, while the ratio of the medians would be 1.3 / 1.0
    assert first["ratio_to_plain"]["median"] == pytest.approx(1.2)
    assert (first["ratio_to_plain"]["min"], first["ratio_to_plain"]["max"]) == pytest.approx((1.1, 1.3))
    assert first["ms_per_token"] == pytest.approx(1.3) and first["plain_ms_per_token"] == pytest.approx(1.0)
    assert cost[1]["ratio_to_plain"]["median"] == pytest.approx(1.1)
    assert sweep_summary.filter_cost({(1.0, top, 0): _cell(1.0)}) == []          # no plain filter: nothing to compare


def test_head_cost_per_token_weights_draft_and_target_runs():
    probe = _probe([("draft", 0, 0.0, 0, 1.0, 0.1), ("target", 0, 0.0, 0, 1.0, 0.2),
                    ("target", 1, 0.0, 0, 1.0, 0.3), ("target", 2, 0.0, 0, 1.0, 0.4)])
    pooled = {"new_tokens": 10, "draft_calls": 8, "target_calls": 5}
    # 8 draft heads at 0.1; target runs: 4 verified 2 guesses (0.4), 1 was a plain step (0.2)
    mix = {2: 4, 0: 1}
    expected = (8 * 0.1 + 5 * (0.8 * 0.4 + 0.2 * 0.2)) / 10
    assert sweep_summary.head_ms_per_token(probe, pooled, 2, 0.0, runs_by_guesses=mix) == pytest.approx(expected)
    # no mix known: every target run verifies gamma guesses
    assert sweep_summary.head_ms_per_token(probe, pooled, 2, 0.0) == pytest.approx((0.8 + 5 * 0.4) / 10)
    base = {"new_tokens": 4, "draft_calls": 0, "target_calls": 4}
    assert sweep_summary.head_ms_per_token(probe, base, 0, 0.0) == pytest.approx(0.2)
    assert sweep_summary.head_ms_per_token(probe, pooled, 2, 1.0) is None     # temperature not timed
    assert sweep_summary.head_ms_per_token(None, pooled, 2, 0.0) is None


def test_ort_runs_per_iteration_leaves_the_encoders_out():
    # 3 requests at gamma 4: 6 encoder runs, 10 target runs, 36 draft steps
    pooled = {"requests": 3, "ort_runs": 6 + 10 + 36, "target_calls": 10}
    assert sweep_summary.encoder_runs(pooled, 4) == 6
    assert sweep_summary.ort_runs_per_iteration(pooled, 4) == pytest.approx(4.6)
    base = {"requests": 3, "ort_runs": 3 + 30, "target_calls": 30}     # gamma 0: the draft is never started
    assert sweep_summary.ort_runs_per_iteration(base, 0) == 1.0


def test_acceptance_counts_target_runs_by_guesses():
    acc = runs.Acceptance()
    for proposed, accepted in ((3, 3), (3, 1), (0, 0), (2, 0)):
        acc.add(proposed, accepted)
    assert acc.runs_by_guesses == {3: 2, 0: 1, 2: 1}
    assert acc.iterations == 3 and acc.alpha == pytest.approx(4 / 6)


# what the benchmark may touch on a SpeculativeDecoder: its documented public attributes and methods
PUBLIC = {"target", "draft", "workspace", "tokenizer", "manifest", "provider", "gamma_max", "max_length",
          "vocab_size", "vocabulary", "generate", "stream", "decode", "scheduler", "estimates", "reset_estimates",
          "learned", "learning", "beam_estimates", "models", "datastore", "start_id", "eos_id",
          "stream_idle_s", "generate_batch"}
RETIRED = {"samplers", "verify_s", "sampling_s", "sample_ms", "accept_sampler_ms", "draw_uniforms"}


def test_benchmark_uses_only_the_public_api():
    root = Path(specdec.bench.__file__).parent
    problems = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = node.attr
                if name.startswith("_") and not name.startswith("__"):
                    problems.append(f"{path.relative_to(root)}:{node.lineno}: private attribute .{name}")
                if name in RETIRED:
                    problems.append(f"{path.relative_to(root)}:{node.lineno}: retired .{name}")
                if isinstance(node.value, ast.Name) and node.value.id in ("dec", "decoder") and name not in PUBLIC:
                    problems.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{name} is not public")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec.runtime.decoding"):
                problems.append(f"{path.relative_to(root)}:{node.lineno}: imports {node.module} (the decoding path "
                                "is the runtime's own: use specdec.runtime)")
            if isinstance(node, ast.Constant) and node.value in RETIRED:
                problems.append(f"{path.relative_to(root)}:{node.lineno}: retired key {node.value!r}")
    assert not problems, "\n".join(problems)


def test_interleaved_runs_every_job_each_repeat_in_rotated_order_and_drops_the_warmup():
    calls = []
    jobs = {name: (lambda name=name: calls.append(name) or float(len(calls))) for name in "abc"}
    times = costs.interleaved(jobs, warmup=2, repeats=3)
    assert calls == list("abc" "bca" "cab" "abc" "bca")
    assert {n: len(t) for n, t in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert times["a"] == [8.0, 10.0, 15.0]         # its calls in repeats 2, 3 and 4 (the 8th, 10th, 15th call)


def test_the_probe_times_the_head_alone_in_a_pass_of_its_own(tiny_export, monkeypatch):
    """The head's sessions spin their threads after each run: interleaved with the model runs they slowed the run
    after them (verify costs up to 1.3x too high and not monotone in the tokens, measured on the speech pair)."""
    from specdec.runtime import SpeculativeDecoder

    passes = []
    real = costs.interleaved
    monkeypatch.setattr(costs, "interleaved", lambda jobs, *a: passes.append({k[0] for k in jobs}) or real(jobs, *a))
    dec = SpeculativeDecoder.load(tiny_export, provider="cpu")
    out = costs.probe(dec, [5, 9, 13, 1], past=8, repeats=2, warmup=1, counts=[1, 2, 3], head_guesses=[0, 1])
    assert passes[0] == {"verify", "draft"} and all(p == {"head"} for p in passes[1:]), passes
    assert sorted(out["verify_ms"]) == ["1", "2", "3"] and out["draft_step_ms"] > 0
    assert {(h["role"], h["guesses"]) for h in out["head_ms"]} >= {("target", 0), ("target", 1), ("draft", 0)}

"""The cost model's arithmetic (no timing asserted), and that the benchmark only uses the runtime's public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specdec.bench
from specdec.bench import costs, sweep


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


def test_head_cost_per_token_weights_draft_and_target_runs():
    probe = _probe([("draft", 0, 0.0, 0, 1.0, 0.1), ("target", 0, 0.0, 0, 1.0, 0.2),
                    ("target", 1, 0.0, 0, 1.0, 0.3), ("target", 2, 0.0, 0, 1.0, 0.4)])
    pooled = {"new_tokens": 10, "draft_calls": 8, "target_calls": 5}
    # 8 draft heads at 0.1; target runs: 4 verified 2 guesses (0.4), 1 was a plain step (0.2)
    mix = {2: 4, 0: 1}
    expected = (8 * 0.1 + 5 * (0.8 * 0.4 + 0.2 * 0.2)) / 10
    assert sweep.head_ms_per_token(probe, pooled, 2, 0.0, runs_by_guesses=mix) == pytest.approx(expected)
    # no mix known: every target run verifies gamma guesses
    assert sweep.head_ms_per_token(probe, pooled, 2, 0.0) == pytest.approx((0.8 + 5 * 0.4) / 10)
    base = {"new_tokens": 4, "draft_calls": 0, "target_calls": 4}
    assert sweep.head_ms_per_token(probe, base, 0, 0.0) == pytest.approx(0.2)
    assert sweep.head_ms_per_token(probe, pooled, 2, 1.0) is None     # temperature not timed
    assert sweep.head_ms_per_token(None, pooled, 2, 0.0) is None


def test_ort_runs_per_iteration_leaves_the_encoders_out():
    # 3 requests at gamma 4: 6 encoder runs, 10 target runs, 36 draft steps
    pooled = {"requests": 3, "ort_runs": 6 + 10 + 36, "target_calls": 10}
    assert sweep.encoder_runs(pooled, 4) == 6
    assert sweep.ort_runs_per_iteration(pooled, 4) == pytest.approx(4.6)
    base = {"requests": 3, "ort_runs": 3 + 30, "target_calls": 30}     # gamma 0: the draft is never started
    assert sweep.ort_runs_per_iteration(base, 0) == 1.0


def test_acceptance_counts_target_runs_by_guesses():
    acc = sweep.Acceptance()
    for proposed, accepted in ((3, 3), (3, 1), (0, 0), (2, 0)):
        acc.add(proposed, accepted)
    assert acc.runs_by_guesses == {3: 2, 0: 1, 2: 1}
    assert acc.iterations == 3 and acc.alpha == pytest.approx(4 / 6)


# what the benchmark may touch on a SpeculativeDecoder: its documented public attributes and methods
PUBLIC = {"target", "draft", "workspace", "tokenizer", "manifest", "provider", "gamma_max", "max_length",
          "vocab_size", "generate", "stream", "decode"}
RETIRED = {"samplers", "verify_s", "sampling_s", "sample_ms", "accept_sampler_ms", "draw_uniforms"}


def test_benchmark_uses_only_the_public_api():
    root = Path(specdec.bench.__file__).parent
    problems = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = node.attr
                if name.startswith("_") and not name.startswith("__"):
                    problems.append(f"{path.name}:{node.lineno}: private attribute .{name}")
                if name in RETIRED:
                    problems.append(f"{path.name}:{node.lineno}: retired .{name}")
                if isinstance(node.value, ast.Name) and node.value.id in ("dec", "decoder") and name not in PUBLIC:
                    problems.append(f"{path.name}:{node.lineno}: {node.value.id}.{name} is not public")
            if isinstance(node, ast.Constant) and node.value in RETIRED:
                problems.append(f"{path.name}:{node.lineno}: retired key {node.value!r}")
    assert not problems, "\n".join(problems)

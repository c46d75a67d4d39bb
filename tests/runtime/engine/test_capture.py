"""The capturable graphs (specdec-export --graph-capture, export/capture.py) and the runtime path over them
(SpeculativeDecoder.load(..., graph_capture=True), runtime/engine/capture.py), on the CPU provider, which runs the
same graphs uncaptured (capture itself needs CUDA: the GPU check, benchmarks/gpu.py, confirms it there).

- graph check: no If/Loop/Scan, no shape computed at run time (no Shape/Size node, before and after onnxruntime's
  optimizations), every input fixed but for N; the eager graph fails the same check (the check can fail);
- a captured model's run at every width, after rollbacks over slots still holding rejected K/V, gives the eager
  model's logits and cache;
- greedy: every source at fixed and auto gamma gives target-only's tokens;
- distribution: the chi-square test of tests/runtime/decoding/test_distribution.py at T = 1 (draft at gamma 2, N = 10,000,
  p >= 1e-3; the lookup, N = 5,000), and its broken control (the capturable head drawing from p after a rejection)
  caught (p < 1e-6);
- fp16: an fp16 export's capturable graphs (parity-checked at fp16's tolerance by the exporter) decode exactly;
- fused attention (--capture-attention fused: MultiHeadAttention nodes): greedy equality, and the distribution tests
  and their broken control run on it too;
- bad input: one-line errors.
"""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import onnx
import pytest

from specdec.export.capture import capture_problems, export_capture_head
from specdec.runtime import SpeculativeDecoder
from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.core.params import Params
from specdec.runtime.loading.manifest import sha256_file
from tinymodels import export_pair, random_prompts, run_export_cli, shared_dir

from test_distribution import LOOKUP_PROMPT, N_LOOKUP, P_PASS, P_TEETH, PROMPT, SETTINGS, caught, chi_square_p, \
    empirical, exact_distribution, with_lookup

N_CAPTURE = 10_000      # the broken control below: p = 1.6e-11 at its first 5,000 samples (not yet < 1e-6 at 2,500)
MAX_NEW = 20


@pytest.fixture(scope="session")
def related_capture(related_pair, tmp_path_factory) -> tuple:
    """related_pair's three models exported with --graph-capture: (export_dir, eager decoder, captured decoder)."""
    target, draft, _ = related_pair
    mid = target.parent / "mid"

    def build(root):
        export_pair(target, draft, root / "export", "--draft", f"mid={mid}", "--gamma-max", "8", "--max-length",
                    "64", "--graph-capture")

    out = shared_dir(tmp_path_factory, "related_capture", build) / "export"
    return (out, SpeculativeDecoder.load(out, provider="cpu", threads=1),
            SpeculativeDecoder.load(out, provider="cpu", threads=1, graph_capture=True))


@pytest.fixture(scope="module", params=["plain", "fused"])
def small_capture(small_vocab_pair, tmp_path_factory, request) -> tuple:
    """small_vocab_pair's target and draft exported with --graph-capture (plain or fused attention), and a copy
    whose target's capturable head draws from p instead of norm(max(0, p - q)) after a rejection (the broken
    control)."""
    root = small_vocab_pair[0].parent
    out = tmp_path_factory.mktemp("small_capture")
    good = export_pair(root / "target", root / "draft", out / "export", "--gamma-max", "4", "--max-length", "16",
                       "--graph-capture", "--capture-attention", request.param)
    broken = out / "broken"
    shutil.copytree(good, broken)
    export_capture_head(broken / "target/capture_head.onnx", residual=False)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(broken / rel) for rel in manifest["files"]}
    (broken / "manifest.json").write_text(json.dumps(manifest))
    return good, broken


# -- the graphs -----------------------------------------------------------------------------------------------------
def optimized(path, tmp_path) -> onnx.ModelProto:
    """The graph as onnxruntime runs it on the CPU, after its optimizations."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    opts.log_severity_level = 4
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return onnx.load(str(tmp_path / "optimized.onnx"))


def test_the_capturable_graphs_hold_no_control_flow_and_no_shape_computation(related_capture, tmp_path):
    out = related_capture[0]
    manifest = json.loads((out / "manifest.json").read_text())
    for role, model in manifest["models"].items():
        path = out / model["graphs"]["capture_decoder"]["file"]
        assert capture_problems(onnx.load(str(path))) == [], role
        ops = {n.op_type for n in optimized(path, tmp_path).graph.node}
        assert not ops & {"If", "Loop", "Scan", "Shape", "Size", "NonZero", "Range", "Expand"}, (role, ops)
        assert "ScatterElements" in ops and "ScatterND" not in ops     # the new K/V written in place, graph-safe
        # the check can fail: the eager graph has the head's If nodes, shape arithmetic and a dynamic cache axis
        eager = capture_problems(onnx.load(str(out / model["graphs"]["decoder"]["file"]), load_external_data=False))
        assert any("is If" in p for p in eager) and any("is Shape" in p for p in eager) and \
            any("past_kv has a dynamic axis" in p for p in eager), eager


# -- a captured model against the eager one, run by run ------------------------------------------------------------
def _run(model, ws, n: int) -> np.ndarray:
    """A catch-up run of n tokens from the model's length; its logits rows."""
    model.run(*ws.catch_up(model.length, model.length + n - 1))
    return model.logits.flat()[:n * model.vocab].reshape(n, model.vocab).copy()


def _cache(model) -> np.ndarray:
    """The cache's first `length` positions as [length, layers, 2, heads, d_kv] (either layout)."""
    if hasattr(model, "capacity"):
        return model.cache.host.reshape(model.cache.shape)[:, :, 0, :, :model.length].transpose(3, 0, 1, 2, 4)
    return model.cache.host[:model.length, :, :, 0]


def test_a_captured_run_equals_the_eager_run_at_every_width_and_after_rollbacks(related_capture):
    _, eager, captured = related_capture
    rng = np.random.default_rng(3)
    for name in ("target", "draft"):
        models = [eager.target if name == "target" else eager.models[name],
                  captured.target if name == "target" else captured.models[name]]
        width = models[0].logits.shape[0]
        spaces = [eager.workspace, captured.workspace]
        for model, ws in zip(models, spaces):
            ws.reset([0], Params())
            model.encode(np.array([5, 9, 14, 22, 7, 1]), ws_stats())
        # widths in an order where each is first used after others (1 .. width), rollbacks over written slots
        plan = [(1, None), (3, None), (1, 2), (width, None), (2, 4), *[(n, None) for n in range(2, width)], (1, 1)]
        for n, back in plan:
            if back is not None:
                for model in models:
                    model.rollback(back)
            start = models[0].length
            tokens = rng.integers(3, 40, size=n)
            for ws in spaces:
                ws.tokens.write(tokens, start)
            want, got = (_run(m, ws, n) for m, ws in zip(models, spaces))
            assert np.abs(got - want).max() < 1e-4, (name, n, back)
            assert np.array_equal(got.argmax(-1), want.argmax(-1)), (name, n, back)
            assert np.abs(_cache(models[1]) - _cache(models[0])).max() < 1e-4, (name, n, back)


def ws_stats():
    from specdec.runtime.core.stats import Stats

    return Stats()


def test_one_thread_runs_every_call_on_its_own_thread_and_raises_in_the_caller():
    from specdec.runtime.engine.capture import OneThread

    one = OneThread()
    seen = [one.call(threading.get_ident) for _ in range(3)]
    seen += [None]
    other = threading.Thread(target=lambda: seen.__setitem__(3, one.call(threading.get_ident)))
    other.start()
    other.join()
    assert len(set(seen)) == 1 and seen[0] == one.ident != threading.get_ident()
    assert one.call(lambda: one.call(threading.get_ident)) == one.ident       # from its own thread: inline
    with pytest.raises(ZeroDivisionError):
        one.call(lambda: 1 / 0)
    assert one.call(lambda: 7) == 7


def test_captured_runs_through_one_device_thread_from_any_callers_thread(related_capture):
    """As on CUDA (where onnxruntime keeps captured graphs per thread): every captured run of the decoder goes
    through its models' device threads, whichever thread generates."""
    from specdec.runtime.engine.capture import OneThread

    out, eager, _ = related_capture
    dec = SpeculativeDecoder.load(out, provider="cpu", threads=1, graph_capture=True)
    models = [dec.target, *dec.models.values()]
    for model in models:
        model.device_thread = OneThread()
    ids = [7, 12, 30, 9, 1]
    want = eager.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids
    results = [dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="lookup,draft", gamma=3).token_ids]
    worker = threading.Thread(target=lambda: results.append(
        dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="draft", gamma=2).token_ids))
    worker.start()
    worker.join()
    assert results == [want, want]
    assert all(m.device_thread.ident is not None for m in (dec.target, dec.models["draft"]))


# -- greedy --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("draft", ["draft", "lookup", "lookup,draft", "draft,mid", "auto"])
def test_greedy_through_the_capturable_graphs_equals_target_only_for_every_source(related_capture, draft):
    _, eager, captured = related_capture
    proposed = accepted = 0
    outputs = set()
    for ids in random_prompts(48, 10, seed=11):
        want = eager.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids
        assert captured.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids == want, ids
        outputs.add(tuple(want))
        for gamma in (1, 3, 8, "auto"):
            res = captured.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft=draft, gamma=gamma)
            assert res.token_ids == want, (draft, gamma, ids)
            if draft != "auto" and gamma != "auto":     # auto's choices follow measured timings: not counted
                proposed += res.stats.proposed
                accepted += res.stats.accepted
    # it says something only if outputs vary and guesses were both kept and rejected (rollbacks happened), which a
    # fixed source at a fixed gamma shows the same on every run
    assert len(outputs) >= 5, len(outputs)
    if draft != "auto":
        assert 0 < accepted < proposed, (accepted, proposed)


def test_greedy_through_fused_attention_equals_target_only(related_pair, related_capture, tmp_path_factory):
    """--capture-attention fused: each attention one MultiHeadAttention node; the same tokens as target-only."""
    target, draft, _ = related_pair
    out = export_pair(target, draft, tmp_path_factory.mktemp("fused") / "export", "--gamma-max", "8",
                      "--max-length", "64", "--graph-capture", "--capture-attention", "fused")
    fused = SpeculativeDecoder.load(out, provider="cpu", threads=1, graph_capture=True)
    assert fused.manifest.graph_capture["attention"] == "fused"
    eager = related_capture[1]
    proposed = accepted = 0
    for ids in random_prompts(48, 8, seed=13):
        want = eager.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids
        for draft_name in ("none", "draft", "lookup,draft", "auto"):
            for gamma in (3, "auto"):
                res = fused.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft=draft_name, gamma=gamma)
                assert res.token_ids == want, (draft_name, gamma, ids)
                if draft_name in ("draft", "lookup,draft") and gamma != "auto":    # fixed: the same every run
                    proposed, accepted = proposed + res.stats.proposed, accepted + res.stats.accepted
    assert 0 < accepted < proposed


def test_candidates_run_as_one_chain_a_round_under_graph_capture(related_capture):
    """Token trees need the eager target graph's tree inputs: a lookup asked for several candidates verifies one."""
    _, eager, captured = related_capture
    assert not captured.target.trees and captured.workspace.tree_room() == 0
    ids = [5, 6, 7, 5, 6, 7, 5, 6, 1]
    want = eager.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids
    assert captured.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="lookup", candidates=3).token_ids == want


# -- distribution ----------------------------------------------------------------------------------------------------
def test_speculative_sampling_through_the_capturable_graphs_matches_the_target_distribution(small_vocab_pair,
                                                                                             small_capture):
    settings = SETTINGS["temperature"]
    dec = SpeculativeDecoder.load(small_capture[0], provider="cpu", threads=1, graph_capture=True)
    dist = exact_distribution(small_vocab_pair[0], **settings)
    p_value = chi_square_p(empirical(dec, settings, N_CAPTURE), dist)
    print(f"captured, draft at gamma 2: N = {N_CAPTURE}, p = {p_value:.3g}")
    assert p_value >= P_PASS, f"chi-square p = {p_value:.3g}"
    stats = [dec.generate(input_ids=PROMPT, max_new_tokens=3, gamma=2, seed=s, draft="draft", **settings).stats
             for s in range(100)]
    assert 0 < sum(s.accepted for s in stats) < sum(s.proposed for s in stats)


def test_the_capture_distribution_test_catches_a_broken_head(small_vocab_pair, small_capture):
    settings = SETTINGS["temperature"]
    wrong = SpeculativeDecoder.load(small_capture[1], provider="cpu", threads=1, graph_capture=True)
    _, p_value = caught(lambda a, b: empirical(wrong, settings, b, start=a),
                        exact_distribution(small_vocab_pair[0], **settings), N_CAPTURE,
                        label="captured, plain resampling")
    assert p_value < P_TEETH, f"the broken capturable head passed the chi-square test (p = {p_value:.3g})"


def test_the_lookup_through_the_capturable_graphs_matches_the_target_distribution(small_vocab_pair, small_capture):
    """Point-mass guesses (q = delta(x)) verified by the capturable head: N = 5,000, p >= 1e-3."""
    settings = SETTINGS["temperature"]
    lookup = with_lookup(SpeculativeDecoder.load(small_capture[0], provider="cpu", threads=1, graph_capture=True))
    p_value = chi_square_p(empirical(lookup, settings, N_LOOKUP, prompt=LOOKUP_PROMPT),
                           exact_distribution(small_vocab_pair[0], **settings, prompt=LOOKUP_PROMPT))
    assert p_value >= P_PASS, f"chi-square p = {p_value:.3g}"


# -- fp16 ------------------------------------------------------------------------------------------------------------
def test_an_fp16_export_decodes_exactly_through_its_capturable_graphs(related_pair, tmp_path_factory):
    out = export_pair(*related_pair[:2], tmp_path_factory.mktemp("fp16_capture") / "export", "--dtype", "fp16",
                      "--gamma-max", "4", "--max-length", "48", "--graph-capture")
    eager = SpeculativeDecoder.load(out, provider="cpu", threads=1)
    captured = SpeculativeDecoder.load(out, provider="cpu", threads=1, graph_capture=True)
    assert captured.manifest.dtype == "fp16" and captured.target.cache.dtype == np.float16
    checks = captured.manifest.raw["parity_check"]
    assert all(rep["passed"] and "capture_step_max_abs_diff" in rep for rep in checks.values()), checks
    proposed = accepted = 0
    for ids in random_prompts(48, 8, seed=5):
        want = eager.generate(input_ids=ids, max_new_tokens=16, draft="none").token_ids
        for draft in ("none", "draft", "lookup,draft", "auto"):
            res = captured.generate(input_ids=ids, max_new_tokens=16, draft=draft, gamma=3)
            assert res.token_ids == want, (draft, ids)
            if draft in ("draft", "lookup,draft"):       # fixed sources: the same every run (auto's follow timings)
                proposed, accepted = proposed + res.stats.proposed, accepted + res.stats.accepted
    assert 0 < accepted < proposed


# -- bad input -------------------------------------------------------------------------------------------------------
def test_graph_capture_on_an_export_without_the_graphs_is_a_one_line_error(tiny_export):
    with pytest.raises(SpecdecError) as err:
        SpeculativeDecoder.load(tiny_export, provider="cpu", graph_capture=True)
    assert "no capturable graphs" in str(err.value) and "--graph-capture" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(SpecdecError, match="graph_capture must be True or False"):
        SpeculativeDecoder.load(tiny_export, provider="cpu", graph_capture="yes")


def test_beams_and_batches_under_graph_capture_are_refused_and_the_decoder_stays_usable(related_capture):
    _, eager, captured = related_capture
    ids = [5, 6, 7, 1]
    for call in (lambda: captured.generate(input_ids=ids, max_new_tokens=4, num_beams=2),
                 lambda: captured.generate_batch(input_ids=[ids, [8, 9, 1]], max_new_tokens=4)):
        try:
            out = call()
        except SpecdecError as err:
            assert "graph_capture" in str(err) and "\n" not in str(err)
        else:     # a batch reports each row's error in the row
            assert all("graph_capture" in (row.error or "") for row in out), out
    want = eager.generate(input_ids=ids, max_new_tokens=8, draft="none").token_ids
    assert captured.generate(input_ids=ids, max_new_tokens=8, gamma=3).token_ids == want


@pytest.mark.parametrize("extra, words", [(["--dtype", "int8"], "int8"), (["--draft-dtype", "int8-wo"], "int8-wo")])
def test_graph_capture_with_int8_weights_is_refused_by_the_exporter(tiny_pair, tmp_path, extra, words):
    code, _, stderr = run_export_cli(["--target", tiny_pair[0], "--draft", tiny_pair[1], "--export",
                                      tmp_path / "x", "--graph-capture", *extra])
    assert code != 0 and words in stderr and "--graph-capture" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "x").exists()


def test_an_edited_capacity_is_refused_at_load(related_capture, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(related_capture[0], bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["graph_capture"]["cache_capacity"] = 32
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdecError, match="graph_capture cache_capacity is 32"):
        SpeculativeDecoder.load(bad, provider="cpu")

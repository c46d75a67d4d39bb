"""`specdec-bench shapes` on Whisper pairs: the official configurations and Whisper's special-token layout written
down, and the whole path (build, export once, cache, encoders, cost probe, real loop on audio requests, predictions)
end to end on tiny stand-in configurations with a 1-second window, with a draft that keeps the target's encoder
(distil-whisper's case: no draft encoder graph) and with one that has its own encoder, mel bins and vocabulary (the
large-v3 + tiny case). No wall-clock assertions."""

from __future__ import annotations

import json

import pytest

from benchrun import finite, run
from specdec.bench.shapes import whisper as whisper_shapes
from specdec.bench.sweep.summary import encoder_runs

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
              pytest.mark.filterwarnings("ignore:Constant folding")]


def png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_official_whisper_configs_are_written_down():
    large = whisper_shapes.whisper_config("whisper-large-v3", 51866)
    assert (large.d_model, large.encoder_layers, large.decoder_layers, large.encoder_attention_heads,
            large.decoder_attention_heads, large.encoder_ffn_dim, large.num_mel_bins, large.vocab_size,
            large.max_source_positions, large.max_target_positions) == (1280, 32, 32, 20, 20, 5120, 128, 51866, 1500,
                                                                        448)
    distil = whisper_shapes.whisper_config("distil-large-v3", 51866)
    assert (distil.d_model, distil.encoder_layers, distil.decoder_layers, distil.num_mel_bins) == (1280, 32, 2, 128)
    tiny = whisper_shapes.CONFIGS["whisper-tiny"]
    assert (tiny["d_model"], tiny["encoder_layers"], tiny["decoder_layers"], tiny["encoder_attention_heads"],
            tiny["encoder_ffn_dim"], tiny["num_mel_bins"], tiny["vocab_size"]) == (384, 4, 4, 6, 1536, 80, 51865)
    for cfg in (large, distil):
        assert cfg.activation_function == "gelu" and not cfg.scale_embedding and cfg.tie_word_embeddings
        assert (cfg.pad_token_id, cfg.eos_token_id, cfg.decoder_start_token_id) == (50257, 50257, 50258)
    counts = {name: whisper_shapes.parameters(name, spec["vocab_size"])
              for name, spec in whisper_shapes.CONFIGS.items()}
    assert 1.50e9 < counts["whisper-large-v3"] < 1.56e9 and 0.75e9 < counts["distil-large-v3"] < 0.76e9
    assert 37e6 < counts["whisper-tiny"] < 40e6
    assert whisper_shapes.shares_encoder("whisper-large-v3", "distil-large-v3")
    assert not whisper_shapes.shares_encoder("whisper-large-v3", "whisper-tiny")


def test_whisper_special_tokens_at_their_ids():
    v3 = whisper_shapes.layout(51866)                       # large-v3: 100 languages
    assert (v3.eos, v3.start, v3.languages["<|en|>"], v3.languages["<|yue|>"]) == (50257, 50258, 50259, 50358)
    assert v3.tasks == {"translate": 50359, "transcribe": 50360} and v3.no_timestamps == 50364
    assert v3.ids["<|0.00|>"] == 50365 and v3.ids["<|30.00|>"] == 51865
    assert len(v3.suppress) == 88 and v3.suppress[-6:] == [50258, 50359, 50360, 50361, 50362, 50363]
    assert v3.begin_suppress == [220, 50257]
    old = whisper_shapes.layout(51865)                      # tiny ... medium: 99 languages
    assert old.tasks == {"translate": 50358, "transcribe": 50359} and old.no_timestamps == 50363
    assert "<|yue|>" not in old.languages and old.ids["<|30.00|>"] == 51864
    words = whisper_shapes.vocabulary_note("whisper-large-v3", "whisper-tiny")
    assert "51,865" in words and "51,866" in words and "cannot be exported" in words and "80-mel" in words
    assert whisper_shapes.vocabulary_note("whisper-large-v3", "distil-large-v3") is None


def test_whisper_pair_names():
    assert whisper_shapes.parse_pair("openai/whisper-large-v3:distil-whisper/distil-large-v3") == \
        ("whisper", "whisper-large-v3", "distil-large-v3")
    assert whisper_shapes.parse_pair("whisper-large-v3:openai/whisper-tiny") == \
        ("whisper", "whisper-large-v3", "whisper-tiny")
    assert whisper_shapes.parse_pair("t5-large:t5-small") == ("t5", "t5-large", "t5-small")


@pytest.mark.parametrize("pair, needle", [
    ("openai/whisper-huge:openai/whisper-tiny", "TARGET:DRAFT names two of"),
    ("openai/distil-large-v3:openai/whisper-tiny", "TARGET:DRAFT names two of"),    # distil-whisper's, not openai's
    ("t5-large:openai/whisper-tiny", "'t5-large' is a T5 model but 'openai/whisper-tiny' is a Whisper model"),
    ("openai/whisper-tiny:t5-small", "is a Whisper model but 't5-small' is a T5 model"),
    ("openai/whisper-large-v3", "TARGET:DRAFT names two of"),
])
def test_bad_pairs_are_one_line_errors(pair, needle):
    code, out, err = run(["shapes", pair, "--no-progress"])
    assert code == 2 and err.strip().count("\n") == 0 and needle in err, err
    assert err.startswith("error: ") and "Traceback" not in err


def test_bad_whisper_flags_are_one_line_errors():
    for flag in ("--encoder-repeats", "--request-tokens"):
        code, out, err = run(["shapes", "openai/whisper-large-v3:openai/whisper-tiny", flag, "0", "--no-progress"])
        assert code == 2 and err.strip().count("\n") == 0 and flag in err, err


def test_a_shared_encoder_is_no_encoder_run_of_the_draft():
    pooled = {"requests": 3}
    assert encoder_runs(pooled, 4) == 6 and encoder_runs(pooled, 4, draft_encoder=False) == 3
    assert encoder_runs(pooled, 0) == 3


@pytest.fixture
def tiny_whisper_shapes(monkeypatch):
    """Stand-ins: a 43-token Whisper vocabulary (30 text tokens, 2 languages, 3 timestamps), a 1-second window, and
    a target with 128 mel bins; tiny-wdist keeps its encoder, tiny-wd has its own (80 mel bins, 42 tokens)."""
    monkeypatch.setattr(whisper_shapes, "TEXT_TOKENS", 30)
    monkeypatch.setattr(whisper_shapes, "TIMESTAMPS", 3)
    monkeypatch.setitem(whisper_shapes.COMMON, "max_source_positions", 50)
    monkeypatch.setitem(whisper_shapes.COMMON, "max_target_positions", 64)
    monkeypatch.setitem(whisper_shapes.CONFIGS, "tiny-wt", whisper_shapes._dims(32, 4, 2, mel=128, vocab=43))
    monkeypatch.setitem(whisper_shapes.CONFIGS, "tiny-wdist",
                        whisper_shapes._dims(32, 4, 2, decoder_layers=1, mel=128, vocab=43))
    monkeypatch.setitem(whisper_shapes.CONFIGS, "tiny-wd", whisper_shapes._dims(16, 2, 1, mel=80, vocab=42))
    monkeypatch.setitem(whisper_shapes.ENCODER_OF, "tiny-wdist", "tiny-wt")


def shapes_run(tmp_path, pair):
    argv = ["shapes", pair, "--work-dir", tmp_path / "work", "--gamma-max", "4", "--max-length", "32",
            "--max-new-tokens", "4", "--past", "8", "--probe-repeats", "2", "--repeat", "1", "--encoder-repeats", "2",
            "--request-tokens", "50", "--json", tmp_path / "s.json", "--markdown", tmp_path / "s.md",
            "--plot", tmp_path / "s.png", "--no-progress"]
    code, out, err = run(argv)
    assert code == 0, err
    return argv, out, err, json.loads((tmp_path / "s.json").read_text())


def check_report(report, tmp_path):
    """What every Whisper report holds: the encoder cost, c, the verify ratios, the loop, labelled predictions."""
    assert report["mode"] == "shapes" and report["family"] == "whisper"
    assert report["export_info"]["parity"] == {"skipped": whisper_shapes.SKIP_CHECK}     # said, not hidden
    enc = report["speech"]["encoder"]
    assert finite(enc["target_encoder_ms"]) and enc["target_encoder_ms"] > 0 and enc["repeats"] == 2
    assert enc["audio_seconds"] == 1.0 and enc["encoder_frames"] == 50
    probe = report["cost_probe"]
    assert probe["source_seconds"] == 1.0 and probe["c"] > 0 and finite(probe["target_step_ms"])
    assert set(probe["verify_ratio"]) == {"1", "2", "3", "4", "5"} and probe["verify_ratio"]["1"] == 1.0
    assert set(report["generation"]) == {"0", "4"}
    for g, r in report["generation"].items():
        assert r["ort_runs_per_iteration"] >= 1.0 and r["encoder_ms_per_request"] > 0 and r["new_tokens"] > 0, g
    assert report["prediction_label"] == whisper_shapes.LABEL == \
        "prediction (Theorem 3.8 with measured c; random weights)"
    assert set(report["predictions"]) == {"0.7", "0.8"} and set(report["predictions"]["0.8"]) == {"1", "2", "3", "4"}
    request = report["request"]
    assert request["label"] == whisper_shapes.LABEL and request["tokens"] == 50
    assert set(request["predictions"]) == {"0.7", "0.8"}
    assert 0 < request["encoder_share_of_baseline"] < 1
    e_target, e_draft = enc["target_encoder_ms"], enc["draft_encoder_ms"] or 0.0
    step = probe["target_step_ms"]
    for alpha, curve in request["predictions"].items():
        for g, point in curve.items():
            decoder = report["predictions"][alpha][g]["theorem_3_8"]
            want = (e_target + 50 * step) / (e_target + e_draft + 50 * step / decoder)
            assert point["theorem_3_8"] == pytest.approx(want, rel=1e-9)
            if not e_draft:    # the target's encoder costs the same with and without the draft: less gain
                assert min(decoder, 1.0) <= point["theorem_3_8"] + 1e-9 <= max(decoder, 1.0) + 1e-9
    assert report["settings"]["audio_requests"] == 2 and report["settings"]["language"] == "<|en|>"
    text = (tmp_path / "s.md").read_text()
    assert whisper_shapes.LABEL in text and "Encoders per request" in text and "Whole request of N = 50" in text
    assert png(tmp_path / "s.png")


def test_whisper_shapes_with_a_shared_encoder(tiny_whisper_shapes, tmp_path):
    argv, out, err, report = shapes_run(tmp_path, "tiny-wt:tiny-wdist")
    check_report(report, tmp_path)
    speech = report["speech"]
    assert speech["encoder"]["draft_keeps_target_encoder"] and speech["encoder"]["draft_encoder_ms"] is None
    assert speech["shares_target_encoder"] == ["draft"] and not speech["draft_encoder_graph"]
    root = tmp_path / "work" / "shapes" / "tiny-wt_tiny-wdist-g4-l32"
    manifest = json.loads((root / "export" / "manifest.json").read_text())
    assert set(manifest["models"]["draft"]["graphs"]) == {"decoder"}           # no draft encoder graph exported
    assert not (root / "export" / "draft" / "encoder.onnx").exists()
    assert report["shapes"]["vocabulary_note"] is None and "cannot be exported" not in out
    assert "Encoders per request" in out and whisper_shapes.LABEL in out
    assert not (root / "checkpoints").exists()
    code, out, err = run(argv)                                    # the second run reuses the cached export
    assert code == 0 and "using the cached export" in err, err


def test_whisper_shapes_with_its_own_encoder_and_the_targets_vocabulary(tiny_whisper_shapes, tmp_path):
    argv, out, err, report = shapes_run(tmp_path, "tiny-wt:tiny-wd")
    check_report(report, tmp_path)
    enc = report["speech"]["encoder"]
    assert not enc["draft_keeps_target_encoder"] and enc["draft_encoder_ms"] > 0
    assert report["speech"]["draft_encoder_graph"] and report["speech"]["shares_target_encoder"] == []
    engine = report["engine"]
    assert engine["target"]["num_mel_bins"] == 128 and engine["draft"]["num_mel_bins"] == 80   # each its own front end
    assert engine["target"]["vocab_size"] == engine["draft"]["vocab_size"] == 43               # the target's
    note = report["shapes"]["vocabulary_note"]
    assert "42 tokens" in note and "cannot be exported" in note and "the target's vocabulary (43 tokens)" in note
    assert f"Note: {note}" in out and note in (tmp_path / "s.md").read_text()

"""`python -m specdec.bench.speech_shapes`: a candidate speech pair shape built with random weights, exported and
probed; c is its draft step over its target step, measured in two passes, and a deeper target makes it smaller."""

from __future__ import annotations

from specdec.bench import speech_shapes

SMALL = dict(d_model=64, encoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
             decoder_ffn_dim=128)


def test_candidates_are_built_exported_and_probed(tmp_path):
    candidates = {"shallow": ({**SMALL, "decoder_layers": 2}, 2), "deep": ({**SMALL, "decoder_layers": 8}, 1)}
    rows = speech_shapes.measure(candidates, str(tmp_path), repeats=15, log=lambda *_: None)
    for name, row in rows.items():
        assert len(row["passes"]) == 2 and row["target_params_M"] > row["draft_decoder_params_M"] > 0
        for p in row["passes"]:         # the steps are rounded to 1 us: their ratio is c within 1 %
            assert abs(p["c"] - p["draft_step_ms"] / p["target_step_ms"]) <= 0.01 * max(1.0, p["c"]), p
        assert row["c"] == round(sum(p["c"] for p in row["passes"]) / 2, 3)
    # the same draft layers before a target 1 layer deep against 8: the deep target's step costs more
    assert rows["deep"]["c"] < rows["shallow"]["c"]
    text = speech_shapes.markdown(rows, 15)
    assert "| shallow |" in text and "| deep |" in text and "median of 15" in text

"""The export's own parity check: it reports the differences and fails the command when a graph is wrong."""

import json

from specdec.export import decoder as decoder_module
from tinymodels import run_export_cli


def test_export_reports_parity_numbers(tiny_export, tiny_export_log):
    stdout, _ = tiny_export_log
    for role in ("target", "draft"):
        line = next(ln for ln in stdout.splitlines() if ln.strip().startswith(f"{role} parity"))
        assert "1-token step at past 5" in line and "9-token verify" in line and line.endswith("OK")
    checks = json.loads((tiny_export / "manifest.json").read_text())["parity_check"]
    assert all(c["passed"] and c["step_max_abs_diff"] < 1e-3 and c["verify_max_abs_diff"] < 1e-3
               for c in checks.values())


def test_a_wrong_decoder_graph_fails_the_export(tiny_pair, tmp_path, monkeypatch):
    original = decoder_module.DecoderWithCache.forward

    def off_by_a_little(self, input_ids, past_kv, cross_kv):
        logits, new_kv = original(self, input_ids, past_kv, cross_kv)
        return logits + 0.01, new_kv          # 10x the fp32 tolerance

    monkeypatch.setattr(decoder_module.DecoderWithCache, "forward", off_by_a_little)
    target, draft = tiny_pair
    code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--out", tmp_path / "bad",
                                           "--gamma-max", "2", "--max-length", "32"])
    assert code == 1
    assert "FAILED" in stdout
    assert stderr.strip().splitlines()[-1].startswith("error: parity check failed for target, draft")

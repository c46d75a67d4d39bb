"""`specdec-bench batch`: every cell measured and reported, greedy rows checked against `none` at the same B, ratios
consistent with the cells' own figures, and a bad flag a one-line error."""

from __future__ import annotations

import json
import re

from benchrun import finite, prompts_file, run


def test_batch_bench_smoke(tiny_export, tmp_path):
    out = tmp_path / "batch.json"
    code, stdout, stderr = run(["batch", "--export", tiny_export, "--prompts", prompts_file(tmp_path / "p.jsonl", 3),
                                "--batch", "1,4", "--draft", "none", "auto", "lookup:2", "--temperature", "0,1",
                                "--num-prompts", "6", "--repeat", "1", "--max-new-tokens", "8", "--json", out])
    assert code == 0, stderr
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert {(r["temperature"], r["batch"], r["draft"]) for r in rows} == \
        {(t, b, d) for t in (0.0, 1.0) for b in (1, 4) for d in ("none", "auto", "lookup:2")}
    for r in rows:
        assert finite(r["tokens_per_s"]) and r["tokens_per_s"] > 0 and finite(r["latency_ms_per_token"])
        assert 0 <= r["lookup_share"] <= 1 and 0 <= r["encoder_share"] <= 1
        assert r["rss_mib"] > 10, r             # the process's resident memory after the cell (Linux: VmRSS)
        if r["draft"] == "none":
            assert r["vs_none"] == 1.0 and r["lookup_share"] == 0
        if r["draft"] == "lookup:2":
            assert r["lookup_share"] > 0
        if r["temperature"] == 0:
            assert r["greedy_equal"] is True, r
    first = {(r["temperature"], r["draft"]): r["tokens_per_s"] for r in rows if r["batch"] == 1}
    for r in rows:
        base = first[(r["temperature"], "none")]
        assert abs(r["vs_none_first_batch"] - r["tokens_per_s"] / base) < 1e-9
    assert re.search(r"^\s*0\s+4\s+auto\s", stdout, re.M) and "greedy = none" in stdout      # the row T=0, B=4, auto


def test_batch_bench_bad_draft(tiny_export):
    code, stdout, stderr = run(["batch", "--export", tiny_export, "--draft", "draft"])
    assert code != 0
    assert "unknown draft 'draft'" in stdout + stderr

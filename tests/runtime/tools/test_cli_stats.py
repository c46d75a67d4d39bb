"""specdec-generate's stats lines name alpha and the acceptance rate apart: kept/proposed (Stats.acceptance_rate,
which falls with gamma) on the totals line, alpha (per guess) per source, and a chain's lower level as guesses kept
by the model above it."""

from __future__ import annotations

import re
import subprocess
import sys

from specdec.runtime import Stats
from specdec.runtime.tools.generate import stats_line


def _stats() -> Stats:
    s = Stats(target_calls=4, draft_calls=3, new_tokens=11, ort_runs=9, total_s=0.022, encoder_s=0.002,
              draft_s=0.005, target_s=0.01, host_s=0.005)
    for proposed, accepted in ((4, 4), (4, 1), (4, 2)):        # a round stops at its first rejection
        s.source("draft").add(proposed, accepted, accepted + 1)
        s.proposed += proposed
        s.accepted += accepted
    s.source("none").add(0, 0, 1)
    s.source("lookup>").add(5, 3)
    return s


def test_the_lines_name_each_quantity():
    stats = _stats()
    assert (round(stats.acceptance_rate, 2), round(stats.sources["draft"].alpha, 2)) == (0.58, 0.78)
    totals, sources = stats_line(stats, "cpu").split("\n")
    assert totals == ("[cpu] 11 tokens in 22.0 ms (2.00 ms/token), target calls 4, draft calls 3, "
                      "kept/proposed 7/12 = 0.58, 2.75 tokens/target call; time: encoder 2.0 ms, draft runs 5.0, "
                      "target runs 10.0, host 5.0; 9 onnxruntime runs")
    assert sources == ("sources: draft: 10 tokens in 3 rounds, alpha (per guess) 0.78; none: 1 token in 1 round; "
                       "lookup (a chain's lower level): 3/5 guesses kept by the model above it")
    assert "alpha" not in totals and "level above" not in sources


def test_the_cli_prints_them(tiny_export):
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export),
                           "--provider", "cpu", "--max-new-tokens", "6", "--gamma", "3", "--draft", "draft", "w5 w6"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    totals, sources = proc.stderr.strip().split("\n")
    assert re.search(r", kept/proposed \d+/\d+ = \d\.\d\d, ", totals), totals
    assert re.match(r"sources: draft: \d+ tokens? in \d+ rounds?, alpha \(per guess\) \d\.\d\d(;|$)", sources), sources


def test_the_sources_count_the_tokens_the_request_keeps(bundled_export):
    """A round that ends in </s> makes tokens after it that the request drops; the per-source counts leave them out
    too, so they add up to the request's tokens (they once counted the round whole: 9 tokens of an 8-token
    request), one request at a time and in a batch."""
    import json
    from pathlib import Path

    from specdec.runtime import SpeculativeDecoder

    prompts = [json.loads(line)["source"] for line in
               (Path(__file__).resolve().parents[3] / "models" / "prompts" / "test.jsonl").read_text().splitlines()[:12]]
    dec = SpeculativeDecoder.load(bundled_export, provider="cpu")
    cut = 0
    for draft in ("auto", "draft", "lookup", "lookup,draft"):
        results = [dec.generate(p, draft=draft, gamma=6) for p in prompts] + dec.generate_batch(prompts, draft=draft)
        for res in results:
            counted = sum(s.tokens for name, s in res.stats.sources.items() if not name.endswith(">"))
            assert counted == res.stats.new_tokens == len(res.token_ids), (draft, res.text, res.stats.sources)
            cut += res.stop_reason == "eos"
    assert cut > 0

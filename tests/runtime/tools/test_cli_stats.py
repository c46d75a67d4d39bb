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
    assert sources == ("sources: draft: 10 tokens in 3 rounds, alpha (per guess) 0.78; none: 1 tokens in 1 rounds; "
                       "lookup (a chain's lower level): 3/5 guesses kept by the model above it")
    assert "alpha" not in totals and "level above" not in sources


def test_the_cli_prints_them(tiny_export):
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export),
                           "--provider", "cpu", "--max-new-tokens", "6", "--gamma", "3", "--draft", "draft", "w5 w6"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    totals, sources = proc.stderr.strip().split("\n")
    assert re.search(r", kept/proposed \d+/\d+ = \d\.\d\d, ", totals), totals
    assert re.match(r"sources: draft: \d+ tokens in \d+ rounds, alpha \(per guess\) \d\.\d\d(;|$)", sources), sources

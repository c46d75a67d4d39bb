"""`python -m benchmarks.fresh`: a fresh decoder's passes on the tiny export (timings never asserted), its prompts taken
as specdec-bench takes them (benchmarks/common/prompts.py, tested in test_drafts.py and test_cli.py)."""

import json

from benchrun import prompts_file

from benchmarks.fresh import main


def test_a_missing_prompts_file_is_one_line(tiny_export, tmp_path, capsys):
    assert main(["--export", str(tiny_export), "--prompts", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read prompts file") and err.count("\n") == 1


def test_passes_report_each_temperature(tiny_export, tmp_path, capsys):
    out = tmp_path / "fresh.json"
    assert main(["--export", str(tiny_export), "--prompts", str(prompts_file(tmp_path / "p.jsonl", 2)),
                 "--num-prompts", "2", "--passes", "2", "--max-new-tokens", "4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) == {"0.0", "1.0"}
    for rows in report.values():
        assert [r["pass"] for r in rows] == [1, 2]
        assert all(r["speedup"] > 0 and r["auto_ms_per_token"] > 0 for r in rows)
    assert "| 0 |" in capsys.readouterr().out

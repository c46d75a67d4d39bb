"""`python -m benchmarks.fresh`: a fresh decoder's passes on the tiny export (timings never asserted)."""

import json

from benchrun import prompts_file

from benchmarks.fresh import load_prompts, main


def test_prompts_alternate_between_tasks(tmp_path):
    path = prompts_file(tmp_path / "p.jsonl", 3)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    picked = load_prompts(str(path), 4)
    tasks = {tuple(row["input_ids"]): row["task"] for row in rows}
    assert [tasks[tuple(p)] for p in picked] == ["summarize", "translate", "summarize", "translate"]


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

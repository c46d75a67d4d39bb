"""`python -m benchmarks.memory`: RSS after mixed requests (single, beam search, batch) on the tiny export, against
its graphs' bytes (the figures are never asserted beyond being measured)."""

import json

from benchrun import prompts_file

from benchmarks.memory import main


def test_memory_after_mixed_requests(tiny_export, tmp_path, capsys):
    out = tmp_path / "memory.json"
    assert main(["--export", str(tiny_export), "--prompts", str(prompts_file(tmp_path / "p.jsonl", 4)),
                 "--num-prompts", "4", "--requests", "4", "--max-new-tokens", "4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["after_gib"]) == ["1 (single)", "2 (beam 4)", "3 (batch of 4)", "4 (single)"]
    assert report["graphs_gib"] > 0 and report["ratio"] > 0 and report["loaded_gib"] > 0
    assert "requests / graphs" in capsys.readouterr().out


def test_bad_input_is_one_line(tiny_export, tmp_path, capsys):
    assert main(["--export", str(tiny_export), "--prompts", str(tmp_path / "none.jsonl")]) == 2
    assert main(["--export", str(tiny_export), "--prompts", str(prompts_file(tmp_path / "p.jsonl", 2)),
                 "--requests", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("error: cannot read prompts file") and "--requests 0" in err[1]

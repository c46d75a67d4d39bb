"""`python -m benchmarks.unseen`: prompts from the installed distributions' own descriptions, in the bundled
prompts' two tasks, the same file on a machine with the same packages."""

import json

from benchmarks.unseen import main, unseen


def test_unseen_prompts_have_both_tasks_their_prefixes_and_are_repeatable(tmp_path):
    rows = unseen(per_task=3)
    tasks = [r["task"] for r in rows]
    assert tasks.count("summarize") == 3 and tasks.count("translate") == 3
    for r in rows:
        prefix = "summarize: " if r["task"] == "summarize" else "translate English to German: "
        assert r["source"].startswith(prefix) and len(r["source"]) > len(prefix) + 10
        assert r["package"] != "specdec"
    words = [len(r["source"].split()) for r in rows if r["task"] == "summarize"]
    assert all(26 <= n <= 61 for n in words), words          # the prefix's word plus 25-60 of the description
    out = tmp_path / "u.jsonl"
    assert main(["--out", str(out), "--per-task", "3"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows

"""`specdec-generate --graph-capture`: the flag reaches SpeculativeDecoder.load(graph_capture=True). On an export made
with --graph-capture (run on the CPU provider, which runs the capturable graphs uncaptured) the output equals the
eager graphs' for the same prompt, draft and gamma; on an export without them, and with beams, the refusal is one
line on stderr and exit status 2."""

from __future__ import annotations

import json
import re

import pytest

from specdec.runtime.tools.generate import main

PROMPT = "w11 w6 w36"       # the tiny pair's draft and target disagree on it: rejections and residual draws


def cli(export, capsys, *args) -> tuple[int, str, str]:
    code = main(["--export", str(export), "--provider", "cpu", "--threads", "1", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", [["--draft", "draft", "--gamma", "3"], ["--draft", "lookup", "--gamma", "2"],
                                  ["--temperature", "1", "--seed", "5", "--draft", "draft", "--gamma", "4"]])
def test_graph_capture_gives_the_eager_output(tiny_capture_export, capsys, args):
    runs = []
    for flag in ([], ["--graph-capture"]):
        code, out, err = cli(tiny_capture_export, capsys, "--json", "--max-new-tokens", "12", *args, *flag, PROMPT)
        assert code == 0, err
        runs.append(json.loads(out))
    eager, captured = runs
    assert captured["token_ids"] == eager["token_ids"] and captured["text"] == eager["text"]
    assert len(captured["token_ids"]) == 12
    assert captured["stats"]["proposed"] == eager["stats"]["proposed"] > 0


def test_an_export_without_capture_graphs_is_one_line(tiny_export, capsys):
    code, out, err = cli(tiny_export, capsys, "--graph-capture", PROMPT)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1, err
    assert re.match(r"error: export '.*' has no capturable graphs; re-export it with specdec-export .* --graph-capture",
                    err), err


def test_beams_with_graph_capture_are_one_line(tiny_capture_export, capsys):
    code, out, err = cli(tiny_capture_export, capsys, "--graph-capture", "--num-beams", "2", PROMPT)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "loaded with --graph-capture" in err, err

"""specdec-bench's commands: each one's --help lists its flags and only those, a flag of another command (or of
none) is a one-line error, no command is a one-line error, the earlier flag names still run for one release, and
the tools keep their module entry points."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from benchrun import run
from specdec.bench import cli, serve_load, width

RUNS = {"--max-new-tokens", "--repeat", "--provider", "--threads", "--probe-repeats", "--past", "--no-progress"}
OUTPUT = {"--json", "--markdown"}
PEERS = {"--peers", "--peer-gamma", "--peer-repeat", "--peer-python", "--peer-timeout", "--target-checkpoint",
         "--draft-checkpoint", "--work-dir"}
FILTERS = {"--top-k", "--top-p", "--filters", "--lenience"}
BUILD = {"--work-dir", "--max-length"}
FLAGS = {
    "sweep": {"--export", "--prompts", "--num-prompts", "--gamma", "--temperature", "--plot", "--profile",
              "--graph-capture"} | FILTERS | RUNS | OUTPUT | PEERS,
    "drafts": {"--export", "--prompts", "--num-prompts", "--draft", "--temperature", "--graph-capture"} | FILTERS
    | RUNS | OUTPUT | PEERS,
    "beams": {"--export", "--shapes", "--num-beams", "--gamma", "--prompts", "--num-prompts", "--early-stopping",
              "--length-penalty", "--no-repeat-ngram-size", "--min-new-tokens", "--no-transformers",
              "--target-checkpoint", "--beam-rows", "--source-length", "--keep-checkpoints"} | RUNS | OUTPUT | BUILD,
    "shapes": {"--gamma", "--num-prompts", "--source-length", "--plot", "--gamma-max", "--keep-checkpoints",
               "--encoder-repeats", "--request-tokens"} | FILTERS | RUNS | OUTPUT | BUILD,
    "dtypes": {"--dtypes", "--gamma", "--num-prompts", "--source-length", "--gamma-max"} | RUNS | OUTPUT | BUILD,
    "serve-load": {"--export", "--instances", "--clients", "--requests", "--prompts", "--max-new-tokens", "--protocol",
                   "--threads", "--warmup", "--json", "--max-batch", "--soak", "--queue-delay-us"},
    "width": {"--export", "--wide-export", "--prompts", "--num-prompts", "--gamma", "--widths", "--max-new-tokens",
              "--probe-repeats", "--json"},
    "datastore-scale": {"--tokens", "--vocab", "--lookups", "--dir", "--json"},
    "batch": {"--export", "--batch", "--draft", "--temperature", "--prompts", "--num-prompts", "--repeat",
              "--max-new-tokens", "--provider", "--threads", "--json", "--markdown"},
    "gpu": {"--provider", "--export", "--shapes", "--work-dir", "--num-prompts", "--max-new-tokens", "--samples",
            "--bandwidth-gbs", "--budget-s", "--out", "--json", "--widen", "--widen-from", "--dtypes", "--gamma-max",
            "--max-length", "--prompts", "--background-export", "--repeats"},
    "whisper": {"--export", "--weights", "--prompts", "--num-prompts", "--draft", "--peers", "--long", "--batch-size",
                "--repeat", "--max-new-tokens", "--threads", "--json", "--markdown", "--no-progress"},
}


def _help(argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0
    return out.getvalue()


def _listed(text: str) -> set:
    """The flags --help lists (one option a line: `  --flag ...` or `  -h, --help ...`)."""
    return {m.group(2) for m in re.finditer(r"^  (-\w, )?(--[\w-]+)", text, re.M)} - {"--help"}


def test_help_names_every_command():
    text = _help(["--help"])
    assert list(cli.parser().commands) == list(FLAGS)
    for command in FLAGS:
        assert re.search(rf"^\s+{command}\s", text, re.M), command
        assert f"specdec-bench {command}" in text, command          # its line of the grammar


@pytest.mark.parametrize("command", list(FLAGS))
def test_each_command_help_lists_its_flags(command):
    text = _help([command, "--help"])
    assert text.startswith(f"usage: specdec-bench {command} ")
    assert _listed(text) == FLAGS[command]


@pytest.mark.parametrize("argv, needle", [
    (["drafts", "--export", "x", "--draft", "auto", "--plot", "p.png"], "--plot does not apply to drafts"),
    (["drafts", "--export", "x", "--draft", "auto", "--profile", "p.txt"], "--profile does not apply to drafts"),
    (["shapes", "t5-large:t5-small", "--temperature", "1"], "--temperature does not apply to shapes"),
    (["shapes", "t5-large:t5-small", "--export", "x"], "--export does not apply to shapes"),
    (["sweep", "--export", "x", "--dtypes", "int8"], "--dtypes does not apply to sweep (a flag of dtypes, gpu)"),
    (["sweep", "--export", "x", "--num-beams", "4"], "--num-beams does not apply to sweep (a flag of beams)"),
    (["sweep", "--export", "x", "--draft", "auto"],
     "--draft does not apply to sweep (a flag of drafts, batch, whisper)"),
    (["sweep", "--export", "x", "--shapes", "t5-large:t5-small"], "--shapes does not apply to sweep"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--peers"], "--peers does not apply to dtypes"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--filters", "none"], "--filters does not apply to dtypes"),
    (["width", "--export", "x", "--repeat", "2"], "--repeat does not apply to width"),
    (["serve-load", "--export", "x", "--gamma=2"], "--gamma does not apply to serve-load"),
    (["sweep", "--export", "x", "--nonsense", "1"], "sweep takes no flag --nonsense"),
    (["sweep", "--export", "x", "--num-p", "1"], "sweep takes no flag --num-p"),     # flags are never abbreviated
    (["sweep", "--export", "x", "--gamma", "0,2", "extra"], "unrecognized arguments: extra"),
    (["shapes"], "TARGET:DRAFT"),
])
def test_a_flag_that_does_not_apply_is_a_one_line_error(argv, needle):
    code, out, err = run(argv)
    assert code == 2 and err.strip().count("\n") == 0 and needle in err, (argv, err)
    assert err.startswith("error: ") and err.rstrip().endswith(f"; see specdec-bench {argv[0]} --help.")


def test_no_command_is_a_one_line_error():
    for argv in ([], ["--gamma", "0,2"], ["--no-progress"]):
        code, out, err = run(argv)
        lines = [line for line in err.splitlines() if not line.startswith("note: ")]
        assert code == 2 and len(lines) == 1, (argv, err)
        assert "takes a command first: sweep, drafts, beams, shapes, dtypes, serve-load, width, datastore-scale" \
            in lines[0] and lines[0].endswith("see specdec-bench --help.")
    code, out, err = run(["nonsense", "--export", "x"])
    assert code == 2 and err.strip().count("\n") == 0 and "invalid choice: 'nonsense'" in err


def test_earlier_flag_names_and_draft_lists_still_run(tiny_export, tmp_path):
    """--engine (now --export), --workdir (now --work-dir) and a comma-separated --draft list with '+' inside chains
    (now: spaces between configurations, commas inside a chain) run for one release, to the same configurations."""
    code, out, err = run(["drafts", "--engine", tiny_export, "--draft", "none,lookup+draft:2", "--temperature", "0",
                          "--num-prompts", "1", "--max-new-tokens", "3", "--repeat", "1", "--probe-repeats", "1",
                          "--workdir", tmp_path / "work", "--json", tmp_path / "old.json", "--no-progress"])
    assert code == 0, err
    labels = [d["label"] for d in json.loads((tmp_path / "old.json").read_text())["settings"]["drafts"]]
    assert labels == ["none", "lookup,draft:2"], labels


def test_serve_load_reports_the_command_as_typed(monkeypatch):
    seen = []
    monkeypatch.setattr(serve_load, "run", lambda args: seen.append(args.command_line) or 0)
    assert cli.main(["serve-load", "--export", "DIR", "--clients", "1,4", "--json", "load.json"]) == 0
    assert serve_load.main(["--export", "DIR", "--requests", "8"]) == 0
    assert seen == ["specdec-bench serve-load --export DIR --clients 1,4 --json load.json",
                    "python -m specdec.bench.serve_load --export DIR --requests 8"]


def test_tools_keep_their_module_entry_points(capsys):
    with pytest.raises(SystemExit) as done:
        width.main(["--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m specdec.bench.width ")
    assert serve_load.main(["--clients", "0"]) == 2                         # one-line errors there too
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "see python -m specdec.bench.serve_load --help." in err

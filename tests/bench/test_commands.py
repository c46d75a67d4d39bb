"""specdec-bench's commands: each one's --help lists its flags and only those, a flag of another command (or of
none) is a one-line error, no command is a one-line error, the command lines of before the commands still run for
one release (with a one-line note), and the tools keep their module entry points."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from benchrun import run
from specdec.bench import cli, cli_legacy, serve_load, width

RUNS = {"--max-new-tokens", "--repeat", "--provider", "--threads", "--probe-repeats", "--past", "--no-progress"}
OUTPUT = {"--json", "--markdown"}
PEERS = {"--peers", "--peer-gamma", "--peer-repeat", "--peer-python", "--peer-timeout", "--target-checkpoint",
         "--draft-checkpoint", "--workdir"}
FILTERS = {"--top-k", "--top-p", "--filters", "--lenience"}
BUILD = {"--workdir", "--max-length"}
FLAGS = {
    "sweep": {"--engine", "--prompts", "--num-prompts", "--gamma", "--temperature", "--plot", "--profile"}
    | FILTERS | RUNS | OUTPUT | PEERS,
    "drafts": {"--engine", "--prompts", "--num-prompts", "--draft", "--temperature"} | FILTERS | RUNS | OUTPUT | PEERS,
    "beams": {"--engine", "--shapes", "--num-beams", "--gamma", "--prompts", "--num-prompts", "--early-stopping",
              "--length-penalty", "--no-repeat-ngram-size", "--min-new-tokens", "--no-transformers",
              "--target-checkpoint", "--beam-rows", "--source-length", "--keep-checkpoints"} | RUNS | OUTPUT | BUILD,
    "shapes": {"--gamma", "--num-prompts", "--source-length", "--plot", "--gamma-max", "--keep-checkpoints",
               "--encoder-repeats", "--request-tokens"} | FILTERS | RUNS | OUTPUT | BUILD,
    "dtypes": {"--dtypes", "--gamma", "--num-prompts", "--source-length", "--gamma-max"} | RUNS | OUTPUT | BUILD,
    "serve-load": {"--engine", "--instances", "--clients", "--requests", "--prompts", "--max-new-tokens", "--protocol",
                   "--threads", "--warmup", "--json", "--max-batch", "--soak", "--queue-delay-us"},
    "width": {"--engine", "--wide-engine", "--prompts", "--num-prompts", "--gamma", "--widths", "--max-new-tokens",
              "--probe-repeats", "--json"},
    "datastore-scale": {"--tokens", "--vocab", "--lookups", "--dir", "--json"},
    "batch": {"--engine", "--batch", "--draft", "--temperature", "--prompts", "--num-prompts", "--repeat",
              "--max-new-tokens", "--provider", "--threads", "--json", "--markdown"},
    "gpu": {"--provider", "--engine", "--shapes", "--workdir", "--num-prompts", "--max-new-tokens", "--samples",
            "--bandwidth-gbs", "--budget-s", "--out", "--json"},
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
    (["drafts", "--engine", "x", "--draft", "auto", "--plot", "p.png"], "--plot does not apply to drafts"),
    (["drafts", "--engine", "x", "--draft", "auto", "--profile", "p.txt"], "--profile does not apply to drafts"),
    (["shapes", "t5-large:t5-small", "--temperature", "1"], "--temperature does not apply to shapes"),
    (["shapes", "t5-large:t5-small", "--engine", "x"], "--engine does not apply to shapes"),
    (["sweep", "--engine", "x", "--dtypes", "int8"], "--dtypes does not apply to sweep (a flag of dtypes)"),
    (["sweep", "--engine", "x", "--num-beams", "4"], "--num-beams does not apply to sweep (a flag of beams)"),
    (["sweep", "--engine", "x", "--draft", "auto"], "--draft does not apply to sweep (a flag of drafts, batch)"),
    (["sweep", "--engine", "x", "--shapes", "t5-large:t5-small"], "--shapes does not apply to sweep"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--peers"], "--peers does not apply to dtypes"),
    (["dtypes", "t5-large:t5-small", "--dtypes", "int8", "--filters", "none"], "--filters does not apply to dtypes"),
    (["width", "--engine", "x", "--repeat", "2"], "--repeat does not apply to width"),
    (["serve-load", "--engine", "x", "--gamma=2"], "--gamma does not apply to serve-load"),
    (["sweep", "--engine", "x", "--nonsense", "1"], "sweep takes no flag --nonsense"),
    (["sweep", "--engine", "x", "--num-p", "1"], "sweep takes no flag --num-p"),     # flags are never abbreviated
    (["sweep", "--engine", "x", "--gamma", "0,2", "extra"], "unrecognized arguments: extra"),
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
    code, out, err = run(["nonsense", "--engine", "x"])
    assert code == 2 and err.strip().count("\n") == 0 and "invalid choice: 'nonsense'" in err


@pytest.mark.parametrize("old, new", [
    ("--engine E", "sweep --engine E"),
    ("--engine E --gamma 0,2 --temperature 0 --plot P", "sweep --engine E --gamma 0,2 --temperature 0 --plot P"),
    ("--engine E --peers --peer-python P", "sweep --engine E --peers --peer-python P"),
    ("--engine E --draft none,draft,auto", "drafts --engine E --draft none,draft,auto"),
    ("--engine E --draft=auto --peers", "drafts --engine E --draft=auto --peers"),
    ("--engine E --num-beams 4 --gamma 1,2,4", "beams --engine E --num-beams 4 --gamma 1,2,4"),
    ("--engine E --num-beams 1", "sweep --engine E"),                      # W = 1 was no beam search
    ("--shapes T:D --num-beams 4 --beam-rows 4,8", "beams --shapes T:D --num-beams 4 --beam-rows 4,8"),
    ("--shapes T:D", "shapes T:D"),
    ("--shapes=T:D --workdir W --gamma 0", "shapes T:D --workdir W --gamma 0"),
    ("--shapes T:D --dtypes fp32,int8 --gamma 0,4", "dtypes T:D --dtypes fp32,int8 --gamma 0,4"),
    ("--dtypes int8 --shapes T:D", "dtypes T:D --dtypes int8"),
    ("--engine E --dtypes int8", "dtypes --engine E --dtypes int8"),         # then: --engine does not apply
])
def test_old_command_lines_map_to_commands(old, new):
    assert cli_legacy.command_of(old.split()) == new.split()


def test_old_command_line_runs_with_a_note(tiny_export, tmp_path):
    code, out, err = run(["--engine", tiny_export, "--gamma", "0,1", "--temperature", "0", "--repeat", "1",
                          "--num-prompts", "1", "--max-new-tokens", "3", "--probe-repeats", "1",
                          "--json", tmp_path / "old.json", "--no-progress"])
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "deprecated" in notes[0] and f"specdec-bench sweep --engine {tiny_export}" in notes[0]
    assert json.loads((tmp_path / "old.json").read_text())["mode"] == "engine"
    code, out, err = run(["--engine", tiny_export, "--draft", "auto", "--gamma", "0,2"])
    assert code == 2 and err.count("\n") == 2 and err.startswith("note: ")
    assert err.splitlines()[1].startswith("error: --gamma does not apply to drafts")


def test_serve_load_reports_the_command_as_typed(monkeypatch):
    seen = []
    monkeypatch.setattr(serve_load, "run", lambda args: seen.append(args.command_line) or 0)
    assert cli.main(["serve-load", "--engine", "DIR", "--clients", "1,4", "--json", "load.json"]) == 0
    assert serve_load.main(["--engine", "DIR", "--requests", "8"]) == 0
    assert seen == ["specdec-bench serve-load --engine DIR --clients 1,4 --json load.json",
                    "python -m specdec.bench.serve_load --engine DIR --requests 8"]


def test_tools_keep_their_module_entry_points(capsys):
    with pytest.raises(SystemExit) as done:
        width.main(["--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m specdec.bench.width ")
    assert serve_load.main(["--clients", "0"]) == 2                         # one-line errors there too
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "see python -m specdec.bench.serve_load --help." in err

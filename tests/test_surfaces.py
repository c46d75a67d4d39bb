"""Every surface of a request's parameters and of its stats, held against their one declaration
(specdec.runtime.core.params.PARAMETERS, specdec.runtime.core.stats.STATS): the Python keywords, specdec-generate's
and specdec-bench's flags (their --help), the C header's structs, serve's Triton inputs and outputs, and the JSON
the CLI prints. Nothing here lists a parameter by hand: a surface that lacks a declared one, or has one the
declaration does not know, or gives it another type, fails."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from specdec.runtime import Params, SpecdecError, Stats
from specdec.runtime.core.params import PARAMETERS, flag_value, from_flags
from specdec.runtime.core.stats import KIND_FIELDS, STATS

HEADER = Path(__file__).resolve().parents[1] / "include" / "specdec.h"
C_TYPES = {"int32_t", "int64_t", "uint64_t", "double", "const char *"}


def _actions(parser: argparse.ArgumentParser, name: str):
    """(command and subcommand, action) for every argument of a parser and of all its subcommands, --help and hidden
    ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _actions(subparser, f"{name} {sub}")
        else:
            yield name, action


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """{option string: [the parser (and subcommand) names that take it]} over a parser and all its subcommands."""
    found: dict[str, list[str]] = {}
    for name, action in _actions(parser, parser.prog):
        for option in action.option_strings:
            found.setdefault(option, []).append(name)
    return found


def _c_struct(name: str) -> dict[str, str]:
    """{field: C type} of a struct in include/specdec.h, comments removed."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S).group(1)
    out = {}
    for line in body.split(";"):
        line = " ".join(line.split())
        if line:
            ctype, field = line.rsplit(" ", 1)
            out[field.lstrip("*")] = ctype + (" *" if field.startswith("*") else "")
    return out


# -- the declaration itself ---------------------------------------------------------------------------------------
def test_the_declaration_is_the_dataclass():
    assert [d.name for d in PARAMETERS] == [f.name for f in fields(Params)]
    assert all(d.default == getattr(Params(), d.name) for d in PARAMETERS)
    for declared in PARAMETERS:
        assert declared.doc and declared.values, declared.name
        assert declared.c_type is None or declared.c_type in C_TYPES, declared.name


def test_every_declared_check_refuses_and_accepts():
    """Each declared test refuses a value of the wrong kind with a one-line error naming the parameter, and the
    default passes (so a declaration whose test refuses everything, or nothing, fails here)."""
    Params().checked(8)
    for declared in PARAMETERS:
        if declared.test is None:
            continue
        with pytest.raises(SpecdecError, match=f"^{declared.name} must be"):
            Params.of(**{declared.name: "not a value"}).checked(8)
        with pytest.raises(SpecdecError, match=f"^{declared.name} must be"):
            Params.of(**{declared.name: float("nan")}).checked(8)


# -- Python -------------------------------------------------------------------------------------------------------
def test_python_keywords_are_the_declared_names():
    for declared in PARAMETERS:
        assert getattr(Params.of(**{declared.name: declared.default}), declared.name) == declared.default
    with pytest.raises(SpecdecError, match="unknown parameter 'topk'"):
        Params.of(topk=3)


# -- command lines ------------------------------------------------------------------------------------------------
def test_specdec_generate_has_every_flag():
    from specdec.runtime.tools.generate import parser

    options = _options(parser())
    for declared in PARAMETERS:
        assert declared.flag in options, declared.flag
    out = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for declared in PARAMETERS:
        assert re.search(rf"\s{re.escape(declared.flag)}\b", out), declared.flag


def test_specdec_generate_reads_each_flag_as_python_does():
    """A value given on the command line arrives in Params as the same Python value (gamma's auto and
    early_stopping's words included); a flag left out keeps the default."""
    from specdec.runtime.tools.generate import parser

    examples = {int: "3", float: "0.5", str: "lookup"}
    words = {"gamma": ("auto", "auto"), "early_stopping": ("never", "never")}
    for declared in PARAMETERS:
        text, want = words.get(declared.name, (examples[declared.kind], None))
        args = parser().parse_args(["a prompt", declared.flag, text])
        got = getattr(from_flags(args), declared.name)
        assert got == (want if want is not None else declared.kind(text)), declared.name
        assert from_flags(parser().parse_args(["a prompt"])) == Params()
    with pytest.raises(SpecdecError, match="--early-stopping must be true, false or never"):
        flag_value("early_stopping", "sometimes")


def test_specdec_bench_flags_are_declared_ones():
    """The bench takes a flag for every parameter declared `bench`, and no other flag named like a parameter."""
    from specdec.bench.cli import parser

    options = _options(parser())
    for declared in PARAMETERS:
        assert (declared.flag in options) == declared.bench, declared.flag
    out = subprocess.run([sys.executable, "-m", "specdec.bench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# -- C ------------------------------------------------------------------------------------------------------------
def test_c_params_struct_is_the_declaration():
    struct = _c_struct("specdec_params")
    assert struct.pop("struct_size") == "size_t"
    assert struct == {d.c_field: d.c_type for d in PARAMETERS if d.c_type}


def test_c_stats_struct_is_the_declaration():
    struct = _c_struct("specdec_stats")
    assert struct.pop("struct_size") == "size_t"
    assert struct.pop("stop_reason") == "specdec_stop_reason"
    assert struct == {f.name: "int64_t" if f.unit == "count" else "double" for f in STATS}


def test_c_conversions_cover_every_declared_field():
    """bindings/_capi.py turns each C field into its Python value by the declaration: a number standing for a word
    (c_values) is that word both ways round, every other value its int or float."""
    for declared in PARAMETERS:
        for number, value in declared.c_values:
            assert isinstance(number, int)
            Params.of(**{declared.name: value}).checked(8)


# -- serve --------------------------------------------------------------------------------------------------------
def test_serve_inputs_are_the_declared_ones():
    from specdec.serve.schema import INPUTS, request

    assert [f.name for f in INPUTS] == ["prompt"] + [d.name for d in PARAMETERS if d.serve]
    kinds = {np.object_: str, np.int64: int, np.float64: float}
    for field, declared in zip(INPUTS[1:], [d for d in PARAMETERS if d.serve]):
        assert kinds[field.dtype] is declared.kind, field.name
        assert field.optional
    # every served input reaches Params
    values = {"max_new_tokens": 5, "gamma": 2, "draft": "lookup", "temperature": 0.5, "top_k": 4, "top_p": 0.9,
              "lenience": 0.75, "seed": 7, "num_beams": 3, "length_penalty": 0.5, "early_stopping": "never",
              "min_new_tokens": 1, "no_repeat_ngram_size": 2, "candidates": 3}
    assert set(values) == {d.name for d in PARAMETERS if d.serve}

    def get(name):
        if name == "prompt":
            return np.array([b"hi"], dtype=np.object_)
        value = values[name]
        return np.array([value.encode() if isinstance(value, str) else value], dtype=object if isinstance(
            value, str) else None)
    _, params = request(get)
    assert all(getattr(params, name) == value for name, value in values.items())


def test_serve_outputs_hold_every_total():
    from specdec.serve.schema import OUTPUTS, response
    from specdec.serve.speech import SPEECH_OUTPUTS

    stats = Stats(target_calls=3, new_tokens=6, proposed=4, accepted=3, total_s=0.5)
    out = response("x", [1, 2], stats, "eos")
    assert set(out) == {f.name for f in OUTPUTS}
    for figure in STATS:
        if not figure.group:
            assert out[figure.name][0] == pytest.approx(stats.figures()[figure.name]), figure.name
    assert json.loads(out["stats_json"][0])["tokens_per_target_call"] == 2.0
    # a Whisper export's outputs add its segments, as JSON
    speech = response("x", [1, 2], stats, "eos", segments=[{"start": 0.0, "end": None, "text": "x", "token_ids": [1]}])
    assert list(speech) == [f.name for f in SPEECH_OUTPUTS]
    assert json.loads(speech["segments_json"][0]) == [{"start": 0.0, "end": None, "text": "x", "token_ids": [1]}]


# -- stats --------------------------------------------------------------------------------------------------------
def test_stats_figures_are_declared_once():
    assert list(Stats().figures()) == [f.name for f in STATS]
    assert set(Stats().as_dict()) == {f.name for f in STATS} | {"sources"}
    assert all(f.doc and f.unit in ("count", "s", "ratio") for f in STATS)


def test_counters_by_kind_fold_the_sources():
    """An independent count of a hand-made request: the lookup's datastore copies are lookup rounds, a chain's
    lower level is a chain count, a model or chain top level is a model round."""
    stats = Stats(target_calls=6, proposed=11, accepted=6)
    stats.source("none").add(0, 0, 1)
    stats.source("lookup").add(3, 2, 3)
    stats.source("datastore").add(2, 0, 1)
    stats.source("draft").add(4, 3, 4)
    stats.source("lookup,draft").add(2, 1, 2)
    stats.source("lookup>").add(5, 4)
    stats.source("none").add(0, 0, 1)
    assert stats.by_kind() == {"target_only_rounds": 2, "lookup_rounds": 2, "lookup_proposed": 5,
                               "lookup_accepted": 2, "model_rounds": 2, "model_proposed": 6, "model_accepted": 4,
                               "chain_proposed": 5, "chain_accepted": 4}
    assert tuple(stats.by_kind()) == KIND_FIELDS


def test_specdec_generate_json_holds_every_figure(tiny_export):
    out = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export),
                          "--max-new-tokens", "4", "--json", "hello"], capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout)["stats"]
    assert set(stats) == {f.name for f in STATS} | {"sources"}


# -- graph inputs and outputs -------------------------------------------------------------------------------------
def test_the_loader_checks_the_declared_graph_names():
    """The loader's table of expected tensors (runtime/loading/validate.py) names exactly the declared graph inputs and
    outputs, and export writes them (its INPUTS/OUTPUTS are the declaration's)."""
    from specdec.runtime.core import graph_io
    from specdec.runtime.loading.validate import EXPECTED

    decoder = EXPECTED["decoder"]
    assert {n.lstrip("!") for n in decoder["inputs"]} == {*graph_io.DECODER_INPUTS, *graph_io.HEAD_INPUTS,
                                                           graph_io.STEPS, *graph_io.TREE_INPUTS,
                                                           *graph_io.ROW_INPUTS, graph_io.GUESS_COUNTS}
    assert {n.lstrip("!") for n in decoder["outputs"]} == {*graph_io.DECODER_OUTPUTS, *graph_io.HEAD_OUTPUTS,
                                                            *graph_io.TREE_OUTPUTS}
    pytest.importorskip("torch")
    from specdec.export import head
    from specdec.export.families import t5_decoder as export_decoder, t5_encoder as export_encoder

    assert (export_decoder.INPUTS, export_decoder.OUTPUTS) == (graph_io.DECODER_INPUTS, graph_io.DECODER_OUTPUTS)
    assert (export_encoder.INPUTS, export_encoder.OUTPUTS) == (graph_io.ENCODER_INPUTS, graph_io.ENCODER_OUTPUTS)
    assert (head.INPUTS, head.OUTPUTS) == (graph_io.HEAD_INPUTS, graph_io.HEAD_OUTPUTS)
    assert (*export_decoder.DECODER_TREE_INPUTS, head.TREE_INPUT, head.TREE_OUTPUT) == \
        (*graph_io.TREE_INPUTS, *graph_io.TREE_OUTPUTS)


# -- every command line's errors ----------------------------------------------------------------------------------------

def _console_scripts() -> dict[str, str]:
    """{command: "module:function"} from pyproject.toml's [project.scripts]."""
    import tomllib

    pyproject = tomllib.loads((HEADER.parents[1] / "pyproject.toml").read_text())
    return pyproject["project"]["scripts"]


def _parser_of(command: str) -> argparse.ArgumentParser:
    import importlib

    module = importlib.import_module(_console_scripts()[command].split(":")[0])
    return (getattr(module, "parser", None) or module.build_parser)()


def _subcommands(command: str) -> list[str]:
    """The subcommands of a command's parser (none for a command without them)."""
    return next((list(a.choices) for a in _parser_of(command)._actions if isinstance(a, argparse._SubParsersAction)),
                [])


@pytest.mark.parametrize("command", sorted(_console_scripts()))
def test_every_command_says_a_bad_flag_in_one_line(command, capsys):
    """Each console script, given an unknown flag: exit status 2 and one line on stderr, `error: ...; see <command>
    --help.`, naming the flag (or, for a command with subcommands, every subcommand, since one comes first), nothing on
    stdout. (argparse alone prints a usage block; one parser class, OneLineParser, is under them all.)"""
    import importlib

    name, function = _console_scripts()[command].split(":")
    module = importlib.import_module(name)
    try:
        code = getattr(module, function)(["--no-such-flag"])
    except SystemExit as done:          # a main that exits instead of returning its status
        code = done.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (command, code, out)
    assert err.startswith("error: ") and err.endswith(f"; see {command} --help.\n") and err.count("\n") == 1, err
    subcommands = _subcommands(command)
    assert all(sub in err for sub in subcommands) if subcommands else "--no-such-flag" in err, err


def _arguments(parser: argparse.ArgumentParser, name: str):
    """(command and subcommand, argument) for every argument a user sees in --help, subcommands included."""
    return ((where, action) for where, action in _actions(parser, name)
            if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS)


SOURCE_FILE = re.compile(r"[\w/]+\.py\b")
MARKUP = re.compile(r"`|\*\*|:(func|class|mod):")
NOT_OURS = {"model.py"}        # Triton's Python backend file, which a written model repository holds


@pytest.mark.parametrize("command", sorted(_console_scripts()))
def test_every_flag_has_help_without_source_paths_or_markup(command):
    """Every argument of every command and subcommand has help text, which names no source file of specdec (users
    run commands; they do not read modules) and holds no Markdown or reStructuredText markup."""
    bad = []
    for name, action in _arguments(_parser_of(command), command):
        text, label = action.help or "", "/".join(action.option_strings) or action.dest
        if not text.strip():
            bad.append(f"{name} {label}: no help")
        if set(SOURCE_FILE.findall(text)) - NOT_OURS:
            bad.append(f"{name} {label}: names a source file: {text!r}")
        if MARKUP.search(text):
            bad.append(f"{name} {label}: markup: {text!r}")
    assert not bad, "\n".join(bad)


# -- earlier spellings -------------------------------------------------------------------------------------------------

def _renamed() -> list[tuple[str, str, str]]:
    """(command, earlier flag, current flag) for every flag a command still accepts under an earlier name."""
    return [(command, old, new) for command in sorted(_console_scripts())
            for old, new in getattr(_parser_of(command), "renamed", {}).items()]


def test_one_name_for_the_export_directory_and_the_work_directory():
    """The export directory is --export on every command that takes one (never --engine or --out), the bench's cache
    --work-dir; the earlier names are accepted and hidden."""
    for command in _console_scripts():
        options = _options(_parser_of(command))
        assert not {"--engine", "--workdir", "--wide-engine", "--address"} & set(options), (command, options)
    assert {"--engine", "--workdir"} <= set(_parser_of("specdec-bench").renamed)
    assert _parser_of("specdec-export").renamed["--out"] == "--export"
    for command in ("specdec-export", "specdec-generate", "specdec-serve"):
        assert "--export" in _options(_parser_of(command)), command
    bench = _options(_parser_of("specdec-bench"))
    assert len(bench["--export"]) >= 7 and "--work-dir" in bench, bench


@pytest.mark.parametrize("command, old, new", _renamed())
def test_an_earlier_flag_name_parses_as_the_current_one(command, old, new):
    """Each earlier name (also as --flag=value) is read as its current name: the same namespace either way."""
    p = _parser_of(command)
    assert p.current_names([old, "V", f"{old}=W", "--x"]) == [new, "V", f"{new}=W", "--x"]
    assert all(new not in p.renamed for new in p.renamed.values())          # a current name is never renamed again


def test_docs_teach_no_earlier_spelling():
    """No user document (dated results excepted: they show commands as they were run) teaches an earlier flag name,
    or a chain spelled with '+' (one spelling: lookup,draft). A name that is current on another command (--out,
    --datastore) counts only on the lines that run the command it was renamed on."""
    from test_docs import documents

    current = {option for command in _console_scripts() for option in _options(_parser_of(command))}
    renamed = _renamed()        # once: it builds every command's parser (per line, it took minutes)
    found = []
    for path in documents():
        if "results" in path.parts:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for command, old, new in renamed:
                runs = re.findall(re.escape(command) + r"(?![\w-])[^`;]*", line) if old in current else [line]
                if any(re.search(re.escape(old) + r"(?![\w-])", run) for run in runs):
                    found.append(f"{path.name}:{number}: {command} {old} (now {new})")
            if re.search(r"\blookup\+", line):
                found.append(f"{path.name}:{number}: a chain with '+' (now lookup,draft)")
    assert not found, "\n".join(found)

"""Every surface of a decoder's load options, held against their one declaration
(specdec.runtime.core.options.OPTIONS): SpeculativeDecoder.load's keywords, the flags of specdec-generate,
specdec-bench and specdec-serve, serve's config (Server's keywords, a written model repository's parameters), the keys
of the C API's options_json (and the header's comment on them) and the docs' table. Nothing here lists an option by
hand: a surface that lacks a declared option, or takes one the declaration does not give it, fails; and an option
added to the declaration appears on every surface it names (test_a_new_option_reaches_every_surface)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.core import options
from specdec.runtime.core.options import OPTIONS, SURFACES, LoadOptions
from specdec.runtime.core.params import PARAMETERS

ROOT = Path(__file__).resolve().parents[1]
REQUEST_FLAGS = {declared.flag for declared in PARAMETERS}
EXAMPLES = {str: "cpu", int: 2, bool: True}      # a value each kind accepts (provider's name for a string)


class Unaccepted:
    """A value no declared option accepts."""

    def __repr__(self):
        return "<unaccepted>"


def _declared(surface: str) -> list:
    return [d for d in options.OPTIONS if surface in d.surfaces]


def _load_actions(parser: argparse.ArgumentParser) -> dict:
    """{flag: [action, ...]} of every argument (subcommands' included) whose dest is a declared option's name, but a
    request parameter's flag (specdec-generate's --draft is the request's draft)."""
    names = {d.name for d in options.OPTIONS}
    found: dict = {}

    def walk(p):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            elif action.dest in names and not set(action.option_strings) & REQUEST_FLAGS:
                for flag in action.option_strings:
                    found.setdefault(flag, []).append(action)
    walk(parser)
    return found


def _parsers() -> dict:
    from specdec.bench.cli import parser as bench
    from specdec.runtime.tools.generate import parser as generate
    from specdec.serve.cli import parser as serve

    return {"generate": generate(), "bench": bench(), "serve": serve()}


def _header_keys() -> list[str]:
    """The keys include/specdec.h's comment on specdec_open's options_json lists (a `"key":` opening a line)."""
    text = (ROOT / "include" / "specdec.h").read_text()
    block = text[text.index("options_json: NULL"):text.index("out_session:  required")]
    return re.findall(r'^\s+"(\w+)":', block, re.M)


def _docs_table() -> str:
    """The table under Loading in docs/guides/runtime.md: its span, as the page holds it (which the site shows
    rendered afresh by docs/hooks.py; tests/test_docs.py holds the page's copy current)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("specdec_docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    text = (ROOT / "docs" / "guides" / "runtime.md").read_text()
    assert len(hooks.span("load-options").findall(text)) == 1 and text.count("| option | default |") == 1
    return hooks.span("load-options").search(text).group(3)


# -- the declaration itself ---------------------------------------------------------------------------------------
def test_the_declaration_is_the_dataclass():
    assert [d.name for d in OPTIONS] == [f.name for f in dataclasses.fields(LoadOptions)]
    assert all(d.default == getattr(LoadOptions(), d.name) for d in OPTIONS)
    LoadOptions().checked()
    for declared in OPTIONS:
        assert declared.doc and declared.values and declared.must_be, declared.name
        assert set(declared.surfaces) <= set(SURFACES), declared.name
        assert not declared.surfaces or declared.kind in EXAMPLES, declared.name     # a command line parses it
        assert "\n" not in declared.doc and "`" not in declared.doc, declared.name


def test_the_provider_names_are_the_engine_s():
    from specdec.runtime.engine.device import PROVIDER_CHOICES

    assert options.PROVIDER_NAMES == PROVIDER_CHOICES
    assert options.DECLARED["provider"].choices == PROVIDER_CHOICES
    assert options.DECLARED["provider"].default == "auto"


# -- Python -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [d.name for d in OPTIONS])
def test_load_refuses_a_bad_value_in_one_line(name, tmp_path):
    """A value the declaration does not accept is its one-line error, from LoadOptions and from load (before the
    export is read: the directory does not exist)."""
    with pytest.raises(SpecdecError, match=f"^{name} must be") as err:
        SpeculativeDecoder.load(tmp_path / "none", **{name: Unaccepted()})
    assert "\n" not in str(err.value)
    with pytest.raises(SpecdecError, match=f"^{name} must be"):
        LoadOptions.of(**{name: Unaccepted()}).checked()


def test_today_s_messages_hold():
    with pytest.raises(SpecdecError, match="graph_capture must be True or False"):
        LoadOptions.of(graph_capture="yes").checked()
    with pytest.raises(SpecdecError, match="datastore must be a path"):
        LoadOptions.of(datastore=123).checked()
    with pytest.raises(SpecdecError, match="provider_options must be a dict of option names to values"):
        LoadOptions.of(provider_options=["x"]).checked()


def test_an_unknown_keyword_is_one_line_naming_the_choices(tmp_path):
    with pytest.raises(SpecdecError, match="unknown load option 'thread'") as err:
        SpeculativeDecoder.load(tmp_path / "none", thread=2)
    assert all(d.name in str(err.value) for d in OPTIONS) and "\n" not in str(err.value)
    with pytest.raises(SpecdecError, match="options must be a LoadOptions"):
        SpeculativeDecoder.load(tmp_path / "none", {"threads": 2})


def test_keywords_and_a_load_options_open_the_same_decoder(tiny_export):
    by_keywords = SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1, stream_idle_s=5.0)
    by_options = SpeculativeDecoder.load(tiny_export, LoadOptions.of(provider="cpu", threads=1), stream_idle_s=5.0)
    for dec in (by_keywords, by_options):
        assert dec.provider == "cpu" and dec.stream_idle_s == 5.0 and dec.target.threads == 1
    ids = [5, 6, 7, 1]
    assert by_keywords.generate(input_ids=ids, max_new_tokens=4).token_ids == \
        by_options.generate(input_ids=ids, max_new_tokens=4).token_ids


# -- command lines ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("surface", ["generate", "bench", "serve"])
def test_each_command_has_the_declared_flags_and_no_other(surface):
    """The command's parser takes a flag for every option declared for it, and every flag it has that sets a load
    option is that option's declared flag, its help the declaration's (specdec-bench: in the commands that take the
    shared run flags, test_the_bench_run_flags_are_the_declared_ones; a few of its commands make their own
    --provider or --threads)."""
    found = _load_actions(_parsers()[surface])
    declared = {d.flag: d for d in _declared(surface)}
    assert set(declared) <= set(found), set(declared) - set(found)
    for flag, actions in found.items():
        assert flag in declared, f"{flag} sets a load option that {surface} is not declared to take"
        for action in actions:
            assert action.option_strings == [flag] and action.dest == declared[flag].name
        made = [action for action in actions if declared[flag].doc in (action.help or "")]
        assert made if surface == "bench" else made == actions, flag


def test_the_bench_run_flags_are_the_declared_ones():
    from specdec.bench.common.options import run

    def flags(**kw):
        parent = run(max_new_tokens=8, repeat=1, repeat_help="repeats", past="8", **kw)
        return set(_load_actions(parent))
    bench = {d.flag for d in _declared("bench")}
    assert flags(graph_capture=True) == bench
    assert flags() == bench - {options.DECLARED["graph_capture"].flag}


@pytest.mark.parametrize("surface", ["generate", "serve"])
def test_a_flag_reaches_load_options(surface):
    """Each declared flag's value arrives in LoadOptions as Python's (datastore's none as False); a flag left out
    keeps the default."""
    parser = _parsers()[surface]
    head = ["a prompt"] if surface == "generate" else []
    assert LoadOptions.from_args(parser.parse_args(head), surface) == LoadOptions()
    for declared in _declared(surface):
        if declared.kind is bool:
            argv, want = [declared.flag], True
        else:
            text = str(EXAMPLES[declared.kind])
            argv, want = [declared.flag, text], declared.kind(text)
        got = LoadOptions.from_args(parser.parse_args([*head, *argv]), surface)
        assert getattr(got, declared.name) == want and got.checked(), declared.name
    if "datastore" in {d.name for d in _declared(surface)}:
        assert LoadOptions.from_args(parser.parse_args([*head, "--datastore", "none"]), surface).datastore is False


def test_specdec_serve_names_a_refused_value_by_its_flag(capsys):
    from specdec.serve.cli import main

    assert main(["--threads", "-1"]) == 2
    assert capsys.readouterr().err == "error: --threads must be an integer >= 0 (got -1); use 0 for onnxruntime's " \
                                      "default.\n"


# -- serve ----------------------------------------------------------------------------------------------------------
def test_serve_config_holds_every_serve_option(tmp_path):
    """Server and a model repository's writer take the serve options as keywords (and no other load option);
    config.pbtxt holds each as a parameter, which model.py reads back into the same LoadOptions."""
    from specdec.serve import repository, schema
    from specdec.serve.server import Server

    given = {d.name: EXAMPLES[d.kind] for d in _declared("serve")}
    server = Server(tmp_path, **given)
    assert server.options == LoadOptions.of(**given)
    with pytest.raises(SpecdecError, match="unknown load option 'draft'"):
        Server(tmp_path, draft=str(tmp_path))
    config = repository.config_pbtxt("specdec", tmp_path, 1, False, options=server.options)
    parameters = dict(re.findall(r'key: "(\w+)"\n  value: \{ string_value: "([^"]*)" \}', config))
    assert {d.name for d in _declared("serve")} <= set(parameters)
    assert schema.config_options(parameters) == server.options
    assert schema.config_options({"engine": "x", "max_batch": "4"}) == LoadOptions()


# -- C ------------------------------------------------------------------------------------------------------------
def test_c_options_json_takes_the_declared_keys():
    from specdec.bindings._capi import open_options

    c = _declared("c")
    values = {d.name: EXAMPLES[d.kind] for d in c}
    assert open_options(json.dumps(values)) == LoadOptions.of(**{d.name: d.parsed(values[d.name]) for d in c})
    assert open_options("") == LoadOptions() == open_options("  ")
    for declared in OPTIONS:
        if declared not in c:
            with pytest.raises(SpecdecError, match=f'unknown key "{declared.name}"'):
                open_options(json.dumps({declared.name: None}))
    with pytest.raises(SpecdecError, match="unknown key") as err:
        open_options('{"bogus": 1}')
    assert re.findall(r'"(\w+)"', str(err.value).split("use only")[1]) == [d.name for d in c]
    assert open_options('{"datastore": "none"}').datastore is False


def test_the_header_lists_the_c_keys():
    assert _header_keys() == [d.name for d in _declared("c")]


# -- docs ---------------------------------------------------------------------------------------------------------
def test_the_docs_table_is_the_declaration():
    """docs/guides/runtime.md's table under Loading is the declaration's: the site makes it from the declaration
    (docs/hooks.py), and the page's copy, for readers of the Markdown, is `python docs/hooks.py`'s."""
    assert _docs_table() == options.table()


# -- a new option ---------------------------------------------------------------------------------------------------
@pytest.fixture
def with_a_new_option(monkeypatch):
    """The declaration with one more option, `fake_knob`, that every surface takes: a subclass of LoadOptions with
    its field, in place of LoadOptions wherever a module holds it (every surface's module imported first, so that
    none is imported with the new class and keeps it after the test)."""
    import specdec.bindings._capi  # noqa: F401
    import specdec.serve.repository  # noqa: F401
    import specdec.serve.server  # noqa: F401

    _parsers()
    new = dataclasses.make_dataclass(
        "LoadOptions", [("fake_knob", int, options.option(
            3, "a knob for the test", "an integer >= 1", lambda v: type(v) is int and v >= 1, "an integer >= 1",
            kind=int, takes="generate bench serve c"))], bases=(LoadOptions,), frozen=True)
    declared = tuple(options.LoadOption(name=f.name, default=f.default, **f.metadata["declared"])
                     for f in dataclasses.fields(new))
    monkeypatch.setattr(options, "OPTIONS", declared)
    monkeypatch.setattr(options, "DECLARED", {d.name: d for d in declared})
    for module in list(sys.modules.values()):
        # the module's own names, not getattr: a lazy module's __getattr__ (transformers 5.17's) imports what the name
        # might be and can raise ImportError for a name it does not have
        if module is not sys.modules[__name__] and vars(module).get("LoadOptions") is LoadOptions:
            monkeypatch.setattr(module, "LoadOptions", new)
    return options.DECLARED["fake_knob"]


def test_a_new_option_reaches_every_surface(with_a_new_option, tmp_path):
    from specdec.bindings._capi import open_options
    from specdec.serve import repository, schema

    knob = with_a_new_option
    # Python: a keyword of load, checked as declared
    with pytest.raises(SpecdecError, match="^fake_knob must be an integer >= 1"):
        SpeculativeDecoder.load(tmp_path / "none", fake_knob=0)
    assert options.LoadOptions.of(fake_knob=5).checked().fake_knob == 5
    # the command lines
    for surface, parser in _parsers().items():
        assert knob.flag in _load_actions(parser), surface
    head = ["a prompt"]
    generate = _parsers()["generate"]
    assert options.LoadOptions.from_args(generate.parse_args([*head, knob.flag, "7"]), "generate").fake_knob == 7
    # serve's config, there and back
    config = repository.config_pbtxt("specdec", tmp_path, 1, False, options=options.LoadOptions.of(fake_knob=6))
    parameters = dict(re.findall(r'key: "(\w+)"\n  value: \{ string_value: "([^"]*)" \}', config))
    assert parameters["fake_knob"] == "6" and schema.config_options(parameters).fake_knob == 6
    # C
    assert open_options('{"fake_knob": 4}').fake_knob == 4
    with pytest.raises(SpecdecError, match='options_json "fake_knob" must be an integer >= 1'):
        open_options('{"fake_knob": 0}')
    # the docs' table
    assert "| `fake_knob` | `3` | an integer >= 1 | a knob for the test |" in options.table()

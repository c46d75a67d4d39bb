"""Every specdec-* command's --help, and each subcommand's, as a terminal shows it: no source paths (a module
docstring used as help names its own files) and no Markdown or reStructuredText markup (backticks, **bold**, roles).
The commands are the package's console scripts, their subcommands found in their parsers, and each --help is run
as the installed command."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from specdec.runtime.core.errors import OneLineParser

# what a terminal user should not read in a --help: (pattern, what it is)
BAD = [(re.compile(r"\b[\w.-]+(?:/[\w.-]+)*/[\w-]+\.(?:py|pyi|md|rst|c|cpp|toml|ya?ml)\b"), "a source path"),
       # a module named alone ("(measure.py)"): users run commands, they do not open modules (a Triton model
       # repository's model.py is a file specdec-serve writes for the user, not one of the package's)
       (re.compile(r"(?<![\w/.-])(?!model\.py\b)[\w-]+\.pyi?\b"), "a source file"),
       (re.compile(r"`"), "a backtick"),
       (re.compile(r"\*\*"), "a '**'"),
       (re.compile(r":(?:func|class|meth|mod|attr|ref|doc|data|obj|exc|py:\w+):"), "an rST role"),
       (re.compile(r"^\s*\.\. [\w-]+::", re.M), "an rST directive")]


def problems(text: str) -> list:
    """What `text` shows that a --help should not: one 'what: the line' entry each."""
    found = []
    for pattern, what in BAD:
        for m in pattern.finditer(text):
            start, end = text.rfind("\n", 0, m.start()) + 1, text.find("\n", m.end())
            found.append(f"{what}: {text[start:end if end >= 0 else None].strip()}")
    return found


def _scripts() -> dict:
    """The package's console scripts: name -> the module holding their main."""
    return {ep.name: ep.module for ep in entry_points(group="console_scripts") if ep.name.startswith("specdec-")}


def _parser(module: str) -> argparse.ArgumentParser:
    mod = importlib.import_module(module)
    make = getattr(mod, "parser", None) or getattr(mod, "build_parser", None)
    assert make is not None, f"{module} has no parser() or build_parser(): this test cannot find its subcommands"
    return make()


def _commands(parser: argparse.ArgumentParser, path: tuple = ()):
    """The argv prefixes of a parser and of each of its subcommands, nested ones included."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _every_help() -> list:
    return [(script, path) for script, module in sorted(_scripts().items()) for path in _commands(_parser(module))]


def test_every_command_is_found():
    assert set(_scripts()) >= {"specdec-export", "specdec-generate", "specdec-datastore", "specdec-models",
                               "specdec-bench", "specdec-build-capi", "specdec-serve"}
    found = {(script, path) for script, path in _every_help()}
    assert ("specdec-bench", ("batch",)) in found and ("specdec-datastore", ("build",)) in found


@pytest.mark.parametrize("script, path", _every_help(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_help_has_no_source_paths_or_markup(script, path):
    command = Path(sys.executable).parent / script
    argv = [str(command)] if command.exists() else [sys.executable, "-m", _scripts()[script]]
    proc = subprocess.run([*argv, *path, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: "), proc.stdout[:200]
    assert problems(proc.stdout) == [], f"{script} {' '.join(path)} --help"


# --- the checker itself ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("planted", [
    "a datastore the lookup searches (runtime/loading/datastore.py).",
    "the recipe (see models/recipe.py)",
    "the gamma sweep (measure.py)",
    "the pair in ``models/``",
    "run `specdec-export` first",
    "**not** in CI",
    "see :func:`specdec.runtime.load`",
    ".. note:: a directive",
])
def test_the_checker_catches_planted_text(planted):
    assert problems(f"usage: specdec-x [-h]\n\n{planted}\n") != []


def test_the_checker_passes_plain_text():
    assert problems("usage: specdec-x [-h]\n\nwrites models/target and OUT.json; default ./exported, *.txt\n") == []


def test_a_docstring_with_markup_is_shown_plain():
    """OneLineParser shows a marked-up docstring as plain text, where argparse's own parser shows the markup (which
    the checker would catch)."""
    doc = "Build ``models/`` with `specdec-models`, **never** in CI (see :func:`specdec.models.recipe.main`)."
    assert problems(argparse.ArgumentParser(prog="x", description=doc).format_help()) != []
    shown = OneLineParser(prog="x", description=doc).format_help()
    assert problems(shown) == []
    assert "Build models/ with specdec-models, never in CI (see specdec.models.recipe.main)." in " ".join(shown.split())

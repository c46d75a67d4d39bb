"""A decoder's load options, declared once.

Each `LoadOption` in `OPTIONS` is one declaration: its default, the one line a user reads, the values it accepts
and how a refused value is told, the type its value has on a command line and in a JSON or text config, and the
surfaces that take it. `LoadOptions` is the frozen set of values SpeculativeDecoder.load opens an export with,
made from the keywords (`LoadOptions.of`), a command line (`add_flags`, `from_args`), the C API's options JSON or
serve's text config (`from_config`). Every surface is made from `OPTIONS` and tested against it
(tests/test_load_options.py): the Python keywords, the flags of specdec-generate, specdec-bench and specdec-serve,
the keys of serve's model repository config and of the C options JSON, and the docs' table (`table`). Adding a
load option is one declaration here plus its use where the export is opened (runtime/scheduling/opening.py).

An option's value is checked once (`LoadOptions.checked`, called by SpeculativeDecoder.load), so every surface
refuses the same values with the same one line. The provider's name is resolved where devices are known
(runtime/engine/device.py resolve_provider); the declaration holds the names as text.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields, replace

from .errors import SpecdecError

# what provider= takes: "auto" and runtime/engine/device.py's PROVIDERS (a test holds the two together)
PROVIDER_NAMES = ("auto", "cpu", "cuda", "tensorrt")

# The surfaces an option may reach besides Python's keywords, and what each is.
SURFACES = {
    "generate": "a specdec-generate flag",
    "bench": "a flag of the specdec-bench commands that load one export",
    "serve": "a specdec-serve flag, a Server keyword and a parameter of a written model repository's config",
    "c": "a key of the C API's options_json (specdec_open)",
}
JSON_TYPES = {str: "string", int: "integer", bool: "boolean"}


def _is_path(value) -> bool:
    return isinstance(value, (str, os.PathLike))


def _datastore_word(text: str):
    """A datastore as a command line and the C API spell it: "none" is no datastore (False), anything else a path."""
    return False if text == "none" else text


@dataclass(frozen=True)
class LoadOption:
    """One load option's declaration."""
    name: str
    default: object
    doc: str                       # one line for users: --help, the docs' table
    values: str                    # the accepted values, in words
    test: object                   # value -> bool: whether it is accepted
    must_be: str                   # "<name> must be <must_be> (got ...)"
    fix: str = ""                  # the second half of the one-line error
    kind: type | None = None       # its type on a command line and in a config (str, int, bool); None: Python only
    takes: str = ""                # the surfaces that take it besides Python, a word each (SURFACES)
    choices: tuple = ()            # the words a command line offers (provider's names)
    word: object = None            # a command line's or a config's word -> the value (datastore's "none" -> False)
    metavar: str = ""              # its value in --help

    @property
    def flag(self) -> str:
        """Its command-line flag (specdec-generate, specdec-bench, specdec-serve)."""
        return "--" + self.name.replace("_", "-")

    @property
    def surfaces(self) -> tuple:
        return tuple(self.takes.split())

    def refuse(self, value, said_as: str | None = None) -> None:
        """A one-line SpecdecError unless the value is accepted; `said_as`: how the message names it (its name)."""
        if not self.test(value):
            raise SpecdecError(f"{said_as or self.name} must be {self.must_be} (got {value!r:.80})", self.fix or None)

    def parsed(self, value):
        """A command line's or a config's value as the Python one (a word made into its value)."""
        return self.word(value) if self.word is not None and isinstance(value, str) else value

    def text(self, value) -> str:
        """The value as serve's text config holds it ("true" / "false" for a boolean)."""
        return ("true" if value else "false") if isinstance(value, bool) else "" if value is None else str(value)

    def from_text(self, text: str):
        """serve's text config's value as the Python one; a word that is not one is a one-line SpecdecError."""
        if self.kind is bool:
            if text not in ("true", "false"):
                raise SpecdecError(f"{self.name} must be true or false (got {text!r})")
            return text == "true"
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise SpecdecError(f"{self.name} must be an integer (got {text!r})") from None
        return self.parsed(text)


def option(default, doc: str, values: str, test, must_be: str, fix: str = "", **declared):
    """A LoadOptions field with its declaration."""
    return field(default=default, metadata={"declared": dict(doc=doc, values=values, test=test, must_be=must_be,
                                                             fix=fix, **declared)})


def _names(surface: str | None) -> list[str]:
    return [d.name for d in OPTIONS if surface is None or surface in d.surfaces]


@dataclass(frozen=True)
class LoadOptions:
    """The options an export is opened with: `LoadOptions.of(options, **keywords)`, checked once by
    SpeculativeDecoder.load (`checked`). One field per option; the docs' table says what each does."""

    provider: str = option(
        "auto", "the execution provider (auto: CUDA if this onnxruntime has it, else the CPU; TensorRT only when "
        "named)", "auto, cpu, cuda or tensorrt", lambda v: isinstance(v, str),
        "a provider name: " + ", ".join(PROVIDER_NAMES), "use cpu, cuda, tensorrt or auto", kind=str,
        takes="generate bench serve c", choices=PROVIDER_NAMES)
    threads: int = option(
        0, "intra-op threads of every model (0: the target takes the SPECDEC_THREADS environment variable when set, "
        "else onnxruntime's default, a thread per physical core, and each draft model one thread)",
        "an integer >= 0", lambda v: type(v) is int and v >= 0, "an integer >= 0", "use 0 for onnxruntime's default",
        kind=int, takes="generate bench serve c", metavar="N")
    draft: object = option(
        None, "take the model named draft from another export directory made for the same target (same "
        "tokenizer, vocabulary, special ids and dtype)", "a directory, or none (the export's own draft models)",
        lambda v: v is None or _is_path(v), "the path of an export directory, or None", kind=str, takes="c")
    stream_idle_s: float = option(
        30.0, "seconds an unadvanced stream keeps the decoder while another request waits for it",
        "a finite number >= 0", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        and math.isfinite(v) and v >= 0, "a finite number of seconds >= 0")
    datastore: object = option(
        None, "the datastore the lookup searches: the export's own if it has one (the default), a datastore file "
        "made with this export's tokenizer (specdec-datastore build), or none (in Python: False)",
        "a path, or none", lambda v: v is None or isinstance(v, bool) or _is_path(v),
        "a path, None or False", "pass the path of a datastore file, or False for none", kind=str,
        takes="generate c", word=_datastore_word, metavar="PATH")
    provider_options: object = option(
        None, "options of the provider's first onnxruntime provider for every session, e.g. enable_cuda_graph 1 "
        "with the cuda provider (name the provider: with auto they go to whichever it picks)",
        "a dict of option names to strings, numbers or booleans",
        lambda v: v is None or isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, (str, int, float, bool))
                                                           for k, x in v.items()),
        "a dict of option names to values", 'pass e.g. {"enable_cuda_graph": "1"}, or leave it out')
    graph_capture: bool = option(
        False, "run the export's capturable graphs (an export made with specdec-export --graph-capture): with "
        "--provider cuda each width's step is captured as a CUDA graph, on cpu the same graphs run uncaptured; beam "
        "search and batches then refuse (they need the eager graphs)", "true or false",
        lambda v: isinstance(v, bool), "True or False", kind=bool, takes="generate bench serve c")

    @classmethod
    def of(cls, options: "LoadOptions | None" = None, surface: str | None = None, **keywords) -> "LoadOptions":
        """`options` (or the defaults) with keyword overrides; an unknown keyword is a one-line SpecdecError naming
        the choices. `surface`: only the options that surface takes (SURFACES) are known."""
        known = _names(surface)
        unknown = sorted(set(keywords) - set(known))
        if unknown:
            raise SpecdecError(f"unknown load option {unknown[0]!r}", f"use {', '.join(known)}")
        if options is not None and not isinstance(options, LoadOptions):
            raise SpecdecError(f"options must be a LoadOptions (got {type(options).__name__})",
                               "make one with LoadOptions.of(...), or pass keywords")
        return replace(options or cls(), **keywords)

    def checked(self, flags: bool = False) -> "LoadOptions":
        """Raise a one-line SpecdecError for any value out of range (`flags`: naming it by its --flag, for a command
        line), or two that do not combine; returns self."""
        for declared in OPTIONS:
            declared.refuse(getattr(self, declared.name), declared.flag if flags else None)
        if self.graph_capture and self.draft is not None:
            raise SpecdecError("graph_capture with draft= from another export is not supported",
                               "export the pair together with --graph-capture and load that one directory")
        return self

    def as_dict(self, surface: str | None = None) -> dict:
        """The values by name (those `surface` takes, if given)."""
        return {name: getattr(self, name) for name in _names(surface)}

    def as_text(self, surface: str = "serve") -> dict:
        """{name: text} of the options `surface` takes, as serve's model repository config holds them."""
        return {name: DECLARED[name].text(value) for name, value in self.as_dict(surface).items()}

    @classmethod
    def from_args(cls, namespace, surface: str) -> "LoadOptions":
        """LoadOptions from an argparse namespace made with `add_flags(parser, surface)`: every option of that
        surface the namespace holds (a word such as datastore's "none" made into its value)."""
        return cls.of(**{name: DECLARED[name].parsed(getattr(namespace, name))
                         for name in _names(surface) if hasattr(namespace, name)})

    @classmethod
    def from_config(cls, config: dict, surface: str, where: str) -> "LoadOptions":
        """LoadOptions from a JSON object (surface "c": the C API's options_json) or serve's text config (surface
        "serve": every value a string; keys it does not declare are left for serve: the config holds its own).
        `where` names the config in the one-line error a key or a value that is not accepted gives."""
        known = _names(surface)
        values = {}
        for key, value in config.items():
            declared = DECLARED.get(key) if key in known else None
            if surface == "serve":
                if declared is not None:
                    values[key] = declared.from_text(value)
                continue
            if declared is None:
                raise SpecdecError(f"{where} has an unknown key {json.dumps(key)}",
                                   f"use only {', '.join(map(json.dumps, known))}")
            kind = declared.kind
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise SpecdecError(f"{where} {json.dumps(key)} must be a JSON {JSON_TYPES[kind]} (got "
                                   f"{json.dumps(value)})", 'e.g. {"provider": "cpu", "threads": 2}')
            value = declared.parsed(value)
            declared.refuse(value, f"{where} {json.dumps(key)}")
            values[key] = value
        return cls.of(**values)


OPTIONS: tuple[LoadOption, ...] = tuple(
    LoadOption(name=f.name, default=f.default, **f.metadata["declared"]) for f in fields(LoadOptions))
DECLARED = {declared.name: declared for declared in OPTIONS}     # name -> its LoadOption


def add_flags(parser, surface: str, leave_out=(), notes: dict | None = None, defaults: dict | None = None) -> None:
    """Add the --flag of each option `surface` takes (but those in `leave_out`) to an argparse parser (or group), its
    help from the declaration and `notes` (name -> what the command adds to it). A flag left out gives the
    declared default, or the command's own in `defaults` (name -> value)."""
    notes, defaults = notes or {}, defaults or {}
    for declared in OPTIONS:
        if surface not in declared.surfaces or declared.name in leave_out:
            continue
        default = defaults.get(declared.name, declared.default)
        note = f"; {notes[declared.name]}" if declared.name in notes else ""
        if declared.kind is bool:
            parser.add_argument(declared.flag, dest=declared.name, action="store_true", default=default,
                                help=declared.doc + note)
            continue
        said = [] if declared.choices else [declared.values]     # argparse shows the choices
        said += [] if default is None else [f"default {default}"]
        parser.add_argument(declared.flag, dest=declared.name, type=declared.kind, default=default,
                            choices=declared.choices or None, metavar=declared.metavar or None,
                            help=f"{declared.doc} ({'; '.join(said)}){note}")


def table() -> str:
    """The docs' table of load options (docs/hooks.py puts it where docs/guides/runtime.md has its marker)."""
    commands = {"generate": "specdec-generate", "bench": "specdec-bench", "serve": "specdec-serve"}
    rows = ["| option | default | values | meaning | also |", "| --- | --- | --- | --- | --- |"]
    for d in OPTIONS:
        on = [commands[s] for s in d.surfaces if s in commands]
        where = ([f"`{d.flag}` ({', '.join(on)})"] if on else []) + ([f'C: `"{d.name}"`'] if "c" in d.surfaces else [])
        rows.append(f"| `{d.name}` | `{d.default!r}` | {d.values} | {d.doc} | {'; '.join(where) or 'Python only'} |")
    return "\n".join(rows)

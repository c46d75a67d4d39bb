"""A request's decoding parameters, declared once.

Each field of `Params` is one declaration (`param(...)`): its default, the one line a user reads, the values it
accepts and how a refused value is told, its C type in `specdec_params`, whether serve takes it as a Triton input.
Every surface is made from `PARAMETERS` or tested against it (tests/test_surfaces.py): the Python keywords, the
flags of specdec-generate (`add_flags`) and specdec-bench, the C struct's conversions (bindings/_capi.py), serve's
inputs (serve/schema.py) and the docs' parameter table. Adding a parameter is one field here plus its use.

A request is checked once, where it enters (`Params.checked`, called by SpeculativeDecoder with the export's
gamma_max), so Python, the CLIs, C and serve accept and refuse exactly the same values with the same one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from .errors import SpecdecError

MAX_CANDIDATES = 8           # continuations a lookup round may verify in one target run (a token tree)
MAX_BEAMS = 16               # beam rows are allocated per request; speculative rounds score up to W x (gamma+1) rows
EARLY_STOPPING = (False, True, "never")     # transformers' values; specdec_early_stopping numbers them 0, 1, 2
MAX_BATCH = 256              # rows of one batched run (each holds a KV cache of max_length positions)


def checked_max_batch(value) -> int:
    """The rows a batch may decode at once (generate_batch, the batcher, specdec-serve), or a one-line error."""
    if type(value) is not int or not 1 <= value <= MAX_BATCH:
        raise SpecdecError(f"max_batch must be an integer in 1..{MAX_BATCH} (got {value!r})",
                           f"use 1 <= max_batch <= {MAX_BATCH}")
    return value


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _is_source(value) -> bool:
    """A DraftSource (runtime/decoding/sources/contract.py) by what it does: the request layer does not import
    decoding."""
    return all(callable(getattr(value, method, None)) for method in ("start", "propose", "commit"))


# What a value must be: (test, how the refusal says it). The message is "<name> must be <what> (got <value>)".
def _integer_from(low: int):
    return (lambda v: _is_int(v) and v >= low), ("a positive integer" if low == 1 else f"an integer >= {low}")


def _real_in_unit(v) -> bool:
    return _is_real(v) and 0 < v <= 1


@dataclass(frozen=True)
class Parameter:
    """One request parameter's declaration (the metadata of a `Params` field)."""
    name: str
    default: object
    doc: str                       # one line for users: --help, the docs' table, the C header's comment
    values: str                    # the accepted values, in words
    c_type: str | None             # its type in specdec_params (include/specdec.h), None: not in the C struct
    serve: bool = True             # a Triton input of specdec-serve
    group: str = ""                # "beam search": shown apart in --help
    test: object = None            # value -> bool (None: checked in Params.checked with the other fields)
    must_be: str = ""              # "<name> must be <must_be> (got ...)"
    fix: str = ""                  # the second half of the one-line error
    c_values: tuple = ()           # C integers that stand for Python values: ((-1, "auto"),) for gamma
    words: bool = False            # its values are words on a command line and in serve's text inputs
    bench: bool = True             # specdec-bench takes a flag for it (a list of values to compare, or one value)

    @property
    def flag(self) -> str:
        """Its command-line flag (specdec-generate, specdec-bench)."""
        return "--" + self.name.replace("_", "-")

    @property
    def c_field(self) -> str | None:
        return self.name if self.c_type else None

    @property
    def kind(self) -> type:
        """The Python type a command line parses a value into (gamma's and early_stopping's words aside)."""
        if self.words or self.c_type in (None, "const char *"):
            return str
        return float if self.c_type == "double" else int

    def refuse(self, value) -> None:
        if self.test is not None and not self.test(value):
            raise SpecdecError(f"{self.name} must be {self.must_be} (got {value!r})", self.fix or None)


def param(default, doc: str, values: str, c_type: str | None, **declared):
    """A Params field with its declaration."""
    return field(default=default, metadata={"declared": dict(doc=doc, values=values, c_type=c_type, **declared)})


_positive, _positive_text = _integer_from(1)
_natural, _natural_text = _integer_from(0)


@dataclass(frozen=True)
class Params:
    """One request's parameters: `Params.of(**keywords)`, checked once where the request enters."""

    max_new_tokens: int = param(
        64, "output is at most this many tokens (an EOS included)", ">= 1", "int32_t",
        test=_positive, must_be=_positive_text)
    gamma: int | str = param(
        "auto", "guesses per target call: auto (chosen each round from measured acceptance and costs) or fixed "
        "(0 = target only)", "0 .. the export's gamma_max, or \"auto\"", "int32_t", c_values=((-1, "auto"),))
    draft: object = param(
        "auto", "where guesses come from: auto (the best of none, lookup, draft and lookup,draft each round), none, "
        "lookup (copies from the source, the output so far and the datastore), a draft model's name (draft), or a "
        "chain lowest level first (lookup,draft)", "a source name or chain, or a DraftSource object",
        "const char *")
    temperature: float = param(
        0.0, "sampling temperature; 0 = greedy", "finite, >= 0", "double",
        test=lambda v: _is_real(v) and math.isfinite(v) and v >= 0, must_be="a finite number >= 0",
        fix="use 0 for greedy decoding")
    top_k: int = param(
        0, "keep the k most likely tokens before sampling; 0 = off", ">= 0", "int32_t",
        test=_natural, must_be=_natural_text, fix="use 0 to disable top-k")
    top_p: float = param(
        1.0, "keep the smallest set of tokens with probability >= top_p (nucleus); 1 = off", "(0, 1]", "double",
        test=_real_in_unit, must_be="in (0, 1]", fix="use 1.0 to disable top-p")
    lenience: float = param(
        1.0, "1 = exact; lower keeps more guesses and gives up exactness (paper A.5; at temperature 0 a guess x "
        "is kept iff p(x) >= lenience * max p)", "(0, 1]", "double",
        test=_real_in_unit, must_be="in (0, 1]", fix="use 1.0 for exact sampling")
    seed: int = param(
        0, "random seed (unused when greedy)", ">= 0", "uint64_t", test=_natural, must_be=_natural_text,
        bench=False)     # the bench seeds each repeat itself
    num_beams: int = param(
        1, "1: no beam search; 2..16: beam search over that many beams (greedy only, transformers' semantics)",
        f"1 .. {MAX_BEAMS}", "int32_t", group="beam search",
        test=lambda v: _is_int(v) and 1 <= v <= MAX_BEAMS, must_be=f"an integer in 1..{MAX_BEAMS}",
        fix="use num_beams=1 for greedy or sampling, 2..16 for beam search")
    length_penalty: float = param(
        1.0, "a finished beam scores sum log p / length^length_penalty (> 0 favours longer outputs)", "finite",
        "double", group="beam search", test=lambda v: _is_real(v) and math.isfinite(v), must_be="a finite number",
        fix="use 1.0 (the default), > 0 to favour longer, < 0 shorter sequences")
    early_stopping: object = param(
        False, "True: stop once num_beams beams have finished; False: also when no running beam can beat them (a "
        "heuristic); \"never\": only when none can at any length", "True, False or \"never\"", "int32_t",
        group="beam search", test=lambda v: any(v is e if isinstance(e, bool) else v == e for e in EARLY_STOPPING),
        must_be="True, False or 'never'", c_values=tuple(enumerate(EARLY_STOPPING)), words=True)
    num_return_sequences: int = param(
        1, "beam search: how many of the best finished beams to return", "1 .. num_beams", "int32_t",
        group="beam search", serve=False, bench=False)     # serve and the bench take the best sequence
    min_new_tokens: int = param(
        0, "no EOS before this many tokens", ">= 0", "int32_t", test=_natural, must_be=_natural_text)
    no_repeat_ngram_size: int = param(
        0, "> 0: no n-gram of this size occurs twice in the output", ">= 0", "int32_t",
        test=_natural, must_be=_natural_text, fix="use 0 to allow repeats")
    candidates: int = param(
        0, "continuations a lookup round verifies in one target run, as a token tree: 0 = auto (chosen from "
        "measured acceptance and run costs; 1 where width does not pay), 1 = one, up to 8",
        f"0 .. {MAX_CANDIDATES}", "int64_t",     # 8 bytes: the C struct stays free of trailing padding
        test=lambda v: _is_int(v) and 0 <= v <= MAX_CANDIDATES, must_be=f"an integer in 0..{MAX_CANDIDATES}",
        fix="use 0 to let the runtime choose, 1 for one continuation a round",
        bench=False)     # the bench sets it per configuration (specdec-bench drafts --draft lookup*4)

    @classmethod
    def of(cls, params: "Params | None" = None, **overrides) -> "Params":
        """`params` (or the defaults) with keyword overrides; an unknown keyword is a SpecdecError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise SpecdecError(f"unknown parameter {unknown[0]!r}", f"use {', '.join(sorted(known))}")
        if params is not None and not isinstance(params, Params):
            raise SpecdecError(f"params must be a specdec.runtime.Params (got {type(params).__name__})")
        return replace(params or cls(), **overrides)

    def checked(self, gamma_max: int) -> "Params":
        """Raise a one-line SpecdecError for any value out of range; returns self."""
        gamma = self.gamma
        if gamma != "auto" and (not _is_int(gamma) or not 0 <= gamma <= gamma_max):
            raise SpecdecError(f"gamma must be an integer in 0..{gamma_max} (got {gamma!r})",
                               f"use 0 <= gamma <= {gamma_max}" + (
                                   f", or re-export with --gamma-max {gamma}" if _is_int(gamma) and gamma > gamma_max
                                   else ""))
        if not isinstance(self.draft, str) and not _is_source(self.draft):
            raise SpecdecError(f"draft must be a name such as 'auto', 'lookup', 'draft' or 'lookup,draft', or a "
                               f"DraftSource (got {type(self.draft).__name__})")
        for declared in PARAMETERS:
            declared.refuse(getattr(self, declared.name))
        if not _is_int(self.num_return_sequences) or not 1 <= self.num_return_sequences <= self.num_beams:
            raise SpecdecError(f"num_return_sequences must be an integer in 1..num_beams ({self.num_beams}) "
                               f"(got {self.num_return_sequences!r})",
                               "ask for at most num_beams sequences, or raise num_beams")
        if self.num_beams > 1 and self.temperature > 0:
            raise SpecdecError(f"beam search is deterministic: temperature {self.temperature} with num_beams "
                               f"{self.num_beams} is not supported", "use temperature=0 with beams, or num_beams=1 "
                               "to sample")
        if self.num_beams > 1 and self.lenience != 1.0:
            raise SpecdecError(f"beam search keeps the target's exact beams: lenience {self.lenience} with num_beams "
                               f"{self.num_beams} is not supported", "leave lenience at 1.0 with beams")
        return self

    def as_dict(self) -> dict:
        """Fields by name; a DraftSource object is given by its name."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not isinstance(out["draft"], str):
            out["draft"] = getattr(out["draft"], "name", type(out["draft"]).__name__)
        return out


PARAMETERS: tuple[Parameter, ...] = tuple(
    Parameter(name=f.name, default=f.default, **f.metadata["declared"]) for f in fields(Params))


def add_flags(parser) -> None:
    """Add the --flag of each declared parameter to an argparse parser, its help from the declaration; beam
    search's go in a group of their own. A flag left out stays None, so `from_flags` gives the Params default; a
    number that is not one is argparse's one-line error, a word (early_stopping) `from_flags`'s."""
    groups = {}
    for declared in PARAMETERS:
        target = parser
        if declared.group:
            if declared.group not in groups:
                groups[declared.group] = parser.add_argument_group(declared.group)
            target = groups[declared.group]
        shown = str(declared.default).lower() if isinstance(declared.default, bool) else declared.default
        parse = None if declared.words else _gamma_flag if declared.name == "gamma" else declared.kind
        target.add_argument(declared.flag, dest=declared.name, type=parse, default=None,
                            metavar=_METAVARS.get(declared.name, declared.kind.__name__.upper()),
                            help=f"{declared.doc} ({declared.values}; default {shown})")


def flag_value(name: str, text: str):
    """A command-line word as the declared parameter's value ("auto" for gamma, true/false/never for
    early_stopping); a word that is not one is a one-line SpecdecError naming the flag."""
    declared = DECLARED[name]
    if name == "early_stopping":
        words = {str(value).lower(): value for value in EARLY_STOPPING}
        if text.lower() not in words:
            raise SpecdecError(f"{declared.flag} must be true, false or never (got {text!r})")
        return words[text.lower()]
    if name == "gamma" and text == "auto":
        return text
    try:
        return declared.kind(text)
    except ValueError:
        word = "'auto' or an integer" if name == "gamma" else {int: "an integer", float: "a number"}[declared.kind]
        raise SpecdecError(f"{declared.flag} must be {word} (got {text!r})") from None


def from_flags(namespace) -> "Params":
    """Params from an argparse namespace made with `add_flags`: the flags that were given (a word that is not a
    value is a one-line SpecdecError naming the flag)."""
    given = {d.name: getattr(namespace, d.name) for d in PARAMETERS if getattr(namespace, d.name, None) is not None}
    return Params.of(**{name: flag_value(name, value) if DECLARED[name].words else value
                        for name, value in given.items()})


def _gamma_flag(text: str):
    """--gamma's word as argparse's type: flag_value's, its refusal argparse's one-line error (the range is checked
    with the export's gamma_max)."""
    import argparse

    try:
        return flag_value("gamma", text)
    except SpecdecError as err:
        raise argparse.ArgumentTypeError(err.problem.removeprefix("--gamma ")) from None


_METAVARS = {"gamma": "G|auto", "draft": "NAME", "early_stopping": "{true,false,never}"}
DECLARED = {declared.name: declared for declared in PARAMETERS}     # name -> its Parameter

"""A manifest entry's keys: how a table of them is declared, how the writer builds an entry from one, and the checks
an untrusted entry's values are held to.

The tables themselves are declared in schema.py, and a model family's own top-level entry in that family's module
(schema.FAMILY_ENTRIES); the validator (validate.py) and a family's module check an entry with `fail`, `obj`,
`array`, `string`, `integer` and `member`, each problem one SpecdecError line naming manifest.json (`where`), the
entry and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import SpecdecError
from .confine import shown

MAX_NAME_CHARS = 128        # tensor names, symbolic axis names
MAX_MODELS = 16             # the models of one export
FIX = "the export is corrupt or was edited by hand; re-run specdec-export, or copy the export again"


@dataclass(frozen=True)
class Key:
    name: str
    type: type | tuple        # the value's JSON type as Python reads it: dict, list, str, int, bool
    required: bool = False    # the runtime refuses a manifest without it
    limits: tuple | None = None   # an integer's (low, high), or a string's allowed values
    nullable: bool = False    # null is a value (its meaning is the entry's)


def table(*keys: Key) -> dict:
    """name -> Key, in the order given."""
    return {key.name: key for key in keys}


def numbers(table: dict, required: bool | None = None) -> dict:
    """name -> (low, high) of the table's integer keys with limits, in declared order; `required`: only those that
    are (True) or are not (False)."""
    return {k.name: k.limits for k in table.values() if k.type is int and k.limits
            and (required is None or k.required == required)}


def required(table: dict) -> tuple:
    """The names of the table's required keys, in declared order."""
    return tuple(k.name for k in table.values() if k.required)


def choices(table: dict, name: str) -> tuple:
    """The allowed values of a string key."""
    return table[name].limits


def build(table: dict, what: str, **values) -> dict:
    """An entry of `table` with `values`, in the order given: a ValueError (the writer's mistake, never the user's)
    for a key the table does not declare, a required key left out, or a value of another JSON type. `what` names the
    entry in the message. The limits are the validator's: an export whose numbers are out of range is written, and
    refused by the runtime with its one-line error."""
    undeclared = [name for name in values if name not in table]
    if undeclared:
        raise ValueError(f"{what}: {undeclared[0]!r} is not a declared manifest key (runtime/loading/schema.py)")
    missing = [name for name in required(table) if name not in values]
    if missing:
        raise ValueError(f"{what}: the required manifest key {missing[0]!r} is missing")
    for name, value in values.items():
        key = table[name]
        if value is None and key.nullable:
            continue
        types = key.type if isinstance(key.type, tuple) else (key.type,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"{what}: {name} is {type(value).__name__}, not "
                             f"{' or '.join(t.__name__ for t in types)}")
    return dict(values)


def fail(where: str, problem: str):
    raise SpecdecError(f"{where} is malformed: {problem}", FIX)


def obj(where, value, what: str) -> dict:
    """`value`, a JSON object."""
    if not isinstance(value, dict):
        fail(where, f"{what} is {_kind(value)}, not a JSON object")
    return value


def array(where, value, what: str, limit: int) -> list:
    """`value`, a JSON list of at most `limit` entries."""
    if not isinstance(value, list):
        fail(where, f"{what} is {_kind(value)}, not a JSON list")
    if len(value) > limit:
        fail(where, f"{what} has {len(value)} entries (at most {limit})")
    return value


def string(where, value, what: str, limit: int = MAX_NAME_CHARS) -> str:
    """`value`, a printable string of 1 to `limit` characters."""
    if not isinstance(value, str):
        fail(where, f"{what} is {_kind(value)}, not a string")
    if not value or len(value) > limit or not value.isprintable():
        problem = "is empty" if not value else f"is longer than {limit} characters" if len(value) > limit else \
            "has characters that are not printable"
        fail(where, f"{what} {shown(value)} {problem}")
    return value


def integer(where, value, what: str, low: int, high: int) -> int:
    """`value`, an integer in low..high (both included)."""
    if type(value) is not int:                        # bool is an int subclass, 8.0 a float: both refused
        fail(where, f"{what} is {_kind(value)}, not an integer")
    if not low <= value <= high:
        fail(where, f"{what} is {shown(value, 40)}, outside {low}..{high}")
    return value


def member(where, entry: dict, key: str, what: str):
    """The value of `key` in the JSON object `entry`, which must have it."""
    if key not in entry:
        fail(where, f"{what} has no {shown(key)}")
    return entry[key]


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)

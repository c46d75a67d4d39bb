"""The command lines of before the subcommands, kept working for one release: `specdec-bench --engine DIR ...` with
no command becomes the command its flags chose (with a one-line note on stderr that says so):

    --engine DIR                          sweep --engine DIR
    --engine DIR --draft L                drafts --engine DIR --draft L
    --engine DIR --num-beams W            beams --engine DIR --num-beams W
    --shapes T:D --num-beams W            beams --shapes T:D --num-beams W
    --shapes T:D                          shapes T:D
    --shapes T:D --dtypes L               dtypes T:D --dtypes L

(`--num-beams 1`, which meant no beam search, is dropped.) The other flags go along as they are; one the command
does not take is the usual one-line error."""

from __future__ import annotations

import shlex
import sys

from specdec.runtime.core.errors import SpecdecError

DEPRECATED = "specdec-bench without a command is deprecated and goes away in the next release"


def _find(argv: list, flag: str) -> tuple[int, str | None] | None:
    """(index, value) of `flag`'s last occurrence, `--flag VALUE` or `--flag=VALUE`; None when absent."""
    found = None
    for i, token in enumerate(argv):
        if token == "--":
            break
        if token == flag:
            found = (i, argv[i + 1] if i + 1 < len(argv) else None)
        elif token.startswith(flag + "="):
            found = (i, token.split("=", 1)[1])
    return found


def _without(argv: list, flag: str) -> list:
    """argv without every `--flag VALUE` and `--flag=VALUE`."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == flag:
            skip = True
        elif not token.startswith(flag + "="):
            out.append(token)
    return out


def command_of(argv: list, commands=()) -> list:
    """The subcommand form of a command line without a command (module docstring); `commands`: the ones to name when
    there is none."""
    beams = _find(argv, "--num-beams")
    if beams and beams[1] == "1":
        argv, beams = _without(argv, "--num-beams"), None
    shapes = _find(argv, "--shapes")
    if _find(argv, "--dtypes"):
        command = "dtypes"
    elif beams:
        return ["beams"] + argv
    elif _find(argv, "--draft"):
        command = "drafts"
    elif shapes:
        command = "shapes"
    elif _find(argv, "--engine"):
        command = "sweep"
    else:
        raise SpecdecError(f"specdec-bench takes a command first: {', '.join(commands)}", "see specdec-bench --help")
    if shapes and shapes[1] is not None and command in ("shapes", "dtypes"):
        argv = [shapes[1]] + _without(argv, "--shapes")
    return [command] + argv


def translated(argv: list, commands=()) -> list:
    """The subcommand form of `argv`, with the note on stderr."""
    new = command_of(argv, commands)
    print(f"note: {DEPRECATED}; running: specdec-bench {shlex.join(new)}", file=sys.stderr)
    return new

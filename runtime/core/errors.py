"""The one exception type users see: a single line naming the problem and the fix, and the command lines' parser and
runner that print it."""

import argparse


class SpecdecError(Exception):
    """Raised for every user-facing failure; str(err) is one line: what went wrong and how to fix it. Line breaks
    in either part (a value quoted from an untrusted file, say) become spaces, so it stays one line."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = _one_line(problem).rstrip(".")
        self.fix = _one_line(fix).rstrip(".") if fix else None
        super().__init__(self.problem + (f"; {self.fix}." if self.fix else "."))


def first_line(err: BaseException, limit: int = 160, empty: str | None = None) -> str:
    """The first line of an exception's message, at most `limit` characters, for quoting it inside a one-line
    message; when the message is empty: `empty`, or the exception's type name if `empty` is None."""
    text = str(err).strip()
    if text:
        return text.splitlines()[0][:limit]
    return type(err).__name__ if empty is None else empty


def _one_line(text) -> str:
    return " ".join(str(text).splitlines())


class OneLineParser(argparse.ArgumentParser):
    """The argument parser of every specdec command: a bad command line raises SpecdecError, which run_cli prints as
    one line, `error: <what>; see <prog> --help.`, with exit status 2, instead of argparse's usage block. Subcommand
    parsers are of this class too (argparse makes them of the parent's class)."""

    def error(self, message):
        raise SpecdecError(message, f"see {self.prog} --help")


def run_cli(main_body, argv=None) -> int:
    """Run a CLI body; a SpecdecError becomes one line on stderr and exit status 2, never a traceback."""
    import sys

    try:
        return int(main_body(argv) or 0)
    except SpecdecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130

"""The one exception type users see: a single line naming the problem and the fix, and the command lines' parser and
runner that print it."""

import argparse
import re


class SpecdecError(Exception):
    """Raised for every user-facing failure; str(err) is one line: what went wrong and how to fix it. Line breaks
    in either part (a value quoted from an untrusted file, say) become spaces, so it stays one line."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = _one_line(problem).rstrip(".")
        self.fix = _one_line(fix).rstrip(".") if fix else None
        super().__init__(self.problem + (f"; {self.fix}." if self.fix else "."))


class SpecdecWarning(UserWarning):
    """Something a user should know that does not stop the work (`warnings.warn` with this category): one line, the
    problem and the fix, as a SpecdecError's; the command lines print it as 'warning: ...'."""

    def __init__(self, problem: str, fix: str | None = None):
        text = _one_line(problem).rstrip(".") + (f"; {_one_line(fix).rstrip('.')}." if fix else ".")
        super().__init__(text)


def _format_warning(message, category, filename, lineno, line=None, _plain=None):
    """warnings' formatter: a SpecdecWarning as 'warning: <text>' on one line, others as Python formats them."""
    if issubclass(category, SpecdecWarning):
        return f"warning: {message}\n"
    return _plain(message, category, filename, lineno, line)


def one_line_warnings() -> None:
    """Print SpecdecWarnings as 'warning: <text>' on one line (the command lines and the C API call this; other
    warnings keep Python's format)."""
    import functools
    import warnings

    if not (isinstance(warnings.formatwarning, functools.partial)
            and warnings.formatwarning.func is _format_warning):
        warnings.formatwarning = functools.partial(_format_warning, _plain=warnings.formatwarning)


class RunFailed(SpecdecError):
    """ONNX Runtime failed while running a graph that loaded (a corrupt but consistent export, a device fault): the
    C API's SPECDEC_E_RUNTIME rather than a bad argument."""


def first_line(err: BaseException, limit: int = 160, empty: str | None = None) -> str:
    """The first line of an exception's message, at most `limit` characters, for quoting it inside a one-line
    message; when the message is empty: `empty`, or the exception's type name if `empty` is None."""
    text = str(err).strip()
    if text:
        return text.splitlines()[0][:limit]
    return type(err).__name__ if empty is None else empty


def _one_line(text) -> str:
    return " ".join(str(text).splitlines())


# Markdown and reStructuredText markup a module docstring may carry: a role (:func:`x`), ``literal``, `code`,
# **bold**; plain_help keeps the text inside
_MARKUP = re.compile(r":[a-z]+:`~?([^`]*)`|``([^`]*)``|`([^`]*)`|\*\*([^*]+)\*\*")


def plain_help(text):
    """`text` (a docstring used as a command's --help) without its markup, the text inside kept: a terminal shows
    backticks and asterisks as they are. None stays None."""
    if text is None:
        return None
    return _MARKUP.sub(lambda m: next(g for g in m.groups() if g is not None), text)


class OneLineParser(argparse.ArgumentParser):
    """The argument parser of every specdec command: a bad command line raises SpecdecError, which run_cli prints as
    one line, `error: <what>; see <prog> --help.`, with exit status 2, instead of argparse's usage block. Subcommand
    parsers are of this class too (argparse makes them of the parent's class). Its description and epilog are shown
    without markup (plain_help), so a module docstring can be both."""

    def __init__(self, *args, renamed: dict | None = None, **kwargs):
        """renamed: {earlier flag: its current name}, accepted for one release and shown nowhere (not in --help)."""
        for key in ("description", "epilog"):
            kwargs[key] = plain_help(kwargs.get(key))
        super().__init__(*args, **kwargs)
        self.renamed = dict(renamed or {})

    def parse_known_args(self, args=None, namespace=None):
        if self.renamed:
            import sys

            args = self.current_names(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def current_names(self, argv) -> list:
        """argv with each earlier flag name (also as --flag=value) replaced by its current name."""
        def current(arg: str) -> str:
            flag, eq, value = arg.partition("=")
            return self.renamed[flag] + eq + value if flag in self.renamed else arg

        return [current(str(a)) for a in argv]

    def error(self, message):
        raise SpecdecError(message, f"see {self.prog} --help")


def run_cli(main_body, argv=None) -> int:
    """Run a CLI body; a SpecdecError becomes one line on stderr and exit status 2, never a traceback."""
    import sys

    one_line_warnings()
    try:
        return int(main_body(argv) or 0)
    except SpecdecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130

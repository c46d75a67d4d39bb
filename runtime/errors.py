"""The one exception type users see: a single line naming the problem and the fix."""


class SpecdecError(Exception):
    """Raised for every user-facing failure; str(err) is one line: what went wrong and how to fix it."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem.rstrip(".")
        self.fix = fix.rstrip(".") if fix else None
        super().__init__(self.problem + (f"; {self.fix}." if self.fix else "."))


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
